#!/usr/bin/env bash
# one device call, branching on the card (temporary, session 34)
nvidia-smi -L
if nvidia-smi -L | grep -q H200; then
  bash benchmarks/tilelang_setup.sh unpack
  PYTHONPATH=.peers/site:. timeout 290 python benchmarks/run.py --only gemm --impls "persistent panel16,torch,triton,tilelang 128x256" --rounds 7 --json $OUT/h200-gemm.json 2>&1 | tail -40
  PYTHONPATH=.peers/site:. timeout 220 python benchmarks/run.py --only gemm_fp8 --impls "128x256x128 wgmma tma ws,torch,triton,tilelang 128x256" --rounds 7 --json $OUT/h200-fp8.json 2>&1 | tail -25
else
  PYTHONPATH=. timeout 200 python -m pytest -m gpu -q tests/gpu/test_fp8.py -k e5m2 2>&1 | tail -5
fi

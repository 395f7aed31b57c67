#!/usr/bin/env bash
# one device call, branching on the card (temporary, session 34)
nvidia-smi -L
if nvidia-smi -L | grep -q H200; then
  bash benchmarks/tilelang_setup.sh unpack
  PYTHONPATH=.peers/site:. timeout 290 python benchmarks/run.py --only gemm --impls "persistent panel16,torch,triton,tilelang 128x256" --rounds 7 --json $OUT/h200-gemm.json 2>&1 | tail -40
  PYTHONPATH=.peers/site:. timeout 220 python benchmarks/run.py --only gemm_fp8 --impls "128x256x128 wgmma tma ws,torch,triton,tilelang 128x256" --rounds 7 --json $OUT/h200-fp8.json 2>&1 | tail -25
else
  PYTHONPATH=. timeout 170 python benchmarks/hopper_variants.py --sizes "" --attention --attention-shapes 8x16x2048x128,2x16x8192x128 --dtype bfloat16 --attention-only "128x128 ws persistent,128x128 ws persistent one chain" --json $OUT/h100-chains-d128-bf16.json 2>&1 | grep -v "^ *$" | tail -14
  PYTHONPATH=. timeout 120 python benchmarks/hopper_variants.py --sizes "" --attention --attention-shapes 8x16x2048x64,2x16x8192x64 --dtype float16 --attention-only "192x128 ws persistent,192x128 ws persistent one chain" --json $OUT/h100-chains-d64-fp16.json 2>&1 | grep -v "^ *$" | tail -16
  PYTHONPATH=. timeout 200 python -m pytest -m gpu -q -x 2>&1 | tail -4
fi

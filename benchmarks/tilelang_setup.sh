#!/usr/bin/env bash
# Install TileLang 0.1.15 (a benchmark peer) on the GPU machine from wheels carried in two calls.
# Here, once:   bash benchmarks/tilelang_setup.sh download
# Device call 1 (carry .peers/tl):  bash benchmarks/tilelang_setup.sh install-tl
# Device call 2 (carry .peers/z3, within 30 s): bash benchmarks/tilelang_setup.sh install-z3; then
#   PYTHONPATH=.peers/site:. python benchmarks/run.py ...
set -euo pipefail
cd "$(dirname "$0")/.."
PLAT="--python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
--platform manylinux2014_x86_64"
case "${1:-}" in
  download)
    python3 -m pip download --no-deps --only-binary=:all: $PLAT -d .peers/tl tilelang==0.1.15 apache-tvm-ffi==0.1.12 \
      torch-c-dlpack-ext==0.1.5
    python3 -m pip download --no-deps --only-binary=:all: $PLAT -d .peers/z3 z3-solver==4.15.4.0 ;;
  install-tl)
    python3 -m pip install -q --no-index --no-deps --no-compile --target .peers/site .peers/tl/*.whl ;;
  install-z3)
    python3 -m pip install -q --no-index --no-deps --no-compile --target .peers/site .peers/z3/*.whl ;;
  *) echo "usage: $0 download|install-tl|install-z3" >&2; exit 2 ;;
esac

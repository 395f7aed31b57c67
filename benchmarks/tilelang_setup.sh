#!/usr/bin/env bash
# Install TileLang 0.1.15 (a benchmark peer) on the GPU machine, which reaches no registry.
# Here, once:   bash benchmarks/tilelang_setup.sh download; bash benchmarks/tilelang_setup.sh pack
# One device call (carry .peers/site.tar.xz, 45 MB: the wheels unpacked and packed with xz -9, under the 64 MiB a
#   call carries): bash benchmarks/tilelang_setup.sh unpack; PYTHONPATH=.peers/site:. python benchmarks/run.py ...
# Or from the wheels in two calls on one warm machine (the two folders together are over 64 MiB):
#   carry .peers/tl: install-tl; then within 30 s carry .peers/z3: install-z3.
# The packed folder is the four wheels unzipped, as pip's --target lays them out (z3's unused command-line
# executable stays in its .data folder).
set -euo pipefail
cd "$(dirname "$0")/.."
PLAT="--python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
--platform manylinux2014_x86_64"
case "${1:-}" in
  download)
    python3 -m pip download --no-deps --only-binary=:all: $PLAT -d .peers/tl tilelang==0.1.15 apache-tvm-ffi==0.1.12 \
      torch-c-dlpack-ext==0.1.5
    python3 -m pip download --no-deps --only-binary=:all: $PLAT -d .peers/z3 z3-solver==4.15.4.0 ;;
  pack)
    rm -rf .peers/site && mkdir -p .peers/site
    for w in .peers/tl/*.whl .peers/z3/*.whl; do python3 -m zipfile -e "$w" .peers/site; done
    tar -C .peers -cf - site | xz -T0 -9 > .peers/site.tar.xz.part && mv .peers/site.tar.xz.part .peers/site.tar.xz ;;
  unpack)
    rm -rf .peers/site && tar -C .peers -xJf .peers/site.tar.xz ;;
  install-tl)
    python3 -m pip install -q --no-index --no-deps --no-compile --target .peers/site .peers/tl/*.whl ;;
  install-z3)
    python3 -m pip install -q --no-index --no-deps --no-compile --target .peers/site .peers/z3/*.whl ;;
  *) echo "usage: $0 download|pack|unpack|install-tl|install-z3" >&2; exit 2 ;;
esac

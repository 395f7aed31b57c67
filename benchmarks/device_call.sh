#!/usr/bin/env bash
# One call on the device machine, from the repository root, carrying .peers/site.tar.xz (TileLang, packed by
# benchmarks/tilelang_setup.sh) where the mode times the suite:
#   LIMIT=SECONDS bash benchmarks/device_call.sh MODE, MODE one of first|suite|h200suite|h200lean|table|small|
#   gemmil|h200gemm|attnil|tests|ab:
# first:    on an H200 the suite's GEMM case interleaved (5 rounds), then the A/B below; on an H100 `pytest -m gpu`
#           and the A/B.
# suite:    on an H200 the suite's GEMM (5 rounds) and attention (3 rounds) cases interleaved, the whole
#           table (~320 s), then the A/B; on an H100 the A/B alone.
# table:    the suite's GEMM (5 rounds) and attention (3 rounds) cases interleaved on whatever card came (~400 s).
# h200suite: the table on an H200, then `pytest -m gpu` where 160 s or more are left (~150 s of LIMIT=590); nothing
#           timed elsewhere (a start that finds an H100 costs ~30-95 s).
# h200lean: as h200suite, its GEMM case cut to the rows the targets read (tilec's persistent panel16 and
#           stream-K kernels, cuBLAS, Triton, TileLang): for an H200 that comes with little device time left.
# small:    on an H200 the GEMM case against cuBLAS and Triton only, else `pytest -m gpu`.
# gemmil / attnil: the suite's GEMM / attention case interleaved; h200gemm: gemmil on an H200, nothing elsewhere.
# ab:       this session's variants against the suite's kernel (hopper_variants.py --interleave, 3 rounds; $AB
#           overrides the labels).
# LIMIT (default 570) is the seconds the call may take; each step is cut to what is left. Results go to $OUT.
set -u
export PYTHONPATH=.peers/site:.
T0=$(date +%s)
LIMIT=${LIMIT:-570}
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
GPU=$(nvidia-smi --query-gpu=name,uuid,power.limit,clocks.max.sm --format=csv,noheader)
echo "# $GPU"
H200=0; [[ "$GPU" == *H200* ]] && H200=1
AB=${AB:-"tma ws persistent panel16,tma ws persistent panel16 stream-k,\
tma ws persistent panel16 stream-k own buffers"}
ab() {  # dtypes: $1 (default both), each given an equal share of what is left
  local dts=(${1:-float16 bfloat16}) n=0
  for dt in "${dts[@]}"; do
    n=$((n + 1)); share=$(( ($(left) - 5) / (${#dts[@]} - n + 1) ))
    [ $share -lt 20 ] && break
    timeout $share python3 benchmarks/hopper_variants.py --sizes 4096,8192 --interleave --rounds 3 --dtype $dt \
      --only "$AB" --json $OUT/ab-$dt.json 2>&1 | grep -v "^\s*$" | tail -25
  done
}
gpu_tests() { timeout $(( $(left) - 5 )) python3 -m pytest -m gpu -q -p no:cacheprovider tests 2>&1 | tail -15; }
tests_if_time() { if [ "$(left)" -ge 160 ]; then gpu_tests; else echo "# $(left) s left: no pytest -m gpu"; fi; }
suite() {  # $1: at most this many seconds, $2: case, $3: rounds, then run.py's other arguments
  local cap=$1 case=$2 rounds=$3 t=$(( $(left) - 5 )); shift 3
  timeout $(( cap < t ? cap : t )) python3 benchmarks/run.py --only $case --interleave --rounds $rounds \
    --json $OUT/$case-interleaved.json "$@" 2>&1 | tail -45
}
table() { suite 280 gemm 5 "$@"; suite 280 attention 3; }  # the table, ~400 s
LEAN="persistent panel16,torch,triton,tilelang"  # the GEMM rows of the targets (the best tilec rows there)
if [ -f .peers/site.tar.xz ]; then bash benchmarks/tilelang_setup.sh unpack
else echo "# .peers/site.tar.xz was not carried: no TileLang column (tilelang_setup.sh download; pack)"; fi
case "${1:-}" in
  first) if [ $H200 = 1 ]; then suite 260 gemm 5; ab; else gpu_tests; ab; fi ;;
  suite) if [ $H200 = 1 ]; then suite 260 gemm 5; suite 260 attention 3; fi; ab ;;
  h200suite) if [ $H200 = 1 ]; then table; tests_if_time; else echo "# not an H200"; fi ;;
  h200lean) if [ $H200 = 1 ]; then table --impls "$LEAN"; tests_if_time; else echo "# not an H200"; fi ;;
  table) table ;;
  small) if [ $H200 = 1 ]; then suite 600 gemm 5 --impls "persistent panel16,torch,triton"; else gpu_tests; fi ;;
  gemmil) suite 600 gemm 5 ;;
  h200gemm) if [ $H200 = 1 ]; then suite 600 gemm 5; else echo "# not an H200: nothing timed"; fi ;;
  attnil) suite 600 attention 3 ;;
  tests) gpu_tests ;;
  ab) ab ;;
  *) echo "usage: LIMIT=SECONDS $0 first|suite|h200suite|h200lean|table|small|gemmil|h200gemm|attnil|tests|ab" >&2
     exit 2 ;;
esac
echo "# wall $(( $(date +%s) - T0 )) s"

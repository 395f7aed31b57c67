#!/usr/bin/env bash
# recommend_eval.py: a misspelt --only is a KeyError traceback; a misspelt --shapes part, or --replay of a JSON with
# no measurements (the autotune report), runs nothing and exits 0 without a word.
cd "$(dirname "$0")/.." || exit 1
bad=0
check() {  # args...: must exit 2 with an argparse error, no traceback
  out=$(PYTHONPATH=. timeout 120 python3 benchmarks/recommend_eval.py "$@" 2>&1); rc=$?
  if [ $rc != 2 ] || grep -q Traceback <<<"$out"; then echo "rc=$rc for $*: $(tail -1 <<<"$out")"; bad=1; fi
}
check --only gemmm --model-only
check --model-only --quick --shapes "gemm 8912"
check --replay benchmarks/results/2026-12-02-h200-autotune.json
if [ $bad = 1 ]; then echo "BUG REPRODUCED"; else echo "no failure"; fi

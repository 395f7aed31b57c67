#!/usr/bin/env bash
# hopper_variants.py --only / --attention-only with a misspelt label: the variant is dropped without a word (the run
# goes on with torch and Triton only); --attention-only without --attention is ignored. Each must be a usage error
# (exit 2) before anything is imported (here, without torch, the old code fails on `import torch` instead).
cd "$(dirname "$0")/.." || exit 1
bad=0
for args in "--only|tma ws persistant" "--attention|--attention-only|128x128 ws persistant" "--attention-only|128x128 ws persistent"; do
  IFS='|' read -r -a a <<<"$args"
  out=$(PYTHONPATH=. timeout 60 python3 benchmarks/hopper_variants.py "${a[@]}" 2>&1); rc=$?
  if [ $rc != 2 ]; then echo "rc=$rc for ${a[*]}: $(tail -1 <<<"$out")"; bad=1; fi
done
if [ $bad = 1 ]; then echo "BUG REPRODUCED"; else echo "no failure"; fi

#!/usr/bin/env bash
# sweep.py --help (or a misspelt part) was globals()["--help"]() after importing torch and Triton: a traceback.
cd "$(dirname "$0")/.." || exit 1
out=$(PYTHONPATH=. python3 benchmarks/sweep.py --help 2>&1)
if grep -q "^usage: sweep.py" <<<"$out"; then echo "no failure"; else echo "BUG REPRODUCED: $(tail -1 <<<"$out")"; fi

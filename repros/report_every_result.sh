#!/usr/bin/env bash
# report.py on every JSON under benchmarks/results/ and on --help: a traceback is the bug (a file without benchmark
# rows must be a one-line error saying what it is, exit 2).
cd "$(dirname "$0")/.." || exit 1
bad=0
for f in --help benchmarks/results/*.json; do
  err=$(PYTHONPATH=. python3 benchmarks/report.py "$f" 2>&1 >/dev/null)
  if grep -q Traceback <<<"$err"; then echo "traceback: $f: $(tail -1 <<<"$err")"; bad=1; fi
done
if [ $bad = 1 ]; then echo "BUG REPRODUCED"; else echo "no failure"; fi

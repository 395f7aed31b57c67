"""run.py --impls with a misspelt string: every row it meant is dropped and the run ends without a word (exit 0).
Runs the harness's main on a stand-in case (no GPU, no torch)."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import run  # noqa: E402

run.environment = lambda: {}
run._peers = lambda: ({}, [])
run.CASES.clear()
run.CASES["fake"] = lambda rows, quick, peers: run._measure(
    rows, "k", "s", {"torch": lambda: 1, "tilec 128x256x64 persistent": lambda: 1}, [()], None, 0, 0, True)
run._bench = lambda fn, quick, warming=False: 1.0
try:
    run.main(["--only", "fake", "--impls", "persistant"])
except SystemExit as e:
    print("no failure" if e.code == 2 else f"exit {e.code}")
else:
    print("BUG REPRODUCED: --impls 'persistant' matched nothing and the run ended normally")

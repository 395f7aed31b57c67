"""`python examples/07_mla_decode.py 1 16 3` (the documented [batch heads seqlen] arguments) fails the example's own
assertion: block_H=64 must divide the 16 query heads of a KV head."""
import os
import subprocess
import sys
from pathlib import Path

root = Path(__file__).resolve().parent.parent
env = dict(os.environ, TILEC_TARGET="cpu", PYTHONPATH=str(root))
res = subprocess.run([sys.executable, str(root / "examples/07_mla_decode.py"), "1", "16", "3"], capture_output=True,
                     text=True, env=env, timeout=300)
print("BUG REPRODUCED: " + res.stderr.strip().splitlines()[-1] if res.returncode else "no failure: " + res.stdout.splitlines()[0])

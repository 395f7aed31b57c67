"""Digests of the code tilec generates for the benchmark suite's kernels, to check that a change leaves it alone.

    python benchmarks/codegen_digest.py --json before.json            # on the old tree
    python benchmarks/codegen_digest.py --against before.json         # on the new one: exit 1 and list what differs

Every tilec kernel the cases of ``run.py`` build (``--cases``, default all but ``host``) is built for ``--target``
(default ``cuda:sm_90a``) through ``run.py`` itself, with torch stood in for (no GPU, no torch needed): nothing is
compiled or run. A kernel's digest is sha256 of its source and its report, less the report's stage timings and with
the checkout's path left out (of its error, where the target refuses it), keyed by its case, its place in the case and
its name and tensor shapes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


class _Stand:
    """Whatever the cases ask of torch or of a tensor: another stand-in."""

    def __getattr__(self, name: str) -> _Stand:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Stand()

    def __call__(self, *args: Any, **kwargs: Any) -> _Stand:
        return _Stand()

    def __getitem__(self, key: Any) -> _Stand:
        return _Stand()

    def __iter__(self) -> Any:
        return iter(())


for _op in ("add", "sub", "mul", "truediv", "matmul", "pow", "radd", "rsub", "rmul", "rtruediv", "rmatmul"):
    setattr(_Stand, f"__{_op}__", lambda self, *args: _Stand())


class _StandModule(types.ModuleType):
    def __getattr__(self, name: str) -> _Stand:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Stand()


def digest(source: str, report: str) -> str:
    """sha256 (16 hex digits) of a kernel's source and report, without the report's timings and the checkout path."""
    kept = "\n".join(line for line in report.split("\n") if not line.rstrip().endswith(" ms"))
    return hashlib.sha256((source + "\n" + kept).replace(str(ROOT), "<root>").encode()).hexdigest()[:16]


def digests(cases: list[str], target: str) -> dict[str, str]:
    """The digest of every tilec kernel the given cases of ``run.py`` build, by key."""
    saved = {name: sys.modules.get(name) for name in ("torch", "torch.nn", "torch.nn.functional",
                                                      "torch.nn.attention")}
    sys.modules.update({name: _StandModule(name) for name in saved})
    sys.path[:0] = [str(ROOT / "benchmarks")]
    try:
        import run

        import tilec
        from tilec.errors import TilecError

        out: dict[str, str] = {}
        place = {"case": "", "n": 0}
        real = tilec.JITKernel

        def retargeted(fn: Any, tgt: Any, *args: Any, **kwargs: Any) -> Any:
            return real(fn, target if tgt == "cuda" else tgt, *args, **kwargs)

        def build(make: Any) -> tuple[Any, dict]:
            kernel = make()
            shapes = ",".join("x".join(map(str, p.shape)) for p in kernel.prim_func.params if hasattr(p, "shape"))
            key = f"{place['case']} {place['n']:03d} {kernel.prim_func.name} ({shapes})"
            place["n"] += 1
            try:
                out[key] = digest(kernel.get_kernel_source(), str(kernel.report()))
            except TilecError as e:  # a kernel the target refuses: its error is what is compared
                out[key] = digest(f"{type(e).__name__}: {e}", "")
            return kernel, {}

        patched = {"tilec_kernel": build, "_measure": lambda *a, **k: None, "input_sets": lambda make: [make()]}
        before = {name: getattr(run, name) for name in patched}
        tilec.JITKernel = retargeted
        for name, fn in patched.items():
            setattr(run, name, fn)
        try:
            for case in cases:
                place["case"], place["n"] = case, 0
                run.CASES[case]([], False, {})
        finally:
            tilec.JITKernel = real
            for name, fn in before.items():
                setattr(run, name, fn)
        return out
    finally:
        del sys.path[0]
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def compare(old: dict[str, str], new: dict[str, str]) -> list[str]:
    """One line for each key whose digest differs, or that only one side has."""
    return [f"{key}: {'changed' if key in old and key in new else 'only before' if key in old else 'only now'}"
            for key in sorted(old.keys() | new.keys()) if old.get(key) != new.get(key)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="gemm,gemm_tf32,gemm_fp8,attention,mla,softmax,norms",
                    help="comma-separated cases of run.py")
    ap.add_argument("--target", default="cuda:sm_90a", help="what the kernels are built for (default cuda:sm_90a)")
    ap.add_argument("--json", default="", help="write the digests here")
    ap.add_argument("--against", default="", help="compare with digests written before; exit 1 where they differ")
    args = ap.parse_args(argv)
    cases = [c for c in args.cases.split(",") if c]
    sys.path[:0] = [str(ROOT / "benchmarks")]
    import run

    unknown = [c for c in cases if c not in run.CASES or c == "host"]
    if unknown or not cases:
        ap.error(f"--cases: unknown case(s) {', '.join(unknown) or repr(args.cases)}; the cases are "
                 f"{', '.join(c for c in run.CASES if c != 'host')}")
    new = digests(cases, args.target)
    print(f"{len(new)} kernels of {', '.join(cases)} for {args.target}")
    if args.json:
        Path(args.json).write_text(json.dumps(new, indent=0, sort_keys=True) + "\n")
    if args.against:
        differ = compare(json.loads(Path(args.against).read_text()), new)
        print("\n".join(differ) if differ else f"all {len(new)} the same as in {args.against}")
        return 1 if differ else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())

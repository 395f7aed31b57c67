"""``tilec.recommend``: rank the configurations of a kernel factory by the static cost model.

Every combination of the knobs' candidate values (:mod:`tilec.tune.knobs`) is built (the factory called, the
kernel parsed) and costed on the CPU (:func:`tilec.passes.cost_model.estimate_kernel`). Those that cannot run
-- a build error, a layout conflict, a tile that does not divide into the tensor-core atoms, shared memory or
registers over the limit -- are kept apart with the reason. The others are ranked by estimated time, ties broken
by less shared memory, fewer registers, then the configuration's values in knob order (numbers by value), so the
ranking is deterministic.

>>> rec = tilec.recommend(matmul, 4096, 4096, 4096, target="cuda:sm_90a", top_k=8)   # doctest: +SKIP
>>> print(rec)                  # the table
>>> rec[0]                      # the best config: {'block_M': 128, ...}
>>> @tilec.autotune(configs=rec)  # its top_k configs
"""

from __future__ import annotations

import html
import math
import numbers
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tilec.errors import TilecValueError
from tilec.target import Target, parse_target
from tilec.tune.knobs import candidate_configs, knob_names


@dataclass
class Candidate:
    """One configuration and its estimate (``cost``), or why it cannot run (``reason``)."""

    config: dict[str, Any]
    cost: Any = None
    reason: str | None = None

    @property
    def time_us(self) -> float:
        return self.cost.time_s * 1e6 if self.cost is not None else float("inf")

    def row(self) -> dict[str, Any]:
        """The table row: the config and the estimate's figures, as plain values."""
        c = self.cost
        out: dict[str, Any] = dict(self.config)
        if c is None:
            return {**out, "rejected": self.reason}
        blocks = [str(v) for k, v in self.config.items() if k.startswith("block_")]
        out.update({
            "tile": "x".join(blocks) or "-", "AI": c.arithmetic_intensity, "dram_MB": c.bytes["dram"] / 1e6,
            "l2_MB": c.bytes["l2"] / 1e6, "smem_MB": (c.bytes["smem_read"] + c.bytes["smem_write"]) / 1e6,
            "smem_KB": c.smem_per_block / 1024, "regs": c.regs_per_thread, "blocks/SM": c.blocks_per_sm,
            "occupancy": c.occupancy, "waves": c.waves, "est_us": c.time_s * 1e6, "TFLOP/s": c.tflops,
            "util": c.utilization, "bound": c.bound,
        })
        if self.reason:
            out["rejected"] = self.reason
        return out


_FORMATS = {"AI": "{:.0f}", "dram_MB": "{:.1f}", "l2_MB": "{:.1f}", "smem_MB": "{:.0f}", "smem_KB": "{:.0f}",
            "occupancy": "{:.0%}", "waves": "{:.2f}", "est_us": "{:.1f}", "TFLOP/s": "{:.0f}", "util": "{:.0%}"}


def _fmt(key: str, v: Any) -> str:
    if isinstance(v, float) and key in _FORMATS:
        return _FORMATS[key].format(v)
    return str(v)


class Recommendation(Sequence):
    """The ranked configurations of a kernel. Iterates (and indexes) as the config dicts of the top rows.

    Attributes
    ----------
    rows : list of Candidate
        The ``top_k`` best (all of them when ``top_k`` is None), best first.
    ranked : list of Candidate
        Every candidate that can run, best first.
    rejected : list of Candidate
        The candidates that cannot run, with their reasons.
    knobs : list of str
        The tuned parameters.
    """

    def __init__(self, name: str, target: Target, device: Any, knobs: list[str], ranked: list[Candidate],
                 rejected: list[Candidate], top_k: int | None = None) -> None:
        self.name, self.target, self.device, self.knobs = name, target, device, knobs
        self.ranked, self.rejected, self.top_k = ranked, rejected, top_k
        self.rows = ranked if top_k is None else ranked[:top_k]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [dict(c.config) for c in self.rows[i]]
        return dict(self.rows[i].config)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (dict(c.config) for c in self.rows)

    @property
    def best(self) -> Candidate:
        if not self.rows:
            raise TilecValueError(f"no configuration of {self.name} can run: {self._reasons()}")
        return self.rows[0]

    def top(self, k: int) -> Recommendation:
        """The same ranking with only the ``k`` best rows."""
        return Recommendation(self.name, self.target, self.device, self.knobs, self.ranked, self.rejected, k)

    def configs(self) -> list[dict[str, Any]]:
        return list(self)

    def _reasons(self, n: int = 3) -> str:
        return "; ".join(f"{c.config}: {c.reason}" for c in self.rejected[:n]) or "no candidates"

    # ------------------------------------------------------------------------------------------------ tables

    def _columns(self) -> list[str]:
        return ["rank", *self.knobs, "tile", "AI", "dram_MB", "l2_MB", "smem_MB", "smem_KB", "regs", "blocks/SM",
                "occupancy", "waves", "est_us", "TFLOP/s", "util", "bound"]

    def _cells(self) -> list[list[str]]:
        cols = self._columns()
        out = []
        for i, c in enumerate(self.rows, 1):
            row = {"rank": i, **c.row()}
            out.append([_fmt(k, row.get(k, "")) for k in cols])
        return out

    def table(self, rejected: int = 5) -> str:
        """The ranking as text, with the first ``rejected`` rejected candidates and their reasons."""
        cols, cells = self._columns(), self._cells()
        widths = [max([len(h), *(len(r[j]) for r in cells)]) for j, h in enumerate(cols)]  # no rows: headers
        dev = getattr(self.device, "name", self.device)
        lines = [f"recommendation for {self.name} on {dev} ({self.target}): {len(self.ranked)} of "
                 f"{len(self.ranked) + len(self.rejected)} configurations can run"]
        lines.append("  ".join(h.rjust(w) for h, w in zip(cols, widths)))
        lines += ["  ".join(v.rjust(w) for v, w in zip(r, widths)) for r in cells]
        if self.rejected and rejected:
            lines.append(f"rejected ({len(self.rejected)}):")
            lines += [f"  {c.config}: {c.reason}" for c in self.rejected[:rejected]]
            if len(self.rejected) > rejected:
                lines.append(f"  ... and {len(self.rejected) - rejected} more (.rejected)")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        best = self.rows[0].config if self.rows else None
        return f"<Recommendation {self.name}: {len(self.rows)} rows, best {best}>"

    def _repr_html_(self) -> str:
        cols = self._columns()
        head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in r) + "</tr>" for r in self._cells())
        dev = html.escape(str(getattr(self.device, "name", self.device)))
        return (f"<p>recommendation for <code>{html.escape(self.name)}</code> on {dev}; {len(self.rejected)} "
                f"rejected</p><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")

    def as_dicts(self) -> list[dict[str, Any]]:
        """Every candidate's row (ranked first, then the rejected), as plain dicts (for JSON)."""
        return [c.row() for c in self.ranked] + [c.row() for c in self.rejected]


# -------------------------------------------------------------------------------------------------- build


def cost_target(jit_fn: Any, target: Any = None) -> Target:
    """The target the model costs for: ``target``, else the function's; the CPU interpreter and a CUDA target with
    no GPU to say its architecture get ``cuda:sm_90a`` (the H200 model), a ``simt:<arch>`` target its ``<arch>``."""
    from tilec.arch import target_arch

    t = parse_target(target if target is not None else getattr(jit_fn, "target", None))
    arch = target_arch(t)
    return Target("hip" if arch.startswith("gfx") else "cuda", arch)


def build_func(jit_fn: Any, args: tuple, kwargs: dict) -> Any:
    """The PrimFunc of a ``@tilec.jit`` function for these arguments (lazy: the factory's; eager: parsed)."""
    from tilec.ir.kernel import PrimFunc

    if getattr(jit_fn, "eager", False):
        from tilec.frontend.entry import parse_eager

        return parse_eager(jit_fn.fn, args, kwargs)[0]
    func = jit_fn.fn(*args, **kwargs)
    if not isinstance(func, PrimFunc):
        raise TilecValueError(f"{jit_fn.fn.__name__} returned {type(func).__name__}, not a @T.prim_func kernel")
    return func


def _evaluate(jit_fn: Any, args: tuple, fixed: dict, config: dict, target: Target, device: Any,
              sizes: dict | None) -> Candidate:
    from tilec.passes.cost_model import estimate_kernel

    try:
        func = build_func(jit_fn, args, {**fixed, **config})
        cost = estimate_kernel(func, target, device, sizes, _pass_configs(jit_fn))
    except Exception as e:  # noqa: BLE001 - any failure to build or cost the candidate rejects it, with the reason
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return Candidate(config, None, f"{type(e).__name__}: {first}"[:300])
    return Candidate(config, cost, cost.rejected)


def _pass_configs(jit_fn: Any) -> dict:
    """The pass configs the function's kernels are built with (the defaults, then its own)."""
    from tilec.runtime.jit import default_pass_configs

    return {**default_pass_configs(), **(getattr(jit_fn, "pass_configs", None) or {})}


def _value_key(v: Any) -> tuple:
    """A total order on knob values: numbers by value (NaN last), then strings, tuples element by element, and
    anything else by type name and ``repr`` -- so that 16 comes before 128, whatever the space's order."""
    if isinstance(v, numbers.Real):
        f = float(v)
        return (0, math.isnan(f), 0.0 if math.isnan(f) else f, type(v).__name__)
    if isinstance(v, str):
        return (1, v)
    if isinstance(v, tuple):
        return (2, tuple(_value_key(x) for x in v))
    return (3, type(v).__name__, repr(v))


def _rank_key(knobs: list[str]) -> Any:
    return lambda c: (c.cost.time_s, c.cost.smem_per_block, c.cost.regs_per_thread,
                      tuple(_value_key(c.config[k]) for k in knobs))


def unwrap(fn: Any) -> Any:
    """The ``@tilec.jit`` function behind ``fn`` (an autotuned function's), or ``fn`` wrapped by ``tilec.jit``."""
    from tilec.runtime.jit import JITFunction, jit

    inner = getattr(fn, "jit_fn", fn)
    return inner if isinstance(inner, JITFunction) else jit(inner)


def recommend(fn: Any, *args: Any, target: Any = None, top_k: int | None = None, space: dict | None = None,
              device: Any = None, knobs: Sequence[str] | None = None, sizes: dict | None = None,
              **fixed: Any) -> Recommendation:
    """Rank the configurations of a kernel factory with the static cost model (no GPU needed).

    Parameters
    ----------
    fn : JITFunction
        A ``@tilec.jit`` function (lazy factory, or eager kernel with example arrays in ``args``).
    *args, **fixed
        The arguments of the call; keyword arguments pin knobs (they are not tuned).
    target : str, optional
        What to cost for (default: the function's target; see :func:`cost_target`).
    top_k : int, optional
        How many rows the recommendation iterates over (default: all that can run).
    space : dict, optional
        Candidate values per knob, e.g. ``{"block_M": [64, 128], "num_stages": [2, 3]}``.
    device : str or DeviceModel, optional
        The device model (default: by the target's architecture, see :func:`tilec.arch.device_model`).
    knobs : list of str, optional
        Tune exactly these parameters (default: see :func:`tilec.tune.knobs.knob_names`).
    sizes : dict, optional
        Values of ``T.dynamic`` sizes, for kernels with symbolic shapes.

    Returns
    -------
    Recommendation
    """
    from tilec.arch import device_model

    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise TilecValueError(f"recommend: top_k is the number of rows to keep, an int >= 1 (or None: all), got "
                              f"{top_k!r}")
    bad = [(space is not None and not isinstance(space, dict), "space is a dict {knob name: list of values}", space),
           (knobs is not None and (isinstance(knobs, str) or not isinstance(knobs, Sequence)
                                   or not all(isinstance(k, str) for k in knobs)),
            "knobs is a list of parameter names", knobs),
           (sizes is not None and not isinstance(sizes, dict), "sizes is a dict {T.dynamic name: value}", sizes)]
    for failed, what, value in bad:
        if failed:
            raise TilecValueError(f"recommend: {what}, got {value!r}")
    jf = unwrap(fn)
    t = cost_target(jf, target)
    names = knob_names(jf.fn, args, fixed, space, knobs)
    if not names:
        raise TilecValueError(f"{jf.fn.__name__}: nothing to tune -- no parameter defaults to T.auto or is one of "
                              "block_M/block_N/block_K/num_stages/threads, or the call pins them all")
    dev = device_model(t, device)
    cands = [_evaluate(jf, args, fixed, cfg, t, dev, sizes) for cfg in candidate_configs(names, space)]
    ok = sorted((c for c in cands if c.reason is None), key=_rank_key(names))
    bad = [c for c in cands if c.reason is not None]
    return Recommendation(jf.fn.__name__, t, dev, names, ok, bad, top_k)

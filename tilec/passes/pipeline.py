"""The compilation pipeline: one flat, named list of stages, each a function of the compile state.

``default_pipeline(target)`` returns the list; :func:`run_pipeline` runs it, verifying the Tile IR after
every stage and timing each (and writing it to ``$TILEC_DUMP_DIR`` when that is set); :func:`dump` shows the IR
or the FTG after any stage.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tilec.config import config
from tilec.errors import TilecTypeError, TilecValueError, where
from tilec.ir.kernel import PrimFunc
from tilec.passes.verify import verify
from tilec.target import Target


@dataclass(frozen=True)
class CompileState:
    """What the stages have produced so far. Stages return a new state (``dataclasses.replace``)."""

    func: PrimFunc
    target: Target
    options: dict = field(default_factory=dict)  # pass configs (``tilec.jit(pass_configs=...)``)
    ftg: Any = None
    artifacts: dict[str, Any] = field(default_factory=dict)
    report: tuple[str, ...] = ()
    timings: tuple[tuple[str, float], ...] = ()

    def with_(self, **changes: Any) -> CompileState:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class Stage:
    name: str
    run: Callable[[CompileState], CompileState]
    doc: str = ""


def _verify(state: CompileState) -> CompileState:
    verify(state.func, "parse")
    notes = _inert_options(state.func) + _copy_hints(state.func, state.target, state.options or {})
    return state.with_(report=state.report + notes) if notes else state


_SAME = "(the results are the same without it)"
# T.copy / T.Parallel options a whole target has no use for: option -> (ignored on target with pass configs, why)
_TARGET_INERT: dict[str, tuple[Callable[[Target, dict], bool], str]] = {
    "coalesced_width": (lambda t, o: t.kind == "cpu",
                        f"the CPU interpreter moves whole tiles, not runs of elements a thread {_SAME}"),
    "disable_tma": (lambda t, o: t.arch != "sm_90a" or not o.get("tma"),
                    f"only sm_90a with pass config 'tma' moves copies by TMA {_SAME}"),
    "eviction_policy": (lambda t, o: t.kind != "cuda", f"it is an L2 cache hint of the CUDA backend {_SAME}"),
}


def _copy_hints(func: PrimFunc, target: Target, options: dict) -> tuple[str, ...]:
    """A note for each option of a T.copy or T.Parallel that has no effect: one ``target`` (with the pass configs
    ``options``) does not use (:data:`_TARGET_INERT`), or an ``eviction_policy`` on a copy that touches no global
    memory (``"evict_normal"``, the default priority, is noted only there)."""
    from tilec.ir.stmt import Copy, Parallel
    from tilec.ir.visit import walk

    notes = []
    for s in walk(func.launch.body):
        if isinstance(s, Parallel):
            given = {"coalesced_width": s.coalesced_width or None}
        elif isinstance(s, Copy):
            given = {"coalesced_width": s.coalesced_width, "disable_tma": s.disable_tma or None,
                     "eviction_policy": None if s.eviction_policy == "evict_normal" else s.eviction_policy}
        else:
            continue
        at = f"{'T.Parallel' if isinstance(s, Parallel) else 'T.copy'} at {where(s.loc)}"
        if isinstance(s, Copy) and s.eviction_policy and "global" not in (s.src.buffer.scope, s.dst.buffer.scope):
            notes.append(f"{at}: eviction_policy={s.eviction_policy!r} has no effect: the copy does not read or "
                         "write global memory")
            given["eviction_policy"] = None
        notes += [f"{at}: {k}={v!r} is not applied on target {target}: {_TARGET_INERT[k][1]}"
                  for k, v in given.items() if v is not None and _TARGET_INERT[k][0](target, options)]
    return tuple(notes)


# loop options of TileLang's that tilec keeps on the loop but has no use for (the compiler's own are not the user's)
_INERT = {"unroll": ("explicit",)}


def _inert_options(func: PrimFunc) -> tuple[str, ...]:
    """A note for each loop option the kernel gives that has no effect in tilec: T.unroll's ``explicit`` (tilec
    leaves unrolling to the CUDA/HIP compiler) and the ``annotations`` dicts of T.serial / T.unroll / T.vectorized."""
    from tilec.ir.printer import LOOP_CTOR
    from tilec.ir.stmt import LOOP_ANNOTATIONS, For
    from tilec.ir.visit import walk

    notes = []
    for s in walk(func.launch.body):
        if not isinstance(s, For):
            continue
        inert = _INERT.get(s.kind, ())
        ctor = f"{LOOP_CTOR[s.kind]} at {where(s.loc)}"
        notes += [f"{ctor}: {k}={v!r} is accepted for TileLang compatibility and has no effect (the CUDA/HIP "
                  f"compiler unrolls the loop)" for k, v in s.annotations if k in inert]
        user = {k: v for k, v in s.annotations if k not in LOOP_ANNOTATIONS}
        if user:
            notes.append(f"{ctor}: annotations={user!r} are accepted for TileLang compatibility and have no effect")
    return tuple(notes)


def _build_ftg(state: CompileState) -> CompileState:
    from tilec.ftg.build import build_ftg

    return state.with_(ftg=build_ftg(state.func))


def _rewrite(state: CompileState, rewrite: Callable[..., tuple[PrimFunc, list[str]]]) -> CompileState:
    """A Tile IR rewrite ``(func, target, options) -> (func, notes)``: its notes in the report, a new FTG if the
    function changed."""
    from tilec.ftg.build import build_ftg

    func, notes = rewrite(state.func, state.target, state.options)
    state = state.with_(report=state.report + tuple(notes))
    return state if func is state.func else state.with_(func=func, ftg=build_ftg(func))


def _specialize(state: CompileState) -> CompileState:
    """Warp specialization and persistence chosen where the pass configs leave them open (into the options the
    later stages read)."""
    from tilec.passes.specialize import choose_specialization

    options, notes = choose_specialization(state.func, state.target, state.options or {})
    return state.with_(options=options, report=state.report + tuple(notes)) if notes else state


def _panels(state: CompileState) -> CompileState:
    from tilec.passes.panels import choose_panels

    return _rewrite(state, choose_panels)


def _operand_registers(state: CompileState) -> CompileState:
    from tilec.passes.operand_registers import operands_to_registers

    return _rewrite(state, operands_to_registers)


def _pipelining(state: CompileState) -> CompileState:
    from tilec.passes.pipelining import pipeline_loops

    fates: dict = {}  # the copies with disable_tma a TMA path considered (for _tma_inert)
    state = _rewrite(state, lambda f, t, o: pipeline_loops(f, t, o, fates))
    return state.with_(artifacts={**state.artifacts, "tma_fates": fates})


def _hand_schedules(state: CompileState) -> CompileState:
    from tilec.passes.pipelining import check_hand_schedules

    return _rewrite(state, check_hand_schedules)


def _clusters(state: CompileState) -> CompileState:
    from tilec.passes.cluster import cluster_blocks

    return _rewrite(state, cluster_blocks)


def _epilogue(state: CompileState) -> CompileState:
    """The epilogue, then (the last pass that makes TMA copies) a note on each disable_tma no TMA path needed."""
    from tilec.passes.epilogue import stage_epilogues

    fates = dict(state.artifacts.get("tma_fates", {}))
    state = _rewrite(state, lambda f, t, o: stage_epilogues(f, t, o, fates))
    notes = _tma_inert(state.artifacts.get("input_func", state.func), fates, state.target, state.options or {})
    return state.with_(report=state.report + notes) if notes else state


def _tma_inert(func: PrimFunc, fates: dict, target: Target, options: dict) -> tuple[str, ...]:
    """A note for each T.copy whose ``disable_tma=True`` changed nothing on a target that moves copies by TMA: no
    pass would have made it a TMA copy or store. ``fates`` (loc -> None where the option decided, else why not) holds
    what the passes that considered such a copy found (:func:`tilec.passes.tma_pipeline.record_fate`); the loc of a
    ``T.macro``'s line holds its call site, so each use of the macro gets its own note, naming that site."""
    from tilec.errors import called_at
    from tilec.ir.stmt import Copy
    from tilec.ir.visit import walk
    from tilec.passes.tma_pipeline import tma_box_why

    if _TARGET_INERT["disable_tma"][0](target, options):  # noted at verify, for the whole target
        return ()
    notes = []
    for s in walk(func.launch.body):
        if type(s) is not Copy or not s.disable_tma or fates.get(s.loc, "") is None:
            continue
        scopes = (s.src.buffer.scope, s.dst.buffer.scope)
        why = fates.get(s.loc) or (
            (tma_box_why(s) or "only a T.Pipelined loop's first-stage copies and tiles a warp-specialized loop's "
             "gemms read go global->shared by TMA") if scopes == ("global", "shared") else
            ("pass config 'stage_epilogue' is off" if not options.get("stage_epilogue", True) else
             "pass config 'tma_store' is off" if not options.get("tma_store", True) else
             "only an accumulator store staged through shared memory goes by TMA stores")
            if scopes == ("fragment", "global") else
            f"TMA moves global->shared copies and accumulator stores to global memory, not a {scopes[0]}->"
            f"{scopes[1]} copy")
        notes.append(f"T.copy at {where(s.loc)}{called_at(s.loc)}: disable_tma=True has no effect: TMA would not "
                     f"move it: {why}")
    return tuple(dict.fromkeys(notes))


def _stage_operands(state: CompileState) -> CompileState:
    """Fragment operands of scalar-path gemms staged through shared memory; the buffers go to lowering (whose shared
    memory error names them)."""
    from tilec.passes.stage_operands import stage_operands

    staged: dict = {}
    state = _rewrite(state, lambda f, t, o: stage_operands(f, state.ftg, t, o, staged))
    return state.with_(artifacts={**state.artifacts, "staged_operands": staged}) if staged else state


# the report's name of a gemm plan's instruction
_INSTR_NAME = {"simt": "scalar FMA path", "mma_tf32": "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"}


def _layouts(state: CompileState) -> CompileState:
    from tilec.passes.layout_inference import infer_layouts

    plan = infer_layouts(state.func, state.ftg, state.target, state.options)
    state.ftg.layouts = dict(plan.fragments) | dict(plan.shared)
    notes = tuple(dict.fromkeys(f"T.gemm at {where(g.loc)}: {_INSTR_NAME.get(p.instr, p.instr)} {p.why}"
                                for g, p in plan.gemms.items()))  # once for a gemm a pass copied
    notes += tuple(plan.notes)
    return state.with_(artifacts={**state.artifacts, "layout_inference": plan}, report=state.report + notes)


def _lower(state: CompileState) -> CompileState:
    from tilec.passes.lower import lower_kernel

    kernel = lower_kernel(state.func, state.artifacts["layout_inference"], state.target, state.options,
                          state.artifacts.get("staged_operands"))
    return state.with_(artifacts={**state.artifacts, "lower": kernel}, report=state.report + kernel.notes)


def _barriers(state: CompileState) -> CompileState:
    from tilec.passes.barriers import place_barriers

    kernel = place_barriers(state.artifacts["lower"])
    return state.with_(artifacts={**state.artifacts, "barriers": kernel, "thread_ir": kernel})


def _emit(state: CompileState) -> CompileState:
    from tilec.backends.emit import emit_source

    src = emit_source(state.artifacts["thread_ir"], state.target)
    return state.with_(artifacts={**state.artifacts, "emit": src, "source": src})


def default_pipeline(target: Target) -> list[Stage]:
    """The stages for ``target``, in order. The frontend's ``parse`` comes before them."""
    stages = [
        Stage("verify", _verify, "check the Tile IR's invariants"),
        Stage("build_ftg", _build_ftg, "the fused tile dataflow graph"),
    ]
    if target.kind == "cpu":  # the interpreter runs each T.Pipelined loop as the plain loop
        return stages + [Stage("hand_schedules", _hand_schedules, "stage=/order= schedules checked as on a GPU")]
    return stages + [
        Stage("specialize", _specialize, "warp specialization and persistence where the pass configs leave them"),
        Stage("panels", _panels, "a persistent kernel's tiles in panels, where T.use_swizzle leaves them open"),
        Stage("operand_registers", _operand_registers, "loop-invariant wgmma A tiles read from registers"),
        Stage("pipelining", _pipelining, "multi-stage cp.async pipelines for T.Pipelined loops"),
        Stage("clusters", _clusters, "thread-block clusters with TMA multicast"),
        Stage("epilogue", _epilogue, "accumulator stores staged through shared memory"),
        Stage("stage_operands", _stage_operands, "register operands of scalar-path gemms staged in shared memory"),
        Stage("layout_inference", _layouts, "fragment, shared-memory and loop layouts"),
        Stage("lower", _lower, "tile ops to the thread IR"),
        Stage("barriers", _barriers, "__syncthreads where shared memory needs them"),
        Stage("emit", _emit, "CUDA / HIP source"),
    ]


def run_pipeline(func: PrimFunc, target: Target, stages: list[Stage] | None = None,
                 until: str | None = None, options: dict | None = None) -> CompileState:
    """Run the stages (the default pipeline unless given) up to and including ``until``."""
    stages = default_pipeline(target) if stages is None else stages
    if until is not None and until not in [s.name for s in stages]:
        raise TilecValueError(f"unknown stage {until!r}; stages are: parse, {', '.join(s.name for s in stages)}")
    state = CompileState(func, target, dict(options or {}), artifacts={"input_func": func})
    dump_dir = config().dump_dir
    dump_name = _dump_name(state) if dump_dir is not None else ""
    if dump_dir is not None:
        _dump_stage(dump_dir, dump_name, 0, "parse", state)
    for i, st in enumerate(stages, 1):
        t0 = time.perf_counter()
        new = st.run(state)
        if new.func is not state.func:
            verify(new.func, st.name)
        state = new.with_(timings=new.timings + ((st.name, time.perf_counter() - t0),))
        if dump_dir is not None:
            _dump_stage(dump_dir, dump_name, i, st.name, state)
        if st.name == until:
            break
    return state


def _dump_name(state: CompileState) -> str:
    """``<kernel>.<target>.<key>``: the key (8 hex digits of the kernel's Tile IR and pass configs) keeps apart the
    dumps of kernels that share a name (TileLang's ``main``) or a kernel compiled with other options."""
    import hashlib
    import json

    text = str(state.func) + json.dumps(state.options, sort_keys=True, default=str)
    return f"{state.func.name}.{str(state.target).replace(':', '-')}.{hashlib.sha256(text.encode()).hexdigest()[:8]}"


def _dump_stage(directory: Path, name: str, index: int, stage: str, state: CompileState) -> None:
    """``TILEC_DUMP_DIR``: the IR (the FTG for ``build_ftg``) after a stage, as ``<name>.<NN>.<stage>.txt``."""
    directory.mkdir(parents=True, exist_ok=True)
    shown = state.ftg if stage == "build_ftg" else state.artifacts.get(stage, state.func)
    path = directory / f"{name}.{index:02d}.{stage}.txt"
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(str(shown) + "\n")
    tmp.replace(path)  # atomic: concurrent processes never see a half-written dump


def stage_names(target: Target) -> list[str]:
    return ["parse"] + [s.name for s in default_pipeline(target)]


def dump(kernel: Any, after: str = "parse") -> str:
    """The IR (or the FTG, for ``after="build_ftg"``) of a kernel after a stage, as text.

    ``kernel`` is a :class:`~tilec.runtime.jit.JITKernel` or a :class:`~tilec.ir.kernel.PrimFunc`.
    """
    from tilec.runtime.jit import JITKernel

    if not isinstance(kernel, (PrimFunc, JITKernel)):  # the @tilec.jit factory itself, most often
        raise TilecTypeError(f"tilec.dump: kernel must be a JITKernel (what a @tilec.jit factory returns, or "
                             f"tilec.compile) or a @T.prim_func kernel, got {type(kernel).__name__} {kernel!r}")
    func = kernel if isinstance(kernel, PrimFunc) else kernel.prim_func
    target = Target("cpu") if isinstance(kernel, PrimFunc) else kernel.build_target()  # the arch it runs on
    if after == "parse":
        return str(func)
    state = run_pipeline(func, target, until=after, options=getattr(kernel, "pass_configs", None))
    if after == "build_ftg":
        return str(state.ftg)
    shown = state.artifacts.get(after)
    return str(shown) if shown is not None else str(state.func)

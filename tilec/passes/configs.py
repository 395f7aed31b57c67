"""The pass configs (``tilec.jit(pass_configs=...)``, ``JITKernel(pass_configs=...)``): the one list of them, with
their defaults and the values each takes. A name not listed, or a value of the wrong kind, is an error that says
what is known (a misspelt name would otherwise be ignored without a word)."""

from __future__ import annotations

import difflib
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tilec.errors import TilecTypeError, TilecValueError


@dataclass(frozen=True)
class PassConfig:
    name: str
    default: Any
    meaning: str
    takes: str  # the values it accepts, in words
    ok: Callable[[Any], bool]


def _flag(v: Any) -> bool:
    return isinstance(v, bool)


def _blocks(v: Any) -> bool:
    return isinstance(v, bool) or (isinstance(v, int) and v > 0)


def _one_of(*values: int) -> Callable[[Any], bool]:
    """An int among ``values`` (not a bool, nor a float equal to one: the passes take it as a count)."""
    return lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool) and v in values


_cluster = _one_of(0, 1, 2, 4)
_copies = _one_of(1, 2)


PASS_CONFIGS: dict[str, PassConfig] = {c.name: c for c in (
    PassConfig("wgmma", "True on sm_90a (TILEC_WGMMA)", "T.gemm on sm_90a runs on wgmma (else mma.sync)",
               "True or False", _flag),
    PassConfig("wgmma_overlap", True, "a pipelined loop's wgmma group runs on into the next trip", "True or False",
               _flag),
    PassConfig("wgmma_wait_anchor", False, "a wgmma wait deferred past register-only statements stays below them "
               "(ptxas would move it up; measured slower, perf notes AF)", "True or False", _flag),
    PassConfig("tma", "True on sm_90a (TILEC_WGMMA)", "T.Pipelined copies on sm_90a are TMA loads through mbarriers",
               "True or False", _flag),
    PassConfig("warp_specialize", "chosen on sm_90a (tilec.passes.specialize), else False", "with tma: a producer "
               "warpgroup issues the copies beside the consumers",
               "True or False", _flag),
    PassConfig("rotate", True, "with warp_specialize: a loop's second wgmma gemm runs one iteration late, beside "
               "the next iteration's first (the statements between them overlap it)", "True or False", _flag),
    PassConfig("split_rings", True, "with rotate: the late gemm's tiles (flash attention's V) get an mbarrier ring "
               "of their own, released when that gemm is done (two stages of each instead of three of both)",
               "True or False", _flag),
    PassConfig("pingpong", True, "with rotate: the consumer warpgroups take turns issuing their gemms (one's "
               "statements between them beside the others' gemms)", "True or False", _flag),
    PassConfig("preload", True, "with warp_specialize: tile copies before the loop that only its wgmma gemms read, "
               "or copies into fragments before it (flash attention's Q, in shared memory or taken into registers), "
               "are TMA loads by the producer", "True or False", _flag),
    PassConfig("operand_registers", True, "with warp_specialize: a shared tile loaded before a pipelined loop and "
               "read in it only as T.gemm's A is copied once into registers, where wgmma reads it (flash attention's "
               "Q; tilec.passes.operand_registers)", "True or False", _flag),
    PassConfig("producer_regs", "40; 24 with three consumer warpgroups or more", "with warp_specialize: the "
               "producer warpgroup's registers a thread after setmaxnreg, the consumers taking the rest (at most "
               "240); ptxas spills the producer's code if it needs more", "a multiple of 8 from 24 to 256",
               lambda v: not isinstance(v, bool) and isinstance(v, int) and 24 <= v <= 256 and v % 8 == 0),
    PassConfig("persistent", "True where warp_specialize is chosen, else False", "with warp_specialize: one block "
               "per SM (True) or that many blocks loop over the tiles", "True, False or a positive int", _blocks),
    PassConfig("stream_k", False, "with persistent: the tiles of the last, partial round of blocks are shared out "
               "by iterations of the pipelined loop, partial sums added through a workspace (tilec.passes.stream_k)",
               "True or False", _flag),
    PassConfig("k_serpentine", False, "with persistent, where the pipelined loop only adds gemm products into "
               "accumulators: the producer loads odd rounds' k-tiles in descending order, so that a round starts on "
               "what L2 still holds from the round before", "True or False", _flag),
    PassConfig("consumers", 1, "with persistent: that many copies of the block's consumer threads, each taking every "
               "n-th of the block's tiles (one's epilogue beside another's main loop)", "1 or 2", _copies),
    PassConfig("tile_order", "balanced", "with persistent, where the loop's trip count depends on the tile (causal "
               "attention): a table of tiles balancing the blocks' work (longest first within windows of four rounds) "
               "or round-robin in serpentine order", "'balanced' or 'serpentine'", lambda v: v in ("balanced",
                                                                                                    "serpentine")),
    PassConfig("cluster", 0, "with warp_specialize: clusters of that many blocks share tiles by TMA multicast",
               "0 or 1 (none), 2 or 4", _cluster),
    PassConfig("stage_epilogue", True, "NVIDIA: a tensor-core gemm's accumulators leave through shared memory",
               "True or False", _flag),
    PassConfig("stage_handoff", True, "with tma_store: the consumer warpgroups of a rotated loop taking turns hand a "
               "staged tile to each other by named barriers, not by a barrier of them all", "True or False", _flag),
    PassConfig("store_exchange", True, "stores of accumulator pairs from registers to global memory: the threads of a "
               "quad exchange them by shuffles and each stores 16 bytes (perf notes AP)", "True or False", _flag),
    PassConfig("store_buffers", 2, "with tma_store, in a persistent kernel's tile loop: a staged accumulator's "
               "column chunks alternate between that many buffers of the staging memory (2: each chunk waits for the "
               "store two chunks back, not the one just issued)", "1 or 2", _copies),
    PassConfig("stage_in_ring", True, "with tma_store, in a persistent kernel's tile loop: a staged accumulator's "
               "first columns go out through the operand stage the main loop read last, which the consumers hold until "
               "the next tile's first step, the rest through a tile of their own: two TMA stores, no wait between them",
               "True or False", _flag),
    PassConfig("pdl", "True on sm_90", "NVIDIA sm_90: each launch is a programmatic dependent of the stream's "
               "previous kernel (it launches while that one finishes, and waits for it before its first statement)",
               "True or False", _flag),
    PassConfig("tma_store", True, "with tma: staged accumulators leave by TMA stores", "True or False", _flag),
)}


def check_pass_configs(configs: dict | None) -> dict:
    """``configs`` itself, once every name is a known pass config with a value it accepts."""
    if configs is not None and not isinstance(configs, Mapping):
        raise TilecTypeError(f"pass_configs is a dict of pass config names to values (pass_configs={{'wgmma': "
                             f"False}}), got {type(configs).__name__} {configs!r}")
    for name, value in (configs or {}).items():
        c = PASS_CONFIGS.get(name)
        if c is None:
            near = difflib.get_close_matches(str(name), PASS_CONFIGS, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise TilecValueError(f"unknown pass config {name!r}{hint}; the pass configs are: "
                                  + ", ".join(PASS_CONFIGS))
        if not c.ok(value):
            raise TilecValueError(f"pass config {name!r} takes {c.takes}, got {value!r}")
    return dict(configs or {})


# pass configs that act only on sm_90a's Hopper path: name -> (whether the kernel's configs let it act there, why not)
_HOPPER_ONLY: dict[str, tuple[Any, str]] = {
    "wgmma_overlap": (lambda c: c.get("wgmma"), "it shapes the pipelining of wgmma gemms, which run on sm_90a "
                      "with pass config 'wgmma'"),
    "wgmma_wait_anchor": (lambda c: c.get("wgmma"), "it places the waits of wgmma gemms, which run on sm_90a "
                          "with pass config 'wgmma'"),
    "tma_store": (lambda c: c.get("tma"), "it picks how staged accumulators leave by TMA, which runs on sm_90a "
                  "with pass config 'tma'"),
}


# configs that turn a feature on or off: given False where the feature does not exist, the user gets what they asked
# for, and no note says otherwise
_FEATURES = ("wgmma", "tma", "pdl")


def target_inert(target: Any, asked: dict, configs: dict) -> list[str]:
    """Report notes for the configs the user gave (``asked``) that cannot act on ``target``: every one on the CPU
    interpreter (it runs the tile program as written); the Hopper-path configs on another architecture than sm_90a,
    or without the config they refine (``configs``: the kernel's, defaults included); and ``pdl`` anywhere but CUDA on
    sm_90, where launches are programmatic dependents. A feature of :data:`_FEATURES` given False is never noted."""
    if target.kind == "cpu":
        return [f"pass config {k!r} has no effect on cpu: the CPU interpreter runs the tile program as written (pass "
                "configs shape the code built for GPUs, and the thread interpreters')" for k in asked
                if not (k in _FEATURES and asked[k] is False)]
    arch = target.arch
    notes = [f"pass config {k!r} has no effect on {target}: wgmma and TMA need sm_90a"
             for k in ("wgmma", "tma") if asked.get(k) and arch != "sm_90a"]
    if asked.get("pdl") and not (target.kind == "cuda" and target.sm >= 90):
        notes.append(f"pass config 'pdl' has no effect on {target}: programmatic dependent launches need CUDA on "
                     "sm_90 or later")
    return notes + [f"pass config {k!r} has no effect: {why}" for k, (acts, why) in _HOPPER_ONLY.items()
                    if k in asked and not (arch == "sm_90a" and acts(configs))]

"""Targets: where a kernel runs.

======================  ==================================================================
string                  meaning
======================  ==================================================================
``cpu``                 the tile interpreter (numpy), the default where no GPU is present
``cuda``                NVIDIA, architecture read from the device at compile time
``cuda:sm_80``          NVIDIA Ampere-class instructions (mma.sync, cp.async, ldmatrix)
``cuda:sm_90a``         NVIDIA Hopper (wgmma, TMA, mbarrier, warp specialization)
``hip``                 AMD CDNA (MFMA, 64-lane wavefronts), architecture read from the device at compile time
``hip:gfx90a``          AMD MI200 (MFMA); ``hip:gfx942`` for MI300
``simt:<arch>``         lower for ``<arch>`` and run the thread interpreter on the CPU
``auto``                ``cuda`` when an NVIDIA GPU is present, else ``hip`` when an AMD GPU and hip-python
                        are, else ``cpu``
======================  ==================================================================
"""

from __future__ import annotations

import functools
import shutil
from dataclasses import dataclass

from tilec.errors import TilecTypeError, TilecValueError

_ARCHS = {
    "cuda": ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a"),
    "hip": ("gfx90a", "gfx942"),
}


@dataclass(frozen=True)
class Target:
    """A parsed target.

    Parameters
    ----------
    kind : str
        ``"cpu"``, ``"cuda"``, ``"hip"`` or ``"simt"``.
    arch : str
        The GPU architecture (``"sm_90a"``, ``"gfx90a"``); ``""`` for ``cpu`` and for ``cuda`` / ``hip`` before
        the device is known.
    """

    kind: str
    arch: str = ""

    def __post_init__(self) -> None:
        why = _refusal(str(self), self.kind, self.arch)
        if why is not None:
            raise TilecValueError(why)

    @property
    def backend(self) -> str:
        """The backend whose instructions the kernel is lowered for: ``cpu``, ``cuda`` or ``hip``."""
        if self.kind == "simt":
            return "hip" if self.arch.startswith("gfx") else "cuda"
        return self.kind

    @property
    def sm(self) -> int:
        """The NVIDIA compute capability as an int (90 for ``sm_90a``); 0 when not NVIDIA."""
        if not self.arch.startswith("sm_"):
            return 0
        return int(self.arch[3:].rstrip("a"))

    @property
    def warp_size(self) -> int:
        """Lanes of a warp (NVIDIA) or wavefront (AMD CDNA): 32 or 64."""
        return 64 if self.backend == "hip" else 32

    def __str__(self) -> str:
        return f"{self.kind}:{self.arch}" if self.arch else self.kind


def parse_target(value: str | Target | None) -> Target:
    """Parse a target string (see the module docstring); ``None`` reads ``TILEC_TARGET``.

    Raises
    ------
    TilecValueError
        If the string names no known target or architecture.
    """
    if isinstance(value, Target):
        return value
    if value is None:
        from tilec.config import config

        value = config().target
    if not isinstance(value, str):
        hint = (" (tilec.compile takes the target second: tilec.compile(func, target=None, out_idx=None); pass "
                "out_idx= by keyword)") if isinstance(value, (int, list, tuple)) else ""
        raise TilecTypeError(f"target must be a string such as 'cpu', 'cuda:sm_90a' or 'simt:sm_80' (or a Target), "
                             f"got {type(value).__name__} {value!r}{hint}")
    text = value.strip().lower()
    if text == "auto":
        if gpu_available():
            return Target("cuda")
        return Target("hip") if amd_gpu_available() else Target("cpu")
    kind, _, arch = text.partition(":")
    if kind == "simt":
        arch = arch or "sm_80"
    why = _refusal(value, kind, arch)
    if why is not None:
        raise TilecValueError(why)
    return Target(kind, arch)


def _refusal(value: str, kind: str, arch: str) -> str | None:
    """Why ``kind`` and ``arch`` (written ``value``) name no target, or None (parse_target and Target's
    constructor, which say the same)."""
    if kind == "cpu" and not arch:
        return None
    if kind in ("cuda", "hip"):
        if arch and arch not in _ARCHS[kind]:
            return f"target {value!r}: unknown {kind} architecture {arch!r}; expected one of {', '.join(_ARCHS[kind])}"
        return None
    if kind == "simt":
        return None if arch in _ARCHS["cuda"] + _ARCHS["hip"] else \
            f"target {value!r}: unknown architecture {arch!r} for simt"
    return (f"unknown target {value!r}; expected 'auto', 'cpu', 'cuda', 'cuda:sm_80', 'cuda:sm_90a', 'hip:gfx90a', "
            "'hip:gfx942' or 'simt:<arch>'")


def archs(kind: str) -> tuple[str, ...]:
    """The architectures of ``cuda`` or ``hip`` targets."""
    return _ARCHS[kind]


@functools.lru_cache(maxsize=1)
def gpu_available() -> bool:
    """True when the driver sees an NVIDIA GPU and CuPy (tilec's NVRTC) is installed; imports neither CuPy nor
    anything else heavy (a kernel from the disk cache then starts without CuPy)."""
    if shutil.which("nvidia-smi") is None and not _has_libcuda():
        return False
    import importlib.util

    from tilec.backends.cuda.driver import device_count

    return importlib.util.find_spec("cupy") is not None and device_count() > 0


def _has_libcuda() -> bool:
    import ctypes.util

    return ctypes.util.find_library("cuda") is not None


@functools.lru_cache(maxsize=1)
def amd_gpu_available() -> bool:
    """True when the ROCm kernel driver is present and hip-python is installed (neither is loaded to find out)."""
    import importlib.util
    import os

    return os.path.exists("/dev/kfd") and importlib.util.find_spec("hip") is not None

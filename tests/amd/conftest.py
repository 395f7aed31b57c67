"""Tests of the HIP backend. Most run anywhere (thread interpreter on ``simt:gfx90a``, hipcc compile checks when
hipcc is installed, the runtime against a stand-in for hip-python); those marked ``hip`` need an AMD GPU with torch
on ROCm and hip-python, and are skipped (and deselected by default) without them."""

from __future__ import annotations

import pytest

HIPCC_INFO: list[str] = []  # per-kernel register and scratch figures from the hipcc tests, printed after the run


def amd_gpu() -> bool:
    try:
        import torch
        from hip import hip  # noqa: F401

        return torch.version.hip is not None and torch.cuda.is_available()
    except Exception:  # noqa: BLE001 - any import or driver failure means no usable AMD GPU
        return False


def pytest_collection_modifyitems(config, items):  # noqa: ANN001
    marked = [item for item in items if item.get_closest_marker("hip") is not None]
    if not marked or amd_gpu():
        return
    skip = pytest.mark.skip(reason="needs an AMD GPU with torch on ROCm and hip-python")
    for item in marked:
        item.add_marker(skip)


def pytest_terminal_summary(terminalreporter) -> None:  # noqa: ANN001
    if HIPCC_INFO:
        terminalreporter.section("hipcc: registers and scratch (--offload-arch=gfx90a)")
        for line in HIPCC_INFO:
            terminalreporter.write_line(line)

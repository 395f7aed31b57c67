import importlib
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if _cuda():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU with torch")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _poisoned_outputs(monkeypatch):
    """Outputs tilec allocates start as NaN (TILEC_POISON): an element a kernel leaves unwritten fails the test
    instead of showing an earlier result the caching allocator handed back."""
    monkeypatch.setenv("TILEC_POISON", "1")


@pytest.fixture(scope="session")
def examples():
    sys.path.insert(0, str(EXAMPLES))
    names = ("01_gemm", "02_softmax", "03_flash_attention", "05_norms", "06_fp8_gemm", "07_mla_decode")
    mods = {n: importlib.import_module(n) for n in names}
    yield mods
    sys.path.remove(str(EXAMPLES))

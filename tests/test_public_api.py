"""The public names of ``tilec`` and ``tilec.language``: ``__all__`` lists what exists, a star import gives exactly it,
and the ``T.<name>`` the examples and the README use are all in it."""

from __future__ import annotations

import builtins
import re
import types

import pytest
from conftest import ROOT

import tilec
import tilec.language as T

_SUBMODULES = {"alloc", "annot", "loops", "math", "ops", "types"}  # tilec.language's own modules, not T.* names
_SHADOWING = {"abs", "bool", "max", "min", "pow", "print", "round"}  # T.* names a star import would put over builtins


@pytest.mark.parametrize("module", [tilec, T], ids=["tilec", "tilec.language"])
def test_every_name_in_all_exists_once(module):
    assert len(module.__all__) == len(set(module.__all__)), sorted(n for n in module.__all__
                                                                   if module.__all__.count(n) > 1)
    missing = [n for n in module.__all__ if not hasattr(module, n)]
    assert not missing, missing


@pytest.mark.parametrize("module", [tilec, T], ids=["tilec", "tilec.language"])
def test_star_import_gives_exactly_all(module):
    ns: dict = {}
    exec(f"from {module.__name__} import *", ns)
    ns.pop("__builtins__")
    assert set(ns) == set(module.__all__), set(ns) ^ set(module.__all__)
    assert not [n for n, v in ns.items() if isinstance(v, types.ModuleType)]
    assert not [n for n in ns if hasattr(builtins, n)]  # print, max, bool, compile ... stay Python's


def test_names_kept_out_of_all_for_the_builtins_stay_reachable():
    assert all(getattr(T, n) is not getattr(builtins, n) for n in _SHADOWING)
    assert tilec.compile is not builtins.compile


def test_language_all_holds_every_public_name_and_no_submodule():
    public = {n for n in dir(T) if not n.startswith("_")} - _SUBMODULES - _SHADOWING
    assert set(T.__all__) == public, set(T.__all__) ^ public
    assert not _SUBMODULES & set(T.__all__)


def test_names_used_in_the_examples_and_readme_are_public():
    used: dict[str, str] = {}
    for path in [ROOT / "README.md", *sorted((ROOT / "examples").glob("*.py"))]:
        # T.<name>, not part of a longer dotted name and not a pattern such as T.reduce_*
        for m in re.finditer(r"(?<![\w.])T\.([A-Za-z_]\w*)(?![\w*])", path.read_text()):
            used.setdefault(m.group(1), path.name)
    assert len(used) > 20  # the scan found the examples' kernels
    missing = {n: f for n, f in used.items() if n not in T.__all__ and n not in _SHADOWING}
    assert not missing, missing


def test_tilec_all_names_the_entry_points_and_no_module():
    for name in ("jit", "autotune", "recommend", "dump", "JITKernel", "TilecError", "Target"):
        assert name in tilec.__all__
    assert not [n for n in tilec.__all__ if isinstance(getattr(tilec, n), types.ModuleType)]


def test_every_public_primitive_has_a_docstring():
    """``help(T.reduce_min)`` and a notebook's ``T.fma?`` said nothing for 17 of the ``T.*`` functions (T.min,
    T.fma, T.nan, T.max_value, T.floordiv, the abs reductions, ...); each now says what it computes."""
    names = sorted(set(T.__all__) | _SHADOWING)
    bare = [n for n in names if isinstance(getattr(T, n), types.FunctionType) and not (getattr(T, n).__doc__ or "")
            .strip()]
    assert not bare, bare

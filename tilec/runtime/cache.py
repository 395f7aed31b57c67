"""The disk cache of compiled kernels (``$TILEC_CACHE_DIR``, default ``~/.cache/tilec``).

Each entry is three files named by its key (a content hash): the binary (``.bin``), JSON metadata
(``.json``) and the source (``.src``, for inspection). No pickle. Every file is written to a temporary name
and renamed into place, so two processes compiling the same kernel at once never see a partial file; the
metadata is written last and marks the entry complete. The binary file starts with the SHA-256 digest of the
binary: one damaged since (cut short by a crash or a full disk after the rename, a partial copy) is a miss.
"""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile
from pathlib import Path

from tilec.config import config


@functools.cache
def compiler_id() -> str:
    """tilec's version and a digest of its own source files, part of the keys of compiled kernels and tuning
    results: a changed compiler (a release, or a working tree being edited) never gets an earlier compiler's kernel
    back from the disk cache for the same kernel and options. Read once a process (~200 files)."""
    import tilec

    root = Path(tilec.__file__).parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return f"{tilec.__version__}+{h.hexdigest()[:16]}"


_DIGEST = 32  # bytes of SHA-256 before the binary in a .bin file


def _dir() -> Path | None:
    cfg = config()
    if cfg.disable_cache:
        return None
    return cfg.cache_dir


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def get(key: str) -> tuple[bytes, str] | None:
    """(binary, metadata JSON) of a complete entry, or None."""
    d = _dir()
    if d is None:
        return None
    meta, binary = d / f"{key}.json", d / f"{key}.bin"
    try:
        data, text = binary.read_bytes(), meta.read_text()
    except (OSError, UnicodeDecodeError):  # missing, unreadable or damaged: a miss
        return None
    digest, data = data[:_DIGEST], data[_DIGEST:]
    return (data, text) if hashlib.sha256(data).digest() == digest else None


def put(key: str, binary: bytes, meta_json: str, source: str = "") -> None:
    d = _dir()
    if d is None:
        return
    try:
        _atomic_write(d / f"{key}.src", source.encode())
        _atomic_write(d / f"{key}.bin", hashlib.sha256(binary).digest() + binary)
        _atomic_write(d / f"{key}.json", meta_json.encode())
    except OSError:  # a read-only or full cache directory costs a recompile, never a failure
        pass


def get_text(key: str) -> str | None:
    d = _dir()
    if d is None:
        return None
    try:
        return (d / f"{key}.json").read_text()
    except (OSError, UnicodeDecodeError):
        return None


def put_meta(key: str, meta_json: str) -> None:
    """A metadata-only entry (the front key of a kernel, pointing at its binary's entry)."""
    d = _dir()
    if d is None:
        return
    try:
        _atomic_write(d / f"{key}.json", meta_json.encode())
    except OSError:
        pass


def read_json(subdir: str, name: str) -> str | None:
    """The text of ``<cache>/<subdir>/<name>.json`` (autotuning results), or None."""
    d = _dir()
    if d is None:
        return None
    try:
        return (d / subdir / f"{name}.json").read_text()
    except (OSError, UnicodeDecodeError):
        return None


def write_json(subdir: str, name: str, text: str) -> None:
    """Write ``<cache>/<subdir>/<name>.json`` atomically (a failure to write costs a re-run, never an error)."""
    d = _dir()
    if d is None:
        return
    try:
        _atomic_write(d / subdir / f"{name}.json", text.encode())
    except OSError:
        pass

"""A cached directory checks itself: its manifest records each file's size and sha256 when it is written, and a
load compares the files with it before trusting them.

A converted model in the cache (:func:`exactspec.backends.cachedir.cache_root`) is written once and read by every
later process. A file cut short (a full disk, a killed copy) or changed in place (a bad sector, a stray write)
must not load as a model: truncated safetensors fail deep inside the loader with no word of the cache, and
4 KiB overwritten inside the file load silently with NaN in the weights. :func:`write_manifest` records every
file; :func:`check_dir` compares sizes (a stat per file) and then the sha256 of every file, once per process
per file version (about 0.4 s for SmolLM2's 538 MB on this project's 2-core VM, against ~4.5 s for the load
itself; docs/cache.md). Callers decide what a mismatch does: :mod:`exactspec.pairs.smollm2` rebuilds.
"""
from __future__ import annotations

import hashlib
import json
import os
import pathlib

__all__ = ["MANIFEST", "write_manifest", "read_manifest", "check_dir", "file_sha256"]

MANIFEST = "exactspec.json"
# File versions checked in full in this process, as (device, inode, size, mtime_ns): a rename keeps them (a
# conversion hashes its files in a temporary directory, then moves it into place), a write changes them.
_VERIFIED: set[tuple[int, int, int, int]] = set()


def file_sha256(path: str | os.PathLike) -> str:
    """The sha256 of a file's bytes (hex)."""
    h, buf = hashlib.sha256(), bytearray(1 << 20)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as fh:
        while n := fh.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()


def write_manifest(directory: str | os.PathLike, **meta) -> dict:
    """Record the size and sha256 of every file under `directory` (but the manifest) in its ``exactspec.json``,
    with `meta` beside them; return what was written. Call it last, once every file is in place."""
    root = pathlib.Path(directory)
    files = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.name != MANIFEST):
        files[path.relative_to(root).as_posix()] = {"size": path.stat().st_size, "sha256": file_sha256(path)}
    record = dict(meta) | {"files": files}
    (root / MANIFEST).write_text(json.dumps(record, indent=1))
    for rel in files:  # just hashed: this process need not hash them again
        _remember(root / rel)
    return record


def read_manifest(directory: str | os.PathLike) -> dict | None:
    """The directory's manifest, or None when it has none or it cannot be read as JSON."""
    try:
        data = json.loads((pathlib.Path(directory) / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def check_dir(directory: str | os.PathLike, checksum: bool = True) -> str | None:
    """None when every file the manifest records is there with its size (and, with `checksum`, its sha256);
    otherwise what is wrong, in a few words ("model.safetensors is 1,024 bytes, 538,090,408 recorded").

    Sizes are checked first, for every file (cheap); then checksums, each file's once per process while its
    inode, size and modification time stay the same."""
    root = pathlib.Path(directory)
    manifest = read_manifest(root)
    if manifest is None:
        return f"no readable {MANIFEST}"
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        return f"{MANIFEST} records no file sizes or checksums (written by an older exactspec)"
    for rel, want in files.items():
        try:
            size = (root / rel).stat().st_size
        except OSError as exc:
            return f"{rel} is missing or unreadable ({exc.strerror or exc})"
        if size != want.get("size"):
            return f"{rel} is {size:,} bytes, {want.get('size'):,} recorded"
    if checksum:
        for rel, want in files.items():
            path = root / rel
            if _identity(path) in _VERIFIED:
                continue
            try:
                digest = file_sha256(path)
            except OSError as exc:
                return f"{rel} cannot be read ({exc.strerror or exc})"
            if digest != want.get("sha256"):
                return f"{rel} does not match its recorded sha256 (same size, changed bytes)"
            _remember(path)
    return None


def _identity(path: pathlib.Path) -> tuple[int, int, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _remember(path: pathlib.Path) -> None:
    ident = _identity(path)
    if ident is not None:
        _VERIFIED.add(ident)


# ----------------------------------------------------------------------------------- what is cached
def cache_entries(root: str | os.PathLike) -> list[dict]:
    """Every entry directly under the cache root `root`, a file or a directory each, sorted by name:
    ``{"name", "path", "kind" ("dir" | "file"), "bytes", "files", "what", "ours"}``. ``what`` says what exactspec
    keeps there; ``ours`` is False for an entry exactspec did not make (left alone when clearing all)."""
    root = pathlib.Path(root)
    if not root.is_dir():
        return []
    out = []
    for path in sorted(root.iterdir(), key=lambda p: p.name):
        is_dir = path.is_dir() and not path.is_symlink()
        files = [p for p in path.rglob("*") if p.is_file() and not p.is_symlink()] if is_dir else [path]
        size = 0
        for p in files:
            try:
                size += p.lstat().st_size
            except OSError:
                pass
        what, ours = _what(path, is_dir)
        out.append({"name": path.name, "path": str(path), "kind": "dir" if is_dir else "file", "bytes": size,
                    "files": len(files), "what": what, "ours": ours})
    return out


def _what(path: pathlib.Path, is_dir: bool) -> tuple[str, bool]:
    import re

    if re.search(r"\.(tmp|damaged)\d+$", path.name):
        return "left by a conversion that was interrupted or found damaged", True
    if is_dir and (path / MANIFEST).exists():
        meta = read_manifest(path) or {}
        source = pathlib.Path(meta["gguf"]).name if isinstance(meta.get("gguf"), str) else None
        return "converted model" + (f" (from {source})" if source else ""), True
    if is_dir and path.name == "costs":
        return "measured cost profiles", True
    if is_dir and re.fullmatch(r"llamacpp-bin-[\w.]+", path.name):  # exactspec.bench.llamacpp_peers
        return "llama.cpp's programs, built for the benchmarks' peers and the live audits", True
    if is_dir and path.name == "llamacpp-src":
        return "llama.cpp's source archive, kept for a rebuild", True
    if is_dir and path.name == "engines":  # engines/setup.sh (`make audit-live`)
        return "the live audits' engines (vLLM's CPU build in a venv of its own)", True
    return "not made by exactspec", False


def remove_entry(root: str | os.PathLike, name: str) -> None:
    """Delete the entry `name` directly under `root` (a directory with everything in it, or a file); a
    ValueError for a name that is not an entry there."""
    import shutil

    root = pathlib.Path(root)
    if not name or name in (".", "..") or "/" in name or os.sep in name:
        raise ValueError(f"clear: {name!r} is not an entry name (names are as `exactspec cache` lists them)")
    path = root / name
    if not path.exists() and not path.is_symlink():
        raise ValueError(f"clear: no entry {name!r} in {root}")
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()

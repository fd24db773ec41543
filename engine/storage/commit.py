"""Generations and the commit point: where an index directory names its live state, and how a writer
replaces it atomically."""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any


from ..errors import IndexFormatError, InputError
from .checksum import HASH, data_files, file_digest
from .durable import fsync_dir, fsync_tree, write_file_durably, write_json
from .layout import CURRENT, FORMAT_NAME, FORMAT_VERSION, GEN_PREFIX, GEN_PATTERN, LEGACY_NAMES, MANIFEST, LOCK_FILE, READERS_FILE
from .lock import Lease, WriteLock, remove_unless_leased




















def _generation_number(name: str) -> int | None:
    m = GEN_PATTERN.fullmatch(name)
    return int(m.group(1)) if m else None


def _is_own_name(name: str) -> bool:
    """A name that the version-3 layout writes directly under an index directory."""
    return (name in (CURRENT, LOCK_FILE) or _generation_number(name) is not None
            or name.startswith(f"{CURRENT}.tmp-") or (name.startswith(f".{GEN_PREFIX}") and ".tmp-" in name)
            or (name.startswith(f".{GEN_PREFIX}") and ".del-" in name))


def _legacy_manifest(path: Path) -> dict[str, Any] | None:
    """The manifest of a format-1/2 index held directly in ``path``, or None."""
    try:
        m = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return m if isinstance(m, dict) and m.get("format") == FORMAT_NAME else None


def is_index_dir(path: str | Path) -> bool:
    """Whether ``path`` is a directory that hopgraph wrote (a complete index or an interrupted
    first build): only names of the index layout, or an index of an older format."""
    path = Path(path)
    if not path.is_dir():
        return False
    names = os.listdir(path)
    if not names:
        return False
    if all(_is_own_name(n) for n in names):
        return True
    legacy = _legacy_manifest(path)
    return legacy is not None and all(_is_own_name(n) or n in LEGACY_NAMES for n in names)


def has_index(path: str | Path) -> bool:
    """Whether ``path`` holds a complete index (a commit point, or an older-format manifest)."""
    path = Path(path)
    return (path / CURRENT).is_file() or _legacy_manifest(path) is not None


def check_target(path: str | Path, overwrite: bool = False, flag: str = "overwrite=True") -> None:
    """Refuse to write an index to ``path`` unless it does not exist, is an empty directory, or
    is a hopgraph index directory — and, when it holds a complete index, unless ``overwrite``.
    ``flag`` is how the caller's user says "overwrite" (``--overwrite`` in the CLI)."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return
    if not path.is_dir():
        raise InputError(f"{path} exists and is not a directory (is it the corpus?); refusing to replace it: "
                         f"choose another output path")
    if not os.listdir(path):
        return
    if not is_index_dir(path):
        raise InputError(f"{path} is a non-empty directory that is not a hopgraph index; refusing to write "
                         f"into it: choose another output path")
    if has_index(path) and not overwrite:
        raise InputError(f"{path} already holds a hopgraph index; pass {flag} to replace it")


def read_current(path: Path) -> tuple[str, dict[str, Any]]:
    """The live generation's name and the manifest entry (size, digest, algorithm) of ``CURRENT``."""
    cur = path / CURRENT
    try:
        obj = json.loads(cur.read_text(encoding="utf-8"))
        gen, entry = obj["generation"], obj["manifest"]
        if obj.get("format") != FORMAT_NAME or _generation_number(gen) is None or not isinstance(entry, dict):
            raise ValueError("not a commit point")
        int(entry["size"]), str(entry["digest"]), str(entry["algorithm"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise IndexFormatError(f"{cur} is corrupt ({e}); the index cannot be opened") from None
    return gen, entry


def current_generation(path: str | Path) -> Path:
    """The directory of the live generation of the index at ``path``."""
    path = Path(path)
    return path / read_current(path)[0]


def open_index(path: str | Path) -> tuple[Path, dict[str, Any], Lease]:
    """Resolve the commit point of ``path``: ``(generation directory, checked manifest, lease)``.

    The manifest's own size and digest (from ``CURRENT``), format name and version are checked; an
    index of another format version is refused with the command that rebuilds it.
    """
    path = Path(path)
    if not path.is_dir():
        raise IndexFormatError(f"index directory {path} does not exist")
    for _ in range(5):
        if not (path / CURRENT).is_file():
            legacy = _legacy_manifest(path)
            if legacy is not None:
                _check_version(path, legacy)
            if (path / MANIFEST).is_file():
                raise IndexFormatError(f"{path / MANIFEST} is corrupt or not a hopgraph index manifest")
            if is_index_dir(path):
                raise IndexFormatError(f"{path} holds no complete index (its first build was interrupted); "
                                       f"build it again")
            raise IndexFormatError(f"{path} is not a hopgraph index (no {CURRENT})")
        gen, entry = read_current(path)
        gen_dir = path / gen
        try:
            lease = Lease(gen_dir)
        except FileNotFoundError:  # replaced and removed between reading CURRENT and opening: read it again
            continue
        if not (gen_dir / MANIFEST).is_file():
            lease.close()
            if read_current(path)[0] != gen:
                continue
            raise IndexFormatError(f"{gen_dir / MANIFEST} is missing")
        break
    else:
        raise IndexFormatError(f"{path}: the index kept changing while it was being opened; try again")
    mpath = gen_dir / MANIFEST
    if mpath.stat().st_size != int(entry["size"]) or file_digest(mpath, entry["algorithm"]) != entry["digest"]:
        lease.close()
        raise IndexFormatError(f"{mpath} is corrupt (size or checksum differs from {path / CURRENT})")
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        lease.close()
        raise IndexFormatError(f"{mpath} is corrupt: {e}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        lease.close()
        raise IndexFormatError(f"{mpath} is not a hopgraph index manifest")
    try:
        _check_version(path, manifest)
    except IndexFormatError:
        lease.close()
        raise
    return gen_dir, manifest, lease


def _check_version(path: Path, manifest: dict[str, Any]) -> None:
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise IndexFormatError(
            f"{path} has index format version {version}; this hopgraph reads version {FORMAT_VERSION}. "
            f"Rebuild it: {rebuild_command(path, manifest)}"
        )


def read_manifest(directory: str | Path) -> dict[str, Any]:
    """The checked manifest of the live generation of the index at ``directory``."""
    _, manifest, lease = open_index(directory)
    lease.close()
    return manifest


def rebuild_command(directory: Path, manifest: dict[str, Any]) -> str:
    """The ``hopgraph index`` command that rebuilds an index of an older format from what it holds
    (its corpus — ``corpus.jsonl`` of version 1, else the corpus file it was built from when that
    still exists — and its embeddings are reused, so nothing is embedded again)."""
    embedder = (manifest.get("embedder") or {}).get("name", "minilm")
    pipelines = ",".join(manifest.get("pipelines") or {}) or "dense,bm25,g3rag"
    source = (manifest.get("corpus") or {}).get("source")
    if (directory / "corpus.jsonl").is_file():
        corpus: Any = directory / "corpus.jsonl"
    elif isinstance(source, str) and source.endswith(".jsonl") and Path(source).is_file():
        corpus = source
    else:
        corpus = "CORPUS.jsonl"
    emb = f" --embeddings {directory / 'embeddings.npy'}" if (directory / "embeddings.npy").is_file() else ""
    emb_name = "" if embedder.startswith("precomputed") else f" --embedder {embedder}"
    params = "".join(f" --param {pipe}.{name}={json.dumps(value)}"
                     for pipe, values in sorted((manifest.get("params") or {}).items())
                     for name, value in sorted(values.items()))
    return (f"hopgraph index {corpus}{emb}{emb_name} --pipelines {pipelines}{params} "
            f"--out {directory}-v{FORMAT_VERSION}")


class IndexWriter:
    """Write one new generation of the index at ``path`` and commit it (module docstring).

    ``with IndexWriter(path, overwrite) as w:`` write files under ``w.dir``, set ``w.manifest``;
    on a clean exit the generation is checksummed, made durable and committed; on an exception
    it is removed and the index at ``path`` is untouched.
    """

    def __init__(self, path: str | Path, overwrite: bool = False, flag: str = "overwrite=True") -> None:
        self.path = Path(path)
        self.overwrite, self.flag = overwrite, flag
        self.manifest: dict[str, Any] | None = None
        self.dir: Path = self.path
        self._guard = TargetGuard(self.path, overwrite, flag)

    def __enter__(self) -> "IndexWriter":
        self._guard.__enter__()
        try:
            cleanup(self.path)
            gen = max((g for g in map(_generation_number, os.listdir(self.path)) if g is not None), default=0) + 1
            self.gen = f"{GEN_PREFIX}{gen:06d}"
            self.dir = self.path / f".{self.gen}.tmp-{os.getpid()}"
            self.dir.mkdir()
            (self.dir / READERS_FILE).touch()
        except BaseException:
            self._guard.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if exc_type is None:
                if self.manifest is None:
                    raise RuntimeError("IndexWriter: no manifest was set")
                self._commit()
        except BaseException:
            shutil.rmtree(self.dir, ignore_errors=True)
            self._guard.__exit__(*sys.exc_info())
            raise
        if exc_type is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
        self._guard.__exit__(exc_type, exc, tb)

    def _commit(self) -> None:
        manifest = dict(self.manifest or {})
        manifest["checksum_algorithm"] = HASH
        manifest["checksums"] = {rel.as_posix(): {"size": (self.dir / rel).stat().st_size,
                                                  "digest": file_digest(self.dir / rel)}
                                 for rel in data_files(self.dir)}
        write_json(self.dir / MANIFEST, manifest)
        fsync_tree(self.dir)
        final = self.path / self.gen
        os.rename(self.dir, final)
        self.dir = final
        fsync_dir(self.path)
        mpath = final / MANIFEST
        current = {"format": FORMAT_NAME, "generation": self.gen,
                   "manifest": {"size": mpath.stat().st_size, "digest": file_digest(mpath), "algorithm": HASH}}
        write_file_durably(self.path / CURRENT, (json.dumps(current, indent=2, sort_keys=True) + "\n").encode())
        self._guard.committed = True
        cleanup(self.path)


class TargetGuard:
    """Hold the write lock of an index output path for a whole build (check, lock, re-check).

    Creates the directory when missing (its parent fsynced) and, if it was created here and no
    index was committed into it when the guard exits, removes it again (only its own lock file
    is in it then). Used by :class:`IndexWriter` and by ``hopgraph index`` around the build."""

    def __init__(self, path: str | Path, overwrite: bool = False, flag: str = "overwrite=True") -> None:
        self.path = Path(path)
        self.overwrite, self.flag = overwrite, flag
        self.created = False
        self.committed = False
        self.lock = WriteLock(self.path)

    def __enter__(self) -> "TargetGuard":
        check_target(self.path, self.overwrite, self.flag)
        if not self.path.exists():
            self.path.mkdir(parents=True)
            fsync_dir(self.path.parent)
            self.created = True
        self.lock.__enter__()
        try:
            check_target(self.path, self.overwrite, self.flag)  # again, under the lock
        except BaseException:
            self.lock.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        outermost = WriteLock._held.get(self.lock.key, [None, 0])[1] == 1
        if outermost and self.created and not has_index(self.path):
            cleanup(self.path)
            self.lock.release_and_remove()
            self.lock.__exit__(*exc)
            try:
                self.path.rmdir()
            except OSError:
                pass
            return
        self.lock.__exit__(*exc)


def cleanup(path: Path) -> list[str]:
    """Remove what is not part of the live index at ``path`` — temporary directories and files of
    interrupted writes, replaced generations that no reader holds, files of an older format once a
    version-3 generation is committed — and return the names removed. Call with the write lock held."""
    removed = []
    live = read_current(path)[0] if (path / CURRENT).is_file() else None
    for name in sorted(os.listdir(path)):
        p = path / name
        if name.startswith(f"{CURRENT}.tmp-") or (name.startswith(f".{GEN_PREFIX}") and
                                                  (".tmp-" in name or ".del-" in name)):
            _remove(p)
            removed.append(name)
        elif _generation_number(name) is not None and name != live and live is not None:
            if remove_unless_leased(p):
                removed.append(name)
        elif live is not None and name in LEGACY_NAMES:
            _remove(p)
            removed.append(name)
    if removed:
        fsync_dir(path)
    return removed


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        try:
            p.unlink()
        except OSError:
            pass




def new_manifest(**fields: Any) -> dict[str, Any]:
    return {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, "created": time.time(), **fields}

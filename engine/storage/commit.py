"""Commits and the commit point: where an index directory names its live state, how a writer adds a
commit atomically, and how readers pin one.

Format 4 (Lucene-like): an index is a list of immutable segments (``seg-NNNNNN/``, each with a
``segment.json`` listing its files with sizes and checksums) plus small per-segment deletes files
(``seg-NNNNNN.del-CCCCCC.npy``), named by a commit file (``commit-CCCCCC.json``: the segment list
with the size and digest of every segment manifest and deletes file, and the index's metadata).
``CURRENT`` names the live commit with its size and digest and is replaced atomically, so a kill at
any moment leaves the old or the new commit. A commit names its parent and the last commit that
changed the index's content; a writer whose index was loaded from another content than the live one
is refused (or rebases: the caller's business). Readers lease the commit they opened (a shared flock
on ``commit-CCCCCC.lock``); after a commit the writer removes every commit no reader leases and every
file that no remaining commit references.

Format 3 (one generation directory ``gen-NNNNNN/`` named by ``CURRENT``) is still opened, read as one
base segment; the first format-4 commit replaces it.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..errors import IndexFormatError, InputError
from .checksum import HASH, data_files, file_digest
from .durable import fsync_dir, fsync_tree, write_file_durably, write_json
from .layout import (CURRENT, DELETES_PATTERN, FORMAT_NAME, FORMAT_VERSION, LEASE_SUFFIX, LEGACY_NAMES,
                     LOCK_FILE, MANIFEST, READ_VERSIONS, READERS_FILE, SEGMENT_FORMAT, SEGMENT_MANIFEST, commit_name,
                     commit_number, deletes_name, generation_number, segment_name, segment_number)
from .lock import Lease, WriteLock, remove_unless_leased, try_exclusive
from .segment_infos import SegmentInfo, SegmentInfos, check_digest, file_entry, read_current, read_json


class StaleIndexError(IndexFormatError):
    """A commit was refused because another writer committed to the index after this one loaded it
    (the message names both commits); reload the index and apply the change again."""


#: segments being written by merges in this process (their temporary directories survive cleanups)
ACTIVE_MERGES: set[str] = set()


def _is_temporary(name: str) -> bool:
    """A name left by an interrupted write (temporary or doomed files and directories; a merge's
    directory only when its process is gone, :data:`ACTIVE_MERGES`)."""
    if name.startswith(".") and ".merge-" in name:
        if name in ACTIVE_MERGES:
            return False
        pid = name.rsplit(".merge-", 1)[1]
        return not (pid.isdigit() and int(pid) != os.getpid() and _pid_alive(int(pid)))
    return ".tmp-" in name or (name.startswith(".") and ".del-" in name)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _is_own_name(name: str) -> bool:
    """A name that the index layout (format 3 or 4) writes directly under an index directory."""
    if name in (CURRENT, LOCK_FILE) or _is_temporary(name) or (name.startswith(".") and ".merge-" in name):
        return True
    if commit_number(name) is not None or segment_number(name) is not None or DELETES_PATTERN.fullmatch(name):
        return True
    if name.endswith(LEASE_SUFFIX) and commit_number(name[:-len(LEASE_SUFFIX)] + ".json") is not None:
        return True
    return generation_number(name) is not None


def _legacy_manifest(path: Path) -> dict[str, Any] | None:
    """The manifest of a format-1/2 index held directly in ``path``, or None."""
    try:
        m = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return m if isinstance(m, dict) and m.get("format") == FORMAT_NAME else None


def is_index_dir(path: str | Path) -> bool:
    """Whether ``path`` is a directory that hopgraph wrote: a complete index (a readable commit
    point, or an older format's manifest), whatever other files it holds (a ``notes.txt``, a
    ``.DS_Store``: never read, never removed), or an interrupted first build (only names of the
    index layout)."""
    path = Path(path)
    if not path.is_dir():
        return False
    if _legacy_manifest(path) is not None:
        return True
    try:
        read_current(path)
        return True
    except IndexFormatError:
        pass
    names = os.listdir(path)
    return bool(names) and all(_is_own_name(n) for n in names)


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


# ---------------------------------------------------------------------- the commit point
@dataclass
class SegmentRef:
    """One segment of an opened commit: its directory, global rows ``[first_row, first_row +
    n_rows)``, its checked manifest (``segment.json``; a format-3 generation's manifest) and its
    deletes file (None: no row deleted)."""

    name: str
    dir: Path
    first_row: int
    n_rows: int
    manifest: dict[str, Any]
    deletes: Path | None = None
    #: the commit's entry for the segment (``None`` for a format-3 generation)
    entry: dict[str, Any] | None = None


@dataclass
class OpenedIndex:
    """A pinned commit of the index at ``path``: its manifest, segments and the reader's lease."""

    path: Path
    name: str
    manifest: dict[str, Any]
    segments: list[SegmentRef]
    lease: Lease | None
    version: int = FORMAT_VERSION
    #: the commit's segment list (None for a format-3 generation, which has none)
    infos: SegmentInfos | None = None

    @property
    def number(self) -> int:
        """The commit number (0 for a format-3 generation)."""
        return commit_number(self.name) or 0

    def close(self) -> None:
        """Release the lease (a writer may then remove the commit's files); idempotent."""
        if self.lease is not None:
            self.lease.close()
            self.lease = None


def open_index(path: str | Path) -> OpenedIndex:
    """Resolve and pin the commit point of ``path`` (module docstring): the commit file's size and
    digest are checked against ``CURRENT``, and each segment manifest's and deletes file's against the
    commit; the format name and version are checked (an older format is refused with the command
    that rebuilds it). The caller closes the returned lease (``OpenedIndex.close``)."""
    path = Path(path)
    if not path.is_dir():
        raise IndexFormatError(f"index directory {path} does not exist")
    for _ in range(20):
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
        name, entry = read_current(path)
        if generation_number(name) is not None:
            opened = _open_generation(path, name, entry)
        else:
            opened = _open_commit(path, name, entry)
        if opened is not None:
            return opened
    raise IndexFormatError(f"{path}: the index kept changing while it was being opened; try again")


def _open_commit(path: Path, name: str, entry: dict[str, Any]) -> OpenedIndex | None:
    """The commit ``name`` pinned, or None when it was replaced and removed meanwhile (read
    ``CURRENT`` again)."""
    cfile = path / name

    def opened(manifest: dict[str, Any], lease: Lease) -> OpenedIndex:
        """The commit ``manifest`` read under ``lease``, its segments checked."""
        infos = SegmentInfos.from_manifest(name, manifest, cfile)
        return OpenedIndex(path, name, manifest, [_open_segment(path, seg, cfile) for seg in infos.segments], lease,
                           infos=infos)

    return _pinned(path, name, entry, _lease_file(cfile), cfile, "a hopgraph index commit", opened)


def _open_segment(path: Path, seg: SegmentInfo, cfile: Path) -> SegmentRef:
    """The segment ``seg`` of the commit file ``cfile``, its ``segment.json`` and deletes file checked
    against the digests the commit records."""
    sdir = path / seg.name
    mfile = sdir / SEGMENT_MANIFEST
    check_digest(mfile, seg.manifest, str(cfile))
    smanifest = read_json(mfile)
    name, first, n = seg.name, seg.first_row, seg.n_rows
    if smanifest.get("format") != SEGMENT_FORMAT or smanifest.get("name") != name or \
            smanifest.get("first_row") != first or smanifest.get("n_rows") != n:
        raise IndexFormatError(f"{mfile}: does not describe segment {name} of rows [{first}, {first + n}) "
                               f"as {cfile} says")
    deletes = None
    if seg.deletes is not None:
        deletes = path / seg.deletes_file
        check_digest(deletes, seg.deletes, str(cfile))
    return SegmentRef(name, sdir, first, n, smanifest, deletes, seg.entry())


def _open_generation(path: Path, name: str, entry: dict[str, Any]) -> OpenedIndex | None:
    """A format-3 generation pinned as one base segment, or None when replaced meanwhile."""
    gen_dir = path / name

    def opened(manifest: dict[str, Any], lease: Lease) -> OpenedIndex:
        """The generation ``manifest`` read under ``lease``, as one base segment."""
        n = int((manifest.get("corpus") or {}).get("n_passages", 0))
        return OpenedIndex(path, name, manifest, [SegmentRef(name, gen_dir, 0, n, manifest)], lease, version=3)

    return _pinned(path, name, entry, gen_dir / READERS_FILE, gen_dir / MANIFEST, "a hopgraph index manifest",
                   opened)


def _pinned(path: Path, name: str, entry: dict[str, Any], lease_file: Path, mfile: Path, what: str,
            opened: Callable[[dict[str, Any], Lease], OpenedIndex]) -> OpenedIndex | None:
    """Lease ``lease_file``, check ``mfile`` against ``entry`` (its digest in ``CURRENT``), its format
    and version, and return ``opened(manifest, lease)``; None when ``name`` was replaced and removed
    meanwhile. The lease is released on any error."""
    try:
        lease = Lease(lease_file)
    except FileNotFoundError:
        return None
    try:
        if not mfile.is_file():
            if read_current(path)[0] != name:
                lease.close()
                return None
            raise IndexFormatError(f"{mfile} is missing")
        check_digest(mfile, entry, str(path / CURRENT))
        manifest = read_json(mfile)
        if manifest.get("format") != FORMAT_NAME:
            raise IndexFormatError(f"{mfile} is not {what}")
        _check_version(path, manifest)
        return opened(manifest, lease)
    except BaseException:
        lease.close()
        raise


def _check_version(path: Path, manifest: dict[str, Any]) -> None:
    version = manifest.get("format_version")
    if version not in READ_VERSIONS:
        raise IndexFormatError(
            f"{path} has index format version {version}; this hopgraph reads versions "
            f"{', '.join(map(str, READ_VERSIONS))}. Rebuild it: {rebuild_command(path, manifest)}"
        )


def read_manifest(directory: str | Path) -> dict[str, Any]:
    """The checked manifest of the live commit of the index at ``directory``."""
    opened = open_index(directory)
    opened.close()
    return opened.manifest


def segment_dirs(directory: str | Path) -> list[Path]:
    """The directories of the live commit's segments, in row order."""
    opened = open_index(directory)
    opened.close()
    return [s.dir for s in opened.segments]


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


# ---------------------------------------------------------------------- writing
def _lease_file(commit_file: Path) -> Path:
    return commit_file.with_name(commit_file.name[:-len(".json")] + LEASE_SUFFIX)


class NewSegment:
    """A segment being written: files go under :attr:`dir` (a temporary directory until
    :meth:`CommitWriter.finish_segment`)."""

    def __init__(self, name: str, directory: Path) -> None:
        self.name, self.dir = name, directory


class CommitWriter:
    """Write new segments and deletes files into the index at ``path`` and commit them (module
    docstring), holding its write lock. ``with CommitWriter(path, overwrite) as w:`` — :attr:`live` is
    the live commit's :class:`SegmentInfos` (None for a new index or a format-3 one),
    :meth:`new_segment` / :meth:`finish_segment` write a segment, :meth:`write_deletes` a deletes
    file, :meth:`commit` the commit file and ``CURRENT``. Leaving the block with an exception leaves
    the index as it was (what was written is removed by the cleanup of the next write)."""

    def __init__(self, path: str | Path, overwrite: bool = False, flag: str = "overwrite=True") -> None:
        self.path = Path(path)
        self._guard = TargetGuard(self.path, overwrite, flag)
        self.live: SegmentInfos | None = None
        #: the name ``CURRENT`` held when the writer was entered (a format-3 generation included)
        self.current: str | None = None
        self.committed: SegmentInfos | None = None
        self._temps: list[Path] = []

    @property
    def live_name(self) -> str | None:
        """The live commit's name (None for a new index or a format-3 one)."""
        return None if self.live is None else self.live.name

    def __enter__(self) -> "CommitWriter":
        self._guard.__enter__()
        try:
            cleanup(self.path)
            if (self.path / CURRENT).is_file():
                name, entry = read_current(self.path)
                self.current = name
                if commit_number(name) is not None:
                    self.live = SegmentInfos.read_commit(self.path, name, entry)
        except BaseException:
            self._guard.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        for t in self._temps:
            _remove(t)
        self._guard.__exit__(exc_type, exc, tb)

    # -- numbering
    def _next(self, number: Any) -> int:
        """One more than every number used by a name, temporary ones (``.seg-000042.tmp-PID``) included."""
        found = [number(n[1:].split(".")[0] if n.startswith(".") else n) for n in os.listdir(self.path)]
        return max([n for n in found if n is not None] + [0]) + 1

    def next_commit_number(self) -> int:
        """A commit number above every commit (and temporary name) in the directory."""
        return max(self._next(commit_number), (commit_number(self.live_name or "") or 0) + 1)

    # -- segments
    def new_segment(self) -> NewSegment:
        """A new segment (name and temporary directory) to write files into."""
        name = segment_name(self._next(segment_number))
        tmp = self.path / f".{name}.tmp-{os.getpid()}"
        tmp.mkdir()
        self._temps.append(tmp)
        return NewSegment(name, tmp)

    def reserve_segment(self) -> NewSegment:
        """A new segment for a merge: its name is reserved and its directory survives this writer
        (and other writers' cleanups while this process lives), so it can be written without the
        lock and finished by a later writer (:meth:`finish_segment`)."""
        name = segment_name(self._next(segment_number))
        tmp = self.path / f".{name}.merge-{os.getpid()}"
        tmp.mkdir()
        ACTIVE_MERGES.add(tmp.name)
        return NewSegment(name, tmp)

    def finish_segment(self, seg: NewSegment, first_row: int, n_rows: int, **fields: Any) -> SegmentInfo:
        """Checksum every file of ``seg`` into its ``segment.json`` (with ``fields``), make it durable
        and give it its final name; returns the commit's entry for it (without deletes)."""
        manifest = {"format": SEGMENT_FORMAT, "format_version": FORMAT_VERSION, "name": seg.name,
                    "first_row": int(first_row), "n_rows": int(n_rows), "created": time.time(), **fields,
                    "checksum_algorithm": HASH,
                    "checksums": {rel.as_posix(): {"size": (seg.dir / rel).stat().st_size,
                                                   "digest": file_digest(seg.dir / rel)}
                                  for rel in data_files(seg.dir)}}
        write_json(seg.dir / SEGMENT_MANIFEST, manifest, compact=True)
        fsync_tree(seg.dir)
        final = self.path / seg.name
        os.rename(seg.dir, final)
        if seg.dir in self._temps:
            self._temps.remove(seg.dir)
        ACTIVE_MERGES.discard(seg.dir.name)
        seg.dir = final
        fsync_dir(self.path)
        return SegmentInfo(seg.name, int(first_row), int(n_rows), file_entry(final / SEGMENT_MANIFEST))

    def write_deletes(self, segment: str, commit: int, rows_npy: bytes, count: int) -> dict[str, Any]:
        """Write a segment's deletes file (the bytes of a ``.npy`` of its deleted local rows) durably;
        returns its entry."""
        file = self.path / deletes_name(segment, commit)
        write_file_durably(file, rows_npy)
        return {"file": file.name, **file_entry(file, count=int(count))}

    def commit(self, number: int, infos: SegmentInfos) -> SegmentInfos:
        """Write ``infos`` as commit ``number`` and switch ``CURRENT`` to it atomically
        (:meth:`SegmentInfos.write`); then remove what no commit a reader holds references. Returns
        the commit as written."""
        lease = _lease_file(self.path / commit_name(number))
        lease.touch()
        written = infos.write(self.path, number, time.time())
        self._guard.committed = True
        self.live = self.committed = written
        cleanup(self.path)
        return written


class TargetGuard:
    """Hold the write lock of an index output path for a whole build (check, lock, re-check).

    Creates the directory when missing (its parent fsynced) and, if it was created here and no
    index was committed into it when the guard exits, removes it again (only its own lock file
    is in it then). Used by :class:`CommitWriter` and by ``hopgraph index`` around the build."""

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


def _referenced(path: Path, commit_file: Path) -> set[str] | None:
    """The segment and deletes names a commit file references (None: unreadable)."""
    try:
        return SegmentInfos.from_manifest(commit_file.name, read_json(commit_file), commit_file).referenced()
    except IndexFormatError:
        return None


def cleanup(path: Path) -> list[str]:
    """Remove what is not part of the live index at ``path`` or of a commit a reader leases —
    temporary files of interrupted writes, replaced commits no reader holds, segments and deletes
    files no remaining commit references, format-3 generations and older-format files once a newer
    commit is live — and return the names removed. Call with the write lock held."""
    removed: list[str] = []
    live = read_current(path)[0] if (path / CURRENT).is_file() else None
    names = sorted(os.listdir(path))
    for name in names:
        if _is_temporary(name):
            _remove(path / name)
            removed.append(name)
    if live is None:
        if removed:
            fsync_dir(path)
        return removed
    kept_commits: list[Path] = []
    for name in names:
        number = commit_number(name)
        if number is None or _is_temporary(name):
            continue
        cfile = path / name
        if name == live:
            kept_commits.append(cfile)
            continue
        doomed = path / f".{name}.del-{os.getpid()}"
        if try_exclusive(_lease_file(cfile), lambda c=cfile, d=doomed: os.rename(c, d)):
            _remove(doomed)
            _remove(_lease_file(cfile))
            removed.append(name)
        else:
            kept_commits.append(cfile)
    referenced: set[str] = set()
    complete = True
    for cfile in kept_commits:
        refs = _referenced(path, cfile)
        if refs is None:
            complete = False  # an unreadable commit: remove nothing it might reference
        else:
            referenced |= refs
    for name in names:
        p = path / name
        if not p.exists() and not p.is_symlink():
            continue
        if name.endswith(LEASE_SUFFIX) and commit_number(name[:-len(LEASE_SUFFIX)] + ".json") is not None:
            if not (path / (name[:-len(LEASE_SUFFIX)] + ".json")).exists():
                _remove(p)
                removed.append(name)
        elif complete and (segment_number(name) is not None or DELETES_PATTERN.fullmatch(name)) \
                and name not in referenced and commit_number(live) is not None:
            _remove(p)
            removed.append(name)
        elif generation_number(name) is not None and name != live:
            if remove_unless_leased(p):
                removed.append(name)
        elif name in LEGACY_NAMES:
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


def referenced_files(opened: OpenedIndex) -> list[Path]:
    """Every file the commit ``opened`` holds: the commit file, each segment's manifest and data
    files, each deletes file."""
    out = [opened.path / opened.name]
    for seg in opened.segments:
        out.append(seg.dir / (SEGMENT_MANIFEST if opened.version >= 4 else MANIFEST))
        out += [seg.dir / rel for rel in data_files(seg.dir)]
        if seg.deletes is not None:
            out.append(seg.deletes)
    return out


__all__ = ["CommitWriter", "NewSegment", "OpenedIndex", "SegmentRef", "StaleIndexError", "TargetGuard",
           "check_target", "cleanup", "has_index", "is_index_dir", "open_index", "read_current", "read_manifest",
           "rebuild_command", "referenced_files", "segment_dirs", "verify_index"]


def verify_index(path: str | Path, level: str = "full") -> list[str]:
    """Problems with the live commit of the index at ``path``, one line each (empty: all good): the
    commit file, every segment manifest and deletes file against their recorded digests, and every
    file of every segment (:func:`~hopgraph.engine.storage.verify_files` at ``level``)."""
    from .checksum import verify_files

    try:
        opened = open_index(path)
    except IndexFormatError as e:
        return [str(e)]
    try:
        return [p for seg in opened.segments for p in verify_files(seg.dir, seg.manifest, level)]
    finally:
        opened.close()

"""Index storage: a directory of generations with a commit point, a write lock, checksums.

Layout (format version 3)::

    INDEX/CURRENT                          the commit point: JSON naming the live generation and the
                                           size and checksum of its manifest
    INDEX/write.lock                       the write lock (pid of the writer holding it)
    INDEX/gen-000007/manifest.json         format, version, embedder, corpus checksum, components,
                                           pipelines, and the size and checksum of every other file
    INDEX/gen-000007/readers.lock          reader leases (not data; not checksummed)
    INDEX/gen-000007/corpus/*.npy          the corpus store: ids, titles, texts, metadata as packed strings
    INDEX/gen-000007/embeddings.npy        X, float32 [N, d] (memory-mapped on load)
    INDEX/gen-000007/components/bm25-0/    the BM25 index (bm25s), shared by every pipeline using BM25
    INDEX/gen-000007/components/extraction-0/*.npy  the zero-token extraction
    INDEX/gen-000007/pipelines/NAME/*.npy  each fitted pipeline's own arrays

**Commit point** (Lucene-like). A writer (:class:`IndexWriter`) takes the write lock, writes a
new generation into a temporary directory ``INDEX/.gen-000008.tmp-PID``, checksums every file
into the manifest, fsyncs every file and directory, renames it to ``gen-000008`` and fsyncs
``INDEX``; then it writes ``CURRENT.tmp-PID``, fsyncs it and renames it over ``CURRENT`` (one
atomic ``rename``) and fsyncs ``INDEX`` (and its parent when ``INDEX`` was new). A reader
resolves ``CURRENT`` once, so at every instant — a kill anywhere included — ``INDEX`` names one
complete generation, the old or the new. After the switch, and again at the start of the next
write, the writer removes leftover temporary directories and every generation but the live
one that no reader holds (:class:`Lease`: a shared ``flock`` on the generation's
``readers.lock``, taken by :meth:`Index.load` for the life of the loaded index, so a server
keeps serving the generation it opened while the index is replaced; a generation still held is
removed by a later write). Without ``fcntl`` (Windows) there are no leases; removal of a
generation still open simply fails and is retried by the next write.

**Write lock** (:class:`WriteLock`): ``fcntl.flock(LOCK_EX | LOCK_NB)`` on ``INDEX/write.lock``
where ``fcntl`` exists — the kernel drops the lock when its holder dies, even by SIGKILL, so a
lock is never stale; the holder's pid is written into the file for the error message. Where
``fcntl`` is missing the lock is the file itself, created with ``O_CREAT | O_EXCL`` and holding
the pid; a lock whose pid is no longer alive is stale and taken over. A second writer gets an
:class:`~hopgraph.engine.errors.IndexLockedError` naming the path and the holder's pid. The lock
is re-entrant within a process (the CLI holds it from the start of a build to the end of the save).

**Output safety** (:func:`check_target`): a writer only ever writes into a path that does not
exist, an empty directory, or a hopgraph index directory, and only replaces an existing complete
index with ``overwrite=True``; it deletes only names of its own layout.

**Checksums**: every file of a generation is listed in its manifest with its size and its
XXH3-128 digest (``xxhash``; zlib's CRC-32 where ``xxhash`` is not installed; the manifest
names the algorithm). Measured on a 100 MB file from the page cache (2 shared cores): read only
2.7 GB/s, read + XXH3 1.9-2.1 GB/s, read + CRC-32 1.1 GB/s, read + SHA-256 0.49 GB/s; XXH3
because it costs little more than reading the file and, at 128 bits, never collides by
accident. ``CURRENT`` holds the manifest's own digest. :func:`verify_files` checks them:
``verify="full"`` reads and hashes every file; ``verify="fast"`` checks that every file exists
with its recorded size (the manifest's digest is always checked). The structural checks of
every stored array (index ranges, CSR shapes, finite unit embeddings, ...) run on every load,
in the load code of each component.

An index of an older format version (1 or 2: files directly under ``INDEX/``) is refused with an
:class:`IndexFormatError` printing the ``hopgraph index ... --embeddings OLD/embeddings.npy ...``
command that rebuilds it from its own corpus and embeddings (:func:`rebuild_command`; nothing is
embedded again). Writing over one with ``overwrite=True`` commits a version-3 generation into the
same directory and then removes the old files.
"""
from __future__ import annotations

import codecs
import json
import mmap
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from .errors import IndexFormatError, IndexLockedError, InputError

try:  # POSIX: kernel-managed locks (released when the holder dies)
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

FORMAT_NAME = "hopgraph-index"
FORMAT_VERSION = 3
MANIFEST = "manifest.json"
CURRENT = "CURRENT"
LOCK_FILE = "write.lock"
READERS_FILE = "readers.lock"
GEN_PREFIX = "gen-"
_GEN = re.compile(r"gen-(\d{6,})")
#: names an index directory of format 1 or 2 held directly (removed when a v3 generation replaces it)
LEGACY_NAMES = ("manifest.json", "corpus", "corpus.jsonl", "embeddings.npy", "components", "pipelines")
#: ``verify=`` levels of :func:`verify_files` / ``Index.load``
VERIFY_LEVELS = ("full", "fast")
#: embeddings with at most this many values are checked row by row (finite, unit norm); larger: sampled rows
UNIT_CHECK_FULL = 1 << 24
UNIT_CHECK_SAMPLE = 4096
UNIT_TOL = 1e-3


# ---------------------------------------------------------------------------------------- checksums
def _default_hash() -> str:
    try:
        import xxhash  # noqa: F401
        return "xxh3_128"
    except ImportError:  # pragma: no cover - xxhash is a dependency; CRC-32 for environments without it
        return "crc32"


HASH = _default_hash()


def file_digest(path: Path, algorithm: str = HASH, block: int = 8 << 20) -> str:
    """Hex digest of a file's bytes (``"xxh3_128"`` or ``"crc32"``), read in 8 MB blocks."""
    if algorithm == "xxh3_128":
        import xxhash

        h = xxhash.xxh3_128()
        update: Callable[[memoryview], None] = h.update
        digest: Callable[[], str] = h.hexdigest
    elif algorithm == "crc32":
        import zlib

        state = [0]
        update = lambda b: state.__setitem__(0, zlib.crc32(b, state[0]))  # noqa: E731
        digest = lambda: f"{state[0]:08x}"  # noqa: E731
    else:
        raise IndexFormatError(f"unknown checksum algorithm {algorithm!r} (this hopgraph knows xxh3_128, crc32)")
    buf = bytearray(block)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while True:
            n = f.readinto(buf)
            if not n:
                break
            update(view[:n])
    return digest()


def _data_files(root: Path) -> list[Path]:
    """Every data file under a generation directory (relative, sorted): all but the manifest and lease file."""
    return sorted(p.relative_to(root) for p in root.rglob("*")
                  if p.is_file() and p.relative_to(root).as_posix() not in (MANIFEST, READERS_FILE))


def verify_files(gen_dir: Path, manifest: dict[str, Any], level: str = "full") -> list[str]:
    """Problems with the files of a generation, one line each (empty: all good).

    ``"full"``: every file listed in the manifest exists with its size and checksum, and no
    unlisted data file is present. ``"fast"``: the same without reading the files (sizes only).
    """
    if level not in VERIFY_LEVELS:
        raise InputError(f"verify must be one of {VERIFY_LEVELS}, got {level!r}")
    listed = manifest.get("checksums")
    algorithm = manifest.get("checksum_algorithm")
    if not isinstance(listed, dict) or not isinstance(algorithm, str):
        return [f"{gen_dir / MANIFEST}: no file checksums (key 'checksums' / 'checksum_algorithm')"]
    problems = []
    for rel, entry in sorted(listed.items()):
        path = gen_dir / rel
        try:
            size, digest = int(entry["size"]), str(entry["digest"])
        except (KeyError, TypeError, ValueError):
            problems.append(f"{gen_dir / MANIFEST}: bad checksum entry for {rel}")
            continue
        if not path.is_file():
            problems.append(f"{path}: missing")
        elif path.stat().st_size != size:
            problems.append(f"{path}: {path.stat().st_size} bytes, manifest says {size}")
        elif level == "full" and file_digest(path, algorithm) != digest:
            problems.append(f"{path}: checksum mismatch (corrupt)")
    for rel in _data_files(gen_dir):
        if rel.as_posix() not in listed:
            problems.append(f"{gen_dir / rel}: not listed in the manifest")
    return problems


# ---------------------------------------------------------------------------------------- durability
def fsync_dir(path: Path) -> None:
    """fsync a directory (its entries: new names, renames); a no-op where directories cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - Windows
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some file systems refuse fsync on directories
        pass
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """fsync every file and every directory under ``root`` (directories after their contents)."""
    dirs = [root]
    for p in root.rglob("*"):
        if p.is_dir():
            dirs.append(p)
        elif p.is_file():
            with open(p, "rb") as f:
                os.fsync(f.fileno())
    for d in sorted(dirs, key=lambda d: len(d.parts), reverse=True):
        fsync_dir(d)


def write_file_durably(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary sibling: write, fsync, rename, fsync the directory."""
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


# ---------------------------------------------------------------------------------------- locks
def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def _read_pid(path: Path) -> str:
    try:
        return path.read_text().strip() or "unknown"
    except OSError:
        return "unknown"


class WriteLock:
    """The exclusive write lock of one index directory (module docstring: flock, or an
    ``O_EXCL`` pid file without fcntl). Re-entrant within a process; use as a context manager."""

    _held: dict[str, list] = {}  # resolved index path → [fd, depth]

    def __init__(self, index_dir: Path) -> None:
        self.dir = Path(index_dir)
        self.path = self.dir / LOCK_FILE
        self.key = str(self.dir.resolve())

    def __enter__(self) -> "WriteLock":
        held = self._held.get(self.key)
        if held is not None:
            held[1] += 1
            return self
        self._held[self.key] = [self._acquire(), 1]
        return self

    def __exit__(self, *exc: Any) -> None:
        held = self._held[self.key]
        held[1] -= 1
        if held[1] == 0:
            del self._held[self.key]
            self._release(held[0])

    def release_and_remove(self) -> None:
        """Remove the lock file (while still holding it) and release it: for an index directory
        that is being removed again because its first build failed. Only at the outermost level."""
        held = self._held.get(self.key)
        if held is not None and held[1] == 1:
            try:
                self.path.unlink()
            except OSError:
                pass

    def _locked(self, holder: str) -> IndexLockedError:
        return IndexLockedError(f"{self.dir} is being written by another hopgraph process (pid {holder}, lock "
                                f"{self.path}); wait for it to finish or choose another output path")

    def _acquire(self) -> int:
        pid = f"{os.getpid()}\n".encode()
        for _ in range(5):
            if fcntl is None:  # pragma: no cover - Windows
                try:
                    fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
                except FileExistsError:
                    holder = _read_pid(self.path)
                    if holder.isdigit() and not _pid_alive(int(holder)):
                        self.path.unlink(missing_ok=True)  # stale: its writer is gone
                        continue
                    raise self._locked(holder) from None
                os.write(fd, pid)
                os.fsync(fd)
                return fd
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise self._locked(_read_pid(self.path)) from None
            try:  # the file we locked must still be the one at the path (not removed meanwhile)
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            os.ftruncate(fd, 0)
            os.pwrite(fd, pid, 0)
            return fd
        raise self._locked(_read_pid(self.path))

    def _release(self, fd: int) -> None:
        if fcntl is None:  # pragma: no cover - Windows
            os.close(fd)
            self.path.unlink(missing_ok=True)
            return
        if self.path.exists():
            os.ftruncate(fd, 0)
        os.close(fd)  # closing drops the flock


class Lease:
    """A reader's shared lock on one generation (``readers.lock``): a writer removes a replaced
    generation only when it can take it exclusively. Released by :meth:`close` or garbage collection."""

    def __init__(self, gen_dir: Path) -> None:
        self.file = None
        if fcntl is None:  # pragma: no cover - Windows
            return
        self.file = open(gen_dir / READERS_FILE, "rb")
        fcntl.flock(self.file.fileno(), fcntl.LOCK_SH)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


# ---------------------------------------------------------------------------------------- layout
def _generation_number(name: str) -> int | None:
    m = _GEN.fullmatch(name)
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


# ---------------------------------------------------------------------------------------- writing
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
                                 for rel in _data_files(self.dir)}
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
            if _try_remove_generation(p):
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


def _try_remove_generation(gen_dir: Path) -> bool:
    """Remove a replaced generation unless a reader holds its lease (then a later write does)."""
    if fcntl is not None and (gen_dir / READERS_FILE).is_file():
        with open(gen_dir / READERS_FILE, "rb") as f:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            doomed = gen_dir.with_name(f".{gen_dir.name}.del-{os.getpid()}")
            os.rename(gen_dir, doomed)  # under the exclusive lease: no reader can take it now
    else:
        doomed = gen_dir.with_name(f".{gen_dir.name}.del-{os.getpid()}")
        os.rename(gen_dir, doomed)
    shutil.rmtree(doomed, ignore_errors=True)
    return True


# ---------------------------------------------------------------------------------------- arrays
def save_array(directory: Path, name: str, array: np.ndarray) -> dict[str, Any]:
    """Write ``name.npy`` in ``directory``; returns its manifest entry (shape, dtype). A memory-mapped
    array (e.g. STITCH's text embeddings built in a work directory, 3 GB at 10⁶ passages) is copied
    in blocks of :data:`SAVE_BLOCK_BYTES` read with plain reads (:class:`RowReader`), so its pages
    never enter the resident set; the file is byte for byte ``np.save``'s."""
    path = directory / f"{name}.npy"
    if _file_backed(array) and array.ndim and len(array):
        step = max(1, SAVE_BLOCK_BYTES // max(1, _row_bytes(array)))
        with open(path, "wb") as f, RowReader(array) as read:
            np.lib.format.write_array_header_1_0(f, np.lib.format.header_data_from_array_1_0(array))
            for a in range(0, len(array), step):
                read(a, min(a + step, len(array))).tofile(f)
    else:
        array = np.ascontiguousarray(array)
        np.save(path, array, allow_pickle=False)
    return {"file": f"{name}.npy", "shape": list(array.shape), "dtype": str(array.dtype)}


#: bytes per block when :func:`save_array` copies a memory-mapped array
SAVE_BLOCK_BYTES = 64 << 20


def save_arrays(directory: Path, arrays: dict[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    directory.mkdir(parents=True, exist_ok=True)
    return {name: save_array(directory, name, a) for name, a in arrays.items()}


def load_array(directory: Path, name: str, mmap: bool = True) -> np.ndarray:
    """Load ``name.npy`` (memory-mapped by default); IndexFormatError if missing or corrupt."""
    path = directory / f"{name}.npy"
    if not path.is_file():
        raise IndexFormatError(f"index file {path} is missing")
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise IndexFormatError(f"index file {path} is corrupt: {e}") from None


def load_arrays(directory: Path, names: Sequence[str], mmap: bool = True) -> dict[str, np.ndarray]:
    return {n: load_array(directory, n, mmap) for n in names}


def release_pages(*arrays: object) -> None:
    """Drop the resident pages of memory-mapped arrays from this process (``MADV_DONTNEED``; the OS
    page cache keeps them and the next read faults them back in): load-time validation reads whole
    arrays that a query reads a few rows of, and without this they stayed in the resident set
    (issue 14: 1.5 GB of a 10⁶-passage index). Anything not memory-mapped (or an OS without
    ``madvise``) is left as it is."""
    if not hasattr(mmap, "MADV_DONTNEED"):
        return
    for a in arrays:
        m = getattr(a, "_mmap", None) if isinstance(a, np.memmap) else None
        if m is not None:
            try:
                m.madvise(mmap.MADV_DONTNEED)
            except (OSError, ValueError):  # pragma: no cover - a closed or unusual mapping
                pass


def _file_backed(arr: np.ndarray) -> bool:
    """``arr`` is a C-contiguous memory mapping of a named file: its rows can be read with plain reads."""
    return isinstance(arr, np.memmap) and arr.flags.c_contiguous and bool(arr.filename)


def _row_bytes(arr: np.ndarray) -> int:
    """Bytes of one row (everything past the first axis) of ``arr``."""
    return int(np.prod(arr.shape[1:], dtype=np.int64)) * arr.dtype.itemsize


class RowReader:
    """Rows ``[a, b)`` of a stored array as a fresh C-contiguous copy (``with RowReader(arr) as read:
    read(a, b)``). A memory-mapped array is read from its file with plain reads, so the mapping's
    pages never enter the process's resident set (issue 14: copying a 1.5 GB IVF code array into
    faiss through the mapping held both copies at once); any other array is sliced."""

    def __init__(self, arr: np.ndarray) -> None:
        self.arr = arr
        self.file = None
        self.row_bytes = _row_bytes(arr)

    def __enter__(self) -> "RowReader":
        if _file_backed(self.arr):
            self.file = open(self.arr.filename, "rb", buffering=0)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.file is not None:
            self.file.close()

    def __call__(self, a: int, b: int, out: np.ndarray | None = None) -> np.ndarray:
        """Rows ``[a, b)``, into ``out`` when given (C-contiguous, ``b − a`` rows: a reused buffer)."""
        if self.file is None:
            if out is None:
                return np.ascontiguousarray(self.arr[a:b])
            out[...] = self.arr[a:b]
            return out
        if out is None:
            out = np.empty((b - a,) + tuple(self.arr.shape[1:]), self.arr.dtype)
        self.file.seek(int(self.arr.offset) + a * self.row_bytes)
        if self.file.readinto(memoryview(out.reshape(-1).view(np.uint8))) != out.nbytes:
            raise IndexFormatError(f"index file {self.arr.filename}: shorter than its header says")
        return out


def read_rows(arr: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``arr[rows]`` (any shape of row ids) as a fresh array. A C-contiguous memory-mapped ``arr`` is
    read row by row from its file with ``os.pread``: a scattered read through the mapping faults in
    the readahead window (up to megabytes of page-cache folios) around every row, and those pages
    stay in the process's resident set (issue 14: sampling 4,096 rows of a 1.5 GB X for the
    load-time unit check made 1.4 GB of it resident). Anything else is indexed."""
    rows = np.asarray(rows, np.int64)
    if not _file_backed(arr):
        return np.asarray(arr[rows])
    flat = rows.ravel()
    shape = tuple(arr.shape[1:])
    out = np.empty((len(flat),) + shape, arr.dtype)
    row_bytes = _row_bytes(arr)
    fd = os.open(arr.filename, os.O_RDONLY)
    try:
        for i, r in enumerate(flat.tolist()):
            chunk = os.pread(fd, row_bytes, int(arr.offset) + r * row_bytes)
            if len(chunk) != row_bytes:
                raise IndexFormatError(f"index file {arr.filename}: shorter than its header says")
            out[i] = np.frombuffer(chunk, arr.dtype).reshape(shape)
    finally:
        os.close(fd)
    return out.reshape(rows.shape + shape)


def check_array(directory: Path, entry: dict[str, Any]) -> np.ndarray:
    """Load a file listed in the manifest and verify its recorded shape and dtype; returns it."""
    arr = load_array(directory, Path(entry["file"]).stem)
    if list(arr.shape) != list(entry["shape"]) or str(arr.dtype) != entry["dtype"]:
        raise IndexFormatError(
            f"index file {directory / entry['file']} has shape {list(arr.shape)} dtype {arr.dtype}, "
            f"manifest says {entry['shape']} {entry['dtype']}"
        )
    return arr


def check_ids(arr: np.ndarray, bound: int, name: str, length: int | None = None) -> np.ndarray:
    """A stored 1-D integer id array whose values all lie in ``[0, bound)`` (and of ``length``
    entries when given); IndexFormatError naming ``name`` otherwise. Returns it. A memory-mapped
    array's pages, all read by the check, leave the resident set (:func:`release_pages`)."""
    stored, arr = arr, np.asarray(arr)
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise IndexFormatError(f"{name}: expected a 1-D integer array, got shape {arr.shape} dtype {arr.dtype}")
    if length is not None and len(arr) != length:
        raise IndexFormatError(f"{name}: {len(arr)} entries, expected {length}")
    if len(arr) and (int(arr.min()) < 0 or int(arr.max()) >= bound):
        raise IndexFormatError(f"{name}: values must lie in [0, {bound}), found [{int(arr.min())}, {int(arr.max())}]")
    release_pages(stored)
    return arr


def check_indptr(indptr: np.ndarray, n_rows: int, n_entries: int, name: str) -> np.ndarray:
    """A stored CSR row pointer: 1-D integer ``[n_rows + 1]``, from 0 to ``n_entries``, never decreasing
    (a memory-mapped one's pages released after the check, as :func:`check_ids` does)."""
    stored, indptr = indptr, np.asarray(indptr)
    if indptr.ndim != 1 or indptr.dtype.kind not in "iu" or len(indptr) != n_rows + 1:
        raise IndexFormatError(f"{name}: expected {n_rows + 1} integer row offsets, got shape {indptr.shape} "
                               f"dtype {indptr.dtype}")
    if int(indptr[0]) != 0 or int(indptr[-1]) != n_entries or (len(indptr) > 1 and np.diff(indptr).min() < 0):
        raise IndexFormatError(f"{name}: row offsets must run from 0 to {n_entries} without decreasing")
    release_pages(stored)
    return indptr


def check_finite(arr: np.ndarray, name: str, shape: tuple[int | None, ...] | None = None) -> np.ndarray:
    """A stored float array of ``shape`` (None = any size on that axis) with finite values only."""
    arr = np.asarray(arr)
    if arr.dtype.kind != "f":
        raise IndexFormatError(f"{name}: expected floats, got dtype {arr.dtype}")
    if shape is not None and (arr.ndim != len(shape) or any(s is not None and a != s for a, s in zip(arr.shape, shape))):
        raise IndexFormatError(f"{name}: shape {list(arr.shape)}, expected {[s if s is not None else '*' for s in shape]}")
    if arr.size and not np.isfinite(arr).all():
        raise IndexFormatError(f"{name}: holds NaN or infinite values")
    return arr


def check_unit_rows(X: np.ndarray, name: str, rows: int | None = None, dim: int | None = None,
                    allow_zero: bool = False) -> np.ndarray:
    """Stored embeddings ``[rows, dim]``: finite, every row of unit norm (or zero, with ``allow_zero``).
    Checked row by row up to
    :data:`UNIT_CHECK_FULL` values; above, a seeded sample of :data:`UNIT_CHECK_SAMPLE` rows plus the
    first and last (the checksum covers the rest). Returns X."""
    X = np.asarray(X) if not isinstance(X, np.memmap) else X
    if X.ndim != 2 or (rows is not None and X.shape[0] != rows) or (dim is not None and X.shape[1] != dim):
        raise IndexFormatError(f"{name}: shape {list(X.shape)}, expected [{rows}, {dim}]")
    if X.shape[1] == 0 or X.shape[0] == 0:
        return X
    if X.size <= UNIT_CHECK_FULL:
        sample = np.asarray(X, np.float64)
    else:
        idx = np.unique(np.r_[0, len(X) - 1, np.random.default_rng(0).integers(0, len(X), UNIT_CHECK_SAMPLE)])
        sample = np.asarray(read_rows(X, idx), np.float64)   # from the file: the mapping stays cold
    if not np.isfinite(sample).all():
        raise IndexFormatError(f"{name}: holds NaN or infinite values")
    norms = np.sqrt((sample * sample).sum(axis=1))
    bad = np.flatnonzero((np.abs(norms - 1.0) > UNIT_TOL) & ~(allow_zero & (norms == 0.0)))
    if len(bad):
        raise IndexFormatError(f"{name}: rows are not of unit norm (a sampled row has norm {norms[bad[0]]:.4f})")
    release_pages(X)  # the pages of a fully checked mapping
    return X


def pack_strings(strings: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """A string list as arrays for :func:`save_arrays`: the UTF-8 bytes of all strings
    concatenated (uint8) and their int64 offsets ``[n + 1]`` (compact and mmap-able)."""
    encoded = [s.encode("utf-8") for s in strings]
    offsets = np.zeros(len(encoded) + 1, np.int64)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    return np.frombuffer(b"".join(encoded), np.uint8).copy(), offsets


def check_packed(data: np.ndarray, offsets: np.ndarray, name: str, n: int | None = None) -> None:
    """Structural check of packed strings: 1-D uint8 bytes and ``n + 1`` non-decreasing offsets
    from 0 to ``len(data)``; IndexFormatError naming ``name``."""
    data, offsets = np.asarray(data) if not isinstance(data, np.memmap) else data, offsets
    if data.ndim != 1 or data.dtype != np.uint8:
        raise IndexFormatError(f"{name}: string bytes must be 1-D uint8, got shape {data.shape} dtype {data.dtype}")
    rows = len(offsets) - 1 if n is None else n
    check_indptr(offsets, rows, len(data), f"{name} offsets")


def check_utf8(data: np.ndarray, offsets: np.ndarray, name: str, block: int = 1 << 24) -> None:
    """Every string of packed strings (structure already checked by :func:`check_packed`) is valid
    UTF-8, checked without building them: the bytes decode as one stream (block by block, so the
    check holds at most ``block`` characters at a time) and no string starts inside a character
    (at a continuation byte). IndexFormatError naming ``name`` otherwise."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        with RowReader(data) as read:  # from the file: the mapped bytes do not become resident
            for s in range(0, len(data), block):
                decoder.decode(read(s, min(s + block, len(data))).tobytes(), final=s + block >= len(data))
        decoder.decode(b"", final=True)
    except UnicodeDecodeError as e:
        raise IndexFormatError(f"{name}: invalid UTF-8 ({e.reason})") from None
    starts = np.asarray(offsets[:-1])
    starts = starts[starts < np.asarray(offsets[1:])]  # non-empty strings
    inside = len(starts) and ((np.asarray(data)[starts] & 0xC0) == 0x80).any()
    release_pages(data, offsets)  # the reads above touched every page
    if inside:
        raise IndexFormatError(f"{name}: a string starts inside a UTF-8 character (bad offsets)")


def unpack_strings(data: np.ndarray, offsets: np.ndarray, name: str = "packed strings") -> list[str]:
    """The strings packed by :func:`pack_strings` (structure checked; invalid UTF-8 refused)."""
    check_packed(data, offsets, name)
    raw = np.asarray(data).tobytes()
    o = np.asarray(offsets).tolist()
    try:
        return [raw[o[i]:o[i + 1]].decode("utf-8") for i in range(len(o) - 1)]
    except UnicodeDecodeError as e:
        raise IndexFormatError(f"{name}: invalid UTF-8 ({e})") from None


def write_json(path: Path, obj: Any) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")


def new_manifest(**fields: Any) -> dict[str, Any]:
    return {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, "created": time.time(), **fields}

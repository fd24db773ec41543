"""The write lock of an index directory and the readers' leases on a commit (or, in format 3, a
generation)."""
from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path
from typing import Any, Callable


from ..errors import IndexLockedError
from .layout import LOCK_FILE, READERS_FILE


try:  # POSIX: kernel-managed locks (released when the holder dies)
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]


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
    ``O_EXCL`` pid file without fcntl). Re-entrant within a thread; another thread of the same
    process waits for it (a per-path ``threading.RLock``: a server's commits and its background
    merges take turns); use as a context manager."""

    _held: dict[str, list] = {}  # resolved index path → [fd, depth]
    _threads: dict[str, threading.RLock] = {}
    _threads_guard = threading.Lock()

    def __init__(self, index_dir: Path) -> None:
        self.dir = Path(index_dir)
        self.path = self.dir / LOCK_FILE
        self.key = str(self.dir.resolve())

    def _thread_lock(self) -> threading.RLock:
        with WriteLock._threads_guard:
            return WriteLock._threads.setdefault(self.key, threading.RLock())

    def __enter__(self) -> "WriteLock":
        rlock = self._thread_lock()
        rlock.acquire()
        try:
            held = self._held.get(self.key)
            if held is not None:
                held[1] += 1
                return self
            self._held[self.key] = [self._acquire(), 1]
        except BaseException:
            rlock.release()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        held = self._held[self.key]
        held[1] -= 1
        if held[1] == 0:
            del self._held[self.key]
            self._release(held[0])
        self._thread_lock().release()

    def held(self) -> bool:
        """Whether this thread holds the lock."""
        rlock = self._thread_lock()
        if not rlock.acquire(blocking=False):
            return False
        try:
            return self.key in self._held
        finally:
            rlock.release()

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
    """A reader's shared lock on one commit (its ``commit-NNNNNN.lock``; in format 3 a generation's
    ``readers.lock``): a writer removes a replaced commit only when it can take that lock
    exclusively. Released by :meth:`close` or garbage collection. FileNotFoundError when the lock
    file is gone (the commit was removed meanwhile: read ``CURRENT`` again)."""

    def __init__(self, lock_file: Path) -> None:
        self.file = None
        if fcntl is None:  # pragma: no cover - Windows
            return
        self.file = open(lock_file, "rb")
        fcntl.flock(self.file.fileno(), fcntl.LOCK_SH)

    def close(self) -> None:
        """Release the shared lock (a second call does nothing)."""
        if self.file is not None:
            self.file.close()
            self.file = None


def try_exclusive(lock_file: Path, remove: Callable[[], None]) -> bool:
    """Run ``remove`` while holding ``lock_file`` exclusively (no reader holds a lease on it); False
    (nothing done) when a reader holds one. Without fcntl, ``remove`` simply runs."""
    if fcntl is None or not lock_file.is_file():
        remove()
        return True
    with open(lock_file, "rb") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        remove()  # under the exclusive lock: no reader can take a lease now
    return True


def remove_unless_leased(gen_dir: Path) -> bool:
    """Remove a replaced format-3 generation unless a reader holds its lease (then a later write does)."""
    doomed = gen_dir.with_name(f".{gen_dir.name}.del-{os.getpid()}")
    if not try_exclusive(gen_dir / READERS_FILE, lambda: os.rename(gen_dir, doomed)):
        return False
    shutil.rmtree(doomed, ignore_errors=True)
    return True

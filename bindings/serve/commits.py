"""The write path of ``hopgraph serve``: group commit, merges, and commits made by other processes.

* **Group commit.** A write (``POST /passages``, ``DELETE /passages/{id}``) is applied to the served
  index in the search worker, between micro-batches, and is searchable from the next one. The
  writes that arrive within :data:`COMMIT_WINDOW_MS` of the first share one commit
  (:meth:`~hopgraph.index.Index.save`: one segment and deletes files), written by a thread of its
  own while searches go on; each write is answered once that commit is durable (``"committed":
  true``). A write waits while a commit is being written (the commit reads what it would change).
* **Merges.** After a commit, when the tiered policy (:func:`hopgraph.index.merge.next_merge`) finds
  segments to merge, one merge at a time runs in a background thread
  (:func:`hopgraph.index.merge.merge_range`: written beside the live commit, committed in place of
  the segments it replaces). A merge changes how the index is stored, not what it holds, so no
  answer changes; the server then loads the merged commit in that thread and adopts it between
  micro-batches (the files of the replaced segments are then released).
* **Commits of other processes.** Before each micro-batch and each write the server reads
  ``CURRENT``; when another process committed a change of content (``hopgraph add``, ``delete``,
  ``compact``), the server loads that commit and serves it from that micro-batch on. Its own writes
  not yet committed then are applied again on top of the other commit by its next commit (a rebase,
  :meth:`~hopgraph.index.Index.save`).

The index's write lock is held only while a commit or a merge's reservation and commit are written;
another writer that finds it held retries for up to :data:`LOCK_RETRY_SECONDS`.
"""
from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Awaitable, Callable

from ..engine import storage
from ..engine.errors import IndexFormatError, IndexLockedError
from ..index import Index
from ..index.merge import MERGE_FACTOR, merge_range, next_merge

log = logging.getLogger("hopgraph.serve")

#: writes arriving within this many milliseconds of the first share one commit
COMMIT_WINDOW_MS = 20.0
#: how long a commit waits for the write lock another process holds before the write is refused
LOCK_RETRY_SECONDS = 10.0


class LiveWrites:
    """The write path of one served index (module docstring). ``run_exclusive(fn)`` runs ``fn`` in
    the search worker between micro-batches (the batcher's); ``merge``: run the merge policy after
    commits."""

    def __init__(self, index: Index, run_exclusive: Callable[[Callable[[], Any]], Awaitable[Any]],
                 window_ms: float = COMMIT_WINDOW_MS, merge: bool = True, merge_factor: int = MERGE_FACTOR) -> None:
        self.index, self.run_exclusive = index, run_exclusive
        self.window_ms, self.merge, self.merge_factor = float(window_ms), merge, merge_factor
        self._lock: asyncio.Lock | None = None
        self._pending: list[asyncio.Future] = []
        self._flush_task: asyncio.Task | None = None
        self._committer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hopgraph-commit")
        self._merging: threading.Thread | None = None
        self._adopt: Index | None = None
        self.commits = 0
        self.merges = 0
        self.reopened = 0

    # ------------------------------------------------------------------ writes
    async def write(self, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """Apply the write ``fn`` in the search worker (after a commit being written, and after taking
        in another process's commit), then wait for the group commit that holds it; returns ``fn``'s
        answer with ``"committed"``."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            await self.refresh()
            result = await self.run_exclusive(fn)
        result["committed"] = await self.commit()
        return result

    async def commit(self) -> bool:
        """Wait for the commit of the current window (False: the index has no directory)."""
        if self.index.path is None:
            return False
        future = asyncio.get_running_loop().create_future()
        self._pending.append(future)
        if self._flush_task is None or self._flush_task.done():
            self._flush_task = asyncio.get_running_loop().create_task(self._flush())
        return await future

    async def _flush(self) -> None:
        await asyncio.sleep(self.window_ms / 1000)
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            waiting, self._pending = self._pending, []
            if not waiting:
                return
            try:
                await self._save()
            except BaseException as e:
                for f in waiting:
                    if not f.done():
                        f.set_exception(e)
                return
            self.commits += 1
            for f in waiting:
                if not f.done():
                    f.set_result(True)
        self._maybe_merge()

    async def _save(self) -> None:
        """Commit the index: in the commit thread while searches go on; when another process committed
        meanwhile, in the search worker (the rebase changes what searches read)."""
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + LOCK_RETRY_SECONDS
        while True:
            try:
                try:
                    await loop.run_in_executor(self._committer, lambda: self.index.save(rebase=False))
                except storage.StaleIndexError:
                    await self.run_exclusive(self.index.save)
                return
            except IndexLockedError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)

    # ------------------------------------------------------------------ others' commits
    async def refresh(self) -> None:
        """Take in a commit of another process (module docstring); also adopt a merged commit loaded in
        the background. Called before each micro-batch and each write (on the event loop)."""
        index = self.index
        if self._adopt is not None:
            fresh, self._adopt = self._adopt, None
            if fresh._committed.content == index._committed.content and len(fresh.X) == len(index.X) \
                    and not index._pending():
                await self.run_exclusive(lambda: index._adopt(fresh))
                self.reopened += 1
            else:
                fresh.close()
        if index.path is None or index._committed is None:
            return
        try:
            name = storage.read_current(index.path)[0]
        except IndexFormatError:
            return
        if name == index._committed.name:
            return
        try:
            content = json.loads((index.path / name).read_text()).get("content")
        except (OSError, ValueError):
            return
        if content == index._committed.content or index._pending() or \
                (self._flush_task is not None and not self._flush_task.done()):
            return  # a merge (same content), or our own writes to commit first: their commit rebases

        def reopen() -> None:
            index._adopt(Index.load(index.path, embedder=index._embedder, device=index.device, progress=False,
                                    verify="fast"))

        await self.run_exclusive(reopen)
        self.reopened += 1

    # ------------------------------------------------------------------ merges
    def _maybe_merge(self) -> None:
        if not self.merge or (self._merging is not None and self._merging.is_alive()):
            return
        sizes = [int(s["n_rows"]) for s in self.index._committed.manifest.get("segments", [])]
        if next_merge(sizes, self.merge_factor) is None:
            return
        self._merging = threading.Thread(target=self._merge, args=(self.index.path,), name="hopgraph-merge",
                                         daemon=True)
        self._merging.start()

    def _merge(self, path: Any) -> None:
        try:
            while True:
                sizes = [int(s["n_rows"]) for s in storage.read_manifest(path)["segments"]]
                step = next_merge(sizes, self.merge_factor)
                if step is None or merge_range(path, *step, Index) is None:
                    break
                self.merges += 1
            self._adopt = Index.load(path, embedder=self.index._embedder, device=self.index.device, progress=False,
                                     verify="fast")
        except (IndexLockedError, IndexFormatError, OSError) as e:
            log.warning("background merge of %s stopped: %s", path, e)
        except Exception:  # a merge failing must not stop the server; the index is left as it was
            log.exception("background merge of %s failed", path)

    # ------------------------------------------------------------------ state
    def health(self) -> dict[str, Any]:
        """``segments`` and ``commit`` (the commit served: name, time) for ``/health``."""
        c = self.index._committed
        if c is None:
            return {"segments": None, "commit": None}
        return {"segments": len(c.manifest.get("segments", [])),
                "commit": {"name": c.name, "created": c.manifest.get("created"), "content": c.content,
                           "commits_by_server": self.commits, "merges": self.merges}}

    async def stop(self) -> None:
        if self._flush_task is not None and not self._flush_task.done():
            await self._flush_task
        if self._merging is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._merging.join, 60)
        self._committer.shutdown(wait=True)

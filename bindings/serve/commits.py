"""The write path of ``hopgraph serve``: copy-on-write, group commit, merges, and commits made by other
processes.

* **Copy-on-write.** A write (``POST /passages``, ``DELETE /passages/{id}``) never changes the index
  being searched. It is applied to a second :class:`~hopgraph.index.Index` loaded from the index
  directory at the live commit (the one served: a write first takes in other processes' commits),
  held by the writer (:mod:`hopgraph.serve.writer`): in a writer process of its own, which also
  embeds the added passages, so that none of a write's work holds the server's interpreter lock
  (or, for an embedder given as a Python object, in a writer thread of the server); either runs
  below the searches' CPU priority (:data:`~hopgraph.serve.batcher.WRITER_NICE`), yet high enough
  that a lone write is not starved by a steady search load. Searches go on meanwhile and see the last commit.
* **Group commit.** The writes that arrive within :data:`COMMIT_WINDOW_MS` of the first are applied to
  that copy in order and share one commit (:meth:`~hopgraph.index.Index.save`: one segment and
  deletes files), written by the writer; the commit (loaded by the server, memory-mapped, when the
  writer is a process) then becomes the served index, swapped in between two micro-batches (a
  reference swap, :meth:`~hopgraph.index.Index._adopt`), and only then is each write answered
  (``"committed": true``): a client that has the answer finds the change in its next search. The
  next write loads a fresh copy from disk. A write waits while a commit is being written (its copy
  is loaded from that commit). A write that fails (or whose writer process dies) leaves the served
  index as it was: its copy is dropped, and the writes of the window applied before it are applied
  again to a fresh copy.
* **Merges.** After a commit, when the merge policy (:class:`~hopgraph.engine.storage.MergePolicy`,
  by default the tiered one) finds segments to merge, one merge at a time runs in a background thread
  (:func:`hopgraph.engine.index.merge_range`: written beside the live commit, committed in place of
  the segments it replaces). A merge changes how the index is stored, not what it holds, so no
  answer changes; the server then loads the merged commit in that thread and adopts it between
  micro-batches (the files of the replaced segments are then released).
* **Commits of other processes.** Before each micro-batch and each write the server reads
  ``CURRENT``; when another process committed a change of content (``hopgraph add``, ``delete``,
  ``compact``), the server loads that commit and serves it from that micro-batch on. Writes of the
  server not yet committed then are applied again on top of the other commit when their copy is
  committed (a rebase, :meth:`~hopgraph.index.Index.save`).

A write with a bad record, and, while :meth:`LiveWrites.is_latest` says the served index holds every
commit, a write of an id it holds or a delete of an id it lacks, is answered before it reaches
:meth:`LiveWrites.write` (:mod:`hopgraph.serve.app`); the write path checks each write again.

An index with no directory (built in memory) has no commit to copy: its writes are applied to the
served index itself in the search worker, between micro-batches, and are not committed
(``"committed": false``).

The index's write lock is held only while a commit or a merge's reservation and commit are written;
another writer that finds it held retries for up to :data:`LOCK_RETRY_SECONDS`.
"""
from __future__ import annotations

import asyncio
import json
import logging
import threading
from typing import Any, Awaitable, Callable, Sequence

from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_delay, wait_fixed

from ..engine import storage
from ..engine.errors import IndexFormatError, IndexLockedError
from ..engine.index import merge_range
from ..engine.storage import MERGE_FACTOR, MergePolicy, TieredMergePolicy
from ..index import Index
from .writer import ProcessWriter, ThreadWriter, load_live, process_embedder_entry, warm_up

log = logging.getLogger("hopgraph.serve")

#: writes arriving within this many milliseconds of the first share one commit
COMMIT_WINDOW_MS = 20.0
#: how long a commit waits for the write lock another process holds before the write is refused
LOCK_RETRY_SECONDS = 10.0


class LiveWrites:
    """The write path of one served index (module docstring). ``run_exclusive(fn)`` runs ``fn`` in
    the search worker between micro-batches (the batcher's); ``merge``: run the merge policy after
    commits (``merge_policy``; default the tiered policy of ``merge_factor``); ``process``: a writer process when the embedder allows; ``pipelines``: those served (each
    searched once on a commit before it is swapped in, :func:`~hopgraph.serve.writer.warm_up`)."""

    def __init__(self, index: Index, run_exclusive: Callable[[Callable[[], Any]], Awaitable[Any]],
                 window_ms: float = COMMIT_WINDOW_MS, merge: bool = True, merge_factor: int = MERGE_FACTOR,
                 process: bool = True, pipelines: Sequence[str] = (), merge_policy: MergePolicy | None = None) -> None:
        self.index, self.run_exclusive, self.pipelines = index, run_exclusive, list(pipelines)
        self.window_ms, self.merge = float(window_ms), merge
        self.merge_policy = merge_policy if merge_policy is not None else TieredMergePolicy(merge_factor)
        self._lock: asyncio.Lock | None = None
        self._pending: list[asyncio.Future] = []
        self._flush_task: asyncio.Task | None = None
        entry = process_embedder_entry(index) if process and index.path is not None else None
        #: holds the copy the writes of the open window are applied to (:mod:`hopgraph.serve.writer`)
        self.writer = ProcessWriter(index, entry) if entry is not None else ThreadWriter(index)
        #: the window's writes applied so far
        self._applied: list[Callable[[Index], Any]] = []
        self._merging: threading.Thread | None = None
        self._adopt: Index | None = None
        self.commits = 0
        self.merges = 0
        self.reopened = 0

    # ------------------------------------------------------------------ writes
    async def write(self, fn: Callable[[Index], dict[str, Any]]) -> dict[str, Any]:
        """Apply the write ``fn(index)`` (an op of :mod:`hopgraph.serve.writer`: picklable), after a
        commit being written and after taking in another process's commit, to the writer's copy of
        the served index; then wait for the group commit that holds it and makes it the served index.
        Returns ``fn``'s answer with ``"committed"`` and ``"commit"`` (the name of the commit served
        that holds it, None without one); raises what ``fn`` raised (the served index is then
        unchanged) or what the commit raised. Without an index directory, ``fn`` runs on the
        served index in the search worker and the answer has ``"committed": false`` (true for an
        index that commits its own writes, ``commits_writes``: a sharded index's router)."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        if self.in_place:
            async with self._lock:
                result = await self.run_exclusive(lambda: fn(self.index))
            result["committed"] = bool(getattr(self.index, "commits_writes", False))
            result["commit"] = self.commit_name()
            return result
        async with self._lock:
            await self.refresh()
            result = await self._apply(fn)
            future = asyncio.get_running_loop().create_future()
            self._pending.append(future)
            if self._flush_task is None or self._flush_task.done():
                self._flush_task = asyncio.get_running_loop().create_task(self._flush())
        result["committed"] = await future
        result["commit"] = self.commit_name()
        return result

    def commit_name(self) -> str | None:
        """The name of the commit served (None for an index that has none)."""
        committed = getattr(self.index, "_committed", None)
        return None if committed is None else committed.name

    @property
    def in_place(self) -> bool:
        """Whether writes are applied to the served index itself, in the search worker (an index with
        no directory): their preparation (embedding) then belongs beside the searches."""
        return self.index.path is None

    def is_latest(self) -> bool:
        """Whether the served index is known to hold every committed write: its directory's ``CURRENT``
        names the commit served (one read of that file), or it is an index in memory written only here.
        When it is, a write of an id it holds is refused before the write path; else (another process
        committed since, or a router others write too) the write path decides."""
        index = self.index
        if index.path is None:
            return not getattr(index, "commits_writes", False)
        try:
            return index._committed is not None and storage.read_current(index.path)[0] == index._committed.name
        except (IndexFormatError, OSError):
            return False

    def start_writer(self) -> None:
        """Start the writer process before the first write (:meth:`ProcessWriter.start`)."""
        if self.index.path is not None:
            self.writer.start()

    def _load(self) -> Index:
        """The live commit of the served index's directory, loaded with its embedder and device."""
        return load_live(self.index)

    async def _apply(self, fn: Callable[[Index], dict[str, Any]]) -> dict[str, Any]:
        """``fn(copy)`` in the writer, the copy loaded first when the window has none. When ``fn``
        raises, the copy is dropped and the writes applied before it are applied to a fresh one;
        then ``fn``'s exception is raised."""
        if not self.writer.is_open:
            if self.index._pending():  # changes of the served index itself (pipelines fitted at start)
                await self._save_served()
            await self.writer.open()
        try:
            result = await self.writer.apply(fn)
        except BaseException:
            await self._reapply()
            raise
        self._applied.append(fn)
        return result

    async def _reapply(self) -> None:
        """Drop the copy; apply the window's writes applied so far to a fresh one (when this fails,
        they fail with its exception: the served index then holds none of them)."""
        applied, self._applied = self._applied, []
        await self.writer.drop()
        if not applied:
            return
        try:
            await self.writer.open()
            for fn in applied:
                await self.writer.apply(fn)
            self._applied = applied
        except BaseException as e:
            await self.writer.drop()
            log.exception("applying the writes of the window again failed")
            waiting, self._pending = self._pending, []
            for f in waiting:
                if not f.done():
                    f.set_exception(e)

    async def _flush(self) -> None:
        await asyncio.sleep(self.window_ms / 1000)
        assert self._lock is not None
        async with self._lock:
            waiting, self._pending, self._applied = self._pending, [], []
            if not waiting:
                await self.writer.drop()
                return
            fresh = None
            try:
                if self.writer.is_open:
                    await _retry_locked(self.writer.save)
                    fresh = await self.writer.take()
                    await self.writer.call(lambda: self._warm(fresh))
                    await self.run_exclusive(lambda: self.index._adopt(fresh))
            except BaseException as e:
                await self.writer.drop()
                if fresh is not None:
                    fresh.close()
                for f in waiting:
                    if not f.done():
                        f.set_exception(e)
                return
            self.commits += 1
            for f in waiting:
                if not f.done():
                    f.set_result(True)
        self._maybe_merge()

    def _warm(self, index: Index) -> None:
        """:func:`~hopgraph.serve.writer.warm_up` of a committed index; a failure is logged (the write
        is committed: its answer does not depend on it)."""
        try:
            warm_up(index, self.pipelines)
        except Exception:
            log.exception("the warm-up search of a new commit failed")

    async def _save_served(self) -> None:
        """Commit what the served index holds beyond its commit (pipelines fitted when the server
        started), so that a copy loaded from disk has it too: in the writer thread while searches go
        on; when another process committed meanwhile, in the search worker (the rebase changes what
        searches read)."""

        async def save() -> None:
            try:
                await self.writer.call(lambda: self.index.save(rebase=False))
            except storage.StaleIndexError:
                await self.run_exclusive(self.index.save)

        await _retry_locked(save)

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
        if content == index._committed.content or index._pending() or self.writer.is_open or \
                (self._flush_task is not None and not self._flush_task.done()):
            return  # a merge (same content), or our own writes to commit first: their commit rebases
        await self.run_exclusive(lambda: index._adopt(self._load()))
        self.reopened += 1

    # ------------------------------------------------------------------ merges
    def _maybe_merge(self) -> None:
        if not self.merge or (self._merging is not None and self._merging.is_alive()):
            return
        sizes = [int(s["n_rows"]) for s in self.index._committed.manifest.get("segments", [])]
        if self.merge_policy.find_merge(sizes) is None:
            return
        self._merging = threading.Thread(target=self._merge, args=(self.index.path,), name="hopgraph-merge",
                                         daemon=True)
        self._merging.start()

    def _merge(self, path: Any) -> None:
        try:
            while True:
                step = self.merge_policy.find_merge(storage.SegmentInfos.read(path).sizes)
                if step is None or merge_range(path, *step) is None:
                    break
                self.merges += 1
            merged = self._load()
            self._warm(merged)
            self._adopt = merged
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
        """Finish the pending flush and a running merge (waiting at most a minute for it), then stop
        the writer."""
        if self._flush_task is not None and not self._flush_task.done():
            await self._flush_task
        if self._merging is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._merging.join, 60)
        await self.writer.stop()


async def _retry_locked(commit: Callable[[], Awaitable[Any]]) -> None:
    """Await ``commit()``, again while another process holds the index's write lock, for up to
    :data:`LOCK_RETRY_SECONDS` (then :class:`~hopgraph.engine.errors.IndexLockedError` is raised)."""
    async for attempt in AsyncRetrying(retry=retry_if_exception_type(IndexLockedError),
                                       stop=stop_after_delay(LOCK_RETRY_SECONDS), wait=wait_fixed(0.05), reraise=True):
        with attempt:
            await commit()

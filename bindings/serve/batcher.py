"""Micro-batching of concurrent search requests, in two lanes, with a deadline on every search.

Each request becomes a :class:`SearchJob` with a deadline (its arrival + ``request_timeout``) and,
from :mod:`hopgraph.serve.budget`, an estimate of its work and memory. Jobs whose work is at most
``heavy_cost`` default searches go to the **interactive** lane, the others to the **bulk** lane;
each lane has its own queue (``max_pending`` / ``max_pending_bulk`` queries, then
:class:`QueueFull`) and its own worker thread, so heavy requests never queue in front of light ones.
The bulk worker has strict lower priority: at each of its checkpoints it waits while the interactive
worker runs a group (so it holds neither the CPU nor the interpreter lock then), and it runs at the
lowest CPU priority with one intra-op thread.

A lane's dispatcher takes everything queued (under concurrent load it first waits
``batch_wait_ms`` for more), groups it by ``(pipeline, k, all-text?, group_by_document, params,
filters)``, splits groups whose summed memory estimate would pass ``max_request_mb``, and runs each
group as ONE embedding call and ONE pipeline search in its worker thread, so the event loop keeps
accepting requests meanwhile. A lone client never waits: the gathering window opens only after a
batch that held more than one request. A failing batch is re-run request by request, so one bad
request cannot change the answers to the others.

**Deadlines.** A group runs under a :class:`~hopgraph.engine.cancel.CancelToken` whose deadline is
the latest of its jobs'; the search checks it before each stage and query batch (and the embedding
between chunks; the bulk worker searches ``bulk_batch_size`` queries at a time), so a search past its
deadline stops within one stage and its worker takes the next group. The endpoint answers 504 at the deadline itself (:meth:`MicroBatcher.submit`), whether or
not the worker has stopped yet; jobs still queued at their deadline are dropped unrun.

**Writes** (``POST /passages``, ``DELETE /passages/{id}``) run in the interactive worker thread
holding the write side of a readers-writer lock whose read side every search holds: an index update
never overlaps a search in either lane.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from ..engine.cancel import CancelToken, SearchCancelled, cancellable, checkpoint
from ..index import Hit, Index
from .limits import ServeLimits

#: question texts embedded between two cancellation checkpoints
EMBED_CHUNK = 64


class QueueFull(Exception):
    """More queries are waiting in a lane than its limit allows."""


class DeadlineExceeded(Exception):
    """A search did not finish within the request timeout (it was stopped)."""


@dataclass
class SearchJob:
    """One request's queries: a question string, or a normalised embedding row."""

    pipeline: str
    k: int
    queries: Sequence[str | np.ndarray]
    future: asyncio.Future
    #: ``time.monotonic()`` by which the answer is due
    deadline: float
    enqueued: float = field(default_factory=time.perf_counter)
    #: query-time parameter overrides (validated by the endpoint), as sorted (name, value) pairs
    overrides: tuple[tuple[str, Any], ...] = ()
    #: one hit per document (``Index.search``'s ``group_by_document``)
    group_by_document: bool = False
    #: ``Index.search``'s filters: ``{"where": {...}, "allowed_ids": [...]}`` (validated by the endpoint)
    filters: dict[str, Any] = field(default_factory=dict)
    #: estimated peak memory (bytes) of the job's search
    memory: int = 0

    @property
    def all_text(self) -> bool:
        """Every query is a question string (none is an embedding row)."""
        return all(isinstance(q, str) for q in self.queries)

    @property
    def key(self) -> tuple[str, int, bool, bool, str, str]:
        """What jobs must share to be searched in one batch: pipeline, k, query kind, grouping,
        parameter overrides and filters."""
        return (self.pipeline, self.k, self.all_text, self.group_by_document, repr(self.overrides),
                json.dumps(self.filters, sort_keys=True))


@dataclass
class JobResult:
    """A job's answer: the hits per query, the timing the response reports, and the warnings for
    the client."""

    hits: list[list[Hit]]
    timing: dict[str, Any]
    #: what the client should know about its answer (e.g. a filter that passes no passage)
    warnings: list[str] = field(default_factory=list)


class GroupToken(CancelToken):
    """The token of a group of jobs run as one search: expired at the latest deadline of its jobs,
    or as soon as every job is answered (e.g. timed out) or abandoned by its client."""

    def __init__(self, jobs: Sequence[SearchJob], yield_to: threading.Event | None = None) -> None:
        super().__init__(max(job.deadline for job in jobs), "search")
        self.jobs = list(jobs)
        #: set while the interactive worker is idle: a bulk search waits for it at each checkpoint
        self.yield_to = yield_to

    def check(self) -> None:
        if self.yield_to is not None:
            while not self.yield_to.wait(0.05) and not self.expired:
                pass
        if all(job.future.done() for job in self.jobs):
            raise SearchCancelled("search stopped: every request of its batch was answered or abandoned")
        super().check()


class ReadWriteLock:
    """Many readers (searches) or one writer (an index update); a waiting writer goes first."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writing = False
        self._writers_waiting = 0

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Hold the lock as one of many readers (waits while a writer holds it or waits for it)."""
        with self._cond:
            while self._writing or self._writers_waiting:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Hold the lock alone (waits for the readers inside to leave; readers arriving meanwhile wait)."""
        with self._cond:
            self._writers_waiting += 1
            while self._writing or self._readers:
                self._cond.wait()
            self._writers_waiting -= 1
            self._writing = True
        try:
            yield
        finally:
            with self._cond:
                self._writing = False
                self._cond.notify_all()


def run_search(index: Index, pipeline: str, k: int, queries: Sequence[str | np.ndarray],
               embed: Callable[[list[str]], np.ndarray] | None = None, *, group_by_document: bool = False,
               filters: dict[str, Any] | None = None, mask: np.ndarray | None = None,
               **overrides: Any) -> tuple[list[list[Hit]], float, float]:
    """Search a mixed list of question texts and embedding rows with :meth:`Index.search_arrays`;
    returns (hits, embed_s, search_s).

    ``embed`` (default ``index.embed_queries``) embeds the texts, in one call. The façade
    validates the queries, embeds the texts and calls the pipeline (the variant with
    ``overrides``), as for ``Index.search``; all texts: the pipeline sees ``query_texts``;
    ``group_by_document``: one hit per document, as in ``Index.search``; ``filters``:
    ``Index.search``'s ``where`` / ``allowed_ids`` (a filter that passes nothing is reported by
    :func:`filter_warnings`, not warned); ``mask``: their mask, computed once for a group.
    """
    embed_s = 0.0

    def timed_embed(texts: list[str]) -> np.ndarray:
        nonlocal embed_s
        t = time.perf_counter()
        out = (embed or index.embed_queries)(texts)
        embed_s += time.perf_counter() - t
        return out

    t0 = time.perf_counter()
    ids, scores = index.search_arrays(list(queries), pipeline, k, embed=timed_embed,
                                      group_by_document=group_by_document, warn_empty=False, mask=mask,
                                      **(filters or {}), **overrides)
    return index.hits(ids, scores), embed_s, time.perf_counter() - t0 - embed_s


def filter_warnings(index: Index, filters: dict[str, Any] | None, mask: np.ndarray | None = None) -> list[str]:
    """The warnings of a request's filters (``mask``: their mask, when computed already): one when
    they pass no passage of the index."""
    if not filters:
        return []
    from ..index.search import empty_filter_message

    if mask is None:
        mask = index.filter_mask(filters.get("allowed_ids"), filters.get("where"))
    if mask is None or index.components.allowed(mask).any():
        return []
    return [empty_filter_message(filters.get("allowed_ids"), filters.get("where"))]


#: the niceness of the bulk search lane: the CPU the interactive lane leaves
BULK_NICE = 19
#: the niceness of the writer (thread or process): below the searches, yet a lone write is not starved
#: by a steady search load (Linux CFS weights: nice 5 takes about a quarter of a core the searches want)
WRITER_NICE = 5


def lower_priority(nice: int = BULK_NICE) -> None:
    """Give the calling thread the niceness ``nice`` (Linux: per thread; elsewhere it stays)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
    except (AttributeError, OSError):  # not Linux: the priority stays
        pass


def background_thread_setup(nice: int = BULK_NICE) -> None:
    """The calling thread (the bulk worker, the writer process): niceness ``nice`` and one torch /
    faiss thread, so it takes the CPU the interactive worker leaves."""
    lower_priority(nice)
    import torch

    torch.set_num_threads(1)
    try:
        import faiss

        faiss.omp_set_num_threads(1)
    except ImportError:  # pragma: no cover - faiss is a dependency
        pass


class Lane:
    """One queue of :class:`SearchJob` served by one worker thread in micro-batches."""

    def __init__(self, batcher: "MicroBatcher", name: str, max_pending: int, thread_prefix: str,
                 initializer: Callable[[], None] | None = None, chunk: int | None = None) -> None:
        self.batcher, self.name, self.max_pending = batcher, name, max_pending
        #: queries searched at a time (a cancellation checkpoint between); None: the whole group
        self.chunk = chunk
        #: set while this lane's worker runs no group
        self.idle = threading.Event()
        self.idle.set()
        #: another lane whose idle event this lane's searches wait for at each checkpoint (strict priority)
        self.yield_to: threading.Event | None = None
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=thread_prefix, initializer=initializer)
        self.queue: asyncio.Queue[SearchJob] | None = None
        self.task: asyncio.Task | None = None
        self.pending = 0
        self._gather = False

    def start(self) -> None:
        """Make the queue and start the dispatch task in the running event loop."""
        self.queue = asyncio.Queue()
        self.task = asyncio.get_running_loop().create_task(self._dispatch(), name=f"hopgraph-{self.name}")

    async def stop(self) -> None:
        """Stop dispatching: the task is cancelled, every job still queued fails with RuntimeError,
        and the worker thread finishes its batch."""
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except asyncio.CancelledError:
                pass
        while self.queue is not None and not self.queue.empty():
            job = self.queue.get_nowait()
            if not job.future.done():
                job.future.set_exception(RuntimeError("the server is shutting down"))
        self.executor.shutdown(wait=True)

    def put(self, job: SearchJob) -> None:
        """Queue ``job``; :class:`QueueFull` when its queries would take the lane over ``max_pending``,
        RuntimeError before :meth:`start`."""
        if self.queue is None:
            raise RuntimeError("MicroBatcher.start() was not awaited")
        if self.pending + len(job.queries) > self.max_pending:
            raise QueueFull(f"{self.pending} queries are already waiting for the {self.name} search worker "
                            f"(limit {self.max_pending}); retry later")
        self.pending += len(job.queries)
        job.future.add_done_callback(lambda _: self._release(len(job.queries)))
        self.queue.put_nowait(job)

    def _release(self, n: int) -> None:
        self.pending -= n

    async def _dispatch(self) -> None:
        loop = asyncio.get_running_loop()
        limits = self.batcher.limits
        assert self.queue is not None
        while True:
            jobs = [await self.queue.get()]
            if self._gather and limits.batch_wait_ms > 0:
                await asyncio.sleep(limits.batch_wait_ms / 1000)
            n = len(jobs[0].queries)
            while n < limits.batch_max_queries and not self.queue.empty():
                job = self.queue.get_nowait()
                jobs.append(job)
                n += len(job.queries)
            self._gather = len(jobs) > 1
            groups = self._groups(jobs)
            if self.batcher.refresh is not None and groups:
                try:
                    await self.batcher.refresh()
                except Exception:  # the index stays as it was; the batch is served from it
                    logging.getLogger("hopgraph.serve").exception("taking in another commit failed")
            for group in groups:
                started = time.perf_counter()
                try:
                    results = await loop.run_in_executor(self.executor, self._run, group)
                except Exception as e:  # the worker itself failed: answer, keep dispatching
                    results = [e] * len(group)
                self.batcher.batches += 1
                for job, result in zip(group, results):
                    if job.future.done():
                        continue
                    if isinstance(result, BaseException):
                        job.future.set_exception(result)
                    else:
                        result.timing["queue_ms"] = (started - job.enqueued) * 1000
                        result.timing["lane"] = self.name
                        job.future.set_result(result)

    def _run(self, group: list[SearchJob]) -> list[JobResult | BaseException]:
        self.idle.clear()
        try:
            return self.batcher.run_group(group, self.chunk, self.yield_to)
        finally:
            self.idle.set()

    def _groups(self, jobs: list[SearchJob]) -> list[list[SearchJob]]:
        """Jobs of equal key together, split where their memory estimates would pass the budget;
        jobs answered meanwhile (timed out, client gone) are dropped."""
        budget = self.batcher.limits.max_request_bytes
        groups: dict[tuple, list[list[SearchJob]]] = {}
        for job in jobs:
            if job.future.done():
                continue
            runs = groups.setdefault(job.key, [[]])
            if runs[-1] and sum(j.memory for j in runs[-1]) + job.memory > budget:
                runs.append([])
            runs[-1].append(job)
        return [run for runs in groups.values() for run in runs]


class MicroBatcher:
    """The interactive and bulk :class:`Lane` of a served index, and the write lock they share."""

    def __init__(self, index: Index, limits: ServeLimits) -> None:
        self.index = index
        self.limits = limits
        self.lock = ReadWriteLock()
        self.interactive = Lane(self, "interactive", limits.max_pending, "hopgraph-search")
        self.bulk = Lane(self, "bulk", limits.max_pending_bulk, "hopgraph-search-bulk", background_thread_setup,
                         chunk=limits.bulk_batch_size)
        self.bulk.yield_to = self.interactive.idle
        self.batches = 0
        #: awaited before each micro-batch (the write path's check for other processes' commits)
        self.refresh: Callable[[], Any] | None = None
        self._start_threads()

    def _start_threads(self) -> None:
        """Start both worker threads, the interactive one with torch's thread count first: a thread
        takes torch's last process-wide setting when it first runs torch, and the bulk worker sets 1,
        so the setting is then put back for threads started later."""
        import torch

        n = self.interactive.executor.submit(torch.get_num_threads).result()
        self.bulk.executor.submit(torch.get_num_threads).result()
        self.interactive.executor.submit(torch.set_num_threads, n).result()

    def embed_texts(self, texts: list[str]) -> np.ndarray:
        """Embed question texts with the index's query embedder (each row independent of the others,
        :func:`~hopgraph.engine.embedders.queries.encode_queries`), in chunks of :data:`EMBED_CHUNK`
        with a cancellation checkpoint between them. Runs in a worker thread."""
        parts = []
        for start in range(0, len(texts), EMBED_CHUNK):
            checkpoint()
            parts.append(self.index.embed_queries(texts[start:start + EMBED_CHUNK],
                                                  batch_size=self.limits.embed_batch_size))
        return np.concatenate(parts) if parts else np.zeros((0, self.index.X.shape[1]), np.float32)

    async def run_beside(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` (work for a write that does not change the index, e.g. embedding the passages of
        an in-place add) in the bulk worker thread, at its low priority: searches go on meanwhile."""
        return await asyncio.get_running_loop().run_in_executor(self.bulk.executor, fn)

    async def run_exclusive(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` (an index update) in the interactive worker thread, between its micro-batches,
        holding the write lock: it never overlaps a search of either lane."""

        def locked() -> Any:
            with self.lock.writing():
                return fn()

        return await asyncio.get_running_loop().run_in_executor(self.interactive.executor, locked)

    def warm_up(self) -> None:
        """Load the query embedder (and build its packed encoder) before the first request, in each
        worker thread (a thread's torch settings are its own)."""
        self.interactive.executor.submit(self.embed_texts, ["warm-up question"]).result()
        self.bulk.executor.submit(self.embed_texts, ["warm-up question"]).result()

    async def start(self) -> None:
        """Start both lanes (in the running event loop)."""
        self.interactive.start()
        self.bulk.start()

    async def stop(self) -> None:
        """Stop both lanes (:meth:`Lane.stop`)."""
        await self.interactive.stop()
        await self.bulk.stop()

    async def submit(self, pipeline: str, k: int, queries: Sequence[str | np.ndarray],
                     overrides: dict[str, Any] | None = None, *, group_by_document: bool = False,
                     filters: dict[str, Any] | None = None, heavy: bool = False, memory: int = 0,
                     deadline: float | None = None) -> JobResult:
        """Queue one request in the bulk lane (``heavy``) or the interactive one and wait for its
        hits until ``deadline`` (``time.monotonic()``; default: now + ``request_timeout``).

        Raises :class:`QueueFull` when the lane is full and :class:`DeadlineExceeded` at the
        deadline (the search is then stopped at its next checkpoint)."""
        loop = asyncio.get_running_loop()
        if deadline is None:
            deadline = time.monotonic() + self.limits.request_timeout
        job = SearchJob(pipeline, k, queries, loop.create_future(), deadline,
                        overrides=tuple(sorted((overrides or {}).items())), group_by_document=group_by_document,
                        filters=dict(filters or {}), memory=memory)
        (self.bulk if heavy else self.interactive).put(job)
        try:
            return await asyncio.wait_for(asyncio.shield(job.future), max(0.0, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            job.future.cancel()  # dropped if still queued; its group stops once every job is answered
            raise DeadlineExceeded(f"the search did not finish within this server's request timeout "
                                   f"({self.limits.request_timeout:g} s) and was stopped") from None
        except SearchCancelled as e:
            raise DeadlineExceeded(f"the search did not finish within this server's request timeout "
                                   f"({self.limits.request_timeout:g} s) and was stopped ({e})") from None
        finally:
            if not job.future.done():
                job.future.cancel()

    # ------------------------------------------------------------------ worker side
    def run_group(self, group: list[SearchJob], chunk: int | None = None,
                  yield_to: threading.Event | None = None) -> list[JobResult | BaseException]:
        """Run a group as one batch (``chunk`` queries at a time) under its :class:`GroupToken`
        (waiting for ``yield_to`` at each checkpoint); on failure, each request alone (runs in a
        worker thread, holding the read side of the write lock)."""
        token = GroupToken(group, yield_to)
        with self.lock.reading():
            try:
                with cancellable(token):
                    return self._run_batch(group, chunk)
            except SearchCancelled as e:
                return [e] * len(group)
            except Exception as e:
                if len(group) == 1:
                    return [e]
            out: list[JobResult | BaseException] = []
            for job in group:
                try:
                    with cancellable(GroupToken([job], yield_to)):
                        out.extend(self._run_batch([job], chunk))
                except Exception as e:
                    out.append(e)
            return out

    def _run_batch(self, group: list[SearchJob], chunk: int | None = None) -> list[JobResult]:
        queries = [q for job in group for q in job.queries]
        first = group[0]
        step = chunk or max(len(queries), 1)
        hits: list[list[Hit]] = []
        embed_s = search_s = 0.0
        filters = first.filters or {}
        mask = self.index.filter_mask(filters.get("allowed_ids"), filters.get("where")) if filters else None
        for start in range(0, len(queries), step):  # results never depend on the batch: chunks change nothing
            checkpoint()
            h, e, s = run_search(self.index, first.pipeline, first.k, queries[start:start + step], self.embed_texts,
                                 group_by_document=first.group_by_document, filters=first.filters, mask=mask,
                                 **dict(first.overrides))
            hits.extend(h)
            embed_s, search_s = embed_s + e, search_s + s
        notes = filter_warnings(self.index, first.filters, mask)
        timing = {"embed_ms": embed_s * 1000, "search_ms": search_s * 1000,
                  "batch_queries": len(queries), "batch_requests": len(group)}
        out, start = [], 0
        for job in group:
            out.append(JobResult(hits[start:start + len(job.queries)], dict(timing), list(notes)))
            start += len(job.queries)
        return out

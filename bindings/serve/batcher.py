"""Micro-batching of concurrent search requests.

Requests are queued; one dispatcher task takes everything queued (under concurrent
load it first waits ``batch_wait_ms`` for more), groups it by ``(pipeline, k,
all-text?, group_by_document, params, filters)`` and runs each group as ONE embedding call and ONE
pipeline search in a single worker thread, so the event loop keeps accepting requests meanwhile. A lone
client never waits: the gathering window opens only after a batch that held more
than one request. Question texts are embedded without padding when the embedder is a
BERT-type sentence-transformers model (:mod:`hopgraph.engine.embedders.packed_bert`): a batch of
questions of different lengths then costs the compute of its real tokens only.

A failing batch is re-run request by request, so one bad request cannot change the
answers to the others.
"""
from __future__ import annotations

import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ..engine.embedders.packed_bert import PackedBertEncoder
from ..index import Hit, Index
from .limits import ServeLimits


class QueueFull(Exception):
    """More queries are waiting than ``ServeLimits.max_pending`` allows."""


@dataclass
class SearchJob:
    """One request's queries: a question string, or a normalised embedding row."""

    pipeline: str
    k: int
    queries: Sequence[str | np.ndarray]
    future: asyncio.Future
    enqueued: float = field(default_factory=time.perf_counter)
    #: query-time parameter overrides (validated by the endpoint), as sorted (name, value) pairs
    overrides: tuple[tuple[str, Any], ...] = ()
    #: one hit per document (``Index.search``'s ``group_by_document``)
    group_by_document: bool = False
    #: ``Index.search``'s filters: ``{"where": {...}, "allowed_ids": [...]}`` (validated by the endpoint)
    filters: dict[str, Any] = field(default_factory=dict)

    @property
    def all_text(self) -> bool:
        return all(isinstance(q, str) for q in self.queries)

    @property
    def key(self) -> tuple[str, int, bool, bool, str, str]:
        return (self.pipeline, self.k, self.all_text, self.group_by_document, repr(self.overrides),
                json.dumps(self.filters, sort_keys=True))


@dataclass
class JobResult:
    hits: list[list[Hit]]
    timing: dict[str, Any]
    #: what the client should know about its answer (e.g. a filter that passes no passage)
    warnings: list[str] = field(default_factory=list)


def run_search(index: Index, pipeline: str, k: int, queries: Sequence[str | np.ndarray],
               embed: Callable[[list[str]], np.ndarray] | None = None, *, group_by_document: bool = False,
               filters: dict[str, Any] | None = None, **overrides: Any) -> tuple[list[list[Hit]], float, float]:
    """Search a mixed list of question texts and embedding rows with :meth:`Index.search_arrays`;
    returns (hits, embed_s, search_s).

    ``embed`` (default ``index.embed_queries``) embeds the texts, in one call. The façade
    validates the queries, embeds the texts and calls the pipeline (the variant with
    ``overrides``), as for ``Index.search``; all texts: the pipeline sees ``query_texts``;
    ``group_by_document``: one hit per document, as in ``Index.search``; ``filters``:
    ``Index.search``'s ``where`` / ``allowed_ids``.
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
                                      group_by_document=group_by_document, **(filters or {}), **overrides)
    return index.hits(ids, scores), embed_s, time.perf_counter() - t0 - embed_s


def filter_warnings(index: Index, filters: dict[str, Any] | None) -> list[str]:
    """The warnings of a request's filters: one when they pass no passage of the index."""
    if not filters:
        return []
    from ..index.search import empty_filter_message

    mask = index.filter_mask(filters.get("allowed_ids"), filters.get("where"))
    if mask is None or index.components.allowed(mask).any():
        return []
    return [empty_filter_message(filters.get("allowed_ids"), filters.get("where"))]


class MicroBatcher:
    """Queue of :class:`SearchJob` served by one worker thread in micro-batches."""

    def __init__(self, index: Index, limits: ServeLimits) -> None:
        self.index = index
        self.limits = limits
        self._queue: asyncio.Queue[SearchJob] | None = None
        self._task: asyncio.Task | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hopgraph-search")
        self._pending_queries = 0
        self._gather = False
        self._packed: PackedBertEncoder | None = None
        self._packed_checked = False
        self.batches = 0

    def embed_texts(self, texts: list[str]) -> np.ndarray:
        """Embed question texts: without padding (:class:`PackedBertEncoder`) when the index's
        embedder allows it, else with the embedder in length-sorted chunks of
        ``limits.embed_batch_size``. Runs in the worker thread only (see :meth:`warm_up`)."""
        if not self._packed_checked:
            embedder = self.index.embedder  # InputError for an index without a query embedder
            self._packed = PackedBertEncoder.for_embedder(embedder)
            self._packed_checked = True
        if self._packed is not None:
            return self._packed.encode(texts)
        return self.index.embed_queries(texts, batch_size=self.limits.embed_batch_size)

    async def run_exclusive(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` in the search worker thread, between micro-batches: an index update
        (``POST /passages``, ``DELETE /passages/{id}``) never overlaps a search."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    def warm_up(self) -> None:
        """Load the query embedder (and check the packed path) before the first request.

        Runs in the worker thread: once a second thread has run torch's parallel (OpenMP) regions,
        both threads' regions get slower (two thread teams on the same cores): a single MiniLM
        query took ~12 ms instead of ~6 ms on 2 cores."""
        self._executor.submit(self.embed_texts, ["warm-up question"]).result()

    async def start(self) -> None:
        self._queue = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._dispatch(), name="hopgraph-batcher")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        while self._queue is not None and not self._queue.empty():
            job = self._queue.get_nowait()
            if not job.future.done():
                job.future.set_exception(RuntimeError("the server is shutting down"))
        self._executor.shutdown(wait=True)

    async def submit(self, pipeline: str, k: int, queries: Sequence[str | np.ndarray],
                     overrides: dict[str, Any] | None = None, *, group_by_document: bool = False,
                     filters: dict[str, Any] | None = None) -> JobResult:
        """Queue one request and wait for its hits; raises :class:`QueueFull` when overloaded."""
        if self._queue is None:
            raise RuntimeError("MicroBatcher.start() was not awaited")
        if self._pending_queries + len(queries) > self.limits.max_pending:
            raise QueueFull(f"{self._pending_queries} queries are already waiting "
                            f"(limit {self.limits.max_pending}); retry later")
        job = SearchJob(pipeline, k, queries, asyncio.get_running_loop().create_future(),
                        overrides=tuple(sorted((overrides or {}).items())), group_by_document=group_by_document,
                        filters=dict(filters or {}))
        self._pending_queries += len(queries)
        try:
            self._queue.put_nowait(job)
            return await job.future
        finally:
            self._pending_queries -= len(queries)

    # ------------------------------------------------------------------ dispatcher
    async def _dispatch(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._queue is not None
        while True:
            jobs = [await self._queue.get()]
            if self._gather and self.limits.batch_wait_ms > 0:
                await asyncio.sleep(self.limits.batch_wait_ms / 1000)
            n = len(jobs[0].queries)
            while n < self.limits.batch_max_queries and not self._queue.empty():
                job = self._queue.get_nowait()
                jobs.append(job)
                n += len(job.queries)
            self._gather = len(jobs) > 1
            groups: dict[tuple[str, int, bool, bool, str], list[SearchJob]] = {}
            for job in jobs:
                if not job.future.done():  # a client that went away cancels its future
                    groups.setdefault(job.key, []).append(job)
            for (pipeline, k, *_), group in groups.items():
                started = time.perf_counter()
                try:
                    results = await loop.run_in_executor(self._executor, self._run_group, pipeline, k, group)
                except Exception as e:  # the worker itself failed: answer, keep dispatching
                    results = [e] * len(group)
                self.batches += 1
                for job, result in zip(group, results):
                    if job.future.done():
                        continue
                    if isinstance(result, BaseException):
                        job.future.set_exception(result)
                    else:
                        result.timing["queue_ms"] = (started - job.enqueued) * 1000
                        job.future.set_result(result)

    def _run_group(self, pipeline: str, k: int, group: list[SearchJob]) -> list[JobResult | BaseException]:
        """Run a group as one batch; on failure, each request alone (runs in the worker thread)."""
        try:
            return self._run_batch(pipeline, k, group)
        except Exception as e:
            if len(group) == 1:
                return [e]
        out: list[JobResult | BaseException] = []
        for job in group:
            try:
                out.extend(self._run_batch(pipeline, k, [job]))
            except Exception as e:
                out.append(e)
        return out

    def _run_batch(self, pipeline: str, k: int, group: list[SearchJob]) -> list[JobResult]:
        queries = [q for job in group for q in job.queries]
        hits, embed_s, search_s = run_search(self.index, pipeline, k, queries, self.embed_texts,
                                             group_by_document=group[0].group_by_document,
                                             filters=group[0].filters, **dict(group[0].overrides))
        notes = filter_warnings(self.index, group[0].filters)
        timing = {"embed_ms": embed_s * 1000, "search_ms": search_s * 1000,
                  "batch_queries": len(queries), "batch_requests": len(group)}
        out, start = [], 0
        for job in group:
            out.append(JobResult(hits[start:start + len(job.queries)], dict(timing), list(notes)))
            start += len(job.queries)
        return out

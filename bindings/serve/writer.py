"""Where ``hopgraph serve`` applies its writes: the writer's copy of the index, in a process of its own
(:class:`ProcessWriter`, the default) or in a thread of the server (:class:`ThreadWriter`).

A write is an *op*: a picklable callable ``op(index) -> dict`` (:func:`apply_add`,
:func:`apply_delete`) applied to the copy, which is loaded from the index directory at its live
commit. Either writer offers the same four steps to :class:`~hopgraph.serve.commits.LiveWrites`:
``open`` a copy, ``apply`` an op to it (an add embeds its passages there), ``save`` it (one new
segment; rebased on another process's commit made meanwhile) and ``take`` the committed index to
serve, or ``drop`` it. Searches never wait for any of them.

* :class:`ProcessWriter` keeps the copy, its embedder and all the work of a write (tokenising and
  embedding the passages, BM25 postings, extraction, graph rows, the commit) in one child process
  (``spawn``, from the low-priority writer thread), below the searches' CPU priority
  (:data:`~.batcher.WRITER_NICE`) with one torch and faiss thread: the server's interpreter lock and one core stay with the searches. The server then
  loads the commit it wrote (memory-mapped), searches it once (:func:`warm_up`) and serves it. A
  child that dies fails the write it was doing (the served index is unchanged: a commit is atomic)
  and a new one is started for the next write. Used when the child can re-create the served
  index's embedder from its spec (``minilm``, ``hashing-DIM``, ``st:``, ``openai:``). Measured:
  ``docs/decisions/serve-writes-process.md``.
* :class:`ThreadWriter` applies the ops in a thread of the server at the same priority (an
  embedder given as a Python object, or ``create_app(..., write_process=False)``).
"""
from __future__ import annotations

import asyncio
import multiprocessing
import pickle
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

import numpy as np

from ..engine.embedders.resolve import embedder_entry, embedder_from_entry, is_resolvable
from ..engine.pipelines import pipeline_class
from ..index import Index
from .batcher import WRITER_NICE, background_thread_setup, lower_priority

#: seconds a stopping server waits for its writer process before it is terminated
STOP_SECONDS = 30.0


def unchanged_ids(index: Index, records: Sequence[dict[str, Any]]) -> list[str]:
    """The ids of ``records`` (``{"id", "title", "text", "metadata"}``) that a live passage of ``index``
    has with the same title, text and metadata: an add repeated (a client's retry) changes nothing.
    Reads the id table and those passages only."""
    from ..engine.components.corpus import Corpus

    new = Corpus.coerce(list(records))
    held = dict(index.live_rows(new.ids))
    same = []
    for i, pid in enumerate(new.ids):
        if pid in held and index.passage(pid) == {"id": pid, "title": new.titles[i], "text": new.texts[i],
                                                  "metadata": new.meta(i)}:
            same.append(pid)
    return same


def apply_add(index: Index, records: Sequence[dict[str, Any]], upsert: bool,
              embeddings: np.ndarray | None = None) -> dict[str, Any]:
    """The op of ``POST /passages``: add ``records`` to ``index`` (embedding them, unless their
    ``embeddings`` are given, one row per record); the records ``index`` already holds unchanged
    (:func:`unchanged_ids`) are left as they are and answered as ``"unchanged"``."""
    same = set(unchanged_ids(index, records))
    keep = [i for i, r in enumerate(records) if r["id"] not in same]
    added: list[str] = []
    replaced: list[str] = []
    if keep:
        rows = None if embeddings is None else embeddings[keep]
        report = index.add([records[i] for i in keep], upsert=upsert, embeddings=rows)
        added, replaced = report.added, report.replaced
    return {"added": added, "replaced": replaced, "unchanged": [r["id"] for r in records if r["id"] in same],
            "passages": index.n_live}


def apply_delete(index: Index, pid: str) -> dict[str, Any]:
    """The op of ``DELETE /passages/{id}``; raises KeyError when ``index`` has no live passage ``pid``."""
    report = index.delete([pid])
    if report.unknown:
        raise KeyError(pid)
    return {"deleted": pid, "passages": index.n_live}


def load_live(index: Index) -> Index:
    """The live commit of ``index``'s directory, loaded with its embedder and device."""
    return Index.load(index.path, embedder=index._embedder, device=index.device, progress=False, verify="fast")


def warm_up(index: Index, pipelines: Sequence[str]) -> None:
    """One search of each of ``pipelines`` on ``index`` (just loaded or written), so that what a first
    search builds (the exact dense index over X, ...) is built before the index is served, not in a
    client's search. Cost: one search a pipeline (and one question embedded for those that need texts)."""
    for name in pipelines:
        query = "warm-up question" if pipeline_class(name).needs.query_texts else index.X[0]
        index.search_arrays([query], name, 1, warn_empty=False)


def process_embedder_entry(index: Index) -> dict[str, Any] | None:
    """The manifest entry a writer process re-creates ``index``'s embedder from; None when it cannot
    (an embedder given as a Python object, precomputed embeddings)."""
    dim = int(index.X.shape[1])
    entry = embedder_entry(index._embedder, index.embedder_name, dim) if index._embedder is not None \
        else dict(index.embedder_entry or {"name": index.embedder_name, "dim": dim})
    return entry if is_resolvable(str(entry.get("spec") or entry.get("name") or "")) else None


class ThreadWriter:
    """The copy in a writer thread of the server (at :data:`~.batcher.WRITER_NICE`)."""

    def __init__(self, served: Index) -> None:
        self.served = served
        self.copy: Index | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hopgraph-write",
                                            initializer=lower_priority, initargs=(WRITER_NICE,))

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    @property
    def is_open(self) -> bool:
        """The writer holds a copy of the served index."""
        return self.copy is not None

    def start(self) -> None:
        """Get ready for the first write (a thread needs nothing)."""

    def _load(self) -> Index:
        return load_live(self.served)

    async def open(self) -> None:
        """Load a writable copy of the served index in the writer."""
        self.copy = await self._run(self._load)

    async def apply(self, op: Callable[[Index], dict[str, Any]]) -> dict[str, Any]:
        """Run ``op`` on the copy in the writer; its result."""
        assert self.copy is not None
        return await self._run(op, self.copy)

    async def save(self) -> None:
        """Commit the copy (may raise :class:`~hopgraph.engine.errors.IndexLockedError`: call again)."""
        assert self.copy is not None
        await self._run(self.copy.save)

    async def take(self) -> Index:
        """The committed copy, to serve; the writer has no copy afterwards."""
        copy, self.copy = self.copy, None
        assert copy is not None
        return copy

    async def drop(self) -> None:
        """Close and forget the copy, if any (its uncommitted writes are lost)."""
        if self.copy is not None:
            self.copy.close()
            self.copy = None

    async def call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` in the writer thread (a commit of the served index itself)."""
        return await self._run(fn)

    async def stop(self) -> None:
        """Drop the copy and stop the writer (no call afterwards)."""
        await self.drop()
        self._executor.shutdown(wait=True)


class WriterProcessDied(RuntimeError):
    """The writer process exited while a write was applied or committed."""


class ProcessWriter(ThreadWriter):
    """The copy in a writer process (module docstring); the thread of :class:`ThreadWriter` only
    waits for the process's answers (and loads each commit to serve)."""

    def __init__(self, served: Index, entry: dict[str, Any]) -> None:
        super().__init__(served)
        self.entry = entry
        self._process: Any = None
        self._conn: Any = None
        self._open = False

    @property
    def is_open(self) -> bool:
        return self._open

    def start(self) -> None:
        """Start the writer process now (it imports, then loads the embedder, at its low priority), so
        that the first write does not wait for it; otherwise the first write starts it."""
        if self._process is None:
            self._executor.submit(self._start).result()

    def _start(self) -> None:
        ctx = multiprocessing.get_context("spawn")  # no fork of a threaded server (nor of a CUDA context)
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(target=_writer_main, args=(child, str(self.served.path), self.entry,
                                                                self.served.device),
                                    name="hopgraph-writer", daemon=True)
        self._process.start()
        child.close()

    def _call(self, kind: str, arg: Any = None) -> Any:
        """Send one request to the writer process (started when there is none) and wait for its answer;
        re-raises the exception it raised there. Runs in the writer thread."""
        if self._process is None or not self._process.is_alive():
            if self._process is not None:  # it died between two requests, and its copy with it
                self._process = None
                if self._open and kind != "open":
                    self._open = False
                    raise WriterProcessDied("the writer process exited before the write was committed; the "
                                            "index is unchanged")
            self._open = False
            if kind in ("drop", "stop"):
                return None
            self._start()
        try:
            self._conn.send((kind, arg))
            ok, value = self._conn.recv()
        except (EOFError, OSError):
            self._process.join(5)
            code = self._process.exitcode
            self._process = None
            self._open = False
            raise WriterProcessDied(f"the writer process exited (code {code}) during the write; the index is "
                                    f"unchanged") from None
        if not ok:
            raise value
        return value

    async def open(self) -> None:
        await self._run(self._call, "open")
        self._open = True

    async def apply(self, op: Callable[[Index], dict[str, Any]]) -> dict[str, Any]:
        return await self._run(self._call, "apply", op)

    async def save(self) -> None:
        await self._run(self._call, "commit")
        self._open = False

    async def take(self) -> Index:
        """The commit the writer process wrote (or a later one), loaded here to serve."""
        return await self._run(self._load)

    async def drop(self) -> None:
        if self._open and self._process is not None and self._process.is_alive():
            try:
                await self._run(self._call, "drop")
            except Exception:  # the process died: it holds no copy
                pass
        self._open = False

    async def stop(self) -> None:
        await self.drop()
        if self._process is not None:
            process, self._process = self._process, None
            try:
                self._conn.send(("stop", None))
            except OSError:
                pass
            await asyncio.get_running_loop().run_in_executor(None, process.join, STOP_SECONDS)
            if process.is_alive():
                process.terminate()
            self._conn.close()
        self._executor.shutdown(wait=True)


def _writer_main(conn: Any, path: str, entry: dict[str, Any], device: str) -> None:
    """The writer process: answer ``(kind, arg)`` requests (open / apply / commit / drop / stop) with
    ``(True, value)`` or ``(False, exception)`` until told to stop or the server is gone."""
    background_thread_setup(WRITER_NICE)  # one core stays with the searches
    embedder = embedder_from_entry(entry, f"index {path}")
    copy: Index | None = None
    while True:
        try:
            kind, arg = conn.recv()
        except (EOFError, OSError):  # the server is gone
            break
        answer: tuple[bool, Any] = (True, None)
        try:
            if kind == "open":
                if copy is not None:
                    copy.close()
                copy = Index.load(path, embedder=embedder, device=device, progress=False, verify="fast")
            elif kind == "apply":
                answer = (True, arg(copy))
            elif kind == "commit":
                copy.save()
                copy.close()
                copy = None
            elif kind == "drop":
                if copy is not None:
                    copy.close()
                copy = None
            elif kind == "stop":
                break
        except BaseException as e:  # noqa: BLE001 - every failure goes back to the server
            e.add_note("in the writer process:\n" + "".join(traceback.format_exception(e)))
            answer = (False, _picklable(e))
        try:
            conn.send(answer)
        except OSError:  # the server is gone
            break
    if copy is not None:
        copy.close()


def _picklable(e: BaseException) -> BaseException:
    """``e``, or a RuntimeError naming it when it cannot be sent to the server."""
    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:
        return RuntimeError(f"{type(e).__name__}: {e}")

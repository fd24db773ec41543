"""What both framework retrievers share: one batched search over a hopgraph source and the
passage text and metadata of each hit. Imports no framework.

A *source* is anything with ``search(questions, pipeline=..., k=..., **kwargs) -> list[list[Hit]]``:
a :class:`hopgraph.Index` (local), a :class:`hopgraph.Client` (a ``hopgraph serve`` instance) or an
asynchronous client whose ``search`` is a coroutine function (``hopgraph.AsyncClient``).
"""
from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any, Mapping, Sequence

from ..engine.errors import InputError


def require(module: str, extra: str, what: str) -> Any:
    """Import ``module`` or raise ModuleNotFoundError naming the extra that installs it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError(f"{what} needs the package {e.name!r}: pip install 'hopgraph[{extra}]'",
                                  name=e.name) from e


def is_async_source(source: Any) -> bool:
    """True when ``source.search`` is a coroutine function (an asynchronous client)."""
    return inspect.iscoroutinefunction(getattr(source, "search", None))


def check_source(source: Any, name: str = "index") -> Any:
    """``source`` if it has a callable ``search``, else InputError naming what was given."""
    if not callable(getattr(source, "search", None)):
        raise InputError(f"{name} must be a hopgraph.Index, hopgraph.Client or hopgraph.AsyncClient "
                         f"(anything with .search(questions, pipeline=, k=)), got {type(source).__name__}")
    return source


def _run_coroutine(coroutine: Any) -> Any:
    """Run ``coroutine`` to completion from synchronous code, in a fresh thread with its own event loop
    (so it also works when the caller's thread already runs a loop)."""
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = asyncio.run(coroutine)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            result["error"] = e

    thread = threading.Thread(target=target, name="hopgraph-async-search", daemon=True)
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["value"]


def search(source: Any, questions: Sequence[str], pipeline: str, k: int,
           search_kwargs: Mapping[str, Any] | None = None) -> list[list[Any]]:
    """One batched ``source.search`` for all ``questions`` (no call for an empty list)."""
    questions = list(questions)
    if not questions:
        return []
    call = source.search(questions, pipeline=pipeline, k=k, **dict(search_kwargs or {}))
    results = _run_coroutine(call) if inspect.iscoroutine(call) else call
    return _check_results(results, len(questions))


async def asearch(source: Any, questions: Sequence[str], pipeline: str, k: int,
                  search_kwargs: Mapping[str, Any] | None = None, async_source: Any = None) -> list[list[Any]]:
    """:func:`search` without blocking the event loop: awaited on ``async_source`` (or ``source``)
    when its ``search`` is a coroutine function, else the synchronous search in a worker thread."""
    questions = list(questions)
    if not questions:
        return []
    kwargs = dict(search_kwargs or {})
    for candidate in (async_source, source):
        if candidate is not None and is_async_source(candidate):
            results = await candidate.search(questions, pipeline=pipeline, k=k, **kwargs)
            return _check_results(results, len(questions))
    return await asyncio.to_thread(search, source, questions, pipeline, k, kwargs)


def _check_results(results: Any, n: int) -> list[list[Any]]:
    results = list(results)
    if len(results) != n:
        raise InputError(f"the search returned {len(results)} result lists for {n} questions")
    return results


def passage(source: Any, hit: Any) -> tuple[str, dict[str, Any]]:
    """``(text, metadata)`` of a hit's passage: the hit's own ``text`` / ``metadata`` when it carries
    them, else looked up in ``source.corpus`` (a local Index), else ``("", {})`` (a client whose hits
    carry no text)."""
    text = getattr(hit, "text", None)
    meta = getattr(hit, "metadata", None)
    corpus = getattr(source, "corpus", None)
    if corpus is not None and (not text or meta is None):
        row = corpus.position(hit.id)
        if not text:
            text = corpus.texts[row]
        if meta is None:
            meta = corpus.meta(row)
    return str(text or ""), dict(meta or {})


def hit_metadata(source: Any, hit: Any, pipeline: str) -> tuple[str, dict[str, Any]]:
    """``(text, metadata)`` for a framework document: the passage's own metadata, then hopgraph's
    ``id``, ``title``, ``score``, ``rank`` and ``pipeline`` (which win over equal passage keys)."""
    text, meta = passage(source, hit)
    meta.update(id=hit.id, title=hit.title, score=float(hit.score), rank=int(hit.rank), pipeline=pipeline)
    return text, meta

"""What both framework retrievers share: one batched search over a hopgraph source and the
passage text and metadata of each hit. Imports no framework.

A *source* is anything with ``search(questions, pipeline=..., k=..., **kwargs) -> list[list[Hit]]``:
a :class:`hopgraph.Index` (local), a :class:`hopgraph.Client` (a ``hopgraph serve`` instance) or an
asynchronous client whose ``search`` is a coroutine function (``hopgraph.AsyncClient``).

A retriever's ``search_kwargs`` mean the same for every source (:func:`search_arguments` maps them):
``with_text`` and ``group_by_document`` (booleans, as in ``Index.search``), and pipeline parameters,
given by name (``{"gamma": 0.05}``) or as ``{"params": {"gamma": 0.05}}``. A source whose ``search``
has a ``params`` parameter (the clients) gets them as ``params={...}``, any other (``Index.search``)
as keyword arguments.
"""
from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any, Callable, Mapping, Sequence, TypeVar

from ..engine.errors import InputError

T = TypeVar("T")


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


#: ``search_kwargs`` passed to every source as they are (the rest are pipeline parameters)
SEARCH_OPTIONS = ("with_text", "group_by_document")
#: what the retriever sets itself, so ``search_kwargs`` may not
RETRIEVER_ARGUMENTS = ("questions", "queries", "pipeline", "k", "query_embeddings")


def split_search_kwargs(search_kwargs: Mapping[str, Any] | None) -> tuple[dict[str, bool], dict[str, Any]]:
    """``(options, pipeline parameters)`` of a retriever's ``search_kwargs``; InputError naming the
    key for one the retriever sets itself, a non-boolean option, a ``params`` that is not a mapping,
    or a parameter given twice. The parameters' names and values are checked by the search itself."""
    if search_kwargs is None:
        return {}, {}
    if not isinstance(search_kwargs, Mapping):
        raise InputError(f"search_kwargs must be a mapping, got {type(search_kwargs).__name__}")
    kwargs = dict(search_kwargs)
    for name in RETRIEVER_ARGUMENTS:
        if name in kwargs:
            raise InputError(f"search_kwargs may not set {name!r}: the retriever sets it "
                             "(give pipeline= and k= to the retriever)")
    options = {name: kwargs.pop(name) for name in SEARCH_OPTIONS if name in kwargs}
    for name, value in options.items():
        if not isinstance(value, bool):
            raise InputError(f"search_kwargs[{name!r}] must be true or false, got {value!r}")
    nested = kwargs.pop("params", None)
    if nested is None:
        nested = {}
    if not isinstance(nested, Mapping):
        raise InputError(f"search_kwargs['params'] must be a mapping of pipeline parameters, "
                         f"got {type(nested).__name__}")
    twice = sorted(set(nested) & set(kwargs))
    if twice:
        raise InputError(f"search_kwargs gives the pipeline parameter(s) {', '.join(map(repr, twice))} twice "
                         "(by name and in 'params')")
    return options, {**kwargs, **nested}


def takes_params(source: Any) -> bool:
    """True when ``source.search`` takes pipeline parameters as one ``params=`` mapping
    (:class:`hopgraph.Client`, :class:`hopgraph.AsyncClient`), False when as keyword arguments
    (:class:`hopgraph.Index`)."""
    try:
        parameter = inspect.signature(source.search).parameters.get("params")
    except (TypeError, ValueError):  # no signature to read: keyword arguments, as Index.search
        return False
    return parameter is not None and parameter.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                        inspect.Parameter.KEYWORD_ONLY)


def search_arguments(source: Any, search_kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
    """The keyword arguments of ``source.search`` (besides ``pipeline`` and ``k``) for a retriever's
    ``search_kwargs`` (see the module docstring): the options as they are, and the pipeline
    parameters as ``params=`` for a client, as keyword arguments for an Index."""
    options, params = split_search_kwargs(search_kwargs)
    if not params:
        return dict(options)
    return {**options, "params": params} if takes_params(source) else {**options, **params}


def wants_text(search_kwargs: Mapping[str, Any] | None) -> bool:
    """False when ``search_kwargs`` turn the passage text off (``with_text=False``)."""
    return split_search_kwargs(search_kwargs)[0].get("with_text", True)


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
    """One batched ``source.search`` for all ``questions`` (no call for an empty list), with
    ``search_kwargs`` mapped by :func:`search_arguments`."""
    questions = list(questions)
    if not questions:
        return []
    call = source.search(questions, pipeline=pipeline, k=k, **search_arguments(source, search_kwargs))
    results = _run_coroutine(call) if inspect.iscoroutine(call) else call
    return _check_results(results, len(questions))


async def asearch(source: Any, questions: Sequence[str], pipeline: str, k: int,
                  search_kwargs: Mapping[str, Any] | None = None, async_source: Any = None) -> list[list[Any]]:
    """:func:`search` without blocking the event loop: awaited on ``async_source`` (or ``source``)
    when its ``search`` is a coroutine function, else the synchronous search in a worker thread."""
    questions = list(questions)
    if not questions:
        return []
    for candidate in (async_source, source):
        if candidate is not None and is_async_source(candidate):
            results = await candidate.search(questions, pipeline=pipeline, k=k,
                                             **search_arguments(candidate, search_kwargs))
            return _check_results(results, len(questions))
    return await asyncio.to_thread(search, source, questions, pipeline, k, search_kwargs)


def _check_results(results: Any, n: int) -> list[list[Any]]:
    results = list(results)
    if len(results) != n:
        raise InputError(f"the search returned {len(results)} result lists for {n} questions")
    return results


def passage(source: Any, hit: Any, with_text: bool = True) -> tuple[str, dict[str, Any]]:
    """``(text, metadata)`` of a hit's passage: the hit's own ``text`` / ``metadata`` when it carries
    them, else looked up in ``source.corpus`` (a local Index), else ``("", {})`` (a client whose hits
    carry no text). ``with_text=False``: the text is ``""`` for every source (not looked up)."""
    text = getattr(hit, "text", None) if with_text else ""
    meta = getattr(hit, "metadata", None)
    corpus = getattr(source, "corpus", None)
    if corpus is not None and ((with_text and not text) or meta is None):
        row = corpus.position(hit.id)
        if with_text and not text:
            text = corpus.texts[row]
        if meta is None:
            meta = corpus.meta(row)
    return str(text or ""), dict(meta or {})


def hit_metadata(source: Any, hit: Any, pipeline: str, with_text: bool = True) -> tuple[str, dict[str, Any]]:
    """``(text, metadata)`` for a framework document: the passage's own metadata, then hopgraph's
    ``id``, ``title``, ``score``, ``rank`` and ``pipeline`` (which win over equal passage keys);
    ``with_text`` as in :func:`passage`."""
    text, meta = passage(source, hit, with_text)
    meta.update(id=hit.id, title=hit.title, score=float(hit.score), rank=int(hit.rank), pipeline=pipeline)
    return text, meta


def convert_hits(source: Any, results: list[list[Any]], pipeline: str, search_kwargs: Mapping[str, Any] | None,
                 make: Callable[[Any, str, dict[str, Any]], T]) -> list[list[T]]:
    """One list of framework objects per question: ``make(hit, text, metadata)`` of every hit, with
    :func:`hit_metadata`'s text and metadata (text only when ``search_kwargs`` ask for it,
    :func:`wants_text`)."""
    with_text = wants_text(search_kwargs)
    return [[make(hit, *hit_metadata(source, hit, pipeline, with_text)) for hit in hits] for hits in results]

"""What both framework retrievers share: one batched search over a hopgraph source and the
passage text and metadata of each hit. Imports no framework.

A *source* is anything with ``search(questions, pipeline=..., k=..., **kwargs) -> list[list[Hit]]``:
a :class:`hopgraph.Index` (local), a :class:`hopgraph.Client` (a ``hopgraph serve`` instance) or an
asynchronous client whose ``search`` is a coroutine function (``hopgraph.AsyncClient``). A retriever
holds a synchronous source, an asynchronous one, or both (:class:`Sources`): its synchronous calls
use the synchronous source, else run the asynchronous one on the process's background event loop
(:func:`hopgraph.client.run_sync`), and its asynchronous calls await the asynchronous source, else
run the synchronous one in a worker thread. Either way any number of calls in a row, from code that
runs an event loop or not.

A retriever's ``search_kwargs`` mean the same for every source (:func:`search_arguments` maps them):
``k`` (overrides the retriever's ``k``), ``with_text`` and ``group_by_document`` (booleans, as in
``Index.search``), the filters ``where`` and ``allowed_ids``, and pipeline parameters, given by
name (``{"gamma": 0.05}``) or as ``{"params": {"gamma": 0.05}}``. A source whose ``search`` has a
``params`` parameter (the clients) gets the parameters as ``params={...}``, any other
(``Index.search``) as keyword arguments.
"""
from __future__ import annotations

import asyncio
import inspect
from typing import Any, Callable, Mapping, Sequence, TypeVar

from ..engine.errors import InputError
from ..engine.ranking import check_k

T = TypeVar("T")


def require(module: str, extra: str, what: str) -> Any:
    """Import ``module`` or raise ModuleNotFoundError naming the extra that installs it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError(f"{what} needs the package {e.name!r}: pip install 'hopgraph[{extra}]'",
                                  name=e.name) from e


class Sources:
    """The sources of a retriever: ``sync`` (an Index or a Client) and / or ``asynchronous`` (an
    AsyncClient); at least one."""

    def __init__(self, sync: Any = None, asynchronous: Any = None) -> None:
        self.sync, self.asynchronous = sync, asynchronous

    @classmethod
    def of(cls, index: Any = None, client: Any = None, async_client: Any = None) -> "Sources":
        """The sources of a retriever's ``index=`` / ``client=`` (the same role: give one) and
        ``async_client=``; an asynchronous ``index`` or ``client`` counts as ``async_client``.
        InputError naming the argument for anything else."""
        if index is not None and client is not None:
            raise InputError("give index= or client= (the same role: the retriever's source), not both")
        name, primary = ("client", client) if client is not None else ("index", index)
        if async_client is not None and not is_async_source(async_client):
            raise InputError(f"async_client must have an async search(...), got {type(async_client).__name__}")
        if primary is None:
            if async_client is None:
                raise InputError("give index= (a hopgraph.Index), client= (a hopgraph.Client) and / or "
                                 "async_client= (a hopgraph.AsyncClient)")
            return cls(None, async_client)
        check_source(primary, name)
        if is_async_source(primary):
            if async_client is not None:
                raise InputError(f"{name}= is asynchronous and async_client= is given too: "
                                 "give one asynchronous source")
            return cls(None, primary)
        return cls(primary, async_client)

    @property
    def any(self) -> Any:
        """The synchronous source, else the asynchronous one (to read hits' passages from)."""
        return self.sync if self.sync is not None else self.asynchronous


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
SEARCH_OPTIONS = ("with_text", "group_by_document", "where", "allowed_ids")
#: what the retriever sets itself, so ``search_kwargs`` may not
RETRIEVER_ARGUMENTS = ("questions", "queries", "pipeline", "query_embeddings")


def split_search_kwargs(search_kwargs: Mapping[str, Any] | None) -> tuple[dict[str, bool], dict[str, Any]]:
    """``(options, pipeline parameters)`` of a retriever's ``search_kwargs`` (``k`` checked, then left
    to :func:`search_k`); InputError naming the key for one the retriever sets itself, a bad ``k`` or
    option, a ``params`` that is not a mapping, or a parameter given twice. The parameters' names and
    values, and the filters' content, are checked by the search itself."""
    if search_kwargs is None:
        return {}, {}
    if not isinstance(search_kwargs, Mapping):
        raise InputError(f"search_kwargs must be a mapping, got {type(search_kwargs).__name__}")
    kwargs = dict(search_kwargs)
    for name in RETRIEVER_ARGUMENTS:
        if name in kwargs:
            raise InputError(f"search_kwargs may not set {name!r}: the retriever sets it "
                             "(give pipeline= and k= to the retriever)")
    if "k" in kwargs:
        check_k(kwargs.pop("k"), "search_kwargs['k']")
    options = {name: kwargs.pop(name) for name in SEARCH_OPTIONS if name in kwargs}
    for name, value in options.items():
        if name == "where" and not isinstance(value, Mapping):
            raise InputError(f"search_kwargs['where'] must be a filter object, got {type(value).__name__}")
        if name == "allowed_ids" and (isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple))):
            raise InputError(f"search_kwargs['allowed_ids'] must be a list of passage ids, got {type(value).__name__}")
        if name in ("with_text", "group_by_document") and not isinstance(value, bool):
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


def search_k(k: int, search_kwargs: Mapping[str, Any] | None) -> int:
    """``search_kwargs["k"]`` when given (checked by :func:`split_search_kwargs`), else ``k``."""
    return int(search_kwargs["k"]) if search_kwargs and "k" in search_kwargs else k


def wants_text(search_kwargs: Mapping[str, Any] | None) -> bool:
    """False when ``search_kwargs`` turn the passage text off (``with_text=False``)."""
    return split_search_kwargs(search_kwargs)[0].get("with_text", True)


def search(sources: Sources, questions: Sequence[str], pipeline: str, k: int,
           search_kwargs: Mapping[str, Any] | None = None) -> list[list[Any]]:
    """One batched search for all ``questions`` (no call for an empty list), with ``search_kwargs``
    mapped by :func:`search_arguments`: on the synchronous source, else on the asynchronous one
    run to completion by :func:`hopgraph.client.run_sync`."""
    questions = list(questions)
    if not questions:
        return []
    source = sources.sync if sources.sync is not None else sources.asynchronous
    call = source.search(questions, pipeline=pipeline, k=search_k(k, search_kwargs),
                         **search_arguments(source, search_kwargs))
    if inspect.isawaitable(call):
        from ..client import run_sync

        call = run_sync(call)
    return _check_results(call, len(questions))


async def asearch(sources: Sources, questions: Sequence[str], pipeline: str, k: int,
                  search_kwargs: Mapping[str, Any] | None = None) -> list[list[Any]]:
    """:func:`search` without blocking the event loop: awaited on the asynchronous source, else the
    synchronous search in a worker thread."""
    questions = list(questions)
    if not questions:
        return []
    if sources.asynchronous is not None:
        source = sources.asynchronous
        results = await source.search(questions, pipeline=pipeline, k=search_k(k, search_kwargs),
                                      **search_arguments(source, search_kwargs))
        return _check_results(results, len(questions))
    return await asyncio.to_thread(search, sources, questions, pipeline, k, search_kwargs)


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

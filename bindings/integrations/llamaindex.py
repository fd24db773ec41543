"""hopgraph as a LlamaIndex retriever (extra ``[llamaindex]``: ``pip install 'hopgraph[llamaindex]'``).

>>> from hopgraph.integrations.llamaindex import HopgraphRetriever      # doctest: +SKIP
>>> retriever = HopgraphRetriever(hopgraph.Index.load("my-index"), pipeline="hybrid", k=5)
>>> retriever.retrieve("Who designed the bridge in Peter Harlow's home city?")  # list[NodeWithScore]
>>> retriever.retrieve_batch(questions)   # ONE batched hopgraph search (LlamaIndex has no batch API)
>>> HopgraphRetriever(async_client=hopgraph.AsyncClient(url)).retrieve("...")

The source is ``index`` (a :class:`hopgraph.Index`) or ``client=`` (a :class:`hopgraph.Client` of a
``hopgraph serve`` instance), and / or ``async_client=`` (a :class:`hopgraph.AsyncClient`); every
method works with any of them, synchronous or not (see ``hopgraph.integrations._source``). Each result is a
``NodeWithScore(node=TextNode(id_=passage id, text=passage text, metadata=...), score=...)``;
the metadata holds the passage's own metadata plus ``id``, ``title``, ``score``, ``rank`` and
``pipeline``. A client whose hits carry no passage text gives ``text == ""``.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..engine.errors import InputError
from ..engine.ranking import check_k
from . import _source

_source.require("llama_index.core", "llamaindex", "hopgraph.integrations.llamaindex")

from llama_index.core.callbacks import CallbackManager  # noqa: E402
from llama_index.core.retrievers import BaseRetriever  # noqa: E402
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode  # noqa: E402

__all__ = ["HopgraphRetriever"]


class HopgraphRetriever(BaseRetriever):
    """A LlamaIndex ``BaseRetriever`` over a hopgraph index, local or served.

    ``retrieve`` / ``aretrieve`` answer one question (``aretrieve`` awaits ``async_client``, else
    runs the synchronous search in a worker thread; ``retrieve`` uses ``index`` / ``client``, else
    runs ``async_client`` to completion); :meth:`retrieve_batch` / :meth:`aretrieve_batch` answer
    many with ONE batched hopgraph search. ``search_kwargs``: ``k``, query-time pipeline parameters
    (``{"gamma": 0.05}``, or ``{"params": {...}}``), ``with_text`` (False: empty node text),
    ``group_by_document``, ``where`` and ``allowed_ids``; the same for an Index and a client (a
    client gets the parameters as ``params=``).
    The question text is searched (a ``QueryBundle``'s embedding, made by another model, is not used).
    """

    def __init__(self, index: Any = None, pipeline: str = "g3rag", k: int = 5, *, client: Any = None,
                 search_kwargs: Mapping[str, Any] | None = None, async_client: Any = None,
                 callback_manager: CallbackManager | None = None, verbose: bool = False) -> None:
        k = check_k(k)
        self.sources = _source.Sources.of(index, client, async_client)
        self.index, self.client = index, client
        self.pipeline = pipeline
        self.k = k
        _source.split_search_kwargs(search_kwargs)
        self.search_kwargs = dict(search_kwargs or {})
        self.async_client = async_client
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    def _nodes(self, results: list[list[Any]]) -> list[list[NodeWithScore]]:
        """hopgraph hits → one list of ``NodeWithScore`` per question."""
        return _source.convert_hits(self.sources.any, results, self.pipeline, self.search_kwargs,
                                    lambda hit, text, meta: NodeWithScore(
                                        node=TextNode(id_=hit.id, text=text, metadata=meta), score=float(hit.score)))

    def retrieve_batch(self, queries: Sequence[str | QueryBundle]) -> list[list[NodeWithScore]]:
        """Nodes for every query from ONE batched hopgraph search (no per-query callback events)."""
        return self._nodes(_source.search(self.sources, _texts(queries), self.pipeline, self.k, self.search_kwargs))

    async def aretrieve_batch(self, queries: Sequence[str | QueryBundle]) -> list[list[NodeWithScore]]:
        """:meth:`retrieve_batch` without blocking the event loop."""
        results = await _source.asearch(self.sources, _texts(queries), self.pipeline, self.k, self.search_kwargs)
        return self._nodes(results)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self.retrieve_batch([query_bundle])[0]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return (await self.aretrieve_batch([query_bundle]))[0]


def _texts(queries: Sequence[str | QueryBundle]) -> list[str]:
    """Question texts of strings and ``QueryBundle``s (their ``query_str``)."""
    if isinstance(queries, (str, QueryBundle)):
        raise InputError("retrieve_batch takes a list of questions, got a single question")
    out = []
    for i, q in enumerate(queries):
        if isinstance(q, QueryBundle):
            q = q.query_str
        if not isinstance(q, str):
            raise InputError(f"query {i} must be a string or a QueryBundle, got {type(q).__name__}")
        out.append(q)
    return out

"""hopgraph as a LangChain retriever (extra ``[langchain]``: ``pip install 'hopgraph[langchain]'``).

>>> from hopgraph.integrations.langchain import HopgraphRetriever        # doctest: +SKIP
>>> retriever = HopgraphRetriever(index=hopgraph.Index.load("my-index"), pipeline="hybrid", k=5)
>>> retriever.invoke("Who designed the bridge in Peter Harlow's home city?")   # list[Document]
>>> retriever.batch(questions)      # ONE batched hopgraph search for all the questions
>>> HopgraphRetriever(async_client=hopgraph.AsyncClient(url), search_kwargs={"k": 3}).invoke("...")

The source is ``index=`` (a :class:`hopgraph.Index`) or ``client=`` (a :class:`hopgraph.Client`
of a ``hopgraph serve`` instance), and / or ``async_client=`` (a :class:`hopgraph.AsyncClient`);
every method works with any of them, synchronous or not (see ``hopgraph.integrations._source``). Each
``Document`` has ``id`` = the passage id, ``page_content`` = the passage text and ``metadata`` =
the passage's own metadata plus ``id``, ``title``, ``score``, ``rank`` and ``pipeline``. A client
whose hits carry no passage text gives ``page_content == ""`` (an Index always gives the text).
"""
from __future__ import annotations

from typing import Any

from ..engine.errors import InputError
from . import _source

_source.require("langchain_core", "langchain", "hopgraph.integrations.langchain")

from langchain_core.callbacks import (  # noqa: E402
    AsyncCallbackManager,
    AsyncCallbackManagerForRetrieverRun,
    CallbackManager,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document  # noqa: E402
from langchain_core.retrievers import BaseRetriever  # noqa: E402
from langchain_core.runnables import RunnableConfig  # noqa: E402
from langchain_core.runnables.config import ensure_config, get_config_list  # noqa: E402
from pydantic import ConfigDict, Field, PrivateAttr, field_validator, model_validator  # noqa: E402

__all__ = ["HopgraphRetriever"]


class HopgraphRetriever(BaseRetriever):
    """A LangChain ``BaseRetriever`` over a hopgraph index, local or served.

    ``batch`` / ``abatch`` run ONE batched hopgraph search for all their questions (LangChain's
    default would call ``invoke`` once per question); ``ainvoke`` / ``abatch`` await ``async_client``,
    else run the synchronous search in a worker thread; ``invoke`` / ``batch`` use ``index`` /
    ``client``, else run ``async_client`` to completion. ``search_kwargs``: ``k``, query-time pipeline
    parameters (``{"gamma": 0.05}``, or ``{"params": {...}}``), ``with_text`` (False: empty
    ``page_content``), ``group_by_document``, ``where`` and ``allowed_ids``; the same for an Index
    and a client (a client gets the parameters as ``params=``).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    index: Any = None
    """A :class:`hopgraph.Index` (or any source: a client, an asynchronous client)."""
    client: Any = None
    """A :class:`hopgraph.Client` (the same role as ``index``: give one of them)."""
    pipeline: str = "g3rag"
    """The hopgraph pipeline to search with (``dense``, ``bm25``, ``hybrid``, ``g3rag``, ...)."""
    k: int = Field(default=5, gt=0)
    """Number of documents per question."""
    search_kwargs: dict[str, Any] = Field(default_factory=dict)
    """``k``, query-time pipeline parameters, ``with_text``, ``group_by_document``, ``where`` and
    ``allowed_ids`` (see the class docstring)."""
    async_client: Any = None
    """An asynchronous client (``hopgraph.AsyncClient``): awaited by ``ainvoke`` / ``abatch``; the
    synchronous methods use it too when no ``index`` / ``client`` is given."""

    @field_validator("search_kwargs")
    @classmethod
    def _check_search_kwargs(cls, value: dict[str, Any]) -> dict[str, Any]:
        _source.split_search_kwargs(value)
        return value

    _sources: Any = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _check_sources(self) -> "HopgraphRetriever":
        self._sources = _source.Sources.of(self.index, self.client, self.async_client)
        return self

    # ------------------------------------------------------------------ documents
    def _documents(self, results: list[list[Any]]) -> list[list[Document]]:
        """hopgraph hits → one list of ``Document`` per question."""
        return _source.convert_hits(self._sources.any, results, self.pipeline, self.search_kwargs,
                                    lambda hit, text, meta: Document(id=hit.id, page_content=text, metadata=meta))

    def search_documents(self, queries: list[str]) -> list[list[Document]]:
        """Documents for each query from ONE batched search, without LangChain callbacks."""
        return self._documents(_source.search(self._sources, _texts(queries), self.pipeline, self.k,
                                              self.search_kwargs))

    async def asearch_documents(self, queries: list[str]) -> list[list[Document]]:
        """:meth:`search_documents` without blocking the event loop."""
        results = await _source.asearch(self._sources, _texts(queries), self.pipeline, self.k, self.search_kwargs)
        return self._documents(results)

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun
                                ) -> list[Document]:
        return self.search_documents([query])[0]

    async def _aget_relevant_documents(self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
                                       ) -> list[Document]:
        return (await self.asearch_documents([query]))[0]

    # ------------------------------------------------------------------ batches
    def _callback_managers(self, inputs: list[str], config: RunnableConfig | list[RunnableConfig] | None,
                           kwargs: dict[str, Any], cls: type) -> list[tuple[Any, RunnableConfig]]:
        """A configured callback manager (``cls``) and its config per input, as ``invoke`` makes one."""
        out = []
        for cfg in get_config_list(config, len(inputs)):
            cfg = ensure_config(cfg)
            manager = cls.configure(
                cfg.get("callbacks"), None, verbose=kwargs.get("verbose", False),
                inheritable_tags=cfg.get("tags"), local_tags=self.tags,
                inheritable_metadata={**(cfg.get("metadata") or {}), **self._get_ls_params(**kwargs)},
                local_metadata=self.metadata)
            out.append((manager, cfg))
        return out

    def batch(self, inputs: list[str], config: RunnableConfig | list[RunnableConfig] | None = None, *,
              return_exceptions: bool = False, **kwargs: Any) -> list[list[Document] | Exception]:
        """Documents for every input from ONE batched hopgraph search; each input still gets its own
        retriever run in the callbacks (tracing). When the batch fails and ``return_exceptions`` is
        true, each question is searched alone so that only the failing ones return their exception."""
        if not inputs:
            return []
        runs = [manager.on_retriever_start(None, q, name=cfg.get("run_name") or self.get_name(),
                                           run_id=cfg.pop("run_id", None))
                for q, (manager, cfg) in zip(inputs, self._callback_managers(inputs, config, kwargs,
                                                                             CallbackManager))]
        try:
            results: list[list[Document] | Exception] = list(self.search_documents(list(inputs)))
        except Exception as e:
            if not return_exceptions:
                for run in runs:
                    run.on_retriever_error(e)
                raise
            results = []
            for q in inputs:
                try:
                    results.append(self.search_documents([q])[0])
                except Exception as single:  # noqa: BLE001 - returned, as return_exceptions asks
                    results.append(single)
        for run, result in zip(runs, results):
            if isinstance(result, Exception):
                run.on_retriever_error(result)
            else:
                run.on_retriever_end(result)
        return results

    async def abatch(self, inputs: list[str], config: RunnableConfig | list[RunnableConfig] | None = None, *,
                     return_exceptions: bool = False, **kwargs: Any) -> list[list[Document] | Exception]:
        """:meth:`batch` without blocking the event loop (ONE search, awaited or in a worker thread)."""
        if not inputs:
            return []
        runs = [await manager.on_retriever_start(None, q, name=cfg.get("run_name") or self.get_name(),
                                                 run_id=cfg.pop("run_id", None))
                for q, (manager, cfg) in zip(inputs, self._callback_managers(inputs, config, kwargs,
                                                                             AsyncCallbackManager))]
        try:
            results: list[list[Document] | Exception] = list(await self.asearch_documents(list(inputs)))
        except Exception as e:
            if not return_exceptions:
                for run in runs:
                    await run.on_retriever_error(e)
                raise
            results = []
            for q in inputs:
                try:
                    results.append((await self.asearch_documents([q]))[0])
                except Exception as single:  # noqa: BLE001 - returned, as return_exceptions asks
                    results.append(single)
        for run, result in zip(runs, results):
            if isinstance(result, Exception):
                await run.on_retriever_error(result)
            else:
                await run.on_retriever_end(result)
        return results


def _texts(queries: list[str]) -> list[str]:
    """The queries, checked to be strings (a LangChain retriever's input is the question text)."""
    for i, q in enumerate(queries):
        if not isinstance(q, str):
            raise InputError(f"retriever input {i} must be a question string, got {type(q).__name__}")
    return list(queries)

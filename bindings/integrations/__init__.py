"""Retrievers for LLM frameworks over a hopgraph :class:`~hopgraph.Index` or a served index.

* :mod:`hopgraph.integrations.langchain` — ``HopgraphRetriever``, a langchain-core
  ``BaseRetriever`` (extra ``[langchain]``);
* :mod:`hopgraph.integrations.llamaindex` — ``HopgraphRetriever``, a llama-index-core
  ``BaseRetriever`` (extra ``[llamaindex]``).

Neither framework is imported by ``import hopgraph`` nor by this package: only importing a
submodule imports its framework, and a missing one raises an ImportError naming the extra.
"""
from __future__ import annotations

__all__ = ["langchain", "llamaindex"]

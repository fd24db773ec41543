"""hopgraph: GPU-accelerated sparse-graph retrieval (G3RAG, STITCH-RAG, DMAR).

The public API: :class:`Index` (build/save/load/search/add/delete), the pipelines (``G3RAG``,
``STITCH``, ``DMAR`` of SPEC §1–§3, ``PPRBinary`` and the ``Dense`` / ``BM25`` / ``Hybrid`` baselines:
``G3RAG(n_neighbors=16).fit(X)``, ``search(Q, k, query_texts, **search_params)``), their
:class:`RunSettings`, the HTTP :class:`Client` and :class:`AsyncClient`, the corpus and embedder
helpers and the error and warning types. Each pipeline's parameter classes live in its package
(``hopgraph.engine.pipelines.g3rag.G3RAGFit`` / ``G3RAGSearch`` ...).
"""
from __future__ import annotations

from .engine.components.corpus import Corpus
from .engine.embedders import (CallableEmbedder, HashingEmbedder, MiniLMEmbedder, OpenAIEmbedder,
                               SentenceTransformerEmbedder)
from .engine.errors import HopgraphError, IndexFormatError, InputError, NotFittedError
from .engine.filters import EmptyFilterWarning
from .engine.components.corpus import read_corpus
from .engine.params import DeprecatedParameterWarning, InvalidParameter, RunSettings
from .engine.pipelines import pipeline_class, pipeline_names
from .client import AsyncClient, Client
from .index import Hit, Index

__version__ = "0.1.0"

_PIPELINE_EXPORTS = {"Dense": "dense", "BM25": "bm25", "Hybrid": "hybrid", "G3RAG": "g3rag",
                     "STITCH": "stitch", "PPRBinary": "ppr_binary", "DMAR": "dmar"}


def __getattr__(name: str):
    """Pipeline classes are imported on first access (``hopgraph.G3RAG`` ...)."""
    if name in _PIPELINE_EXPORTS:
        return pipeline_class(_PIPELINE_EXPORTS[name])
    raise AttributeError(f"module 'hopgraph' has no attribute {name!r}")


__all__ = ["Index", "Hit", "Client", "AsyncClient", "Corpus", "MiniLMEmbedder", "HashingEmbedder", "CallableEmbedder",
           "SentenceTransformerEmbedder", "OpenAIEmbedder",
           "HopgraphError", "InputError", "IndexFormatError", "InvalidParameter", "NotFittedError",
           "DeprecatedParameterWarning", "EmptyFilterWarning", "RunSettings", "pipeline_names", "read_corpus",
           *_PIPELINE_EXPORTS]

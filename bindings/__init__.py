"""hopgraph: GPU-accelerated sparse-graph retrieval (G3RAG, STITCH-RAG, DMAR).

The public API: :class:`Index` (build/save/load/search), the pipelines
(``G3RAG``, ``STITCH``, ``DMAR`` of SPEC §1-§3, ``PPRBinary`` and the ``Dense``/``BM25``/
``Hybrid`` baselines, each made from its parameters — ``hopgraph.G3RAG(G3RAGParams.published())``
or keyword overrides — with ``fit(X)`` and ``search(Q, top_k)``), the HTTP :class:`Client` and :class:`AsyncClient`,
the corpus and embedder helpers and the error types. The parameter classes live in the
pipeline modules (``hopgraph.engine.pipelines.g3rag.pipeline.G3RAGParams`` ...).
"""
from __future__ import annotations

from .engine.components.corpus import Corpus
from .engine.embedders.core import (CallableEmbedder, HashingEmbedder, MiniLMEmbedder, OpenAIEmbedder,
                                SentenceTransformerEmbedder)
from .engine.errors import HopgraphError, IndexFormatError, InputError
from .engine.components.corpus import read_corpus
from .engine.params import InvalidParameter
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
           "HopgraphError", "InputError", "IndexFormatError", "InvalidParameter", "pipeline_names", "read_corpus",
           *_PIPELINE_EXPORTS]

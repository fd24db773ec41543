"""hopgraph: GPU-accelerated sparse-graph retrieval (G3RAG, STITCH-RAG, DMAR).

The public API: :class:`Index` (build/save/load/search/add/delete), the pipelines (``G3RAG``,
``STITCH``, ``DMAR`` of SPEC §1–§3, ``PPRBinary`` and the ``Dense`` / ``BM25`` / ``Hybrid`` baselines:
``G3RAG(n_neighbors=16).fit(X)``, ``search(Q, k, query_texts, **search_params)``), their
:class:`RunSettings`, the HTTP :class:`Client` and :class:`AsyncClient`, the corpus and embedder
helpers and the error and warning types. Each pipeline's parameter classes live in its package
(``hopgraph.engine.pipelines.g3rag.G3RAGFit`` / ``G3RAGSearch`` ...).

Every public name is imported on first access (PEP 562 ``__getattr__``), so importing a part of the
package — ``hopgraph.kernels``, ``hopgraph.engine.errors``, the command line's parser — does not
load the façade, faiss or the pipelines.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: public name → the module (relative to this package) that defines it
_LAZY_EXPORTS = {
    "Index": ".index", "Hit": ".index",
    "Client": ".client", "AsyncClient": ".client",
    "Corpus": ".engine.components.corpus", "read_corpus": ".engine.components.corpus",
    "MiniLMEmbedder": ".engine.embedders", "HashingEmbedder": ".engine.embedders",
    "CallableEmbedder": ".engine.embedders", "SentenceTransformerEmbedder": ".engine.embedders",
    "OpenAIEmbedder": ".engine.embedders",
    "HopgraphError": ".engine.errors", "InputError": ".engine.errors", "IndexFormatError": ".engine.errors",
    "NotFittedError": ".engine.errors",
    "InvalidParameter": ".engine.params", "DeprecatedParameterWarning": ".engine.params",
    "RunSettings": ".engine.params",
    "EmptyFilterWarning": ".engine.filters",
    "pipeline_names": ".engine.pipelines", "pipeline_class": ".engine.pipelines",
}
#: pipeline class name → its registry name (:func:`~hopgraph.engine.pipelines.pipeline_class`)
_PIPELINE_EXPORTS = {"Dense": "dense", "BM25": "bm25", "Hybrid": "hybrid", "G3RAG": "g3rag",
                     "STITCH": "stitch", "PPRBinary": "ppr_binary", "DMAR": "dmar"}

if TYPE_CHECKING:  # what the names are, for type checkers and editors (nothing is imported at run time)
    from .client import AsyncClient, Client
    from .engine.components.corpus import Corpus, read_corpus
    from .engine.embedders import (CallableEmbedder, HashingEmbedder, MiniLMEmbedder, OpenAIEmbedder,
                                   SentenceTransformerEmbedder)
    from .engine.errors import HopgraphError, IndexFormatError, InputError, NotFittedError
    from .engine.filters import EmptyFilterWarning
    from .engine.params import DeprecatedParameterWarning, InvalidParameter, RunSettings
    from .engine.pipelines import pipeline_class, pipeline_names
    from .engine.pipelines.bm25 import BM25
    from .engine.pipelines.dense import Dense
    from .engine.pipelines.dmar import DMAR
    from .engine.pipelines.g3rag import G3RAG
    from .engine.pipelines.hybrid import Hybrid
    from .engine.pipelines.stitch import STITCH, PPRBinary
    from .index import Hit, Index


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first access and kept (``hopgraph.Index``,
    ``hopgraph.G3RAG`` ...); AttributeError for any other name."""
    if name in _LAZY_EXPORTS:
        value = getattr(importlib.import_module(_LAZY_EXPORTS[name], __name__), name)
    elif name in _PIPELINE_EXPORTS:
        value = importlib.import_module(".engine.pipelines", __name__).pipeline_class(_PIPELINE_EXPORTS[name])
    else:
        raise AttributeError(f"module 'hopgraph' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's attributes and every public name, imported or not."""
    return sorted(set(globals()) | set(__all__))


__all__ = ["Index", "Hit", "Client", "AsyncClient", "Corpus", "MiniLMEmbedder", "HashingEmbedder", "CallableEmbedder",
           "SentenceTransformerEmbedder", "OpenAIEmbedder",
           "HopgraphError", "InputError", "IndexFormatError", "InvalidParameter", "NotFittedError",
           "DeprecatedParameterWarning", "EmptyFilterWarning", "RunSettings", "pipeline_names", "read_corpus",
           *_PIPELINE_EXPORTS]

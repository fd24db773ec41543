"""The interface every retrieval pipeline implements (G3RAG, STITCH, DMAR, baselines).

A pipeline is fitted on the passage embeddings X (row i = passage i of the corpus),
optionally the corpus texts and the embedder, and answers batches of queries:
``search(Q, top_k, query_texts) -> (ids int64 [B, top_k], scores float32 [B, top_k])``
where ids are corpus rows, best first, padded with -1 / -inf when fewer exist.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar, Sequence

import numpy as np

from ..corpus import Corpus
from ..embedders import Embedder, validate_embeddings
from ..errors import InputError


class Pipeline(ABC):
    """Base class of retrieval pipelines. Subclasses set ``name`` and implement the
    abstract methods; ``needs_corpus`` / ``needs_query_texts`` / ``needs_embedder``
    declare their inputs."""

    name: ClassVar[str]
    needs_corpus: ClassVar[bool] = False
    needs_query_texts: ClassVar[bool] = False
    needs_embedder: ClassVar[bool] = False
    #: constructor parameters that only affect ``search`` (a variant differing only in
    #: these shares the fitted structures instead of refitting)
    query_params: ClassVar[frozenset[str]] = frozenset()
    #: named ablations for ``hopgraph eval --ablations``: variant name → parameter overrides
    ablations: ClassVar[dict[str, dict[str, Any]]] = {}

    X: np.ndarray | None = None

    @abstractmethod
    def fit(self, X: np.ndarray, corpus: Corpus | None = None, embedder: Embedder | None = None,
            progress: bool = False) -> "Pipeline":
        """Build the pipeline's index structures; returns self."""

    @abstractmethod
    def search(self, Q: np.ndarray, top_k: int = 5,
               query_texts: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top ``top_k`` corpus rows per query (see module docstring)."""

    @abstractmethod
    def get_params(self) -> dict[str, Any]:
        """JSON-serialisable constructor parameters (stored in the index manifest)."""

    def save(self, directory: Path) -> None:
        """Write fitted arrays into ``directory`` (created by the caller). Default: nothing."""

    @classmethod
    def load(cls, directory: Path, params: dict[str, Any], X: np.ndarray, corpus: Corpus | None,
             embedder: Embedder | None) -> "Pipeline":
        """Rebuild a fitted pipeline from ``save``'s output. Default: refit (cheap pipelines)."""
        return cls(**params).fit(X, corpus, embedder)

    def variant(self, **overrides: Any) -> "Pipeline":
        """A copy of this fitted pipeline with query-time parameters changed.

        Raises ValueError when an override is not in ``query_params`` (it needs a refit).
        """
        import copy

        needs_refit = set(overrides) - set(self.query_params)
        if needs_refit:
            raise ValueError(f"{self.name}: parameters {sorted(needs_refit)} need a refit")
        other = copy.copy(self)
        for key, value in overrides.items():
            setattr(other, key, value)
        return other

    # ------------------------------------------------------------------ shared checks
    def _require_fitted(self) -> None:
        if self.X is None:
            raise RuntimeError(f"{type(self).__name__} is not fitted: call fit(X) first")

    def _check_queries(self, Q: np.ndarray, top_k: int, query_texts: Sequence[str] | None) -> np.ndarray:
        """Validate a query batch against the fitted index; returns normalised float32 Q."""
        self._require_fitted()
        if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
            raise InputError(f"top_k must be a positive integer, got {top_k!r}")
        Q = np.asarray(Q)
        if Q.ndim == 1:
            Q = Q[None, :]
        Q = validate_embeddings(Q, "query embeddings", dim=self.X.shape[1]) if len(Q) else \
            np.zeros((0, self.X.shape[1]), np.float32)
        if self.needs_query_texts:
            if query_texts is None:
                raise InputError(f"pipeline {self.name!r} needs the query texts (query_texts=...)")
            if len(query_texts) != len(Q):
                raise InputError(f"{len(query_texts)} query texts for {len(Q)} query embeddings")
        return Q

    @staticmethod
    def _check_fit_inputs(X: np.ndarray, corpus: Corpus | None, needs_corpus: bool, name: str) -> np.ndarray:
        X = validate_embeddings(X, "passage embeddings")
        if needs_corpus and corpus is None:
            raise InputError(f"pipeline {name!r} needs the corpus texts: fit(X, corpus)")
        if corpus is not None and len(corpus) != len(X):
            raise InputError(f"corpus has {len(corpus)} passages but X has {len(X)} rows")
        return X

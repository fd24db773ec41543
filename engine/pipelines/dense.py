"""Dense baseline: cosine top-k over the passage embeddings (faiss exact inner product)."""
from __future__ import annotations

from typing import Any, Sequence

import faiss
import numpy as np

from ..corpus import Corpus
from ..embedders import Embedder
from ..ranking import PAD_SCORE
from .base import Pipeline


def exact_inner_product_index(X: np.ndarray) -> faiss.IndexFlatIP:
    """A faiss exact inner-product index over the rows of X (cosine for normalised X)."""
    index = faiss.IndexFlatIP(X.shape[1])
    index.add(np.ascontiguousarray(X, dtype=np.float32))
    return index


def faiss_topk(index: faiss.Index, Q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """faiss search with hopgraph's padding convention (-1 / -inf)."""
    if len(Q) == 0:
        return np.zeros((0, k), np.int64), np.zeros((0, k), np.float32)
    scores, ids = index.search(np.ascontiguousarray(Q, dtype=np.float32), k)
    ids = ids.astype(np.int64)
    scores = np.where(ids >= 0, scores, PAD_SCORE).astype(np.float32)
    return ids, scores


class Dense(Pipeline):
    """Cosine-similarity top-k: the non-graph dense baseline."""

    name = "dense"

    def __init__(self) -> None:
        self.X = None
        self._index: faiss.Index | None = None

    def get_params(self) -> dict[str, Any]:
        return {}

    def fit(self, X: np.ndarray, corpus: Corpus | None = None, embedder: Embedder | None = None,
            progress: bool = False) -> "Dense":
        self.X = self._check_fit_inputs(X, corpus, False, self.name)
        self._index = exact_inner_product_index(self.X)
        return self

    def search(self, Q: np.ndarray, top_k: int = 5,
               query_texts: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
        Q = self._check_queries(Q, top_k, query_texts)
        return faiss_topk(self._index, Q, top_k)

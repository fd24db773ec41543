"""BM25 baseline: the shared BM25 component (bm25s, Lucene variant, English stop words by
default; :mod:`hopgraph.engine.components.bm25`). Its parameters are the index's ``"bm25"``
parameters, which every pipeline that uses BM25 shares."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..components.bm25 import BM25Params
from .base import Pipeline


class BM25(Pipeline):
    """Lexical top-k over ``"title: text"`` of each passage."""

    name = "bm25"
    Params = BM25Params
    components_used = ("bm25",)
    needs_corpus = True
    needs_query_texts = True

    def _fit(self, progress: bool) -> None:
        self.components.bm25(self.params, who=self.name)

    def search(self, Q: np.ndarray, top_k: int = 5,
               query_texts: Sequence[str] | None = None, allowed: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        self._check_queries(Q, top_k, query_texts)
        bm25 = self.components.bm25(self.params, who=self.name)
        timer = self._timer()
        with timer("tokenize"):
            tokens = bm25.tokenize(query_texts)
        with timer("bm25"):
            return bm25.topk(tokens, top_k, self.components.allowed(allowed))

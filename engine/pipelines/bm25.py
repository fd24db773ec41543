"""BM25 baseline through bm25s (Lucene variant, English stop words)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import bm25s
import numpy as np

from ..corpus import Corpus
from ..embedders import Embedder
from ..ranking import PAD_ID, PAD_SCORE
from .base import Pipeline


class BM25(Pipeline):
    """Lexical top-k with bm25s over ``"title: text"`` of each passage."""

    name = "bm25"
    needs_corpus = True
    needs_query_texts = True

    def __init__(self, k1: float = 1.5, b: float = 0.75, stopwords: str = "en") -> None:
        self.k1, self.b, self.stopwords = float(k1), float(b), stopwords
        self.X = None
        self.retriever: bm25s.BM25 | None = None

    def get_params(self) -> dict[str, Any]:
        return {"k1": self.k1, "b": self.b, "stopwords": self.stopwords}

    def fit(self, X: np.ndarray, corpus: Corpus | None = None, embedder: Embedder | None = None,
            progress: bool = False) -> "BM25":
        self.X = self._check_fit_inputs(X, corpus, True, self.name)
        tokens = bm25s.tokenize(corpus.embedding_texts(), stopwords=self.stopwords, show_progress=progress)
        self.retriever = bm25s.BM25(k1=self.k1, b=self.b)
        self.retriever.index(tokens, show_progress=progress)
        return self

    def scores(self, query_texts: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """BM25 top-``k`` (ids, scores) for raw query texts; zero-score hits become padding."""
        n_docs = len(self.X)
        B = len(query_texts)
        ids = np.full((B, k), PAD_ID, np.int64)
        out = np.full((B, k), PAD_SCORE, np.float32)
        kk = min(k, n_docs)
        if B == 0 or kk == 0:
            return ids, out
        qtok = bm25s.tokenize(list(query_texts), stopwords=self.stopwords, show_progress=False)
        docs, scores = self.retriever.retrieve(qtok, k=kk, show_progress=False, n_threads=1)
        docs = np.asarray(docs, np.int64)
        scores = np.asarray(scores, np.float32)
        hit = scores > 0
        ids[:, :kk] = np.where(hit, docs, PAD_ID)
        out[:, :kk] = np.where(hit, scores, PAD_SCORE)
        return ids, out

    def search(self, Q: np.ndarray, top_k: int = 5,
               query_texts: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
        self._check_queries(Q, top_k, query_texts)
        return self.scores(query_texts, top_k)

    def save(self, directory: Path) -> None:
        self.retriever.save(str(directory / "bm25s"))

    @classmethod
    def load(cls, directory: Path, params: dict[str, Any], X: np.ndarray, corpus: Corpus | None,
             embedder: Embedder | None) -> "BM25":
        self = cls(**params)
        self.X = X
        self.retriever = bm25s.BM25.load(str(directory / "bm25s"), mmap=True)
        return self

"""Dense baseline: cosine top-k over the passage embeddings (faiss exact inner product).

At scale (issue 5) a memory-mapped X of at least :data:`SCAN_MIN_N` rows is not copied
into faiss: :class:`BlockedInnerProductIndex` scans the ``.npy`` file in row blocks with
ordinary reads (the OS page cache holds the file, the process only one block), with the
same exact results; and :meth:`Dense.load` attaches an index's already validated X
without reading it, so a query process over a 10⁶-passage index stays small.
"""
from __future__ import annotations

from pathlib import Path
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


#: from this many rows up a memory-mapped X is scanned from its file instead of copied into faiss
SCAN_MIN_N = 200_000


class BlockedInnerProductIndex:
    """Exact inner-product top-k over a memory-mapped float32 ``.npy`` matrix, read from the file
    in blocks of ``block_rows`` rows into one reused buffer; ``search`` is faiss-compatible
    (``(scores [B, k], ids [B, k])``, best first, ties toward the lower row, -1 padding)."""

    def __init__(self, X: np.memmap, block_rows: int = 65_536) -> None:
        if not isinstance(X, np.memmap) or X.dtype != np.float32 or not X.flags.c_contiguous:
            raise TypeError("BlockedInnerProductIndex needs a C-contiguous float32 np.memmap")
        self.path, self.offset = Path(X.filename), int(X.offset)
        self.ntotal, self.d = X.shape
        self.block_rows = int(block_rows)

    def search(self, Q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        from ..ranking import topk_rows

        Q = np.ascontiguousarray(Q, dtype=np.float32)
        best_ids = np.full((len(Q), k), -1, np.int64)
        best = np.full((len(Q), k), -np.inf, np.float32)
        buf = np.empty(self.block_rows * self.d, np.float32)
        with open(self.path, "rb", buffering=0) as f:
            f.seek(self.offset)
            for start in range(0, self.ntotal, self.block_rows):
                rows = min(self.block_rows, self.ntotal - start)
                block = buf[: rows * self.d]
                f.readinto(memoryview(block))
                ids, scores = topk_rows(Q @ block.reshape(rows, self.d).T, k)
                cand_ids = np.concatenate([best_ids, np.where(ids >= 0, ids + start, -1)], axis=1)
                cand = np.concatenate([best, scores], axis=1)
                top, best = topk_rows(cand, k)
                best_ids = np.take_along_axis(cand_ids, np.maximum(top, 0), axis=1)
                best_ids[top < 0] = -1
        return best, best_ids


def inner_product_index(X: np.ndarray) -> "faiss.Index | BlockedInnerProductIndex":
    """faiss exact index, or the blocked file scan for a memory-mapped X of ``SCAN_MIN_N``+ rows."""
    if _scanned(X):
        return BlockedInnerProductIndex(X)
    return exact_inner_product_index(X)


def _scanned(X: np.ndarray) -> bool:
    return isinstance(X, np.memmap) and len(X) >= SCAN_MIN_N and X.dtype == np.float32 and X.flags.c_contiguous


def gather_rows(X: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``X[rows]`` (any shape of row ids). For a large memory-mapped X the rows are read from the
    file with ``os.pread``: faulting them in through the mapping would map whole large page-cache
    folios (megabytes) around each row and leave them in the process's resident set."""
    rows = np.asarray(rows, np.int64)
    if not _scanned(X):
        return np.asarray(X[rows])
    import os

    flat = rows.ravel()
    out = np.empty((len(flat), X.shape[1]), np.float32)
    row_bytes = X.shape[1] * 4
    fd = os.open(X.filename, os.O_RDONLY)
    try:
        for i, r in enumerate(flat.tolist()):
            out[i] = np.frombuffer(os.pread(fd, row_bytes, X.offset + r * row_bytes), np.float32)
    finally:
        os.close(fd)
    return out.reshape(*rows.shape, X.shape[1])


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
        self._index = inner_product_index(self.X)
        return self

    @classmethod
    def load(cls, directory: Path, params: dict[str, Any], X: np.ndarray, corpus: Corpus | None,
             embedder: Embedder | None) -> "Dense":
        """Attach the index's X (validated when the index was built) without reading it."""
        self = cls(**params)
        self.X = X
        self._index = inner_product_index(X)
        return self

    def search(self, Q: np.ndarray, top_k: int = 5,
               query_texts: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
        Q = self._check_queries(Q, top_k, query_texts)
        return faiss_topk(self._index, Q, top_k)

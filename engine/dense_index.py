"""The dense component: exact inner-product (cosine) top-k over the passage embeddings X,
one per index, shared by every pipeline that searches X (dense, hybrid, g3rag, stitch,
ppr_binary, dmar): G3RAG's seeds (SPEC §1 query step 1), STITCH's relevance (§2 step 7),
DMAR's second stage (§3 step 5).

At scale (issue 5) a memory-mapped X of at least :data:`SCAN_MIN_N` rows is not copied into
faiss: :class:`BlockedInnerProductIndex` scans the ``.npy`` file in row blocks with ordinary
reads (the OS page cache holds the file, the process only one block), with the same exact
results. Below that, X is copied once into a faiss ``IndexFlatIP``.
"""
from __future__ import annotations

from pathlib import Path

import faiss
import numpy as np

from .ranking import PAD_ID, PAD_SCORE


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

    def search(self, Q: np.ndarray, k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` per query; ``allowed`` (bool [ntotal]) restricts the rows that may be returned."""
        from .ranking import topk_rows

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
                sims = Q @ block.reshape(rows, self.d).T
                if allowed is not None:
                    sims[:, ~allowed[start:start + rows]] = -np.inf
                ids, scores = topk_rows(sims, k)
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


#: a filter passing at most this fraction of the rows is searched by scoring only those rows
SUBSET_MAX_FRACTION = 0.05


def faiss_topk(index: faiss.Index, Q: np.ndarray, k: int, allowed: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
    """faiss search with hopgraph's padding convention (-1 / -inf); ``allowed`` (bool [ntotal])
    restricts the result to those rows (a faiss ``IDSelectorBitmap``)."""
    if len(Q) == 0:
        return np.zeros((0, k), np.int64), np.zeros((0, k), np.float32)
    Q = np.ascontiguousarray(Q, dtype=np.float32)
    if allowed is None:
        scores, ids = index.search(Q, k)
    elif isinstance(index, BlockedInnerProductIndex):
        scores, ids = index.search(Q, k, allowed)
    else:
        bits = np.packbits(allowed, bitorder="little")
        selector = faiss.IDSelectorBitmap(len(allowed), faiss.swig_ptr(bits))
        scores, ids = index.search(Q, k, params=faiss.SearchParameters(sel=selector))
    ids = ids.astype(np.int64)
    scores = np.where(ids >= 0, scores, PAD_SCORE).astype(np.float32)
    return ids, scores


class DenseIndex:
    """Exact cosine top-k over X (faiss flat index, or the blocked file scan at scale); X is
    copied into faiss at most once, on first use."""

    def __init__(self, X: np.ndarray) -> None:
        self.X = X
        self._index: "faiss.Index | BlockedInnerProductIndex | None" = None

    @property
    def index(self) -> "faiss.Index | BlockedInnerProductIndex":
        if self._index is None:
            self._index = inner_product_index(self.X)
        return self._index

    def topk(self, Q: np.ndarray, k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` rows per query (ids int64, scores float32; -1 / -inf padding).

        ``allowed`` (bool [N], None = every row) restricts the result to those rows, and ``k``
        of them come back whenever ``k`` pass: a filter passing at most
        :data:`SUBSET_MAX_FRACTION` of the rows scores only them (exact, ``Q @ X[rows]ᵀ``),
        a wider one searches the whole index with a faiss ID selector."""
        if allowed is None:
            return faiss_topk(self.index, Q, k)
        rows = np.flatnonzero(allowed)
        if len(rows) > SUBSET_MAX_FRACTION * len(self.X):
            return faiss_topk(self.index, Q, k, allowed)
        from .ranking import topk_rows

        Q = np.asarray(Q, np.float32)
        if len(rows) == 0 or len(Q) == 0:
            return np.full((len(Q), k), PAD_ID, np.int64), np.full((len(Q), k), PAD_SCORE, np.float32)
        cols, scores = topk_rows(Q @ self.rows(rows).T, k)
        return np.where(cols >= 0, rows[np.maximum(cols, 0)], PAD_ID), scores

    def add(self, X: np.ndarray, start: int) -> None:
        """The index over ``X``, whose rows ``[start, N)`` are new (the others unchanged): a faiss
        index already built gets the new rows added; a file scan is reopened on first use."""
        self.X = X
        if self._index is not None and not isinstance(self._index, BlockedInnerProductIndex) and not _scanned(X):
            self._index.add(np.ascontiguousarray(X[start:], dtype=np.float32))
        else:
            self._index = None

    def rows(self, rows: np.ndarray) -> np.ndarray:
        """``X[rows]`` (any shape of row ids), read without faulting a large mapping in."""
        return gather_rows(self.X, rows)

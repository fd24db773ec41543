"""Exact inner-product search over the passage embeddings X, and reading X's rows without faulting a
large memory mapping in: a faiss ``IndexFlatIP`` copy of X, or — for a memory-mapped X of at least
:data:`SCAN_MIN_N` rows — a blocked scan of its ``.npy`` file with ordinary reads
(:class:`BlockedInnerProductIndex`: the OS page cache holds the file, the process one block).
Results follow hopgraph's ranking convention (best first, ties toward the lower row, -1 / -inf
padding). The dense component (:mod:`hopgraph.engine.components.dense`) and the IVF index
(:mod:`hopgraph.engine.components.ivf`) are built on these.
"""
from __future__ import annotations

from typing import Iterator

import faiss
import numpy as np

from ..ranking import PAD_SCORE, topk_rows
from ..storage import RowReader, StackedRows, read_rows

#: from this many rows up a memory-mapped X is scanned from its file instead of copied into faiss
SCAN_MIN_N = 200_000
#: rows an exact faiss search asks for beyond k, to order ties at the k-th place toward the lower row
TIE_MARGIN = 16
#: rows per block of a blocked scan or of an IVF build pass
BLOCK_ROWS = 65_536


def exact_inner_product_index(X: np.ndarray) -> faiss.IndexFlatIP:
    """A faiss exact inner-product index over the rows of X (cosine for normalised X)."""
    index = faiss.IndexFlatIP(X.shape[1])
    index.add(np.ascontiguousarray(X, dtype=np.float32))
    return index


def _large_mapping(X: np.ndarray) -> bool:
    """X is a C-contiguous memory-mapped matrix of :data:`SCAN_MIN_N` rows or more (or rows of
    several segments, :class:`~hopgraph.engine.storage.StackedRows`, as many): its rows are read
    from its files, not faulted in through the mapping (which would leave them resident)."""
    if isinstance(X, StackedRows):
        return X.ndim == 2 and len(X) >= SCAN_MIN_N
    return isinstance(X, np.memmap) and X.ndim == 2 and len(X) >= SCAN_MIN_N and X.flags.c_contiguous


def scanned_from_files(X: np.ndarray) -> bool:
    """The dense search scans X from its files (:class:`BlockedInnerProductIndex`): a large float32 mapping."""
    return _large_mapping(X) and X.dtype == np.float32


def _file_blocks(X: np.memmap, start: int, block_rows: int) -> Iterator[tuple[int, np.ndarray]]:
    """``(first row, rows [r, d])`` blocks of the rows ``[start, N)`` of a memory-mapped X, read from its
    file with plain reads (:class:`~hopgraph.engine.storage.RowReader`) into one reused buffer (each
    block is valid until the next one)."""
    buf = np.empty((block_rows, X.shape[1]), X.dtype)
    with RowReader(X) as read:
        for s in range(start, len(X), block_rows):
            e = min(len(X), s + block_rows)
            yield s, read(s, e, out=buf[:e - s])


def row_blocks(X: np.ndarray, start: int = 0, block_rows: int = BLOCK_ROWS) -> Iterator[tuple[int, np.ndarray]]:
    """``(first row, float32 block)`` over the rows ``[start, N)`` of X: a large memory-mapped X
    (:data:`SCAN_MIN_N` rows or more) is read from its file (not faulted into the process), any other X
    is sliced. A block may be a reused buffer: valid until the next one."""
    if isinstance(X, StackedRows):
        yield from X.blocks(start, block_rows)
        return
    if scanned_from_files(X):
        yield from _file_blocks(X, start, block_rows)
        return
    for s in range(start, len(X), block_rows):
        yield s, np.ascontiguousarray(X[s:s + block_rows], dtype=np.float32)


def blocked_topk(Q: np.ndarray, k: int, blocks: Iterator[tuple[int, np.ndarray]],
                 allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` of ``Q`` over row blocks ``(start, block)``, merged block by block:
    ``(scores [B, k], ids [B, k])`` best first, ties toward the lower row, ``-inf`` / -1 padding;
    ``allowed`` (bool [N]) restricts the rows that may be returned."""
    Q = np.ascontiguousarray(Q, dtype=np.float32)
    best_ids = np.full((len(Q), k), -1, np.int64)
    best = np.full((len(Q), k), -np.inf, np.float32)
    for start, block in blocks:
        sims = Q @ block.T
        if allowed is not None:
            sims[:, ~allowed[start:start + len(block)]] = -np.inf
        ids, scores = topk_rows(sims, k)
        cand_ids = np.concatenate([best_ids, np.where(ids >= 0, ids + start, -1)], axis=1)
        cand = np.concatenate([best, scores], axis=1)
        top, best = topk_rows(cand, k)
        best_ids = np.take_along_axis(cand_ids, np.maximum(top, 0), axis=1)
        best_ids[top < 0] = -1
    return best, best_ids


class BlockedInnerProductIndex:
    """Exact inner-product top-k over a memory-mapped float32 ``.npy`` matrix (or the rows of several
    segments, :class:`~hopgraph.engine.storage.StackedRows`), read from the files in blocks of
    ``block_rows`` rows into one reused buffer; ``search`` is faiss-compatible (``(scores [B, k],
    ids [B, k])``, best first, ties toward the lower row, -1 padding)."""

    def __init__(self, X: "np.memmap | StackedRows", block_rows: int = BLOCK_ROWS) -> None:
        stacked = isinstance(X, StackedRows)
        if X.dtype != np.float32 or not (stacked or (isinstance(X, np.memmap) and X.flags.c_contiguous)):
            raise TypeError("BlockedInnerProductIndex needs a C-contiguous float32 np.memmap or StackedRows")
        self.X = X
        self.ntotal, self.d = X.shape
        self.block_rows = int(block_rows)

    def search(self, Q: np.ndarray, k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` per query; ``allowed`` (bool [ntotal]) restricts the rows that may be returned."""
        blocks = self.X.blocks(0, self.block_rows) if isinstance(self.X, StackedRows) else \
            _file_blocks(self.X, 0, self.block_rows)
        return blocked_topk(Q, k, blocks, allowed)


def inner_product_index(X: np.ndarray) -> "faiss.Index | BlockedInnerProductIndex":
    """faiss exact index, or the blocked file scan for a memory-mapped X of :data:`SCAN_MIN_N` rows or more."""
    if scanned_from_files(X):
        return BlockedInnerProductIndex(X)
    return exact_inner_product_index(X)


def gather_rows(X: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``X[rows]`` (any shape of row ids; X's dtype). For a large memory-mapped X (:data:`SCAN_MIN_N`
    rows or more, any dtype: the passages' float32 X, STITCH's float16 text embeddings) the rows are
    read from the file (:func:`~hopgraph.engine.storage.read_rows`): faulting them in through the
    mapping would map whole large page-cache folios (megabytes) around each row and leave them in
    the process's resident set (``docs/decisions/memory-at-a-million.md``)."""
    rows = np.asarray(rows, np.int64)
    if isinstance(X, StackedRows):
        return X.take(rows)
    return read_rows(X, rows) if _large_mapping(X) else np.asarray(X[rows])


def id_selector(allowed: np.ndarray) -> tuple[faiss.IDSelectorBitmap, np.ndarray]:
    """A faiss ID selector for the True rows of ``allowed``, with the bit array it points into
    (keep it alive while the selector is used)."""
    bits = np.packbits(allowed, bitorder="little")
    return faiss.IDSelectorBitmap(len(allowed), faiss.swig_ptr(bits)), bits


def faiss_topk(index: faiss.Index, Q: np.ndarray, k: int, allowed: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
    """faiss search with hopgraph's padding convention (-1 / -inf); ``allowed`` (bool [ntotal])
    restricts the result to those rows (a faiss ``IDSelectorBitmap``). Equal scores are ordered
    toward the lower row (faiss leaves their order to its heap): :data:`TIE_MARGIN` more rows are
    asked for and the list re-sorted, so a tie across the k-th place also goes to the lower row
    unless more than that many rows tie there (the order then does not depend on how the rows
    are split, e.g. over shards)."""
    if len(Q) == 0:
        return np.zeros((0, k), np.int64), np.zeros((0, k), np.float32)
    Q = np.ascontiguousarray(Q, dtype=np.float32)
    wide = k + TIE_MARGIN
    if allowed is None:
        scores, ids = index.search(Q, wide)
    elif isinstance(index, BlockedInnerProductIndex):
        scores, ids = index.search(Q, wide, allowed)
    else:
        selector, _bits = id_selector(allowed)
        scores, ids = index.search(Q, wide, params=faiss.SearchParameters(sel=selector))
    ids = ids.astype(np.int64)
    scores = np.where(ids >= 0, scores, PAD_SCORE).astype(np.float32)
    order = np.lexsort((np.where(ids >= 0, ids, np.iinfo(np.int64).max), -scores), axis=1)[:, :k]
    return np.take_along_axis(ids, order, axis=1), np.take_along_axis(scores, order, axis=1)

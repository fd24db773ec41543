"""The dense component: cosine (inner-product) top-k over the passage embeddings X, one per
index, shared by every pipeline that searches X (dense, hybrid, g3rag, stitch, ppr_binary,
dmar): G3RAG's seeds (SPEC §1 query step 1), STITCH's relevance (§2 step 7), DMAR's second
stage (§3 step 5).

**Exact** (below :data:`ANN_MIN_N` rows, or ``mode="exact"``): X is copied once into a faiss
``IndexFlatIP``; a memory-mapped X of at least :data:`SCAN_MIN_N` rows is not copied but
scanned from its ``.npy`` file in row blocks with ordinary reads
(:class:`BlockedInnerProductIndex`: the OS page cache holds the file, the process one block).

**Approximate candidates, exact scores** (from :data:`ANN_MIN_N` rows up with
``mode="auto"``, the default, or always with ``mode="ann"``): :class:`IVFIndex`, a
faiss inverted file of about 4√N cells whose rows are stored as 8-bit scalar-quantised codes
(``IndexIVFScalarQuantizer``, d bytes a row; 4-bit, d / 2 bytes, with ``code_bits=4``, as
STITCH's text index uses), proposes :func:`rescore_candidates` ``(k)``
candidates per query from its :data:`DEFAULT_NPROBE` nearest cells; each candidate is then
rescored exactly (``Q · X[cand]``, rows read from X) and the top ``k`` returned in exact order,
ties toward the lower row (as :func:`~hopgraph.engine.ranking.topk_rows`). The approximation
only decides which rows are looked at; a score is never approximate.

Why IVF + SQ8, measured by ``bench/bench_dense_ann.py`` (2 shared cores, one run, 256
generated queries, k = 10): at 10⁶ rows it built in 51 s (0.3 s to load once saved), answered
1,057 q/s (nprobe 64; 13x the exact file scan) with the exact top-10 (overlap 1.0) in 0.71 GB
RSS; HNSW (M 32) took 154 s and 2.0 GB and kept 0.81 / 0.87 of the exact top-10 at efSearch
64 / 128; the float IVF (``IndexIVFFlat``) gave the same candidates from a second float32
copy of X (1.9 GB). 4√N cells and nprobe 64: on all-MiniLM-L6-v2 question → passage search
(the 200 shared questions over 60,000 passages) they kept 0.99 of the exact top-10 (nprobe
32: 0.98; √N cells and nprobe 64: 0.98, at 0.27x the speed at 10⁶), and with √N cells the
overlap at a fixed nprobe did not fall from 7,500 to 60,000 rows. 4-bit codes (``code_bits=4``,
more candidates rescored for a small k: :func:`rescore_candidates`) kept the exact top-10 and
top-128 (overlap 1.0 at 200,000 rows and on the 50,000-row sample) in half the code memory, at
0.57–0.77x the 8-bit search's top-10 q/s (a busy machine); on STITCH's 10⁶-passage text index the
whole STITCH search ran as fast with either width, with identical results (README, *Scale*).

The same IVF index gives G3RAG's graph builder its cells (:attr:`DenseIndex.ivf`), so X is clustered
once per index. The IVF index is built lazily on first use (like the flat copy), grows with :meth:`IVFIndex.add`
(new rows go to their nearest existing cell) and is rebuilt — re-trained for the new size — on
the first search after the index has grown to more than :data:`RETRAIN_GROWTH` times the rows
it was trained on. ``Components.save`` stores it in the index directory (checksummed like
every file; validated on load by :meth:`IVFIndex.from_arrays`), so a loaded index does not
train again. Filters (``allowed``): a filter passing at most :data:`SUBSET_MAX_FRACTION` of
the rows scores exactly only those rows (both modes); a wider one searches the IVF with a
faiss ID selector and ``nprobe / fraction`` cells, and a query left with fewer than ``k``
passing candidates (when ``k`` pass) is answered by the exact blocked scan instead.

The mode: ``DenseIndex(X, mode=...)`` / ``Components(..., dense=...)``, else the environment
variable :data:`DENSE_MODE_ENV` (``HOPGRAPH_DENSE=exact|ann|auto``), else ``"auto"``.
"""
from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import faiss
import numpy as np

from ..errors import IndexFormatError, InputError
from ..ranking import PAD_ID, PAD_SCORE, topk_rows
from ..storage import (RowReader, StackedRows, check_finite, check_ids, check_indptr, load_arrays, read_rows,
                       save_arrays)

#: from this many rows up a memory-mapped X is scanned from its file instead of copied into faiss
SCAN_MIN_N = 200_000
#: ``mode="auto"`` searches the IVF index (exact rescoring of its candidates) from this many rows up
ANN_MIN_N = 200_000
#: the dense search modes; the environment variable below chooses one when none is passed
DENSE_MODES = ("auto", "exact", "ann")
DENSE_MODE_ENV = "HOPGRAPH_DENSE"
#: IVF cells probed per query (an unfiltered search; a filter passing a fraction f probes nprobe / f)
DEFAULT_NPROBE = 64
#: cells of the IVF index: about ``NLIST_PER_SQRT_N · √N`` (a k-means sample of
#: ``TRAIN_POINTS_PER_LIST`` rows a cell, ``KMEANS_NITER`` iterations, seed ``KMEANS_SEED``)
NLIST_PER_SQRT_N = 4.0
TRAIN_POINTS_PER_LIST = 64
KMEANS_NITER = 5
KMEANS_SEED = 1234
#: faiss wants this many training rows a cell (fewer rows: fewer cells)
MIN_POINTS_PER_LIST = 39
#: candidates rescored per query for a top-``k``: ``max(RESCORE_FACTOR · k, k + RESCORE_MIN_EXTRA)``
RESCORE_FACTOR = 2
RESCORE_MIN_EXTRA = 16
#: the IVF index is re-trained once the rows exceed this multiple of the rows it was trained on
RETRAIN_GROWTH = 2.0
#: a filter passing at most this fraction of the rows is searched by scoring only those rows
SUBSET_MAX_FRACTION = 0.05
#: rows an exact faiss search asks for beyond k, to order ties at the k-th place toward the lower row
TIE_MARGIN = 16
#: faiss's scalar quantiser per code width (bits a dimension)
CODE_BITS = {8: faiss.ScalarQuantizer.QT_8bit, 4: faiss.ScalarQuantizer.QT_4bit}
#: the saved IVF index's manifest kind per code width, and back
IVF_KINDS = {f"ivf-sq{bits}": bits for bits in CODE_BITS}
#: rows per block of a blocked scan or of an IVF build pass
BLOCK_ROWS = 65_536


def dense_mode(mode: str | None = None) -> str:
    """``mode``, else the environment variable :data:`DENSE_MODE_ENV`, else ``"auto"``
    (InputError for anything outside :data:`DENSE_MODES`)."""
    chosen = mode if mode is not None else (os.environ.get(DENSE_MODE_ENV) or "auto")
    if chosen not in DENSE_MODES:
        source = "dense mode" if mode is not None else f"environment variable {DENSE_MODE_ENV}"
        raise InputError(f"{source} must be one of {', '.join(DENSE_MODES)}, got {chosen!r}")
    return chosen


def dense_method(mode: str, n: int) -> str:
    """How a dense index of ``n`` rows in ``mode`` searches: ``"ann"`` (IVF candidates rescored
    exactly) for ``"ann"``, and for ``"auto"`` from :data:`ANN_MIN_N` rows up; else ``"exact"``."""
    if mode == "exact" or n == 0 or (mode == "auto" and n < ANN_MIN_N):
        return "exact"
    return "ann"


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


def _scanned(X: np.ndarray) -> bool:
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
    if _scanned(X):
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
    if _scanned(X):
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


def _selector(allowed: np.ndarray) -> tuple[faiss.IDSelectorBitmap, np.ndarray]:
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
        selector, _bits = _selector(allowed)
        scores, ids = index.search(Q, wide, params=faiss.SearchParameters(sel=selector))
    ids = ids.astype(np.int64)
    scores = np.where(ids >= 0, scores, PAD_SCORE).astype(np.float32)
    order = np.lexsort((np.where(ids >= 0, ids, np.iinfo(np.int64).max), -scores), axis=1)[:, :k]
    return np.take_along_axis(ids, order, axis=1), np.take_along_axis(scores, order, axis=1)


def ann_nprobe(nprobe: int, n: int, passing: int) -> int:
    """Cells an IVF search probes: ``nprobe``, or ``nprobe · n / passing`` when a filter passes
    ``passing`` of the ``n`` rows."""
    return nprobe if passing >= n else math.ceil(nprobe * n / max(passing, 1))


def rescore(Q: np.ndarray, cand: np.ndarray, k: int, rows: Callable[[np.ndarray], np.ndarray]
            ) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` of each query among its candidate rows ``cand`` [B, C] (-1 = none):
    ``Q · X[cand]`` (``rows(ids)`` = ``X[ids]``), best first, ties toward the lower row."""
    order = np.argsort(np.where(cand >= 0, cand, np.iinfo(np.int64).max), axis=1, kind="stable")
    cand = np.take_along_axis(cand, order, axis=1)       # ascending rows: ties go to the lower one
    sims = np.einsum("bd,bcd->bc", Q, rows(np.maximum(cand, 0)))
    sims[cand < 0] = -np.inf
    cols, scores = topk_rows(sims, k)
    ids = np.take_along_axis(cand, np.maximum(cols, 0), axis=1)
    return np.where(cols >= 0, ids, PAD_ID), scores


def rescore_candidates(k: int, bits: int = 8) -> int:
    """Candidates the IVF index proposes per query for an exact top-``k``:
    ``max(RESCORE_FACTOR · k, k + extra)``, the extra rows :data:`RESCORE_MIN_EXTRA` from 8-bit codes
    and four times as many from 4-bit ones, whose coarser scores put more of a small exact top-k
    below the cut (top-10 overlap 0.95 with 26 candidates, 1.0 with 74, on the unit tests' data;
    a top-128 needs no more than 8-bit codes do)."""
    return max(RESCORE_FACTOR * k, k + RESCORE_MIN_EXTRA * (8 // bits) ** 2)


def ivf_nlist(n: int) -> int:
    """IVF cells for ``n`` rows: about ``NLIST_PER_SQRT_N · √n``, at most one per
    :data:`MIN_POINTS_PER_LIST` rows, at least 1."""
    return max(1, min(round(NLIST_PER_SQRT_N * math.sqrt(n)), n // MIN_POINTS_PER_LIST))


def train_and_fill(index: faiss.IndexIVF, X: np.ndarray, seed: int = KMEANS_SEED) -> faiss.IndexIVF:
    """Train a faiss IVF index on a seeded sample of X (``TRAIN_POINTS_PER_LIST`` rows a cell,
    ``KMEANS_NITER`` k-means iterations; its codes too) and add every row, read in blocks
    (:func:`row_blocks`: a large memory-mapped X is not faulted in). Returns ``index``."""
    n = len(X)
    sample = np.sort(np.random.default_rng(seed).choice(n, min(n, TRAIN_POINTS_PER_LIST * index.nlist), replace=False))
    index.cp.niter, index.cp.seed = KMEANS_NITER, seed
    index.cp.max_points_per_centroid = TRAIN_POINTS_PER_LIST
    index.cp.min_points_per_centroid = 1      # only a warning below 39 (a one-cell index of a tiny X)
    index.train(np.ascontiguousarray(gather_rows(X, sample), dtype=np.float32))
    for _, block in row_blocks(X):
        index.add(block)
    return index


class IVFIndex:
    """Candidate generator: a faiss ``IndexIVFScalarQuantizer`` (inner product, ``bits``-bit
    codes — :data:`CODE_BITS` — of the rows themselves, not of residuals) whose ids are the rows
    of X. ``n_trained``: the rows its cells and quantiser were trained on
    (:data:`RETRAIN_GROWTH`)."""

    #: the arrays :meth:`arrays` returns and :meth:`from_arrays` reads
    ARRAY_FILES = ("centroids", "sq", "offsets", "ids", "codes")

    def __init__(self, index: faiss.IndexIVFScalarQuantizer, n_trained: int,
                 fill: Callable[[faiss.IndexIVFScalarQuantizer], None] | None = None, n_stored: int = 0) -> None:
        self._index, self.n_trained = index, int(n_trained)
        #: a stored index's inverted lists are read on first search (:attr:`index`); until then the
        #: rows added are kept as entries (what a writer that never searches needs: their codes)
        self._fill, self._n_stored = fill, int(n_stored)
        self._pending: list[dict[str, np.ndarray]] = []
        #: the stored cell offsets and ids (read by :meth:`cell_members` before the lists are filled)
        self._stored_lists: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def index(self) -> faiss.IndexIVFScalarQuantizer:
        """The faiss index, its inverted lists read from the stored arrays on first use."""
        if self._fill is not None:
            fill, self._fill = self._fill, None
            fill(self._index)
            self._index.ntotal = self._n_stored
            pending, self._pending = self._pending, []
            for t in pending:
                self._add_entries(t)
        return self._index

    def _add_entries(self, t: dict[str, np.ndarray]) -> None:
        """Add entries (``rows`` ascending per cell, ``lists``, ``codes``) to the filled faiss index."""
        rows, lists, codes = t["rows"], t["lists"], t["codes"]
        order = np.lexsort((rows, lists))
        rows, lists, codes = rows[order], lists[order], np.ascontiguousarray(codes[order])
        n = len(rows)
        bounds = np.flatnonzero(np.diff(lists)) + 1
        for a, b in zip(np.r_[0, bounds], np.r_[bounds, n]):
            if b > a:
                ids = np.ascontiguousarray(rows[a:b])
                part = np.ascontiguousarray(codes[a:b])
                self._index.invlists.add_entries(int(lists[a]), int(b - a), faiss.swig_ptr(ids), faiss.swig_ptr(part))
        self._index.ntotal = self._index.ntotal + n

    @staticmethod
    def _empty(d: int, nlist: int, bits: int = 8) -> faiss.IndexIVFScalarQuantizer:
        index = faiss.IndexIVFScalarQuantizer(faiss.IndexFlatIP(d), d, nlist, CODE_BITS[bits],
                                              faiss.METRIC_INNER_PRODUCT)
        index.by_residual = False
        return index

    @classmethod
    def build(cls, X: np.ndarray, seed: int = KMEANS_SEED, bits: int = 8, nlist: int | None = None) -> "IVFIndex":
        """Train on a seeded sample of X (k-means cells, code ranges) and add every row, read in
        blocks (:func:`row_blocks`: a large memory-mapped X is not faulted in). ``nlist``: the
        cells (default :func:`ivf_nlist`)."""
        nlist = ivf_nlist(len(X)) if nlist is None else int(nlist)
        return cls(train_and_fill(cls._empty(X.shape[1], nlist, bits), X, seed), len(X))

    @property
    def bits(self) -> int:
        """Bits a dimension of the stored codes (8 or 4)."""
        return 4 if self._index.sq.qtype == CODE_BITS[4] else 8

    @property
    def ntotal(self) -> int:
        if self._fill is not None:
            return self._n_stored + sum(len(t["rows"]) for t in self._pending)
        return int(self._index.ntotal)

    @property
    def nlist(self) -> int:
        return int(self._index.nlist)

    def add(self, X: np.ndarray, start: int) -> None:
        """Add the rows ``[start, N)`` of X (each to its nearest cell; nothing is re-trained). Before
        the stored lists are read, only the new rows' codes are computed and kept."""
        if start != self.ntotal:
            raise ValueError(f"IVF index holds {self.ntotal} rows; cannot add rows from {start}")
        if self._fill is None:
            for _, block in row_blocks(X, start):
                self._index.add(block)
            return
        enc = self._empty(self._index.d, self.nlist, self.bits)
        enc.quantizer.add(self.centroids())
        faiss.copy_array_to_vector(faiss.vector_to_array(self._index.sq.trained), enc.sq.trained)
        enc.is_trained = True
        for s0, block in row_blocks(X, start):
            enc.add_with_ids(np.ascontiguousarray(block, dtype=np.float32),
                             np.arange(s0, s0 + len(block), dtype=np.int64))
        self._pending.append(IVFIndex(enc, self.n_trained).tail_arrays(start, len(X)))

    def centroids(self) -> np.ndarray:
        """The cells' centroids (float32 [nlist, d])."""
        return self._index.quantizer.reconstruct_n(0, self.nlist)

    def cell_members(self, cells: np.ndarray) -> np.ndarray:
        """The rows of the given cells (int64, sorted), read from the stored lists (a few of their
        entries: nothing else of the index is read) and the rows added since."""
        cells = np.unique(np.asarray(cells, np.int64))
        if self._fill is None:
            invlists = self._index.invlists
            parts = [np.array(faiss.rev_swig_ptr(invlists.get_ids(int(c)), invlists.list_size(int(c))), np.int64)
                     for c in cells.tolist() if invlists.list_size(int(c))]
        else:
            offsets, ids = self._stored_lists
            parts = [np.asarray(ids[int(offsets[c]):int(offsets[c + 1])], np.int64) for c in cells.tolist()]
            parts += [t["rows"][np.isin(t["lists"], cells)] for t in self._pending]
        return np.sort(np.concatenate(parts)) if parts else np.zeros(0, np.int64)

    def assign(self, X: np.ndarray) -> np.ndarray:
        """The cell of each row of X (its nearest centroid, as an add files it; int64)."""
        _, cells = self._index.quantizer.search(np.ascontiguousarray(X, dtype=np.float32), 1)
        return cells[:, 0].astype(np.int64)

    def cell_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """The rows of every cell: ``(offsets int64 [nlist + 1], rows int64 [ntotal])``, cell ``c``
        holding ``rows[offsets[c]:offsets[c + 1]]`` in the order they were added (increasing)."""
        invlists = self.index.invlists
        sizes = np.array([invlists.list_size(c) for c in range(self.nlist)], np.int64)
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        rows = np.empty(self.ntotal, np.int64)
        for c in np.flatnonzero(sizes).tolist():
            rows[offsets[c]:offsets[c + 1]] = faiss.rev_swig_ptr(invlists.get_ids(c), int(sizes[c]))
        return offsets, rows

    def candidates(self, Q: np.ndarray, n: int, nprobe: int, allowed: np.ndarray | None = None) -> np.ndarray:
        """Up to ``n`` candidate rows per query (int64 [B, n], -1 padding): :meth:`scored_candidates`."""
        return self.scored_candidates(Q, n, nprobe, allowed)[0]

    def scored_candidates(self, Q: np.ndarray, n: int, nprobe: int, allowed: np.ndarray | None = None
                          ) -> tuple[np.ndarray, np.ndarray]:
        """Up to ``n`` candidate rows per query from its ``nprobe`` nearest cells, only ``allowed``
        rows (bool [ntotal]) when given, with their code scores: ``(ids int64 [B, n], scores float32
        [B, n])``, -1 / -inf padding, best score first and equal scores toward the lower row
        (:data:`TIE_MARGIN` more asked for, as :func:`faiss_topk`), so the candidates do not depend
        on how the rows are split (a sharded index's shards hold this index's cells and codes)."""
        params = faiss.SearchParametersIVF()
        params.nprobe = int(min(max(nprobe, 1), self.nlist))
        _bits = None
        if allowed is not None:
            params.sel, _bits = _selector(allowed)
        scores, ids = self.index.search(np.ascontiguousarray(Q, dtype=np.float32), n + TIE_MARGIN, params=params)
        ids = ids.astype(np.int64)
        scores = np.where(ids >= 0, scores, PAD_SCORE).astype(np.float32)
        order = np.lexsort((np.where(ids >= 0, ids, np.iinfo(np.int64).max), -scores), axis=1)[:, :n]
        return np.take_along_axis(ids, order, axis=1), np.take_along_axis(scores, order, axis=1)

    def with_rows(self, X: np.ndarray) -> "IVFIndex":
        """An IVF index with this one's cells and code ranges holding the rows of X (ids from 0):
        each row in the cell, and with the code, this index gives it (a shard's part of a sharded
        index's IVF index; trained on at most its rows, for :data:`RETRAIN_GROWTH`)."""
        enc = self._empty(self._index.d, self.nlist, self.bits)
        enc.quantizer.add(self.centroids())
        faiss.copy_array_to_vector(faiss.vector_to_array(self._index.sq.trained), enc.sq.trained)
        enc.is_trained = True
        for _, block in row_blocks(X):
            enc.add(np.ascontiguousarray(block, dtype=np.float32))
        return IVFIndex(enc, max(1, min(self.n_trained, len(X))))

    # ------------------------------------------------------------------ persistence
    #: the arrays :meth:`tail_arrays` returns (the rows of one segment)
    TAIL_FILES = ("rows", "lists", "codes")

    def tail_arrays(self, start: int, stop: int) -> dict[str, np.ndarray]:
        """The entries of rows ``[start, stop)``: ``rows`` (int64, ascending), the cell of each
        (``lists`` int64) and its code (``codes`` uint8 [n, code_size]), as faiss holds them."""
        if self._fill is not None and start >= self._n_stored:  # the rows added since the load, as kept
            parts = [t for t in self._pending if len(t["rows"])]
            rows = np.concatenate([t["rows"] for t in parts]) if parts else np.zeros(0, np.int64)
            sel = np.flatnonzero((rows >= start) & (rows < stop))
            cat = (lambda key, empty: np.concatenate([t[key] for t in parts])[sel] if parts else empty)
            width = int(self._index.code_size)
            out = {"rows": rows[sel], "lists": cat("lists", np.zeros(0, np.int64)),
                   "codes": cat("codes", np.zeros((0, width), np.uint8))}
            order = np.argsort(out["rows"], kind="stable")
            return {k: v[order] for k, v in out.items()}
        invlists, width = self.index.invlists, int(self.index.code_size)
        rows, lists, codes = [], [], []
        for c in range(self.nlist):
            size = invlists.list_size(c)
            if not size:
                continue
            ids = faiss.rev_swig_ptr(invlists.get_ids(c), size)
            sel = np.flatnonzero((ids >= start) & (ids < stop))
            if len(sel):
                cell = faiss.rev_swig_ptr(invlists.get_codes(c), size * width).reshape(size, width)
                rows.append(np.array(ids[sel], np.int64))
                lists.append(np.full(len(sel), c, np.int64))
                codes.append(np.array(cell[sel]))
        if not rows:
            return {"rows": np.zeros(0, np.int64), "lists": np.zeros(0, np.int64),
                    "codes": np.zeros((0, width), np.uint8)}
        rows, lists, codes = np.concatenate(rows), np.concatenate(lists), np.concatenate(codes)
        order = np.argsort(rows, kind="stable")
        return {"rows": rows[order], "lists": lists[order], "codes": codes[order]}

    def add_tail(self, arrays: dict[str, np.ndarray], start: int, stop: int, name: str = "IVF index") -> None:
        """Add the entries :meth:`tail_arrays` gave for rows ``[start, stop)`` (validated: every row once,
        cells in range, codes of this width; IndexFormatError naming ``name``)."""
        n = stop - start
        rows = np.asarray(check_ids(np.asarray(arrays["rows"]) - start, max(n, 1), f"{name} rows", n), np.int64)
        if n and (np.bincount(rows, minlength=n) != 1).any():
            raise IndexFormatError(f"{name} rows: not each of the rows [{start}, {stop}) once")
        lists = np.asarray(check_ids(arrays["lists"], self.nlist, f"{name} lists", n), np.int64)
        codes = np.asarray(arrays["codes"])
        width = int(self.index.code_size)
        if codes.dtype != np.uint8 or codes.shape != (n, width):
            raise IndexFormatError(f"{name} codes: shape {list(codes.shape)} dtype {codes.dtype}, expected "
                                   f"[{n}, {width}] uint8")
        if start != self.ntotal:
            raise IndexFormatError(f"{name}: rows from {start}, the IVF index holds {self.ntotal}")
        entries = {"rows": rows + start, "lists": lists, "codes": codes}
        if self._fill is not None:
            self._pending.append(entries)
        else:
            self._add_entries(entries)

    def arrays(self) -> dict[str, np.ndarray]:
        """The whole index as arrays: ``centroids`` [nlist, d], ``sq`` [2, d] (code minimum and
        range per dimension), and the cells in order as ``offsets`` [nlist + 1] into ``ids`` [N]
        and ``codes`` [N, faiss's ``code_size``] (uint8: d bytes a row at 8 bits, ⌈d / 2⌉ at 4)."""
        index, d = self.index, self.index.d
        offsets, ids = self.cell_rows()
        codes = np.empty((self.ntotal, index.code_size), np.uint8)
        for c in range(self.nlist):
            a, b = int(offsets[c]), int(offsets[c + 1])
            if b > a:
                codes[a:b] = faiss.rev_swig_ptr(index.invlists.get_codes(c), (b - a) * index.code_size).reshape(b - a, -1)
        return {"centroids": self.centroids(), "sq": faiss.vector_to_array(index.sq.trained).reshape(2, d),
                "offsets": offsets, "ids": ids, "codes": codes}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], n_rows: int, d: int, n_trained: int,
                    name: str = "IVF index", bits: int = 8) -> "IVFIndex":
        """The index :meth:`arrays` saved, over ``n_rows`` rows of dimension ``d`` with ``bits``-bit
        codes, validated: finite centroids and code ranges of dimension ``d``, cell offsets from 0
        to ``n_rows``, ``ids`` a permutation of the rows, ``codes`` uint8 ``[n_rows, code_size]``
        (faiss's bytes a code at that width; any byte is a valid code). IndexFormatError naming
        the array otherwise."""
        centroids = check_finite(arrays["centroids"], f"{name} centroids", (None, d))
        nlist = len(centroids)
        if nlist == 0:
            raise IndexFormatError(f"{name} centroids: no cells")
        sq = check_finite(arrays["sq"], f"{name} sq", (2, d))
        offsets = check_indptr(arrays["offsets"], nlist, n_rows, f"{name} offsets")
        ids = np.ascontiguousarray(check_ids(arrays["ids"], max(n_rows, 1), f"{name} ids", n_rows), dtype=np.int64)
        if n_rows and (np.bincount(ids, minlength=n_rows) != 1).any():
            raise IndexFormatError(f"{name} ids: not a permutation of the {n_rows} rows")
        codes = arrays["codes"]
        index = cls._empty(d, nlist, bits)
        width = int(index.code_size)
        if codes.dtype != np.uint8 or codes.shape != (n_rows, width):
            raise IndexFormatError(f"{name} codes: shape {list(codes.shape)} dtype {codes.dtype}, "
                                   f"expected [{n_rows}, {width}] uint8 ({bits}-bit codes)")
        if not 1 <= n_trained <= max(n_rows, 1):
            raise IndexFormatError(f"{name}: trained on {n_trained} rows, holds {n_rows}")
        index.quantizer.add(np.ascontiguousarray(centroids, dtype=np.float32))
        faiss.copy_array_to_vector(np.ascontiguousarray(sq, dtype=np.float32).ravel(), index.sq.trained)
        index.is_trained = True

        def fill(index: faiss.IndexIVFScalarQuantizer) -> None:
            invlists = index.invlists
            with RowReader(codes) as read:  # from the file: the mapped codes never become resident
                for c in range(nlist):
                    a, b = int(offsets[c]), int(offsets[c + 1])
                    if b > a:
                        cell_codes = read(a, b)  # held in a name: swig_ptr does not keep it alive
                        invlists.add_entries(c, b - a, faiss.swig_ptr(ids[a:b]), faiss.swig_ptr(cell_codes))

        out = cls(index, n_trained, fill, n_rows)
        out._stored_lists = (np.asarray(offsets, np.int64), ids)
        return out


class DenseIndex:
    """Cosine top-k over X: exact (faiss flat index, or the blocked file scan at scale), or IVF
    candidates rescored exactly (module docstring); ``mode`` ``"auto"`` | ``"exact"`` | ``"ann"``
    (None: :func:`dense_mode`); ``code_bits``: the width of the IVF codes a build makes (8, or 4
    for half the memory: the candidates are rescored exactly either way). Each structure is
    built at most once, on first use."""

    def __init__(self, X: np.ndarray, mode: str | None = None, nprobe: int = DEFAULT_NPROBE,
                 ivf: IVFIndex | None = None, code_bits: int = 8) -> None:
        if code_bits not in CODE_BITS:
            raise InputError(f"code_bits must be one of {sorted(CODE_BITS)}, got {code_bits!r}")
        self.X, self.mode, self.nprobe, self.code_bits = X, dense_mode(mode), int(nprobe), int(code_bits)
        self._index: "faiss.Index | BlockedInnerProductIndex | None" = None
        self._ivf = ivf
        #: seconds of each IVF build in this process (for reports and tests)
        self.ivf_builds: list[float] = []

    @property
    def method(self) -> str:
        """``"ann"`` when the IVF index answers the searches, else ``"exact"`` (:func:`dense_method`)."""
        return dense_method(self.mode, len(self.X))

    @property
    def index(self) -> "faiss.Index | BlockedInnerProductIndex":
        """The exact index (faiss flat copy of X, or the blocked file scan)."""
        if self._index is None:
            self._index = inner_product_index(self.X)
        return self._index

    @property
    def ivf(self) -> IVFIndex:
        """The IVF index over X, built on first use (and again after :meth:`add` dropped it): the
        candidates of the approximate search, and the cells G3RAG's graph builder groups its rows by
        (:func:`~hopgraph.engine.pipelines.g3rag.ann_graph.graph_cells`), so X is clustered once."""
        if self._ivf is None:
            t0 = time.perf_counter()
            self._ivf = IVFIndex.build(self.X, bits=self.code_bits)
            self.ivf_builds.append(time.perf_counter() - t0)
        return self._ivf

    def topk(self, Q: np.ndarray, k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` rows per query (ids int64, scores float32; -1 / -inf padding), exact or from
        the IVF candidates rescored exactly (:attr:`method`).

        ``allowed`` (bool [N], None = every row) restricts the result to those rows, and ``k``
        of them come back whenever ``k`` pass: a filter passing at most
        :data:`SUBSET_MAX_FRACTION` of the rows scores only them (exact, ``Q @ X[rows]ᵀ``),
        a wider one searches the whole index with a faiss ID selector."""
        if self.method == "exact":
            return self.exact_topk(Q, k, allowed)
        if allowed is not None and np.count_nonzero(allowed) <= SUBSET_MAX_FRACTION * len(self.X):
            return self._subset_topk(Q, k, np.flatnonzero(allowed))
        return self._ann_topk(Q, k, allowed)

    def exact_topk(self, Q: np.ndarray, k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The exact top-``k`` whatever the mode: only the ``allowed`` rows scored when they are few,
        else the exact index under the filter."""
        if allowed is not None:
            rows = np.flatnonzero(allowed)
            if len(rows) <= SUBSET_MAX_FRACTION * len(self.X):
                return self._subset_topk(Q, k, rows)
        return faiss_topk(self.index, Q, k, allowed)

    def _subset_topk(self, Q: np.ndarray, k: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-``k`` among ``rows`` only (sorted row ids)."""
        Q = np.asarray(Q, np.float32)
        if len(rows) == 0 or len(Q) == 0:
            return np.full((len(Q), k), PAD_ID, np.int64), np.full((len(Q), k), PAD_SCORE, np.float32)
        cols, scores = topk_rows(Q @ self.rows(rows).T, k)
        return np.where(cols >= 0, rows[np.maximum(cols, 0)], PAD_ID), scores

    def _ann_topk(self, Q: np.ndarray, k: int, allowed: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """IVF candidates (``nprobe / fraction passing`` cells under a filter), rescored exactly;
        a query with fewer than ``min(k, rows passing)`` results gets the exact blocked scan."""
        Q = np.ascontiguousarray(Q, dtype=np.float32)
        if len(Q) == 0:
            return np.zeros((0, k), np.int64), np.zeros((0, k), np.float32)
        passing = len(self.X) if allowed is None else int(allowed.sum())
        cand = self.ivf.candidates(Q, rescore_candidates(k, self.ivf.bits), ann_nprobe(self.nprobe, len(self.X), passing),
                                   allowed)
        ids, scores = rescore(Q, cand, k, self.rows)
        short = np.flatnonzero((ids >= 0).sum(axis=1) < min(k, passing))
        if len(short):
            ids[short], scores[short] = self.scan_topk(Q[short], k, allowed)
        return ids, scores

    def scan_topk(self, Q: np.ndarray, k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-``k`` by a blocked scan of X (the IVF search's fallback for a query it leaves
        short): ``(ids, scores)``."""
        s_scores, s_ids = blocked_topk(np.ascontiguousarray(Q, dtype=np.float32), k, row_blocks(self.X), allowed)
        return s_ids, s_scores

    def subset_topk(self, Q: np.ndarray, k: int, allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-``k`` among the ``allowed`` rows only (how a narrow filter is searched)."""
        return self._subset_topk(Q, k, np.flatnonzero(allowed))

    def add(self, X: np.ndarray, start: int) -> None:
        """The index over ``X``, whose rows ``[start, N)`` are new (the others unchanged): a faiss
        flat index already built gets the new rows added, a file scan is reopened on first use; a
        built IVF index gets them added (re-trained on the next search once X has grown past
        :data:`RETRAIN_GROWTH` times its training rows). A structure the new size no longer
        uses (the flat copy once the IVF index takes over) is dropped."""
        self.X = X
        if self._index is not None and self.method == "exact" and not isinstance(
                self._index, BlockedInnerProductIndex) and not _scanned(X):
            self._index.add(np.ascontiguousarray(X[start:], dtype=np.float32))
        else:
            self._index = None
        if self._ivf is not None:
            if self.method == "ann" and self._ivf.ntotal == start and len(X) <= RETRAIN_GROWTH * self._ivf.n_trained:
                self._ivf.add(X, start)
            else:
                self._ivf = None

    def rows(self, rows: np.ndarray) -> np.ndarray:
        """``X[rows]`` (any shape of row ids), read without faulting a large mapping in."""
        return gather_rows(self.X, rows)

    # ------------------------------------------------------------------ persistence
    def save_ivf(self, directory: Path) -> dict[str, Any]:
        """Write the IVF index under ``directory`` (built now if it was not yet, so a loaded index
        never trains); returns its manifest entry. ``Components.save`` calls it when the IVF
        index answers the searches (:attr:`method` ``"ann"``)."""
        ivf = self.ivf
        save_arrays(directory, ivf.arrays())
        kind = next(k for k, bits in IVF_KINDS.items() if bits == ivf.bits)
        return {"kind": kind, "rows": ivf.ntotal, "n_trained": ivf.n_trained, "nlist": ivf.nlist}

    def ivf_state(self) -> tuple[int, int] | None:
        """``(rows, rows trained on)`` of the IVF index when one is built, else None (what a commit
        compares to tell appended rows from a re-trained index)."""
        return None if self._ivf is None else (self._ivf.ntotal, self._ivf.n_trained)

    def save_ivf_tail(self, directory: Path, start: int, stop: int) -> dict[str, Any]:
        """Write the IVF entries of rows ``[start, stop)`` (a segment's: :meth:`IVFIndex.tail_arrays`)
        under ``directory``; returns its manifest entry."""
        save_arrays(directory, self._ivf.tail_arrays(start, stop))
        kind = next(k for k, bits in IVF_KINDS.items() if bits == self._ivf.bits)
        return {"kind": kind, "first_row": int(start), "rows": int(stop - start), "state": "tail"}

    @classmethod
    def load(cls, directory: Path, entry: dict[str, Any] | None, X: np.ndarray, mode: str | None = None,
             code_bits: int = 8, tails: list[tuple[Path, dict[str, Any]]] = ()) -> "DenseIndex":
        """A dense index over X with the IVF index :meth:`save_ivf` wrote, and the rows of later
        segments :meth:`save_ivf_tail` wrote (``tails``: ``(directory, entry)`` in row order), all
        validated; not read when the mode searches exactly — it would be dropped at the next save
        anyway. The saved kind (``ivf-sq8`` / ``ivf-sq4``) gives the codes' width; ``code_bits`` is that
        of later builds."""
        dense = cls(X, mode, code_bits=code_bits)
        if entry is None or dense.method != "ann":
            return dense
        n = int(entry.get("rows", -1))
        if entry.get("kind") not in IVF_KINDS or n + sum(int(t.get("rows", 0)) for _, t in tails) != len(X):
            raise IndexFormatError(f"dense index in {directory}: kind {entry.get('kind')!r} over {entry.get('rows')} "
                                   f"rows and {len(tails)} later segments, expected one of {sorted(IVF_KINDS)} "
                                   f"over {len(X)}")
        if not directory.is_dir():
            raise IndexFormatError(f"index component directory {directory} is missing")
        arrays = load_arrays(directory, IVFIndex.ARRAY_FILES)
        ivf = IVFIndex.from_arrays(arrays, n, X.shape[1], int(entry["n_trained"]), str(directory),
                                   IVF_KINDS[entry["kind"]])
        for tdir, tentry in tails:
            if tentry.get("kind") != entry.get("kind") or int(tentry.get("first_row", -1)) != ivf.ntotal:
                raise IndexFormatError(f"dense index tail in {tdir}: kind {tentry.get('kind')!r} from row "
                                       f"{tentry.get('first_row')}, expected {entry.get('kind')!r} from {ivf.ntotal}")
            ivf.add_tail(load_arrays(tdir, IVFIndex.TAIL_FILES), ivf.ntotal, ivf.ntotal + int(tentry["rows"]),
                         str(tdir))
        dense._ivf = ivf
        return dense

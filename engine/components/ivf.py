"""The IVF index: approximate candidates for the dense component's search, scored exactly.

:class:`IVFIndex` is a faiss inverted file of about ``NLIST_PER_SQRT_N · √N`` cells whose rows are
stored as 8-bit (or 4-bit) scalar-quantised codes (``IndexIVFScalarQuantizer``); it proposes
:func:`rescore_candidates` ``(k)`` candidates per query from its :data:`DEFAULT_NPROBE` nearest
cells and :func:`rescore` scores them exactly, so the approximation only decides which rows are
looked at. Why this structure and these sizes: :mod:`hopgraph.engine.components.dense`. The index
grows by :meth:`IVFIndex.add`, is stored as arrays (:meth:`IVFIndex.arrays`, a segment's rows by
:meth:`IVFIndex.tail_arrays`) and validated on load (:meth:`IVFIndex.from_arrays`).
"""
from __future__ import annotations

import math
from typing import Callable

import faiss
import numpy as np

from ..errors import IndexFormatError
from ..ranking import PAD_ID, PAD_SCORE, topk_rows
from ..storage import RowReader, check_finite, check_ids, check_indptr
from .exact_search import TIE_MARGIN, gather_rows, id_selector, row_blocks

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
#: faiss's scalar quantiser per code width (bits a dimension)
CODE_BITS = {8: faiss.ScalarQuantizer.QT_8bit, 4: faiss.ScalarQuantizer.QT_4bit}
#: the saved IVF index's manifest kind per code width, and back
IVF_KINDS = {f"ivf-sq{bits}": bits for bits in CODE_BITS}


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
        """The rows the index holds (those added but not yet filled in included)."""
        if self._fill is not None:
            return self._n_stored + sum(len(t["rows"]) for t in self._pending)
        return int(self._index.ntotal)

    @property
    def nlist(self) -> int:
        """The number of cells."""
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
            params.sel, _bits = id_selector(allowed)
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

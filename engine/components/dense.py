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

import os
import time
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from ..errors import IndexFormatError, InputError
from ..ranking import PAD_ID, PAD_SCORE, topk_rows
from ..storage import load_arrays, save_arrays
from .exact_search import (BlockedInnerProductIndex, blocked_topk, faiss_topk, gather_rows, inner_product_index,
                           row_blocks, scanned_from_files)
from .ivf import CODE_BITS, DEFAULT_NPROBE, IVF_KINDS, RETRAIN_GROWTH, IVFIndex, ann_nprobe, rescore, rescore_candidates

#: ``mode="auto"`` searches the IVF index (exact rescoring of its candidates) from this many rows up
ANN_MIN_N = 200_000
#: the dense search modes; the environment variable below chooses one when none is passed
DENSE_MODES = ("auto", "exact", "ann")
DENSE_MODE_ENV = "HOPGRAPH_DENSE"
#: a filter passing at most this fraction of the rows is searched by scoring only those rows
SUBSET_MAX_FRACTION = 0.05


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
                self._index, BlockedInnerProductIndex) and not scanned_from_files(X):
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

"""Incremental update of the G3RAG gain graph when passages are appended.

:meth:`hopgraph.engine.pipelines.g3rag.pipeline.G3RAG.add` is built on the three functions here.
Rows ``[start, N)`` of X are new; rows ``[0, start)`` and their graph are unchanged input.

**Rule for existing passages** (the documented approximation): *existing rows keep the
density/penalty of their last build until* ``Index.compact()``. Only the new passages get
a density (SPEC §1 index step 1) and a penalty (step 2); nothing about an existing passage
is recomputed, although its true density (a mean over the whole grown corpus) changes with
every added passage, and so would the min/max normalisation of step 2.

* :func:`added_density` — step 1 for the new rows only: in mode ``"exact"``,
  ``dens_j = mean_{i≠j} max(0, s_ji)`` over all N passages (old and new); in mode
  ``"sampled"``, the mean over **the column sample of the last build**
  (``sample_columns(n_build, n_samples, seed)`` of :mod:`hopgraph.kernels.density`, the
  sample the existing rows were estimated with; it holds only passages of that build, so a
  new row is never in it).
* :func:`added_penalty` — step 2 for the new rows with the last build's normalisation:
  ``nd_j = (dens_j − min) / (max − min + 1e−9)`` with the build's min/max density and
  ``dens_j`` clipped to ``[min, max]`` (the penalty a passage of that density got or would
  have got in that build), ``pen_j = exp(−β · nd_j)``.
* :func:`extend_gain_graph` — steps 3-5 for the grown corpus with the penalty vector held
  fixed: the new rows' out-edges over all N columns, and the **reverse edges**: an existing
  row i gains edge ``i → j`` to a new passage j (weight ``gain(s_ij) · pen_j``) when it
  enters i's top-k, merged into i's CSR row with the same order (weight descending, ties
  toward the lower column) and the same cap k. Exactness: for any penalty vector ``pen``,
  ``extend_gain_graph(gain_knn(X[:start], k, band, pen[:start]), X, start, pen, k, band)``
  equals ``gain_knn(X, k, band, pen)`` — indptr, indices and data — whenever the similarity
  of a pair is the same float in both computations (see :data:`MIN_GEMM_ROWS`).

The new rows are computed by brute force over all N columns in every graph mode: in mode
``"ann"`` they are therefore exact while the existing rows keep their IVF-candidate edges
(plus the exact reverse edges). Mode ``"exact"`` is the same computation with
``k = N − 1`` and the band [0, 1], so no cap ever drops a reverse edge.

Every block of edges is computed by the kernel op ``gain_knn_rows`` (through
:func:`hopgraph.kernels.call`, on ``device``: the Triton kernel on CUDA, the CPU path otherwise): the
new rows' edges among a column block of X, and the reverse edges of the old rows of that column block
among the new rows, each old row's current k-th weight as its floor.

Cost: the new rows are processed in row blocks of at most ``block_entries`` similarity
entries (``[rows, N]`` tiles against all of X; the ``[N, N]`` matrix never exists), so an
add costs O(n_new · N · d) arithmetic (twice: once per direction) and O(n_new · N / blocks + N · k)
memory — about ``2 · n_new / N`` of a brute-force build.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import numpy as np
import torch

from ....kernels import call
from ....kernels.checks import check_band, check_positive_int, check_values
from ....kernels.csr import CSR, check_csr
from ....kernels.sampling import sample_columns
from ....kernels.threads import torch_threads
from ...components.dense import gather_rows, row_blocks
from ...errors import InputError
from ...ranking import ranked_entries
from ...sparse import row_of_entries
from ...storage import GatherBuffer
from ...graphs.views import OverlayCSR
from .penalty import hub_penalty

__all__ = ["BLOCK_ENTRIES", "MIN_GEMM_ROWS", "added_density", "added_penalty", "extend_gain_graph"]

#: similarity entries of one ``[rows, N]`` tile (64 MiB of float32): 167 new rows per block at N = 10⁵
BLOCK_ENTRIES = 1 << 24
#: a row block is padded to at least this many rows (with the rows just before it): BLAS
#: libraries compute a product of very few rows by another kernel (MKL: gemv for 1 row, a
#: small-matrix path up to ~15 rows at d = 384) whose sums differ from the blocked GEMM's in
#: the last bit, which would break the bit-for-bit equality with ``gain_knn``'s tiles
MIN_GEMM_ROWS = 32
#: the per-row reverse-edge candidates are reduced to the top k when more than this many are held
MAX_PENDING = 1 << 22


# ---------------------------------------------------------------------- blocks
def _row_blocks(start: int, n: int, block_entries: int) -> list[tuple[int, int]]:
    """Consecutive blocks ``[b0, b1)`` of the new rows ``[start, n)`` with at most
    ``block_entries`` entries per ``[rows, n]`` tile (at least :data:`MIN_GEMM_ROWS` rows)."""
    rows = max(MIN_GEMM_ROWS, block_entries // max(n, 1))
    return [(b0, min(b0 + rows, n)) for b0 in range(start, n, rows)]


#: rows of X per column block of a similarity product (X is read from its files block by block)
COLUMN_BLOCK = 65_536


def _check_rows(X: np.ndarray, op: str) -> int:
    """The row count of the 2-D embeddings X (any row array: ndarray, memory-mapped, several segments'
    :class:`~hopgraph.engine.storage.StackedRows`)."""
    if len(getattr(X, "shape", ())) != 2:
        raise InputError(f"{op}: X must be a 2-D [N, d] array, got shape {getattr(X, 'shape', None)}")
    return int(X.shape[0])


def _float_rows(rows: np.ndarray, op: str) -> torch.Tensor:
    """Rows of X as a contiguous float32 tensor, checked finite (:class:`InputError` naming X)."""
    t = torch.from_numpy(np.ascontiguousarray(rows, dtype=np.float32))
    check_values(t, "X", op, non_negative=False)
    return t


def _column_blocks(X: np.ndarray) -> Iterable[tuple[int, torch.Tensor]]:
    """``(first row, rows as a float32 tensor)`` over X in blocks of :data:`COLUMN_BLOCK` rows, read
    without faulting a memory-mapped X into the process (:func:`~hopgraph.engine.components.dense.row_blocks`)."""
    for c0, block in row_blocks(X, 0, COLUMN_BLOCK):
        yield c0, torch.from_numpy(np.ascontiguousarray(block, dtype=np.float32))


def _similarities(X: np.ndarray, b0: int, b1: int, columns: Iterable[tuple[int, torch.Tensor]]
                  ) -> Iterator[tuple[int, torch.Tensor]]:
    """``(c0, X[b0:b1] @ Cᵀ)`` for each column block ``(c0, C)``, ``[b1 − b0, len(C)]``, each computed as a
    product of at least :data:`MIN_GEMM_ROWS` rows (the block padded with the rows before it)."""
    p0 = max(0, b1 - MIN_GEMM_ROWS) if b1 - b0 < MIN_GEMM_ROWS else b0
    A = _float_rows(X[p0:b1], "added_density")
    for c0, C in columns:
        yield c0, (A @ C.T)[b0 - p0:]


def _blocks(blocks: list[tuple[int, int]], progress: bool, desc: str) -> Iterable[tuple[int, int]]:
    if not progress:
        return blocks
    from tqdm.auto import tqdm

    return tqdm(blocks, desc=desc, unit="block")


# ---------------------------------------------------------------------- density / penalty
def added_density(X: np.ndarray, start: int, mode: str = "exact", n_build: int | None = None,
                  n_samples: int = 4096, seed: int = 0, block_entries: int = BLOCK_ENTRIES,
                  progress: bool = False) -> np.ndarray:
    """SPEC §1 index step 1 for the new rows ``[start, N)`` of X: ``float32 [N − start]``.

    ``mode="exact"``: ``mean_{i≠j} max(0, s_ji)`` over all N rows. ``mode="sampled"``: the
    mean of ``max(0, s_jc)`` over the columns ``c`` of the last build's sample,
    ``sample_columns(n_build, n_samples, seed)`` (:mod:`hopgraph.kernels.density`; ``n_build``
    = the number of passages at that build, required), i.e. the estimate the build's own rows
    got. Existing rows are not recomputed (see the module docstring).
    """
    n = _check_rows(X, "added_density")
    start = _check_start(start, n, "added_density")
    block_entries = check_positive_int(block_entries, "block_entries", "added_density")
    if mode not in ("exact", "sampled"):
        raise InputError(f"added_density: mode must be 'exact' or 'sampled', got {mode!r}")
    out = np.zeros(n - start, np.float32)
    if mode == "sampled":
        if n_build is None:
            raise InputError("added_density: mode 'sampled' needs n_build, the passage count of the last build")
        n_build = check_positive_int(n_build, "n_build", "added_density")
        if n_build > start:
            raise InputError(f"added_density: n_build = {n_build} exceeds start = {start}")
        cols = sample_columns(n_build, n_samples, seed)
        C = _float_rows(gather_rows(X, cols), "added_density")
        blocks = _blocks(_row_blocks(start, n, block_entries), progress, "density (added rows)")
        for b0, b1 in _one_thread(blocks):  # [rows, samples] tiles are small: one thread
            (_, R), = _similarities(X, b0, b1, [(0, C)])
            R = R.clamp_(min=0.0)
            out[b0 - start:b1 - start] = (R.sum(1, dtype=torch.float64) / len(cols)).numpy()
        return out
    if n < 2:
        return out
    for b0, b1 in _blocks(_row_blocks(start, n, block_entries), progress, "density (added rows)"):
        total = torch.zeros(b1 - b0, dtype=torch.float64)
        for c0, R in _similarities(X, b0, b1, _column_blocks(X)):
            R = R.clamp_(min=0.0)
            lo = max(b0, c0)
            own = torch.arange(lo, max(lo, min(b1, c0 + R.shape[1])))
            R[own - b0, own - c0] = 0.0  # j ≠ i
            total += R.sum(1, dtype=torch.float64)
        out[b0 - start:b1 - start] = (total / (n - 1)).numpy()
    return out


def added_penalty(density: np.ndarray, low: float, high: float, beta: float = 1.0) -> np.ndarray:
    """SPEC §1 index step 2 for new rows under the last build's normalisation: the build's
    :func:`~hopgraph.engine.pipelines.g3rag.penalty.hub_penalty` formula with its ``min`` = ``low`` and ``max`` =
    ``high`` (the build's density range), each density clipped to ``[low, high]`` first; float32.
    A new passage whose density equals a built passage's gets exactly that passage's penalty."""
    density = np.asarray(density, np.float64)
    low, high = float(low), float(high)
    if not (math.isfinite(low) and math.isfinite(high)) or low > high:
        raise InputError(f"added_penalty: need a finite density range low <= high, got [{low}, {high}]")
    if len(density) == 0:
        return np.zeros(0, np.float32)
    # hub_penalty normalises by the min and max of its input: prepend the build's range
    return hub_penalty(np.concatenate([[low, high], np.clip(density, low, high)]), beta)[2:]


# ---------------------------------------------------------------------- the graph
Triplets = tuple[np.ndarray, np.ndarray, np.ndarray]


@dataclass(frozen=True)
class _GainEdges:
    """SPEC §1 steps 3-5 for blocks of rows through the kernel op ``gain_knn_rows``: the top-``k``
    edges in the band ``[sim_min, sim_max]`` of given rows among given labelled rows, on ``device``."""

    k: int
    sim_min: float
    sim_max: float
    device: str

    def __call__(self, Q: torch.Tensor, B: torch.Tensor, penalty: np.ndarray, columns: np.ndarray,
                 exclude: np.ndarray | None = None, floor: np.ndarray | None = None) -> Triplets:
        """``(row of Q, column id, weight)`` of the top-``k`` edges of each row of ``Q`` among the rows of
        ``B`` (ids ``columns``, target penalty ``penalty``), each weighing more than the row's ``floor``,
        none to the row's ``exclude`` id."""
        g = call("gain_knn_rows", Q, B, k=self.k, sim_min=self.sim_min, sim_max=self.sim_max, penalty=penalty,
                 columns=columns, exclude=exclude, floor=floor, device=self.device)
        return _triplets(g)

    def both(self, Q: torch.Tensor, B: torch.Tensor, penalty: np.ndarray, columns: np.ndarray,
             q_penalty: np.ndarray, q_columns: np.ndarray, reverse_floor: np.ndarray) -> tuple[Triplets, Triplets]:
        """The edges of the rows of ``Q`` (ids ``q_columns``, none to their own) among the rows of ``B`` and,
        from the same similarities, those of the rows of ``B`` among the rows of ``Q`` (target penalty
        ``q_penalty``) weighing more than ``reverse_floor`` (+inf: none); triplets as :meth:`__call__`'s."""
        fwd, rev = call("gain_knn_rows", Q, B, k=self.k, sim_min=self.sim_min, sim_max=self.sim_max,
                        penalty=penalty, columns=columns, exclude=q_columns, reverse_floor=reverse_floor,
                        query_columns=q_columns, query_penalty=q_penalty, device=self.device)
        return _triplets(fwd), _triplets(rev)


def _triplets(g: CSR) -> Triplets:
    """``(row, column, weight)`` of every edge of ``g``."""
    return row_of_entries(g.indptr), g.indices.astype(np.int64), g.data


def _concat(parts: list[Triplets]) -> Triplets:
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)
    return tuple(np.concatenate(a) for a in zip(*parts))  # type: ignore[return-value]


def _top_rows(parts: list[Triplets], rows: np.ndarray, k: int, vals: np.ndarray, cols: np.ndarray) -> None:
    """Write the top ``k`` of the candidate edges ``parts`` of the new rows ``rows`` (indices into ``vals`` /
    ``cols``, ``[n_new, k]``, best first, padded with -inf / -1)."""
    r, rank, c, w = ranked_entries(*_concat(parts), k)
    vals[rows[r], rank], cols[rows[r], rank] = w, c


def _merge_rows(old: CSR | None, rows: np.ndarray, cols: np.ndarray, w: np.ndarray, k: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each row that has candidate edges ``(rows, cols, w)`` (any order, weights > 0): its old
    edges (``old``'s row; none when ``old`` is None) and its candidates reduced to the ``k`` best
    in ``gain_knn``'s order (weight descending, ties toward the lower column). Returns triplets with
    their rank in the row: ``(rows, ranks, cols int64, w float32)``, sorted by row then rank."""
    touched = np.unique(rows)
    if old is not None and len(touched):
        lens = np.diff(old.indptr)[touched]
        at = np.repeat(old.indptr[touched], lens) + (np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens))
        rows = np.concatenate([rows, np.repeat(touched, lens)])
        cols = np.concatenate([cols, np.asarray(old.indices[at], np.int64)])
        w = np.concatenate([w, np.asarray(old.data[at], np.float32)])
    r, rank, c, v = ranked_entries(rows, cols, np.asarray(w, np.float32), k)
    return r, rank, c, v.astype(np.float32)


def _check_start(start: int, n: int, op: str) -> int:
    if isinstance(start, bool) or not isinstance(start, (int, np.integer)) or not 0 <= start <= n:
        raise InputError(f"{op}: start must be an integer in [0, {n}], got {start!r}")
    return int(start)


def _check_graph(graph: CSR, start: int, k: int) -> CSR | OverlayCSR:
    """``graph`` as the CSR (or overlay) of ``start`` rows and columns it must be, rows of at most ``k`` edges."""
    old = graph if isinstance(graph, OverlayCSR) else \
        CSR(np.asarray(graph.indptr, np.int64), graph.indices, graph.data, int(graph.n_cols))
    if len(old.indptr) < 1 or int(old.indptr[0]) != 0 or int(old.indptr[-1]) != len(old.indices) \
            or len(old.data) != len(old.indices):
        raise InputError("extend_gain_graph: graph's indptr, indices and data do not fit together")
    if old.n_rows != start or old.n_cols != start:
        raise InputError(f"extend_gain_graph: graph must have start = {start} rows and columns, "
                         f"got {old.n_rows} × {old.n_cols}")
    longest = int(np.diff(old.indptr).max(initial=0))
    if longest > k:
        raise InputError(f"extend_gain_graph: graph has a row of {longest} edges, more than k = {k}")
    return old


def _check_params(n: int, k: int, sim_min: float, sim_max: float, penalty: np.ndarray) -> tuple[np.ndarray, int]:
    """The penalty as float32 ``[n]`` (finite, non-negative) and k capped at ``n − 1``; the band checked."""
    op = "extend_gain_graph"
    k = check_positive_int(k, "k", op)
    check_band(sim_min, sim_max, op)
    pen = np.asarray(penalty)
    if pen.shape != (n,):
        raise InputError(f"{op}: penalty must have shape ({n},), got {pen.shape}")
    check_values(pen, "penalty", op)
    pen = pen.astype(np.float32)
    check_values(pen, "penalty (as float32)", op)
    return pen, int(min(k, max(n - 1, 0)))


def _thresholds(old: CSR, start: int, k: int) -> np.ndarray:
    """Per old row, the weight a new edge must beat to enter it: its k-th weight when it holds ``k``
    edges (a new column is higher than every old one, so it loses a tie), else 0."""
    thr = np.zeros(start, np.float32)
    full = np.diff(old.indptr) == k
    thr[full] = old.data[old.indptr[1:][full] - 1]
    return thr


def extend_gain_graph(graph: CSR, X: np.ndarray, start: int, penalty: np.ndarray, k: int,
                      sim_min: float, sim_max: float, block_entries: int = BLOCK_ENTRIES,
                      progress: bool = False, as_overlay: bool = False,
                      candidates: "Callable[[np.ndarray, np.ndarray, int], list] | None" = None,
                      device: str = "cpu") -> "CSR | OverlayCSR":
    """The gain-kNN graph of all N rows of X from the graph of rows ``[0, start)`` (SPEC §1 steps 3-5).

    ``graph``: ``gain_knn``'s graph of ``X[:start]`` (``start`` rows and columns; an
    approximate graph such as mode ``"ann"``'s is accepted, its rows are kept as they are);
    ``penalty [N]``: the target penalty of every row (step 2; ``penalty[:start]`` is the one
    ``graph`` was built with); ``k``, ``sim_min``, ``sim_max`` as for ``gain_knn`` (k is
    capped at N − 1). Returns the CSR (``indptr int64``, ``indices int32``, ``data float32``)
    of N rows: rows ``[start, N)`` are the top-``k`` eligible edges of the new rows over all
    N columns; an old row is its old edges merged with the reverse edges into the new rows
    that reach its top ``k``. Equal to ``gain_knn(X, k, sim_min, sim_max, penalty)`` when
    ``graph`` is ``gain_knn(X[:start], k, sim_min, sim_max, penalty[:start])`` (module
    docstring). Work: row blocks of the new rows against all of X, at most ``block_entries``
    entries per similarity tile, each block of edges computed by the kernel op ``gain_knn_rows``
    on ``device``. ``candidates`` (a graph built from IVF candidates, mode ``"ann"``):
    ``candidates(X, new rows, start)`` yields groups of rows ``(rows, the new rows scored against
    them, the new rows these rows may take an edge to)``
    (:class:`~hopgraph.engine.pipelines.g3rag.ann_graph.AddedRowCandidates`: the build's graph
    cells), each group read once, instead of all N; a new row's candidates are the union of the
    groups that name it.
    ``as_overlay``: return the result as an
    :class:`~hopgraph.engine.graphs.views.OverlayCSR` over ``graph`` (only the rewritten and new rows
    are made; a stored graph is not copied).
    """
    n = _check_rows(X, "extend_gain_graph")
    pen, k = _check_params(n, k, sim_min, sim_max, penalty)
    start = _check_start(start, n, "extend_gain_graph")
    block_entries = check_positive_int(block_entries, "block_entries", "extend_gain_graph")
    old = _check_graph(graph, start, k)
    if start == n:
        return old if as_overlay else check_csr(old.indptr, old.indices, old.data, n, "extend_gain_graph")
    new_vals = np.full((n - start, k), -np.inf, np.float32)
    new_cols = np.full((n - start, k), -1, np.int64)
    pending: list[Triplets] = []
    if k > 0:
        edges = _GainEdges(k, float(sim_min), float(sim_max), device)
        extend = _extend_by_cells if candidates is not None else _extend_brute_force
        pending = extend(X, start, pen, edges, _thresholds(old, start, k), new_vals, new_cols,
                         candidates=candidates, block_entries=block_entries, progress=progress)
    candidates_held = _concat(pending)
    merged = _merge_rows(old, *candidates_held, k) if len(candidates_held[0]) else None  # rows taking new edges
    if as_overlay:
        base = old if isinstance(old, OverlayCSR) else OverlayCSR.over(old, start)
        return base.updated(*_changes(merged, start, n, new_vals, new_cols), n_cols=n)
    return _assemble(old, start, n, merged, new_vals, new_cols)


def _extend_brute_force(X: np.ndarray, start: int, pen: np.ndarray, edges: _GainEdges, thr: np.ndarray,
                        new_vals: np.ndarray, new_cols: np.ndarray, block_entries: int, progress: bool,
                        **_: object) -> list[Triplets]:
    """The new rows' edges over all N columns (written into ``new_vals`` / ``new_cols``) and the reverse
    edges of the old rows into them above the rows' thresholds ``thr`` (returned, held per row to the top
    k when more than :data:`MAX_PENDING` accumulate, which raises ``thr``)."""
    n, k = len(pen), edges.k
    pending: list[Triplets] = []
    n_pending = 0
    for b0, b1 in _blocks(_row_blocks(start, n, block_entries), progress, "gain-kNN (added rows)"):
        A = _float_rows(X[b0:b1], "extend_gain_graph")
        new_ids = np.arange(b0, b1, dtype=np.int64)
        found: list[Triplets] = []
        for c0, C in _column_blocks(X):
            ids = np.arange(c0, c0 + len(C), dtype=np.int64)
            n_old = max(0, min(len(C), start - c0))
            if n_old == 0:
                found.append(edges(A, C, pen[c0:c0 + len(C)], ids, exclude=new_ids))
                continue
            floor = np.full(len(C), np.inf, np.float32)  # only old rows take reverse edges
            floor[:n_old] = thr[c0:c0 + n_old]
            fwd, (r, c, w) = edges.both(A, C, pen[c0:c0 + len(C)], ids, pen[b0:b1], new_ids, floor)
            found.append(fwd)
            pending.append((r + c0, c, w))  # old row → new row
            n_pending += len(r)
        _top_rows([(r + b0 - start, c, w) for r, c, w in found], np.arange(n - start), k, new_vals, new_cols)
        if n_pending > MAX_PENDING and k < n - start:  # hold at most k candidates per row, and raise the thresholds
            rows, rank, cs, ws = _merge_rows(None, *_concat(pending), k)
            pending, n_pending = [(rows, cs, ws)], len(rows)
            kth = rank == k - 1  # a row holding k candidates: a later one must beat its k-th
            thr[rows[kth]] = np.maximum(thr[rows[kth]], ws[kth])
    return pending


def _extend_by_cells(X: np.ndarray, start: int, pen: np.ndarray, edges: _GainEdges, thr: np.ndarray,
                     new_vals: np.ndarray, new_cols: np.ndarray, candidates: Callable, progress: bool,
                     **_: object) -> list[Triplets]:
    """As :func:`_extend_brute_force` over the groups of rows ``candidates`` yields (the build's graph
    cells): each new row's edges among the rows of the groups that name it, each old row's reverse edges
    into the new rows its group may take an edge to."""
    n = len(pen)
    A_new = _float_rows(gather_rows(X, np.arange(start, n)), "extend_gain_graph")
    found: list[Triplets] = []
    pending: list[Triplets] = []
    groups = _blocks(candidates(X, np.arange(start, n, dtype=np.int64), start), progress,
                     "gain-kNN (added rows, by cells)")
    for members, M, fwd, rev in _one_thread(_read_groups(X, groups)):  # small tiles: one thread
        if len(fwd):  # the added rows' candidates among these rows
            r, c, w = edges(A_new[fwd - start], M, pen[members], members, exclude=fwd)
            found.append((fwd[r] - start, c, w))
        n_old = int(np.searchsorted(members, start))  # members are sorted: the old rows first
        if len(rev) and n_old:  # [old rows, added rows]: above a row's threshold it takes the edge
            r, c, w = edges(M[:n_old], A_new[rev - start], pen[rev], rev, floor=thr[members[:n_old]])
            pending.append((members[r], c, w))
    _top_rows(found, np.arange(n - start), edges.k, new_vals, new_cols)
    return pending


#: rows of X read at once for the groups of an add by cells (:func:`_read_groups`)
GROUP_READ_ROWS = 65_536


def _read_groups(X: np.ndarray, groups: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]]
                 ) -> Iterator[tuple[np.ndarray, torch.Tensor, np.ndarray, np.ndarray]]:
    """``(rows, X[rows] float32, a, b)`` for each group ``(rows, a, b)``, the rows of consecutive
    groups read together, about :data:`GROUP_READ_ROWS` at a time, into one reused buffer whose
    pages and the mapped pages of X are faulted in once for the whole pass
    (:class:`~hopgraph.engine.storage.GatherBuffer`); a yielded block is valid until the next one."""
    batch: list = []
    size = 0
    with GatherBuffer(X, GROUP_READ_ROWS) as gather:
        for g in [*groups, None]:
            if g is not None:
                batch.append(g)
                size += len(g[0])
            if batch and (g is None or size >= GROUP_READ_ROWS):
                rows = np.concatenate([b[0] for b in batch])
                block = torch.from_numpy(np.ascontiguousarray(gather(rows), dtype=np.float32))
                at = 0
                for members, a, b in batch:
                    yield members, block[at:at + len(members)], a, b
                    at += len(members)
                batch, size = [], 0


def _one_thread(items: Iterable) -> Iterator:
    """``items``, each handled with one torch thread."""
    with torch_threads(1):
        yield from items


def _changes(merged: tuple | None, start: int, n: int, new_vals: np.ndarray, new_cols: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The rows the extension rewrites (``merged``, :func:`_merge_rows`'s output) or appends, sorted, as a
    CSR: ``(rows, indptr, indices int32, data float32)``."""
    rows, indptr, indices, data = [], [np.zeros(1, np.int64)], [], []
    if merged is not None:
        mr, _, mc, mw = merged
        touched, counts = np.unique(mr, return_counts=True)
        rows.append(touched)
        indptr.append(np.cumsum(counts))
        indices.append(mc.astype(np.int32))
        data.append(mw.astype(np.float32))
    valid = new_cols >= 0
    rows.append(np.arange(start, n, dtype=np.int64))
    indptr.append(indptr[-1][-1] + np.cumsum(valid.sum(1)))
    indices.append(new_cols[valid].astype(np.int32))
    data.append(new_vals[valid].astype(np.float32))
    return (np.concatenate(rows), np.concatenate(indptr).astype(np.int64), np.concatenate(indices),
            np.concatenate(data))


def _assemble(old: CSR, start: int, n: int, merged: tuple | None, new_vals: np.ndarray,
              new_cols: np.ndarray) -> CSR:
    """Pack the kept old rows, the merged rows (:func:`_merge_rows`'s output) and the new rows into one
    CSR of ``n`` rows."""
    old_len = np.diff(old.indptr)
    counts = np.zeros(n, np.int64)
    counts[:start] = old_len
    touched = np.zeros(start, bool)
    if merged is not None:
        mr, rank, mc, mw = merged
        touched[mr] = True
        counts[:start][touched] = np.bincount(mr, minlength=start)[touched]
    valid = new_cols >= 0
    counts[start:] = valid.sum(1)
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=indptr[1:])
    indices = np.empty(int(indptr[-1]), np.int32)
    data = np.empty(int(indptr[-1]), np.float32)
    # rows left as they were: copied as blocks of consecutive edges
    old_rows = np.repeat(np.arange(start, dtype=np.int64), old_len)
    keep = ~touched[old_rows]
    shift = (indptr[:start] - old.indptr[:start])[old_rows[keep]]
    dest = np.flatnonzero(keep) + shift
    indices[dest], data[dest] = old.indices[keep], old.data[keep]
    if merged is not None:
        dest = indptr[mr] + rank
        indices[dest], data[dest] = mc, mw
    # the new rows are sorted best first with the non-edges last: their valid entries, row by row,
    # are exactly the tail of the CSR arrays
    indices[indptr[start]:], data[indptr[start]:] = new_cols[valid], new_vals[valid]
    return check_csr(indptr, indices, data, n, "extend_gain_graph")

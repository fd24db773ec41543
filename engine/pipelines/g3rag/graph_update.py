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

Cost: the new rows are processed in row blocks of at most ``block_entries`` similarity
entries (``[rows, N]`` tiles against all of X; the ``[N, N]`` matrix never exists), so an
add costs O(n_new · N · d) arithmetic and O(n_new · N / blocks + N · k) memory — about
``n_new / N`` of a brute-force build. The update runs on the CPU (torch, multi-threaded
BLAS) whatever device built the graph.
"""
from __future__ import annotations

import math
from typing import Iterable

import numpy as np
import torch

from ....kernels.checks import check_positive_int
from ....kernels.density import sample_columns
from ....kernels.gain_knn import (as_embedding_tensor, check_gain_knn_inputs, select_topk, tile_candidates,
                                weights_function)
from ...errors import InputError
from ....kernels.csr import CSR, check_csr
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


def _similarities(X: torch.Tensor, b0: int, b1: int, cols: torch.Tensor | None = None) -> torch.Tensor:
    """``X[b0:b1] @ X[cols]ᵀ`` (all columns when ``cols`` is None) as ``[b1 − b0, ·]``, computed as
    a product of at least :data:`MIN_GEMM_ROWS` rows (the block padded with the rows before it)."""
    p0 = max(0, b1 - MIN_GEMM_ROWS) if b1 - b0 < MIN_GEMM_ROWS else b0
    Y = X if cols is None else X[cols]
    return (X[p0:b1] @ Y.T)[b0 - p0:]


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
    Xt = as_embedding_tensor(X, "X", "added_density")
    n = Xt.shape[0]
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
        cols = torch.from_numpy(sample_columns(n_build, n_samples, seed))
        for b0, b1 in _blocks(_row_blocks(start, n, block_entries), progress, "density (added rows)"):
            R = _similarities(Xt, b0, b1, cols).clamp_(min=0.0)
            out[b0 - start:b1 - start] = (R.sum(1, dtype=torch.float64) / len(cols)).numpy()
        return out
    if n < 2:
        return out
    for b0, b1 in _blocks(_row_blocks(start, n, block_entries), progress, "density (added rows)"):
        R = _similarities(Xt, b0, b1).clamp_(min=0.0)
        R[torch.arange(b1 - b0), torch.arange(b0, b1)] = 0.0  # j ≠ i
        out[b0 - start:b1 - start] = (R.sum(1, dtype=torch.float64) / (n - 1)).numpy()
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
def _merge_rows(old: CSR | None, rows: np.ndarray, cols: np.ndarray, w: np.ndarray, k: int,
                block_entries: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each row that has candidate edges ``(rows, cols, w)`` (any order, weights > 0): its old
    edges (``old``'s row; none when ``old`` is None) and its candidates reduced to the ``k`` best
    in ``gain_knn``'s order (weight descending, ties toward the lower column), by the kernel's
    exact :func:`~hopgraph.kernels.gain_knn.select_topk` on padded ``[rows, width]`` tiles of at
    most ``block_entries`` entries (rows grouped by width). Returns triplets with their rank in
    the row: ``(rows, ranks, cols int64, w float32)``, each row's entries together and best first
    (the rows in no particular order)."""
    order = np.argsort(rows, kind="stable")
    rows, cols, w = rows[order], cols[order], w[order]
    touched, first, n_cand = np.unique(rows, return_index=True, return_counts=True)
    n_old = np.zeros(len(touched), np.int64) if old is None else np.diff(old.indptr)[touched]
    width = n_old + n_cand
    by_width = np.argsort(width, kind="stable")
    out: list[tuple[np.ndarray, ...]] = []
    i = 0
    while i < len(by_width):  # chunks of rows of increasing width, at most block_entries entries each
        end = min(len(by_width), i + max(1, block_entries // int(width[by_width[i]])))
        while end - i > 1 and (end - i) * int(width[by_width[end - 1]]) > block_entries:
            end = i + max(1, block_entries // int(width[by_width[end - 1]]))
        sel = by_width[i:end]
        i = end
        t, wd = len(sel), int(width[sel].max())
        V = np.full((t, wd), -np.inf, np.float32)
        C = np.full((t, wd), -1, np.int64)
        if old is not None:  # the old row, at its start
            r_old = np.repeat(np.arange(t), n_old[sel])
            at = np.arange(len(r_old)) - np.repeat(np.cumsum(n_old[sel]) - n_old[sel], n_old[sel])
            src = np.repeat(old.indptr[touched[sel]], n_old[sel]) + at
            V[r_old, at], C[r_old, at] = old.data[src], old.indices[src]
        r_new = np.repeat(np.arange(t), n_cand[sel])  # then the candidates
        at = np.arange(len(r_new)) - np.repeat(np.cumsum(n_cand[sel]) - n_cand[sel], n_cand[sel])
        src = np.repeat(first[sel], n_cand[sel]) + at
        V[r_new, n_old[sel][r_new] + at], C[r_new, n_old[sel][r_new] + at] = w[src], cols[src]
        vals, top = select_topk(torch.from_numpy(V), torch.from_numpy(C), min(k, wd))
        vals, top = vals.numpy(), top.numpy()
        valid = top >= 0
        r_out, rank = np.nonzero(valid)
        out.append((touched[sel][r_out], rank, top[valid], vals[valid]))
    if not out:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)
    return tuple(np.concatenate(x) for x in zip(*out))


def _check_start(start: int, n: int, op: str) -> int:
    if isinstance(start, bool) or not isinstance(start, (int, np.integer)) or not 0 <= start <= n:
        raise InputError(f"{op}: start must be an integer in [0, {n}], got {start!r}")
    return int(start)


def extend_gain_graph(graph: CSR, X: np.ndarray, start: int, penalty: np.ndarray, k: int,
                      sim_min: float, sim_max: float, block_entries: int = BLOCK_ENTRIES,
                      progress: bool = False) -> CSR:
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
    entries per similarity tile.
    """
    Xt, pen, k, sim_min, sim_max = check_gain_knn_inputs(X, k, sim_min, sim_max, penalty)
    n = Xt.shape[0]
    start = _check_start(start, n, "extend_gain_graph")
    block_entries = check_positive_int(block_entries, "block_entries", "extend_gain_graph")
    old = check_csr(graph.indptr, graph.indices, graph.data, graph.n_cols, "extend_gain_graph: graph")
    if old.n_rows != start or old.n_cols != start:
        raise InputError(f"extend_gain_graph: graph must have start = {start} rows and columns, "
                         f"got {old.n_rows} × {old.n_cols}")
    old_len = np.diff(old.indptr)
    if start and int(old_len.max()) > max(k, 0):
        raise InputError(f"extend_gain_graph: graph has a row of {int(old_len.max())} edges, more than k = {k}")
    if start == n:
        return check_csr(old.indptr, old.indices, old.data, n, "extend_gain_graph")
    n_new = n - start
    new_cols = np.full((n_new, k), -1, np.int64)
    new_vals = np.full((n_new, k), -np.inf, np.float32)
    # an existing row takes a new edge only if it beats the row's k-th weight (a new column is
    # higher than every old one, so it loses a tie), or the row holds fewer than k edges
    thr = np.zeros(start, np.float32)
    full = old_len == k
    if k:
        thr[full] = old.data[old.indptr[1:][full] - 1]
    thr_t = torch.from_numpy(thr)
    pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    n_pending = 0
    weights = weights_function((n - start) * (n + start))  # new rows × all, old rows × new
    if k > 0:
        for b0, b1 in _blocks(_row_blocks(start, n, block_entries), progress, "gain-kNN (added rows)"):
            S = _similarities(Xt, b0, b1)
            W = weights(S, pen, sim_min, sim_max)
            W[torch.arange(b1 - b0), torch.arange(b0, b1)] = -math.inf
            vals, cols = tile_candidates(W, 0, k)
            vals, cols = select_topk(vals, cols, k)
            new_vals[b0 - start:b1 - start], new_cols[b0 - start:b1 - start] = vals.numpy(), cols.numpy()
            if start == 0:
                continue
            R = weights(S[:, :start].T, pen[b0:b1], sim_min, sim_max)  # [start, b]: old row → new column
            r, c = (R > thr_t[:, None]).nonzero(as_tuple=True)
            if len(r):
                pending.append((r.numpy(), (c + b0).numpy(), R[r, c].numpy()))
                n_pending += len(r)
            if n_pending > MAX_PENDING and k < n_new:  # hold at most k candidates per row, and raise the thresholds
                rows, rank, cs, ws = _merge_rows(None, *(np.concatenate(a) for a in zip(*pending)), k, block_entries)
                pending, n_pending = [(rows, cs, ws)], len(rows)
                kth = rank == k - 1  # a row holding k candidates: a later one must beat its k-th
                thr[rows[kth]] = np.maximum(thr[rows[kth]], ws[kth])
    return _assemble(old, start, n, k, pending, new_vals, new_cols, block_entries)


def _assemble(old: CSR, start: int, n: int, k: int, pending: list, new_vals: np.ndarray,
              new_cols: np.ndarray, block_entries: int) -> CSR:
    """Pack the kept old rows, the merged rows and the new rows into one CSR of ``n`` rows."""
    old_len = np.diff(old.indptr)
    counts = np.zeros(n, np.int64)
    counts[:start] = old_len
    touched = np.zeros(start, bool)
    if pending:
        mr, rank, mc, mw = _merge_rows(old, *(np.concatenate(a) for a in zip(*pending)), k, block_entries)
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
    if pending:
        dest = indptr[mr] + rank
        indices[dest], data[dest] = mc, mw
    # the new rows are sorted best first with the non-edges last: their valid entries, row by row,
    # are exactly the tail of the CSR arrays
    indices[indptr[start]:], data[indptr[start]:] = new_cols[valid], new_vals[valid]
    return check_csr(indptr, indices, data, n, "extend_gain_graph")

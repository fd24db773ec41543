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
from typing import Callable, Iterable, Iterator

import numpy as np
import torch

from ....kernels.checks import check_positive_int
from ....kernels.density import sample_columns
from ....kernels.gain_knn import (as_embedding_tensor, check_gain_knn_inputs, select_topk, tile_candidates,
                                weights_function)
from ...components.dense import gather_rows, row_blocks
from ...storage import GatherBuffer
from ...graphs.views import OverlayCSR
from ...errors import InputError
from ....kernels.csr import CSR, check_csr
from ....kernels.threads import torch_threads
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
    A = as_embedding_tensor(np.ascontiguousarray(X[p0:b1], dtype=np.float32), "X", "extend_gain_graph")
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
        C = as_embedding_tensor(gather_rows(X, cols), "X", "added_density")
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
                      progress: bool = False, as_overlay: bool = False,
                      candidates: "Callable[[np.ndarray, np.ndarray, int], list] | None" = None) -> "CSR | OverlayCSR":
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
    entries per similarity tile. ``candidates`` (a graph built from IVF candidates, mode ``"ann"``):
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
    _, pen, k, sim_min, sim_max = check_gain_knn_inputs(np.zeros((n, 1), np.float32), k, sim_min, sim_max, penalty)
    start = _check_start(start, n, "extend_gain_graph")
    block_entries = check_positive_int(block_entries, "block_entries", "extend_gain_graph")
    old = graph if isinstance(graph, OverlayCSR) else \
        CSR(np.asarray(graph.indptr, np.int64), graph.indices, graph.data, int(graph.n_cols))
    if len(old.indptr) < 1 or int(old.indptr[0]) != 0 or int(old.indptr[-1]) != len(old.indices) \
            or len(old.data) != len(old.indices):
        raise InputError("extend_gain_graph: graph's indptr, indices and data do not fit together")
    if old.n_rows != start or old.n_cols != start:
        raise InputError(f"extend_gain_graph: graph must have start = {start} rows and columns, "
                         f"got {old.n_rows} × {old.n_cols}")
    old_len = np.diff(old.indptr)
    if start and int(old_len.max()) > max(k, 0):
        raise InputError(f"extend_gain_graph: graph has a row of {int(old_len.max())} edges, more than k = {k}")
    if start == n:
        return old if as_overlay else check_csr(old.indptr, old.indices, old.data, n, "extend_gain_graph")
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
    if k > 0 and candidates is not None:
        A_new = torch.from_numpy(np.ascontiguousarray(gather_rows(X, np.arange(start, n)), dtype=np.float32))
        top_vals, top_cols = torch.from_numpy(new_vals), torch.from_numpy(new_cols)  # running top-k, shared
        groups = _blocks(candidates(X, np.arange(start, n, dtype=np.int64), start), progress,
                         "gain-kNN (added rows, by cells)")
        for members, M, fwd, rev in _one_thread(_read_groups(X, groups)):  # small tiles: one thread
            m_t = torch.from_numpy(members)
            if len(fwd):  # the added rows' candidates among these rows: a tile, merged into their top-k
                W = weights(A_new[fwd - start] @ M.T, pen[m_t], sim_min, sim_max)
                at = np.minimum(np.searchsorted(members, fwd), len(members) - 1)
                own = np.flatnonzero(members[at] == fwd)
                W[torch.from_numpy(own), torch.from_numpy(at[own])] = -math.inf
                vals, pos = tile_candidates(W, 0, k)
                cols = torch.where(pos >= 0, m_t[pos.clamp(min=0)], -1)
                cur = torch.from_numpy(fwd - start)
                v, c = select_topk(torch.cat([top_vals[cur], vals], 1), torch.cat([top_cols[cur], cols], 1), k)
                top_vals[cur], top_cols[cur] = v, c
            n_old = int(np.searchsorted(members, start))  # members are sorted: the old rows first
            if len(rev) and n_old:  # [old rows, added rows]: above a row's threshold it takes the edge
                rows_o = members[:n_old]
                R = weights(M[:n_old] @ A_new[rev - start].T, pen[torch.from_numpy(rev)],
                            sim_min, sim_max)
                r, c = (R > thr_t[torch.from_numpy(rows_o), None]).nonzero(as_tuple=True)
                if len(r):
                    pending.append((rows_o[r.numpy()], rev[c.numpy()], R[r, c].numpy()))
    elif k > 0:
        for b0, b1 in _blocks(_row_blocks(start, n, block_entries), progress, "gain-kNN (added rows)"):
            cand_vals, cand_cols = [], []
            for c0, S in _similarities(X, b0, b1, _column_blocks(X)):
                c1 = c0 + S.shape[1]
                W = weights(S, pen[c0:c1], sim_min, sim_max)
                lo = max(b0, c0)
                own = torch.arange(lo, max(lo, min(b1, c1)))
                W[own - b0, own - c0] = -math.inf
                vals, cols = tile_candidates(W, c0, k)
                cand_vals.append(vals)
                cand_cols.append(cols)
                if c0 >= start:
                    continue
                old_cols = min(c1, start) - c0  # [old rows of this block, b]: old row → new column
                R = weights(S[:, :old_cols].T, pen[b0:b1], sim_min, sim_max)
                r, c = (R > thr_t[c0:c0 + old_cols, None]).nonzero(as_tuple=True)
                if len(r):
                    pending.append(((r + c0).numpy(), (c + b0).numpy(), R[r, c].numpy()))
                    n_pending += len(r)
            vals, cols = select_topk(torch.cat(cand_vals, 1), torch.cat(cand_cols, 1), k)
            new_vals[b0 - start:b1 - start], new_cols[b0 - start:b1 - start] = vals.numpy(), cols.numpy()
            if n_pending > MAX_PENDING and k < n_new:  # hold at most k candidates per row, and raise the thresholds
                rows, rank, cs, ws = _merge_rows(None, *(np.concatenate(a) for a in zip(*pending)), k, block_entries)
                pending, n_pending = [(rows, cs, ws)], len(rows)
                kth = rank == k - 1  # a row holding k candidates: a later one must beat its k-th
                thr[rows[kth]] = np.maximum(thr[rows[kth]], ws[kth])
    changes = _changes(old, start, n, k, pending, new_vals, new_cols, block_entries)
    if as_overlay:
        base = old if isinstance(old, OverlayCSR) else OverlayCSR.over(old, start)
        return base.updated(*changes, n_cols=n)
    return _assemble(old, start, n, k, pending, new_vals, new_cols, block_entries)


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


def _changes(old: CSR, start: int, n: int, k: int, pending: list, new_vals: np.ndarray, new_cols: np.ndarray,
             block_entries: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The rows the extension rewrites or appends, sorted, as a CSR: ``(rows, indptr, indices int32,
    data float32)``."""
    rows, indptr, indices, data = [], [np.zeros(1, np.int64)], [], []
    if pending:
        mr, rank, mc, mw = _merge_rows(old, *(np.concatenate(a) for a in zip(*pending)), k, block_entries)
        order = np.lexsort((rank, mr))
        mr, mc, mw = mr[order], mc[order], mw[order]
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

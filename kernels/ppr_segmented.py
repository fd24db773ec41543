"""The segmented strategy of batched_ppr's CPU path for localised walks (SPEC §2 step 6).

When the regions are small and mostly disjoint, the queries walk ONE block-diagonal matrix whose
block b is the iteration matrix on region R_b alone, on one iterate vector of Σ_b |R_b| entries
(:func:`segmented_ppr`), with the per-query stop rule of :mod:`.ppr_stop` and compaction of the
stopped segments. A query's result depends on its own prior and region only, bit for bit.
Measurements: ``docs/decisions/kernels-batched-ppr-segmented-walks.md``.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

from .csr import index_dtype
from .ppr_stop import StopRule

#: stopped segments stay in the block-diagonal matrix until they hold this share of the iterate's entries
SEGMENT_COMPACT_SHARE = 0.5
#: region-matrix entries expanded at once while building the block-diagonal matrix (see :func:`block_diagonal`)
EXPAND_ENTRIES = 1 << 16


def region_entries(region: np.ndarray, rows: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(query, node, offsets)`` of the entries of ``region`` (bool [B, N]) restricted to the union
    ``rows`` (all rows when None): int64 arrays [T] ordered by query, then node (a union row),
    and the [B + 1] offsets of each query's segment in them (SPEC §2 step 6, localised)."""
    query, node = np.nonzero(region if rows is None else region[:, rows])
    offsets = np.zeros(region.shape[0] + 1, np.int64)
    np.cumsum(np.bincount(query, minlength=region.shape[0]), out=offsets[1:])
    return query, node, offsets


def expand_chunks(counts: np.ndarray, budget: int) -> list[tuple[int, int]]:
    """Consecutive ``[lo, hi)`` ranges of ``counts``' positions, each summing to at most
    ``budget`` (or one position holding more): bounds the memory of :func:`block_diagonal`."""
    ends = np.cumsum(counts)
    chunks, lo = [], 0
    while lo < len(counts):
        start = ends[lo - 1] if lo else 0
        hi = max(lo + 1, int(np.searchsorted(ends, start + budget, side="right")))
        chunks.append((lo, hi))
        lo = hi
    return chunks


def block_hits(A: sp.csr_matrix, keys: np.ndarray, query: np.ndarray, node: np.ndarray, lo: int, hi: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(row, col, value)`` of the block-diagonal matrix's entries in its rows ``[lo, hi)``:
    row g = (b, i) of A expanded, each column j looked up as key ``b·U + j`` in the sorted
    ``keys`` of the region entries, the hits kept (rows ascending; columns in A's order)."""
    start = A.indptr[node[lo:hi]]
    count = A.indptr[node[lo:hi] + 1] - start
    row = np.repeat(np.arange(lo, hi, dtype=np.int64), count)
    first = np.cumsum(count) - count  # position of each row's first entry in the expansion
    pos = np.repeat(start - first, count) + np.arange(len(row), dtype=np.int64)
    key = query[row] * np.int64(A.shape[0]) + A.indices[pos]
    col = np.searchsorted(keys, key)
    hit = keys[np.minimum(col, len(keys) - 1)] == key
    return row[hit], col[hit], A.data[pos[hit]]


def block_diagonal(A: sp.csr_matrix, query: np.ndarray, node: np.ndarray) -> sp.csr_matrix:
    """The block-diagonal CSR [T, T] whose block b is ``A[R_b][:, R_b]`` (SPEC §2 step 6, localised):
    row and column g = (query[g], node[g]) of the region entries (ordered by query, then node).
    Built without a loop over the queries (see :func:`block_hits`), in chunks of at most
    :data:`EXPAND_ENTRIES` expanded entries written into the CSR's arrays as they come: the
    temporaries stay small (fresh ones of 10⁶ entries and more cost as much in page faults
    as in work), and of the arrays sized for every expanded entry only the pages of hits
    are ever touched."""
    T = len(query)
    keys = query * np.int64(A.shape[0]) + node
    counts = np.diff(A.indptr)[node]
    total = int(counts.sum())
    indices, data = np.empty(total, index_dtype(total, T)), np.empty(total, A.dtype)
    indptr = np.zeros(T + 1, np.int64)
    filled = 0
    for lo, hi in expand_chunks(counts, EXPAND_ENTRIES):
        row, col, val = block_hits(A, keys, query, node, lo, hi)
        indices[filled:filled + len(col)], data[filled:filled + len(col)] = col, val
        indptr[lo + 1:hi + 1] = np.bincount(row - lo, minlength=hi - lo)
        filled += len(col)
    return csr_of(np.cumsum(indptr), indices[:filled], data[:filled], T)


def csr_of(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, n: int) -> sp.csr_matrix:
    """A square scipy CSR [n, n] on these arrays (int32 indices where they fit), not re-checked."""
    idx = index_dtype(len(indices), n)
    return sp.csr_matrix((data, np.asarray(indices, idx), np.asarray(indptr, idx)), shape=(n, n), copy=False)


def keep_entries(BD: sp.csr_matrix, keep: np.ndarray) -> sp.csr_matrix:
    """``BD[keep][:, keep]`` of a block-diagonal ``BD`` whose ``keep`` (bool) covers whole blocks: the
    kept rows, their columns renumbered (they all lie in kept blocks)."""
    sub = BD[np.flatnonzero(keep)]
    renumber = np.cumsum(keep, dtype=sub.indices.dtype) - 1
    return csr_of(sub.indptr, renumber[sub.indices], sub.data, int(keep.sum()))


def segment_sums(v: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """float64 [S]: the sum of each consecutive segment of ``v`` (``lengths`` [S], empty ones 0), each
    from its own entries only (``np.add.reduceat`` at the non-empty segments' starts)."""
    out = np.zeros(len(lengths), np.float64)
    full = lengths > 0
    if full.any():
        starts = np.cumsum(lengths) - lengths
        out[full] = np.add.reduceat(v, starts[full], dtype=np.float64)
    return out


def segmented_iterate(BD: sp.csr_matrix, x0: np.ndarray, c: np.ndarray, offsets: np.ndarray, tols: torch.Tensor,
                      max_iter: int) -> tuple[np.ndarray, torch.Tensor]:
    """Power iteration ``x ← c + BD x`` on ONE iterate vector [T] of per-query segments
    (``offsets`` [B + 1]; SPEC §2 step 6, per-query convergence as :func:`power_iterate`):
    segment b stops by :class:`.ppr_stop.StopRule` on its L1 change (float64 :func:`segment_sums`;
    ``tols`` [B]) or at ``max_iter``, its iterate saved then. Stopped segments leave the matrix once they hold
    :data:`SEGMENT_COMPACT_SHARE` of the iterate's entries (:func:`keep_entries`).
    Returns ``(π [T], iterations [B])``."""
    B = len(offsets) - 1
    iters = np.full(B, max_iter, np.int64)
    out = np.zeros_like(x0)
    query = np.arange(B)  # original query of each segment of the iterate
    lengths = np.diff(offsets)
    where = np.arange(len(x0))  # original entry of each entry of the iterate
    live = np.ones(B, bool)
    x = x0
    rule = StopRule(tols.cpu())
    for it in range(1, max_iter + 1):
        y = BD @ x
        y += c
        done = rule.done(torch.from_numpy(segment_sums(np.abs(y - x), lengths))).numpy()
        x = y
        stop = live if it == max_iter else done & live
        if not stop.any():
            continue
        iters[query[stop]] = it
        entries = np.repeat(stop, lengths)
        out[where[entries]] = x[entries]
        live &= ~stop
        if not live.any():
            break
        if lengths[~live].sum() >= SEGMENT_COMPACT_SHARE * len(x):
            keep = np.repeat(live, lengths)
            BD, x, c, where = keep_entries(BD, keep), x[keep], c[keep], where[keep]
            rule.keep(torch.from_numpy(np.flatnonzero(live)))
            query, lengths, live = query[live], lengths[live], live[live]
    return out, torch.from_numpy(iters)


def segmented_ppr(A: sp.csr_matrix, p: torch.Tensor, region: np.ndarray, rows: np.ndarray | None, d: float,
                  tols: torch.Tensor, max_iter: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The CPU path's segmented strategy for localised walks (SPEC §2 step 6): each query walks on
    its own region only, the block-diagonal matrix of :func:`block_diagonal` (``A``: the iteration
    matrix on the union ``rows``) iterated by :func:`segmented_iterate`; a query's result depends
    on its own prior and region only. Returns ``(π [B, N], iterations [B])`` like the block path."""
    query, node, offsets = region_entries(region, rows)
    chunk = torch.from_numpy(node if rows is None else rows[node])
    x0 = p[torch.from_numpy(query), chunk]
    c = (1.0 - d) * x0  # the teleport term, as the block path computes it
    pi, iters = segmented_iterate(block_diagonal(A, query, node), x0.numpy(), c.numpy(), offsets, tols, max_iter)
    out = torch.from_numpy(np.zeros(tuple(p.shape), pi.dtype))  # calloc: pages left 0 are never written
    out[torch.from_numpy(query), chunk] = torch.from_numpy(pi)
    return out, iters

"""``sparse_diffusion``: one step ``Y = P · T`` of a batch of sparse seed vectors P over the
row-normalised CSR graph T, SPEC §1 query step 2 (``y = pᵀ T``) with T of index step 6.

Inputs: ``seed_ids int64 [B, s]`` (rows of the graph, ``-1`` = padding) and
``seed_weights float32 [B, s]`` (``None`` = uniform over each row's valid seeds, the
published seed vector p). With ``normalise=True`` (default) the graph ``(indptr,
indices, data)`` holds raw weights W and each seed row is divided by its sum on the fly
(rows that sum to 0 contribute nothing — SPEC §1.6: zero-sum rows stay zero); with
``normalise=False`` the data are used as given.

Output: with ``top=None`` the dense ``float32 [B, n_cols]``; with ``top=k`` only the top
candidates, ``(ids int64 [B, k], values float32 [B, k])``: per query the k columns reached by an
edge of its seeds with the largest y (ties → lower column), best first, padded with -1 / -inf —
O(B·s·deg) memory, nothing of size B·n_cols. With ``entries=True`` (for a search whose seeds and
graph are on a device) the inputs may be tensors and the result stays on the seeds' device:
``(keys int64 [P], values float32 [P])``, one entry per (query b, column j) pair reached by an edge of
b's seeds, ``key = b·n_cols + j``, increasing (:mod:`.diffusion_tensors`). Every y is the float64 sum
of its terms in the order (query, seed, CSR position), rounded to float32.
"""
from __future__ import annotations

import numpy as np

from .checks import check_ids, check_positive_int, check_values
from .errors import InputError
from .csr import CSR, check_csr
from .dispatch import register


def check_diffusion_inputs(seed_ids, seed_weights, graph: CSR) -> tuple[np.ndarray, np.ndarray]:
    """Validate the seed batch against ``graph`` (ids: integer [B, s], graph rows or -1 padding;
    weights: finite, the ids' shape); returns ``(ids int64 [B,s], weights float32 [B,s])`` with
    padded entries' weight set to 0. Shared by both paths, so the Triton kernel never reads a
    row outside the graph."""
    op = "sparse_diffusion"
    ids = np.asarray(seed_ids)
    if ids.ndim != 2:
        raise InputError(f"{op}: seed_ids must be an integer [B, s] array, got {ids.dtype} {ids.shape}")
    if ids.size:
        check_ids(ids, "seed_ids", graph.n_rows, op, "graph rows", padding=True)
    ids = ids.astype(np.int64)
    valid = ids >= 0
    if seed_weights is None:
        n_valid = valid.sum(axis=1, keepdims=True)
        weights = np.where(valid, 1.0 / np.maximum(n_valid, 1), 0.0).astype(np.float32)
    else:
        weights = np.asarray(seed_weights)
        if weights.shape != ids.shape:
            raise InputError(f"{op}: seed_weights shape {weights.shape} != seed_ids shape {ids.shape}")
        check_values(weights, "seed_weights", op, non_negative=False)
        weights = np.where(valid, weights, 0.0).astype(np.float32)
        check_values(weights, "seed_weights (as float32)", op, non_negative=False)
    return ids, weights


def check_top(top: object) -> int | None:
    """``top`` as given: None or an integer >= 1 (:class:`InputError` otherwise)."""
    if top is not None:
        check_positive_int(top, "top", "sparse_diffusion")
    return top


def diffusion_terms(graph: CSR, ids: np.ndarray, weights: np.ndarray, normalise: bool
                    ) -> tuple[np.ndarray, np.ndarray]:
    """The terms of ``y = pᵀT``: ``(keys int64 [E], terms float64 [E])`` with ``key = b·n_cols + j`` for
    every edge (seed row → j) of every valid seed of query b, in the order (query, seed, CSR position)."""
    b_of, seeds = np.nonzero(ids >= 0)
    rows = ids[b_of, seeds]
    w = weights[b_of, seeds].astype(np.float64)
    starts, ends = graph.indptr[rows], graph.indptr[rows + 1]
    lengths = ends - starts
    seg = np.repeat(np.arange(len(rows)), lengths)
    pos = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths) + starts[seg]
    edge_w = graph.data[pos].astype(np.float64)
    if normalise:
        sums = np.bincount(seg, weights=edge_w, minlength=len(rows))
        w = np.divide(w, sums, out=np.zeros_like(w), where=sums > 0)
    return b_of[seg] * np.int64(graph.n_cols) + graph.indices[pos], edge_w * w[seg]


def top_entries(keys: np.ndarray, values: np.ndarray, B: int, n_cols: int, top: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """The ``top`` entries of each query among distinct ``keys`` (``b·n_cols + j``) with float32 ``values``:
    ``(ids int64 [B, top], values float32 [B, top])``, best first, ties toward the lower column,
    padded with -1 / -inf."""
    ids = np.full((B, top), -1, np.int64)
    out = np.full((B, top), -np.inf, np.float32)
    n = np.int64(max(n_cols, 1))
    query, column = keys // n, keys % n
    order = np.lexsort((column, -values, query))
    query, column, values = query[order], column[order], values[order]
    rank = np.arange(len(query)) - np.searchsorted(query, query)
    keep = rank < top
    ids[query[keep], rank[keep]] = column[keep]
    out[query[keep], rank[keep]] = values[keep]
    return ids, out


def sparse_diffusion_cpu(seed_ids, seed_weights, indptr, indices, data, n_cols: int,
                         normalise: bool = True, top: int | None = None, entries: bool = False,
                         device: str = "cpu"):
    """SPEC §1 query step 2 on the CPU: ``float32 [B, n_cols]``, or with ``top`` the top candidates
    ``(ids, values)``, or with ``entries`` the reached entries as tensors on the seeds' device (torch,
    :func:`.diffusion_tensors.diffusion_entries`; see module docstring). O(B·n_cols) for the dense
    result, O(B·s·deg) with ``top`` or ``entries``."""
    if entries:
        from .diffusion_tensors import diffusion_entries, on_one_device

        if top is not None:
            raise InputError("sparse_diffusion: top and entries=True exclude each other")
        return diffusion_entries(*on_one_device(seed_ids, seed_weights, indptr, indices, data, "cpu"), n_cols,
                                 normalise)
    graph = check_csr(indptr, indices, data, n_cols, "sparse_diffusion graph")
    ids, weights = check_diffusion_inputs(seed_ids, seed_weights, graph)
    check_top(top)
    B = ids.shape[0]
    keys, terms = diffusion_terms(graph, ids, weights, normalise)
    if top is not None:
        uniq, inverse = np.unique(keys, return_inverse=True)
        y = np.bincount(inverse.ravel(), weights=terms, minlength=len(uniq)).astype(np.float32)
        return top_entries(uniq, y, B, int(n_cols), top)
    out = np.bincount(keys, weights=terms, minlength=B * int(n_cols))
    return out.reshape(B, int(n_cols)).astype(np.float32)


register("sparse_diffusion", sparse_diffusion_cpu,
         triton="hopgraph.kernels.sparse_diffusion_triton:sparse_diffusion_triton")

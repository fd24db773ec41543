"""``sparse_diffusion``: one step ``Y = P · T`` of a batch of sparse seed vectors P over the
row-normalised CSR graph T, SPEC §1 query step 2 (``y = pᵀ T``) with T of index step 6.

Inputs: ``seed_ids int64 [B, s]`` (rows of the graph, ``-1`` = padding) and
``seed_weights float32 [B, s]`` (``None`` = uniform over each row's valid seeds, the
published seed vector p). With ``normalise=True`` (default) the graph ``(indptr,
indices, data)`` holds raw weights W and each seed row is divided by its sum on the fly
(rows that sum to 0 contribute nothing — SPEC §1.6: zero-sum rows stay zero); with
``normalise=False`` the data are used as given. Output: dense ``float32 [B, n_cols]``.
"""
from __future__ import annotations

import numpy as np

from .checks import check_ids, check_values
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


def sparse_diffusion_cpu(seed_ids, seed_weights, indptr, indices, data, n_cols: int,
                         normalise: bool = True, device: str = "cpu") -> np.ndarray:
    """SPEC §1 query step 2 on the CPU: ``float32 [B, n_cols]`` (see module docstring)."""
    graph = check_csr(indptr, indices, data, n_cols, "sparse_diffusion graph")
    ids, weights = check_diffusion_inputs(seed_ids, seed_weights, graph)
    B = ids.shape[0]
    b_of, seeds = np.nonzero(ids >= 0)
    rows = ids[b_of, seeds]
    w = weights[b_of, seeds].astype(np.float64)
    starts, ends = graph.indptr[rows], graph.indptr[rows + 1]
    lengths = ends - starts
    # positions of every seed row's edges, concatenated
    seg = np.repeat(np.arange(len(rows)), lengths)
    pos = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths) + starts[seg]
    edge_w = graph.data[pos].astype(np.float64)
    if normalise:
        sums = np.bincount(seg, weights=edge_w, minlength=len(rows))
        w = np.divide(w, sums, out=np.zeros_like(w), where=sums > 0)
    flat = b_of[seg] * int(n_cols) + graph.indices[pos]
    out = np.bincount(flat, weights=edge_w * w[seg], minlength=B * int(n_cols))
    return out.reshape(B, int(n_cols)).astype(np.float32)


register("sparse_diffusion", sparse_diffusion_cpu,
         triton="hopgraph.kernels.sparse_diffusion_triton:sparse_diffusion_triton")

"""Sparse per-query score vectors of G3RAG's query (SPEC §1 query steps 2-4).

One diffusion step ``y = pᵀT`` (SPEC §1 query step 2; T = W row-normalised, index step 6) of a
seed vector p with ``s`` non-zero entries touches only the ``s`` CSR rows of the seeds: at most
``s · k`` passages get ``y > 0``. This module computes y on those passages only — never a dense
``[B, N]`` array — so a query costs O(s · k) whatever N is:

* :func:`diffusion_entries`: every (query, passage) pair the seeds reach, with its y;
* :func:`diffusion_at`: y at given columns only (the fused scoring's candidates), found by
  joining the seeds' edges on the columns' keys ``b · N + j``;
* :func:`lookup`: the value of such entries at given (query, passage) pairs;
* :func:`pair_cosines`: the cosines ``q_b · x_j`` of given pairs only (``expand=True``).

The values equal the ``sparse_diffusion`` op's dense output at those columns bit for bit on the
CPU: the seed weights come from the op's own validation (:func:`check_diffusion_inputs`: p
uniform over the valid seeds when no weights are given), each seed row is divided by its sum in
float64 (zero-sum rows contribute nothing), and every y is the float64 sum of the same products
in the same order (query, seed, CSR position), then rounded to float32.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from ....kernels.csr import CSR
from ....kernels.sparse_diffusion import check_diffusion_inputs
from ...sparse import join, row_edge_positions

__all__ = ["Entries", "PAIR_BLOCK", "SeedEdges", "diffusion_at", "diffusion_entries", "lookup", "pair_cosines",
           "pair_keys", "seed_edges"]


class SeedEdges(NamedTuple):
    """The out-edges of every valid seed of a batch, in the order (query, seed, CSR position):
    ``query`` (int64 [E], the batch row), ``column`` (int64 [E], the passage reached) and
    ``contribution`` (float64 [E], ``p_c / Σ_j W[c, j] · W[c, j]``)."""

    query: np.ndarray
    column: np.ndarray
    contribution: np.ndarray

    def keys(self, n_cols: int) -> np.ndarray:
        """``query · n_cols + column`` (int64 [E]): the edges' join keys (repeated where several
        seeds of a query reach one passage)."""
        return self.query * np.int64(n_cols) + self.column


class Entries(NamedTuple):
    """Sparse rows of a ``[B, N]`` score matrix: ``query`` (int64 [P]), ``column`` (int64 [P]),
    ``value`` (float32 [P]), sorted by ``(query, column)`` with no pair twice."""

    query: np.ndarray
    column: np.ndarray
    value: np.ndarray

    def keys(self, n_cols: int) -> np.ndarray:
        """``query · n_cols + column`` (int64 [P], increasing): the pairs' join keys."""
        return self.query * np.int64(n_cols) + self.column


def pair_keys(ids: np.ndarray, n_cols: int) -> np.ndarray:
    """Join keys ``b · n_cols + ids[b, i]`` of a ``[B, c]`` id array (int64, same shape); padding
    (-1) gets key -1, which matches no pair."""
    ids = np.asarray(ids, np.int64)
    rows = np.arange(len(ids), dtype=np.int64)[:, None] * np.int64(n_cols)
    return np.where(ids >= 0, rows + ids, -1)


def seed_edges(graph: CSR, seed_ids: np.ndarray, seed_weights: np.ndarray | None) -> SeedEdges:
    """The terms of ``y = pᵀT`` (SPEC §1 query step 2) for a batch of seed vectors.

    ``seed_ids`` int [B, s] (graph rows, -1 = padding) and ``seed_weights`` float [B, s]
    (``None``: p uniform over each query's valid seeds, SPEC §1 query step 2) as the
    ``sparse_diffusion`` op takes them; T = W row-normalised (index step 6) is applied on the
    fly. Only the seeds' CSR rows are read: O(B · s · k) work and memory, independent of N."""
    ids, weights = check_diffusion_inputs(seed_ids, seed_weights, graph)
    b_of, slot = np.nonzero(ids >= 0)
    rows = ids[b_of, slot]
    w = weights[b_of, slot].astype(np.float64)
    seg, pos = row_edge_positions(graph.indptr, rows)
    edge_w = np.asarray(graph.data[pos], np.float64)
    sums = np.bincount(seg, weights=edge_w, minlength=len(rows))
    w = np.divide(w, sums, out=np.zeros_like(w), where=sums > 0)  # zero-sum rows stay zero
    return SeedEdges(b_of[seg].astype(np.int64), np.asarray(graph.indices[pos], np.int64), edge_w * w[seg])


def diffusion_entries(graph: CSR, seed_ids: np.ndarray, seed_weights: np.ndarray | None) -> Entries:
    """``y = pᵀT`` on every passage the seeds reach (SPEC §1 query step 2): one entry per
    (query, passage) pair with an edge from a seed, including pairs whose y is 0 (zero-weight
    edges or zero seed weight); every other column of y is 0."""
    edges = seed_edges(graph, seed_ids, seed_weights)
    uniq, inverse = np.unique(edges.keys(graph.n_cols), return_inverse=True)
    y = np.bincount(inverse.ravel(), weights=edges.contribution, minlength=len(uniq)).astype(np.float32)
    n = np.int64(max(graph.n_cols, 1))
    return Entries(uniq // n, uniq % n, y)


def lookup(entries: Entries, n_cols: int, keys: np.ndarray) -> np.ndarray:
    """The value of ``entries`` at each of the join ``keys`` (:func:`pair_keys`), 0 where it has
    no entry (float32, ``keys``' shape)."""
    if not len(entries.value):
        return np.zeros(np.shape(keys), np.float32)
    pos, found = join(entries.keys(n_cols), keys)
    return np.where(found, entries.value[pos], np.float32(0.0))


def diffusion_at(graph: CSR, seed_ids: np.ndarray, seed_weights: np.ndarray | None,
                 columns: np.ndarray) -> np.ndarray:
    """``y = pᵀT`` (SPEC §1 query step 2) at ``columns`` int [B, c] only (-1 = padding → 0):
    float32 [B, c]. The seeds' edges are joined on the keys ``b · N + j`` of the wanted columns,
    so the work is O(B · s · k · log c) and nothing of size N is allocated."""
    columns = np.asarray(columns, np.int64)
    out = np.zeros(columns.shape, np.float32)
    valid = columns >= 0
    if not valid.any():
        return out
    edges = seed_edges(graph, seed_ids, seed_weights)
    uniq, inverse = np.unique(pair_keys(columns, graph.n_cols)[valid], return_inverse=True)
    pos, found = join(uniq, edges.keys(graph.n_cols))
    # the matching edges keep their order, so each sum adds the op's products in the op's order
    sums = np.bincount(pos[found], weights=edges.contribution[found], minlength=len(uniq))
    out[valid] = sums[inverse.ravel()].astype(np.float32)
    return out


#: (query, passage) pairs whose embeddings :func:`pair_cosines` gathers at once (8,192 × d floats)
PAIR_BLOCK = 8192


def pair_cosines(Q: np.ndarray, rows: Callable[[np.ndarray], np.ndarray], query: np.ndarray,
                 column: np.ndarray) -> np.ndarray:
    """``Q[query[i]] · X[column[i]]`` for each pair (float32 [P]): the cosines of only the pairs a
    search ranks, never ``Q @ Xᵀ``. ``rows(ids)`` returns ``X[ids]`` (``DenseIndex.rows``: read
    without faulting a memory-mapped X in); at most :data:`PAIR_BLOCK` rows are held at once."""
    Q = np.asarray(Q, np.float32)
    out = np.empty(len(query), np.float32)
    for s in range(0, len(query), PAIR_BLOCK):
        q, c = query[s:s + PAIR_BLOCK], column[s:s + PAIR_BLOCK]
        out[s:s + len(q)] = np.einsum("pd,pd->p", Q[q], np.asarray(rows(c), np.float32))
    return out

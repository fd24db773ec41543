"""CSR graph helpers of the graph pipelines.

A directed weighted graph over N passages is a :class:`CSR` (``indptr int64 [N+1]``,
``indices int32 [nnz]``, ``data float32 [nnz]``). The type, its validation
:func:`check_csr` and :func:`csr_from_topk` are defined in :mod:`hopgraph.kernels.csr`
(the kernels take and return it) and re-exported here; this module adds the graph
construction steps built on it. SPEC §1 step 6 (transition T = row-normalised W, zero-sum rows stay zero) is
:func:`row_normalised`.
"""
from __future__ import annotations

import numpy as np

from ..kernels.csr import CSR, check_csr, csr_from_topk

__all__ = ["CSR", "check_csr", "csr_from_topk", "row_sums", "row_normalised", "csr_from_keys", "hub_penalty"]


def row_sums(graph: CSR) -> np.ndarray:
    """Sum of the out-edge weights of every row (float64 [n_rows])."""
    sums = np.zeros(graph.n_rows, dtype=np.float64)
    rows = np.repeat(np.arange(graph.n_rows), np.diff(graph.indptr))
    np.add.at(sums, rows, graph.data.astype(np.float64))
    return sums


def row_normalised(graph: CSR) -> CSR:
    """SPEC §1 step 6: T = W with every row divided by its sum; rows summing to 0 stay 0."""
    sums = row_sums(graph)
    scale = np.divide(1.0, sums, out=np.zeros_like(sums), where=sums > 0)
    rows = np.repeat(np.arange(graph.n_rows), np.diff(graph.indptr))
    data = (graph.data * scale[rows]).astype(np.float32)
    return CSR(graph.indptr, graph.indices, data, graph.n_cols)


def csr_from_keys(keys: np.ndarray, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Stable grouping of positions by row key: (indptr int64 [n_rows+1], order int64) —
    row r holds positions ``order[indptr[r]:indptr[r+1]]``, in increasing order."""
    order = np.argsort(keys, kind="stable")
    indptr = np.zeros(n_rows + 1, np.int64)
    np.cumsum(np.bincount(keys, minlength=n_rows), out=indptr[1:])
    return indptr, order


def hub_penalty(density: np.ndarray, beta: float = 1.0) -> np.ndarray:
    """SPEC §1 step 2: ``pen = exp(−β · (dens − min) / (max − min + 1e−9))`` (float32)."""
    density = np.asarray(density, dtype=np.float64)
    if len(density) == 0:
        return np.zeros(0, dtype=np.float32)
    nd = (density - density.min()) / (density.max() - density.min() + 1e-9)
    return np.exp(-float(beta) * nd).astype(np.float32)

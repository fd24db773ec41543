"""CSR graph helpers shared by the kernels and the graph pipelines.

A directed weighted graph over N passages is stored as CSR arrays
``indptr int64 [N+1]``, ``indices int32 [nnz]``, ``data float32 [nnz]``: the out-edges of
node ``i`` are ``indices[indptr[i]:indptr[i+1]]`` with weights ``data[...]``.
SPEC §1 step 6 (transition T = row-normalised W, zero-sum rows stay zero) is
:func:`row_normalised`.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .errors import InputError


class CSR(NamedTuple):
    """A CSR matrix with ``n_cols`` columns (rows = ``len(indptr) - 1``)."""

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    n_cols: int

    @property
    def n_rows(self) -> int:
        return len(self.indptr) - 1

    @property
    def nnz(self) -> int:
        return int(self.indptr[-1])

    def arrays(self) -> dict[str, np.ndarray]:
        """The three arrays by name, for :func:`hopgraph.engine.storage.save_arrays`."""
        return {"indptr": self.indptr, "indices": self.indices, "data": self.data}

    def to_scipy(self):
        """A ``scipy.sparse.csr_matrix`` view of this graph (no copy of the arrays)."""
        import scipy.sparse as sp

        return sp.csr_matrix((self.data, self.indices, self.indptr), shape=(self.n_rows, self.n_cols))

    def to_dense(self) -> np.ndarray:
        return np.asarray(self.to_scipy().todense(), dtype=np.float32)


def check_csr(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, n_cols: int, name: str = "graph") -> CSR:
    """Validate CSR arrays (shapes, monotone indptr, column range, finite non-negative weights).

    Raises :class:`InputError` naming ``name`` and the problem; returns the typed :class:`CSR`.
    """
    indptr = np.asarray(indptr)
    indices = np.asarray(indices)
    data = np.asarray(data)
    if indptr.ndim != 1 or len(indptr) < 1:
        raise InputError(f"{name}: indptr must be a 1-D array of length n_rows + 1, got shape {indptr.shape}")
    if indptr[0] != 0 or np.any(np.diff(indptr) < 0):
        raise InputError(f"{name}: indptr must start at 0 and never decrease")
    nnz = int(indptr[-1])
    if indices.shape != (nnz,) or data.shape != (nnz,):
        raise InputError(f"{name}: indices {indices.shape} and data {data.shape} must both have indptr[-1] = {nnz} entries")
    if nnz and (indices.min() < 0 or indices.max() >= n_cols):
        raise InputError(f"{name}: column indices must lie in [0, {n_cols})")
    if nnz and (not np.all(np.isfinite(data)) or data.min() < 0):
        raise InputError(f"{name}: edge weights must be finite and non-negative")
    return CSR(indptr.astype(np.int64, copy=False), indices.astype(np.int32, copy=False),
               data.astype(np.float32, copy=False), int(n_cols))


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


def csr_from_topk(values: np.ndarray, columns: np.ndarray, n_cols: int) -> CSR:
    """CSR from per-row candidate lists ``[N, k]`` sorted best first, where a column of
    ``-1`` marks "no edge" (such entries must come after the real ones in each row)."""
    columns = np.asarray(columns)
    valid = columns >= 0
    counts = valid.sum(axis=1)
    indptr = np.zeros(len(columns) + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return CSR(indptr, columns[valid].astype(np.int32), np.asarray(values)[valid].astype(np.float32), int(n_cols))


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

"""The CSR sparse-matrix type of the kernels and its validation (SPEC notation: "Graphs are CSR").

A directed weighted graph over N nodes is stored as CSR arrays ``indptr int64 [N+1]``,
``indices int32 [nnz]``, ``data float32 [nnz]``: the out-edges of node ``i`` are
``indices[indptr[i]:indptr[i+1]]`` with weights ``data[...]``. The kernels take and
return graphs in this form; the graph construction steps built on it (row
normalisation, hub penalty, ...) belong to the layers above.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .errors import InputError

__all__ = ["CSR", "check_csr", "csr_from_topk"]


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
        """The three arrays by name (how an index stores a graph)."""
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


def csr_from_topk(values: np.ndarray, columns: np.ndarray, n_cols: int) -> CSR:
    """CSR from per-row candidate lists ``[N, k]`` sorted best first, where a column of
    ``-1`` marks "no edge" (such entries must come after the real ones in each row)."""
    columns = np.asarray(columns)
    valid = columns >= 0
    counts = valid.sum(axis=1)
    indptr = np.zeros(len(columns) + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return CSR(indptr, columns[valid].astype(np.int32), np.asarray(values)[valid].astype(np.float32), int(n_cols))

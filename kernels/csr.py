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
import torch

from .checks import check_ids, check_indptr, check_positive_int, check_values
from .errors import InputError

__all__ = ["CSR", "check_csr", "csr_from_topk", "validate_csr"]


class CSR(NamedTuple):
    """A CSR matrix with ``n_cols`` columns (rows = ``len(indptr) - 1``)."""

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    n_cols: int

    @property
    def n_rows(self) -> int:
        """The number of rows."""
        return len(self.indptr) - 1

    @property
    def nnz(self) -> int:
        """The number of stored entries."""
        return int(self.indptr[-1])

    def arrays(self) -> dict[str, np.ndarray]:
        """The three arrays by name (how an index stores a graph)."""
        return {"indptr": self.indptr, "indices": self.indices, "data": self.data}

    def to_scipy(self):
        """A ``scipy.sparse.csr_matrix`` view of this graph (no copy of the arrays)."""
        import scipy.sparse as sp

        return sp.csr_matrix((self.data, self.indices, self.indptr), shape=(self.n_rows, self.n_cols))

    def to_dense(self) -> np.ndarray:
        """The graph as a dense float32 ``[n_rows, n_cols]`` array (absent entries 0)."""
        return np.asarray(self.to_scipy().todense(), dtype=np.float32)


def validate_csr(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, n_cols: int, name: str = "graph"
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Check CSR arrays without converting them: integer ``indptr`` [n_rows + 1] starting at 0,
    never decreasing, ending at nnz; integer ``indices`` [nnz] in ``[0, n_cols)``; real ``data``
    [nnz], finite and non-negative. Returns the three as NumPy arrays (no copy where possible), or
    as the torch tensors given (checked where they are: a GPU's arrays never leave it).

    Raises :class:`InputError` as ``"NAME: ARRAY problem"`` (shared by :func:`check_csr` and the
    ops that take a graph, e.g. ``batched_ppr``'s P)."""
    indptr, indices, data = (a if isinstance(a, torch.Tensor) else np.asarray(a) for a in (indptr, indices, data))
    n_cols = check_positive_int(n_cols, "n_cols", name, minimum=0)
    if indptr.ndim != 1 or len(indptr) < 1:
        raise InputError(f"{name}: indptr must be a 1-D array of length n_rows + 1, got shape {indptr.shape}")
    if indices.ndim != 1 or data.shape != indices.shape:
        raise InputError(f"{name}: indices {indices.shape} and data {data.shape} must be 1-D of one length")
    check_indptr(indptr, "indptr", len(indptr), len(indices), name)
    check_ids(indices, "indices", n_cols, name, "column ids")
    check_values(data, "data", name)
    return indptr, indices, data


def check_csr(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, n_cols: int, name: str = "graph") -> CSR:
    """Validate CSR arrays (:func:`validate_csr`) and return the typed :class:`CSR`
    (int64 indptr, int32 indices, float32 data). Raises :class:`InputError` naming ``name``."""
    indptr, indices, data = validate_csr(indptr, indices, data, n_cols, name)
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


def index_dtype(nnz: int, n: int) -> type:
    """int32 for a CSR's index arrays unless its sizes need int64 (MKL's and scipy's 32-bit paths are the faster)."""
    return np.int64 if max(nnz, n) > np.iinfo(np.int32).max else np.int32

"""Helpers on the engine's one sparse-matrix type, :class:`~hopgraph.kernels.csr.CSR`.

A graph or incidence over N rows is stored, passed and returned as a :class:`CSR` (``indptr``
int64 [N + 1], ``indices`` [nnz], ``data`` [nnz], ``n_cols``); a pattern without weights is
``indptr`` / ``indices`` arrays, or a CSR whose data are :func:`unit_weights`. scipy is used
only inside a function that runs a scipy operation (a sparse product, a transpose):
:meth:`CSR.to_scipy` there, :func:`csr_from_scipy` for its result. SPEC §1 step 6 (the
transition T = row-normalised W) is :func:`row_normalised`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..kernels.csr import CSR

if TYPE_CHECKING:
    import torch

__all__ = ["allowed_at", "csr_from_keys", "csr_from_scipy", "join", "row_edge_positions", "row_entries",
           "row_normalised", "row_of_entries", "row_positions_tensors", "row_sums", "segment_positions_tensors",
           "take_rows", "unit_weights"]


def unit_weights(n: int) -> np.ndarray:
    """``n`` weights of 1 (float32, read-only, no memory: a broadcast view), the data of an
    unweighted CSR."""
    return np.broadcast_to(np.float32(1.0), (int(n),))


def csr_from_scipy(matrix, dtype: type = np.float32) -> CSR:
    """The arrays of a scipy sparse matrix as they are (same order, nothing re-sorted or summed)
    as a :class:`CSR`: int64 indptr, int32 indices, ``dtype`` data."""
    import scipy.sparse as sp

    m = sp.csr_matrix(matrix)
    return CSR(m.indptr.astype(np.int64, copy=False), m.indices.astype(np.int32, copy=False),
               m.data.astype(dtype, copy=False), int(m.shape[1]))


def row_of_entries(indptr: np.ndarray) -> np.ndarray:
    """The row of every entry of a CSR (int64 [nnz])."""
    indptr = np.asarray(indptr, np.int64)
    return np.repeat(np.arange(len(indptr) - 1, dtype=np.int64), np.diff(indptr))


def row_sums(graph: CSR) -> np.ndarray:
    """Sum of the out-edge weights of every row (float64 [n_rows])."""
    sums = np.zeros(graph.n_rows, dtype=np.float64)
    np.add.at(sums, row_of_entries(graph.indptr), graph.data.astype(np.float64))
    return sums


def row_normalised(graph: CSR) -> CSR:
    """SPEC §1 step 6: T = W with every row divided by its sum; rows summing to 0 stay 0."""
    sums = row_sums(graph)
    scale = np.divide(1.0, sums, out=np.zeros_like(sums), where=sums > 0)
    data = (graph.data * scale[row_of_entries(graph.indptr)]).astype(np.float32)
    return CSR(graph.indptr, graph.indices, data, graph.n_cols)


def csr_from_keys(keys: np.ndarray, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Stable grouping of positions by row key: (indptr int64 [n_rows+1], order int64) —
    row r holds positions ``order[indptr[r]:indptr[r+1]]``, in increasing order."""
    order = np.argsort(keys, kind="stable")
    indptr = np.zeros(n_rows + 1, np.int64)
    np.cumsum(np.bincount(keys, minlength=n_rows), out=indptr[1:])
    return indptr, order


def row_edge_positions(indptr: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions in ``indices``/``data`` of the entries of ``rows`` (int64 [r]) of a CSR,
    concatenated row after row in CSR order: ``(segment int64 [E], position int64 [E])`` where
    ``segment[e]`` is the index into ``rows`` of the row entry ``e`` belongs to. O(r + E)."""
    rows = np.asarray(rows, np.int64)
    starts = np.asarray(indptr[rows], np.int64)
    lengths = np.asarray(indptr[rows + 1], np.int64) - starts
    seg = np.repeat(np.arange(len(rows), dtype=np.int64), lengths)
    offsets = np.cumsum(lengths) - lengths
    pos = np.arange(int(lengths.sum()), dtype=np.int64) - offsets[seg] + starts[seg]
    return seg, pos


def row_positions_tensors(indptr: torch.Tensor, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`row_edge_positions` on tensors (one device): ``(segment, position)`` of the
    entries of CSR rows ``rows`` (int64), row after row in CSR order."""
    import torch

    rows = rows.to(torch.int64)
    starts = indptr[rows].to(torch.int64)
    return segment_positions_tensors(starts, indptr[rows + 1].to(torch.int64) - starts)


def segment_positions_tensors(starts: torch.Tensor, lengths: torch.Tensor, total: int | None = None
                              ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(segment, position)`` of the entries of the spans ``[starts[s], starts[s] + lengths[s])``
    (int64 tensors, one device), span after span in order. ``total``: ``lengths.sum()`` when the
    caller knows it (no read of it back from the device)."""
    import torch

    seg = torch.repeat_interleave(torch.arange(len(starts), device=starts.device), lengths, output_size=total)
    offsets = torch.cumsum(lengths, 0) - lengths
    return seg, torch.arange(len(seg), device=starts.device) - offsets[seg] + starts[seg]


def row_entries(indptr: np.ndarray, values: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(segment, value)`` of CSR rows ``rows``: ``value[e]`` (int64) is an entry of ``values``
    (a CSR's ``indices``, or any array aligned with them) in row ``rows[segment[e]]``, rows
    concatenated in the given order, entries in CSR order."""
    seg, pos = row_edge_positions(indptr, np.asarray(rows, np.int64))
    return seg, np.asarray(values[pos], np.int64)


def take_rows(graph: CSR, rows: np.ndarray) -> CSR:
    """The rows ``rows`` (int, in the given order, repeats allowed) of ``graph`` as a CSR of
    ``len(rows)`` rows, each row's entries in their order (scipy's ``M[rows]``). O(r + E)."""
    seg, pos = row_edge_positions(graph.indptr, np.asarray(rows, np.int64))
    indptr = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(np.bincount(seg, minlength=len(rows)), out=indptr[1:])
    return CSR(indptr, np.asarray(graph.indices[pos]), np.asarray(graph.data[pos]), graph.n_cols)


def take_rows_once(graph: CSR, rows: np.ndarray) -> CSR:
    """:func:`take_rows` reading each distinct row of ``graph`` once (repeats are copied from the
    rows read): for a graph whose rows are costly to read (memory-mapped, held by shards) and row
    lists with many repeats. Same result. O(r log r + entries)."""
    rows = np.asarray(rows, np.int64)
    uniq, inverse = np.unique(rows, return_inverse=True)
    if len(uniq) == len(rows):
        return take_rows(graph, rows)
    return take_rows(take_rows(graph, uniq), inverse.ravel())


def join(sorted_keys: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each of ``keys`` is in the increasing, duplicate-free ``sorted_keys``:
    ``(position int64, found bool)``, both of ``keys``' shape (position is 0 where not found)."""
    pos = np.searchsorted(sorted_keys, keys)
    pos = np.minimum(pos, max(len(sorted_keys) - 1, 0))
    found = sorted_keys[pos] == keys if len(sorted_keys) else np.zeros(np.shape(keys), bool)
    return np.where(found, pos, 0), found


def allowed_at(allowed: np.ndarray | None, columns: np.ndarray) -> np.ndarray:
    """``QueryBatch.allowed`` (bool [N], None = every row) read at passage ids ``columns``
    (int, any shape, all >= 0): which entries a search may return (the sparse form of
    ``QueryBatch.mask_scores``: filtered and deleted passages are never returned)."""
    if allowed is None:
        return np.ones(np.shape(columns), bool)
    return np.asarray(allowed)[columns]

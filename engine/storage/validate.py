"""Structural checks of stored arrays (ids in range, CSR offsets, finite values, unit rows): every load
runs them and raises IndexFormatError naming the file. Ids, offsets and finite values are checked by
the kernels' checks (:mod:`hopgraph.kernels.checks`), raising IndexFormatError."""
from __future__ import annotations


import numpy as np

from ...kernels import checks
from ..errors import IndexFormatError
from .arrays import read_rows, release_pages


#: embeddings with at most this many values are checked row by row (finite, unit norm); larger: sampled rows
UNIT_CHECK_FULL = 1 << 24


UNIT_CHECK_SAMPLE = 4096


UNIT_TOL = 1e-3


def check_ids(arr: np.ndarray, bound: int, name: str, length: int | None = None) -> np.ndarray:
    """A stored 1-D integer id array whose values all lie in ``[0, bound)`` (and of ``length``
    entries when given); IndexFormatError naming ``name`` otherwise. Returns it. A memory-mapped
    array's pages, all read by the check, leave the resident set (:func:`release_pages`)."""
    stored, arr = arr, np.asarray(arr)
    _check_shape(arr, name, (length,))
    checks.check_ids(arr, "values", bound, name, error=IndexFormatError)
    release_pages(stored)
    return arr


def check_indptr(indptr: np.ndarray, n_rows: int, n_entries: int, name: str) -> np.ndarray:
    """A stored CSR row pointer: 1-D integer ``[n_rows + 1]``, from 0 to ``n_entries``, never decreasing
    (a memory-mapped one's pages released after the check, as :func:`check_ids` does)."""
    stored, indptr = indptr, np.asarray(indptr)
    checks.check_indptr(indptr, "row offsets", n_rows + 1, n_entries, name, error=IndexFormatError)
    release_pages(stored)
    return indptr


def check_finite(arr: np.ndarray, name: str, shape: tuple[int | None, ...] | None = None) -> np.ndarray:
    """A stored float array of ``shape`` (None = any size on that axis) with finite values only."""
    arr = np.asarray(arr)
    if arr.dtype.kind != "f":
        raise IndexFormatError(f"{name}: expected floats, got dtype {arr.dtype}")
    if shape is not None:
        _check_shape(arr, name, shape)
    checks.check_values(arr, "values", name, non_negative=False, error=IndexFormatError)
    return arr


def _check_shape(arr: np.ndarray, name: str, shape: tuple[int | None, ...]) -> None:
    """``arr`` has ``len(shape)`` axes, each of the given size (None = any)."""
    if arr.ndim != len(shape) or any(s is not None and a != s for a, s in zip(arr.shape, shape)):
        raise IndexFormatError(f"{name}: shape {list(arr.shape)}, expected {[s if s is not None else '*' for s in shape]}")


def check_unit_rows(X: np.ndarray, name: str, rows: int | None = None, dim: int | None = None,
                    allow_zero: bool = False) -> np.ndarray:
    """Stored embeddings ``[rows, dim]``: finite, every row of unit norm (or zero, with ``allow_zero``).
    Checked row by row up to
    :data:`UNIT_CHECK_FULL` values; above, a seeded sample of :data:`UNIT_CHECK_SAMPLE` rows plus the
    first and last (the checksum covers the rest). Returns X."""
    X = np.asarray(X) if not isinstance(X, np.memmap) else X
    if X.ndim != 2 or (rows is not None and X.shape[0] != rows) or (dim is not None and X.shape[1] != dim):
        raise IndexFormatError(f"{name}: shape {list(X.shape)}, expected [{rows}, {dim}]")
    if X.shape[1] == 0 or X.shape[0] == 0:
        return X
    if X.size <= UNIT_CHECK_FULL:
        sample = np.asarray(X, np.float64)
    else:
        idx = np.unique(np.r_[0, len(X) - 1, np.random.default_rng(0).integers(0, len(X), UNIT_CHECK_SAMPLE)])
        sample = np.asarray(read_rows(X, idx), np.float64)   # from the file: the mapping stays cold
    if not np.isfinite(sample).all():
        raise IndexFormatError(f"{name}: holds NaN or infinite values")
    norms = np.sqrt((sample * sample).sum(axis=1))
    bad = np.flatnonzero((np.abs(norms - 1.0) > UNIT_TOL) & ~(allow_zero & (norms == 0.0)))
    if len(bad):
        raise IndexFormatError(f"{name}: rows are not of unit norm (a sampled row has norm {norms[bad[0]]:.4f})")
    release_pages(X)  # the pages of a fully checked mapping
    return X

"""Structural checks of stored arrays (ids in range, CSR offsets, finite values, unit rows): every load
runs them and raises IndexFormatError naming the file."""
from __future__ import annotations


import numpy as np

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
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise IndexFormatError(f"{name}: expected a 1-D integer array, got shape {arr.shape} dtype {arr.dtype}")
    if length is not None and len(arr) != length:
        raise IndexFormatError(f"{name}: {len(arr)} entries, expected {length}")
    if len(arr) and (int(arr.min()) < 0 or int(arr.max()) >= bound):
        raise IndexFormatError(f"{name}: values must lie in [0, {bound}), found [{int(arr.min())}, {int(arr.max())}]")
    release_pages(stored)
    return arr


def check_indptr(indptr: np.ndarray, n_rows: int, n_entries: int, name: str) -> np.ndarray:
    """A stored CSR row pointer: 1-D integer ``[n_rows + 1]``, from 0 to ``n_entries``, never decreasing
    (a memory-mapped one's pages released after the check, as :func:`check_ids` does)."""
    stored, indptr = indptr, np.asarray(indptr)
    if indptr.ndim != 1 or indptr.dtype.kind not in "iu" or len(indptr) != n_rows + 1:
        raise IndexFormatError(f"{name}: expected {n_rows + 1} integer row offsets, got shape {indptr.shape} "
                               f"dtype {indptr.dtype}")
    if int(indptr[0]) != 0 or int(indptr[-1]) != n_entries or (len(indptr) > 1 and np.diff(indptr).min() < 0):
        raise IndexFormatError(f"{name}: row offsets must run from 0 to {n_entries} without decreasing")
    release_pages(stored)
    return indptr


def check_finite(arr: np.ndarray, name: str, shape: tuple[int | None, ...] | None = None) -> np.ndarray:
    """A stored float array of ``shape`` (None = any size on that axis) with finite values only."""
    arr = np.asarray(arr)
    if arr.dtype.kind != "f":
        raise IndexFormatError(f"{name}: expected floats, got dtype {arr.dtype}")
    if shape is not None and (arr.ndim != len(shape) or any(s is not None and a != s for a, s in zip(arr.shape, shape))):
        raise IndexFormatError(f"{name}: shape {list(arr.shape)}, expected {[s if s is not None else '*' for s in shape]}")
    if arr.size and not np.isfinite(arr).all():
        raise IndexFormatError(f"{name}: holds NaN or infinite values")
    return arr


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

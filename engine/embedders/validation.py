"""Validation of embedding matrices (passages, queries, model outputs): one check for every embedder."""
from __future__ import annotations

import numpy as np

from ..errors import InputError

#: rows validated at a time by validate_embeddings
VALIDATE_BLOCK_ROWS = 65_536


def validate_embeddings(X: np.ndarray, what: str, dim: int | None = None) -> np.ndarray:
    """``X`` checked and L2-normalised: a C-contiguous float32 ``[n, dim]`` array.

    ``what`` names the input in errors; ``dim``: the expected dimension. Memory-mapped input that
    is already normalised float32 is returned without a copy; the checks read ``X`` in blocks of
    :data:`VALIDATE_BLOCK_ROWS` rows (no temporary of its size). Raises :class:`InputError` for a
    matrix that is not 2-D or not floating-point, a wrong dimension, NaN/inf or a zero row (naming
    the first bad row). O(n · dim).
    """
    if not isinstance(X, np.ndarray):
        X = np.asarray(X)
    if X.ndim != 2:
        raise InputError(f"{what}: expected a 2-D matrix [n, dim], got shape {X.shape}")
    if dim is not None and X.shape[1] != dim:
        raise InputError(f"{what}: dimension {X.shape[1]} does not match the index dimension {dim}")
    if not np.issubdtype(X.dtype, np.floating):
        raise InputError(f"{what}: expected floating-point values, got dtype {X.dtype}")
    blocks = range(0, len(X), VALIDATE_BLOCK_ROWS)
    finite = np.concatenate([np.isfinite(X[a:a + VALIDATE_BLOCK_ROWS]).all(axis=1) for a in blocks] or [[]])
    if not finite.all():
        bad = np.flatnonzero(~finite)
        raise InputError(f"{what}: {len(bad)} row(s) contain NaN or inf (first: row {bad[0]})")
    with np.errstate(over="ignore"):  # an overflowing float32 norm is redone in float64 below
        norms = np.concatenate([np.linalg.norm(X[a:a + VALIDATE_BLOCK_ROWS], axis=1) for a in blocks]
                               or [np.zeros(0, X.dtype)])
    over = ~np.isfinite(norms)
    if over.any():  # values near float32's maximum: the float32 norm overflows, redo those rows in float64
        norms = norms.astype(np.float64)
        norms[over] = np.linalg.norm(np.asarray(X[np.flatnonzero(over)], np.float64), axis=1)
    zero = norms <= 1e-12
    if zero.any():
        bad = np.flatnonzero(zero)
        raise InputError(f"{what}: {len(bad)} zero vector(s) cannot be normalised (first: row {bad[0]})")
    if X.dtype == np.float32 and np.allclose(norms, 1.0, atol=1e-4) and X.flags.c_contiguous:
        return X
    return np.ascontiguousarray(X / norms[:, None], dtype=np.float32)

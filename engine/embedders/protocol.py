"""The embedder contract: the :class:`Embedder` protocol, the check every embedder's output passes
(:func:`validate_embeddings`), and the helpers all embedders share.

An embedder maps texts to L2-normalised float32 rows (SPEC notation X for passages, q for
questions). ``encode`` embeds passages; an embedder with a query side (prompts) also has
``encode_queries``, which :func:`encode_queries` prefers.
"""
from __future__ import annotations

from typing import Any, Iterable, Protocol, Sequence, runtime_checkable

import numpy as np

from ..errors import InputError

#: rows validated at a time by validate_embeddings
VALIDATE_BLOCK_ROWS = 65_536


@runtime_checkable
class Embedder(Protocol):
    """Anything with a ``name``, a ``dim`` and ``encode(texts) -> float32 [n, dim]`` (passages).

    Optional: ``encode_queries(texts, batch_size, progress)`` for queries (used by
    :func:`encode_queries` when present) and ``spec``
    (:func:`~hopgraph.engine.embedders.resolve.embedder_spec`)."""

    name: str
    dim: int

    def encode(self, texts: Sequence[str], batch_size: int = 64, progress: bool = False) -> np.ndarray: ...


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


def encode_queries(embedder: Embedder, texts: Sequence[str], batch_size: int = 64,
                   progress: bool = False) -> np.ndarray:
    """Query embeddings: ``embedder.encode_queries`` when the embedder has a query side
    (query prompts), else ``embedder.encode``."""
    fn = getattr(embedder, "encode_queries", None)
    if callable(fn):
        return fn(list(texts), batch_size=batch_size, progress=progress)
    return embedder.encode(list(texts), batch_size=batch_size, progress=progress)


def batches(n: int, size: int, progress: bool, desc: str) -> Iterable[Any]:
    """The start of each batch of ``size`` of ``n`` texts, under a tqdm bar when ``progress``."""
    starts = range(0, n, size)
    if not progress:
        return starts
    from tqdm.auto import tqdm

    return tqdm(starts, desc=desc, total=-(-n // size), unit="batch")

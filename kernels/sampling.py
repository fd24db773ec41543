"""The column sample of the sampled density estimate (SPEC §1 index step 1), shared by the ``density``
op and the layers that estimate the density of added rows over the sample of an earlier build."""
from __future__ import annotations

import numpy as np

from .errors import InputError

__all__ = ["sample_columns"]


def sample_columns(n: int, n_samples: int, seed: int) -> np.ndarray:
    """The sorted column sample of the sampled mode (all columns when ``n_samples >= n``)."""
    if isinstance(n_samples, bool) or not isinstance(n_samples, (int, np.integer)) or n_samples < 1:
        raise InputError(f"density: n_samples must be a positive integer, got {n_samples!r}")
    if n_samples >= n:
        return np.arange(n, dtype=np.int64)
    return np.sort(np.random.default_rng(seed).choice(n, size=n_samples, replace=False)).astype(np.int64)

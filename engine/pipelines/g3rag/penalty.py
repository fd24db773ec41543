"""The hub penalty of G3RAG's passages (SPEC §1 index step 2)."""
from __future__ import annotations

import numpy as np

__all__ = ["hub_penalty"]


def hub_penalty(density: np.ndarray, beta: float = 1.0) -> np.ndarray:
    """SPEC §1 step 2: ``pen = exp(−β · (dens − min) / (max − min + 1e−9))`` (float32 [N])."""
    density = np.asarray(density, dtype=np.float64)
    if len(density) == 0:
        return np.zeros(0, dtype=np.float32)
    nd = (density - density.min()) / (density.max() - density.min() + 1e-9)
    return np.exp(-float(beta) * nd).astype(np.float32)

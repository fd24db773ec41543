"""``density``: local density of every passage, SPEC §1 index step 1.

``dens_i = mean_{j≠i} max(0, s_ij)`` with ``s = X Xᵀ`` (cosine for normalised rows).

* ``mode="exact"``: all N−1 columns, computed in row blocks × column blocks (each block
  product is used for both directions since ``s_ij = s_ji``), O(N) memory beyond one block.
  A block's row and column sums are float32 (torch's pairwise reduction), accumulated across
  blocks in float64.
* ``mode="sampled"``: the unbiased estimate over a fixed random sample of
  ``n_samples`` columns drawn without replacement with ``seed`` (the same sample for
  every row; a row that is itself in the sample averages over the other sampled
  columns). With ``n_samples >= N`` it equals the exact mode.

A corpus of one passage has density 0.
"""
from __future__ import annotations

import numpy as np
import torch

from .checks import check_positive_int
from .errors import InputError
from .dispatch import register
from .gain_knn import as_embedding_tensor
from .sampling import sample_columns

MODES = ("exact", "sampled")


def check_density_inputs(X, mode: str, n_samples: int, seed: int) -> tuple[torch.Tensor, np.ndarray | None]:
    """Validate (mode, X finite 2-D, n_samples and seed integers); returns X as a float32 tensor and
    the column sample (None for exact)."""
    check_positive_int(seed, "seed", "density", minimum=0)
    if mode not in MODES:
        raise InputError(f"density: mode must be one of {MODES}, got {mode!r}")
    X = as_embedding_tensor(X, "X", "density")
    cols = sample_columns(X.shape[0], n_samples, seed) if mode == "sampled" else None
    return X, cols


def density_cpu(X, mode: str = "exact", n_samples: int = 4096, seed: int = 0, block: int = 2048,
                device: str = "cpu") -> np.ndarray:
    """SPEC §1 step 1 on the CPU: ``float32 [N]`` densities (see module docstring)."""
    X, cols = check_density_inputs(X, mode, n_samples, seed)
    block = check_positive_int(block, "block", "density")
    n = X.shape[0]
    if n < 2:
        return np.zeros(n, dtype=np.float32)
    sums = torch.zeros(n, dtype=torch.float64)
    if cols is None:
        starts = range(0, n, block)
        for a in starts:
            for b in range(a, n, block):
                R = (X[a:a + block] @ X[b:b + block].T).clamp_(min=0.0)
                if a == b:
                    R.diagonal().zero_()
                sums[a:a + len(R)] += R.sum(1)  # float32 within a tile (pairwise), float64 across
                if a != b:
                    sums[b:b + R.shape[1]] += R.sum(0)
        return (sums / (n - 1)).numpy().astype(np.float32)
    cols_t = torch.from_numpy(cols)
    Xs = X[cols_t]
    in_sample = torch.zeros(n, dtype=torch.bool)
    in_sample[cols_t] = True
    for a in range(0, n, block):
        R = (X[a:a + block] @ Xs.T).clamp_(min=0.0)
        rows = torch.arange(a, a + len(R))
        hit = torch.searchsorted(cols_t, rows)
        mine = (hit < len(cols_t)) & (cols_t[hit.clamp(max=len(cols_t) - 1)] == rows)
        R[mine.nonzero().squeeze(1), hit[mine]] = 0.0
        sums[a:a + len(R)] = R.sum(1)
    count = len(cols) - in_sample.to(torch.float64)
    return torch.where(count > 0, sums / count.clamp(min=1), torch.zeros_like(sums)).numpy().astype(np.float32)


register("density", density_cpu, triton="hopgraph.kernels.density_triton:density_triton")

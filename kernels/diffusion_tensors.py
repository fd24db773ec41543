"""``sparse_diffusion(..., entries=True)`` on tensors: one step ``y = pᵀT`` (SPEC §1 query step 2, T of
index step 6) of a batch of sparse seed vectors whose seeds and graph are already on a device, as the
sparse entries it reaches (the op's contract: :mod:`.sparse_diffusion`).

``seed_ids int64 [B, s]`` (graph rows, ``-1`` = padding), ``seed_weights float32 [B, s]`` (``None`` =
uniform over each row's valid seeds) and the graph's ``(indptr int64, indices int32, data float32)``
are tensors on one device. The result stays there: ``(keys int64 [P], values float32 [P])``, one entry
per (query b, column j) pair reached by an edge of b's seeds, ``key = b · n_cols + j``, keys
increasing — O(B · s · deg), nothing of size ``B · n_cols``. Every value is the float64 sum of its
terms in the order (query, seed, CSR position), rounded to float32: the dense result's values at
those pairs, bit for bit on the CPU.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .errors import InputError

OP = "sparse_diffusion"


def check_diffusion_tensors(seed_ids: torch.Tensor, seed_weights: torch.Tensor | None, indptr: torch.Tensor,
                            indices: torch.Tensor, data: torch.Tensor, n_cols: int
                            ) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate the seeds and the graph (shapes, dtypes, seed rows inside the graph); returns
    ``(ids int64 [B, s], weights float32 [B, s])`` with padded entries' weight 0 (uniform over the
    valid seeds when ``seed_weights`` is None, computed as :func:`.sparse_diffusion.check_diffusion_inputs`).
    One scalar is read on the host (whether every seed row is inside the graph)."""
    if seed_ids.ndim != 2 or seed_ids.dtype.is_floating_point or seed_ids.dtype == torch.bool:
        raise InputError(f"{OP}: seed_ids must be an integer [B, s] tensor, got {seed_ids.dtype} {tuple(seed_ids.shape)}")
    if indptr.ndim != 1 or len(indptr) < 1 or indices.ndim != 1 or data.shape != indices.shape:
        raise InputError(f"{OP}: the graph must be indptr [n_rows + 1], indices [nnz] and data [nnz], got "
                         f"{tuple(indptr.shape)}, {tuple(indices.shape)}, {tuple(data.shape)}")
    if int(n_cols) < 0:
        raise InputError(f"{OP}: n_cols must be >= 0, got {n_cols}")
    ids = seed_ids.to(torch.int64)
    if ids.numel() and bool(((ids < -1) | (ids >= len(indptr) - 1)).any()):
        raise InputError(f"{OP}: seed_ids must be graph rows in [0, {len(indptr) - 1}) or -1 (padding)")
    valid = ids >= 0
    if seed_weights is None:
        n_valid = valid.sum(1, keepdim=True).clamp_min(1).to(torch.float64)
        return ids, torch.where(valid, 1.0 / n_valid, 0.0).to(torch.float32)
    if tuple(seed_weights.shape) != tuple(ids.shape):
        raise InputError(f"{OP}: seed_weights shape {tuple(seed_weights.shape)} != seed_ids shape {tuple(ids.shape)}")
    return ids, torch.where(valid, seed_weights.to(torch.float32), 0.0)


def seed_terms(ids: torch.Tensor, weights: torch.Tensor, indptr: torch.Tensor, indices: torch.Tensor,
               data: torch.Tensor, n_cols: int, normalise: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The terms of ``y = pᵀT``: ``(keys int64 [E], terms float64 [E])`` of every edge of every valid
    seed, in the order (query, seed, CSR position); each seed row's sum in float64 in CSR order."""
    b_of, slot = torch.nonzero(ids >= 0, as_tuple=True)
    rows = ids[b_of, slot]
    starts = indptr[rows].to(torch.int64)
    lengths = indptr[rows + 1].to(torch.int64) - starts
    seg = torch.repeat_interleave(torch.arange(len(rows), device=ids.device), lengths)
    pos = torch.arange(len(seg), device=ids.device) - (torch.cumsum(lengths, 0) - lengths)[seg] + starts[seg]
    edge_w = data[pos].to(torch.float64)
    w = weights[b_of, slot].to(torch.float64)
    if normalise:
        sums = torch.zeros(len(rows), dtype=torch.float64, device=ids.device).index_add_(0, seg, edge_w)
        w = torch.where(sums > 0, w / torch.where(sums > 0, sums, 1.0), 0.0)
    return b_of[seg] * int(n_cols) + indices[pos].to(torch.int64), edge_w * w[seg]


def diffusion_entries(seed_ids: torch.Tensor, seed_weights: torch.Tensor | None, indptr: torch.Tensor,
                      indices: torch.Tensor, data: torch.Tensor, n_cols: int, normalise: bool = True
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """SPEC §1 query step 2 with torch on the seeds' device: ``(keys int64 [P], values float32 [P])``
    (module docstring). Each pair's terms are added one after the other in their order
    (``index_add_``, sequential on the CPU), as the NumPy path does."""
    ids, weights = check_diffusion_tensors(seed_ids, seed_weights, indptr, indices, data, n_cols)
    keys, terms = seed_terms(ids, weights, indptr, indices, data, n_cols, normalise)
    uniq, inverse = torch.unique(keys, return_inverse=True)
    y = torch.zeros(len(uniq), dtype=torch.float64, device=keys.device).index_add_(0, inverse, terms)
    return uniq, y.to(torch.float32)


def on_one_device(seed_ids: Any, seed_weights: Any, indptr: Any, indices: Any, data: Any, device: str
                  ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The inputs as tensors: tensors as they are (on the seeds' device), NumPy arrays made tensors
    on that device (``device`` when the seeds are NumPy too); the graph as int64 / int32 / float32."""
    dev = seed_ids.device if isinstance(seed_ids, torch.Tensor) else torch.device(device)

    def t(a: Any, dtype: torch.dtype | None = None) -> torch.Tensor:
        a = a if isinstance(a, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(a))
        return a.to(device=dev, dtype=dtype)

    return (t(seed_ids), None if seed_weights is None else t(seed_weights), t(indptr, torch.int64),
            t(indices, torch.int32), t(data, torch.float32))

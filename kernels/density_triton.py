"""Triton kernel of ``density`` (SPEC §1 index step 1); semantics in :mod:`.density`.

One program owns ``BLOCK_M`` rows and walks the columns to average over (all N for
the exact mode, the fixed sample for the sampled mode) in tiles: similarity by
``tl.dot`` (IEEE fp32), ``max(0, s)``, the row's own column excluded, summed with its
count. O(N) memory.
"""
from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from .density import check_density_inputs
from .gain_knn_triton import similarity_tile


@triton.jit
def _density_kernel(X, COLS, OUT_SUM, OUT_CNT, N, M, D, stride_x,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < N
    acc = tl.zeros([BLOCK_M], tl.float32)
    cnt = tl.zeros([BLOCK_M], tl.float32)
    for c0 in range(0, M, BLOCK_N):
        cidx = c0 + tl.arange(0, BLOCK_N)
        cmask = cidx < M
        cols = tl.load(COLS + cidx, mask=cmask, other=0)
        s = similarity_tile(X, rows, rmask, cols, cmask, D, stride_x, BLOCK_M, BLOCK_N, BLOCK_D)
        keep = cmask[None, :] & (cols[None, :] != rows[:, None])
        acc += tl.sum(tl.where(keep, tl.maximum(s, 0.0), 0.0), axis=1)
        cnt += tl.sum(keep.to(tl.float32), axis=1)
    tl.store(OUT_SUM + rows, acc, mask=rmask)
    tl.store(OUT_CNT + rows, cnt, mask=rmask)


def density_triton(X, mode: str = "exact", n_samples: int = 4096, seed: int = 0, device: str = "cuda",
                   block_m: int = 16, block_n: int = 32, block_d: int = 32, **_: object) -> np.ndarray:
    """SPEC §1 step 1 with the Triton kernel; same contract as :func:`.density.density_cpu`."""
    Xc, cols = check_density_inputs(X, mode, n_samples, seed)
    n, d = Xc.shape
    if n < 2:
        return np.zeros(n, dtype=np.float32)
    dev = "cpu" if device == "cpu" else "cuda"
    cols_t = torch.arange(n, dtype=torch.int64) if cols is None else torch.from_numpy(cols)
    Xd, cols_d = Xc.to(dev), cols_t.to(dev)
    out_sum = torch.empty(n, dtype=torch.float32, device=dev)
    out_cnt = torch.empty(n, dtype=torch.float32, device=dev)
    _density_kernel[(triton.cdiv(n, block_m),)](Xd, cols_d, out_sum, out_cnt, n, len(cols_d), d, Xd.stride(0),
                                               BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d)
    s, c = out_sum.cpu().numpy(), out_cnt.cpu().numpy()
    return np.divide(s, c, out=np.zeros_like(s), where=c > 0).astype(np.float32)


def launch_builds(shapes: dict) -> list[dict]:
    """The build :func:`density_triton` launches (ahead-of-time compile check)."""
    sig = {"X": "*fp32", "COLS": "*i64", "OUT_SUM": "*fp32", "OUT_CNT": "*fp32", "N": "i32", "M": "i32", "D": "i32",
           "stride_x": "i32", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "BLOCK_D": "constexpr"}
    return [{"kernel": "density", "config": "m16n32d32", "fn": "density_triton:_density_kernel", "signature": sig,
             "constexprs": {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_D": 32},
             "aligned": ("X", "COLS", "OUT_SUM", "OUT_CNT", "D", "stride_x")}]

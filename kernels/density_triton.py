"""Triton kernel of ``density`` (SPEC §1 index step 1); semantics in :mod:`.density`.

One program owns ``BLOCK_M`` rows and walks the columns to average over (all N for the exact
mode, the fixed sample for the sampled mode) in tiles: similarity on tensor cores in the
three-term float16 split of :mod:`.gain_knn_triton` (near-FP32), ``max(0, s)`` with the row's own
column excluded, summed per tile in float32 and across tiles in float64. The host divides by
each row's column count. O(N) memory. Tiles, warps and stages are autotuned on CUDA
(:data:`CONFIGS`, tuned once per ``(d, mode)`` on the first :data:`~.gain_knn_triton.TUNE_ROWS` rows).
"""
from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from .density import check_density_inputs
from .gain_knn_triton import TUNE_ROWS, even_d, similarity_tile, split_fp16

#: the autotuned configurations (tile rows, tile columns, reduction step, warps, stages)
CONFIGS = [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_D": 32}, num_warps=w, num_stages=s, maxnreg=r)
           for m, n, w, s, r in ((64, 64, 4, 3, None), (64, 128, 8, 1, 128),
                                 (128, 128, 16, 3, 128))]
#: the configuration of the interpreter (small tiles: the tests' inputs span several of them)
INTERPRET_CONFIG = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_D": 16}


@triton.jit
def _density_kernel(XH, XL, UNSCALE, COLS, OUT_SUM, N_ROWS, M, D, stride_x, SAMPLED: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, EVEN_D: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < N_ROWS
    first = stride_x.to(tl.int64) * (pid * BLOCK_M)
    a_off = tl.arange(0, BLOCK_M) * stride_x
    un_r = tl.load(UNSCALE + rows, mask=rmask, other=0.0)
    acc = tl.zeros([BLOCK_M], tl.float64)
    for c0 in range(0, M, BLOCK_N):
        cidx = c0 + tl.arange(0, BLOCK_N)
        cmask = cidx < M
        if SAMPLED:
            cols = tl.load(COLS + cidx, mask=cmask, other=0)
            s = similarity_tile(XH + first, XL + first, XH, XL, a_off, rmask, cols * stride_x.to(tl.int64), cmask, D,
                                EVEN_D, BLOCK_M, BLOCK_N, BLOCK_D)
        else:
            cols = cidx
            first_c = stride_x.to(tl.int64) * c0
            s = similarity_tile(XH + first, XL + first, XH + first_c, XL + first_c, a_off, rmask,
                                tl.arange(0, BLOCK_N) * stride_x, cmask, D, EVEN_D, BLOCK_M, BLOCK_N, BLOCK_D)
        s = s * un_r[:, None] * tl.load(UNSCALE + cols, mask=cmask, other=0.0)[None, :]
        keep = cmask[None, :] & (cols[None, :] != rows[:, None])
        acc += tl.sum(tl.where(keep, tl.maximum(s, 0.0), 0.0), axis=1).to(tl.float64)
    tl.store(OUT_SUM + rows, acc, mask=rmask)


_density_tuned = triton.autotune(configs=CONFIGS, key=["D", "SAMPLED"])(
    triton.heuristics({"EVEN_D": even_d})(_density_kernel))


def density_triton(X, mode: str = "exact", n_samples: int = 4096, seed: int = 0, device: str = "cuda",
                   **_: object) -> np.ndarray:
    """SPEC §1 step 1 with the Triton kernel; same contract as :func:`.density.density_cpu`.
    Tolerance against the CPU path: 1e-5 relative, 1e-6 absolute."""
    Xc, cols = check_density_inputs(X, mode, n_samples, seed)
    n, d = Xc.shape
    if n < 2:
        return np.zeros(n, dtype=np.float32)
    interpret = device == "cpu"
    dev = "cpu" if interpret else "cuda"
    Xd = Xc.to(dev)
    sampled = cols is not None
    cols_t = torch.from_numpy(cols) if sampled else torch.zeros(1, dtype=torch.int64)
    m = len(cols) if sampled else n
    out = torch.empty(n, dtype=torch.float64, device=dev)
    hi, lo, unscale = split_fp16(Xd)
    args = (hi, lo, unscale, cols_t.to(dev), out)
    if interpret:
        _density_kernel[(triton.cdiv(n, INTERPRET_CONFIG["BLOCK_M"]),)](
            *args, n, m, d, hi.stride(0), SAMPLED=sampled, EVEN_D=d % INTERPRET_CONFIG["BLOCK_D"] == 0,
            **INTERPRET_CONFIG)
    else:
        for rows in (min(n, TUNE_ROWS), n):  # the first call per (d, mode) tunes on the first rows
            _density_tuned[lambda meta, r=rows: (triton.cdiv(r, meta["BLOCK_M"]),)](
                *args, rows, m, d, hi.stride(0), SAMPLED=sampled)
    sums = out.cpu().numpy()
    if sampled:
        count = m - np.isin(np.arange(n), cols).astype(np.float64)
    else:
        count = np.full(n, n - 1, np.float64)
    return np.divide(sums, count, out=np.zeros(n), where=count > 0).astype(np.float32)


def launch_builds(shapes: dict) -> list[dict]:
    """The builds :func:`density_triton` launches (ahead-of-time compile check): every autotuned
    configuration, exact and sampled."""
    sig = {"XH": "*fp16", "XL": "*fp16", "UNSCALE": "*fp32", "COLS": "*i64", "OUT_SUM": "*fp64", "N_ROWS": "i32",
           "M": "i32", "D": "i32",
           "stride_x": "i32", "SAMPLED": "constexpr", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr",
           "BLOCK_D": "constexpr", "EVEN_D": "constexpr"}
    out = []
    for sampled in (False, True):
        for c in CONFIGS:
            m, n_ = c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"]
            out.append({"kernel": "density",
                        "config": f"{'sampled' if sampled else 'exact'}-m{m}n{n_}w{c.num_warps}s{c.num_stages}",
                        "fn": "density_triton:_density_kernel", "signature": sig,
                        "constexprs": {"SAMPLED": sampled, **c.kwargs, "EVEN_D": shapes["d"] % c.kwargs["BLOCK_D"] == 0},
                        "num_warps": c.num_warps, "num_stages": c.num_stages, "maxnreg": c.maxnreg,
                        "aligned": ("XH", "XL", "UNSCALE", "COLS", "OUT_SUM", "D", "stride_x")})
    return out

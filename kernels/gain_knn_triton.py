"""Triton kernel of ``gain_knn`` (SPEC §1 index steps 3-5); semantics in :mod:`.gain_knn`.

One program owns ``BLOCK_M`` rows. For every column tile it computes the similarity
tile with ``tl.dot`` (IEEE fp32, so it matches the CPU path), fuses band, gain and the
target penalty, and folds the tile into a running top-k held in registers: ``k``
rounds each take the tile's best remaining entry (ties → lower column) and let it
replace the row's current worst entry (ties → higher column) when it beats it. The N×N
matrix never exists. The host then sorts each row exactly and packs CSR with the same
helpers as the CPU path.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .csr import CSR
from .gain_knn import check_gain_knn_inputs, finalise_csr


@triton.jit
def similarity_tile(X, rows, rmask, cols, cmask, D, stride_x,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """``[BLOCK_M, BLOCK_N]`` tile of ``X[rows] · X[cols]ᵀ`` in IEEE fp32 (masked rows/cols give 0).

    Row offsets are int64: ``row · stride`` passes 2³¹ from about 5.6 M rows × 384."""
    s = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    row_off = rows.to(tl.int64) * stride_x
    col_off = cols.to(tl.int64) * stride_x
    for d0 in range(0, D, BLOCK_D):
        dd = d0 + tl.arange(0, BLOCK_D)
        dmask = dd < D
        a = tl.load(X + row_off[:, None] + dd[None, :], mask=rmask[:, None] & dmask[None, :], other=0.0)
        b = tl.load(X + col_off[None, :] + dd[:, None], mask=cmask[None, :] & dmask[:, None], other=0.0)
        s += tl.dot(a, b, input_precision="ieee")
    return s


@triton.jit
def _gain_knn_kernel(X, PEN, OUT_V, OUT_C, N, D, stride_x, sim_min, sim_max,
                     K: tl.constexpr, KP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_D: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < N
    slots = tl.arange(0, KP)
    # running top-k: empty slots hold -inf with distinct negative columns; padding slots
    # (>= K) hold +inf so they are never the worst
    best_v = tl.where(slots[None, :] < K, float("-inf"), float("inf")) + tl.zeros([BLOCK_M, KP], tl.float32)
    best_c = (-1 - slots[None, :]) + tl.zeros([BLOCK_M, KP], tl.int32)
    big = 2147483647
    for c0 in range(0, N, BLOCK_N):
        cols = c0 + tl.arange(0, BLOCK_N)
        cmask = cols < N
        s = similarity_tile(X, rows, rmask, cols, cmask, D, stride_x, BLOCK_M, BLOCK_N, BLOCK_D)
        pen = tl.load(PEN + cols, mask=cmask, other=0.0)
        x = tl.minimum(tl.maximum(s, 0.0), 1.0)
        w = tl.sqrt(1.0 - x * x) * x * pen[None, :]
        ok = cmask[None, :] & (cols[None, :] != rows[:, None]) & (s >= sim_min) & (s <= sim_max) & (w > 0)
        w = tl.where(ok, w, float("-inf"))
        colb = cols[None, :] + tl.zeros([BLOCK_M, BLOCK_N], tl.int32)
        for _ in range(K):
            m = tl.max(w, axis=1)
            mc = tl.min(tl.where(w == m[:, None], colb, big), axis=1)
            wv = tl.min(best_v, axis=1)
            wc = tl.max(tl.where(best_v == wv[:, None], best_c, -big), axis=1)
            better = (m > float("-inf")) & ((m > wv) | ((m == wv) & (mc < wc)))
            slot = (best_v == wv[:, None]) & (best_c == wc[:, None]) & better[:, None]
            best_v = tl.where(slot, m[:, None], best_v)
            best_c = tl.where(slot, mc[:, None], best_c)
            w = tl.where(colb == mc[:, None], float("-inf"), w)
    out = rows.to(tl.int64)[:, None] * K + slots[None, :]
    smask = rmask[:, None] & (slots[None, :] < K)
    tl.store(OUT_V + out, best_v, mask=smask)
    tl.store(OUT_C + out, tl.where(best_c >= 0, best_c, -1), mask=smask)


def gain_knn_triton(X, k: int = 32, sim_min: float = 0.3, sim_max: float = 0.9, penalty=None,
                    device: str = "cuda", block_m: int = 16, block_n: int = 32, block_d: int = 32,
                    **_: object) -> CSR:
    """SPEC §1 steps 3-5 with the Triton kernel; same contract as :func:`.gain_knn.gain_knn_cpu`.

    Runs on ``device`` ("cuda"), or on CPU tensors under ``TRITON_INTERPRET=1``.
    """
    Xc, pen, k, sim_min, sim_max = check_gain_knn_inputs(X, k, sim_min, sim_max, penalty)
    n, d = Xc.shape
    if n < 2 or k == 0:
        return finalise_csr(torch.zeros((n, 0)), torch.zeros((n, 0), dtype=torch.int64), n)
    dev = "cpu" if device == "cpu" else "cuda"
    Xd, pend = Xc.to(dev), pen.to(dev)
    out_v = torch.empty((n, k), dtype=torch.float32, device=dev)
    out_c = torch.empty((n, k), dtype=torch.int32, device=dev)
    grid = (triton.cdiv(n, block_m),)
    _gain_knn_kernel[grid](Xd, pend, out_v, out_c, n, d, Xd.stride(0), sim_min, sim_max,
                           K=k, KP=max(triton.next_power_of_2(k), 2), BLOCK_M=block_m, BLOCK_N=block_n,
                           BLOCK_D=block_d)
    return finalise_csr(out_v.cpu(), out_c.cpu().to(torch.int64), n)


def launch_builds(shapes: dict) -> list[dict]:
    """The builds :func:`gain_knn_triton` launches at the pipelines' shapes (for the ahead-of-time
    compile check): the default tiles at G3RAG's k and at the exact mode's k = n − 1."""
    sig = {"X": "*fp32", "PEN": "*fp32", "OUT_V": "*fp32", "OUT_C": "*i32", "N": "i32", "D": "i32",
           "stride_x": "i32", "sim_min": "fp32", "sim_max": "fp32", "K": "constexpr", "KP": "constexpr",
           "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "BLOCK_D": "constexpr"}
    out = []
    for name, k in (("k%d" % shapes["k"], shapes["k"]), ("exact-k%d" % (shapes["exact_n"] - 1), shapes["exact_n"] - 1)):
        out.append({"kernel": "gain_knn", "config": f"{name}-m16n32d32", "fn": "gain_knn_triton:_gain_knn_kernel",
                    "signature": sig, "constexprs": {"K": k, "KP": max(triton.next_power_of_2(k), 2), "BLOCK_M": 16,
                                                     "BLOCK_N": 32, "BLOCK_D": 32},
                    "aligned": ("X", "PEN", "OUT_V", "OUT_C", "D", "stride_x")})
    return out


__all__ = ["gain_knn_triton"]

"""Triton kernels of ``gain_knn_rows`` (SPEC §1 index steps 3-5 for query rows among base rows);
semantics in :mod:`.gain_knn_rows`.

The kernels of :mod:`.gain_knn_triton` with the query rows and the base rows apart, built of its
pieces (the three-term float16 split :func:`~.gain_knn_triton.split_fp16`, the tensor-core tiles
:func:`~.gain_knn_triton.similarity_part` / :func:`~.gain_knn_triton.correction`, the gain
:func:`~.gain_knn_triton.gain` and the per-row similarity floor
:func:`~.gain_knn_triton.similarity_floor`):

* :func:`_gain_knn_rows_kernel` (``k`` ≤ :data:`SELECT_MAX_K`): one program owns
  ``BLOCK_M`` query rows and folds every tile of base rows into a running top-k held in registers, as
  :mod:`.gain_knn_triton`'s kernel does, with each row's ``floor`` raising its threshold from the start
  (a tile below every row's floor is skipped after its ``hi·hi`` pass), the base rows' ids from
  ``columns`` (ties toward the lower id) and a row's ``exclude`` id left out;
* :func:`_gain_rows_weights_kernel` (larger ``k``): the weights of a block of query rows against every
  base row, written out; the top-k of each row is selected on the device with exact keys
  (:func:`~.gain_knn.select_topk`).

Tolerance against the CPU path as :func:`~.gain_knn_triton.gain_knn_triton`'s: weights within 1e-5
relative or 1e-6 absolute, edges equal except near-ties within the two paths' similarity difference.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .csr import CSR
from .errors import InputError
from .gain_knn import finalise_csr, select_topk
from .gain_knn_rows import check_rows_inputs
from .gain_knn_triton import (CONFIGS, DENSE_CONFIG, DENSE_ENTRIES, INTERPRET_CONFIG, TUNE_ROWS, configs_for,
                              gain, scan_columns, similarity_tile, split_fp16, store_topk, tuned_top_k)

#: the largest k the register top-k takes here; larger k runs :func:`_gain_rows_weights_kernel`
SELECT_MAX_K = 32
#: the tiles (rows, columns, reduction step, warps) of ``gain_knn``'s configurations this kernel is tuned over:
#: those whose build holds a top-k of 32 within 128 registers without spilling under Triton 3.6 and 3.9, on
#: sm_80 and sm_90 (its per-row excluded column takes the registers the others lack)
TILES = ((128, 64, 32, 16), (128, 64, 16, 16))
#: the autotuned configurations
ROWS_CONFIGS = [c for c in CONFIGS
                if (c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.kwargs["BLOCK_D"], c.num_warps) in TILES]


@triton.jit
def _gain_knn_rows_kernel(QH, QL, ROW, XH, XL, XUN, PEN, OUT_V, OUT_C, M, N, D, stride_x, sim_min, sim_max, norm_max,
                          pen_max, K: tl.constexpr, KP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          BLOCK_D: tl.constexpr, EVEN_D: tl.constexpr):
    """``ROW [M, 4]`` float32: per query row its unscale, norm, floor and excluded base-row position (int32
    bits, -1: none); Q and X rows have the same stride ``stride_x``."""
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < M
    first = stride_x.to(tl.int64) * (pid * BLOCK_M)
    AH, AL = QH + first, QL + first
    a_off = tl.arange(0, BLOCK_M) * stride_x
    norm_r = tl.load(ROW + rows * 4 + 1, mask=rmask, other=0.0)
    un_r = tl.load(ROW + rows * 4, mask=rmask, other=1.0)
    excl = tl.load(ROW + rows * 4 + 3, mask=rmask, other=0.0).to(tl.int32, bitcast=True)
    slots = tl.arange(0, KP)
    # running top-k: empty slots hold the row's floor (an edge must beat it) with distinct negative
    # columns; padding slots (>= K) +inf
    low = tl.load(ROW + rows * 4 + 2, mask=rmask, other=0.0)
    best_v = tl.where(slots[None, :] < K, low[:, None], float("inf")) + tl.zeros([BLOCK_M, KP], tl.float32)
    best_c = (-1 - slots[None, :]) + tl.zeros([BLOCK_M, KP], tl.int32)
    best_v, best_c = scan_columns(AH, AL, XH, XL, XUN, PEN, a_off, rmask, excl, un_r, norm_r, best_v, best_c, N, D,
                                  stride_x, sim_min, sim_max, norm_max, pen_max, K, BLOCK_M, BLOCK_N, BLOCK_D, EVEN_D)
    store_topk(OUT_V, OUT_C, rows, rmask, best_v, best_c, K, KP)


_gain_knn_rows_tuned = tuned_top_k(_gain_knn_rows_kernel, ROWS_CONFIGS)


@triton.jit
def _gain_rows_weights_kernel(QH, QL, QUN, EXCL, FLOOR, XH, XL, XUN, PEN, W, R0, R, N, D, stride_q, stride_x,
                              sim_min, sim_max, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                              BLOCK_D: tl.constexpr, EVEN_D: tl.constexpr):
    """``W[i, j]`` = the weight of edge ``R0 + i → j`` (``i < R``, j a base row), -inf where it is not an edge."""
    r = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rmask = r < R
    cmask = cols < N
    rows = R0 + r
    first_r = stride_q.to(tl.int64) * (R0 + tl.program_id(0) * BLOCK_M)
    first_c = stride_x.to(tl.int64) * (tl.program_id(1) * BLOCK_N)
    acc = similarity_tile(QH + first_r, QL + first_r, XH + first_c, XL + first_c, tl.arange(0, BLOCK_M) * stride_q,
                          rmask, tl.arange(0, BLOCK_N) * stride_x, cmask, D, EVEN_D, BLOCK_M, BLOCK_N, BLOCK_D)
    s = acc * tl.load(QUN + rows, mask=rmask, other=0.0)[:, None] * tl.load(XUN + cols, mask=cmask, other=0.0)[None, :]
    w = gain(s, tl.load(PEN + cols, mask=cmask, other=0.0)[None, :])
    excl = tl.load(EXCL + rows, mask=rmask, other=-1)
    low = tl.load(FLOOR + rows, mask=rmask, other=0.0)
    ok = (cols[None, :] != excl[:, None]) & (s >= sim_min) & (s <= sim_max) & (w > 0) & (w > low[:, None])
    tl.store(W + r.to(tl.int64)[:, None] * N + cols[None, :], tl.where(ok, w, float("-inf")),
             mask=rmask[:, None] & cmask[None, :])


def _dense_topk(q: tuple, x: tuple, k: int, sim_min: float, sim_max: float, interpret: bool
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """The top-k of every query row through :func:`_gain_rows_weights_kernel` and exact keys on the device:
    ``(weights, base row positions)`` on the host; ``q`` = ``(hi, lo, unscale, excluded position, floor)``,
    ``x`` = ``(hi, lo, unscale, penalty)``."""
    m, n, d = q[0].shape[0], x[0].shape[0], q[0].shape[1]
    labels = torch.arange(n, dtype=torch.int64, device=x[0].device)
    cfg = INTERPRET_CONFIG if interpret else DENSE_CONFIG.kwargs
    launch = {} if interpret else {"num_warps": DENSE_CONFIG.num_warps, "num_stages": DENSE_CONFIG.num_stages}
    rows = max(1, min(m, DENSE_ENTRIES // n))
    vals, idx = torch.empty((m, k), dtype=torch.float32), torch.empty((m, k), dtype=torch.int64)
    W = torch.empty((rows, n), dtype=torch.float32, device=x[0].device)
    for r0 in range(0, m, rows):
        R = min(rows, m - r0)
        grid = (triton.cdiv(R, cfg["BLOCK_M"]), triton.cdiv(n, cfg["BLOCK_N"]))
        _gain_rows_weights_kernel[grid](*q, *x, W, r0, R, n, d, q[0].stride(0), x[0].stride(0), sim_min, sim_max,
                                        **cfg, **launch, EVEN_D=d % cfg["BLOCK_D"] == 0)
        v, c = select_topk(W[:R], labels.expand(R, n), k)
        vals[r0:r0 + R], idx[r0:r0 + R] = v.cpu(), c.cpu()
    return vals, idx


def _direction(Qd: torch.Tensor, Xd: torch.Tensor, labels: torch.Tensor, pen: torch.Tensor, exclude: torch.Tensor,
               floor: torch.Tensor, k: int, sim_min: float, sim_max: float, n_cols: int, interpret: bool) -> CSR:
    """The top-``k`` edges of the rows of ``Qd`` among the rows of ``Xd`` (ids ``labels``, increasing; target
    penalty ``pen``), above each row's ``floor``, none to its ``exclude`` id, with the Triton kernels. The
    kernels work on base-row positions (ties toward the lower position = the lower id); the ids are
    looked up on the host."""
    (m, d), n = Qd.shape, Xd.shape[0]
    dev = Qd.device
    at = torch.searchsorted(labels, exclude).clamp(max=n - 1)
    excl = torch.where((exclude >= 0) & (labels[at] == exclude), at, -1).to(dev, torch.int32)
    low = floor.to(dev)
    qh, ql, qun = split_fp16(Qd)
    xh, xl, xun = split_fp16(Xd)
    if k > SELECT_MAX_K:
        try:
            vals, pos = _dense_topk((qh, ql, qun, excl, low), (xh, xl, xun, pen), k, sim_min, sim_max, interpret)
        except torch.OutOfMemoryError as e:
            raise InputError(f"gain_knn_rows: k = {k} (> {SELECT_MAX_K}) takes the dense path, whose block of "
                             f"{max(1, DENSE_ENTRIES // n)} rows x {n} weights does not fit on the device") from e
    else:
        out_v = torch.empty((m, k), dtype=torch.float32, device=dev)
        out_c = torch.empty((m, k), dtype=torch.int32, device=dev)
        kp = max(triton.next_power_of_2(k), 2)
        row = torch.stack([qun, torch.linalg.vector_norm(Qd, dim=1), low, excl.view(torch.float32)], 1).contiguous()
        args = (qh, ql, row, xh, xl, xun, pen, out_v, out_c)
        norm_max = float(torch.linalg.vector_norm(Xd, dim=1).max())
        assert qh.stride(0) == xh.stride(0) == d  # contiguous [*, d] rows
        scalars = (n, d, xh.stride(0), sim_min, sim_max, norm_max, float(pen.max()))
        if interpret:
            grid = (triton.cdiv(m, INTERPRET_CONFIG["BLOCK_M"]),)
            _gain_knn_rows_kernel[grid](*args, m, *scalars, K=k, KP=kp,
                                        EVEN_D=d % INTERPRET_CONFIG["BLOCK_D"] == 0, **INTERPRET_CONFIG)
        else:
            for rows in (min(m, TUNE_ROWS), m):  # the first call per (d, k) tunes on the first rows
                _gain_knn_rows_tuned[lambda meta, r=rows: (triton.cdiv(r, meta["BLOCK_M"]),)](*args, rows, *scalars,
                                                                                              K=k, KP=kp)
        vals, pos = out_v.cpu(), out_c.cpu().to(torch.int64)
    vals = torch.where(pos >= 0, vals, -float("inf"))  # a slot left at the row's floor is no edge
    return finalise_csr(vals, torch.where(pos >= 0, labels.cpu()[pos.clamp(min=0)], -1), n_cols)


def gain_knn_rows_triton(Q, X, k: int = 32, sim_min: float = 0.3, sim_max: float = 0.9, penalty=None, columns=None,
                         exclude=None, floor=None, n_cols: int | None = None, reverse_floor=None, query_columns=None,
                         query_penalty=None, device: str = "cuda", **_: object) -> "CSR | tuple[CSR, CSR]":
    """SPEC §1 steps 3-5 for query rows among base rows with the Triton kernels; same contract as
    :func:`.gain_knn_rows.gain_knn_rows_cpu` (module docstring for the tolerance). The reverse direction
    (``reverse_floor``) is the same kernel with the two sets of rows exchanged.

    Runs on ``device`` ("cuda"), or on CPU tensors under ``TRITON_INTERPRET=1``. Raises
    :class:`InputError` when the rows × N weight block of the dense path (``k`` > ``SELECT_MAX_K``)
    cannot be allocated on the device."""
    a = check_rows_inputs(Q, X, k, sim_min, sim_max, penalty, columns, exclude, floor, n_cols, reverse_floor,
                          query_columns, query_penalty)
    m, n = a.Q.shape[0], a.X.shape[0]
    if m == 0 or n == 0:
        return a.result(a.empty(m), a.empty(n))
    interpret = device == "cpu"
    dev = "cpu" if interpret else "cuda"
    Qd, Xd = a.Q.to(dev), a.X.to(dev)
    forward = _direction(Qd, Xd, a.columns, a.penalty.to(dev), a.exclude, a.floor, a.k, a.sim_min, a.sim_max,
                         a.n_cols, interpret)
    rev = a.reverse
    if rev is None:
        return forward
    return forward, _direction(Xd, Qd, rev.columns, rev.penalty.to(dev), a.columns, rev.floor, rev.k, a.sim_min,
                               a.sim_max, a.n_cols, interpret)


def launch_builds(shapes: dict) -> list[dict]:
    """The builds :func:`gain_knn_rows_triton` launches (ahead-of-time compile check): every autotuned
    configuration at G3RAG's k and at ``SELECT_MAX_K``, and the dense path of the exact graph's adds."""
    sig = {"QH": "*fp16", "QL": "*fp16", "ROW": "*fp32", "XH": "*fp16", "XL": "*fp16", "XUN": "*fp32", "PEN": "*fp32",
           "OUT_V": "*fp32", "OUT_C": "*i32", "M": "i32", "N": "i32", "D": "i32", "stride_x": "i32",
           "sim_min": "fp32", "sim_max": "fp32", "norm_max": "fp32", "pen_max": "fp32", "K": "constexpr",
           "KP": "constexpr", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "BLOCK_D": "constexpr",
           "EVEN_D": "constexpr"}
    aligned = ("QH", "QL", "ROW", "XH", "XL", "XUN", "PEN", "OUT_V", "OUT_C", "D", "stride_x")
    out = []
    for k in sorted({shapes["k"], SELECT_MAX_K}):
        for c in configs_for(k, ROWS_CONFIGS):
            m, n_ = c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"]
            out.append({"kernel": "gain_knn_rows", "config": f"k{k}-m{m}n{n_}d{c.kwargs['BLOCK_D']}w{c.num_warps}",
                        "fn": "gain_knn_rows_triton:_gain_knn_rows_kernel", "signature": sig,
                        "constexprs": {"K": k, "KP": max(triton.next_power_of_2(k), 2), **c.kwargs,
                                       "EVEN_D": shapes["d"] % c.kwargs["BLOCK_D"] == 0},
                        "num_warps": c.num_warps, "num_stages": c.num_stages, "maxnreg": c.maxnreg,
                        "aligned": aligned})
    dense = {"QH": "*fp16", "QL": "*fp16", "QUN": "*fp32", "EXCL": "*i32", "FLOOR": "*fp32", "XH": "*fp16",
             "XL": "*fp16", "XUN": "*fp32", "PEN": "*fp32", "W": "*fp32", "R0": "i32", "R": "i32",
             "N": "i32", "D": "i32", "stride_q": "i32", "stride_x": "i32", "sim_min": "fp32", "sim_max": "fp32",
             "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "BLOCK_D": "constexpr", "EVEN_D": "constexpr"}
    c = DENSE_CONFIG
    out.append({"kernel": "gain_knn_rows",
                "config": f"dense-m{c.kwargs['BLOCK_M']}n{c.kwargs['BLOCK_N']}d{c.kwargs['BLOCK_D']}w{c.num_warps}",
                "fn": "gain_knn_rows_triton:_gain_rows_weights_kernel", "signature": dense,
                "constexprs": {**c.kwargs, "EVEN_D": shapes["d"] % c.kwargs["BLOCK_D"] == 0},
                "num_warps": c.num_warps, "num_stages": c.num_stages,
                "aligned": ("QH", "QL", "QUN", "EXCL", "FLOOR", "XH", "XL", "XUN", "PEN", "W", "D", "stride_q",
                            "stride_x")})
    return out


__all__ = ["gain_knn_rows_triton"]

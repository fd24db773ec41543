"""Triton kernels of ``gain_knn`` (SPEC §1 index steps 3-5); semantics in :mod:`.gain_knn`.

Similarity tiles run on tensor cores in a three-term float16 split (near-FP32): each row of X is
scaled by a power of two ``2^e_i`` that brings its largest entry near 2¹⁴, then split into
``hi = fp16(x·2^e_i)`` and ``lo = fp16(x·2^e_i − hi)`` (:func:`split_fp16`, once per call), so that
``s_ij = (hi_i·hi_j + hi_i·lo_j + lo_i·hi_j)·2^−(e_i+e_j)`` — 22 significant bits per entry, as a
TF32 three-term split, at half its operand bytes and twice its tensor-core rate.

* :func:`_gain_knn_kernel` (``k`` ≤ :data:`SELECT_MAX_K`): one program owns ``BLOCK_M`` rows and
  folds every column tile into a running top-k held in registers. A tile first gets ``hi·hi``
  only; ``|s − hi·hi| ≤ 2⁻⁹·‖x_i‖·‖x_j‖`` bounds each similarity. Each row keeps its k-th weight
  as a similarity floor (:func:`similarity_floor`: below it no column, whatever its penalty, can
  beat the k-th weight), so every entry is tested by one compare, and a tile with no entry above
  its row's floor is skipped. Otherwise the correction terms complete the similarity, and
  selection rounds (as many as the most entries any row can take, at most k; later columns lose
  ties, so an equal weight cannot enter) move the tile's best entry (ties → lower column) into
  its row's worst slot.
* :func:`_gain_weights_kernel` (larger ``k``, the exact graph ``k = n − 1``): the weights of a
  block of rows against every column, written out; the top-k of each row is then selected on
  the device with exact (weight, column) keys. Its memory is O(rows · N) per block.

The host sorts each row exactly and packs CSR with the CPU path's helpers. Tile shapes, warps
and stages are autotuned on CUDA (:data:`CONFIGS`, tuned once per ``(d, k)`` on the first
:data:`TUNE_ROWS` rows); the interpreter runs :data:`INTERPRET_CONFIG`.
"""
from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from .csr import CSR
from .errors import InputError
from .gain_knn import check_gain_knn_inputs, finalise_csr, select_topk

#: the largest k the register top-k takes; larger k (the exact graph) runs :func:`_gain_weights_kernel`
SELECT_MAX_K = 64
#: the similarity error bound of the ``hi·hi`` pass, per unit of ``‖x_i‖·‖x_j‖`` (twice the split's 2⁻¹⁰)
HI_BOUND = tl.constexpr(2.0 ** -9)
#: :func:`split_fp16` scales each row so that its largest entry lies in [2¹³, 2¹⁴)
SPLIT_EXPONENT = 14
#: rows of the slice the autotuner times each configuration on (enough CTAs to fill a GPU)
TUNE_ROWS = 32768
#: weights held at once by the dense path (rows per block = this / N)
DENSE_ENTRIES = 1 << 26
#: the autotuned tiles (rows, columns, reduction step, warps) and the largest k each holds in 128
#: registers without spilling (two CTAs of 8 warps, or one of 16, per SM)
TILES = {(64, 64, 32, 8): 32, (128, 64, 32, 16): 32, (128, 64, 16, 16): SELECT_MAX_K, (64, 128, 16, 16): SELECT_MAX_K}
#: the autotuned configurations
CONFIGS = [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_D": d}, num_warps=w, num_stages=1, maxnreg=128)
           for m, n, d, w in TILES]


def configs_for(k: int, configs: list = CONFIGS) -> list:
    """The configurations of ``configs`` whose tile holds a top-k of ``k``."""
    return [c for c in configs
            if TILES[(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.kwargs["BLOCK_D"], c.num_warps)] >= k]
#: the configuration of the interpreter (small tiles: the tests' inputs span several of them)
INTERPRET_CONFIG = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_D": 16}
#: the dense path's configuration
DENSE_CONFIG = triton.Config({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_D": 32}, num_warps=8, num_stages=3)


@triton.jit
def split_tf32(x):
    """``(hi, lo)``: x truncated to TF32 (10 explicit mantissa bits) and the remainder, ``x = hi + lo``."""
    hi = (x.to(tl.int32, bitcast=True) & -8192).to(tl.float32, bitcast=True)
    return hi, x - hi


def split_fp16(X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(hi, lo, unscale)``: X's rows scaled by powers of two ``2^e_i`` (largest entry in [2¹³, 2¹⁴);
    zero rows unscaled) and split into float16 ``hi`` and ``lo`` ``[N, d]``, and ``unscale = 2^−e_i``
    (float32 ``[N]``). ``x·2^e_i − hi − lo`` is within 2⁻²² of ``|x|·2^e_i`` (plus 2⁻²⁵ absolute)."""
    top = X.abs().amax(dim=1) if X.shape[1] else torch.zeros(X.shape[0], device=X.device)
    e = torch.where(top > 0, SPLIT_EXPONENT - 1 - torch.floor(torch.log2(torch.where(top > 0, top, 1.0))),
                    torch.zeros_like(top))
    scale = torch.exp2(e)
    Xs = X * scale[:, None]
    hi = Xs.to(torch.float16)
    lo = (Xs - hi.to(torch.float32)).to(torch.float16)
    return hi.contiguous(), lo.contiguous(), torch.exp2(-e).to(torch.float32).contiguous()


@triton.jit
def similarity_part(AH, AL, BH, BL, a_off, amask, b_off, bmask, D, s, PART: tl.constexpr, EVEN_D: tl.constexpr,
                    BLOCK_D: tl.constexpr):
    """``s`` plus one term of the scaled tile ``X[rows] · X[cols]ᵀ`` on tensor cores (float16 operands,
    float32 sums): ``PART`` 1 ``hi·hi``, 2 ``hi·lo``, 3 ``lo·hi``. ``AH``/``AL`` (``BH``/``BL``) point at
    the tile's first row (column) in the hi / lo arrays, ``a_off`` / ``b_off`` are the int32 element
    offsets of its rows / columns from there (masked ones read 0); ``EVEN_D``: ``BLOCK_D`` divides D."""
    A = AH if PART != 3 else AL
    B = BL if PART == 2 else BH
    for d0 in range(0, D, BLOCK_D):
        dd = d0 + tl.arange(0, BLOCK_D)
        if EVEN_D:
            a = tl.load(A + a_off[:, None] + dd[None, :], mask=amask[:, None], other=0.0)
            b = tl.load(B + b_off[:, None] + dd[None, :], mask=bmask[:, None], other=0.0)
        else:
            a = tl.load(A + a_off[:, None] + dd[None, :], mask=amask[:, None] & (dd[None, :] < D), other=0.0)
            b = tl.load(B + b_off[:, None] + dd[None, :], mask=bmask[:, None] & (dd[None, :] < D), other=0.0)
        s = tl.dot(a, tl.trans(b), s)
    return s


@triton.jit
def correction(AH, AL, BH, BL, a_off, amask, b_off, bmask, D, s, EVEN_D: tl.constexpr, BLOCK_D: tl.constexpr):
    """``s + hi·lo + lo·hi``: the split's correction terms added to ``s`` (see :func:`similarity_part`)."""
    s = similarity_part(AH, AL, BH, BL, a_off, amask, b_off, bmask, D, s, 2, EVEN_D, BLOCK_D)
    return similarity_part(AH, AL, BH, BL, a_off, amask, b_off, bmask, D, s, 3, EVEN_D, BLOCK_D)


@triton.jit
def similarity_tile(AH, AL, BH, BL, a_off, amask, b_off, bmask, D, EVEN_D: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """The scaled ``[BLOCK_M, BLOCK_N]`` tile of ``X[rows] · X[cols]ᵀ`` in the three-term split."""
    s = similarity_part(AH, AL, BH, BL, a_off, amask, b_off, bmask, D, tl.zeros([BLOCK_M, BLOCK_N], tl.float32), 1,
                        EVEN_D, BLOCK_D)
    return correction(AH, AL, BH, BL, a_off, amask, b_off, bmask, D, s, EVEN_D, BLOCK_D)


@triton.jit
def gain(s, pen):
    """SPEC §1 step 3 on a similarity tile: ``x·sqrt(1 − x²)·pen``, ``x = clip(s, 0, 1)`` (the hardware
    square root, within 2 ulp; see ``docs/decisions/kernels-gain-knn-tensor-cores.md``)."""
    x = tl.minimum(tl.maximum(s, 0.0), 1.0)
    return x * tl.sqrt(1.0 - x * x) * pen


@triton.jit
def similarity_floor(thr, sim_min, pen_max, norm_r, norm_max, un_r):
    """Per row, the scaled ``hi·hi`` value (``hi·hi · 2^−e_j``, compared before the row's own
    ``2^−e_i``) below which no entry of the row can enter its top-k: the similarity ``s_lo`` with
    ``gain(s_lo)·pen_max = thr`` on gain's rising side (a weight above ``thr`` needs a similarity
    above it), at least ``sim_min`` and 0 (a weight > 0 needs s > 0), less the row's ``hi·hi``
    bound at the largest column norm (``HI_BOUND·norm_r·norm_max``). ``thr`` ≤ 0 (fewer than k edges
    held): ``max(sim_min, 0)``; ``thr`` above the largest weight any column can have: +inf. The root
    is taken in the form ``g·sqrt(2 / (1 + sqrt(1 − 4g²)))`` (no cancellation for small g) and
    lowered by a relative margin that covers its float32 rounding and that of the weights compared
    with ``thr``."""
    g = thr / (pen_max * 1.001)
    root = g * tl.sqrt(2.0 / (1.0 + tl.sqrt(tl.maximum(1.0 - 4.0 * g * g, 0.0)))) * 0.9999
    s_lo = tl.where(thr > 0, tl.where(g < 0.5, root, float("inf")), 0.0)
    return (tl.maximum(s_lo, tl.maximum(sim_min, 0.0)) - HI_BOUND * norm_r * norm_max) / un_r


@triton.jit
def take_into_topk(w, ok, cols, best_v, best_c, thr, K: tl.constexpr):
    """The rows' running top-k ``(best_v, best_c, thr)`` [BLOCK_M, KP] after taking in a tile's weights
    ``w`` [BLOCK_M, BLOCK_N] where ``ok`` (columns ``cols``): as many rounds as the most entries a row
    may take (at most K), each moving every row's best remaining entry into its k-th slot when it
    beats it (a tie with the k-th loses: its column is higher); ``thr`` is each row's k-th weight."""
    big = 2147483647
    w = tl.where(ok, w, float("-inf"))
    rounds = tl.minimum(tl.max(tl.sum(ok.to(tl.int32), axis=1)), K)
    for _ in range(rounds):
        m = tl.max(w, axis=1)
        mc = tl.min(tl.where(w == m[:, None], cols[None, :], big), axis=1)
        wc = tl.max(tl.where(best_v == thr[:, None], best_c, -big), axis=1)
        better = m > thr
        slot = (best_v == thr[:, None]) & (best_c == wc[:, None]) & better[:, None]
        best_v = tl.where(slot, m[:, None], best_v)
        best_c = tl.where(slot, mc[:, None], best_c)
        thr = tl.min(best_v, axis=1)
        w = tl.where(cols[None, :] == mc[:, None], float("-inf"), w)
    return best_v, best_c, thr


@triton.jit
def scan_columns(AH, AL, XH, XL, UN_C, PEN, a_off, rmask, excl, un_r, norm_r, best_v, best_c, N, D, stride_x, sim_min,
                 sim_max, norm_max, pen_max, K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_D: tl.constexpr, EVEN_D: tl.constexpr):
    """The rows' running top-k ``(best_v, best_c)`` after every column tile of X (``XH``/``XL`` its
    split, ``UN_C`` its unscales, ``PEN`` its penalties): per tile ``hi·hi`` and one compare an entry with
    the rows' similarity floors; a tile over them completes its split and goes through
    :func:`take_into_topk`. ``AH``/``AL`` point at the tile rows (``a_off`` their offsets), ``excl`` is
    each row's excluded column (its own for gain_knn), ``un_r``/``norm_r`` the rows' unscales and norms."""
    thr = tl.min(best_v, axis=1)  # each row's k-th weight (-inf, or its floor, until k edges are held)
    floor = similarity_floor(thr, sim_min, pen_max, norm_r, norm_max, un_r)
    for c0 in range(0, N, BLOCK_N):
        cols = c0 + tl.arange(0, BLOCK_N)
        cmask = cols < N
        first_c = stride_x.to(tl.int64) * c0
        BH, BL = XH + first_c, XL + first_c
        b_off = tl.arange(0, BLOCK_N) * stride_x
        un_c = tl.load(UN_C + cols, mask=cmask, other=0.0)
        acc = similarity_part(AH, AL, BH, BL, a_off, rmask, b_off, cmask, D, tl.zeros([BLOCK_M, BLOCK_N], tl.float32),
                              1, EVEN_D, BLOCK_D)
        if tl.max(acc * un_c[None, :] - floor[:, None]) >= 0:  # a product, a subtraction and a max an entry
            pen = tl.load(PEN + cols, mask=cmask, other=0.0)
            s = correction(AH, AL, BH, BL, a_off, rmask, b_off, cmask, D, acc, EVEN_D, BLOCK_D) \
                * un_r[:, None] * un_c[None, :]  # hi·hi completed by hi·lo + lo·hi
            w = gain(s, pen[None, :])
            ok = cmask[None, :] & (cols[None, :] != excl[:, None]) & rmask[:, None] & (s >= sim_min) \
                & (s <= sim_max) & (w > 0) & (w > thr[:, None])
            best_v, best_c, thr = take_into_topk(w, ok, cols, best_v, best_c, thr, K)
            floor = similarity_floor(thr, sim_min, pen_max, norm_r, norm_max, un_r)  # the rows' new k-th weights
    return best_v, best_c


@triton.jit
def store_topk(OUT_V, OUT_C, rows, rmask, best_v, best_c, K: tl.constexpr, KP: tl.constexpr):
    """Write the rows' top-k weights and columns ([rows, K] row-major; an empty slot's column -1)."""
    out = rows.to(tl.int64)[:, None] * K + tl.arange(0, KP)[None, :]
    smask = rmask[:, None] & (tl.arange(0, KP)[None, :] < K)
    tl.store(OUT_V + out, best_v, mask=smask)
    tl.store(OUT_C + out, tl.where(best_c >= 0, best_c, -1), mask=smask)


@triton.jit
def _gain_knn_kernel(XH, XL, UNSCALE, NORM, PEN, OUT_V, OUT_C, N_ROWS, N, D, stride_x, sim_min, sim_max,
                     norm_max, pen_max, K: tl.constexpr, KP: tl.constexpr, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, EVEN_D: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < N_ROWS
    first = stride_x.to(tl.int64) * (pid * BLOCK_M)
    AH, AL = XH + first, XL + first
    a_off = tl.arange(0, BLOCK_M) * stride_x
    norm_r = tl.load(NORM + rows, mask=rmask, other=0.0)
    un_r = tl.load(UNSCALE + rows, mask=rmask, other=1.0)
    slots = tl.arange(0, KP)
    # running top-k: empty slots hold -inf with distinct negative columns; padding slots (>= K) +inf
    best_v = tl.where(slots[None, :] < K, float("-inf"), float("inf")) + tl.zeros([BLOCK_M, KP], tl.float32)
    best_c = (-1 - slots[None, :]) + tl.zeros([BLOCK_M, KP], tl.int32)
    best_v, best_c = scan_columns(AH, AL, XH, XL, UNSCALE, PEN, a_off, rmask, rows, un_r, norm_r, best_v, best_c, N, D,
                                  stride_x, sim_min, sim_max, norm_max, pen_max, K, BLOCK_M, BLOCK_N, BLOCK_D, EVEN_D)
    store_topk(OUT_V, OUT_C, rows, rmask, best_v, best_c, K, KP)


def even_d(args: dict) -> bool:
    """The ``EVEN_D`` heuristic of a launch: ``D`` is a whole number of ``BLOCK_D`` steps (no masked tail)."""
    return args["D"] % args["BLOCK_D"] == 0


def tuned_top_k(kernel: Any, configs: list) -> Any:
    """A top-k ``kernel`` autotuned over ``configs`` by ``(D, K)``, the configurations that cannot
    hold ``K`` pruned (:func:`configs_for`), with ``EVEN_D`` set by :func:`even_d`."""
    return triton.autotune(configs=configs, key=["D", "K"], prune_configs_by={
        "early_config_prune": lambda cs, named_args, **kw: configs_for(kw.get("K", named_args.get("K")), cs)})(
        triton.heuristics({"EVEN_D": even_d})(kernel))


_gain_knn_tuned = tuned_top_k(_gain_knn_kernel, CONFIGS)


@triton.jit
def _gain_weights_kernel(XH, XL, UNSCALE, PEN, W, R0, R, N, D, stride_x, sim_min, sim_max,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, EVEN_D: tl.constexpr):
    """``W[i, j]`` = the weight of edge ``R0 + i → j`` (``i < R``), -inf where it is not an edge."""
    r = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rmask = r < R
    cmask = cols < N
    rows = R0 + r
    first_r = stride_x.to(tl.int64) * (R0 + tl.program_id(0) * BLOCK_M)
    first_c = stride_x.to(tl.int64) * (tl.program_id(1) * BLOCK_N)
    acc = similarity_tile(XH + first_r, XL + first_r, XH + first_c, XL + first_c, tl.arange(0, BLOCK_M) * stride_x,
                          rmask, tl.arange(0, BLOCK_N) * stride_x, cmask, D, EVEN_D, BLOCK_M, BLOCK_N, BLOCK_D)
    s = acc * tl.load(UNSCALE + rows, mask=rmask, other=0.0)[:, None] \
        * tl.load(UNSCALE + cols, mask=cmask, other=0.0)[None, :]
    pen = tl.load(PEN + cols, mask=cmask, other=0.0)
    w = gain(s, pen[None, :])
    ok = (cols[None, :] != rows[:, None]) & (s >= sim_min) & (s <= sim_max) & (w > 0)
    tl.store(W + r.to(tl.int64)[:, None] * N + cols[None, :], tl.where(ok, w, float("-inf")),
             mask=rmask[:, None] & cmask[None, :])


def _dense_topk(Xd: torch.Tensor, pend: torch.Tensor, k: int, sim_min: float, sim_max: float,
                interpret: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The top-k of every row through :func:`_gain_weights_kernel` and exact keys on the device."""
    n, d = Xd.shape
    hi, lo, unscale = split_fp16(Xd)
    cfg = INTERPRET_CONFIG if interpret else DENSE_CONFIG.kwargs
    launch = {} if interpret else {"num_warps": DENSE_CONFIG.num_warps, "num_stages": DENSE_CONFIG.num_stages}
    rows = max(1, min(n, DENSE_ENTRIES // n))
    cols = torch.arange(n, dtype=torch.int64, device=Xd.device)
    vals, idx = torch.empty((n, k), dtype=torch.float32), torch.empty((n, k), dtype=torch.int64)
    W = torch.empty((rows, n), dtype=torch.float32, device=Xd.device)
    for r0 in range(0, n, rows):
        R = min(rows, n - r0)
        grid = (triton.cdiv(R, cfg["BLOCK_M"]), triton.cdiv(n, cfg["BLOCK_N"]))
        _gain_weights_kernel[grid](hi, lo, unscale, pend, W, r0, R, n, d, hi.stride(0), sim_min, sim_max, **cfg,
                                   **launch, EVEN_D=d % cfg["BLOCK_D"] == 0)
        v, c = select_topk(W[:R], cols.expand(R, n), k)
        vals[r0:r0 + R], idx[r0:r0 + R] = v.cpu(), c.cpu()
    return vals, idx


def gain_knn_triton(X, k: int = 32, sim_min: float = 0.3, sim_max: float = 0.9, penalty=None,
                    device: str = "cuda", **_: object) -> CSR:
    """SPEC §1 steps 3-5 with the Triton kernels; same contract as :func:`.gain_knn.gain_knn_cpu`.

    Runs on ``device`` ("cuda"), or on CPU tensors under ``TRITON_INTERPRET=1``. Tolerance against
    the CPU path: weights within 1e-5 relative or 1e-6 absolute (the gain's slope is unbounded as
    s → 1); edges equal, except where two candidate weights (or a similarity and a band edge) lie
    within the two paths' similarity difference (a few 1e-7 for unit rows).
    Raises :class:`InputError` when the rows × N weight block of the dense path (``k`` >
    :data:`SELECT_MAX_K`) cannot be allocated on the device."""
    Xc, pen, k, sim_min, sim_max = check_gain_knn_inputs(X, k, sim_min, sim_max, penalty)
    n, d = Xc.shape
    if n < 2 or k == 0:
        return finalise_csr(torch.zeros((n, 0)), torch.zeros((n, 0), dtype=torch.int64), n)
    interpret = device == "cpu"
    dev = "cpu" if interpret else "cuda"
    Xd, pend = Xc.to(dev), pen.to(dev)
    if k > SELECT_MAX_K:
        try:
            vals, cols = _dense_topk(Xd, pend, k, sim_min, sim_max, interpret)
        except torch.OutOfMemoryError as e:
            raise InputError(f"gain_knn: k = {k} (> {SELECT_MAX_K}) takes the dense path, whose block of "
                             f"{max(1, DENSE_ENTRIES // n)} rows x {n} weights does not fit on the device") from e
        return finalise_csr(vals, cols, n)
    norms = torch.linalg.vector_norm(Xd, dim=1).contiguous()
    hi, lo, unscale = split_fp16(Xd)
    out_v = torch.empty((n, k), dtype=torch.float32, device=dev)
    out_c = torch.empty((n, k), dtype=torch.int32, device=dev)
    kp = max(triton.next_power_of_2(k), 2)
    args = (hi, lo, unscale, norms, pend, out_v, out_c)
    scalars = (n, d, hi.stride(0), sim_min, sim_max, float(norms.max()), float(pend.max()))
    if interpret:
        grid = (triton.cdiv(n, INTERPRET_CONFIG["BLOCK_M"]),)
        _gain_knn_kernel[grid](*args, n, *scalars, K=k, KP=kp, EVEN_D=d % INTERPRET_CONFIG["BLOCK_D"] == 0,
                               **INTERPRET_CONFIG)
    else:
        for rows in (min(n, TUNE_ROWS), n):  # the first call per (d, k) tunes on the first rows
            _gain_knn_tuned[lambda meta, r=rows: (triton.cdiv(r, meta["BLOCK_M"]),)](*args, rows, *scalars, K=k, KP=kp)
    return finalise_csr(out_v.cpu(), out_c.cpu().to(torch.int64), n)


def launch_builds(shapes: dict) -> list[dict]:
    """The builds :func:`gain_knn_triton` launches (ahead-of-time compile check): every autotuned
    configuration at G3RAG's k and at :data:`SELECT_MAX_K`, and the dense path of the exact graph."""
    sig = {"XH": "*fp16", "XL": "*fp16", "UNSCALE": "*fp32", "NORM": "*fp32", "PEN": "*fp32", "OUT_V": "*fp32",
           "OUT_C": "*i32", "N_ROWS": "i32",
           "N": "i32", "D": "i32", "stride_x": "i32", "sim_min": "fp32", "sim_max": "fp32", "norm_max": "fp32",
           "pen_max": "fp32", "K": "constexpr",
           "KP": "constexpr", "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "BLOCK_D": "constexpr",
           "EVEN_D": "constexpr"}
    aligned = ("XH", "XL", "UNSCALE", "NORM", "PEN", "OUT_V", "OUT_C", "D", "stride_x")
    out = []
    for k in sorted({shapes["k"], SELECT_MAX_K}):
        for c in configs_for(k):
            m, n_ = c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"]
            out.append({"kernel": "gain_knn", "config": f"k{k}-m{m}n{n_}d{c.kwargs['BLOCK_D']}w{c.num_warps}",
                        "fn": "gain_knn_triton:_gain_knn_kernel", "signature": sig,
                        "constexprs": {"K": k, "KP": max(triton.next_power_of_2(k), 2), **c.kwargs,
                                       "EVEN_D": shapes["d"] % c.kwargs["BLOCK_D"] == 0},
                        "num_warps": c.num_warps, "num_stages": c.num_stages, "maxnreg": c.maxnreg,
                        "aligned": aligned})
    dense = {"XH": "*fp16", "XL": "*fp16", "UNSCALE": "*fp32", "PEN": "*fp32", "W": "*fp32", "R0": "i32", "R": "i32",
             "N": "i32", "D": "i32",
             "stride_x": "i32", "sim_min": "fp32", "sim_max": "fp32", "BLOCK_M": "constexpr",
             "BLOCK_N": "constexpr", "BLOCK_D": "constexpr", "EVEN_D": "constexpr"}
    c = DENSE_CONFIG
    out.append({"kernel": "gain_knn",
                "config": f"dense-m{c.kwargs['BLOCK_M']}n{c.kwargs['BLOCK_N']}d{c.kwargs['BLOCK_D']}w{c.num_warps}",
                "fn": "gain_knn_triton:_gain_weights_kernel", "signature": dense,
                "constexprs": {**c.kwargs, "EVEN_D": shapes["d"] % c.kwargs["BLOCK_D"] == 0},
                "num_warps": c.num_warps, "num_stages": c.num_stages,
                "aligned": ("XH", "XL", "UNSCALE", "PEN", "W", "D", "stride_x")})
    return out


__all__ = ["gain_knn_triton"]

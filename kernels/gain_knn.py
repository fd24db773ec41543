"""``gain_knn``: the sparsified geometric-gain graph of SPEC §1 index steps 3-5.

For every passage i, keep the ``k`` out-edges of largest weight
``w_ij = gain(s_ij) · penalty[j]`` with ``gain(s) = x·sqrt(1 − x²)``, ``x = clip(s, 0, 1)``
(SPEC §1 step 3; the penalty of step 2 is on the target, step 4), among ``j ≠ i`` whose
cosine similarity lies in the band ``sim_min ≤ s_ij ≤ sim_max`` (step 5).

Semantics shared by the CPU and Triton paths (they agree on indices exactly):

* an edge is *eligible* when ``j ≠ i``, ``sim_min ≤ s_ij ≤ sim_max`` and ``w_ij > 0``
  (a zero-weight edge carries nothing through the transition of step 6, so it is dropped);
* per row the eligible edges are ordered by weight descending, ties broken toward the
  LOWER column index; the first ``k`` are kept, so a row with fewer than ``k`` eligible
  neighbours is shorter (possibly empty);
* the result is CSR (``indptr int64 [N+1]``, ``indices int32``, ``data float32``), each row
  sorted in that order.

The CPU path computes the similarity in row blocks × column blocks with torch matmul
(multi-threaded BLAS), exploiting ``s_ij = s_ji`` so each block product is used for both
directions, and pushes the weights into per-row faiss heaps of size k + 1: the N×N matrix
never exists. The band and gain of a tile (which are symmetric) are computed once for both
directions, then multiplied by the target penalty of each side (:func:`gain_weights`, numpy
strips that stay in cache). torch.compile fuses that arithmetic into one loop, but its one-time
cost pays only from :data:`COMPILE_MIN_ENTRIES` similarity entries on
(``docs/decisions/g3rag-no-compile.md``).
Exact tie-breaking uses an int64 key ``(float bits of w) << 32 | (2^31 − 1 − j)``,
unique per row; rows with a tie at the k-th place are redone with it.
"""
from __future__ import annotations

import math
import os
from typing import Callable

import numpy as np
import torch

from .checks import check_band, check_positive_int, check_values
from .errors import InputError
from .csr import CSR, csr_from_topk
from .dispatch import register
from .tensors import as_tensor

#: a build that weighs at least this many similarity entries (N² for the exact graph) compiles the
#: tile arithmetic with torch.compile (``HOPGRAPH_COMPILE``: ``auto`` = this threshold, ``1`` always, ``0`` never)
COMPILE_MIN_ENTRIES = 2 * 10 ** 10
_LOW31 = 0x7FFFFFFF
#: rows of a tile per strip of :func:`gain_weights` (a strip of 2048 columns stays in L2)
STRIP_ROWS = 64


# ---------------------------------------------------------------------- validation
def check_gain_knn_inputs(X, k, sim_min, sim_max, penalty) -> tuple[torch.Tensor, torch.Tensor, int, float, float]:
    """Validate the inputs of :func:`gain_knn_cpu` / the Triton kernel (X finite 2-D, k a positive
    integer, a finite band, penalty finite non-negative [N]); returns float32 tensors."""
    X = as_embedding_tensor(X, "X")
    n = X.shape[0]
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise InputError(f"gain_knn: k must be a positive integer, got {k!r}")
    sim_min, sim_max = check_band(sim_min, sim_max, "gain_knn")
    if penalty is None:
        pen = torch.ones(n, dtype=torch.float32)
    else:
        pen = as_tensor(penalty, name="gain_knn: penalty").detach().cpu()
        if tuple(pen.shape) != (n,):
            raise InputError(f"gain_knn: penalty must have shape ({n},), got {tuple(pen.shape)}")
        check_values(pen, "penalty", "gain_knn")
        pen = pen.to(torch.float32)
        check_values(pen, "penalty (as float32)", "gain_knn")
    return X, pen.contiguous(), int(min(k, max(n - 1, 0))), sim_min, sim_max


def as_embedding_tensor(X, name: str, op: str = "gain_knn") -> torch.Tensor:
    """A contiguous float32 CPU tensor of a finite 2-D array (shared with :mod:`.density`);
    :class:`InputError` as ``"OP: NAME ..."``."""
    if isinstance(X, torch.Tensor):
        t = X.detach().to("cpu", torch.float32)
    else:  # memory-mapped X stays shared when it is float32 already
        t = as_tensor(X, torch.float32, name=f"{op}: {name}")
    if t.ndim != 2:
        raise InputError(f"{op}: {name} must be a 2-D [N, d] array, got shape {tuple(t.shape)}")
    check_values(t, name, op, non_negative=False)
    return t.contiguous()


# ---------------------------------------------------------------------- exact ordering
def order_keys(values: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
    """int64 keys whose descending order is (weight desc, column asc); -1 for non-edges
    (weight <= 0 or column < 0). Keys of one row are unique."""
    bits = values.contiguous().view(torch.int32).to(torch.int64)
    keys = (bits << 32) | (_LOW31 - columns.to(torch.int64))
    return torch.where((values > 0) & (columns >= 0), keys, torch.full_like(keys, -1))


def decode_keys(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse of :func:`order_keys`: (weights float32, columns int64; -inf / -1 for non-edges)."""
    valid = keys >= 0
    cols = torch.where(valid, _LOW31 - (keys & 0xFFFFFFFF), torch.full_like(keys, -1))
    vals = (keys >> 32).to(torch.int32).view(torch.float32)
    vals = torch.where(valid, vals, torch.full_like(vals, -math.inf))
    return vals, cols


def select_topk(values: torch.Tensor, columns: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` best (weight desc, column asc) of each row of candidate lists, padded with -inf / -1."""
    keys = order_keys(values, columns)
    m = keys.shape[1]
    top = torch.topk(keys, min(k, m), dim=1).values if m else keys
    if top.shape[1] < k:
        top = torch.cat([top, torch.full((top.shape[0], k - top.shape[1]), -1, dtype=torch.int64)], dim=1)
    return decode_keys(top)


def finalise_csr(values: torch.Tensor, columns: torch.Tensor, n_cols: int) -> CSR:
    """Sort per-row candidate lists exactly and pack them as CSR (non-edges dropped)."""
    vals, cols = select_topk(values, columns, values.shape[1])
    return csr_from_topk(vals.numpy(), cols.numpy(), n_cols)


# ---------------------------------------------------------------------- tile arithmetic
def gain_weights(S: torch.Tensor, pen_cols: torch.Tensor, sim_min: float, sim_max: float,
                 pen_rows: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """SPEC §1 steps 3-5 on a similarity tile ``S [n, m]``: ``w = x·sqrt(1−x²)·pen_cols[col]``,
    ``x = clip(S, 0, 1)``, in the band ``[sim_min, sim_max]``, else 0 (not an edge).

    With ``pen_rows`` also the reverse direction ``wT [m, n]`` (row-major) of a symmetric tile
    ``S = X[rows] X[cols]ᵀ`` — band and gain are computed once for both. numpy ufuncs (single-threaded,
    correctly rounded float32 sqrt) on strips of :data:`STRIP_ROWS` rows in the order of the dense
    reference ``x·sqrt(1−x²)·pen``.
    """
    s = S.numpy()
    pc = np.asarray(pen_cols, np.float32)
    n, m = s.shape
    w = np.empty((n, m), np.float32)
    wT = np.empty((m, n), np.float32) if pen_rows is not None else None
    pr = np.asarray(pen_rows, np.float32) if pen_rows is not None else None
    rows = min(STRIP_ROWS, max(n, 1))
    x, g = np.empty((rows, m), np.float32), np.empty((rows, m), np.float32)
    low, high = np.empty((rows, m), bool), np.empty((rows, m), bool)
    lo, hi = np.float32(sim_min), np.float32(sim_max)
    for r in range(0, n, rows):
        e = min(r + rows, n)
        sr, xx, gg, ll, hh = s[r:e], x[:e - r], g[:e - r], low[:e - r], high[:e - r]
        np.clip(sr, 0.0, 1.0, out=xx)
        np.multiply(xx, xx, out=gg)
        np.subtract(np.float32(1.0), gg, out=gg)
        np.sqrt(gg, out=gg)
        np.multiply(xx, gg, out=gg)
        np.less(sr, lo, out=ll)
        np.greater(sr, hi, out=hh)
        np.logical_or(ll, hh, out=ll)
        gg[ll] = 0.0
        np.multiply(gg, pc, out=w[r:e])
        if wT is not None:
            np.multiply(gg.T, pr[None, r:e], out=wT[:, r:e])
    return torch.from_numpy(w), (torch.from_numpy(wT) if wT is not None else None)


def edge_weights(S: torch.Tensor, pen: torch.Tensor, sim_min: float, sim_max: float) -> torch.Tensor:
    """SPEC §1 steps 3-5 on a similarity tile: ``x·sqrt(1−x²)·pen[col]`` in the band, else 0
    (:func:`gain_weights`, one direction)."""
    return gain_weights(S, pen, sim_min, sim_max)[0]


def compilable_edge_weights(S: torch.Tensor, pen: torch.Tensor, sim_min: float, sim_max: float) -> torch.Tensor:
    """:func:`edge_weights` in torch ops, for torch.compile (one fused loop): -inf out of the band."""
    x = S.clamp(0.0, 1.0)
    w = torch.sqrt(1.0 - x * x) * x * pen
    w = torch.where((S >= sim_min) & (S <= sim_max), w, torch.full_like(w, -math.inf))
    return w.contiguous()  # a transposed tile is written row-major in the same pass


def pair_weights(S: torch.Tensor, pen_rows: torch.Tensor, pen_cols: torch.Tensor, sim_min: float,
                 sim_max: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Both directions of a symmetric tile ``S = X[rows] X[cols]ᵀ``: ``([rows, cols], [cols, rows])``."""
    w, wT = gain_weights(S, pen_cols, sim_min, sim_max, pen_rows)
    assert wT is not None
    return w, wT


_COMPILED: Callable | None = None


def compile_wanted(entries: int) -> bool:
    """Whether a build weighing ``entries`` similarity entries should use the compiled tile
    arithmetic (``HOPGRAPH_COMPILE``: ``auto`` / ``1`` / ``0``; see :data:`COMPILE_MIN_ENTRIES`)."""
    setting = os.environ.get("HOPGRAPH_COMPILE", "auto").strip().lower()
    if setting not in ("auto", "0", "1"):
        raise InputError(f"HOPGRAPH_COMPILE must be auto, 0 or 1, got {setting!r}")
    return setting == "1" or (setting == "auto" and entries >= COMPILE_MIN_ENTRIES)


def weights_function(entries: int) -> Callable:
    """:func:`edge_weights`, compiled into one fused loop when a build weighs ``entries``
    similarity entries (:func:`compile_wanted`) and torch.compile works; eager otherwise."""
    global _COMPILED
    if not compile_wanted(entries):
        return edge_weights
    if _COMPILED is None:
        try:
            fn = torch.compile(compilable_edge_weights, dynamic=True)
            probe = torch.rand(4, 3)
            fn(probe, torch.ones(3), 0.3, 0.9)
            _COMPILED = fn
        except Exception:  # no C++ toolchain: stay eager (same results, slower)
            _COMPILED = edge_weights
    return _COMPILED


def tile_candidates(w: torch.Tensor, c0: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` best edges of each row of a weight tile whose first column is ``c0``.

    A float ``topk(k+1)`` finds them; rows where the k-th and (k+1)-th weights tie are
    redone with exact keys so that the lower column wins, as the merge requires.
    """
    b, t = w.shape
    if t <= k:
        return w, torch.arange(c0, c0 + t, dtype=torch.int64).expand(b, t)
    v, ix = torch.topk(w, k + 1, dim=1)
    vals, cols = v[:, :k], ix[:, :k] + c0
    tie = (v[:, k] == v[:, k - 1]) & (v[:, k] > 0)
    if bool(tie.any()):
        rows = tie.nonzero().squeeze(1)
        sub_cols = torch.arange(c0, c0 + t, dtype=torch.int64).expand(len(rows), t)
        rv, rc = select_topk(w[rows], sub_cols, k)
        vals, cols = vals.clone(), cols.clone()
        vals[rows], cols[rows] = rv, rc
    return vals, cols


# ---------------------------------------------------------------------- the op
def gain_knn_cpu(X, k: int = 32, sim_min: float = 0.3, sim_max: float = 0.9, penalty=None,
                 block: int = 2048, progress: bool = False, device: str = "cpu") -> CSR:
    """SPEC §1 steps 3-5 on the CPU: the top-``k`` gain graph of the rows of X as CSR.

    ``X [N, d]`` (normalised rows, so that ``X Xᵀ`` is cosine), ``penalty [N]`` the hub
    penalty of the target (SPEC §1 step 2; default all ones). See the module docstring
    for eligibility and tie-breaking. Memory is O(N·k + block²).

    Each weight tile is pushed into per-row faiss min-heaps of size k + 1 (faiss's own
    multi-threaded top-k selection). A row whose (k+1)-th kept weight equals its k-th has
    a tie at the boundary, which the heaps may resolve either way: such rows are redone
    exactly (lower column wins) from their full weight row.
    """
    import faiss

    X, pen, k, sim_min, sim_max = check_gain_knn_inputs(X, k, sim_min, sim_max, penalty)
    block = check_positive_int(block, "block", "gain_knn")
    n = X.shape[0]
    if n < 2 or k == 0:
        return finalise_csr(torch.zeros((n, 0)), torch.zeros((n, 0), dtype=torch.int64), n)
    weights = weights_function(n * n)
    compiled = weights is not edge_weights
    kk = k + 1
    heap_v = np.empty((n, kk), np.float32)
    heap_c = np.empty((n, kk), np.int64)
    heaps = faiss.float_minheap_array_t()
    heaps.nh, heaps.k, heaps.val, heaps.ids = n, kk, faiss.swig_ptr(heap_v), faiss.swig_ptr(heap_c)
    heaps.heapify()

    def push(w: torch.Tensor, r0: int, c0: int) -> None:
        tile = np.ascontiguousarray(w.numpy())
        heaps.addn(tile.shape[1], faiss.swig_ptr(tile), c0, r0, tile.shape[0])

    starts = list(range(0, n, block))
    pairs = [(a, b) for i, a in enumerate(starts) for b in starts[i:]]
    if progress:
        from tqdm.auto import tqdm

        pairs = tqdm(pairs, desc="gain-kNN blocks", unit="block")
    for a, b in pairs:
        S = X[a:a + block] @ X[b:b + block].T
        if a == b:
            w = weights(S, pen[b:b + block], sim_min, sim_max)
            w.diagonal().fill_(-math.inf)
            push(w, a, b)
        elif compiled:
            push(weights(S, pen[b:b + block], sim_min, sim_max), a, b)
            push(weights(S.T, pen[a:a + block], sim_min, sim_max), b, a)
        else:
            w, wT = pair_weights(S, pen[a:a + block], pen[b:b + block], sim_min, sim_max)
            push(w, a, b)
            push(wT, b, a)
    heaps.reorder()
    vals, cols = torch.from_numpy(heap_v[:, :k]).clone(), torch.from_numpy(heap_c[:, :k]).clone()
    tie_rows = np.nonzero((heap_v[:, k] == heap_v[:, k - 1]) & (heap_v[:, k] > 0))[0]
    all_cols = torch.arange(n, dtype=torch.int64)
    for r in range(0, len(tie_rows), block):
        rows = torch.from_numpy(tie_rows[r:r + block])
        w = weights(X[rows] @ X.T, pen, sim_min, sim_max)
        w[torch.arange(len(rows)), rows] = -math.inf
        vals[rows], cols[rows] = select_topk(w, all_cols.expand(len(rows), n), k)
    return finalise_csr(vals, cols, n)


register("gain_knn", gain_knn_cpu, triton="hopgraph.kernels.gain_knn_triton:gain_knn_triton")

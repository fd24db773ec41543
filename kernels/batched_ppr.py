"""Batched personalised PageRank: many priors at once (SPEC §2 step 6).

``batched_ppr(P, priors[B, N], d, tol, max_iter, region=None)`` returns, for every
prior p (a row of ``priors``), ``π = (1 − d) Σ_l d^l P^l p`` computed by the power
iteration ``x ← (1 − d) p + d (P x + D x)`` started from ``x = p``:

* ``P`` is column-stochastic (``P[i, j]`` = probability of the step j → i), given as
  a scipy CSR matrix or a ``(indptr, indices, data)`` triple with rows = targets;
  its all-zero columns are **dangling** chunks and keep their mass (``D`` = diagonal
  self-loop on them), so π sums to Σp;
* the priors are processed as one dense block ``X[N, B]``: each iteration is ONE
  CSR × dense-block product — on a GPU the Triton kernel of ``batched_ppr_triton``; on
  the CPU torch's sparse CSR product (MKL, ``threads`` threads) with ``c`` added in the
  same call and ``d`` and the dangling self-loops folded into the matrix, the iterate
  blocks on transparent huge pages (:func:`iterate_block`), and, while the iterate is
  still sparse (sparse priors), only the columns of P under its non-zero rows
  (:class:`CpuStep`);
* **per-column convergence**: a column stops when ``‖x_{k+1} − x_k‖₁ ≤ tol`` and its
  iterate is saved then; stopped columns leave the block once they are a quarter of it,
  so finished queries cost (almost) nothing more;
* **localised** (``region`` ``[B, N]`` bool): query b's walk is restricted to its
  region — mass stepping outside it is dropped (absorbing boundary), so π_b is 0
  outside. The CPU path then iterates on the sub-matrix of the union of the
  regions only.

Returns ``(pi [B, N], iterations [B])`` as torch tensors (dtype of the priors,
float32 or float64).

CPU choices, measured with ``bench/bench_ppr.py`` (10⁵ chunks, 10⁶ edges, 64 priors; the
product reads B values of the iterate per entry of P, so its cost follows the bytes of
the iterate it touches). Tried and not kept: a 16-bit iterate (torch's one CPU sparse ×
dense kernel with 16-bit storage and 32-bit accumulation, ``torch.sparse.mm(...,
reduce="sum")``, took 2.4x MKL's float32 time over the 18 iterations, and rounding the
iterate to float16 every iteration moved π by 1.7e-3 in L1); reverse Cuthill–McKee or
degree node orders (no gain on the random graph families: no locality to recover); a
row-blocked product with the convergence test fused per block (MKL's per-call cost made
it slower).
"""
from __future__ import annotations

import math
import mmap
import warnings
from typing import Callable, NamedTuple

import numpy as np
import scipy.sparse as sp
import torch

from .checks import check_positive_int, check_values
from .csr import CSR, validate_csr
from .errors import InputError
from .dispatch import register
from .tensors import as_tensor
from .threads import torch_threads

Step = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, "torch.Tensor | None"], None]
#: ``alloc(shape, like)``: an uninitialised tensor of ``like``'s dtype and device
Alloc = Callable[[tuple, torch.Tensor], torch.Tensor]


OP = "batched_ppr"
#: a non-dangling column of P may sum to 1 within this (float32 rounding over a long column)
STOCHASTIC_TOL = 1e-3
#: rows per partial sum of the convergence test (see :func:`column_l1`)
L1_BLOCK = 1024
#: rows per chunk of the CPU convergence test (see :func:`column_change`; 1 MiB at 64 float32 columns)
CHANGE_ROWS = 4 * L1_BLOCK
#: while the columns of P under the iterate's non-zero rows hold at most this share of P's
#: entries, the product uses those columns only (see :class:`CpuStep`)
SPARSE_SHARE = 0.25
#: stopped columns stay in the block (iterated on, their result saved) until they are this share of it
COMPACT_SHARE = 0.25
#: the transparent huge page size (x86-64, aarch64 with 4 KiB base pages)
HUGE_PAGE = 2 << 20
#: iterate blocks from this size on are allocated on huge pages (see :func:`iterate_block`)
HUGE_MIN_BYTES = 4 << 20


class Prepared(NamedTuple):
    """The validated inputs of both paths (see :func:`prepare`)."""

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    n: int
    priors: torch.Tensor
    region: torch.Tensor | None
    dangling: np.ndarray


def as_csr_arrays(P) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(indptr, indices, data, n) of a square CSR given as the kernels' :class:`~.csr.CSR`, a scipy
    matrix or an ``(indptr, indices, data)`` triple; validated (offsets start at 0, never
    decrease and end at nnz; column ids in ``[0, n)``; weights finite and non-negative)."""
    if isinstance(P, CSR):
        if P.n_rows != P.n_cols:
            raise InputError(f"{OP}: P must be square, got shape ({P.n_rows}, {P.n_cols})")
        indptr, indices, data = P.indptr, P.indices, P.data
    elif sp.issparse(P):
        P = sp.csr_matrix(P)
        if P.shape[0] != P.shape[1]:
            raise InputError(f"{OP}: P must be square, got shape {P.shape}")
        indptr, indices, data = P.indptr, P.indices, P.data
    elif isinstance(P, (tuple, list)) and len(P) == 3:
        indptr, indices, data = (np.asarray(a.cpu() if isinstance(a, torch.Tensor) else a) for a in P)
    else:
        raise InputError(f"{OP}: P must be a CSR, a scipy sparse matrix or an (indptr, indices, data) triple")
    if np.ndim(indptr) != 1 or len(indptr) < 1:
        raise InputError(f"{OP}: P: indptr must be 1-D of length N + 1, got shape {np.shape(indptr)}")
    n = len(indptr) - 1
    indptr, indices, data = validate_csr(indptr, indices, data, n, f"{OP}: P")
    return indptr, indices, data, n


def column_sums(indices: np.ndarray, data: np.ndarray, n: int) -> np.ndarray:
    """float64 [n]: the sum of each column of P (its out-mass)."""
    return np.bincount(indices, weights=data, minlength=n)


def check_stochastic(sums: np.ndarray) -> np.ndarray:
    """Every column of P must sum to 1 (within :data:`STOCHASTIC_TOL`) or to 0 (a dangling
    chunk); returns the dangling mask (bool [n])."""
    dangling = sums == 0
    bad = ~dangling & (np.abs(sums - 1.0) > STOCHASTIC_TOL)
    if bad.any():
        j = int(np.argmax(bad))
        raise InputError(f"{OP}: P must be column-stochastic (each column sums to 1, or 0 for a dangling "
                         f"chunk); column {j} sums to {sums[j]:.6g} ({int(bad.sum())} such columns)")
    return dangling


def prepare(P, priors, d: float, tol: float, max_iter: int, region=None) -> Prepared:
    """Validated inputs of both paths, checked once here so the Triton kernel never launches on
    bad input: P (see :func:`as_csr_arrays`, column-stochastic), ``d`` in (0, 1), ``tol > 0``
    finite, ``max_iter >= 1``, priors a finite non-negative float32/float64 tensor [B, N],
    region a bool tensor of the priors' shape or None. :class:`InputError` names the argument."""
    indptr, indices, data, n = as_csr_arrays(P)
    dangling = check_stochastic(column_sums(indices, data, n))
    if not _real_in(d, 0.0, 1.0):
        raise InputError(f"{OP}: damping d must lie in (0, 1), got {d!r}")
    if not _real_in(tol, 0.0, math.inf):
        raise InputError(f"{OP}: tol must be a finite number > 0, got {tol!r}")
    check_positive_int(max_iter, "max_iter", OP)
    p, r = check_priors(priors, n, region)
    if p.dtype not in (torch.float32, torch.float64):
        p = p.to(torch.float32)
    return Prepared(indptr, indices, data, n, p, r, dangling)


def _real_in(x: object, lo: float, hi: float) -> bool:
    """``x`` is a real number (not a bool) with ``lo < x < hi``."""
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool) and lo < float(x) < hi


def check_priors(priors, n: int, region=None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Priors as a floating tensor [B, n] (finite, non-negative) and region as bool or None."""
    p = as_tensor(priors, name=f"{OP}: priors")
    if p.ndim != 2 or p.shape[1] != n:
        raise InputError(f"{OP}: priors must be [B, N={n}], got shape {tuple(p.shape)}")
    if not p.dtype.is_floating_point:
        p = p.to(torch.float32)
    check_values(p, "priors", OP)
    r = None
    if region is not None:
        r = as_tensor(region, name=f"{OP}: region")
        if tuple(r.shape) != tuple(p.shape):
            raise InputError(f"{OP}: region must have the priors' shape {tuple(p.shape)}, got {tuple(r.shape)}")
        if r.dtype.is_floating_point or r.dtype.is_complex:
            raise InputError(f"{OP}: region must be a bool (or 0/1 integer) mask, got dtype {r.dtype}")
        r = r.to(torch.bool)
    return p, r


def column_l1(t: torch.Tensor) -> torch.Tensor:
    """float64 [B]: the sum of each column of ``t`` [N, B] (non-negative entries: the L1 norm).

    Partial sums over blocks of :data:`L1_BLOCK` rows in ``t``'s dtype, then float64 across
    the blocks: one pass at memory speed (``t.sum(0, dtype=torch.float64)`` casts element by
    element, ten times slower on the CPU) within ~1e-8 relative of the float64 sum, so a
    column's stop does not depend on the rest of its batch unless its change lies that close
    to ``tol``."""
    n, b = t.shape
    full = n - n % L1_BLOCK
    parts = [t[:full].view(full // L1_BLOCK, L1_BLOCK, b).sum(1)] if full else []
    if full < n:
        parts.append(t[full:].sum(0, keepdim=True))
    if not parts:
        return torch.zeros(b, dtype=torch.float64, device=t.device)
    return torch.cat(parts).sum(0, dtype=torch.float64)


def column_change(y: torch.Tensor, x: torch.Tensor, scratch: torch.Tensor) -> torch.Tensor:
    """float64 [B]: ``‖y[:, b] − x[:, b]‖₁`` for each column (the convergence test).

    On the CPU in chunks of :data:`CHANGE_ROWS` rows through ``scratch`` (at least
    [CHANGE_ROWS, B]) on one thread, so the difference and its absolute value stay in the
    cache and the blocks are read once: a third of the memory traffic of whole-block
    temporaries (measured: 7 ms instead of 10.5 per iteration at 10⁵ × 64; on two threads
    and a loaded machine 158 ms). On a GPU in one go (``scratch`` the size of the block).
    The sums are :func:`column_l1`'s."""
    n = y.shape[0]
    if y.device.type != "cpu":
        return column_l1(torch.sub(y, x, out=scratch[:n]).abs_())
    total = torch.zeros(y.shape[1], dtype=torch.float64)
    with torch_threads(1):  # ~1 MiB operations: with more threads a busy machine stalls each one on a barrier
        for s in range(0, n, CHANGE_ROWS):
            e = min(n, s + CHANGE_ROWS)
            total += column_l1(torch.sub(y[s:e], x[s:e], out=scratch[:e - s]).abs_())
    return total


def change_scratch(like: torch.Tensor) -> torch.Tensor:
    """The scratch block of :func:`column_change` for blocks shaped like ``like``."""
    rows = like.shape[0] if like.device.type != "cpu" else min(like.shape[0], CHANGE_ROWS)
    return torch.empty((rows, like.shape[1]), dtype=like.dtype, device=like.device)


def empty_block(shape: tuple, like: torch.Tensor) -> torch.Tensor:
    """The default :data:`Alloc`: ``torch.empty`` with ``like``'s dtype and device."""
    return torch.empty(shape, dtype=like.dtype, device=like.device)


def iterate_block(shape: tuple, like: torch.Tensor) -> torch.Tensor:
    """The CPU path's :data:`Alloc`: a block of ``HUGE_MIN_BYTES`` or more is a private anonymous
    mapping advised for transparent huge pages (``MADV_HUGEPAGE``; Linux), else ``torch.empty``.

    The product reads a whole row of the iterate (B values) per entry of P, at rows scattered
    over the block: with 4 KiB pages a 10⁷-element block spans more pages than the TLB holds,
    with 2 MiB pages a dozen. Where the OS does not give huge pages (another OS, THP
    disabled) the mapping is ordinary memory, as fast as ``torch.empty``."""
    nbytes = math.prod(shape) * like.element_size()
    flags = getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)
    if like.device.type != "cpu" or nbytes < HUGE_MIN_BYTES or not hasattr(mmap, "MADV_HUGEPAGE") or not flags:
        return empty_block(shape, like)
    try:
        region = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=flags)
        region.madvise(mmap.MADV_HUGEPAGE)
    except (OSError, ValueError):  # pragma: no cover - a kernel without madvise
        return empty_block(shape, like)
    raw = np.frombuffer(region, np.uint8)  # keeps the mapping alive as long as the tensor
    start = -raw.ctypes.data % HUGE_PAGE
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        flat = torch.from_numpy(raw[start:start + nbytes])
    return flat.view(like.dtype).view(shape)


def power_iterate(step: Step, x0: torch.Tensor, c: torch.Tensor, mask: torch.Tensor | None, tol: float,
                  max_iter: int, own_x0: bool = False, alloc: Alloc = empty_block
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Shared driver of both paths (SPEC §2 step 6: power iteration with per-query convergence).

    ``x0`` [N, B] is the start (the masked prior: same mass as π, so the error decays at
    the rate d·|λ₂(P)|, not d), ``c`` the teleport term (1 − d)·p, ``mask`` the region
    (in the form ``step`` takes) or None; each iteration calls ``step(x, y, c, mask)``,
    which writes the next iterate into the preallocated ``y``. A column stops when its L1
    change is ≤ ``tol`` (or at ``max_iter``): its iterate is saved then. Stopped columns are
    removed from the block once they are :data:`COMPACT_SHARE` of it (the copy of the block
    costs more than carrying a few columns to the end); buffers are reused, not reallocated
    per iteration (fresh 10⁷-element allocations cost more than the product here). When
    the block was never compacted it is the answer (stopped columns overwritten with their
    saved iterates; no copy when all stop together). ``own_x0``: ``x0`` is the caller's
    scratch, from ``alloc``, and may be overwritten (else it is copied first). ``alloc``
    gives the iterate blocks (x and y, which the product reads at random rows).
    Returns ``(π [N, B], iterations [B])``."""
    N, B = c.shape
    iters = torch.full((B,), max_iter, dtype=torch.int64)
    cols = torch.arange(B)  # original column of each column of the block
    live = torch.ones(B, dtype=torch.bool)  # block columns still iterating
    saved: list[tuple[torch.Tensor, torch.Tensor]] = []  # (original columns, their π) of stopped columns
    compacted = False
    x = x0 if own_x0 else alloc(tuple(x0.shape), x0).copy_(x0)
    y, tmp = alloc(tuple(c.shape), c), change_scratch(c)
    for it in range(1, max_iter + 1):
        step(x, y, c, mask)
        done = (column_change(y, x, tmp) <= tol).cpu()
        x, y = y, x
        stop = live if it == max_iter else done & live
        if not bool(stop.any()):
            continue
        iters[cols[stop]] = it
        live = live & ~stop
        if not bool(live.any()):
            break
        idx = torch.nonzero(stop).flatten()
        saved.append((cols[idx], x.index_select(1, idx.to(x.device))))
        if int((~live).sum()) >= COMPACT_SHARE * len(live):
            keep = torch.nonzero(live).flatten()
            cols, live, keep = cols[keep], live[keep], keep.to(x.device)
            x = torch.index_select(x, 1, keep, out=alloc((N, len(keep)), x))
            c = c.index_select(1, keep)
            y, tmp = alloc(tuple(x.shape), x), change_scratch(x)
            mask = mask.index_select(1, keep) if mask is not None else None
            compacted = True
    if compacted:
        out = torch.empty((N, B), dtype=x.dtype, device=x.device)
        final = torch.nonzero(stop).flatten()
        out.index_copy_(1, cols[final].to(x.device), x.index_select(1, final.to(x.device)))
    else:
        out = x  # original column order; the columns that stopped earlier are overwritten below
    for ids, values in saved:
        out.index_copy_(1, ids.to(out.device), values)
    return out, iters


def iteration_matrix(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, n: int, dangling: np.ndarray,
                     d: float, dtype: np.dtype, rows: np.ndarray | None = None) -> sp.csr_matrix:
    """``d·(P + D)`` as a scipy CSR in ``dtype`` (D: the self-loops of the dangling chunks), restricted
    to ``rows`` × ``rows`` when given (a localised walk: mass leaving them is dropped)."""
    A = sp.csr_matrix((np.asarray(data, dtype), indices, indptr), shape=(n, n))
    if dangling.any():
        A = A + sp.diags(dangling.astype(dtype), format="csr")
    A = A * dtype.type(d)
    if rows is not None:
        A = A[rows][:, rows]
    return sp.csr_matrix(A, dtype=dtype)


def torch_csr(A: sp.csr_matrix) -> torch.Tensor:
    """A torch sparse CSR tensor sharing ``A``'s arrays where their dtypes allow (int32 indices
    unless the sizes need int64: MKL's 32-bit interface is the faster one). The arrays were
    validated by :func:`prepare`, so torch's invariant checks are skipped."""
    idx = np.int64 if max(A.nnz, A.shape[0]) > np.iinfo(np.int32).max else np.int32
    with warnings.catch_warnings():  # torch: "sparse CSR tensor support is in beta state"
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(torch.from_numpy(np.asarray(A.indptr, idx)),
                                       torch.from_numpy(np.asarray(A.indices, idx)),
                                       torch.from_numpy(A.data), A.shape, check_invariants=False)


def batched_ppr(P, priors, d: float = 0.85, tol: float = 1e-6, max_iter: int = 100, region=None,
                threads: int | None = 1, device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """CPU path (torch sparse CSR × dense block per iteration); see the module docstring.

    ``threads``: torch intra-op threads for the whole iteration, product (MKL) included
    (None keeps torch's setting)."""
    with torch_threads(threads):
        return _batched_ppr_cpu(P, priors, d, tol, max_iter, region)


class CpuStep:
    """One iteration of the CPU path: ``y = mask ⊙ (c + A x)`` with ``A = d·(P + D)`` (SPEC §2 step 6).

    Sparse start: the iterate's non-zero rows only grow (x₁ ≥ c, which has the prior's
    support, and every later x ≥ 0), from the prior's to all those reachable from it, a
    factor of about the mean degree per iteration. While the columns of A under them hold
    at most :data:`SPARSE_SHARE` of its entries, ``y = c + A[:, S] x[S]`` (the same sum
    without its zero terms, at a fraction of the bytes; ``S`` = rows possibly non-zero,
    grown by the rows those columns reach); then the whole product, for good."""

    def __init__(self, A: sp.csr_matrix, x0: torch.Tensor):
        self.A, self.At = A, torch_csr(A)
        self.support: np.ndarray | None = None  # rows of the iterate that may be non-zero, while few
        self.counts: np.ndarray | None = None  # entries per column of A
        if A.nnz:
            rows = (x0 != 0).any(dim=1).numpy()
            if rows.sum() <= SPARSE_SHARE * len(rows):
                self.counts = np.bincount(A.indices, minlength=A.shape[1])
                self.support = rows

    def __call__(self, x: torch.Tensor, y: torch.Tensor, c: torch.Tensor, mask: torch.Tensor | None) -> None:
        if self.support is not None and self.counts is not None:
            cols = np.flatnonzero(self.support)
            if self.counts[cols].sum() <= SPARSE_SHARE * self.A.nnz:
                part = self.A[:, cols]
                torch.addmm(c, torch_csr(part), x.index_select(0, torch.from_numpy(cols)), out=y)
                self.support = self.support | (np.diff(part.indptr) > 0)
            else:
                self.support = None
        if self.support is None:
            torch.addmm(c, self.At, x, out=y)
        if mask is not None:
            y.mul_(mask)


def _batched_ppr_cpu(P, priors, d: float, tol: float, max_iter: int, region) -> tuple[torch.Tensor, torch.Tensor]:
    indptr, indices, data, n, p, r, dang = prepare(P, priors, d, tol, max_iter, region)
    B = p.shape[0]
    if B == 0:
        return torch.zeros((0, n), dtype=p.dtype), torch.zeros(0, dtype=torch.int64)
    np_dtype = np.dtype(np.float64 if p.dtype == torch.float64 else np.float32)
    rows = None
    pt = p.cpu().T  # [N, B] view
    mt = r.cpu().T.contiguous() if r is not None else None
    if mt is not None:
        union = mt.any(dim=1).numpy()
        if not union.all():
            rows = np.flatnonzero(union)
            pt, mt = pt[rows], mt[rows].contiguous()
        mt = mt.to(pt.dtype)  # y *= mask: a multiply by a float mask is 2.5x faster than by a bool one
    x0 = iterate_block(tuple(pt.shape), pt).copy_(pt)  # the start, in the iterate's memory
    if mt is not None:
        x0.mul_(mt)
    step = CpuStep(iteration_matrix(indptr, indices, data, n, dang, d, np_dtype, rows), x0)
    out, iters = power_iterate(step, x0, (1.0 - d) * x0, mt, tol, max_iter, own_x0=True, alloc=iterate_block)
    if rows is not None:
        full = torch.zeros((n, B), dtype=out.dtype)
        full[torch.from_numpy(rows)] = out
        out = full
    return out.T.contiguous(), iters


register("batched_ppr", batched_ppr, triton="hopgraph.kernels.batched_ppr_triton:batched_ppr_triton",
         tensors=("priors", "region"))

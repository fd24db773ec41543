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
  blocks on transparent huge pages (:func:`iterate_block`), the columns in groups of 8 whose
  blocks stay in the cache (:func:`column_groups`; with several threads, groups walked side
  by side, :func:`run_groups`), and, while the iterate is still sparse (sparse priors), only
  the columns of P under its non-zero rows (:class:`CpuStep`);
* **per-column convergence**: a column stops when ``‖x_{k+1} − x_k‖₁`` is at most its
  tolerance ``max(tol, ε·‖p‖₁)``, or once that change has stopped decreasing (float rounding;
  :mod:`.ppr_stop`), and its iterate is saved then (``tol=None``: every column runs ``max_iter``
  iterations); stopped columns leave the block once they are a quarter of it, so finished
  queries cost (almost) nothing more;
* **localised** (``region`` ``[B, N]`` bool): query b's walk is restricted to its
  region — mass stepping outside it is dropped (absorbing boundary), so π_b is 0
  outside. The CPU path then iterates on the sub-matrix of the union U of the regions
  only: as one block [U, B], each column masked to its region after every product, or,
  when the regions are small and mostly disjoint (Σ_b |R_b| ≤ :data:`SEGMENT_SHARE` ·
  U·B), **segmented**: one block-diagonal walk whose block b is the iteration matrix on
  R_b alone, one iterate vector of Σ_b |R_b| entries (:func:`segmented_ppr`), same
  per-query stop and compaction.

**Batch independence.** A column's π is the power iteration on its own prior (and region) with
its own stop rule, whatever else is in the batch. In floating point the products differ in their
last bits with the path taken (segmented or block, which the batch's regions decide) and with the
block's width (MKL takes other kernels for other widths, and which ones differs between CPUs): a
column's π equals its π alone within rounding, and its iteration count is the same except where
its change lies within rounding of its tolerance (then one apart). Within the segmented strategy
(scipy's row sums, per-segment stop tests) a query's result is the same bit for bit in any batch.

Returns ``(pi [B, N], iterations [B])`` as torch tensors (dtype of the priors,
float32 or float64).

Complexity per iteration: O(nnz(P) · B) work, O(N · B) memory for the iterate blocks (the
segmented strategy: O(Σ_b |R_b|) and the entries of the regions' sub-matrices). Measurements and
rejected alternatives: ``docs/decisions/kernels-batched-ppr-*.md``.
"""
from __future__ import annotations

import math
import mmap
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, NamedTuple

import numpy as np
import scipy.sparse as sp
import torch

from .checks import Array, check_positive_int, check_values, first_where
from .csr import CSR, index_dtype, validate_csr
from .errors import InputError
from .ppr_segmented import segmented_ppr
from .ppr_stop import StopRule, column_tolerances
from .dispatch import register
from .tensors import as_numpy, as_tensor
from .threads import torch_threads

Step = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, "torch.Tensor | None"], None]
#: ``alloc(shape, like)``: an uninitialised tensor of ``like``'s dtype and device
Alloc = Callable[[tuple, torch.Tensor], torch.Tensor]


OP = "batched_ppr"
#: a non-dangling column of P may sum to 1 within this (float32 rounding over a long column)
STOCHASTIC_TOL = 1e-3
#: rows per partial sum of the convergence test (see :func:`column_l1`)
L1_BLOCK = 1024
#: bytes per chunk of the CPU convergence test (see :func:`column_change`): 4,096 rows at 64 float32 columns
CHANGE_BYTES = 1 << 20
#: while the columns of P under the iterate's non-zero rows hold at most this share of P's
#: entries, the product uses those columns only (see :class:`CpuStep`)
SPARSE_SHARE = 0.25
#: stopped columns stay in the block (iterated on, their result saved) until they are this share of it
COMPACT_SHARE = 0.25
#: a localised walk takes the segmented strategy (one block per query, see :func:`segmented_ppr`) when
#: its region entries Σ_b |R_b| are at most this share of the union block U·B
SEGMENT_SHARE = 1 / 8
#: columns of one group of the CPU block path (see :func:`column_groups`): 8 float32 values are one
#: 32-byte row of the group's iterate block
GROUP_COLUMNS = 8
#: the CPU block path iterates column groups when a group's iterate block is at most this size and the
#: whole block is larger (see :func:`column_groups`)
GROUP_CACHE_BYTES = 16 << 20
#: the transparent huge page size (x86-64, aarch64 with 4 KiB base pages)
HUGE_PAGE = 2 << 20
#: iterate blocks from this size on are allocated on huge pages (see :func:`iterate_block`)
HUGE_MIN_BYTES = 4 << 20


class Prepared(NamedTuple):
    """The validated inputs of both paths (see :func:`prepare`): P's arrays and its dangling mask
    where P was given (NumPy, or tensors on a device)."""

    indptr: Array
    indices: Array
    data: Array
    n: int
    priors: torch.Tensor
    region: torch.Tensor | None
    dangling: Array
    tols: torch.Tensor


def as_csr_arrays(P, device: torch.device | None = None) -> tuple[Array, Array, Array, int]:
    """(indptr, indices, data, n) of a square CSR given as the kernels' :class:`~.csr.CSR`, a scipy
    matrix or an ``(indptr, indices, data)`` triple; validated (offsets start at 0, never
    decrease and end at nnz; column ids in ``[0, n)``; weights finite and non-negative). A triple
    of torch tensors on one device stays there (checked there); anything else is NumPy, or, with
    ``device``, copied to that device once and checked there (the Triton path: no pass over the
    arrays on the host)."""
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
        on_device = all(isinstance(a, torch.Tensor) for a in P) and len({a.device for a in P}) == 1
        indptr, indices, data = P if on_device else (as_numpy(a) for a in P)
    else:
        raise InputError(f"{OP}: P must be a CSR, a scipy sparse matrix or an (indptr, indices, data) triple")
    if indptr.ndim != 1 or len(indptr) < 1:
        raise InputError(f"{OP}: P: indptr must be 1-D of length N + 1, got shape {tuple(indptr.shape)}")
    n = len(indptr) - 1
    if device is not None and not isinstance(indptr, torch.Tensor):
        indptr, indices, data = (as_tensor(a, device=device, name=f"{OP}: P {what}")
                                 for a, what in ((indptr, "indptr"), (indices, "indices"), (data, "data")))
    indptr, indices, data = validate_csr(indptr, indices, data, n, f"{OP}: P")
    return indptr, indices, data, n


def column_sums(indices: Array, data: Array, n: int) -> Array:
    """float64 [n]: the sum of each column of P (its out-mass), where the arrays are."""
    if isinstance(indices, torch.Tensor):
        return torch.bincount(indices, weights=data.to(torch.float64), minlength=n)
    return np.bincount(indices, weights=data, minlength=n)


def check_stochastic(sums: Array) -> Array:
    """Every column of P must sum to 1 (within :data:`STOCHASTIC_TOL`) or to 0 (a dangling
    chunk); returns the dangling mask (bool [n], where ``sums`` is)."""
    dangling = sums == 0
    bad = ~dangling & (abs(sums - 1.0) > STOCHASTIC_TOL)
    if bool(bad.any()):
        j = first_where(bad)[0]
        raise InputError(f"{OP}: P must be column-stochastic (each column sums to 1, or 0 for a dangling "
                         f"chunk); column {j} sums to {sums[j]:.6g} ({int(bad.sum())} such columns)")
    return dangling


def prepare(P, priors, d: float, tol: float | None, max_iter: int, region=None,
            device: torch.device | None = None) -> Prepared:
    """Validated inputs of both paths, checked once here so the Triton kernel never launches on
    bad input: P (see :func:`as_csr_arrays`, column-stochastic), ``d`` in (0, 1), ``tol > 0`` (or None)
    finite, ``max_iter >= 1``, priors a finite non-negative float32/float64 tensor [B, N],
    region a bool tensor of the priors' shape or None. :class:`InputError` names the argument.
    ``tols``: each column's tolerance (:func:`.ppr_stop.column_tolerances`: float64 on the priors'
    device; a ``tol`` below the priors' float resolution warns). ``device``: where P's arrays are
    checked and returned when they are not tensors already (see :func:`as_csr_arrays`)."""
    indptr, indices, data, n = as_csr_arrays(P, device)
    dangling = check_stochastic(column_sums(indices, data, n))
    if not _real_in(d, 0.0, 1.0):
        raise InputError(f"{OP}: damping d must lie in (0, 1), got {d!r}")
    if tol is not None and not _real_in(tol, 0.0, math.inf):
        raise InputError(f"{OP}: tol must be a finite number > 0 (or None: max_iter iterations), got {tol!r}")
    check_positive_int(max_iter, "max_iter", OP)
    p, r = check_priors(priors, n, region)
    if p.dtype not in (torch.float32, torch.float64):
        p = p.to(torch.float32)
    return Prepared(indptr, indices, data, n, p, r, dangling,
                    column_tolerances(p, None if tol is None else float(tol), OP))


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
    the blocks: one pass (no element-wise cast to float64), within ~1e-8 relative of the float64
    sum, so a column's stop does not depend on the rest of its batch unless its change lies that
    close to ``tol``."""
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

    On the CPU in chunks of :func:`change_rows` rows (:data:`CHANGE_BYTES`) through ``scratch``
    (from :func:`change_scratch`) on one thread, so the difference and its absolute value stay in the
    cache and the blocks are read once. On a GPU in one go (``scratch`` the size of the block).
    The sums are :func:`column_l1`'s."""
    n = y.shape[0]
    if y.device.type != "cpu":
        return column_l1(torch.sub(y, x, out=scratch[:n]).abs_())
    total = torch.zeros(y.shape[1], dtype=torch.float64)
    with torch_threads(1):  # ~1 MiB operations: one thread (docs/decisions/kernels-batched-ppr-cpu-product.md)
        step = max(1, scratch.shape[0])
        for s in range(0, n, step):
            e = min(n, s + step)
            total += column_l1(torch.sub(y[s:e], x[s:e], out=scratch[:e - s]).abs_())
    return total


def change_rows(like: torch.Tensor) -> int:
    """Rows per chunk of the CPU convergence test for blocks shaped like ``like``: :data:`CHANGE_BYTES`
    of them, a multiple of :data:`L1_BLOCK` (a narrow column group's block in a few chunks)."""
    row_bytes = max(1, like.shape[1]) * like.element_size()
    return max(1, CHANGE_BYTES // (row_bytes * L1_BLOCK)) * L1_BLOCK


def change_scratch(like: torch.Tensor) -> torch.Tensor:
    """The scratch block of :func:`column_change` for blocks shaped like ``like``."""
    rows = like.shape[0] if like.device.type != "cpu" else min(like.shape[0], change_rows(like))
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


def power_iterate(step: Step, x0: torch.Tensor, c: torch.Tensor, mask: torch.Tensor | None, tols: torch.Tensor,
                  max_iter: int, own_x0: bool = False, alloc: Alloc = empty_block
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Shared driver of both paths (SPEC §2 step 6: power iteration with per-query convergence).

    ``x0`` [N, B] is the start (the masked prior: same mass as π, so the error decays at
    the rate d·|λ₂(P)|, not d), ``c`` the teleport term (1 − d)·p, ``mask`` the region
    (in the form ``step`` takes) or None; each iteration calls ``step(x, y, c, mask)``,
    which writes the next iterate into the preallocated ``y``. A column stops by
    :class:`.ppr_stop.StopRule` (``tols`` [B]: the columns' tolerances) or at ``max_iter``:
    its iterate is saved then. Stopped columns are
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
    rule = StopRule(tols.cpu())
    for it in range(1, max_iter + 1):
        step(x, y, c, mask)
        done = rule.done(column_change(y, x, tmp).cpu())
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
            rule.keep(keep)
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
    to ``rows`` × ``rows`` when given (a localised walk: mass leaving them is dropped), its indices
    sorted within each row."""
    A = sp.csr_matrix((np.asarray(data, dtype), indices, indptr), shape=(n, n))
    if dangling.any():
        A = A + sp.diags(dangling.astype(dtype), format="csr")
    A = A * dtype.type(d)
    if rows is not None:
        A = A[rows][:, rows]
    A = sp.csr_matrix(A, dtype=dtype)
    A.sort_indices()  # each row's entries by column: the sparse start's slices keep their order (ColumnSlices)
    return A


def torch_csr(A: sp.csr_matrix) -> torch.Tensor:
    """A torch sparse CSR tensor sharing ``A``'s arrays where their dtypes allow (int32 indices
    unless the sizes need int64: MKL's 32-bit interface is the faster one). The arrays were
    validated by :func:`prepare`, so torch's invariant checks are skipped."""
    idx = index_dtype(A.nnz, A.shape[0])
    with warnings.catch_warnings():  # torch: "sparse CSR tensor support is in beta state"
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(torch.from_numpy(np.asarray(A.indptr, idx)),
                                       torch.from_numpy(np.asarray(A.indices, idx)),
                                       torch.from_numpy(A.data), A.shape, check_invariants=False)


def check_threads(threads: object) -> int | None:
    """``threads`` as given: None or an integer >= 1 (:class:`InputError` otherwise)."""
    if threads is not None:
        check_positive_int(threads, "threads", OP)
    return threads


def batched_ppr(P, priors, d: float = 0.85, tol: float | None = 1e-6, max_iter: int = 100, region=None,
                threads: int | None = 1, device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """CPU path (torch sparse CSR × dense block per iteration); see the module docstring.

    ``threads``: torch intra-op threads for the whole iteration, product (MKL) included
    (None keeps torch's setting; else an integer >= 1)."""
    with torch_threads(check_threads(threads)):
        return _batched_ppr_cpu(P, priors, d, tol, max_iter, region)


class ColumnSlices:
    """The iteration matrix A of the CPU block path, shared by its column groups: A as a torch CSR,
    its entries per column, and ``A[:, cols]`` for :class:`CpuStep`'s sparse start, sliced from A's
    CSC (built once, on first use) at the cost of the slice's entries (scipy's CSR column indexing
    scans all of A). A's rows must have sorted column indices (see
    :func:`iteration_matrix`): the slice then holds each row's entries in A's order, so the sparse
    product sums them as the whole one does."""

    def __init__(self, A: sp.csr_matrix):
        self.A, self.At = A, torch_csr(A)
        self._lock = threading.Lock()
        self._csc: sp.csc_matrix | None = None
        self._counts: np.ndarray | None = None

    def counts(self) -> np.ndarray:
        """Entries per column of A."""
        with self._lock:
            if self._counts is None:
                self._counts = np.bincount(self.A.indices, minlength=self.A.shape[1])
            return self._counts

    def columns(self, cols: np.ndarray) -> sp.csr_matrix:
        """``A[:, cols]`` (``cols`` ascending) as a CSR."""
        with self._lock:
            if self._csc is None:
                self._csc = self.A.tocsc()
        return sp.csr_matrix(self._csc[:, cols])


class CpuStep:
    """One iteration of the CPU path: ``y = mask ⊙ (c + A x)`` with ``A = d·(P + D)`` (SPEC §2 step 6).

    Sparse start: the iterate's non-zero rows only grow (x₁ ≥ c, which has the prior's
    support, and every later x ≥ 0), from the prior's to all those reachable from it, a
    factor of about the mean degree per iteration. While the columns of A under them hold
    at most :data:`SPARSE_SHARE` of its entries, ``y = c + A[:, S] x[S]`` (the same sum
    without its zero terms, at a fraction of the bytes; ``S`` = rows possibly non-zero,
    grown by the rows those columns reach; the same row sums as the whole product's, up to how
    MKL rounds each); then the whole product, for good. ``A``: the
    matrix (a scipy CSR with sorted indices) or the :class:`ColumnSlices` shared by a call's groups."""

    def __init__(self, A: "sp.csr_matrix | ColumnSlices", x0: torch.Tensor):
        self.M = A if isinstance(A, ColumnSlices) else ColumnSlices(A)
        self.support: np.ndarray | None = None  # rows of the iterate that may be non-zero, while few
        if self.M.A.nnz:
            rows = (x0 != 0).any(dim=1).numpy()
            if rows.sum() <= SPARSE_SHARE * len(rows):
                self.support = rows

    def __call__(self, x: torch.Tensor, y: torch.Tensor, c: torch.Tensor, mask: torch.Tensor | None) -> None:
        if self.support is not None:
            cols = np.flatnonzero(self.support)
            if self.M.counts()[cols].sum() <= SPARSE_SHARE * self.M.A.nnz:
                part = self.M.columns(cols)
                sparse_addmm(c, torch_csr(part), x.index_select(0, torch.from_numpy(cols)), y)
                self.support = self.support | (np.diff(part.indptr) > 0)
            else:
                self.support = None
        if self.support is None:
            sparse_addmm(c, self.M.At, x, y)
        if mask is not None:
            y.mul_(mask)


def sparse_addmm(c: torch.Tensor, A: torch.Tensor, x: torch.Tensor, out: torch.Tensor) -> None:
    """``out = c + A x`` for a torch sparse CSR ``A`` and dense blocks (torch's MKL product). MKL
    rounds a column's sums differently with the block's width, and differently on different CPUs
    (see the module docstring: results agree within rounding, not bit for bit)."""
    torch.addmm(c, A, x, out=out)


def column_groups(rows: int, B: int, itemsize: int) -> list[slice]:
    """The column groups the CPU block path iterates one after the other (SPEC §2 step 6): groups of
    :data:`GROUP_COLUMNS` when the whole iterate block ``[rows, B]`` exceeds :data:`GROUP_CACHE_BYTES`
    and a group's block fits in it, else the whole block. The product gathers a row of the iterate
    per entry of P at random rows: a group's block stays in the cache across the product, the whole
    block does not. Each column's iteration is the same either way, up to how the product rounds
    at each width (see :func:`sparse_addmm`)."""
    group_bytes = rows * GROUP_COLUMNS * itemsize
    if B <= GROUP_COLUMNS or rows * B * itemsize <= GROUP_CACHE_BYTES or group_bytes > GROUP_CACHE_BYTES:
        return [slice(0, B)]
    return [slice(s, min(B, s + GROUP_COLUMNS)) for s in range(0, B, GROUP_COLUMNS)]


def segments_fit(entries: int, union: int, B: int) -> bool:
    """The localised walk takes the segmented strategy (:func:`segmented_ppr`) when its region
    entries Σ_b |R_b| are at most :data:`SEGMENT_SHARE` of the union block's ``U·B`` (SPEC §2 step 6)."""
    return entries <= SEGMENT_SHARE * union * B


def union_rows(region: np.ndarray) -> np.ndarray | None:
    """The chunks in some query's region (``region`` bool [B, N]), or None when that is all of them."""
    union = region.any(axis=0)
    return None if union.all() else np.flatnonzero(union)


def _batched_ppr_cpu(P, priors, d: float, tol: float | None, max_iter: int, region
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    indptr, indices, data, n, p, r, dang, tols = prepare(P, priors, d, tol, max_iter, region)
    indptr, indices, data, dang = (as_numpy(a) for a in (indptr, indices, data, dang))
    B = p.shape[0]
    if B == 0:
        return torch.zeros((0, n), dtype=p.dtype), torch.zeros(0, dtype=torch.int64)
    np_dtype = np.dtype(np.float64 if p.dtype == torch.float64 else np.float32)
    rows = None
    pt = p.cpu().T  # [N, B] view
    mt = None
    if r is not None:
        rn = r.cpu().numpy()
        rows = union_rows(rn)
        if segments_fit(np.count_nonzero(rn), n if rows is None else len(rows), B):
            A = iteration_matrix(indptr, indices, data, n, dang, d, np_dtype, rows)
            return segmented_ppr(A, p.cpu(), rn, rows, d, tols, max_iter)
        mt = r.cpu().T
        if rows is not None:
            pt, mt = pt[rows], mt[rows]
        mt = mt.to(pt.dtype).contiguous()  # y *= mask with a float mask (docs/decisions/kernels-batched-ppr-cpu-product.md)
    M = ColumnSlices(iteration_matrix(indptr, indices, data, n, dang, d, np_dtype, rows))
    pi = torch.zeros((B, n), dtype=pt.dtype) if rows is not None else torch.empty((B, n), dtype=pt.dtype)
    iters = torch.empty(B, dtype=torch.int64)

    def walk(g: slice) -> None:
        x0 = iterate_block((pt.shape[0], g.stop - g.start), pt).copy_(pt[:, g])  # the start, in the iterate's memory
        mg = mt[:, g].contiguous() if mt is not None else None
        if mg is not None:
            x0.mul_(mg)
        out, iters[g] = power_iterate(CpuStep(M, x0), x0, (1.0 - d) * x0, mg, tols[g], max_iter, own_x0=True,
                                      alloc=iterate_block)
        if rows is not None:
            pi[g, torch.from_numpy(rows)] = out.T
        else:
            pi[g] = out.T

    run_groups(walk, column_groups(pt.shape[0], B, pt.element_size()))
    return pi, iters


def run_groups(walk: Callable[[slice], None], groups: list[slice]) -> None:
    """``walk`` each column group (see :func:`column_groups`). Several groups and several torch
    threads: the threads walk whole groups side by side, each product on one thread (a group's
    block stays in its core's share of the cache); else
    one group after the other, each product on torch's threads."""
    workers = min(torch.get_num_threads(), len(groups))
    if workers <= 1:
        for g in groups:
            walk(g)
        return
    with torch_threads(1), ThreadPoolExecutor(workers) as pool:
        for done in [pool.submit(walk, g) for g in groups]:
            done.result()


register("batched_ppr", batched_ppr, triton="hopgraph.kernels.batched_ppr_triton:batched_ppr_triton",
         tensors=("priors", "region"))

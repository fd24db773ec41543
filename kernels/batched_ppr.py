"""Batched personalised PageRank: many priors at once (SPEC §2 step 6).

``batched_ppr(P, priors[B, N], d, tol, max_iter, region=None)`` returns, for every
prior p (a row of ``priors``), ``π = (1 − d) Σ_l d^l P^l p`` computed by the power
iteration ``x ← (1 − d) p + d (P x + D x)`` started from ``x = p``:

* ``P`` is column-stochastic (``P[i, j]`` = probability of the step j → i), given as
  a scipy CSR matrix or a ``(indptr, indices, data)`` triple with rows = targets;
  its all-zero columns are **dangling** chunks and keep their mass (``D`` = diagonal
  self-loop on them), so π sums to Σp;
* the priors are processed as one dense block ``X[N, B]``: each iteration is ONE
  CSR × dense-block product (scipy on the CPU, chosen over torch's sparse CSR
  product, or the Triton kernel of ``batched_ppr_triton``);
* **per-column convergence**: a column stops when ``‖x_{k+1} − x_k‖₁ ≤ tol``; the
  remaining columns are compacted so finished queries cost nothing more;
* **localised** (``region`` ``[B, N]`` bool): query b's walk is restricted to its
  region — mass stepping outside it is dropped (absorbing boundary), so π_b is 0
  outside. The CPU path then iterates on the sub-matrix of the union of the
  regions only.

Returns ``(pi [B, N], iterations [B])`` as torch tensors (dtype of the priors,
float32 or float64).
"""
from __future__ import annotations

import math
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


OP = "batched_ppr"
#: a non-dangling column of P may sum to 1 within this (float32 rounding over a long column)
STOCHASTIC_TOL = 1e-3


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


def power_iterate(step: Step, x0: torch.Tensor, c: torch.Tensor, mask: torch.Tensor | None, tol: float,
                  max_iter: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Shared driver of both paths. ``x0`` [N, B] is the start (the masked prior: same
    mass as π, so the error decays at the rate d·|λ₂(P)|, not d), ``c`` the teleport
    term (1 − d)·p; each
    iteration calls ``step(x, y, c, mask)``, which writes the next iterate into the
    preallocated ``y``. A column stops when its L1 change is ≤ ``tol`` (or at
    ``max_iter``) and is removed from the block (buffers are reused, not reallocated
    per iteration: fresh 10⁷-element allocations cost more than the product here)."""
    N, B = c.shape
    out = torch.zeros_like(c)
    iters = torch.full((B,), max_iter, dtype=torch.int64)
    active = torch.arange(B)
    x = x0.clone()
    y, tmp = torch.empty_like(c), torch.empty_like(c)
    for it in range(1, max_iter + 1):
        if len(active) == 0:
            break
        step(x, y, c, mask)
        torch.sub(y, x, out=tmp)
        done = tmp.abs_().sum(0, dtype=torch.float64) <= tol  # float64: the stop does not depend on the batch
        x, y = y, x
        if bool(done.any()) or it == max_iter:
            if it == max_iter:
                done = torch.ones_like(done)
            idx = active[done.cpu()]
            out[:, idx.to(out.device)] = x[:, done]
            iters[idx] = it
            keep = ~done
            active = active[keep.cpu()]
            x, c = x[:, keep].contiguous(), c[:, keep].contiguous()
            y, tmp = torch.empty_like(x), torch.empty_like(x)
            mask = mask[:, keep].contiguous() if mask is not None else None
    return out, iters


def spmm_accumulate(A: sp.csr_matrix) -> Callable[[np.ndarray, np.ndarray], None]:
    """``f(x, y)``: y += A @ x for C-contiguous dense blocks, without allocating
    (scipy's compiled ``csr_matvecs``; falls back to ``A @ x`` if it is unavailable)."""
    try:
        from scipy.sparse import _sparsetools

        kernel = _sparsetools.csr_matvecs
    except (ImportError, AttributeError):  # pragma: no cover - other scipy layouts
        kernel = None
    n_row, n_col = A.shape

    def f(x: np.ndarray, y: np.ndarray) -> None:
        if kernel is None:  # pragma: no cover
            y += A @ x
        else:
            kernel(n_row, n_col, x.shape[1], A.indptr, A.indices, A.data, x.ravel(), y.ravel())
    return f


def batched_ppr(P, priors, d: float = 0.85, tol: float = 1e-6, max_iter: int = 100, region=None,
                threads: int | None = 1, device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """CPU path (scipy CSR × dense block per iteration); see the module docstring.

    ``threads``: torch intra-op threads for the element-wise updates (the scipy
    product is single-threaded; None keeps torch's setting)."""
    with torch_threads(threads):
        return _batched_ppr_cpu(P, priors, d, tol, max_iter, region)


def _batched_ppr_cpu(P, priors, d: float, tol: float, max_iter: int, region) -> tuple[torch.Tensor, torch.Tensor]:
    indptr, indices, data, n, p, r, dang = prepare(P, priors, d, tol, max_iter, region)
    B = p.shape[0]
    if B == 0:
        return torch.zeros((0, n), dtype=p.dtype), torch.zeros(0, dtype=torch.int64)
    np_dtype = np.float64 if p.dtype == torch.float64 else np.float32
    idx = np.int64 if max(indptr[-1], n) > np.iinfo(np.int32).max else np.int32
    A = sp.csr_matrix((np.asarray(data, np_dtype) * np_dtype(d), np.asarray(indices, idx), np.asarray(indptr, idx)),
                      shape=(n, n))
    rows = None
    pt = p.cpu().T.contiguous()  # [N, B]
    mt = r.cpu().T.contiguous() if r is not None else None
    if mt is not None:
        union = mt.any(dim=1).numpy()
        if not union.all():
            rows = np.flatnonzero(union)
            A = A[rows][:, rows]
            dang, pt, mt = dang[rows], pt[rows].contiguous(), mt[rows].contiguous()
    dang_rows = torch.from_numpy(np.flatnonzero(dang))
    accumulate = spmm_accumulate(A)

    def step(x: torch.Tensor, y: torch.Tensor, c: torch.Tensor, mc: torch.Tensor | None) -> None:
        y.copy_(c)
        accumulate(x.numpy(), y.numpy())
        if len(dang_rows):
            y[dang_rows] += d * x[dang_rows]
        if mc is not None:
            y.mul_(mc)

    x0 = pt * mt if mt is not None else pt
    out, iters = power_iterate(step, x0, (1.0 - d) * x0, mt, tol, max_iter)
    if rows is not None:
        full = torch.zeros((n, B), dtype=out.dtype)
        full[torch.from_numpy(rows)] = out
        out = full
    return out.T.contiguous(), iters


register("batched_ppr", batched_ppr, triton="hopgraph.kernels.batched_ppr_triton:batched_ppr_triton",
         tensors=("priors", "region"))

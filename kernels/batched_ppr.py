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

from typing import Callable

import numpy as np
import scipy.sparse as sp
import torch

from .csr import CSR
from .errors import InputError
from .dispatch import register
from .tensors import as_tensor
from .threads import torch_threads

Step = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, "torch.Tensor | None"], None]


def as_csr_arrays(P) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(indptr, indices, data, n) of a square CSR given as the kernels' :class:`~.csr.CSR`, a scipy
    matrix or an ``(indptr, indices, data)`` triple."""
    if isinstance(P, CSR):
        if P.n_rows != P.n_cols:
            raise InputError(f"P must be square, got shape ({P.n_rows}, {P.n_cols})")
        return P.indptr, P.indices, P.data, P.n_rows
    if sp.issparse(P):
        P = sp.csr_matrix(P)
        if P.shape[0] != P.shape[1]:
            raise InputError(f"P must be square, got shape {P.shape}")
        return P.indptr, P.indices, P.data, P.shape[0]
    if not (isinstance(P, (tuple, list)) and len(P) == 3):
        raise InputError("P must be a scipy sparse matrix or an (indptr, indices, data) triple")
    indptr, indices, data = (np.asarray(a.cpu() if isinstance(a, torch.Tensor) else a) for a in P)
    n = len(indptr) - 1
    if n < 0 or len(indices) != len(data) or (len(indptr) and indptr[-1] != len(indices)):
        raise InputError("P: inconsistent CSR arrays (indptr[-1] must equal len(indices) == len(data))")
    if len(indices) and (indices.min() < 0 or indices.max() >= n):
        raise InputError(f"P: column indices must lie in [0, {n})")
    return indptr, indices, data, n


def dangling_columns(indices: np.ndarray, data: np.ndarray, n: int) -> np.ndarray:
    """Bool [n]: columns of P whose entries sum to 0 (chunks with no out-link)."""
    out = np.bincount(indices, weights=np.abs(data), minlength=n)
    return out == 0


def prepare(P, priors, d: float, region=None):
    """Validated inputs of both paths: ``(indptr, indices, data, n, priors, region)`` with
    priors as a float32/float64 tensor [B, N] and region as a bool tensor or None."""
    indptr, indices, data, n = as_csr_arrays(P)
    if not 0.0 < d < 1.0:
        raise InputError(f"damping d must lie in (0, 1), got {d}")
    p, r = check_priors(priors, n, region)
    if p.dtype not in (torch.float32, torch.float64):
        p = p.to(torch.float32)
    return indptr, indices, data, n, p, r


def check_priors(priors, n: int, region=None) -> tuple[torch.Tensor, torch.Tensor | None]:
    p = as_tensor(priors, name="priors")
    if p.ndim != 2 or p.shape[1] != n:
        raise InputError(f"priors must be [B, N={n}], got shape {tuple(p.shape)}")
    if not p.dtype.is_floating_point:
        p = p.to(torch.float32)
    if p.numel() and (not torch.isfinite(p).all() or (p < 0).any()):
        raise InputError("priors must be finite and non-negative")
    r = None
    if region is not None:
        r = as_tensor(region, name="region")
        if tuple(r.shape) != tuple(p.shape):
            raise InputError(f"region must have the priors' shape {tuple(p.shape)}, got {tuple(r.shape)}")
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
    if tol <= 0 or max_iter < 1:
        raise InputError(f"need tol > 0 and max_iter >= 1, got tol={tol}, max_iter={max_iter}")
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
        done = tmp.abs_().sum(0) <= tol
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
    indptr, indices, data, n, p, r = prepare(P, priors, d, region)
    B = p.shape[0]
    if B == 0:
        return torch.zeros((0, n), dtype=p.dtype), torch.zeros(0, dtype=torch.int64)
    np_dtype = np.float64 if p.dtype == torch.float64 else np.float32
    idx = np.int64 if max(indptr[-1], n) > np.iinfo(np.int32).max else np.int32
    A = sp.csr_matrix((np.asarray(data, np_dtype) * np_dtype(d), np.asarray(indices, idx), np.asarray(indptr, idx)),
                      shape=(n, n))
    dang = dangling_columns(indices, data, n)
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

"""Triton path of ``batched_ppr`` (SPEC §2 step 6; semantics in batched_ppr.py).

One fused kernel per power iteration: program (row i, block of queries) gathers the
CSR row of P against the dense block X[:, queries] and writes
``y[i] = mask · (c[i] + Σ_j dP[i, j] x[j] + d·dangling[i] · x[i])`` with c = (1 − d) p; the
damping is folded into the edge and dangling weights on the host in the priors' dtype
(as the CPU path does), so float64 priors never meet a float32 scalar ``d``.
The host driver (per-column convergence and compaction) is shared with the CPU path.
"""
from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from .batched_ppr import power_iterate, prepare

BLOCK_NNZ = 32
BLOCK_B = 16


@triton.jit
def _ppr_step_kernel(indptr_ptr, indices_ptr, data_ptr, x_ptr, c_ptr, mask_ptr, dang_ptr, y_ptr, B,
                     HAS_MASK: tl.constexpr, BLOCK_NNZ: tl.constexpr, BLOCK_B: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs_b = (tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)).to(tl.int64)
    b_ok = offs_b < B
    lo = tl.load(indptr_ptr + row)
    hi = tl.load(indptr_ptr + row + 1)
    acc = tl.zeros((BLOCK_B,), dtype=x_ptr.dtype.element_ty)
    for start in range(lo, hi, BLOCK_NNZ):
        offs = start + tl.arange(0, BLOCK_NNZ)
        ok = offs < hi
        cols = tl.load(indices_ptr + offs, mask=ok, other=0).to(tl.int64)
        vals = tl.load(data_ptr + offs, mask=ok, other=0.0).to(acc.dtype)
        xb = tl.load(x_ptr + cols[:, None] * B + offs_b[None, :], mask=ok[:, None] & b_ok[None, :], other=0.0)
        acc += tl.sum(vals[:, None] * xb, axis=0)
    xr = tl.load(x_ptr + row * B + offs_b, mask=b_ok, other=0.0)
    cr = tl.load(c_ptr + row * B + offs_b, mask=b_ok, other=0.0)
    dg = tl.load(dang_ptr + row).to(acc.dtype)
    y = cr + acc + dg * xr
    if HAS_MASK:
        m = tl.load(mask_ptr + row * B + offs_b, mask=b_ok, other=0)
        y = tl.where(m != 0, y, 0.0)
    tl.store(y_ptr + row * B + offs_b, y, mask=b_ok)


def batched_ppr_triton(P, priors, d: float = 0.85, tol: float = 1e-6, max_iter: int = 100, region=None,
                       threads: int | None = None, device: str = "cuda") -> tuple[torch.Tensor, torch.Tensor]:
    """Triton path; tensors live on ``device`` (CPU tensors under TRITON_INTERPRET=1);
    ``threads`` is accepted for signature parity with the CPU path and unused."""
    indptr, indices, data, n, p, r, dangling = prepare(P, priors, d, tol, max_iter, region)
    B = p.shape[0]
    dev = torch.device("cuda" if device == "cuda" else "cpu")
    if B == 0:
        return torch.zeros((0, n), dtype=p.dtype, device=dev), torch.zeros(0, dtype=torch.int64)
    t_indptr = torch.from_numpy(np.asarray(indptr, np.int64)).to(dev)
    t_indices = torch.from_numpy(np.asarray(indices, np.int32)).to(dev)
    t_data = torch.from_numpy(np.asarray(data)).to(dev, p.dtype) * d
    dang = torch.from_numpy(dangling).to(dev, p.dtype) * d
    pt = p.to(dev).T.contiguous()
    mt = r.to(dev).T.contiguous().to(torch.int8) if r is not None else None

    def step(x: torch.Tensor, y: torch.Tensor, c: torch.Tensor, mc: torch.Tensor | None) -> None:
        Bc = x.shape[1]
        if n == 0 or Bc == 0:  # no chunks: nothing to launch (a zero-sized grid)
            return
        grid = (n, triton.cdiv(Bc, BLOCK_B))
        _ppr_step_kernel[grid](t_indptr, t_indices, t_data, x, c, mc if mc is not None else x, dang, y, Bc,
                               HAS_MASK=mc is not None, BLOCK_NNZ=BLOCK_NNZ, BLOCK_B=BLOCK_B)

    x0 = pt * mt if mt is not None else pt
    out, iters = power_iterate(step, x0, (1.0 - d) * x0, mt, tol, max_iter)
    return out.T.contiguous(), iters


def launch_builds(shapes: dict) -> list[dict]:
    """The builds :func:`batched_ppr_triton` launches (ahead-of-time compile check): float32 and
    float64 priors, with and without a region."""
    out = []
    for dt in ("fp32", "fp64"):
        for mask in (False, True):
            sig = {"indptr_ptr": "*i64", "indices_ptr": "*i32", "data_ptr": f"*{dt}", "x_ptr": f"*{dt}",
                   "c_ptr": f"*{dt}", "mask_ptr": "*i8" if mask else f"*{dt}", "dang_ptr": f"*{dt}",
                   "y_ptr": f"*{dt}", "B": "i32", "HAS_MASK": "constexpr", "BLOCK_NNZ": "constexpr",
                   "BLOCK_B": "constexpr"}
            out.append({"kernel": "batched_ppr", "config": f"{dt}{'-region' if mask else ''}-nnz32b16",
                        "fn": "batched_ppr_triton:_ppr_step_kernel", "signature": sig,
                        "constexprs": {"HAS_MASK": mask, "BLOCK_NNZ": BLOCK_NNZ, "BLOCK_B": BLOCK_B},
                        "aligned": tuple(sig)[:8]})
    return out

"""Triton path of ``batched_ppr`` (SPEC §2 step 6; semantics in :mod:`.batched_ppr`).

The iterate is a block ``x [N, Bp]`` whose column stride ``Bp`` is the live columns rounded up to
a multiple of 16 (padding columns stay 0). One power iteration is one launch of
:func:`_ppr_step_kernel`: a program takes :data:`ROWS_PER_PROGRAM` rows of P, in the order of
their entry counts (rows of one step have similar lengths), ``ROWS`` at a time, and gathers
``CHUNK`` entries of each row against ``BLOCK_B`` columns of x at once::

    y[i] = mask · (c[i] + Σ_j dP[i, j] x[j] + d·dangling[i] · x[i])      (live columns)
    y[i] = x[i]                                                          (stopped columns)

with ``c = (1 − d) p`` and the damping folded into the edge and dangling weights (in the priors'
dtype). The program also writes its rows' share of each column's L1 change ``Σ |y − x|``.

Convergence stays on the device: the shares are summed in float64 in a fixed order, and a live
column that meets :class:`.ppr_stop.StopRule` stops (its iteration count recorded, its iterate
frozen from then on), all without a host round trip. The host reads the live count every :data:`CHECK_EVERY` iterations,
to finish or to drop stopped columns (saved first) once they are a quarter of the block.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .batched_ppr import COMPACT_SHARE, check_threads, prepare
from .ppr_stop import StopRule
from .tensors import as_tensor

#: rows of P per program (the unit of the column-change shares)
ROWS_PER_PROGRAM = 64
#: rows gathered side by side in one step of a program
ROWS = 8
#: bytes of one step's gather tile (ROWS · CHUNK · BLOCK_B elements)
GATHER_BYTES = 8192
#: the column stride of the iterate is a multiple of this
STRIDE_MULTIPLE = 16
#: iterations between two reads of the live-column count by the host
CHECK_EVERY = 8


@triton.jit
def _ppr_step_kernel(order_ptr, indptr_ptr, indices_ptr, data_ptr, x_ptr, c_ptr, mask_ptr, dang_ptr, live_ptr,
                     y_ptr, part_ptr, n, Bp, HAS_MASK: tl.constexpr, ROWS_PER_PROGRAM: tl.constexpr,
                     ROWS: tl.constexpr, CHUNK: tl.constexpr, BLOCK_B: tl.constexpr):
    pid = tl.program_id(0)
    offs_b = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)
    live = tl.load(live_ptr + offs_b, mask=offs_b < Bp, other=0) != 0
    change = tl.zeros([BLOCK_B], tl.float32)
    for r0 in range(0, tl.minimum(ROWS_PER_PROGRAM, n - pid * ROWS_PER_PROGRAM), ROWS):  # the last program: its rows
        ridx = pid * ROWS_PER_PROGRAM + r0 + tl.arange(0, ROWS)
        rmask = ridx < n
        row = tl.load(order_ptr + ridx, mask=rmask, other=0).to(tl.int64)
        lo = tl.load(indptr_ptr + row, mask=rmask, other=0)
        hi = tl.load(indptr_ptr + row + 1, mask=rmask, other=0)
        acc = tl.zeros([ROWS, BLOCK_B], x_ptr.dtype.element_ty)
        steps = tl.where(tl.max(live.to(tl.int32)) > 0, tl.max(hi - lo), 0)  # none live: nothing to gather
        for t in range(0, steps, CHUNK):
            e = lo[:, None] + t + tl.arange(0, CHUNK)[None, :]
            ok = e < hi[:, None]
            col = tl.load(indices_ptr + e, mask=ok, other=0).to(tl.int64)
            val = tl.load(data_ptr + e, mask=ok, other=0.0)
            xg = tl.load(x_ptr + col[:, :, None] * Bp + offs_b[None, None, :],
                         mask=ok[:, :, None] & live[None, None, :], other=0.0)
            acc += tl.sum(val[:, :, None] * xg, axis=1)
        at = row[:, None] * Bp + offs_b[None, :]
        inside = rmask[:, None] & (offs_b[None, :] < Bp)
        xr = tl.load(x_ptr + at, mask=inside, other=0.0)
        cr = tl.load(c_ptr + at, mask=inside & live[None, :], other=0.0)
        dg = tl.load(dang_ptr + row, mask=rmask, other=0.0)
        y = cr + acc + dg[:, None] * xr
        if HAS_MASK:
            m = tl.load(mask_ptr + at, mask=inside, other=0)
            y = tl.where(m != 0, y, 0.0)
        y = tl.where(live[None, :], y, xr)
        tl.store(y_ptr + at, y, mask=inside)
        change += tl.sum(tl.abs(y - xr).to(tl.float32), axis=0)
    tl.store(part_ptr + pid.to(tl.int64) * Bp + offs_b, change, mask=offs_b < Bp)


def padded(b: int) -> int:
    """The column stride of a block of ``b`` live columns (a multiple of :data:`STRIDE_MULTIPLE`)."""
    return max(STRIDE_MULTIPLE, -(-b // STRIDE_MULTIPLE) * STRIDE_MULTIPLE)


def tile(bp: int, itemsize: int) -> tuple[int, int]:
    """``(BLOCK_B, CHUNK)`` for a column stride ``bp``: up to 128 columns per program, the gather
    tile :data:`GATHER_BYTES` of ``itemsize``-byte values."""
    block_b = min(128, triton.next_power_of_2(bp))
    return block_b, max(1, GATHER_BYTES // (itemsize * ROWS * block_b))


def pad_columns(t: torch.Tensor, bp: int) -> torch.Tensor:
    """``t [N, b]`` copied into a zeroed ``[N, bp]`` block."""
    out = torch.zeros((t.shape[0], bp), dtype=t.dtype, device=t.device)
    out[:, :t.shape[1]] = t
    return out


def batched_ppr_triton(P, priors, d: float = 0.85, tol: float | None = 1e-6, max_iter: int = 100, region=None,
                       threads: int | None = None, device: str = "cuda") -> tuple[torch.Tensor, torch.Tensor]:
    """Triton path, same contract as :func:`.batched_ppr.batched_ppr`; tensors live on ``device``
    (CPU tensors under ``TRITON_INTERPRET=1``); ``threads`` is validated and unused. Tolerance against
    the CPU path: π within 1e-6 absolute at ``tol`` ≤ 1e-6 (sums in another order); a column whose
    change lies within rounding of its tolerance may stop one iteration apart."""
    check_threads(threads)
    dev = torch.device("cuda" if device == "cuda" else "cpu")
    indptr, indices, data, n, p, r, dangling, tols = prepare(P, priors, d, tol, max_iter, region, device=dev)
    B = p.shape[0]
    if B == 0:
        return torch.zeros((0, n), dtype=p.dtype, device=dev), torch.zeros(0, dtype=torch.int64)
    t_indptr = as_tensor(indptr).to(dev, torch.int64)
    order = torch.argsort(torch.diff(t_indptr), stable=True).to(torch.int32)
    t_indices = as_tensor(indices).to(dev, torch.int32)
    t_data = as_tensor(data).to(dev, p.dtype) * d
    dang = as_tensor(dangling).to(dev, p.dtype) * d
    pt = p.to(dev).T
    mt = r.to(dev).T.to(torch.int8) if r is not None else None
    x0 = pt * mt if mt is not None else pt
    out = torch.zeros((n, B), dtype=p.dtype, device=dev)
    iters = torch.full((B,), max_iter, dtype=torch.int64, device=dev)
    if n == 0:
        return out.T.contiguous(), iters.cpu()
    cols = torch.arange(B, device=dev)  # original column of each block column
    x, c = pad_columns(x0, padded(B)), pad_columns((1.0 - d) * x0, padded(B))
    mask = pad_columns(mt, padded(B)) if mt is not None else None
    rule = StopRule(pad_columns(tols.to(dev)[None], padded(B))[0])  # padding columns are never live
    fresh = True
    for it in range(1, max_iter + 1):
        if fresh:  # the first iteration, or the first after a compaction
            fresh, bp = False, x.shape[1]
            block_b, chunk = tile(bp, x.element_size())
            grid = (triton.cdiv(n, ROWS_PER_PROGRAM), triton.cdiv(bp, block_b))
            y = torch.empty_like(x)
            part = torch.empty((grid[0], bp), dtype=torch.float32, device=dev)
            live = torch.arange(bp, device=dev) < len(cols)
            stopped_at = torch.full((bp,), max_iter, dtype=torch.int64, device=dev)
        _ppr_step_kernel[grid](order, t_indptr, t_indices, t_data, x, c, mask if mask is not None else x, dang,
                               live.view(torch.int8), y, part, n, bp, HAS_MASK=mask is not None,
                               ROWS_PER_PROGRAM=ROWS_PER_PROGRAM, ROWS=ROWS, CHUNK=chunk, BLOCK_B=block_b)
        x, y = y, x
        stop = live & rule.done(part.sum(0, dtype=torch.float64))  # fixed-order float64 sums, on the device
        stopped_at.masked_fill_(stop, it)
        live &= ~stop
        if it % CHECK_EVERY and it != max_iter:
            continue
        b = len(cols)
        n_live = int(live.sum())  # the host's one round trip per CHECK_EVERY iterations
        if n_live == 0 or it == max_iter:
            break
        if b - n_live >= COMPACT_SHARE * b:
            keep, gone = torch.nonzero(live[:b]).flatten(), torch.nonzero(~live[:b]).flatten()
            out[:, cols[gone]] = x[:, gone]
            iters[cols[gone]] = stopped_at[gone]
            cols = cols[keep]
            rule.keep(torch.cat([keep, keep.new_zeros(padded(len(keep)) - len(keep))]))  # padding: any column
            x, c = pad_columns(x[:, keep], padded(len(keep))), pad_columns(c[:, keep], padded(len(keep)))
            mask = pad_columns(mask[:, keep], padded(len(keep))) if mask is not None else None
            fresh = True
    b = len(cols)
    out[:, cols] = x[:, :b]
    iters[cols] = stopped_at[:b]
    return out.T.contiguous(), iters.cpu()


def launch_builds(shapes: dict) -> list[dict]:
    """The builds :func:`batched_ppr_triton` launches (ahead-of-time compile check): float32 and
    float64 priors, with and without a region, at STITCH's 64 questions and the 256-prior block."""
    out = []
    for b in shapes["ppr_priors"]:
        for dt, itemsize in (("fp32", 4), ("fp64", 8)):
            block_b, chunk = tile(padded(b), itemsize)
            for mask in (False, True):
                sig = {"order_ptr": "*i32", "indptr_ptr": "*i64", "indices_ptr": "*i32", "data_ptr": f"*{dt}",
                       "x_ptr": f"*{dt}", "c_ptr": f"*{dt}", "mask_ptr": "*i8" if mask else f"*{dt}",
                       "dang_ptr": f"*{dt}", "live_ptr": "*i8", "y_ptr": f"*{dt}", "part_ptr": "*fp32", "n": "i32",
                       "Bp": "i32", "HAS_MASK": "constexpr", "ROWS_PER_PROGRAM": "constexpr", "ROWS": "constexpr",
                       "CHUNK": "constexpr", "BLOCK_B": "constexpr"}
                out.append({"kernel": "batched_ppr", "config": f"b{b}-{dt}{'-region' if mask else ''}",
                            "fn": "batched_ppr_triton:_ppr_step_kernel", "signature": sig,
                            "constexprs": {"HAS_MASK": mask, "ROWS_PER_PROGRAM": ROWS_PER_PROGRAM, "ROWS": ROWS,
                                           "CHUNK": chunk, "BLOCK_B": block_b},
                            "aligned": (*tuple(sig)[:11], "Bp")})
    return out

"""Triton kernels of ``sparse_diffusion`` (SPEC §1 query step 2); semantics in :mod:`.sparse_diffusion`.

Only the seeds' CSR rows are touched, and no float atomics are used:

1. :func:`_seed_terms_kernel`, one program per (query, seed slot): the seed row's sum (float64,
   in CSR order, when normalising), then ``key = b·n_cols + j`` and the term ``W[row, j]·p / rowsum``
   of each of its edges, written at the slot's offset of the flat term list (the CPU path's order:
   query, seed, CSR position);
2. the keys are sorted stably on the device: equal keys form runs that keep that order;
3. :func:`_run_sums_kernel`, one program per block of runs: each run's terms summed one after the
   other in float64, then rounded to float32 — the CPU path's sums in the CPU path's order.

By default the runs' keys and values (O(B·s·deg)) come to the host, which scatters them
into the dense result, or picks each query's top candidates with the CPU path's
:func:`~.sparse_diffusion.top_entries` (``top=k``: nothing of size B·n_cols exists anywhere); for
``entries=True`` they stay on the device. The results equal the CPU paths'.
"""
from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from .csr import check_csr
from .errors import InputError
from .sparse_diffusion import check_diffusion_inputs, check_top, top_entries
from .diffusion_tensors import check_diffusion_tensors, on_one_device

#: runs per program of the summing kernel; edges per step of the terms kernel (one warp)
RUNS = 128
BLOCK = 32


@triton.jit
def _seed_terms_kernel(SEEDS, WEIGHTS, OFFSETS, INDPTR, INDICES, DATA, KEYS, TERMS, S, n_cols,
                       NORMALISE: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    row = tl.load(SEEDS + pid)
    if row >= 0:
        b = (pid // S).to(tl.int64)
        start = tl.load(INDPTR + row)
        end = tl.load(INDPTR + row + 1)
        out = tl.load(OFFSETS + pid) - start
        scale = tl.load(WEIGHTS + pid).to(tl.float64)
        if NORMALISE:
            total = tl.zeros([], tl.float64)
            for k in range(start, end):  # one after the other: the CPU path's float64 sum
                total += tl.load(DATA + k).to(tl.float64)
            scale = tl.where(total > 0, scale / tl.where(total > 0, total, 1.0), 0.0)
        for e0 in range(start, end, BLOCK):
            e = e0 + tl.arange(0, BLOCK)
            ok = e < end
            tl.store(KEYS + out + e, b * n_cols + tl.load(INDICES + e, mask=ok, other=0), mask=ok)
            tl.store(TERMS + out + e, tl.load(DATA + e, mask=ok, other=0.0).to(tl.float64) * scale, mask=ok)


@triton.jit
def _run_sums_kernel(ORDER, STARTS, TERMS, VALUES, n_runs, RUNS: tl.constexpr):
    r = tl.program_id(0) * RUNS + tl.arange(0, RUNS)
    ok = r < n_runs
    lo = tl.load(STARTS + r, mask=ok, other=0)
    hi = tl.load(STARTS + r + 1, mask=ok, other=0)
    acc = tl.zeros([RUNS], tl.float64)
    for t in range(0, tl.max(hi - lo)):
        live = ok & (lo + t < hi)
        j = tl.load(ORDER + lo + t, mask=live, other=0)
        acc += tl.load(TERMS + j, mask=live, other=0.0)
    tl.store(VALUES + r, acc.to(tl.float32), mask=ok)


def diffusion_runs(ids: torch.Tensor, weights: torch.Tensor, indptr: torch.Tensor, indices: torch.Tensor,
                   data: torch.Tensor, n_cols: int, normalise: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Steps 1–3 of the module docstring on the tensors' device: ``(keys int64 [P], values float32 [P])``,
    one entry per distinct key ``b·n_cols + j`` reached, keys increasing. ``ids`` int64 and ``weights``
    float32 [B, s] (validated, padding weighted 0), the graph int64 / int32 / float32."""
    dev = ids.device
    B, S = ids.shape
    safe = ids.clamp_min(0)
    lengths = torch.where(ids >= 0, indptr[safe + 1] - indptr[safe], 0).flatten().to(torch.int64)
    total = int(lengths.sum()) if lengths.numel() else 0
    if total == 0:
        return torch.zeros(0, dtype=torch.int64, device=dev), torch.zeros(0, dtype=torch.float32, device=dev)
    keys = torch.empty(total, dtype=torch.int64, device=dev)
    terms = torch.empty(total, dtype=torch.float64, device=dev)
    _seed_terms_kernel[(B * S,)](ids.contiguous(), weights.contiguous(), torch.cumsum(lengths, 0) - lengths,
                                 indptr.contiguous(), indices.contiguous(), data.contiguous(), keys, terms, S,
                                 int(n_cols), NORMALISE=bool(normalise), BLOCK=BLOCK,
                                 **({} if dev.type == "cpu" else {"num_warps": 1}))
    sorted_keys, order = torch.sort(keys, stable=True)
    first = torch.ones(total, dtype=torch.bool, device=dev)
    first[1:] = sorted_keys[1:] != sorted_keys[:-1]
    starts = torch.cat([torch.nonzero(first).flatten(), torch.tensor([total], device=dev)])
    n_runs = len(starts) - 1
    vals = torch.empty(n_runs, dtype=torch.float32, device=dev)
    _run_sums_kernel[(triton.cdiv(n_runs, RUNS),)](order, starts, terms, vals, n_runs, RUNS=RUNS)
    return sorted_keys[first], vals


def sparse_diffusion_triton(seed_ids, seed_weights, indptr, indices, data, n_cols: int,
                            normalise: bool = True, top: int | None = None, entries: bool = False,
                            device: str = "cuda", **_: object):
    """SPEC §1 query step 2 with the Triton kernels; same contract and results as
    :func:`.sparse_diffusion.sparse_diffusion_cpu` (NumPy results on the host; with ``entries`` the
    ``(keys, values)`` tensors on the seeds' device)."""
    if entries:
        if top is not None:
            raise InputError("sparse_diffusion: top and entries=True exclude each other")
        args = on_one_device(seed_ids, seed_weights, indptr, indices, data, "cpu" if device == "cpu" else "cuda")
        ids, weights = check_diffusion_tensors(*args, n_cols)
        return diffusion_runs(ids, weights, args[2].to(torch.int64), args[3].to(torch.int32),
                              args[4].to(torch.float32), n_cols, normalise)
    graph = check_csr(indptr, indices, data, n_cols, "sparse_diffusion graph")
    ids, weights = check_diffusion_inputs(seed_ids, seed_weights, graph)
    check_top(top)
    B, n = ids.shape[0], int(n_cols)
    dev = "cpu" if device == "cpu" else "cuda"
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(dev)  # noqa: E731
    keys_d, vals_d = diffusion_runs(t(ids), t(weights), t(graph.indptr), t(graph.indices), t(graph.data), n,
                                    normalise)
    keys, values = keys_d.cpu().numpy(), vals_d.cpu().numpy()
    if top is not None:
        return top_entries(keys, values, B, n, top)
    out = np.zeros(B * n, np.float32)
    out[keys] = values
    return out.reshape(B, n)


def launch_builds(shapes: dict) -> list[dict]:
    """The builds :func:`sparse_diffusion_triton` launches (ahead-of-time compile check)."""
    terms = {"SEEDS": "*i64", "WEIGHTS": "*fp32", "OFFSETS": "*i64", "INDPTR": "*i64", "INDICES": "*i32",
             "DATA": "*fp32", "KEYS": "*i64", "TERMS": "*fp64", "S": "i32", "n_cols": "i32", "NORMALISE": "constexpr",
             "BLOCK": "constexpr"}
    runs = {"ORDER": "*i64", "STARTS": "*i64", "TERMS": "*fp64", "VALUES": "*fp32", "n_runs": "i32",
            "RUNS": "constexpr"}
    return [*({"kernel": "sparse_diffusion", "config": f"terms-{'norm' if norm else 'raw'}",
               "fn": "sparse_diffusion_triton:_seed_terms_kernel", "signature": terms,
               "constexprs": {"NORMALISE": norm, "BLOCK": BLOCK}, "num_warps": 1, "aligned": tuple(terms)[:8]}
              for norm in (True, False)),
            {"kernel": "sparse_diffusion", "config": f"runs-r{RUNS}", "fn": "sparse_diffusion_triton:_run_sums_kernel",
             "signature": runs, "constexprs": {"RUNS": RUNS}, "aligned": tuple(runs)[:4]}]

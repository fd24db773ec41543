"""Triton kernels of ``sparse_diffusion`` (SPEC §1 query step 2); semantics in :mod:`.sparse_diffusion`.

Only the seeds' CSR rows are touched, and no float atomics are used:

1. :func:`_seed_terms_kernel`, one program per (query, seed slot): the seed row's sum (float64,
   in CSR order, when normalising), then ``key = b·n_cols + j`` and the term ``W[row, j]·p / rowsum``
   of each of its edges, written at the slot's offset of the flat term list (the CPU path's order:
   query, seed, CSR position);
2. the keys are sorted stably on the device: equal keys form runs that keep that order;
3. :func:`_run_sums_kernel`, one program per block of runs: each run's terms summed one after the
   other in float64, then rounded to float32 — the CPU path's sums in the CPU path's order.

The runs' keys and values (O(B·s·deg)) come to the host, which scatters them into the dense
result, or picks each query's top candidates with the CPU path's :func:`~.sparse_diffusion.top_entries`
(``top=k``: nothing of size B·n_cols exists anywhere). The result equals the CPU path's.
"""
from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from .csr import check_csr
from .sparse_diffusion import check_diffusion_inputs, check_top, top_entries

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


def sparse_diffusion_triton(seed_ids, seed_weights, indptr, indices, data, n_cols: int,
                            normalise: bool = True, top: int | None = None, device: str = "cuda",
                            **_: object):
    """SPEC §1 query step 2 with the Triton kernels; same contract and results as
    :func:`.sparse_diffusion.sparse_diffusion_cpu` (NumPy results, on the host)."""
    graph = check_csr(indptr, indices, data, n_cols, "sparse_diffusion graph")
    ids, weights = check_diffusion_inputs(seed_ids, seed_weights, graph)
    check_top(top)
    B, S = ids.shape
    n = int(n_cols)
    dev = "cpu" if device == "cpu" else "cuda"
    lengths = np.where(ids >= 0, graph.indptr[np.maximum(ids, 0) + 1] - graph.indptr[np.maximum(ids, 0)], 0).ravel()
    total = int(lengths.sum())
    if total == 0:
        keys, values = np.zeros(0, np.int64), np.zeros(0, np.float32)
    else:
        t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(dev)  # noqa: E731
        offsets = np.cumsum(lengths) - lengths
        keys_d = torch.empty(total, dtype=torch.int64, device=dev)
        terms = torch.empty(total, dtype=torch.float64, device=dev)
        _seed_terms_kernel[(B * S,)](t(ids), t(weights), t(offsets.astype(np.int64)), t(graph.indptr),
                                     t(graph.indices), t(graph.data), keys_d, terms, S, n,
                                     NORMALISE=bool(normalise), BLOCK=BLOCK, **({} if dev == "cpu" else {"num_warps": 1}))
        sorted_keys, order = torch.sort(keys_d, stable=True)
        first = torch.ones(total, dtype=torch.bool, device=dev)
        first[1:] = sorted_keys[1:] != sorted_keys[:-1]
        starts = torch.cat([torch.nonzero(first).flatten(), torch.tensor([total], device=dev)])
        n_runs = len(starts) - 1
        vals = torch.empty(n_runs, dtype=torch.float32, device=dev)
        _run_sums_kernel[(triton.cdiv(n_runs, RUNS),)](order, starts, terms, vals, n_runs, RUNS=RUNS)
        keys, values = sorted_keys[first].cpu().numpy(), vals.cpu().numpy()
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

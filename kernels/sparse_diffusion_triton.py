"""Triton kernel of ``sparse_diffusion`` (SPEC §1 query step 2); semantics in :mod:`.sparse_diffusion`.

One program per (query, seed slot): it sums the seed row's weights (when normalising),
then scatters ``weight · W[row, j] / rowsum`` into the query's output row with atomic
adds. Zero-sum rows and padded seeds add nothing.
"""
from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from .csr import check_csr
from .sparse_diffusion import check_diffusion_inputs


@triton.jit
def _diffusion_kernel(SEEDS, WEIGHTS, INDPTR, INDICES, DATA, OUT, S, n_cols,
                      NORMALISE: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    b = pid // S
    row = tl.load(SEEDS + pid)
    w = tl.load(WEIGHTS + pid)
    if row >= 0:
        start = tl.load(INDPTR + row)
        end = tl.load(INDPTR + row + 1)
        scale = w
        if NORMALISE:
            total = tl.zeros([BLOCK], tl.float32)
            for e0 in range(start, end, BLOCK):
                e = e0 + tl.arange(0, BLOCK)
                total += tl.load(DATA + e, mask=e < end, other=0.0)
            rowsum = tl.sum(total, axis=0)
            scale = tl.where(rowsum > 0, w / tl.where(rowsum > 0, rowsum, 1.0), 0.0)
        for e0 in range(start, end, BLOCK):
            e = e0 + tl.arange(0, BLOCK)
            emask = e < end
            cols = tl.load(INDICES + e, mask=emask, other=0)
            vals = tl.load(DATA + e, mask=emask, other=0.0)
            tl.atomic_add(OUT + b.to(tl.int64) * n_cols + cols, vals * scale, mask=emask)


def sparse_diffusion_triton(seed_ids, seed_weights, indptr, indices, data, n_cols: int,
                            normalise: bool = True, device: str = "cuda", block: int = 128,
                            **_: object) -> np.ndarray:
    """SPEC §1 query step 2 with the Triton kernel; same contract as
    :func:`.sparse_diffusion.sparse_diffusion_cpu` (sums may differ in the last bits)."""
    graph = check_csr(indptr, indices, data, n_cols, "sparse_diffusion graph")
    ids, weights = check_diffusion_inputs(seed_ids, seed_weights, graph)
    B, S = ids.shape
    dev = "cpu" if device == "cpu" else "cuda"
    out = torch.zeros((B, int(n_cols)), dtype=torch.float32, device=dev)
    if B * S == 0:
        return out.cpu().numpy()
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(dev)  # noqa: E731
    _diffusion_kernel[(B * S,)](t(ids), t(weights), t(graph.indptr), t(graph.indices), t(graph.data), out,
                                S, int(n_cols), NORMALISE=bool(normalise), BLOCK=block)
    return out.cpu().numpy()


def launch_builds(shapes: dict) -> list[dict]:
    """The builds :func:`sparse_diffusion_triton` launches (ahead-of-time compile check)."""
    sig = {"SEEDS": "*i64", "WEIGHTS": "*fp32", "INDPTR": "*i64", "INDICES": "*i32", "DATA": "*fp32", "OUT": "*fp32",
           "S": "i32", "n_cols": "i32", "NORMALISE": "constexpr", "BLOCK": "constexpr"}
    return [{"kernel": "sparse_diffusion", "config": f"{'norm' if norm else 'raw'}-b128",
             "fn": "sparse_diffusion_triton:_diffusion_kernel", "signature": sig,
             "constexprs": {"NORMALISE": norm, "BLOCK": 128},
             "aligned": ("SEEDS", "WEIGHTS", "INDPTR", "INDICES", "DATA", "OUT")} for norm in (True, False)]

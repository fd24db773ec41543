"""Triton path of ``group_decay_propagate`` (SPEC §2 step 3; semantics in the CPU module).

One program per activated source state (b, u): it walks u's name group in blocks
and ``atomic_max``-es ``A[b, u] · exp(−tanh(α_G |t(u) − t(v)|))`` into ``out[b, v]``
for every other member v (all values are ≥ 0, so float atomic max is exact and the
result does not depend on the order). The host multiplies by ``w`` afterwards.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .group_decay_propagate import active_sources, check_inputs

BLOCK_M = 32


@triton.jit
def _decay_kernel(src_b_ptr, src_u_ptr, src_start_ptr, src_size_ptr, A_ptr, node_t_ptr, node_group_ptr,
                  group_nodes_ptr, alpha_ptr, out_ptr, V, BLOCK_M: tl.constexpr):
    i = tl.program_id(0)
    b = tl.load(src_b_ptr + i)
    u = tl.load(src_u_ptr + i)
    start = tl.load(src_start_ptr + i)
    size = tl.load(src_size_ptr + i)
    a = tl.load(A_ptr + b * V + u)
    t_u = tl.load(node_t_ptr + u).to(tl.float32)
    alpha = tl.load(alpha_ptr + tl.load(node_group_ptr + u))
    for k in range(0, size, BLOCK_M):
        offs = k + tl.arange(0, BLOCK_M)
        ok = offs < size
        v = tl.load(group_nodes_ptr + start + offs, mask=ok, other=0).to(tl.int64)
        t_v = tl.load(node_t_ptr + v, mask=ok, other=0).to(tl.float32)
        x = tl.minimum(alpha * tl.abs(t_u - t_v), 20.0)  # tanh(20) = 1 in float32
        tanh = 1.0 - 2.0 / (tl.exp(2.0 * x) + 1.0)  # x ≥ 0
        val = a * tl.exp(-tanh)
        tl.atomic_max(out_ptr + b * V + v, val, mask=ok & (v != u))


def group_decay_propagate_triton(A: torch.Tensor, w: torch.Tensor, node_group: torch.Tensor, node_t: torch.Tensor,
                                 group_indptr: torch.Tensor, group_nodes: torch.Tensor, alpha: torch.Tensor,
                                 device: str = "cuda") -> torch.Tensor:
    """Triton path; tensors move to the GPU for ``device="cuda"`` (they stay where they are,
    e.g. CPU tensors under TRITON_INTERPRET=1, otherwise). Result on that device."""
    B, V = check_inputs(A, w, node_group, node_t, group_indptr, group_nodes, alpha)
    dev = torch.device("cuda") if device == "cuda" else A.device
    out = torch.zeros((B, V), dtype=torch.float32, device=dev)
    if B == 0 or V == 0:
        return out
    A = A.to(dev).float().contiguous()
    b, u, start, size = active_sources(A, node_group.to(dev), group_indptr.to(dev))
    if len(u):
        _decay_kernel[(len(u),)](b.to(torch.int64), u.to(torch.int64), start, size, A,
                                 node_t.to(dev, torch.int64), node_group.to(dev, torch.int64),
                                 group_nodes.to(dev, torch.int32), alpha.to(dev, torch.float32), out, V,
                                 BLOCK_M=BLOCK_M)
    return out * w.float().to(dev)


def launch_builds(shapes: dict) -> list[dict]:
    """The build :func:`group_decay_propagate_triton` launches (ahead-of-time compile check)."""
    sig = {"src_b_ptr": "*i64", "src_u_ptr": "*i64", "src_start_ptr": "*i64", "src_size_ptr": "*i64", "A_ptr": "*fp32",
           "node_t_ptr": "*i64", "node_group_ptr": "*i64", "group_nodes_ptr": "*i32", "alpha_ptr": "*fp32",
           "out_ptr": "*fp32", "V": "i32", "BLOCK_M": "constexpr"}
    return [{"kernel": "group_decay_propagate", "config": "m32", "fn": "group_decay_propagate_triton:_decay_kernel",
             "signature": sig, "constexprs": {"BLOCK_M": BLOCK_M}, "aligned": tuple(sig)[:10]}]

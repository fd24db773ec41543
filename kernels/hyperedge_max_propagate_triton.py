"""Triton path of ``hyperedge_max_propagate`` (SPEC §2 step 2; semantics in the CPU module).

Kernel 1, one program per (hyperedge, block of queries): the top activation m1 of
the members, the tie count, the runner-up m2, then each incidence's best
co-participant times S[b, e] into a [B, I] buffer. Kernel 2, one program per
(node, block of queries): the max over the node's incidences (gathered through
``node_incidence``), so no atomics are needed and the result is deterministic.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .hyperedge_max_propagate import check_inputs

BLOCK_M = 16
BLOCK_B = 16


@triton.jit
def _members(A_ptr, edge_nodes_ptr, start, hi, offs_b, b_ok, V, BLOCK_M: tl.constexpr):
    """Incidence positions [BLOCK_M] from ``start``, their validity, and A[b, member] [BLOCK_M, BLOCK_B]."""
    offs = start + tl.arange(0, BLOCK_M)
    ok = offs < hi
    nodes = tl.load(edge_nodes_ptr + offs, mask=ok, other=0).to(tl.int64)
    a = tl.load(A_ptr + offs_b[None, :] * V + nodes[:, None], mask=ok[:, None] & b_ok[None, :], other=0.0)
    return offs, ok, a


@triton.jit
def _edge_kernel(A_ptr, S_ptr, edge_indptr_ptr, edge_nodes_ptr, inc_ptr, B, V, E, I,
                 BLOCK_M: tl.constexpr, BLOCK_B: tl.constexpr):
    e = tl.program_id(0).to(tl.int64)
    offs_b = (tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)).to(tl.int64)
    b_ok = offs_b < B
    lo = tl.load(edge_indptr_ptr + e)
    hi = tl.load(edge_indptr_ptr + e + 1)
    m1 = tl.zeros((BLOCK_B,), dtype=tl.float32)
    for start in range(lo, hi, BLOCK_M):
        offs, ok, a = _members(A_ptr, edge_nodes_ptr, start, hi, offs_b, b_ok, V, BLOCK_M)
        m1 = tl.maximum(m1, tl.max(a, axis=0))
    n_top = tl.zeros((BLOCK_B,), dtype=tl.float32)
    m2 = tl.zeros((BLOCK_B,), dtype=tl.float32)
    for start in range(lo, hi, BLOCK_M):
        offs, ok, a = _members(A_ptr, edge_nodes_ptr, start, hi, offs_b, b_ok, V, BLOCK_M)
        top = (a == m1[None, :]) & ok[:, None]
        n_top += tl.sum(tl.where(top, 1.0, 0.0), axis=0)
        m2 = tl.maximum(m2, tl.max(tl.where(top, 0.0, a), axis=0))
    m2 = tl.where(n_top >= 2.0, m1, m2)
    s = tl.load(S_ptr + offs_b * E + e, mask=b_ok, other=0.0)
    for start in range(lo, hi, BLOCK_M):
        offs, ok, a = _members(A_ptr, edge_nodes_ptr, start, hi, offs_b, b_ok, V, BLOCK_M)
        best = tl.where(a == m1[None, :], m2[None, :], m1[None, :]) * s[None, :]
        tl.store(inc_ptr + offs_b[None, :] * I + offs[:, None], best, mask=ok[:, None] & b_ok[None, :])


@triton.jit
def _node_kernel(inc_ptr, node_indptr_ptr, node_inc_ptr, out_ptr, B, V, I,
                 BLOCK_M: tl.constexpr, BLOCK_B: tl.constexpr):
    v = tl.program_id(0).to(tl.int64)
    offs_b = (tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)).to(tl.int64)
    b_ok = offs_b < B
    lo = tl.load(node_indptr_ptr + v)
    hi = tl.load(node_indptr_ptr + v + 1)
    acc = tl.zeros((BLOCK_B,), dtype=tl.float32)
    for start in range(lo, hi, BLOCK_M):
        offs = start + tl.arange(0, BLOCK_M)
        ok = offs < hi
        j = tl.load(node_inc_ptr + offs, mask=ok, other=0).to(tl.int64)
        val = tl.load(inc_ptr + offs_b[None, :] * I + j[:, None], mask=ok[:, None] & b_ok[None, :], other=0.0)
        acc = tl.maximum(acc, tl.max(val, axis=0))
    tl.store(out_ptr + offs_b * V + v, acc, mask=b_ok)


def hyperedge_max_propagate_triton(A: torch.Tensor, S: torch.Tensor, edge_indptr: torch.Tensor,
                                   edge_nodes: torch.Tensor, node_indptr: torch.Tensor,
                                   node_incidence: torch.Tensor, device: str = "cuda") -> torch.Tensor:
    """Triton path; tensors move to the GPU for ``device="cuda"`` (they stay where they are,
    e.g. CPU tensors under TRITON_INTERPRET=1, otherwise). Result on that device."""
    B, V, E = check_inputs(A, S, edge_indptr, edge_nodes, node_indptr, node_incidence)
    dev = torch.device("cuda") if device == "cuda" else A.device
    A, S = A.to(dev).float().contiguous(), S.to(dev).float().contiguous()
    out = torch.zeros((B, V), dtype=torch.float32, device=dev)
    I = edge_nodes.numel()
    if B == 0 or I == 0:
        return out
    inc = torch.zeros((B, I), dtype=torch.float32, device=dev)
    nb = triton.cdiv(B, BLOCK_B)
    _edge_kernel[(E, nb)](A, S, edge_indptr.to(dev, torch.int64), edge_nodes.to(dev, torch.int32), inc, B, V, E, I,
                          BLOCK_M=BLOCK_M, BLOCK_B=BLOCK_B)
    _node_kernel[(V, nb)](inc, node_indptr.to(dev, torch.int64), node_incidence.to(dev, torch.int32), out, B, V, I,
                          BLOCK_M=BLOCK_M, BLOCK_B=BLOCK_B)
    return out


def launch_builds(shapes: dict) -> list[dict]:
    """The builds :func:`hyperedge_max_propagate_triton` launches (ahead-of-time compile check)."""
    edge = {"A_ptr": "*fp32", "S_ptr": "*fp32", "edge_indptr_ptr": "*i64", "edge_nodes_ptr": "*i32", "inc_ptr": "*fp32",
            "B": "i32", "V": "i32", "E": "i32", "I": "i32", "BLOCK_M": "constexpr", "BLOCK_B": "constexpr"}
    node = {"inc_ptr": "*fp32", "node_indptr_ptr": "*i64", "node_inc_ptr": "*i32", "out_ptr": "*fp32", "B": "i32",
            "V": "i32", "I": "i32", "BLOCK_M": "constexpr", "BLOCK_B": "constexpr"}
    cx = {"BLOCK_M": BLOCK_M, "BLOCK_B": BLOCK_B}
    return [{"kernel": "hyperedge_max_propagate", "config": "edge-m16b16", "signature": edge, "constexprs": cx,
             "fn": "hyperedge_max_propagate_triton:_edge_kernel",
             "aligned": ("A_ptr", "S_ptr", "edge_indptr_ptr", "edge_nodes_ptr", "inc_ptr")},
            {"kernel": "hyperedge_max_propagate", "config": "node-m16b16", "signature": node, "constexprs": cx,
             "fn": "hyperedge_max_propagate_triton:_node_kernel",
             "aligned": ("inc_ptr", "node_indptr_ptr", "node_inc_ptr", "out_ptr")}]

"""Triton path of ``hyperedge_max_propagate`` (SPEC §2 step 2; semantics in the CPU module).

The activations are read in a ``[V, B]`` layout (``A`` transposed once on the device), so each
member's activations for a block of queries are one contiguous row. Kernel 1, one program per
:data:`EDGES` hyperedges × a block of queries: per hyperedge the top activation m1 of its members,
the tie count, the runner-up m2, then each incidence's best co-participant times S[b, e] into an
``[I, B]`` buffer (contiguous rows again). Kernel 2, one program per :data:`NODES` nodes × a block
of queries: the max over each node's incidences (gathered through ``node_incidence``) into
``[V, B]``, transposed back to ``[B, V]``. Maxima are exact, and no atomics are used: the result is
the CPU path's bit for bit.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .hyperedge_max_propagate import check_inputs

#: members (incidences) per step, hyperedges and nodes per program, queries per program (at most)
BLOCK_M = 16
EDGES = 8
NODES = 16
BLOCK_B = 64


@triton.jit
def _members(AT_ptr, edge_nodes_ptr, start, hi, offs_b, b_ok, B, BLOCK_M: tl.constexpr):
    """Incidence positions [BLOCK_M] from ``start``, their validity, and A[b, member] [BLOCK_M, BLOCK_B]
    read as contiguous rows of ``A^T``."""
    offs = start + tl.arange(0, BLOCK_M)
    ok = offs < hi
    nodes = tl.load(edge_nodes_ptr + offs, mask=ok, other=0).to(tl.int64)
    a = tl.load(AT_ptr + nodes[:, None] * B + offs_b[None, :], mask=ok[:, None] & b_ok[None, :], other=0.0)
    return offs, ok, a


@triton.jit
def _row_range(indptr_ptr, i, n):
    """``(indptr[i], indptr[i + 1])`` of row ``i`` of a CSR of ``n`` rows: an empty range past the last row."""
    return tl.load(indptr_ptr + tl.minimum(i, n)), tl.load(indptr_ptr + tl.minimum(i + 1, n))


@triton.jit
def _edge_kernel(AT_ptr, S_ptr, edge_indptr_ptr, edge_nodes_ptr, inc_ptr, B, E,
                 EDGES: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_B: tl.constexpr):
    offs_b = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)
    b_ok = offs_b < B
    for i in range(EDGES):
        e = tl.program_id(0).to(tl.int64) * EDGES + i
        lo, hi = _row_range(edge_indptr_ptr, e, E)
        m1 = tl.zeros((BLOCK_B,), dtype=tl.float32)
        for start in range(lo, hi, BLOCK_M):
            offs, ok, a = _members(AT_ptr, edge_nodes_ptr, start, hi, offs_b, b_ok, B, BLOCK_M)
            m1 = tl.maximum(m1, tl.max(a, axis=0))
        n_top = tl.zeros((BLOCK_B,), dtype=tl.float32)
        m2 = tl.zeros((BLOCK_B,), dtype=tl.float32)
        for start in range(lo, hi, BLOCK_M):
            offs, ok, a = _members(AT_ptr, edge_nodes_ptr, start, hi, offs_b, b_ok, B, BLOCK_M)
            top = (a == m1[None, :]) & ok[:, None]
            n_top += tl.sum(tl.where(top, 1.0, 0.0), axis=0)
            m2 = tl.maximum(m2, tl.max(tl.where(top, 0.0, a), axis=0))
        m2 = tl.where(n_top >= 2.0, m1, m2)
        s = tl.load(S_ptr + offs_b.to(tl.int64) * E + tl.minimum(e, E - 1), mask=b_ok, other=0.0)
        for start in range(lo, hi, BLOCK_M):
            offs, ok, a = _members(AT_ptr, edge_nodes_ptr, start, hi, offs_b, b_ok, B, BLOCK_M)
            best = tl.where(a == m1[None, :], m2[None, :], m1[None, :]) * s[None, :]
            tl.store(inc_ptr + offs.to(tl.int64)[:, None] * B + offs_b[None, :], best, mask=ok[:, None] & b_ok[None, :])


@triton.jit
def _node_kernel(inc_ptr, node_indptr_ptr, node_inc_ptr, outT_ptr, B, V,
                 NODES: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_B: tl.constexpr):
    offs_b = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)
    b_ok = offs_b < B
    for i in range(NODES):
        v = tl.program_id(0).to(tl.int64) * NODES + i
        lo, hi = _row_range(node_indptr_ptr, v, V)
        acc = tl.zeros((BLOCK_B,), dtype=tl.float32)
        for start in range(lo, hi, BLOCK_M):
            offs = start + tl.arange(0, BLOCK_M)
            ok = offs < hi
            j = tl.load(node_inc_ptr + offs, mask=ok, other=0).to(tl.int64)
            val = tl.load(inc_ptr + j[:, None] * B + offs_b[None, :], mask=ok[:, None] & b_ok[None, :], other=0.0)
            acc = tl.maximum(acc, tl.max(val, axis=0))
        tl.store(outT_ptr + v * B + offs_b, acc, mask=b_ok & (offs_b * 0 + v < V))


def block_b(B: int) -> int:
    """Queries per program: up to :data:`BLOCK_B` (at least 16)."""
    return min(BLOCK_B, max(16, triton.next_power_of_2(B)))


def hyperedge_max_propagate_triton(A: torch.Tensor, S: torch.Tensor, edge_indptr: torch.Tensor,
                                   edge_nodes: torch.Tensor, node_indptr: torch.Tensor,
                                   node_incidence: torch.Tensor, device: str = "cuda") -> torch.Tensor:
    """Triton path; tensors move to the GPU for ``device="cuda"`` (they stay where they are,
    e.g. CPU tensors under TRITON_INTERPRET=1, otherwise). Result [B, V] on that device, equal to
    the CPU path's."""
    B, V, E = check_inputs(A, S, edge_indptr, edge_nodes, node_indptr, node_incidence)
    dev = torch.device("cuda") if device == "cuda" else A.device
    I = edge_nodes.numel()
    if B == 0 or I == 0:
        return torch.zeros((B, V), dtype=torch.float32, device=dev)
    AT = A.to(dev).float().T.contiguous()  # [V, B]: a node's activations are one row
    S = S.to(dev).float().contiguous()
    inc = torch.zeros((I, B), dtype=torch.float32, device=dev)
    outT = torch.empty((V, B), dtype=torch.float32, device=dev)
    bb = block_b(B)
    nb = triton.cdiv(B, bb)
    _edge_kernel[(triton.cdiv(E, EDGES), nb)](AT, S, edge_indptr.to(dev, torch.int64), edge_nodes.to(dev, torch.int32),
                                              inc, B, E, EDGES=EDGES, BLOCK_M=BLOCK_M, BLOCK_B=bb)
    _node_kernel[(triton.cdiv(V, NODES), nb)](inc, node_indptr.to(dev, torch.int64), node_incidence.to(dev, torch.int32),
                                              outT, B, V, NODES=NODES, BLOCK_M=BLOCK_M, BLOCK_B=bb)
    return outT.T.contiguous()


def launch_builds(shapes: dict) -> list[dict]:
    """The builds :func:`hyperedge_max_propagate_triton` launches at STITCH's batch (ahead-of-time compile check)."""
    edge = {"AT_ptr": "*fp32", "S_ptr": "*fp32", "edge_indptr_ptr": "*i64", "edge_nodes_ptr": "*i32",
            "inc_ptr": "*fp32", "B": "i32", "E": "i32", "EDGES": "constexpr", "BLOCK_M": "constexpr",
            "BLOCK_B": "constexpr"}
    node = {"inc_ptr": "*fp32", "node_indptr_ptr": "*i64", "node_inc_ptr": "*i32", "outT_ptr": "*fp32", "B": "i32",
            "V": "i32", "NODES": "constexpr", "BLOCK_M": "constexpr", "BLOCK_B": "constexpr"}
    bb = block_b(shapes["stitch_batch"])
    return [{"kernel": "hyperedge_max_propagate", "config": f"edge-e{EDGES}m{BLOCK_M}b{bb}", "signature": edge,
             "constexprs": {"EDGES": EDGES, "BLOCK_M": BLOCK_M, "BLOCK_B": bb},
             "fn": "hyperedge_max_propagate_triton:_edge_kernel", "aligned": (*tuple(edge)[:5], "B")},
            {"kernel": "hyperedge_max_propagate", "config": f"node-v{NODES}m{BLOCK_M}b{bb}", "signature": node,
             "constexprs": {"NODES": NODES, "BLOCK_M": BLOCK_M, "BLOCK_B": bb},
             "fn": "hyperedge_max_propagate_triton:_node_kernel", "aligned": (*tuple(node)[:4], "B")}]

"""Spatial channel of STITCH-RAG: hyperedge max-propagation (SPEC §2 step 2), batched.

For every query b and node v::

    a_space[b, v] = max over hyperedges e ∋ v, over u ∈ e, u ≠ v of A[b, u] · S[b, e]

(0 when v is in no hyperedge or only in singleton hyperedges).

Inputs (torch tensors on one device; through ``call`` NumPy arrays too): ``A`` [B, V] node activations ≥ 0, ``S`` [B, E]
topic activations ≥ 0, the incidence CSR edge → nodes ``edge_indptr`` [E+1] /
``edge_nodes`` [I], and the node-side CSR ``node_indptr`` [V+1] / ``node_incidence`` [I]
(positions in ``edge_nodes`` of each node's incidences, node-sorted).

Algorithm (no loop over nodes): per hyperedge the top activation ``m1``, how many
members reach it, and the best activation below it ``m2`` (``m2 = m1`` when two
members tie at the top); the best co-participant of member u is ``m2`` if u holds
``m1`` else ``m1``; then a max over each node's incidences. The CPU path does this
with segment reductions (``scatter_reduce``); the Triton path runs one program per
hyperedge, then one per node (gather through ``node_incidence``; no atomics).
"""
from __future__ import annotations

import torch

from .checks import check_ids, check_indptr, check_values, first_where
from .errors import InputError
from .dispatch import register


def check_inputs(A: torch.Tensor, S: torch.Tensor, edge_indptr: torch.Tensor, edge_nodes: torch.Tensor,
                 node_indptr: torch.Tensor, node_incidence: torch.Tensor) -> tuple[int, int, int]:
    """Validate the inputs of both paths (shapes, finite non-negative activations, monotone
    offsets, ids in range, the two incidence CSRs agreeing); returns ``(B, V, E)``.

    Raises :class:`InputError` naming the argument; the Triton kernels index ``A`` with
    ``edge_nodes`` and the incidence buffer with ``node_incidence``, so they never launch
    on ids outside those arrays."""
    op = "hyperedge_max_propagate"
    if A.ndim != 2 or S.ndim != 2 or A.shape[0] != S.shape[0]:
        raise InputError(f"{op}: A must be [B, V] and S [B, E] with the same B, got {tuple(A.shape)} "
                         f"and {tuple(S.shape)}")
    B, V = A.shape
    E = S.shape[1]
    if edge_nodes.ndim != 1 or node_incidence.shape != edge_nodes.shape:
        raise InputError(f"{op}: edge_nodes and node_incidence must be 1-D of the same length, got "
                         f"{tuple(edge_nodes.shape)} and {tuple(node_incidence.shape)}")
    I = edge_nodes.numel()
    check_indptr(edge_indptr, "edge_indptr", E + 1, I, op)
    check_indptr(node_indptr, "node_indptr", V + 1, I, op)
    check_ids(edge_nodes, "edge_nodes", V, op, "node ids")
    check_ids(node_incidence, "node_incidence", I, op, "positions in edge_nodes")
    check_values(A, "A", op)
    check_values(S, "S", op)
    if I:  # node_incidence must list, for each node v, incidences of v (node-sorted)
        owner = torch.repeat_interleave(torch.arange(V, device=A.device), torch.diff(node_indptr.long()).to(A.device))
        wrong = edge_nodes.long().to(A.device)[node_incidence.long().to(A.device)] != owner
        if bool(wrong.any()):
            j = first_where(wrong)[0]
            raise InputError(f"{op}: node_incidence disagrees with node_indptr: node_incidence[{j}] points to "
                             f"an incidence of node {int(edge_nodes[int(node_incidence[j])])}, not of node "
                             f"{int(owner[j])}")
    return B, V, E


def hyperedge_max_propagate(A: torch.Tensor, S: torch.Tensor, edge_indptr: torch.Tensor, edge_nodes: torch.Tensor,
                            node_indptr: torch.Tensor, node_incidence: torch.Tensor,
                            device: str = "cpu") -> torch.Tensor:
    """CPU path: a_space [B, V] float32 (see module docstring)."""
    B, V, E = check_inputs(A, S, edge_indptr, edge_nodes, node_indptr, node_incidence)
    A, S = A.float(), S.float()
    out = torch.zeros((B, V), dtype=torch.float32, device=A.device)
    I = edge_nodes.numel()
    if B == 0 or I == 0:
        return out
    nodes = edge_nodes.long()
    inc_edge = torch.repeat_interleave(torch.arange(E, device=A.device), torch.diff(edge_indptr.long()))
    idx = inc_edge.expand(B, I)
    Ai = A[:, nodes]  # [B, I]
    m1 = torch.zeros((B, E), dtype=torch.float32, device=A.device).scatter_reduce(1, idx, Ai, "amax")
    top = Ai == m1[:, inc_edge]
    n_top = torch.zeros((B, E), dtype=torch.float32, device=A.device).scatter_add(1, idx, top.float())
    m2 = torch.zeros((B, E), dtype=torch.float32, device=A.device).scatter_reduce(
        1, idx, torch.where(top, torch.zeros_like(Ai), Ai), "amax")
    m2 = torch.where(n_top >= 2, m1, m2)
    best = torch.where(top, m2[:, inc_edge], m1[:, inc_edge]) * S[:, inc_edge]
    return out.scatter_reduce(1, nodes.expand(B, I), best, "amax")


register("hyperedge_max_propagate", hyperedge_max_propagate,
         triton="hopgraph.kernels.hyperedge_max_propagate_triton:hyperedge_max_propagate_triton",
         tensors=("A", "S", "edge_indptr", "edge_nodes", "node_indptr", "node_incidence"))

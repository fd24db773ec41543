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

from .errors import InputError
from .dispatch import register


def check_inputs(A: torch.Tensor, S: torch.Tensor, edge_indptr: torch.Tensor, edge_nodes: torch.Tensor,
                 node_indptr: torch.Tensor, node_incidence: torch.Tensor) -> tuple[int, int, int]:
    if A.ndim != 2 or S.ndim != 2 or A.shape[0] != S.shape[0]:
        raise InputError(f"A must be [B, V] and S [B, E] with the same B, got {tuple(A.shape)} and {tuple(S.shape)}")
    B, V = A.shape
    E = S.shape[1]
    if edge_indptr.shape != (E + 1,) or node_indptr.shape != (V + 1,):
        raise InputError(f"edge_indptr must have {E + 1} entries and node_indptr {V + 1}")
    if edge_nodes.shape != node_incidence.shape or int(edge_indptr[-1]) != edge_nodes.numel() \
            or int(node_indptr[-1]) != edge_nodes.numel():
        raise InputError("incidence arrays disagree: edge_indptr[-1], node_indptr[-1], len(edge_nodes), "
                         "len(node_incidence) must be equal")
    if A.numel() and bool((A < 0).any()) or S.numel() and bool((S < 0).any()):
        raise InputError("activations A and S must be non-negative (clip similarities at 0)")
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

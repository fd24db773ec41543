"""Temporal channel of STITCH-RAG: name-group decay propagation (SPEC §2 step 3), batched.

For every query b and node v in name group G::

    a_time[b, v] = w[b, v] · max over u ∈ G, u ≠ v, A[b, u] > 0 of
                   A[b, u] · exp(−tanh(α_G · |t(u) − t(v)|))

(0 when no other member of G is activated). The pipeline passes
``w[b, v] = S(e_v) · sim(q, c_v)`` (v's best hyperedge score times its chunk's
similarity), which factors out of the max, and ``α_G = |G| / mean group size``.

Inputs (torch tensors; through ``call`` NumPy arrays too): ``A`` [B, V] ≥ 0, ``w`` [B, V] ≥ 0, ``node_group`` [V],
``node_t`` [V] (t(c_v), the chunk's corpus position), the group → nodes CSR
``group_indptr`` [G+1] / ``group_nodes`` [V], ``alpha`` [G].

Only activated sources are expanded: the work is Σ over activated (b, u) of |G_u|
— it grows with the activated states, never with ``|G|²`` over all groups. The CPU path
expands the (source, member) pairs with ``repeat_interleave`` and reduces with
``scatter_reduce(amax)``; the Triton path runs one program per activated source and
``atomic_max``-es into the output (values are ≥ 0, so the float max is exact).
"""
from __future__ import annotations

import torch

from .checks import check_ids, check_indptr, check_values, first_where
from .errors import InputError
from .dispatch import register


def check_inputs(A: torch.Tensor, w: torch.Tensor, node_group: torch.Tensor, node_t: torch.Tensor,
                 group_indptr: torch.Tensor, group_nodes: torch.Tensor, alpha: torch.Tensor) -> tuple[int, int]:
    """Validate the inputs of both paths (shapes, finite non-negative A, w and alpha, finite
    node_t, monotone group offsets, ids in range, groups listing their own members);
    returns ``(B, V)``.

    Raises :class:`InputError` naming the argument; the Triton kernel reads ``alpha``
    through ``node_group`` and ``node_t`` through ``group_nodes``, so it never launches on
    ids outside those arrays."""
    op = "group_decay_propagate"
    if A.ndim != 2 or A.shape != w.shape:
        raise InputError(f"{op}: A and w must both be [B, V], got {tuple(A.shape)} and {tuple(w.shape)}")
    B, V = A.shape
    if alpha.ndim != 1:
        raise InputError(f"{op}: alpha must be 1-D [G], got shape {tuple(alpha.shape)}")
    G = alpha.numel()
    for name, t in (("node_group", node_group), ("node_t", node_t), ("group_nodes", group_nodes)):
        if tuple(t.shape) != (V,):
            raise InputError(f"{op}: {name} must have shape ({V},) (V = A.shape[1]), got {tuple(t.shape)}")
    check_indptr(group_indptr, "group_indptr", G + 1, V, op)
    check_ids(node_group, "node_group", G, op, "group ids (G = len(alpha))")
    check_ids(group_nodes, "group_nodes", V, op, "node ids")
    check_values(A, "A", op)
    check_values(w, "w", op)
    check_values(alpha, "alpha", op)
    check_values(node_t, "node_t", op, non_negative=False)
    if V:  # group g's slice of group_nodes must hold members of g
        owner = torch.repeat_interleave(torch.arange(G, device=node_group.device),
                                        torch.diff(group_indptr.long()).to(node_group.device))
        wrong = node_group.long()[group_nodes.long().to(node_group.device)] != owner
        if bool(wrong.any()):
            j = first_where(wrong)[0]
            raise InputError(f"{op}: group_nodes disagrees with node_group: group_nodes[{j}] = "
                             f"{int(group_nodes[j])} is in group {int(node_group[int(group_nodes[j])])}, but "
                             f"group_indptr puts position {j} in group {int(owner[j])}")
    return B, V


def active_sources(A: torch.Tensor, node_group: torch.Tensor, group_indptr: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(query b, node u, group start, group size) of every activated state A[b, u] > 0."""
    b, u = torch.nonzero(A > 0, as_tuple=True)
    g = node_group.long()[u]
    start = group_indptr.long()[g]
    size = group_indptr.long()[g + 1] - start
    return b, u, start, size


def group_decay_propagate(A: torch.Tensor, w: torch.Tensor, node_group: torch.Tensor, node_t: torch.Tensor,
                          group_indptr: torch.Tensor, group_nodes: torch.Tensor, alpha: torch.Tensor,
                          device: str = "cpu") -> torch.Tensor:
    """CPU path: a_time [B, V] float32 (see module docstring)."""
    B, V = check_inputs(A, w, node_group, node_t, group_indptr, group_nodes, alpha)
    out = torch.zeros((B, V), dtype=torch.float32, device=A.device)
    if B == 0 or V == 0:
        return out
    A = A.float()
    b, u, start, size = active_sources(A, node_group, group_indptr)
    if len(u) == 0:
        return out
    # expand each source to its group's members (vectorised)
    rep = torch.repeat_interleave(torch.arange(len(u), device=A.device), size)
    first = torch.cumsum(size, 0) - size
    k = torch.arange(len(rep), device=A.device) - first[rep]
    v = group_nodes.long()[start[rep] + k]
    src = u[rep]
    keep = v != src
    rep, v, src = rep[keep], v[keep], src[keep]
    t = node_t.to(torch.float64)
    dt = (t[src] - t[v]).abs()
    g = node_group.long()[src]
    decay = torch.exp(-torch.tanh(alpha.to(torch.float64)[g] * dt)).to(torch.float32)
    val = A[b[rep], src] * decay
    flat = out.view(-1).scatter_reduce(0, b[rep] * V + v, val, "amax")
    return flat.view(B, V) * w.float()


register("group_decay_propagate", group_decay_propagate,
         triton="hopgraph.kernels.group_decay_propagate_triton:group_decay_propagate_triton",
         tensors=("A", "w", "node_group", "node_t", "group_indptr", "group_nodes", "alpha"))

"""The local structures of STITCH's sparse query (SPEC §2 query steps 1–3 and 6).

A question activates a few description texts; everything its prior and its walk touch lies near
them. These helpers cut, per batch, the parts of the index that the batch's activated states
and prior support reach, so the kernels run on ``[B, local]`` arrays instead of ``[B, N]`` or
``[B, n_nodes]``:

* :func:`incident_edges` / :func:`edge_members` / :func:`group_members`: the hypergraph's CSR
  arrays read at a few rows (never a scan of all nodes or edges);
* :func:`local_hypergraph`: the sub-hypergraph the spatial and temporal channels need (the edges
  incident to the activated states or to the members of their name groups, all their members,
  the groups of the activated states), with the kernels' index arrays renumbered;
* :func:`local_transition`: the chunk graph P restricted to a set of chunks, plus one **sink**
  row that receives the mass each column sends outside the set — a column-stochastic matrix
  whose walk, with the sink outside every region, is the localised walk of SPEC §2 step 6 on
  the full P (mass leaving the region is dropped; dangling chunks keep their self-loop);
* :func:`neighbour_entries`: the ``region_hops`` expansion of a sparse support.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch

from ....kernels.csr import CSR
from ....kernels.tensors import as_tensor
from ...graphs.store import device_arrays
from .hypergraph import TopicHypergraph
from ...sparse import row_edge_positions, row_entries, row_positions_tensors


def incident_edges(H: TopicHypergraph, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(segment, edge)``: every hyperedge of each of ``nodes`` (the edge holding each incidence
    position, found in ``edge_indptr``: O(log T) each, no array over all incidences)."""
    seg, inc = row_entries(H.node_indptr, H.node_incidence, nodes)
    return seg, np.searchsorted(H.edge_indptr, inc, side="right").astype(np.int64) - 1


def edge_members(H: TopicHypergraph, edges: np.ndarray) -> np.ndarray:
    """Every node of the hyperedges ``edges`` (with repeats)."""
    return row_entries(H.edge_indptr, H.edge_nodes, edges)[1]


def group_members(H: TopicHypergraph, groups: np.ndarray) -> np.ndarray:
    """Every node of the name groups ``groups`` (with repeats)."""
    return row_entries(H.group_indptr, H.group_nodes, groups)[1]


class LocalHypergraph(NamedTuple):
    """The kernels' inputs for a sub-hypergraph: ``nodes`` / ``edges`` (global ids, sorted) and
    the renumbered arrays of ``hyperedge_max_propagate`` and ``group_decay_propagate``.
    Groups: the name groups of the activated states, whole (``groups``), then one singleton
    group per other local node (no pairs: a_time = 0 there, as in the full index)."""

    nodes: np.ndarray
    edges: np.ndarray
    groups: np.ndarray
    edge_indptr: np.ndarray
    edge_nodes: np.ndarray
    node_indptr: np.ndarray
    node_incidence: np.ndarray
    inc_node: np.ndarray
    inc_edge: np.ndarray
    node_group: np.ndarray
    group_indptr: np.ndarray
    group_nodes: np.ndarray
    alpha: np.ndarray


def _renumber(sorted_ids: np.ndarray, ids: np.ndarray) -> np.ndarray:
    return np.searchsorted(sorted_ids, ids).astype(np.int64)


def local_hypergraph(H: TopicHypergraph, active_nodes: np.ndarray) -> LocalHypergraph:
    """The sub-hypergraph of the activated states ``active_nodes`` (module docstring): its edges
    are those incident to an activated state or to a member of an activated name group (the
    latter give the members' best hyperedge score, SPEC §2 step 3), its nodes all their members
    and the groups' members. On it, both channels equal the full index's at every local node,
    and every node where a channel is non-zero is local. Reads the rows it reaches only."""
    active = np.unique(np.asarray(active_nodes, np.int64))
    groups = np.unique(np.asarray(H.node_group[active])).astype(np.int64)
    members = np.unique(group_members(H, groups))
    edges = np.unique(incident_edges(H, np.union1d(active, members))[1])
    nodes = np.unique(np.concatenate([active, members, edge_members(H, edges)]))
    # edge → nodes CSR over the local edges (members in the index's order)
    e_seg, e_nodes = row_entries(H.edge_indptr, H.edge_nodes, edges)
    edge_indptr = np.zeros(len(edges) + 1, np.int64)
    np.cumsum(np.bincount(e_seg, minlength=len(edges)), out=edge_indptr[1:])
    edge_nodes = _renumber(nodes, e_nodes)
    # node → incidence positions CSR (node-sorted; positions in the local edge_nodes)
    order = np.argsort(edge_nodes, kind="stable")
    node_indptr = np.zeros(len(nodes) + 1, np.int64)
    np.cumsum(np.bincount(edge_nodes, minlength=len(nodes)), out=node_indptr[1:])
    # groups: the activated ones whole, then a singleton per other node
    g_seg, g_nodes = row_entries(H.group_indptr, H.group_nodes, groups)
    in_group = np.zeros(len(nodes), bool)
    node_group = np.empty(len(nodes), np.int64)
    local_g = _renumber(nodes, g_nodes)
    in_group[local_g] = True
    node_group[local_g] = g_seg
    others = np.flatnonzero(~in_group)
    node_group[others] = len(groups) + np.arange(len(others))
    group_sizes = np.asarray(H.group_indptr[groups + 1], np.int64) - np.asarray(H.group_indptr[groups], np.int64)
    sizes = np.concatenate([group_sizes, np.ones(len(others), np.int64)])
    group_indptr = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(sizes, out=group_indptr[1:])
    group_nodes = np.concatenate([local_g, others])
    return LocalHypergraph(
        nodes=nodes, edges=edges, groups=groups, edge_indptr=edge_indptr, edge_nodes=edge_nodes,
        node_indptr=node_indptr, node_incidence=order.astype(np.int64), inc_node=edge_nodes,
        inc_edge=e_seg, node_group=node_group, group_indptr=group_indptr, group_nodes=group_nodes,
        alpha=np.concatenate([H.group_alpha(groups), np.zeros(len(others), np.float32)]).astype(np.float32))


def local_transition(P: CSR, col_sums: np.ndarray, chunks: np.ndarray) -> Any:
    """P (column-stochastic, rows = targets) restricted to ``chunks`` (sorted), as an
    ``(M + 1) × (M + 1)`` CSR whose last row/column is the sink: column j's entries inside the set,
    and ``col_sums[j] −`` their sum (≥ 0) in the sink row. Dangling chunks (``col_sums`` 0) stay
    dangling; the sink column is empty (dangling too). A walk whose regions exclude the sink drops
    exactly the mass the localised walk on the full P drops. Work: the rows of ``chunks`` only.

    Where the graph store holds P and ``col_sums`` on the device
    (:func:`~hopgraph.engine.graphs.store.device_arrays`), the same CSR is cut there
    (:func:`local_transition_tensors`: only ``chunks`` crosses) and returned as its
    ``(indptr, indices, data)`` tensors."""
    P_dev, sums_dev = device_arrays(P), device_arrays(col_sums)
    if P_dev is not None and sums_dev is not None:
        return local_transition_tensors(*P_dev, sums_dev, chunks)
    chunks = np.asarray(chunks, np.int64)
    M = len(chunks)
    seg, pos = row_edge_positions(P.indptr, chunks)
    cols = np.asarray(P.indices[pos], np.int64)
    where = np.minimum(np.searchsorted(chunks, cols), max(M - 1, 0))
    inside = (chunks[where] == cols) if M else np.zeros(0, bool)
    seg, where, vals = seg[inside], where[inside], np.asarray(P.data[pos], np.float32)[inside]
    kept = np.bincount(where, weights=vals, minlength=M)
    sink = np.maximum(np.asarray(col_sums, np.float64)[chunks] - kept, 0.0)
    has_sink = sink > 0
    # entries come row by row (chunks ascending, the sink last), columns ascending within a row
    counts = np.bincount(seg, minlength=M + 1)
    counts[M] = int(has_sink.sum())
    indptr = np.zeros(M + 2, np.int64)
    np.cumsum(counts, out=indptr[1:])
    return CSR(indptr, np.concatenate([where, np.flatnonzero(has_sink)]).astype(np.int32),
               np.concatenate([vals, sink[has_sink].astype(np.float32)]), M + 1)


def local_transition_tensors(indptr: torch.Tensor, indices: torch.Tensor, data: torch.Tensor,
                             col_sums: torch.Tensor, chunks: np.ndarray | torch.Tensor
                             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`local_transition` on P's and ``col_sums``' tensors (on one device; ``chunks`` a
    host array, or a tensor there): the same
    entries in the same order (int64 indptr, int32 indices, float32 data), the sink's sums in
    float64 — on the CPU in the same order as the host's."""
    dev = indptr.device
    chunks_t = chunks.to(torch.int64) if isinstance(chunks, torch.Tensor) else \
        as_tensor(np.asarray(chunks, np.int64), device=dev, name="walk region chunks")
    M = len(chunks_t)
    seg, pos = row_positions_tensors(indptr, chunks_t)
    cols = indices[pos].to(torch.int64)
    where = torch.searchsorted(chunks_t, cols).clamp_max(max(M - 1, 0))
    inside = chunks_t[where] == cols if M else torch.zeros(0, dtype=torch.bool, device=dev)
    seg, where, vals = seg[inside], where[inside], data[pos][inside]
    kept = torch.bincount(where, weights=vals.to(torch.float64), minlength=M)
    sink = (col_sums[chunks_t] - kept).clamp_min(0.0)
    has_sink = sink > 0
    counts = torch.bincount(seg, minlength=M + 1)
    counts[M] = has_sink.sum()
    out_ptr = torch.zeros(M + 2, dtype=torch.int64, device=dev)
    torch.cumsum(counts, 0, out=out_ptr[1:])
    return (out_ptr, torch.cat([where, torch.nonzero(has_sink).ravel()]).to(torch.int32),
            torch.cat([vals, sink[has_sink].to(torch.float32)]))


#: the hypergraph arrays :func:`local_hypergraph_tensors` reads, as tensors on one device
HYPERGRAPH_TENSORS = ("node_group", "group_indptr", "group_nodes", "group_size", "node_indptr", "node_incidence",
                      "edge_indptr", "edge_nodes")


def local_hypergraph_tensors(h: dict[str, torch.Tensor], n_nodes: int, active_nodes: torch.Tensor
                             ) -> LocalHypergraph:
    """:func:`local_hypergraph` on the hypergraph's arrays as tensors (``h``, the names of
    :data:`HYPERGRAPH_TENSORS`, on one device; ``n_nodes`` states): the same sub-hypergraph, its
    fields tensors of the same values (int64 ids, float32 ``alpha``)."""
    dev = active_nodes.device

    def entries(indptr: str, values: str, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        seg, pos = row_positions_tensors(h[indptr], rows)
        return seg, h[values][pos].to(torch.int64)

    active = torch.unique(active_nodes.to(torch.int64))
    groups = torch.unique(h["node_group"][active].to(torch.int64))
    members = torch.unique(entries("group_indptr", "group_nodes", groups)[1])
    inc = entries("node_indptr", "node_incidence", torch.unique(torch.cat([active, members])))[1]
    edges = torch.unique(torch.searchsorted(h["edge_indptr"].to(torch.int64), inc, right=True) - 1)
    e_seg, e_nodes = entries("edge_indptr", "edge_nodes", edges)
    nodes = torch.unique(torch.cat([active, members, e_nodes]))
    edge_indptr = torch.zeros(len(edges) + 1, dtype=torch.int64, device=dev)
    torch.cumsum(torch.bincount(e_seg, minlength=len(edges)), 0, out=edge_indptr[1:])
    edge_nodes = torch.searchsorted(nodes, e_nodes)
    order = torch.sort(edge_nodes, stable=True).indices
    node_indptr = torch.zeros(len(nodes) + 1, dtype=torch.int64, device=dev)
    torch.cumsum(torch.bincount(edge_nodes, minlength=len(nodes)), 0, out=node_indptr[1:])
    g_seg, g_nodes = entries("group_indptr", "group_nodes", groups)
    local_g = torch.searchsorted(nodes, g_nodes)  # each state is in one group: no repeats
    in_group = torch.zeros(len(nodes), dtype=torch.bool, device=dev)
    in_group[local_g] = True
    node_group = torch.empty(len(nodes), dtype=torch.int64, device=dev)
    node_group[local_g] = g_seg
    others = torch.nonzero(~in_group).ravel()
    node_group[others] = len(groups) + torch.arange(len(others), device=dev)
    sizes = torch.cat([h["group_indptr"][groups + 1].to(torch.int64) - h["group_indptr"][groups].to(torch.int64),
                       torch.ones(len(others), dtype=torch.int64, device=dev)])
    group_indptr = torch.zeros(len(sizes) + 1, dtype=torch.int64, device=dev)
    torch.cumsum(sizes, 0, out=group_indptr[1:])
    n_groups = len(h["group_size"])
    alpha = (h["group_size"][groups].to(torch.float64) / (n_nodes / n_groups)).to(torch.float32) if n_groups else \
        torch.zeros(0, dtype=torch.float32, device=dev)
    return LocalHypergraph(
        nodes=nodes, edges=edges, groups=groups, edge_indptr=edge_indptr, edge_nodes=edge_nodes,
        node_indptr=node_indptr, node_incidence=order, inc_node=edge_nodes, inc_edge=e_seg, node_group=node_group,
        group_indptr=group_indptr, group_nodes=torch.cat([local_g, others]),
        alpha=torch.cat([alpha, torch.zeros(len(others), dtype=torch.float32, device=dev)]))


def neighbour_entries(adj_indptr: np.ndarray, adj_indices: np.ndarray, query: np.ndarray, node: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray]:
    """``(query, neighbour)`` of every (query, node) entry's neighbours in the adjacency CSR
    (with repeats)."""
    seg, nb = row_entries(adj_indptr, adj_indices, node)
    return np.asarray(query, np.int64)[seg], nb

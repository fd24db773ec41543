"""STITCH's influence stage (SPEC §2 steps 1–5, :meth:`~hopgraph.engine.pipelines.stitch.pipeline.STITCH.influence`)
on arrays the index's graph store holds on the device: the sub-hypergraph of the activated states is
cut there (:func:`~hopgraph.engine.pipelines.stitch.local_graph.local_hypergraph_tensors`), the topic
and chunk similarities are computed there from the held text embeddings and passage embeddings, and
only the questions go in (the activated (row, state) pairs with their activations are made there,
:func:`~.activation.activated_tensors`, or go in where the host made them); the chunks and their influence stay there
(:class:`~.device_walk.DeviceRows`) for the prior and the walk (:mod:`.device_walk`).

The same arithmetic as the host path, in the same order, on torch: equal on the CPU up to how the
two matrix products round (numpy's and torch's BLAS calls).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .... import kernels
from ....kernels.tensors import as_tensor
from .device_walk import DeviceRows
from .local_graph import local_hypergraph_tensors

#: the held arrays the device path reads besides :data:`~.local_graph.HYPERGRAPH_TENSORS`: each
#: hyperedge's text, each state's chunk, the text embeddings and the passage embeddings X
DEVICE_ARRAYS = ("edge_text", "node_chunk", "text_emb", "X")


def influence_tensors(held: dict[str, torch.Tensor], n_nodes: int, Q: np.ndarray | torch.Tensor,
                      act_q: np.ndarray | torch.Tensor, act_v: np.ndarray | torch.Tensor,
                      act_val: np.ndarray | torch.Tensor, spatial: bool, temporal: bool, device: str,
                      n_chunks: int) -> DeviceRows:
    """``I(c) = Σ_{v∈c} a(v) ln(1 + N_v)`` on the chunks of the sub-hypergraph of the activated
    states ``act_v`` (of batch rows ``act_q``, activation ``act_val``: host arrays, which go in, or
    tensors on the device, which stay there), as the host path computes it,
    on the held tensors ``held`` (the arrays of ``HYPERGRAPH_TENSORS`` and :data:`DEVICE_ARRAYS`);
    ``device``: the kernels' run device."""
    dev = held["X"].device
    if isinstance(act_v, torch.Tensor):  # made on the device (:func:`~.activation.activated_tensors`)
        q, v = act_q, act_v
    else:
        q, v = as_tensor(np.stack([np.asarray(act_q, np.int64), np.asarray(act_v, np.int64)]), device=dev,
                         name="activated (row, state) pairs")
    val = as_tensor(act_val, torch.float32, dev, "activations")
    Qt = as_tensor(Q, torch.float32, dev, "questions")  # a tensor (the batch's, on the device) passes as it is
    B = len(Qt)
    L = local_hypergraph_tensors(held, n_nodes, v)
    A = torch.zeros((B, len(L.nodes)), dtype=torch.float32, device=dev)
    A[q, torch.searchsorted(L.nodes, v)] = val
    S = (Qt @ held["text_emb"][held["edge_text"][L.edges].to(torch.int64)].to(torch.float32).T).clamp_min(0.0)
    channels = [A]
    if spatial:
        channels.append(kernels.call("hyperedge_max_propagate", A, S, L.edge_indptr, L.edge_nodes.to(torch.int32),
                                     L.node_indptr, L.node_incidence.to(torch.int32), device=device))
    node_chunk = held["node_chunk"][L.nodes].to(torch.int64)
    chunks, chunk_of = torch.unique(node_chunk, return_inverse=True)
    if temporal:
        chunk_sim = (Qt @ held["X"][chunks].to(torch.float32).T).clamp_min(0.0)
        best_edge = torch.zeros_like(A).scatter_reduce(1, L.inc_node.expand(B, -1), S[:, L.inc_edge], "amax")
        channels.append(kernels.call("group_decay_propagate", A, best_edge * chunk_sim[:, chunk_of], L.node_group,
                                     node_chunk, L.group_indptr, L.group_nodes.to(torch.int32), L.alpha,
                                     device=device))
    a = torch.stack(channels).mean(0)
    sizes = held["group_size"][held["node_group"][L.nodes].to(torch.int64)]
    log_group = torch.log1p(sizes.to(torch.float64)).to(torch.float32)
    I = torch.zeros((B, len(chunks)), dtype=torch.float64, device=dev)
    I.index_add_(1, chunk_of, (a * log_group).to(torch.float64))
    return DeviceRows(chunks, I, n_chunks)


def held_arrays(graphs: Any, H: Any, X: Any, name: str) -> dict[str, Any]:
    """The arrays :func:`influence_tensors` reads, given to the index's graph store to hold
    (:meth:`~hopgraph.engine.graphs.store.GraphStore.hold`; the index's own files keep them as
    they are), each named ``"{name} {array}"``."""
    from .local_graph import HYPERGRAPH_TENSORS

    items = {key: getattr(H, key) for key in HYPERGRAPH_TENSORS + DEVICE_ARRAYS[:3]}
    items["X"] = X
    return {key: graphs.hold(value, f"{name} {key}") for key, value in items.items()}

"""G3RAG's search (SPEC §1 query, both scorings of :mod:`hopgraph.engine.pipelines.g3rag.pipeline`) on the
device where the index's graph store holds the gain graph W: the relevance lists, their fusion, the softmax p, the diffusion
``y = pᵀT`` over W's seed rows (the ``sparse_diffusion`` op with ``entries=True``: the reached entries
stay on the device), the name links among the candidates, the cosines of reached passages
(``expand``) and the final top-k all run on tensors; the top-k ids and scores come out.

Each step is the host's (:mod:`hopgraph.engine.pipelines.g3rag.pipeline`, :mod:`.diffusion`, :mod:`.name_links`,
:mod:`.masked`) in the same order on torch: the same selections (duplicates dropped at their first place, ties toward
the lower passage), the diffusion's and the name links' float64 sums in the same order (bit for bit
on the CPU), and sums that may round the last bit differently where NumPy reduces pairwise (the
softmax's total, the cosines).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .... import kernels
from ...components.device_dense import gather_held_rows
from ...ranking import PAD_ID, PAD_SCORE
from ...ranking_tensors import first_places, topk_entries_tensors
from ...sparse import row_positions_tensors
from .diffusion import PAIR_BLOCK
from .masked import DIFFUSED, FILL, SEED, TIER_GAP

__all__ = ["DeviceGraph", "fused_search", "masked_search", "tiered_ranking_tensors"]


@dataclass(frozen=True)
class DeviceGraph:
    """What G3RAG's search reads on one device: W's ``(indptr, indices, data)``, the embeddings ``X``
    as the dense search holds them (row parts stacked in order; None when the search reads no
    embedding: no BM25 candidates, no ``expand``), the passages' names ``(indptr, names, idf, title)`` (None when the name links are off), the passage count
    ``n`` and the kernels' ``device`` (``"cuda"`` | ``"cpu"``)."""

    W: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    X: list[torch.Tensor] | None
    names: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None
    n: int
    device: str


# ---------------------------------------------------------------- selections
def tiered_ranking_tensors(parts: list[tuple[torch.Tensor, torch.Tensor, int]], k: int
                           ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`~.masked.tiered_ranking` and its ordering scores (:meth:`~.masked.TieredRanking.ordering_scores`)
    on tensors: the parts' entries in order, each id at its first place, cut at ``k``; returns
    ``(ids int64 [B, k], TIER_GAP · tier + score as float32 [B, k])``, padded with -1 / -inf."""
    ids = torch.cat([p[0].to(torch.int64) for p in parts], 1)
    scores = torch.cat([p[1].to(torch.float32) for p in parts], 1)
    tiers = torch.cat([torch.full(p[0].shape, p[2], dtype=torch.int8, device=ids.device) for p in parts], 1)
    B, dev = len(ids), ids.device
    out_ids = torch.full((B, k), PAD_ID, dtype=torch.int64, device=dev)
    out_scores = torch.full((B, k), PAD_SCORE, dtype=torch.float32, device=dev)
    if ids.shape[1] == 0 or k == 0:
        return out_ids, out_scores
    keep = first_places(ids)
    rank = torch.cumsum(keep, 1) - 1
    b, at = torch.nonzero(keep & (rank < k), as_tuple=True)
    slot = rank[b, at]
    out_ids[b, slot] = ids[b, at]
    value = TIER_GAP * tiers[b, at].to(torch.float64) + scores[b, at].to(torch.float64)
    out_scores[b, slot] = value.to(torch.float32)
    return out_ids, out_scores


def pair_keys_tensors(ids: torch.Tensor, n_cols: int) -> torch.Tensor:
    """:func:`~.diffusion.pair_keys` on tensors: ``b · n_cols + ids[b, i]``, -1 for padding."""
    rows = torch.arange(len(ids), dtype=torch.int64, device=ids.device)[:, None] * int(n_cols)
    return torch.where(ids >= 0, rows + ids, -1)


def lookup_tensors(keys: torch.Tensor, values: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
    """:func:`~.diffusion.lookup` on tensors: ``values`` (at increasing ``keys``) at each key of ``want``,
    0 where there is none (float32, ``want``'s shape)."""
    if len(keys) == 0:
        return torch.zeros(want.shape, dtype=torch.float32, device=want.device)
    pos = torch.searchsorted(keys, want).clamp_max(len(keys) - 1)
    return torch.where(keys[pos] == want, values[pos], 0.0)


def ratio(y: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``y / scale`` where ``scale`` > 0, else 0 (NumPy's ``divide(..., where=scale > 0)`` into zeros)."""
    return torch.where(scale > 0, y / torch.where(scale > 0, scale, 1.0), 0.0)


# ---------------------------------------------------------------- steps
def diffusion(graph: DeviceGraph, seeds: torch.Tensor, weights: torch.Tensor | None
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """``y = pᵀT`` (SPEC §1 query step 2) on every (query, passage) pair the seeds reach: the
    ``sparse_diffusion`` op's entries ``(keys b · n + j increasing, values float32)``, on the device."""
    return kernels.call("sparse_diffusion", seeds, weights, *graph.W, graph.n, entries=True, device=graph.device)


def fused_relevance(batch: Any, graph: DeviceGraph, depth: int, fusion_depth: int, bm25_weight: float | None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """:meth:`~hopgraph.engine.pipelines.g3rag.pipeline.G3RAG._relevance` on the device: the top-``depth``
    passages by ``cos + bm25_weight · bm25 / max bm25`` (float32, best first, ties toward the lower passage, -1 / -inf
    padding) from the batch's dense and BM25 lists (``bm25_weight`` None: the dense list only)."""
    d_ids, d_scores = batch.dense_topk_tensors(min(max(depth, fusion_depth), graph.n))
    if bm25_weight is None:
        return d_ids[:, :depth], d_scores[:, :depth]
    b_ids, b_scores = batch.bm25_topk_tensors(min(fusion_depth, graph.n))
    cand = torch.cat([d_ids, b_ids], 1)
    # the cosine of the dense candidates is their dense score; only the BM25 ones' rows are read
    b_cos = torch.einsum("bd,bkd->bk", batch.question_tensor(), gather_held_rows(graph.X, b_ids.clamp_min(0)))
    rel = torch.cat([d_scores.to(torch.float32), b_cos.to(torch.float32)], 1)
    head = b_scores[:, :1]
    top_bm25 = torch.where(torch.isfinite(head) & (head > 0), head, 1.0)
    in_bm25 = (cand[:, :, None] == b_ids[:, None, :]) & (b_ids[:, None, :] >= 0)
    lex = torch.where(in_bm25, (b_scores / top_bm25)[:, None, :], 0.0).amax(2).clamp_min(0.0)
    rel = torch.where(cand >= 0, rel + bm25_weight * lex, float("-inf"))
    # each passage at its first place (the dense list's), then by relevance, ties toward the lower id
    keep = first_places(cand)
    order = torch.sort(cand, dim=1, stable=True).indices
    order = order.gather(1, torch.sort(rel.gather(1, order), dim=1, descending=True, stable=True).indices)
    order = order.gather(1, torch.sort(keep.gather(1, order).to(torch.int8), dim=1, descending=True,
                                       stable=True).indices)[:, :depth]
    kept = keep.gather(1, order)
    return torch.where(kept, cand.gather(1, order), PAD_ID), torch.where(kept, rel.gather(1, order), PAD_SCORE)


def softmax_weights(cand: torch.Tensor, rel: torch.Tensor, tau: float) -> torch.Tensor:
    """``p = softmax(rel / tau)`` over each row's candidates (float32; 0 at padding, a row without
    candidates all 0), as :meth:`~hopgraph.engine.pipelines.g3rag.pipeline.G3RAG._search_fused` computes
    it."""
    valid = cand >= 0
    top = torch.where(valid[:, :1], rel[:, :1], 0.0)
    z = torch.where(valid, torch.exp((torch.where(valid, rel, top) - top) / tau), 0.0)
    return ratio(z, z.sum(1, keepdim=True)).to(torch.float32)


def group_pairs_tensors(indptr: torch.Tensor, members: torch.Tensor, max_size: int
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`~.name_links.group_pairs` on tensors: every ordered pair (a, b), a ≠ b, of members
    within each group of size 2..``max_size``, in the host's order."""
    sizes = indptr[1:] - indptr[:-1]
    keep = (sizes >= 2) & (sizes <= max_size)
    starts, sz = indptr[:-1][keep], sizes[keep]
    rep = torch.repeat_interleave
    pos = rep(starts, sz) + (torch.arange(int(sz.sum()), device=sz.device) - rep(torch.cumsum(sz, 0) - sz, sz))
    gsize = rep(sz, sz)
    a_pos = rep(pos, gsize)
    first = rep(rep(starts, sz), gsize)
    b_pos = first + torch.arange(len(a_pos), device=sz.device) - rep(torch.cumsum(gsize, 0) - gsize, gsize)
    off = a_pos != b_pos
    return members[a_pos[off]], members[b_pos[off]]


def name_link_diffusion_tensors(names: tuple[torch.Tensor, ...], cand: torch.Tensor, p: torch.Tensor,
                                title_weight: float) -> torch.Tensor:
    """:func:`~.name_links.name_link_diffusion` on tensors: ``y = pᵀT`` over the name links among each
    row's candidates (float32 [B, m]); the same pairs in the same order, float64 sums."""
    indptr, chunk_names, idf, title = names
    B, m = cand.shape
    flat = cand.reshape(-1)
    valid = torch.nonzero(flat >= 0).flatten()
    seg, pos = row_positions_tensors(indptr, flat[valid])
    slot_flat = valid[seg]
    name = chunk_names[pos].to(torch.int64)
    key = (slot_flat // m) * len(idf) + name
    order = torch.sort(key, stable=True).indices
    bounds = torch.nonzero(key[order][1:] != key[order][:-1]).flatten() + 1
    ends = torch.tensor([0, len(order)], dtype=torch.int64, device=cand.device)
    a, b = group_pairs_tensors(torch.cat([ends[:1], bounds, ends[1:]]), order, m)
    weight = idf[name[a]].to(torch.float64)
    if title_weight:
        weight = weight * torch.where(title[flat[slot_flat[b]]] == name[b], 1.0 + title_weight, 1.0)
    src, dst = slot_flat[a], slot_flat[b]
    zeros = torch.zeros(B * m, dtype=torch.float64, device=cand.device)
    row_sum = zeros.clone().index_add_(0, src, weight)
    flow = p.to(torch.float64).reshape(-1)[src] * ratio(weight, row_sum[src])
    return zeros.index_add_(0, dst, flow).reshape(B, m).to(torch.float32)


def pair_cosines_tensors(Q: torch.Tensor, X: list[torch.Tensor], query: torch.Tensor, column: torch.Tensor
                         ) -> torch.Tensor:
    """``Q[query[i]] · X[column[i]]`` (float32 [P]; X's row ``parts``), :data:`~.diffusion.PAIR_BLOCK`
    pairs at a time."""
    parts = [(Q[query[s:s + PAIR_BLOCK]] * gather_held_rows(X, column[s:s + PAIR_BLOCK])).sum(1)
             for s in range(0, len(query), PAIR_BLOCK)]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float32, device=Q.device)


# ---------------------------------------------------------------- the two scorings
def fused_search(batch: Any, graph: DeviceGraph, top_k: int, params: Any, bm25_weight: float | None, timer: Any
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """:meth:`~hopgraph.engine.pipelines.g3rag.pipeline.G3RAG._search_fused` on the device (module docstring):
    the ids and scores tensors of the top ``top_k``."""
    n, B = graph.n, len(batch)
    m = min(max(params.candidate_depth, top_k), n)
    with timer("relevance"):
        cand, rel = fused_relevance(batch, graph, m, params.fusion_depth, bm25_weight)
        valid = cand >= 0
    score = torch.where(valid, rel, float("-inf")).to(torch.float32)
    p = None
    if params.gamma > 0 or graph.names is not None:
        with timer("diffusion"):
            p = softmax_weights(cand, rel, params.tau)
    if graph.names is not None:
        with timer("name_links"):
            y_names = name_link_diffusion_tensors(graph.names, cand, p, params.title_links)
            score += params.name_links * ratio(y_names, y_names.amax(1, keepdim=True).clamp_min(0.0))
    b_of = torch.arange(B, device=cand.device)[:, None].expand(cand.shape)
    if params.gamma == 0:
        with timer("ranking"):
            return topk_entries_tensors(b_of[valid], cand[valid], score[valid], B, top_k)
    with timer("diffusion"):
        keys, y = diffusion(graph, cand, p)
        y_cand = lookup_tensors(keys, y, pair_keys_tensors(cand, n))
        if params.expand:
            y_max = torch.zeros(B, dtype=torch.float32, device=y.device).scatter_reduce(0, keys // max(n, 1), y, "amax")
            y_max = y_max[:, None]
        else:
            y_max = y_cand.amax(1, keepdim=True).clamp_min(0.0)
    with timer("ranking"):
        score += params.gamma * ratio(y_cand, y_max)
        if not params.expand:
            return topk_entries_tensors(b_of[valid], cand[valid], score[valid], B, top_k)
        query, column = keys // max(n, 1), keys % max(n, 1)
        out = ~torch.isin(keys, pair_keys_tensors(cand, n))
        allowed = batch.allowed_tensor()
        if allowed is not None:
            out &= allowed[column]
        query, column, y = query[out], column[out], y[out]
    with timer("cosine"):
        cos = pair_cosines_tensors(batch.question_tensor(), graph.X, query, column)
    with timer("ranking"):
        cos += params.gamma * ratio(y, y_max[query, 0])
        return topk_entries_tensors(torch.cat([b_of[valid], query]), torch.cat([cand[valid], column]),
                                    torch.cat([score[valid], cos]), B, top_k)


def masked_search(batch: Any, graph: DeviceGraph, top_k: int, ranking: tuple[torch.Tensor, torch.Tensor],
                  seed_k: int, timer: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """:meth:`~hopgraph.engine.pipelines.g3rag.pipeline.G3RAG._search_masked` on the device from the seed
    ``ranking`` (ids, scores tensors of the top ``seed_k + top_k``): seeds, ``y = pᵀT`` over their rows, seeds masked (and
    y = 0, and filtered passages), then seeds, diffused, fill; the ids and ordering scores."""
    rank_ids, rank_scores = ranking
    n, B = graph.n, len(batch)
    seeds = rank_ids[:, :seed_k]
    with timer("diffusion"):
        keys, y = diffusion(graph, seeds, None)
    with timer("ranking"):
        keep = ~torch.isin(keys, pair_keys_tensors(seeds, n)) & (y > 0)  # step 3: seed masking
        query, column = keys // max(n, 1), keys % max(n, 1)
        allowed = batch.allowed_tensor()
        if allowed is not None:
            keep &= allowed[column]
        diff_ids, diff_scores = topk_entries_tensors(query[keep], column[keep], y[keep], B, top_k)
        return tiered_ranking_tensors([(seeds, rank_scores[:, :seed_k], SEED), (diff_ids, diff_scores, DIFFUSED),
                                       (rank_ids[:, seed_k:], rank_scores[:, seed_k:], FILL)], top_k)

"""The ranking helpers of :mod:`hopgraph.engine.ranking` on torch tensors, for a batch searched on the
device (:attr:`~hopgraph.engine.components.query_batch.QueryBatch.device`): top lists stay there and
only the final top-k crosses back.

Each function is its host twin's contract on tensors, with the same arithmetic in the same order
where the host's scores are sums (:func:`rrf_topk_tensors`: the same float32 terms added in the
rankings' order, so the scores equal the host's bit for bit), the same selections (ties toward the
lower id, -inf / NaN not a result, padding -1 / -inf) and no host round trip: no ``.item()``,
``nonzero`` or Python loop over the batch, so a CUDA stream is never synchronised by them — except
:func:`topk_entries_tensors`, whose flat entries are selected by a boolean mask (its size is read
back on CUDA).
"""
from __future__ import annotations

import torch

from .ranking import PAD_ID, PAD_SCORE

#: the id given to padding while sorting (above every real id)
_PAD_KEY = torch.iinfo(torch.int64).max


def topk_columns(scores: torch.Tensor, cols: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`~hopgraph.engine.ranking.topk_entries` of dense rows: ``scores`` [B, M] at columns
    ``cols`` ([M], or [B, M] per row; increasing along each row), the top ``k`` of each row, higher
    score first, ties toward the lower column; a -inf or NaN score is not a result. Returns
    ``(ids int64 [B, k], scores float32 [B, k])`` padded with -1 / -inf."""
    B, M = scores.shape
    dev = scores.device
    s = scores.to(torch.float32)
    s = torch.where(torch.isfinite(s) | (s > 0), s, float("-inf"))
    cols = cols.to(torch.int64).expand(B, M)
    order = torch.sort(s, dim=1, descending=True, stable=True).indices[:, :k]  # stable: lower column first
    top = s.gather(1, order)
    ids = torch.where(top > float("-inf"), cols.gather(1, order), PAD_ID)
    if order.shape[1] < k:
        pad = k - order.shape[1]
        ids = torch.cat([ids, torch.full((B, pad), PAD_ID, dtype=torch.int64, device=dev)], 1)
        top = torch.cat([top, torch.full((B, pad), float("-inf"), dtype=torch.float32, device=dev)], 1)
    return ids, top


def rrf_topk_tensors(rankings: list[torch.Tensor], top_k: int, k: int = 60) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`~hopgraph.engine.ranking.rrf_topk` on tensors: the top ``top_k`` items of
    ``Σ_r 1 / (k + rank_r)`` over the rankings ``[B, m_r]`` (int ids, -1 = padding; an id at most
    once per row of one ranking), only the items the rankings hold scored. Each item's float32 sum
    adds the same terms in the rankings' order as the host (one term per ranking, added ranking by
    ranking), so the scores equal the host's bit for bit; ties toward the lower id. Returns
    ``(ids int64 [B, top_k], scores float32 [B, top_k])`` padded with -1 / -inf."""
    if not rankings:
        return (torch.full((0, top_k), PAD_ID, dtype=torch.int64),
                torch.full((0, top_k), float("-inf"), dtype=torch.float32))
    dev, B = rankings[0].device, rankings[0].shape[0]
    lists = [r.to(torch.int64) for r in rankings]
    keys = torch.cat([torch.where(r >= 0, r, _PAD_KEY) for r in lists], 1)
    M = keys.shape[1]
    if M == 0:
        return topk_columns(torch.zeros((B, 0), device=dev), torch.zeros(0, dtype=torch.int64, device=dev), top_k)
    ordered = torch.sort(keys, dim=1).values.contiguous()
    first = torch.ones_like(ordered, dtype=torch.bool)
    first[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    slot = torch.cumsum(first, 1) - 1  # each distinct id of a row: one slot, in increasing id order
    item = torch.full((B, M), _PAD_KEY, dtype=torch.int64, device=dev).scatter_(1, slot, ordered)
    fused = torch.zeros((B, M + 1), dtype=torch.float32, device=dev)  # slot M: where padding adds its 0
    for r in lists:
        ranks = torch.arange(1, r.shape[1] + 1, dtype=torch.float32, device=dev)
        term = (1.0 / (k + ranks)).expand(B, -1)
        valid = r >= 0
        at = slot.gather(1, torch.searchsorted(ordered, torch.where(valid, r, _PAD_KEY)).clamp_max(M - 1))
        fused.scatter_add_(1, torch.where(valid, at, M), torch.where(valid, term, 0.0))
    scores = torch.where(item != _PAD_KEY, fused[:, :M], float("-inf"))
    return topk_columns(scores, item, top_k)


def fill_lowest_tensors(ids: torch.Tensor, scores: torch.Tensor, allowed: torch.Tensor | None, n: int,
                        score: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`~hopgraph.engine.ranking.fill_lowest` on tensors: padded ranked lists
    ``(ids int64 [B, k], scores float32 [B, k])`` (valid entries first) completed with the lowest
    allowed ids (``allowed`` bool [n] on the same device, None = all of ``range(n)``) not already
    listed, each with ``score``. Returns new tensors."""
    B, k = ids.shape
    dev = ids.device
    if k == 0:
        return ids.clone(), scores.clone()
    want = torch.arange(1, 2 * k + 1, device=dev)  # a row lists at most k ids: the first 2k allowed suffice
    if allowed is None:
        pool = want - 1
    else:
        pool = torch.searchsorted(torch.cumsum(allowed.to(torch.int64), 0), want)  # the j-th allowed id
    pool_ok = pool < n
    have = (ids >= 0).sum(1, keepdim=True)
    listed_ids = torch.sort(torch.where(ids >= 0, ids, torch.iinfo(torch.int64).max), 1).values
    candidates = pool.to(ids.dtype).expand(B, -1).contiguous()
    at = torch.searchsorted(listed_ids, candidates).clamp_max(k - 1)
    listed = listed_ids.gather(1, at) == candidates  # [B, 2k]: no [B, 2k, k] comparison
    free = ~listed & pool_ok[None, :]
    place = have + torch.cumsum(free, 1) - 1
    place = torch.where(free & (place < k), place, k)  # column k: where the ids that do not fit go
    out_ids = torch.cat([ids, torch.full((B, 1), PAD_ID, dtype=ids.dtype, device=dev)], 1)
    out_scores = torch.cat([scores, torch.full((B, 1), float("-inf"), dtype=scores.dtype, device=dev)], 1)
    out_ids.scatter_(1, place, pool.expand(B, -1).to(ids.dtype))
    out_scores.scatter_(1, place, torch.full(place.shape, score, dtype=scores.dtype, device=dev))
    return out_ids[:, :k], out_scores[:, :k]


def topk_entries_tensors(query: torch.Tensor, column: torch.Tensor, score: torch.Tensor, n_queries: int, k: int
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`~hopgraph.engine.ranking.topk_entries` on tensors: per query the ``k`` entries of highest
    float32 score (ties toward the lower column; -inf and NaN are no result), ``(ids int64 [B, k],
    scores float32 [B, k])`` padded with -1 / -inf."""
    dev = score.device
    ids = torch.full((n_queries, k), PAD_ID, dtype=torch.int64, device=dev)
    out = torch.full((n_queries, k), PAD_SCORE, dtype=torch.float32, device=dev)
    score = score.to(torch.float32)
    keep = torch.isfinite(score) | (score > 0)
    query, column, score = query[keep].to(torch.int64), column[keep].to(torch.int64), score[keep]
    order = torch.sort(column, stable=True).indices
    order = order[torch.sort(score[order], descending=True, stable=True).indices]
    order = order[torch.sort(query[order], stable=True).indices]
    query, column, score = query[order], column[order], score[order]
    rank = torch.arange(len(query), device=dev) - torch.searchsorted(query, query)
    top = rank < k
    ids[query[top], rank[top]] = column[top]
    out[query[top], rank[top]] = score[top]
    return ids, out


def first_places(ids: torch.Tensor) -> torch.Tensor:
    """Bool ``[B, m]``: the entries of ``ids`` (-1 = none) that hold their id's first place in their row."""
    order = torch.sort(ids, dim=1, stable=True).indices  # equal ids stay in list order
    by_id = ids.gather(1, order)
    first = torch.ones_like(by_id, dtype=torch.bool)
    first[:, 1:] = by_id[:, 1:] != by_id[:, :-1]
    out = torch.zeros_like(first).scatter_(1, order, first)
    return out & (ids >= 0)

"""STITCH's prior, walk and ranking (SPEC §2 steps 5–7) on the device where the index's graph store
holds the chunk graph P: the relevance (the batch's top lists on the device) and the influence
stage's output (:mod:`.device_influence`) stay there, are normalised, mixed, restricted to the
filter, grown into the activated regions and walked there; π stays there, is fused with the
relevance and ranked there, and only the top-k ids and scores come back. Only the questions (and
the filter, when there is one) go in.

Each step is the host's (:mod:`.walk`) in the same order on torch: the same selections (the
region's support threshold, the seeds' ties toward the lower column, the ranking's), sums that may
round the last bit differently (torch's reductions instead of NumPy's pairwise ones), the
relevance's cosine on π's support a torch product (equal up to how the two products round).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .... import kernels
from ....kernels.tensors import as_numpy, as_tensor
from ...components.query_batch import QueryBatch
from ...sparse import row_positions_tensors
from ...timing import StageTimer
from .local_graph import local_transition_tensors
from .local_rows import LocalRows


#: the id a row of a ranking brought back from the device holds when that row is to be searched
#: again apart (its prior is uniform over the corpus, or the filter left it no mass)
APART = -2


@dataclass(frozen=True)
class DeviceRows:
    """:class:`~.local_rows.LocalRows` whose ``cols`` (int64 [M], increasing) and ``values``
    ([B, M]) are tensors on one device."""

    cols: torch.Tensor
    values: torch.Tensor
    n: int

    def __len__(self) -> int:
        return len(self.values)

    @classmethod
    def from_ids(cls, ids: torch.Tensor, scores: torch.Tensor, n: int) -> "DeviceRows":
        """:meth:`LocalRows.from_ids <.local_rows.LocalRows.from_ids>` on tensors: top lists ``ids``
        [B, k] (-1 = padding) with their ``scores``, over the sorted union of the listed ids."""
        ok = ids >= 0
        cols = torch.unique(ids[ok])
        values = torch.zeros((len(ids), len(cols)), dtype=scores.dtype, device=scores.device)
        rows = torch.arange(len(ids), device=ids.device)[:, None].expand(ids.shape)
        values[rows[ok], torch.searchsorted(cols, ids[ok])] = scores[ok]
        return cls(cols, values, n)

    @classmethod
    def empty(cls, B: int, n: int, device: torch.device) -> "DeviceRows":
        """``B`` all-zero rows over no column."""
        return cls(torch.zeros(0, dtype=torch.int64, device=device),
                   torch.zeros((B, 0), dtype=torch.float64, device=device), n)

    def host(self) -> LocalRows:
        """The rows as :class:`~.local_rows.LocalRows` (both arrays brought to the host)."""
        return LocalRows(as_numpy(self.cols), as_numpy(self.values), self.n)

    def rows(self, r: np.ndarray) -> "DeviceRows":
        """The rows ``r`` (host int indices) over the same columns: itself when ``r`` is every row
        in order (nothing crosses), else ``r`` goes in."""
        r = np.asarray(r, np.int64)
        if len(r) == len(self) and np.array_equal(r, np.arange(len(self))):
            return self
        return DeviceRows(self.cols, self.values[as_tensor(r, device=self.values.device, name="batch rows")], self.n)

    def on(self, cols: torch.Tensor) -> "DeviceRows":
        """:meth:`LocalRows.on <.local_rows.LocalRows.on>`: the same rows over ``cols`` (sorted;
        entries on columns missing from it dropped)."""
        values = torch.zeros((len(self), len(cols)), dtype=self.values.dtype, device=self.values.device)
        if len(self.cols) and len(cols):
            pos = torch.searchsorted(cols, self.cols).clamp_max(len(cols) - 1)
            found = cols[pos] == self.cols
            values[:, pos[found]] = self.values[:, found]
        return DeviceRows(cols, values, self.n)


def rows_summing_to_one(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row of ``values`` [B, M] divided by its sum (0 where the sum is not > 0), and the rows
    whose sum is not > 0 (bool [B], on the device)."""
    s = values.sum(1, keepdim=True)
    return torch.where(s > 0, values / torch.where(s > 0, s, 1.0), 0.0), s[:, 0] <= 0


def normalised(I: DeviceRows) -> tuple[DeviceRows, torch.Tensor]:
    """``p = I / Σ I`` per row (0 where Σ I = 0), and the rows whose Σ I is 0 (bool [B], on the
    device: their prior is uniform over the corpus, walked apart on the host)."""
    p, empty = rows_summing_to_one(I.values)
    return DeviceRows(I.cols, p, I.n), empty


def top_k_distribution(rel: torch.Tensor, k: int, n: int) -> torch.Tensor:
    """:func:`~.walk.top_k_distribution` of rows ``rel`` (float64 [B, M], on local columns when
    ``n`` > M): each row's ``k`` best columns (ties toward the lower column, ranked in float32 as
    :func:`~hopgraph.engine.ranking.topk_rows`), clipped at 0, normalised to sum 1; a row with
    nothing positive is uniform when ``n`` == M, else 0."""
    out = torch.zeros_like(rel)
    if rel.numel() == 0:
        return out
    kk = min(k, rel.shape[1])
    top = torch.sort(rel.to(torch.float32), dim=1, descending=True, stable=True).indices[:, :kk]
    out.scatter_(1, top, rel.gather(1, top))
    out, empty = rows_summing_to_one(out.clamp_min(0.0))
    if n == rel.shape[1]:
        out[empty] = 1.0 / rel.shape[1]
    return out


def on_device(rows: LocalRows | DeviceRows, device: torch.device) -> DeviceRows:
    """``rows`` as :class:`DeviceRows` on ``device`` (host rows go in: their columns and values)."""
    if isinstance(rows, DeviceRows):
        return rows
    return DeviceRows(as_tensor(np.asarray(rows.cols, np.int64), device=device, name="relevance chunks"),
                      as_tensor(np.asarray(rows.values), device=device, name="relevance"), rows.n)


def finished_prior(p: DeviceRows, rel: LocalRows | DeviceRows, prior_mix: float, n_seeds: int,
                   allowed: np.ndarray | torch.Tensor | None) -> tuple[DeviceRows, torch.Tensor | None]:
    """:meth:`~.walk.ChunkGraphWalk.finish_prior` on the device: ``p`` mixed with the relevance
    ``rel`` on its ``n_seeds`` best chunks (``prior_mix``; ``rel`` goes in when on the host),
    restricted to the ``allowed`` passages (the filter goes in when on the host) and renormalised;
    returns it and the rows left without mass (bool [B] on the device; None without a filter)."""
    dev = p.values.device
    if prior_mix > 0:
        rel = on_device(rel, dev)
        cols = torch.unique(torch.cat([p.cols, rel.cols]))
        p, r = p.on(cols), rel.on(cols)
        p = DeviceRows(cols, (1.0 - prior_mix) * p.values
                       + prior_mix * top_k_distribution(r.values.to(torch.float64), n_seeds, p.n), p.n)
    if allowed is None:
        return p, None
    ok = as_tensor(allowed, torch.bool, dev, "filter")[p.cols]
    values, empty = rows_summing_to_one(torch.where(ok[None, :], p.values, 0.0))
    return DeviceRows(p.cols, values, p.n), empty


def region(p: DeviceRows, adjacency: tuple[torch.Tensor, ...], hops: int, rtol: float
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """:meth:`~.walk.ChunkGraphWalk.region` on the device: each row's support (``p ≥ rtol · max p``)
    grown by ``hops`` hops over the chunk graph's adjacency ``(indptr, indices, …)``; returns the
    region's columns (sorted) and its bool rows [B, M]."""
    v, dev, n = p.values, p.values.device, max(p.n, 1)
    top = v.max(1, keepdim=True).values if v.shape[1] else torch.zeros((len(v), 1), dtype=v.dtype, device=dev)
    q, j = torch.nonzero((v > 0) & (v >= rtol * top), as_tuple=True)
    cols = p.cols[j]
    for _ in range(hops):
        seg, pos = row_positions_tensors(adjacency[0], cols)
        keys = torch.unique(torch.cat([q * n + cols, q[seg] * n + adjacency[1][pos].to(torch.int64)]))
        q, cols = keys // n, keys % n
    reg_cols, where = torch.unique(cols, return_inverse=True)
    mask = torch.zeros((len(v), len(reg_cols)), dtype=torch.bool, device=dev)
    mask[q, where] = True
    return reg_cols, mask


def local_walk(p: DeviceRows, P: tuple[torch.Tensor, ...], col_sums: torch.Tensor, hops: int, rtol: float,
               damping: float, tol: float, max_iter: int, device: str) -> DeviceRows:
    """:meth:`~.walk.ChunkGraphWalk.walk` (localised) on the device: ``batched_ppr`` on P's cut to
    the batch's regions plus a sink, each row confined to its region; π stays there, on its columns."""
    cols, mask = region(p, P, hops, rtol)
    if not len(cols):
        return DeviceRows.empty(len(p), p.n, p.values.device)
    sub = local_transition_tensors(*P, col_sums, cols)
    pr = torch.zeros((len(p), len(cols) + 1), dtype=torch.float64, device=cols.device)
    pr[:, :-1] = p.on(cols).values
    inside = torch.zeros(pr.shape, dtype=torch.bool, device=cols.device)
    inside[:, :-1] = mask
    pi, _ = kernels.call("batched_ppr", sub, pr, d=damping, tol=tol, max_iter=max_iter, region=inside, device=device)
    return DeviceRows(cols, pi[:, :-1], p.n)


def whole_walk(p: DeviceRows, P: Any, damping: float, tol: float, max_iter: int, device: str) -> DeviceRows:
    """The unlocalised walk (``localise=False``) on the device: ``batched_ppr`` on the whole P
    (its tensors, ``P``) from ``p`` on every chunk; π stays there."""
    full = p.on(torch.arange(p.n, dtype=torch.int64, device=p.values.device))
    pi, _ = kernels.call("batched_ppr", P, full.values, d=damping, tol=tol, max_iter=max_iter, device=device)
    return DeviceRows(full.cols, pi, p.n)


def normalise_max(values: torch.Tensor) -> torch.Tensor:
    """:func:`~.walk.normalise_max` on a tensor: rows divided by their maximum in their own dtype
    (rows with max ≤ 0 stay 0), as float64."""
    if not values.shape[1]:
        return torch.zeros(values.shape, dtype=torch.float64, device=values.device)
    m = values.max(1, keepdim=True).values
    return torch.where(m > 0, values / torch.where(m > 0, m, 1), 0).to(torch.float64)


def rank_positions(values: torch.Tensor, depth: int, rrf_k: int) -> torch.Tensor:
    """Each row's reciprocal rank ``1 / (rrf_k + rank)`` (float32) at its ``depth`` best positive
    columns (ranked in float32, ties toward the lower column), 0 elsewhere: the host's
    ``reciprocal_rank_fusion([topk_rows(...)])`` on local columns."""
    from ...ranking_tensors import topk_columns

    B, M = values.shape
    top, _ = topk_columns(torch.where(values > 0, values, float("-inf")),
                          torch.arange(M, device=values.device), min(depth, M))
    ranks = torch.arange(1, top.shape[1] + 1, dtype=torch.float32, device=values.device)
    out = torch.zeros((B, M + 1), dtype=torch.float32, device=values.device)
    out.scatter_(1, torch.where(top >= 0, top, M), (1.0 / (rrf_k + ranks)).expand(B, -1).contiguous())
    return out[:, :M]


def fused(pi: DeviceRows, rel: DeviceRows, balance: float, fusion: str, depth: int, rrf_k: int) -> DeviceRows:
    """:meth:`~.walk.ChunkGraphWalk.fuse` on the device: π and the relevance on the union of their
    columns, ``(1 − λ) π/max π + λ rel/max rel`` (float64, then float32), or (``fusion="rrf"``) the
    weighted reciprocal ranks of their ``depth`` best positive columns (float32)."""
    cols = torch.unique(torch.cat([pi.cols, rel.cols]))
    pv, rv = pi.on(cols).values, rel.on(cols).values
    if fusion == "rrf":
        values = (1.0 - balance) * rank_positions(pv, depth, rrf_k) + balance * rank_positions(rv, depth, rrf_k)
    else:
        values = ((1.0 - balance) * normalise_max(pv) + balance * normalise_max(rv)).to(torch.float32)
    return DeviceRows(cols, values, pi.n)


def cosine_rows(Q: torch.Tensor, X: torch.Tensor, cols: torch.Tensor, allowed: torch.Tensor | None, n: int
                ) -> DeviceRows:
    """:meth:`~.walk.ChunkGraphWalk.cosine_on` on the device: ``max(0, Q · X[cols])`` (float32; 0 at
    the passages ``allowed`` excludes) of the questions ``Q`` [B, d] on chunks ``cols``."""
    sims = (Q @ X[cols].to(torch.float32).T).clamp_min(0.0)
    if allowed is not None:
        sims = torch.where(allowed[cols][None, :], sims, 0.0)
    return DeviceRows(cols, sims, n)


def ranked(final: DeviceRows, top_k: int, allowed: torch.Tensor | None, apart: torch.Tensor | None = None
           ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`~.walk.rank_local` on the device: the positive allowed entries best first, then the
    lowest allowed ids with score 0; only these top-``top_k`` ids and scores come to the host. The
    rows ``apart`` (bool [B] on the device) come back as :data:`APART` ids instead: they are
    searched again apart."""
    from ...ranking_tensors import fill_lowest_tensors, topk_columns

    v = final.values.to(torch.float32)
    keep = v > 0
    if allowed is not None:
        keep &= allowed[final.cols][None, :]
    ids, scores = topk_columns(torch.where(keep, v, float("-inf")), final.cols, top_k)
    ids, scores = fill_lowest_tensors(ids, scores, allowed, final.n)
    if apart is not None:
        ids = torch.where(apart[:, None], APART, ids)
    return as_numpy(ids), as_numpy(scores)


def resident_search(walk: Any, batch: QueryBatch, k: int, params: Any, timer: StageTimer
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Steps 5–7 of a batch on the device for the chunk-graph walk ``walk``
    (:class:`~.walk.ChunkGraphWalk`, where it holds its prior's arrays there) in one pass, with no
    host round trip before the ranking: the relevance from the batch's top lists, the prior, the
    walk, the fusion and the top-``k`` there; only the top-``k`` ids and scores come back. The rows
    whose prior is uniform over the corpus (Σ I = 0) or that the filter left without mass come back
    marked (:data:`APART`) and are searched again apart (``walk.batch_scores``: walked on every
    chunk on the host); a row's ranking never depends on the other rows."""
    with timer("relevance"):
        rel = walk.relevance_rows(batch, k, params, resident=True)
    with timer("prior"):
        p, uniform = walk.prior_rows(batch, rel, params)
    if not isinstance(p, DeviceRows):  # no prior on the device (nothing activated in the batch)
        return walk._ranking(walk.scores_of(batch, rel, p, uniform, params, timer), k, batch, timer)
    with timer("prior"):
        p, empty = finished_prior(p, rel, params.prior_mix, params.n_seeds, batch.allowed_tensor())
    if params.ppr:
        with timer("ppr"):
            p = walk.resident_walk(p, params)
    final = walk.final_scores(batch, np.arange(len(batch)), p, rel, params, timer)
    with timer("ranking"):
        ids, scores = ranked(final, k, batch.allowed_tensor(), uniform if empty is None else uniform | empty)
    apart = np.flatnonzero(ids[:, 0] == APART)
    if len(apart):
        texts = None if batch.texts is None else [batch.texts[i] for i in apart]
        again = QueryBatch(batch.components, batch.Q[apart], texts, batch.allowed)
        ids[apart], scores[apart] = walk._ranking(walk.batch_scores(again, timer, k, params), k, again, timer)
    return ids, scores

"""STITCH's prior and walk (SPEC §2 steps 5–6) on the device where the index's graph store holds
the chunk graph P: the influence stage's output (:mod:`.device_influence`) stays there, is
normalised, mixed with the relevance, restricted to the filter, grown into the activated regions
and walked there; π comes back with its columns. Only the relevance lists (and the filter, when
there is one) go in; nothing of the prior makes a host round trip.

Each step is the host's (:mod:`.walk`) in the same order on torch: the same selections (the
region's support threshold, the seeds' ties toward the lower column), sums that may round the
last bit differently (torch's reductions instead of NumPy's pairwise ones).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .... import kernels
from ....kernels.tensors import as_numpy, as_tensor
from ...sparse import row_positions_tensors
from .local_graph import local_transition_tensors
from .local_rows import LocalRows


@dataclass(frozen=True)
class DeviceRows:
    """:class:`~.local_rows.LocalRows` whose ``cols`` (int64 [M], increasing) and ``values``
    ([B, M]) are tensors on one device."""

    cols: torch.Tensor
    values: torch.Tensor
    n: int

    def __len__(self) -> int:
        return len(self.values)

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


def normalised(I: DeviceRows) -> tuple[DeviceRows, np.ndarray]:
    """``p = I / Σ I`` per row (0 where Σ I = 0), and the rows whose Σ I is 0 (host bool [B]:
    their prior is uniform over the corpus, walked on the host)."""
    p, empty = rows_summing_to_one(I.values)
    return DeviceRows(I.cols, p, I.n), as_numpy(empty)


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


def finished_prior(p: DeviceRows, rel: LocalRows, prior_mix: float, n_seeds: int, allowed: np.ndarray | None
                   ) -> tuple[DeviceRows, np.ndarray]:
    """:meth:`~.walk.ChunkGraphWalk.finish_prior` on the device: ``p`` mixed with the relevance
    ``rel`` on its ``n_seeds`` best chunks (``prior_mix``; ``rel`` goes in), restricted to the
    ``allowed`` passages (the filter goes in) and renormalised; returns it and the rows left
    without mass (host bool [B]; all False without a filter, nothing crossing)."""
    dev = p.values.device
    if prior_mix > 0:
        rel_cols = as_tensor(np.asarray(rel.cols, np.int64), device=dev, name="relevance chunks")
        rel_values = as_tensor(np.asarray(rel.values), device=dev, name="relevance")
        cols = torch.unique(torch.cat([p.cols, rel_cols]))
        p, r = p.on(cols), DeviceRows(rel_cols, rel_values, rel.n).on(cols)
        p = DeviceRows(cols, (1.0 - prior_mix) * p.values
                       + prior_mix * top_k_distribution(r.values.to(torch.float64), n_seeds, p.n), p.n)
    if allowed is None:
        return p, np.zeros(len(p), bool)
    ok = as_tensor(np.asarray(allowed, bool), device=dev, name="filter")[p.cols]
    values, empty = rows_summing_to_one(torch.where(ok[None, :], p.values, 0.0))
    return DeviceRows(p.cols, values, p.n), as_numpy(empty)


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
               damping: float, tol: float, max_iter: int, device: str) -> LocalRows:
    """:meth:`~.walk.ChunkGraphWalk.walk` (localised) on the device: ``batched_ppr`` on P's cut to
    the batch's regions plus a sink, each row confined to its region; π and its columns come out."""
    cols, mask = region(p, P, hops, rtol)
    if not len(cols):
        return LocalRows.empty(len(p), p.n)
    sub = local_transition_tensors(*P, col_sums, cols)
    pr = torch.zeros((len(p), len(cols) + 1), dtype=torch.float64, device=cols.device)
    pr[:, :-1] = p.on(cols).values
    inside = torch.zeros(pr.shape, dtype=torch.bool, device=cols.device)
    inside[:, :-1] = mask
    pi, _ = kernels.call("batched_ppr", sub, pr, d=damping, tol=tol, max_iter=max_iter, region=inside, device=device)
    return LocalRows(as_numpy(cols), as_numpy(pi[:, :-1]), p.n)


def whole_walk(p: DeviceRows, P: Any, damping: float, tol: float, max_iter: int, device: str) -> LocalRows:
    """The unlocalised walk (``localise=False``) on the device: ``batched_ppr`` on the whole P
    (its tensors, ``P``) from ``p`` on every chunk; π comes out."""
    full = p.on(torch.arange(p.n, dtype=torch.int64, device=p.values.device))
    pi, _ = kernels.call("batched_ppr", P, full.values, d=damping, tol=tol, max_iter=max_iter, device=device)
    return LocalRows(np.arange(p.n, dtype=np.int64), as_numpy(pi), p.n)

"""The dense + BM25 candidate list of a query batch fused by reciprocal rank: the ``hybrid`` pipeline's
ranking and the "hybrid seeds / candidates" option of the graph pipelines, computed from the index's
shared components."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ..ranking import rrf_topk
from ..timing import StageTimer
from .query_batch import QueryBatch

if TYPE_CHECKING:
    import torch

#: the RRF constant of the hybrid lists (``Σ 1 / (rrf_k + rank)``)
RRF_K = 60


def hybrid_ranking(batch: QueryBatch, k: int, depth: int = 100, rrf_k: int = RRF_K,
                   timer: StageTimer | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` rows by reciprocal rank fusion of the dense and BM25 top-``depth`` lists.

    Scores are the RRF sums ``Σ 1/(rrf_k + rank)``; ties break toward the lower row
    (:func:`~hopgraph.engine.ranking.topk_rows`); rows in neither list are padding. Only the
    rows of the two lists are scored (:func:`~hopgraph.engine.ranking.rrf_topk`): no ``[B, N]``
    array, O(B · depth) whatever the corpus size. The lists are drawn under the
    batch's filter, so every returned row is allowed, and ``k`` come back whenever the two
    lists hold that many.
    """
    return _fused(batch.dense_topk, batch.bm25_topk, rrf_topk, k, depth, rrf_k, timer)


def hybrid_ranking_tensors(batch: QueryBatch, k: int, depth: int = 100, rrf_k: int = RRF_K,
                           timer: StageTimer | None = None) -> tuple["torch.Tensor", "torch.Tensor"]:
    """:func:`hybrid_ranking` on a batch searched on the device (``batch.device`` not None): the two
    lists read there (:meth:`~.query_batch.QueryBatch.dense_topk_tensors`,
    :meth:`~.query_batch.QueryBatch.bm25_topk_tensors`) and fused there
    (:func:`~hopgraph.engine.ranking_tensors.rrf_topk_tensors`: the host's float32 sums, bit for
    bit, ties toward the lower row); ``(ids int64 [B, k], scores float32 [B, k])`` tensors on the
    device."""
    from ..ranking_tensors import rrf_topk_tensors

    return _fused(batch.dense_topk_tensors, batch.bm25_topk_tensors, rrf_topk_tensors, k, depth, rrf_k, timer)


def _fused(dense: Callable[[int], Any], bm25: Callable[[int], Any], fuse: Callable[..., Any], k: int, depth: int,
           rrf_k: int, timer: StageTimer | None) -> Any:
    """``fuse`` of the ``dense`` and ``bm25`` top-``max(depth, k)`` ids, timed per stage."""
    depth = max(depth, k)
    timer = timer or StageTimer()
    with timer("dense"):
        d_ids, _ = dense(depth)
    with timer("bm25"):
        b_ids, _ = bm25(depth)
    with timer("fusion"):
        return fuse([d_ids, b_ids], k, k=rrf_k)

"""The result list of G3RAG's published query (SPEC §1 query step 4), built for a whole batch at once.

Step 4: the seeds (in relevance order), then the top diffused passages, filled up to ``top_k`` with
the next most relevant passages. Each entry keeps the score it was ranked by in its own part of the
list — a seed's and a fill passage's relevance (the dense cosine, or the fusion score of hybrid
seeds), a diffused passage's ``y = pᵀT`` — and its *tier*, the part it comes from
(:data:`SEED`, :data:`DIFFUSED`, :data:`FILL`). A passage appears once, at its first place.

The pipeline contract asks for one score per entry, non-increasing down the list; the list is ordered
by (tier, score), so :meth:`TieredRanking.ordering_scores` gives ``TIER_GAP · tier + score``, with the
gap larger than any score's range within a tier (cosines and fusion scores are at most 1, ``y`` is at
most 1 as a probability mass).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ...ranking import PAD_ID, PAD_SCORE

#: the tiers of a list entry
SEED, DIFFUSED, FILL = 2, 1, 0
#: the ordering score of tier t is ``TIER_GAP · t + score``
TIER_GAP = 2.0
#: the tier of padding entries
PAD_TIER = -1

__all__ = ["DIFFUSED", "FILL", "PAD_TIER", "SEED", "TIER_GAP", "TieredRanking", "tiered_ranking"]


class TieredRanking(NamedTuple):
    """A batch's result lists: ``ids`` int64 ``[B, k]``, ``scores`` float32 ``[B, k]`` (each entry's own
    score) and ``tiers`` int8 ``[B, k]`` (:data:`SEED`, :data:`DIFFUSED`, :data:`FILL`), padded with
    -1 / -inf / :data:`PAD_TIER`."""

    ids: np.ndarray
    scores: np.ndarray
    tiers: np.ndarray

    def ordering_scores(self) -> np.ndarray:
        """``TIER_GAP · tier + score`` (float32, non-increasing along each row; -inf for padding): the
        single score per entry of the pipeline contract."""
        value = TIER_GAP * self.tiers.astype(np.float64) + self.scores.astype(np.float64)
        return np.where(self.ids >= 0, value, PAD_SCORE).astype(np.float32)


def tiered_ranking(parts: list[tuple[np.ndarray, np.ndarray, int]], k: int) -> TieredRanking:
    """The lists made of ``parts`` ``(ids [B, m], scores [B, m], tier)`` in order: per row the entries of
    the first part, then the second's, …, each id (-1: none) kept at its first place only, cut at ``k``
    entries. Vectorised over the batch (no loop over rows)."""
    ids = np.concatenate([np.asarray(p[0], np.int64) for p in parts], axis=1)
    scores = np.concatenate([np.asarray(p[1], np.float32) for p in parts], axis=1)
    tiers = np.concatenate([np.full(np.shape(p[0]), p[2], np.int8) for p in parts], axis=1)
    B = len(ids)
    out = TieredRanking(np.full((B, k), PAD_ID, np.int64), np.full((B, k), PAD_SCORE, np.float32),
                        np.full((B, k), PAD_TIER, np.int8))
    if ids.shape[1] == 0 or k == 0:
        return out
    order = np.argsort(ids, axis=1, kind="stable")  # equal ids stay in list order: the first one leads
    by_id = np.take_along_axis(ids, order, axis=1)
    repeat = np.zeros_like(by_id, dtype=bool)
    repeat[:, 1:] = by_id[:, 1:] == by_id[:, :-1]
    keep = ids >= 0
    np.put_along_axis(keep, order, np.take_along_axis(keep, order, axis=1) & ~repeat, axis=1)
    rank = np.cumsum(keep, axis=1) - 1
    b, at = np.nonzero(keep & (rank < k))
    slot = rank[b, at]
    out.ids[b, slot], out.scores[b, slot], out.tiers[b, slot] = ids[b, at], scores[b, at], tiers[b, at]
    return out

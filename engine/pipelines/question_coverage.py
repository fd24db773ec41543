"""Question coverage: a reranking step that fills the top of a list with passages that together
cover the question's terms.

A multi-hop question is answered by several passages, each holding some of its terms; the passages
ranked highest one by one often hold the same ones. Over the top ``coverage_depth`` of a pipeline's
list (after its own reranking steps), the step picks passages greedily: at each step the value of a
candidate is its score min-max normalised over the list (best 1, last 0) plus ``coverage`` times the
share of the question's term weight it adds to what the passages picked before cover. A question
term is one of its BM25 tokens (the index's BM25 tokenizer, stop words removed); its weight is the
best BM25 score it has in a passage of the list, and a passage covers it when the passage holds it
(BM25 score > 0). Ties go to the earlier list position. The picked passages come first, the rest of
the list follows in its order; scores are the values at picking time made non-increasing. Zero
tokens, no new passage enters the list (filtered passages never enter); each row uses its own list
and question only, so the step is batch-independent. Not in the SPEC: a query-time step in the
spirit of SPEC §3's multi-anchor coverage. ``coverage=0`` switches it off.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..components.bm25 import BM25Index
from ..components.shared import Components
from ..params import SearchParams, integer, real
from ..ranking import PAD_ID, PAD_SCORE, minmax_normalised
from ..timing import StageTimer

#: the defaults, one set for every corpus
DEFAULT_WEIGHT = 1.0
DEFAULT_DEPTH = 30


@dataclass(frozen=True)
class CoverageSearch(SearchParams):
    """The coverage step's search parameters."""

    coverage: float = real(DEFAULT_WEIGHT, low=0.0)
    coverage_depth: int = integer(DEFAULT_DEPTH, low=1, serving_bound=500)


class QuestionCoverage:
    """Question coverage as a reranking step of :meth:`Pipeline.search` (it reads the question texts)."""

    name = "coverage"

    def active(self, params: CoverageSearch, components: Components) -> bool:
        """On when ``coverage`` > 0 and the corpus (hence its BM25) is known."""
        return params.coverage > 0 and components.corpus is not None

    def depth(self, params: CoverageSearch) -> int:
        """How many results the step reads from the list (0 when ``coverage`` = 0 switches it off)."""
        return params.coverage_depth if params.coverage > 0 else 0

    def prepare(self, components: Components, who: str) -> None:
        """Build what the step reads (the index's BM25) at fit time, not on the first query."""
        components.bm25(who=who)

    def __call__(self, ids: np.ndarray, scores: np.ndarray, k: int, params: CoverageSearch, components: Components,
                 allowed: np.ndarray | None, timer: StageTimer, texts: Sequence[str] | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
        if texts is None:
            raise ValueError("the coverage step needs the question texts")
        with timer(self.name):
            bm25 = components.bm25()
            return coverage_rerank(bm25, bm25.tokenize(list(texts)), ids, scores, k, params.coverage,
                                   params.coverage_depth)


def coverage_rerank(bm25: BM25Index, tokens: Sequence[Sequence[str]], ids: np.ndarray, scores: np.ndarray, k: int,
                    weight: float, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """Re-rank each row's list ``ids``/``scores`` ([B, L], best first, padding -1) by question coverage
    (module docstring) of the question tokens ``tokens[b]``; returns ``(ids int64 [B, k], scores
    float32 [B, k])``."""
    B = len(ids)
    out_ids = np.full((B, k), PAD_ID, np.int64)
    out_scores = np.full((B, k), PAD_SCORE, np.float32)
    for b in range(B):
        ok = ids[b] >= 0
        lst = ids[b][ok]
        if not len(lst):
            continue
        window = min(depth, len(lst))
        order, value = _greedy_cover(bm25, list(dict.fromkeys(tokens[b])), lst, minmax_normalised(scores[b][ok]), weight, window,
                                     min(k, window))
        n = min(k, len(order))
        out_ids[b, :n] = lst[order[:n]]
        out_scores[b, :n] = np.minimum.accumulate(value[:n])
    return out_ids, out_scores


def _greedy_cover(bm25: BM25Index, terms: list[str], lst: np.ndarray, norm: np.ndarray, weight: float, window: int,
                  picks: int) -> tuple[np.ndarray, np.ndarray]:
    """``picks`` greedy picks among the first ``window`` candidates of ``lst`` (their positions, then
    the rest of the list in order) and the value of each position in that order."""
    head = lst[:window]
    if terms and len(head):
        per_term = np.stack([bm25.scores_at([t], head) for t in terms]).astype(np.float64)  # [T, window]
        w = per_term.max(1)
        share = w / w.sum() if w.sum() > 0 else np.zeros_like(w)
        holds = per_term > 0
    else:
        share, holds = np.zeros(0), np.zeros((0, len(head)), bool)
    covered = np.zeros(len(share), bool)
    free = np.ones(len(head), bool)
    order, values = [], []
    for _ in range(picks):
        gain = (share[:, None] * (holds & ~covered[:, None])).sum(0)
        value = np.where(free, norm[:window] + weight * gain, -np.inf)
        j = int(np.argmax(value))
        order.append(j)
        values.append(value[j])
        free[j] = False
        covered |= holds[:, j]
    picked = set(order)
    rest = [j for j in range(len(lst)) if j not in picked]
    return np.array(order + rest, np.int64), np.array(values + list(norm[rest]), np.float64)

"""The title bridge: a reranking step that lifts the passages whose title the best passage mentions.

After a pipeline's own ranking, its top ``bridge_depth`` list is re-ranked: scores min-max normalised
over the list (best 1, last 0), +``bridge`` for every passage one of the ``bridge_seeds`` best passages
mentions (a row of the title mention graph,
:class:`~hopgraph.engine.components.title_mentions.TitleMentions`), once however many seeds mention it;
a mentioned passage outside the list enters with 0 + ``bridge``. Sorted again (ties toward the lower
id) and cut to k. Filtered passages never enter; each row uses its own list only. Not in the SPEC: a
query-time second hop in the spirit of SPEC §1–§3. ``bridge=0`` switches it off.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..components.shared import Components
from ..components.title_mentions import TitleMentions
from ..params import SearchParams, integer, real
from ..ranking import PAD_ID, PAD_SCORE, minmax_normalised
from ..timing import StageTimer

#: the defaults, one set for every corpus and every pipeline that re-ranks by the bridge
DEFAULT_WEIGHT = 0.4
DEFAULT_SEEDS = 1
DEFAULT_DEPTH = 20


@dataclass(frozen=True)
class BridgeSearch(SearchParams):
    """The title bridge's search parameters, shared by every pipeline that runs the step."""

    bridge: float = real(DEFAULT_WEIGHT, low=0.0)
    bridge_seeds: int = integer(DEFAULT_SEEDS, low=1, serving_bound=32)
    bridge_depth: int = integer(DEFAULT_DEPTH, low=1, serving_bound=500)


class TitleBridge:
    """The title bridge as a reranking step of :meth:`Pipeline.search`."""

    name = "title_bridge"

    def active(self, params: BridgeSearch, components: Components) -> bool:
        """On when ``bridge`` > 0 and the corpus (titles and texts) is known."""
        return params.bridge > 0 and components.corpus is not None

    def depth(self, params: BridgeSearch) -> int:
        """How many results the step needs from the pipeline's ranking (0 when ``bridge`` = 0
        switches it off)."""
        return params.bridge_depth if params.bridge > 0 else 0

    def prepare(self, components: Components, who: str) -> None:
        """Build what the step reads (the title mention graph) at fit time, not on the first query."""
        components.title_mentions(who)

    def __call__(self, ids: np.ndarray, scores: np.ndarray, k: int, params: BridgeSearch, components: Components,
                 allowed: np.ndarray | None, timer: StageTimer, texts: Sequence[str] | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
        with timer(self.name):
            return bridge_rerank(components.title_mentions(self.name), ids, scores, k, params.bridge,
                                 params.bridge_seeds, components.allowed(allowed))


def bridge_rerank(mentions: TitleMentions, ids: np.ndarray, scores: np.ndarray, k: int, weight: float,
                  seeds: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Re-rank each row's list ``ids``/``scores`` ([B, depth], best first, padding -1) by the title
    bridge (module docstring); returns ``(ids int64 [B, k], scores float32 [B, k])``."""
    B = len(ids)
    out_ids = np.full((B, k), PAD_ID, np.int64)
    out_scores = np.full((B, k), PAD_SCORE, np.float32)
    for b in range(B):
        ok = ids[b] >= 0
        lst = ids[b][ok]
        if not len(lst):
            continue
        norm = minmax_normalised(scores[b][ok])  # a -inf score ranks last
        targets = mentions.rows(int(s) for s in lst[:seeds])
        if allowed is not None:
            targets = targets[allowed[targets]]
        new = np.setdiff1d(targets, lst)
        cand = np.concatenate([lst, new])
        value = np.concatenate([norm, np.zeros(len(new))]) + weight * np.isin(np.concatenate([lst, new]), targets)
        order = np.lexsort((cand, -value))[:k]
        out_ids[b, :len(order)], out_scores[b, :len(order)] = cand[order], value[order]
    return out_ids, out_scores

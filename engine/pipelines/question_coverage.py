"""Question coverage: a reranking step that fills the top of a list with passages that together
cover the question, the second found from the first.

A multi-hop question is answered by several passages, each holding some of its terms, the later
ones often named by the earlier ones; the passages ranked highest one by one often hold the same
terms. Over the top ``coverage_depth`` of a pipeline's list (after its own reranking steps) the step
picks passages as a set:

* a candidate's *score* is its list score min-max normalised over the list (best 1, last 0);
* the *coverage* of a set of passages is the share of the question's term weight they hold: a
  question term is one of its BM25 tokens (the index's BM25 tokenizer, stop words removed), its
  weight the best BM25 score it has in a passage of the list, and a passage holds it when its BM25
  score for it is > 0;
* a *link* from a passage to a candidate is an edge of the title mention graph
  (:class:`~hopgraph.engine.components.title_mentions.TitleMentions`): the passage names the
  candidate's title;
* the *shared-name link* of two candidates (:mod:`~hopgraph.engine.pipelines.shared_names`) is in
  [0, 1]: the rarity of the rarest extracted name both hold that the question does not hold (the
  bridge entity of a chain, named by one passage and the subject of the next).

First the best ordered pair among the top ``coverage_pairs`` candidates: score(a) + score(b) +
``coverage`` × coverage({a, b}) + ``coverage_link`` × link(a → b) + ``coverage_names`` ×
shared(a, b). Then, greedily, the candidate of the highest score + ``coverage`` × the coverage it
adds to the passages picked + ``coverage_link`` when a picked passage links to it +
``coverage_names`` × its largest shared-name link to a picked passage. Ties go to the earlier list position. The picked passages come
first, the rest of the list follows in its order; scores are the values at picking time made
non-increasing. Zero tokens; no new passage enters the list (filtered passages never enter); each
row uses its own list and question only, so the step is batch-independent. Not in the SPEC: a
query-time step in the spirit of SPEC §3's multi-anchor coverage. ``coverage = coverage_link =
coverage_names = 0`` switches it off.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..components.bm25 import BM25Index
from ..components.extraction import Extraction
from ..components.shared import Components
from ..components.title_mentions import TitleMentions
from ..params import SearchParams, integer, real
from ..ranking import PAD_ID, PAD_SCORE, minmax_normalised
from ..timing import StageTimer
from .shared_names import chunk_names, shared_name_links

#: the defaults, one set for every corpus
DEFAULT_WEIGHT = 1.0
DEFAULT_LINK = 0.2
DEFAULT_NAMES = 0.2
DEFAULT_PAIRS = 10
DEFAULT_DEPTH = 30


@dataclass(frozen=True)
class CoverageSearch(SearchParams):
    """The coverage step's search parameters."""

    coverage: float = real(DEFAULT_WEIGHT, low=0.0)
    coverage_link: float = real(DEFAULT_LINK, low=0.0)
    coverage_names: float = real(DEFAULT_NAMES, low=0.0)
    coverage_pairs: int = integer(DEFAULT_PAIRS, low=0, serving_bound=100)
    coverage_depth: int = integer(DEFAULT_DEPTH, low=1, serving_bound=500)


@dataclass(frozen=True)
class Cover:
    """What one search's coverage step reads: the BM25 index, the title mention graph, the weights and,
    when ``names`` > 0, the extraction whose names make the shared-name links."""

    bm25: BM25Index
    mentions: TitleMentions
    weight: float
    link: float
    pairs: int
    depth: int
    names: float = 0.0
    extraction: Extraction | None = None


def _switched_on(params: CoverageSearch) -> bool:
    """Whether the step does anything: ``coverage``, ``coverage_link`` or ``coverage_names`` > 0."""
    return params.coverage > 0 or params.coverage_link > 0 or params.coverage_names > 0


class QuestionCoverage:
    """Question coverage as a reranking step of :meth:`Pipeline.search` (it reads the question texts)."""

    name = "coverage"

    def active(self, params: CoverageSearch, components: Components) -> bool:
        """On when ``coverage``, ``coverage_link`` or ``coverage_names`` > 0 and the corpus (its BM25, its titles) is known."""
        return _switched_on(params) and components.corpus is not None

    def depth(self, params: CoverageSearch) -> int:
        """How many results the step reads from the list (0 when it is switched off)."""
        return params.coverage_depth if _switched_on(params) else 0

    def prepare(self, components: Components, who: str) -> None:
        """Build what the step reads (the index's BM25, the title mention graph, the extraction) at fit
        time."""
        components.bm25(who=who)
        components.title_mentions(who)
        components.extraction(who=who)

    def __call__(self, ids: np.ndarray, scores: np.ndarray, k: int, params: CoverageSearch, components: Components,
                 allowed: np.ndarray | None, timer: StageTimer, texts: Sequence[str] | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
        if texts is None:
            raise ValueError("the coverage step needs the question texts")
        with timer(self.name):
            bm25 = components.bm25()
            ex = components.extraction(who=self.name) if params.coverage_names > 0 else None
            cover = Cover(bm25, components.title_mentions(self.name), params.coverage, params.coverage_link,
                          params.coverage_pairs, params.coverage_depth, params.coverage_names, ex)
            return coverage_rerank(cover, bm25.tokenize(list(texts)), ids, scores, k, texts)


def coverage_rerank(cover: Cover, tokens: Sequence[Sequence[str]], ids: np.ndarray, scores: np.ndarray, k: int,
                    texts: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Re-rank each row's list ``ids``/``scores`` ([B, L], best first, padding -1) by question coverage
    (module docstring) of the question tokens ``tokens[b]``; ``texts[b]``: the question (whose names
    the shared-name links leave out; needed when ``cover.names`` > 0); returns ``(ids int64 [B, k],
    scores float32 [B, k])``."""
    if cover.names > 0 and (cover.extraction is None or texts is None):
        raise ValueError("shared-name links need the extraction and the question texts")
    B = len(ids)
    out_ids = np.full((B, k), PAD_ID, np.int64)
    out_scores = np.full((B, k), PAD_SCORE, np.float32)
    for b in range(B):
        ok = ids[b] >= 0
        lst = ids[b][ok]
        if not len(lst):
            continue
        head = lst[:min(cover.depth, len(lst))]
        shared = _shared(cover, head, texts[b] if texts is not None else "")
        order, value = _pick(cover, list(dict.fromkeys(tokens[b])), head, minmax_normalised(scores[b][ok]),
                             min(k, len(head)), shared)
        n = min(k, len(order))
        out_ids[b, :n] = lst[order[:n]]
        out_scores[b, :n] = np.minimum.accumulate(value[:n])
    return out_ids, out_scores


def _term_holdings(bm25: BM25Index, terms: list[str], head: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each question term's share of the question's weight [T] and whether each candidate holds it [T, C]."""
    if not terms:
        return np.zeros(0), np.zeros((0, len(head)), bool)
    per_term = bm25.term_scores_at(terms, head).astype(np.float64)
    w = per_term.max(1)
    return (w / w.sum() if w.sum() > 0 else w), per_term > 0


def _shared(cover: Cover, head: np.ndarray, question: str) -> np.ndarray:
    """``cover.names`` × the shared-name links of the candidates ``head`` [C, C] (zeros when off)."""
    if cover.names <= 0 or cover.extraction is None:
        return np.zeros((len(head), len(head)))
    ex = cover.extraction
    return cover.names * shared_name_links(chunk_names(ex), ex.names, head, question)


def _pick(cover: Cover, terms: list[str], head: np.ndarray, norm: np.ndarray, picks: int, shared: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray]:
    """The picked positions among the candidates ``head`` (the list's first), then the rest of the
    list in order, and the value of each position in that order (``norm``: the whole list's
    normalised scores; ``shared``: the weighted shared-name links of the candidates [C, C])."""
    C = len(head)
    share, holds = _term_holdings(cover.bm25, terms, head)
    weighted = holds * share[:, None]
    names = _Names(cover.mentions, head)
    order, values = [], []
    P = min(cover.pairs, C)
    if picks >= 2 and P >= 2:
        own = weighted.sum(0)[:P]
        both = own[:, None] + own[None, :] - weighted[:, :P].T @ holds[:, :P].astype(np.float64)  # coverage of {a, b}
        names.read(range(P))
        named = np.stack([names.of(a)[:P] for a in range(P)])  # a names b
        value = norm[:P, None] + norm[None, :P] + cover.weight * both + cover.link * named + shared[:P, :P]
        np.fill_diagonal(value, -np.inf)
        a, b = divmod(int(np.argmax(value)), P)
        first = norm[a] + cover.weight * own[a]
        order, values = [a, b], [first, value[a, b] - first]
    covered = holds[:, order].any(1) if order else np.zeros(len(share), bool)
    free = np.ones(C, bool)
    free[order] = False
    links = np.zeros(C, bool)  # the candidates a picked passage names
    kin = np.zeros(C)  # each candidate's largest weighted shared-name link to a picked passage
    for j in order:
        links |= names.of(j)
        kin = np.maximum(kin, shared[j])
    while len(order) < picks:
        gain = (weighted * ~covered[:, None]).sum(0)
        value = np.where(free, norm[:C] + cover.weight * gain + cover.link * links + kin, -np.inf)
        j = int(np.argmax(value))
        order.append(j)
        values.append(value[j])
        free[j] = False
        covered |= holds[:, j]
        links |= names.of(j)
        kin = np.maximum(kin, shared[j])
    picked = set(order)
    rest = [j for j in range(len(norm)) if j not in picked]
    return np.array(order + rest, np.int64), np.array(values + list(norm[rest]), np.float64)


class _Names:
    """Which candidates each candidate names (a row of the title mention graph restricted to the
    candidates), read once per candidate, several rows at a time when asked."""

    def __init__(self, mentions: TitleMentions, head: np.ndarray) -> None:
        self.mentions, self.head = mentions, head
        self.position = {int(p): j for j, p in enumerate(head.tolist())}
        self.named: dict[int, np.ndarray] = {}

    def read(self, positions) -> None:
        """Read the rows of the candidates at ``positions`` not read yet, together."""
        todo = [j for j in positions if j not in self.named]
        for j, row in zip(todo, self.mentions.each_row(int(self.head[j]) for j in todo)):
            mask = np.zeros(len(self.head), bool)
            mask[[self.position[x] for x in row.tolist() if x in self.position]] = True
            self.named[j] = mask

    def of(self, j: int) -> np.ndarray:
        """bool [C]: the candidates the candidate at position ``j`` names."""
        if j not in self.named:
            self.read([j])
        return self.named[j]

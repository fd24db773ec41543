"""``hop``: DMAR (SPEC §3) with the title bridge and question coverage as its last reranking steps.

The ranking is DMAR's (:mod:`hopgraph.engine.pipelines.dmar`: hybrid recall, semantic + knowledge
graph scoring, anchor-guided reformulation, fidelity rerank), read ``coverage_depth`` (30) deep;
the title bridge (:mod:`~hopgraph.engine.pipelines.title_bridge`) re-ranks that list, then question
coverage (:mod:`~hopgraph.engine.pipelines.question_coverage`) picks its top greedily so that the
first passages together cover the question's terms. Zero LLM tokens; one set of defaults for every
corpus. Ablations: ``no_coverage`` (the step off: DMAR with its bridge), ``coverage=0`` (pair and
links only), ``coverage_link=0``, ``coverage_names=0`` (no shared-name links), ``coverage_pairs=0``
(greedy from the first pick), ``no_bridge``, ``no_graph``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .dmar.pipeline import DMAR, STAGES, DMARFit, DMARSearch
from .question_coverage import CoverageSearch, QuestionCoverage
from .title_bridge import TitleBridge


@dataclass(frozen=True)
class HopFit(DMARFit):
    """``hop``'s fit parameters: DMAR's."""

    pipeline = "hop"


@dataclass(frozen=True)
class HopSearch(DMARSearch, CoverageSearch):
    """``hop``'s search parameters: DMAR's (with the title bridge's) and question coverage's."""

    pipeline = "hop"

    @classmethod
    def published_values(cls) -> dict[str, Any]:
        """DMAR as published (SPEC §3): no title bridge, no coverage."""
        return {**DMARSearch.published_values(), "coverage": 0.0, "coverage_link": 0.0, "coverage_names": 0.0}


class Hop(DMAR):
    """DMAR + title bridge + question coverage (module docstring)."""

    name = "hop"
    FitParams = HopFit
    SearchParams = HopSearch
    rerank = (TitleBridge(), QuestionCoverage())
    stages = (*STAGES, "coverage")
    ablations = {
        "published": HopSearch.published_values(),
        "no_coverage": {"coverage": 0.0, "coverage_link": 0.0, "coverage_names": 0.0},
        "coverage=0": {"coverage": 0.0},
        "coverage_link=0": {"coverage_link": 0.0},
        "coverage_names=0": {"coverage_names": 0.0},
        "coverage_pairs=0": {"coverage_pairs": 0},
        "no_bridge": {"bridge": 0.0},
        "no_graph": {"structural": False, "bridge": 0.0},
    }

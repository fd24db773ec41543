"""Cost models of a search: what a pipeline declares of the work and the peak memory of one search
call (:meth:`~hopgraph.engine.pipelines.base.Pipeline.cost`), so that a server can refuse or route
a request before anything is allocated without knowing any pipeline's algorithm.

A model counts the largest arrays a search allocates for the queries it ranks at once and the work
that grows with each search parameter. The figures are upper-bound models, not measurements: they
grow with every parameter that grows the search. Every model starts from :func:`dense_scan_cost`
(every pipeline embeds its questions and scans the dense index once per question) over the ranked
lists :func:`list_depth` says it returns, and adds its own structures. Integer arithmetic
throughout: a model gives the same figures whatever order its terms are added in. O(1).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

#: bytes per entry of a ranked list as a search holds it (ids, scores, the copies of each step)
LIST_ENTRY = 48
#: bytes per passage of the per-passage arrays a search beyond the dense scan holds (a score, an id
#: and a mask entry per passage)
PASSAGE_ARRAYS = 12


@dataclass(frozen=True)
class IndexShape:
    """What the cost models read of an index: passages ``n``, dimension ``d`` and the fit
    parameters of each pipeline served (``{name: FitParams}``; a pipeline absent here is costed
    with its default fit parameters)."""

    n: int
    d: int
    fit: Mapping[str, Any]


@dataclass(frozen=True)
class Cost:
    """The modelled cost of one search call: ``work`` (abstract operations, comparable between calls
    of one pipeline) and ``memory`` (peak bytes)."""

    work: int
    memory: int

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.work + other.work, self.memory + other.memory)


def list_depth(shape: IndexShape, k: int, grouped: bool, rerank_depth: int = 0) -> int:
    """How deep the ranked lists of a search are read: ``k`` or the depth its reranking steps need
    (``rerank_depth``), at most the ``n`` passages; all ``n`` when results are grouped by
    document (the grouping may read the ranking down to the last passage)."""
    n = max(shape.n, 1)
    return n if grouped else min(n, max(k, rerank_depth))


def dense_scan_cost(shape: IndexShape, batch: int, depth: int) -> Cost:
    """The cost every pipeline has for ``batch`` questions ranked ``depth`` deep: the dense scan
    (``n · d`` per question), the questions' vectors, the ranked lists, and the filter masks
    (``2 · n`` bytes)."""
    n, d = max(shape.n, 1), shape.d
    return Cost(batch * (n * d + depth), batch * (2 * d * 4 + depth * LIST_ENTRY) + 2 * n)

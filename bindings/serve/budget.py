"""The budget of one search request of ``hopgraph serve``: serving bounds of the search parameters
(:class:`ParamLimits`) and an estimate of the request's work and peak memory (:func:`estimate`),
both checked before the request reaches a search worker.

**Bounds.** Every integer search parameter of every pipeline has a largest value a request may set
(:data:`DEFAULT_BOUNDS`; the operator changes them with ``--param-limits FILE`` and
``--param-limit PIPELINE.NAME=VALUE``). A request over a bound is refused (422) naming the parameter
and the bound; a pipeline's own defaults are never refused.

**Estimates.** :func:`estimate` models the largest arrays a pipeline's search allocates for the
queries it runs at once (its batch size, else the whole request) and the work that grows with each
parameter: the dense scan (``N·d`` per query), the BM25 postings (``N``), the candidate and fusion
lists, STITCH's walk region (``(n_seeds + description_depth)·64^region_hops`` chunks, at most N, each
iterated ``max_iter`` times), DMAR's Monte Carlo Shapley tensors (``shapley_samples · G · (3U + 7C)``
floats per query for G query entities, U = G · ego_size local nodes and C candidates). The figures
are upper-bound models, not measurements: they grow with every parameter that grows the search, so
a request is refused (memory above ``--max-request-mb``) or sent to the bulk worker (work above
``--heavy-cost`` default one-question searches) before anything is allocated. A ``where`` filter's
evaluation is charged as one N-row mask per clause and per listed value (its size counted by
:func:`~hopgraph.engine.filters.check_where`). O(1) per request.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..engine.errors import InputError
from ..engine.filters import WhereSize
from ..engine.params import parse_assignments
from ..engine.pipelines import pipeline_class

#: largest value a request may give each integer search parameter, per pipeline (GET /info's
#: ``param_limits``); every integer search parameter has one
DEFAULT_BOUNDS: dict[str, dict[str, int]] = {
    "hybrid": {"rrf_k": 10_000, "fusion_depth": 1_000},
    "g3rag": {"bridge_seeds": 32, "bridge_depth": 500, "n_seeds": 64, "candidate_depth": 1_000,
              "fusion_depth": 1_000},
    "stitch": {"bridge_seeds": 32, "bridge_depth": 500, "n_seeds": 64, "region_hops": 3, "max_iter": 1_000,
               "description_depth": 1_024},
    "ppr_binary": {"bridge_seeds": 32, "bridge_depth": 500, "n_seeds": 256, "region_hops": 3, "max_iter": 1_000},
    "dmar": {"bridge_seeds": 32, "bridge_depth": 500, "candidate_depth": 500, "anchors": 32,
             "second_stage_depth": 500, "union_depth": 500, "shapley_samples": 500, "random_state": 2**32 - 1,
             "min_query_entities": 64},
}


class RequestRefused(Exception):
    """A request over the budget: ``status`` (422) and a ``detail`` naming what and the bound."""

    def __init__(self, detail: str, status: int = 422) -> None:
        super().__init__(detail)
        self.detail, self.status = detail, status


def integer_search_params(pipeline: str) -> list[str]:
    """The integer search parameters of ``pipeline`` (those that have serving bounds)."""
    P = pipeline_class(pipeline).SearchParams
    return [name for name in P.names() if P.domain(name).kind == "int"]


@dataclass(frozen=True)
class ParamLimits:
    """Serving bounds: ``{pipeline: {parameter: largest value a request may set}}``."""

    bounds: Mapping[str, Mapping[str, int]]

    @classmethod
    def default(cls) -> "ParamLimits":
        return cls({p: dict(b) for p, b in DEFAULT_BOUNDS.items()})

    @classmethod
    def from_sources(cls, file: str | Path | None = None, items: Sequence[str] = ()) -> "ParamLimits":
        """The defaults, then the bounds of ``file`` (JSON ``{pipeline: {name: value}}``), then
        ``items`` (``PIPELINE.NAME=VALUE``). InputError naming a bad file, pipeline, name or value."""
        bounds = {p: dict(b) for p, b in DEFAULT_BOUNDS.items()}
        sources: list[tuple[str, Mapping[str, Any]]] = []
        if file is not None:
            try:
                data = json.loads(Path(file).read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
                raise InputError(f"--param-limits {file}: cannot read it as JSON ({e})") from None
            if not isinstance(data, dict):
                raise InputError(f"--param-limits {file}: expected a JSON object {{pipeline: {{name: value}}}}")
            sources.append((f"--param-limits {file}", data))
        if items:
            sources.append(("--param-limit", parse_assignments(list(items))))
        for where, data in sources:
            for pipeline, values in data.items():
                if not isinstance(values, dict):
                    raise InputError(f"{where}: {pipeline!r} must map parameter names to bounds")
                for name, value in values.items():
                    bounds.setdefault(pipeline, {})[name] = _checked_bound(where, pipeline, name, value)
        return cls(bounds)

    def check(self, pipeline: str, given: Mapping[str, Any], values: Any) -> None:
        """Raise :class:`RequestRefused` (422) when a parameter a request gave (``given``: its names,
        old ones included) has a validated value (``values``: the SearchParams) above its bound."""
        P = pipeline_class(pipeline).SearchParams
        bounds = self.bounds.get(pipeline, {})
        for name in given:
            canonical = P.renamed.get(name, name)
            bound = bounds.get(canonical)
            value = getattr(values, canonical, None)
            if bound is not None and isinstance(value, int) and value > bound:
                alias = f" (given as {name!r})" if name != canonical else ""
                raise RequestRefused(f"params.{canonical}{alias} = {value} is above this server's bound of {bound} "
                                     f"for pipeline {pipeline!r} (GET /info: param_limits)")

    def to_dict(self, pipelines: Sequence[str] | None = None) -> dict[str, dict[str, int]]:
        return {p: dict(b) for p, b in self.bounds.items() if pipelines is None or p in pipelines}


def _checked_bound(where: str, pipeline: str, name: str, value: Any) -> int:
    try:
        P = pipeline_class(pipeline).SearchParams
    except (InputError, NotImplementedError) as e:
        raise InputError(f"{where}: {e}") from None
    if name not in P.names():
        raise InputError(f"{where}: {pipeline!r} has no search parameter {name!r}; integer ones: "
                         f"{', '.join(integer_search_params(pipeline)) or 'none'}")
    domain = P.domain(name)
    if domain.kind != "int":
        raise InputError(f"{where}: {pipeline}.{name} is not an integer parameter; bounds are for "
                         f"{', '.join(integer_search_params(pipeline)) or 'none'}")
    low = int(domain.low) if domain.low is not None else 0
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InputError(f"{where}: the bound of {pipeline}.{name} must be an integer >= {low}, got {value!r}")
    return value


# ---------------------------------------------------------------------- estimates
@dataclass(frozen=True)
class Estimate:
    """``work``: the request's work in default one-question searches of its pipeline (1.0 = one
    question with the defaults and k = 5); ``memory_bytes``: its peak memory, modelled."""

    work: float
    memory_bytes: int


@dataclass(frozen=True)
class IndexShape:
    """What the models read of an index: passages ``n``, dimension ``d`` and the fit parameters of
    each served pipeline."""

    n: int
    d: int
    fit: Mapping[str, Any]


#: bytes per entry of a ranked list as a search holds it (ids, scores, the copies of each step)
LIST_ENTRY = 48
#: chunks assumed reached per chunk per hop of STITCH's walk region (its real fan-out is smaller)
REGION_FANOUT = 64


def estimate(shape: IndexShape, pipeline: str, params: Any, n_queries: int, k: int,
             group_by_document: bool = False, at_once: int | None = None, where: WhereSize | None = None) -> Estimate:
    """Work and peak memory of searching ``n_queries`` questions with ``pipeline`` and validated
    search ``params`` (module docstring), ``at_once`` of them at a time (default: the whole request);
    ``group_by_document`` may read the ranking down to N; ``where``: the size of the request's
    filter (:func:`~hopgraph.engine.filters.check_where`), whose evaluation is charged too."""
    cls = pipeline_class(pipeline)
    default = cls.SearchParams.create()
    work1, _ = _model(shape, pipeline, default, 1, 5, False)
    work, _ = _model(shape, pipeline, params, n_queries, k, group_by_document)
    at_once = min(n_queries, at_once or n_queries, cls.default_batch_size or n_queries)
    _, memory = _model(shape, pipeline, params, at_once, k, group_by_document)
    if where is not None:
        work_f, memory_f = _filter_model(shape, where)
        work, memory = work + work_f, memory + memory_f
    return Estimate(work / max(work1, 1.0), int(memory))


def _filter_model(shape: IndexShape, where: WhereSize) -> tuple[float, float]:
    """(work, bytes) of evaluating a ``where`` filter once: a mask of N rows per clause and per
    listed value, and one mask held per level of nesting (with the one being combined)."""
    n = max(shape.n, 1)
    return float((where.clauses + where.values) * n), float((where.depth + 1) * n)


def _model(shape: IndexShape, pipeline: str, p: Any, B: int, k: int, grouped: bool) -> tuple[float, float]:
    """(work, bytes) of one search call over B queries (module docstring)."""
    n, d = max(shape.n, 1), shape.d
    bridge_depth = p.bridge_depth if getattr(p, "bridge", 0) > 0 else 0
    depth = n if grouped else min(n, max(k, bridge_depth))
    work = B * (n * d + depth)  # every pipeline embeds and scans the dense index once per query
    memory = B * (2 * d * 4 + depth * LIST_ENTRY) + 2 * n  # queries, ranked lists, the filter masks
    if pipeline == "bm25":
        work, memory = B * (n + depth), memory + 12 * n
    elif pipeline == "hybrid":
        D = max(p.fusion_depth, depth)
        work += B * (n + D)
        memory += 12 * n + B * 2 * D * LIST_ENTRY
    elif pipeline == "g3rag":
        degree = int(shape.fit.get("g3rag", {}).get("n_neighbors", 32))
        D = max(p.fusion_depth, p.candidate_depth, depth)
        edges = (p.n_seeds + p.candidate_depth) * degree
        work += B * (n + D + edges * 8)
        memory += 12 * n + B * (2 * D + edges) * LIST_ENTRY
    elif pipeline in ("stitch", "ppr_binary"):
        reach = p.n_seeds + getattr(p, "description_depth", 0) + depth
        region = min(n, reach * REGION_FANOUT ** p.region_hops) if p.localise else n
        iterations = p.max_iter if p.ppr else 1
        work += B * (n + region * iterations * 8)
        memory += 12 * n + B * region * 6 * 8
    elif pipeline == "dmar":
        fit = shape.fit.get("dmar", {})
        G = int(fit.get("max_query_entities", 8))
        U = G * int(fit.get("ego_size", 16))
        C = max(p.candidate_depth, p.union_depth + max(p.second_stage_depth, depth))
        shapley = p.shapley_samples * G * (3 * U + 7 * C) if p.structural else 0
        work += B * (2 * n * d + n + C * d + shapley * (G + 2))
        memory += 12 * n + B * (C * d * 4 * 3 + C * LIST_ENTRY * 4 + shapley * 4)
    return float(work), float(memory)


def index_shape(index: Any, served: Sequence[str]) -> IndexShape:
    """The :class:`IndexShape` of a loaded :class:`~hopgraph.index.Index` serving ``served``."""
    fit = {name: index.pipeline(name).fit_params.to_dict() for name in served}
    return IndexShape(int(index.n_live), int(index.X.shape[1]), fit)

"""The budget of one search request of ``hopgraph serve``: serving bounds of the search parameters
(:class:`ParamLimits`) and an estimate of the request's work and peak memory (:func:`estimate`),
both checked before the request reaches a search worker. Nothing here knows a pipeline: each one
declares its bounds and its cost model, and this module reads them from the pipeline registry.

**Bounds.** Every integer search parameter of every pipeline declares the largest value a request
may set (its domain's ``serving_bound``, :func:`hopgraph.engine.params.integer`); the operator
changes them with ``--param-limits FILE`` and ``--param-limit PIPELINE.NAME=VALUE``. A request over
a bound is refused (422) naming the parameter and the bound; a pipeline's own defaults are never
refused.

**Estimates.** :func:`estimate` asks the pipeline's cost model
(:meth:`~hopgraph.engine.pipelines.base.Pipeline.cost`, :mod:`hopgraph.engine.cost`) for the
work of the whole request and for the peak memory of the queries it runs at once (its batch size,
else the whole request). The figures are upper-bound models, not measurements: they grow with
every parameter that grows the search, so a request is refused (memory above ``--max-request-mb``)
or sent to the bulk worker (work above ``--heavy-cost`` default one-question searches) before
anything is allocated. A ``where`` filter's evaluation is charged as one N-row mask per clause and
per listed value (its size counted by :func:`~hopgraph.engine.filters.check_where`). O(1) per
request.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..engine.cost import IndexShape
from ..engine.errors import InputError
from ..engine.filters import WhereSize
from ..engine.pipelines import pipeline_class, pipeline_names
from ..assignments import parse_assignments

__all__ = ["Estimate", "IndexShape", "ParamLimits", "RequestRefused", "declared_bounds", "estimate",
           "integer_search_params"]


class RequestRefused(Exception):
    """A request over the budget: ``status`` (422) and a ``detail`` naming what and the bound."""

    def __init__(self, detail: str, status: int = 422) -> None:
        super().__init__(detail)
        self.detail, self.status = detail, status


def integer_search_params(pipeline: str) -> list[str]:
    """The integer search parameters of ``pipeline`` (those a server bounds)."""
    return list(pipeline_class(pipeline).SearchParams.integer_names())


def declared_bounds(pipeline: str) -> dict[str, int]:
    """The serving bounds ``pipeline`` declares for its integer search parameters
    (:meth:`~hopgraph.engine.params.Params.serving_bounds`)."""
    return pipeline_class(pipeline).SearchParams.serving_bounds()


@dataclass(frozen=True)
class ParamLimits:
    """Serving bounds: the largest value a request may give each integer search parameter, the one
    its pipeline declares (:func:`declared_bounds`) unless the operator set another (``overrides``:
    ``{pipeline: {parameter: bound}}``)."""

    overrides: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    @classmethod
    def default(cls) -> "ParamLimits":
        """The bounds the pipelines declare, none overridden."""
        return cls()

    @classmethod
    def from_sources(cls, file: str | Path | None = None, items: Sequence[str] = ()) -> "ParamLimits":
        """The declared bounds, then the bounds of ``file`` (JSON ``{pipeline: {name: value}}``), then
        ``items`` (``PIPELINE.NAME=VALUE``). InputError naming a bad file, pipeline, name or value."""
        overrides: dict[str, dict[str, int]] = {}
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
                    overrides.setdefault(pipeline, {})[name] = _checked_bound(where, pipeline, name, value)
        return cls(overrides)

    def check(self, pipeline: str, given: Mapping[str, Any], values: Any) -> None:
        """Raise :class:`RequestRefused` (422) when a parameter a request gave (``given``: its names,
        old ones included) has a validated value (``values``: the SearchParams) above its bound."""
        P = pipeline_class(pipeline).SearchParams
        bounds = self.of(pipeline)
        for name in given:
            canonical = P.renamed.get(name, name)
            bound = bounds.get(canonical)
            value = getattr(values, canonical, None)
            if bound is not None and isinstance(value, int) and value > bound:
                alias = f" (given as {name!r})" if name != canonical else ""
                raise RequestRefused(f"params.{canonical}{alias} = {value} is above this server's bound of {bound} "
                                     f"for pipeline {pipeline!r} (GET /info: param_limits)")

    def of(self, pipeline: str) -> dict[str, int]:
        """``{parameter: bound}`` of ``pipeline``: its declared bounds with the operator's over them."""
        return {**declared_bounds(pipeline), **self.overrides.get(pipeline, {})}

    def require(self, pipelines: Sequence[str]) -> None:
        """InputError naming the first integer search parameter of ``pipelines`` that has no bound
        (neither declared by its pipeline nor set by the operator): a server never serves a
        parameter whose cost a request could raise without limit."""
        for p in pipelines:
            unbounded = [name for name in integer_search_params(p) if name not in self.of(p)]
            if unbounded:
                raise InputError(f"pipeline {p!r}: the integer search parameter {unbounded[0]!r} declares no serving "
                                 f"bound (integer(..., serving_bound=N)); give one with --param-limit "
                                 f"{p}.{unbounded[0]}=N")

    def to_dict(self, pipelines: Sequence[str] | None = None) -> dict[str, dict[str, int]]:
        """``{pipeline: {parameter: bound}}`` of ``pipelines`` (default: every registered one) that
        have integer search parameters (``GET /info``'s ``param_limits``)."""
        names = pipeline_names() if pipelines is None else pipelines
        return {p: bounds for p in names if (bounds := self.of(p))}


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


def estimate(shape: IndexShape, pipeline: str, params: Any, n_queries: int, k: int,
             group_by_document: bool = False, at_once: int | None = None, where: WhereSize | None = None) -> Estimate:
    """Work and peak memory of searching ``n_queries`` questions with ``pipeline`` and validated
    search ``params`` (the pipeline's :meth:`~hopgraph.engine.pipelines.base.Pipeline.cost`),
    ``at_once`` of them at a time (default: the whole request; never more than the pipeline's
    batch size); ``group_by_document`` may read the ranking down to N; ``where``: the size of the
    request's filter (:func:`~hopgraph.engine.filters.check_where`), whose evaluation is charged too."""
    cls = pipeline_class(pipeline)
    work1 = float(cls.cost(shape, cls.SearchParams.create(), 1, 5).work)
    work = float(cls.cost(shape, params, n_queries, k, group_by_document).work)
    at_once = min(n_queries, at_once or n_queries, cls.default_batch_size or n_queries)
    memory = float(cls.cost(shape, params, at_once, k, group_by_document).memory)
    if where is not None:
        work_f, memory_f = _filter_model(shape, where)
        work, memory = work + work_f, memory + memory_f
    return Estimate(work / max(work1, 1.0), int(memory))


def _filter_model(shape: IndexShape, where: WhereSize) -> tuple[float, float]:
    """(work, bytes) of evaluating a ``where`` filter once: a mask of N rows per clause and per
    listed value, and one mask held per level of nesting (with the one being combined)."""
    n = max(shape.n, 1)
    return float((where.clauses + where.values) * n), float((where.depth + 1) * n)

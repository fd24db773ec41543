"""The checks every ``POST /search`` passes before it reaches a search worker, and the status of
each kind of failure. Each check raises :class:`~hopgraph.serve.budget.RequestRefused` (status and a ``detail``
naming the input and the limit); nothing here allocates more than the request itself."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from ..engine.embedders import validate_embeddings
from ..engine.errors import HopgraphError, InputError, ShardUnavailableError
from ..engine.filters import WhereSize, check_where
from ..engine.params import RUN_SETTINGS
from ..engine.pipelines import pipeline_class, pipeline_names
from ..engine.pipelines.base import RefitNeeded
from ..index import Index
from .budget import Estimate, IndexShape, ParamLimits, RequestRefused, estimate
from .limits import ServeLimits
from .schema import EmbeddingQuery, SearchRequest

#: what a request may not set: the run settings are the server's, and a generator names a model
#: folder on the server's disk
SERVER_FIXED_PARAMS = frozenset({*RUN_SETTINGS, "generator"})
_FLOAT32_MAX = float(np.finfo(np.float32).max)


@dataclass(frozen=True)
class CheckedSearch:
    """A search request that passed every check: its queries (texts / normalised rows), its
    filters, its cost estimate and the worker it goes to."""

    queries: list[str | np.ndarray]
    filters: dict[str, Any]
    cost: Estimate
    #: the estimated work is above ``heavy_cost``: the bulk worker runs it
    heavy: bool = False


def query_params_info(name: str) -> dict[str, str]:
    """The search parameters a request may set for pipeline ``name``, with their allowed values."""
    P = pipeline_class(name).SearchParams
    return {p: P.domain(p).text() for p in P.names() if p not in SERVER_FIXED_PARAMS}


def search_error_status(e: BaseException) -> int:
    """HTTP status of an exception raised by a search (after the request passed the checks): one
    kind of fault, one status.

    * 422 for :class:`HopgraphError` (``InputError`` and ``InvalidParameter`` — every
      ``ValueError`` hopgraph raises on purpose is one —, ``IndexFormatError``) and
      ``NotImplementedError``: the request cannot be answered as asked;
    * 503 for :class:`~hopgraph.engine.errors.ShardUnavailableError` (a sharded index's shard with no
      live replica: retry later);
    * 500 (logged with its traceback) for anything else, a bare ``ValueError`` from a
      library included: a valid request that fails there is a bug of the server, and a
      4xx would tell the client to change a request that was fine.
    """
    if isinstance(e, ShardUnavailableError):
        return 503
    if isinstance(e, (HopgraphError, NotImplementedError)):
        return 422
    return 500


def check_search(request: SearchRequest, index: Index, served: list[str], limits: ServeLimits,
                 bounds: ParamLimits, shape: IndexShape) -> CheckedSearch:
    """Every check of a search request, cheapest first: pipeline, parameters and their bounds, k,
    batch size, filters, queries, then the memory estimate."""
    name = request.pipeline
    check_pipeline(name, served)
    params = check_params(index, name, request.params, bounds)
    if not 1 <= request.k <= limits.max_k:
        raise RequestRefused(f"k must be between 1 and {limits.max_k}, got {request.k}")
    if len(request.queries) > limits.max_batch:
        raise RequestRefused(f"{len(request.queries)} queries in one request; the limit is {limits.max_batch}")
    filters, size = check_filters(request, limits)
    queries = check_queries(request.queries, pipeline_class(name).needs.query_texts, int(index.X.shape[1]),
                            limits, name)
    n = max(len(queries), 1)
    cost = estimate(shape, name, params, n, request.k, request.group_by_document, where=size)
    heavy = cost.work > limits.heavy_cost
    if heavy:  # the bulk worker searches bulk_batch_size queries at a time
        cost = estimate(shape, name, params, n, request.k, request.group_by_document, limits.bulk_batch_size,
                        where=size)
    if cost.memory_bytes > limits.max_request_bytes:
        raise RequestRefused(f"this request would need about {cost.memory_bytes / (1 << 20):,.0f} MiB (estimated "
                             f"for {len(queries)} queries, k={request.k} and its params), above this server's "
                             f"per-request budget of {limits.max_request_mb:g} MiB; ask for smaller params "
                             "or fewer queries")
    return CheckedSearch(queries, filters, cost, heavy)


def check_pipeline(name: str, served: list[str]) -> None:
    """Refuse (:class:`RequestRefused`) a request for pipeline ``name`` unless the server serves it
    (``served``), saying whether it is not loaded, not available in this version or unknown."""
    if name in served:
        return
    if name in pipeline_names():
        why = f"pipeline {name!r} is not loaded by this server (restart it with --pipelines ...,{name})"
    else:
        try:
            pipeline_class(name)
            why = f"pipeline {name!r} is not available"
        except NotImplementedError as e:
            why = str(e)
        except ValueError:
            why = f"unknown pipeline {name!r}"
    raise RequestRefused(f"{why}; this server serves: {', '.join(served)}")


def check_params(index: Index, name: str, params: dict[str, Any], bounds: ParamLimits) -> Any:
    """The validated search parameters of ``params`` for the served pipeline ``name`` (fit
    parameters would need a refit, run settings are the server's), within the serving bounds."""
    refused = sorted(set(params) & SERVER_FIXED_PARAMS)
    if refused:
        raise RequestRefused(f"params: {', '.join(map(repr, refused))} cannot be set per request "
                             "(fixed when the server starts)")
    try:
        values = index.pipeline(name).search_params(**params)
    except RefitNeeded as e:
        raise RequestRefused(f"params: {e} (set fit parameters when building the index)") from None
    except InputError as e:
        raise RequestRefused(f"params: {e}") from None
    bounds.check(name, params, values)
    return values


def check_filters(request: SearchRequest, limits: ServeLimits) -> tuple[dict[str, Any], WhereSize | None]:
    """The request's ``where`` / ``allowed_ids`` within their size limits, and the size of its
    ``where`` (None: none). The ``where`` bounds are counted over its whole tree by
    :func:`~hopgraph.engine.filters.check_where` (the engine's bounds, and this server's
    ``max_where_fields`` / ``max_where_values``); its values are checked by the index."""
    filters: dict[str, Any] = {}
    size = None
    if request.where is not None:
        try:
            size = check_where(request.where, limits.max_where_values, limits.max_where_fields)
        except InputError as e:
            raise RequestRefused(str(e)) from None
        filters["where"] = request.where
    if request.allowed_ids is not None:
        if len(request.allowed_ids) > limits.max_allowed_ids:
            raise RequestRefused(f"allowed_ids holds {len(request.allowed_ids)} ids; the limit is "
                                 f"{limits.max_allowed_ids}")
        filters["allowed_ids"] = request.allowed_ids
    return filters, size


def check_queries(queries: Sequence[Any], needs_text: bool, dim: int, limits: ServeLimits,
                  name: str) -> list[str | np.ndarray]:
    """The queries as texts / normalised float32 rows; the first bad one refused by its position."""
    out: list[str | np.ndarray] = []
    for i, q in enumerate(queries):
        if isinstance(q, EmbeddingQuery):
            out.append(_embedding_row(q, i, needs_text, dim, name))
            continue
        text = q if isinstance(q, str) else q.text
        if len(text) > limits.max_query_chars:
            raise RequestRefused(f"queries[{i}] has {len(text)} characters; the limit is {limits.max_query_chars}")
        if not text.strip():
            raise RequestRefused(f"queries[{i}] is empty")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise RequestRefused(f"queries[{i}] is not valid Unicode text (lone surrogate)") from None
        out.append(text)
    return out


def _embedding_row(q: EmbeddingQuery, i: int, needs_text: bool, dim: int, name: str) -> np.ndarray:
    if needs_text:
        raise RequestRefused(f"queries[{i}]: pipeline {name!r} needs the question text, not only its embedding")
    if len(q.embedding) != dim:
        raise RequestRefused(f"queries[{i}]: embedding has dimension {len(q.embedding)}, the index has {dim}")
    row = np.asarray([q.embedding], dtype=np.float64)
    if np.abs(row).max() > _FLOAT32_MAX:
        raise RequestRefused(f"queries[{i}].embedding: values must fit in float32 (|x| <= {_FLOAT32_MAX:.3g})")
    try:  # float32 as in the index, so a float32 client vector is used unchanged
        return validate_embeddings(row.astype(np.float32), f"queries[{i}].embedding", dim)[0]
    except InputError as e:
        raise RequestRefused(str(e)) from None


# ---------------------------------------------------------------------- schema errors
_QUERY_TAGS = {"string", "text", "embedding"}


def _format_loc(loc: Sequence[Any]) -> str:
    parts: list[str] = []
    for i, item in enumerate(loc):
        if i == 0 and item == "body":
            continue
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif i >= 2 and isinstance(loc[i - 1], int) and loc[i - 2] == "queries" and item in _QUERY_TAGS:
            continue  # the union branch pydantic tried; the next item names the field
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts) or "body"


async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    """400 for malformed JSON, else 422 with the first problems as one readable line."""
    errors = exc.errors()
    for e in errors:
        if e.get("type") == "json_invalid":
            pos = e["loc"][-1] if e.get("loc") else "?"
            return JSONResponse({"detail": f"malformed JSON at character {pos}: "
                                           f"{e.get('ctx', {}).get('error', 'decode error')}"}, status_code=400)
    if any(tuple(e.get("loc", ())) == ("body",) for e in errors):
        return JSONResponse({"detail": "the request body must be a JSON object "
                                       "sent with 'Content-Type: application/json'"}, status_code=422)
    parts = [f"{_format_loc(e.get('loc', ()))}: {e.get('msg', 'invalid')}" for e in errors[:5]]
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return JSONResponse({"detail": "; ".join(parts) + more}, status_code=422)


async def refused(request: Request, exc: RequestRefused) -> JSONResponse:
    """A :class:`RequestRefused` as its status and ``{"detail": ...}``."""
    return JSONResponse({"detail": exc.detail}, status_code=exc.status)

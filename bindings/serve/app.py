"""The ``hopgraph serve`` HTTP application: FastAPI over one loaded :class:`Index`.

Endpoints: ``POST /search`` (batched questions → hits with text and metadata, and timing;
``where`` / ``allowed_ids`` filters), ``GET /passages/{id}`` (one passage's title, text and
metadata), ``POST /passages`` (add passages) and ``DELETE /passages/{id}`` (delete one) — the
writes: behind the API key when the server has one, refused with 403 in ``--read-only`` mode,
run in the search worker between micro-batches and committed to the index directory — ``GET /health``,
``GET /info`` (index manifest, pipelines, embedder, device, limits) and the OpenAPI
schema at ``/openapi.json`` (browsable at ``/docs``). Every bad request gets a 4xx
answer whose ``detail`` names the input and the limit; it never reaches the shared
search worker, so it cannot disturb other clients.
"""
from __future__ import annotations

import logging
import time
from contextlib import asynccontextmanager
from typing import Any, Sequence

import numpy as np
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from .. import __version__
from ..engine.embedders import validate_embeddings
from ..engine.errors import HopgraphError, InputError
from ..engine.params import RUN_SETTINGS
from ..engine.pipelines import pipeline_class, pipeline_names
from ..engine.pipelines.base import RefitNeeded
from ..index import Index
from ..kernels.dispatch import cuda_available, resolve_device
from .auth import ApiKeyMiddleware
from .batcher import MicroBatcher, QueueFull
from .limits import ServeLimits
from .schema import (AddRequest, AddResponse, DeleteResponse, EmbeddingQuery, ErrorResponse, PassageOut,
                     SearchRequest, SearchResponse)

log = logging.getLogger("hopgraph.serve")

_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorResponse, "description": "malformed JSON"},
    401: {"model": ErrorResponse, "description": "missing or wrong API key (when the server has one)"},
    413: {"model": ErrorResponse, "description": "request body larger than limits.max_body_bytes"},
    422: {"model": ErrorResponse, "description": "a field is invalid or beyond a limit, or the index cannot "
                                                 "answer the request as asked; detail says which"},
    500: {"model": ErrorResponse, "description": "an internal error (a bug; logged by the server)"},
    503: {"model": ErrorResponse, "description": "too many queries waiting; retry later"},
}


def create_app(index: Index, limits: ServeLimits | None = None, api_key: str | None = None,
               pipelines: Sequence[str] | None = None, read_only: bool = False) -> FastAPI:
    """The FastAPI app serving ``index``.

    ``pipelines`` (default: those fitted in the index) are fitted now if needed, so no
    request ever waits for a fit. ``api_key`` enables the 401 check (see :mod:`.auth`).
    ``read_only`` refuses the write endpoints (403). Writes to an index loaded from a directory
    are committed there (a new generation) before they are answered.
    """
    limits = limits or ServeLimits()
    served = list(dict.fromkeys(pipelines or index.pipelines))
    if not served:
        raise InputError("the index has no fitted pipeline: give the pipelines to serve (--pipelines)")
    for name in served:
        index.pipeline(name)
    needs_text = {name: pipeline_class(name).needs.query_texts for name in served}
    dim = int(index.X.shape[1])
    batcher = MicroBatcher(index, limits)
    started = time.time()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await batcher.start()
        try:
            yield
        finally:
            await batcher.stop()

    app = FastAPI(title="hopgraph", version=__version__, lifespan=lifespan, max_body_size=limits.max_body_bytes,
                  description="Multi-hop graph retrieval over one hopgraph index. "
                              "POST /search answers a batch of questions with one pipeline.")
    app.add_exception_handler(RequestValidationError, _validation_error)
    if api_key is not None:
        app.add_middleware(ApiKeyMiddleware, api_key=api_key)
    app.state.batcher = batcher
    app.state.pipelines = served

    @app.get("/health", summary="liveness: the index is loaded and the search worker runs")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "passages": index.n_live, "uptime_s": round(time.time() - started, 3),
                "batches": batcher.batches}

    @app.get("/info", summary="index manifest, pipelines, embedder, device and limits")
    async def get_info() -> dict[str, Any]:
        return {**_server_info(index, served, limits), "read_only": read_only}

    @app.post("/search", summary="top-k passages for each query", response_model=None,
              responses={200: {"model": SearchResponse}, **_ERRORS})
    async def search(request: SearchRequest) -> JSONResponse:
        t0 = time.perf_counter()
        queries = _check_request(request, served, needs_text, dim, limits, index)
        if not queries:
            return JSONResponse({"pipeline": request.pipeline, "k": request.k, "results": [],
                                 "timing": {"queue_ms": 0.0, "embed_ms": 0.0, "search_ms": 0.0, "total_ms": 0.0,
                                            "batch_queries": 0, "batch_requests": 0}, "warnings": []})
        try:
            filters = {name: value for name, value in (("where", request.where),
                                                       ("allowed_ids", request.allowed_ids)) if value is not None}
            result = await batcher.submit(request.pipeline, request.k, queries, request.params,
                                          group_by_document=request.group_by_document, filters=filters)
        except QueueFull as e:
            raise HTTPException(503, str(e), headers={"Retry-After": "1"}) from None
        except Exception as e:
            status = search_error_status(e)
            if status >= 500:
                log.exception("search failed (%s on pipeline %r)", type(e).__name__, request.pipeline)
                raise HTTPException(status, f"internal error while searching ({type(e).__name__}); "
                                            "the server log has the details") from None
            raise HTTPException(status, str(e)) from None
        timing = {**result.timing, "total_ms": (time.perf_counter() - t0) * 1000}
        return JSONResponse({
            "pipeline": request.pipeline, "k": request.k,
            "results": [{"hits": [{"id": h.id, "title": h.title, "score": h.score, "rank": h.rank,
                                   "text": h.text if request.with_text else None, "metadata": h.metadata}
                                  for h in hits]}
                        for hits in result.hits],
            "timing": timing,
            "warnings": result.warnings,
        })

    @app.get("/passages/{pid:path}", summary="one passage by id: title, text and metadata", response_model=None,
             responses={200: {"model": PassageOut},
                        404: {"model": ErrorResponse, "description": "no passage has this id"},
                        401: _ERRORS[401]})
    def passage(pid: str) -> JSONResponse:
        """The passage with id ``pid`` (percent-encode it; a ``/`` may stay literal). A plain
        function: FastAPI runs it in its thread pool, so building the id table on the first
        look-up never blocks the event loop."""
        try:
            return JSONResponse(index.passage(pid))
        except KeyError:
            raise HTTPException(404, f"no passage with id {pid!r} in this index") from None

    def check_writable() -> None:
        if read_only:
            raise HTTPException(403, "this server is read-only (started with --read-only)")

    def commit() -> bool:
        if index.path is None:
            return False
        index.save()
        return True

    @app.post("/passages", summary="add passages (embedded by the server); committed to the index",
              response_model=None, responses={200: {"model": AddResponse}, 403: {"model": ErrorResponse},
                                              409: {"model": ErrorResponse}, **_ERRORS})
    async def add_passages(request: AddRequest) -> JSONResponse:
        check_writable()
        if not request.passages:
            raise HTTPException(422, "passages: give at least one passage")
        if len(request.passages) > limits.max_add:
            raise HTTPException(422, f"{len(request.passages)} passages in one request; the limit is {limits.max_add}")
        records = [p.model_dump() for p in request.passages]

        def run() -> dict[str, Any]:
            report = index.add(records, upsert=request.upsert)
            return {"added": report.added, "replaced": report.replaced, "passages": index.n_live,
                    "committed": commit()}

        return JSONResponse(await _write(batcher, run, "POST /passages"))

    @app.delete("/passages/{pid:path}", summary="delete one passage (no search returns it); committed",
                response_model=None, responses={200: {"model": DeleteResponse}, 403: {"model": ErrorResponse},
                                                404: {"model": ErrorResponse, "description": "no passage has this id"},
                                                **_ERRORS})
    async def delete_passage(pid: str) -> JSONResponse:
        check_writable()

        def run() -> dict[str, Any]:
            report = index.delete([pid])
            if report.unknown:
                raise KeyError(pid)
            return {"deleted": pid, "passages": index.n_live, "committed": commit()}

        try:
            return JSONResponse(await _write(batcher, run, "DELETE /passages"))
        except KeyError:
            raise HTTPException(404, f"no passage with id {pid!r} in this index") from None

    return app


async def _write(batcher: MicroBatcher, run: Any, what: str) -> dict[str, Any]:
    """Run an index update in the search worker; 409 when another process holds the index's write
    lock or an id is already there, 422 for bad input, 500 (logged) for anything else."""
    from ..engine.errors import DuplicateIdError, IndexLockedError

    try:
        return await batcher.run_exclusive(run)
    except KeyError:
        raise
    except (IndexLockedError, DuplicateIdError) as e:
        raise HTTPException(409, str(e)) from None
    except Exception as e:
        if search_error_status(e) < 500:
            raise HTTPException(422, str(e)) from None
        log.exception("%s failed (%s)", what, type(e).__name__)
        raise HTTPException(500, f"internal error during {what} ({type(e).__name__}); the server log has the "
                                 "details") from None


def search_error_status(e: BaseException) -> int:
    """HTTP status of an exception raised by a search (after the request passed
    :func:`_check_request`): one kind of fault, one status.

    * 422 for :class:`HopgraphError` (``InputError`` and ``InvalidParameter`` — every
      ``ValueError`` hopgraph raises on purpose is one —, ``IndexFormatError``) and
      ``NotImplementedError``: the request cannot be answered as asked;
    * 500 (logged with its traceback) for anything else, a bare ``ValueError`` from a
      library included: a valid request that fails there is a bug of the server, and a
      4xx would tell the client to change a request that was fine.
    """
    if isinstance(e, (HopgraphError, NotImplementedError)):
        return 422
    return 500


#: what a request may not set: the run settings are the server's, and a generator names a model
#: folder on the server's disk
SERVER_FIXED_PARAMS = frozenset({*RUN_SETTINGS, "generator"})


def query_params_info(name: str) -> dict[str, str]:
    """The search parameters a request may set for pipeline ``name``, with their allowed values."""
    P = pipeline_class(name).SearchParams
    return {p: P.domain(p).text() for p in P.names() if p not in SERVER_FIXED_PARAMS}


def _check_params(index: Index, name: str, params: dict[str, Any]) -> None:
    """422 unless ``params`` are valid search parameters of the served pipeline ``name`` (fit
    parameters would need a refit, run settings are the server's)."""
    if not params:
        return
    refused = sorted(set(params) & SERVER_FIXED_PARAMS)
    if refused:
        raise HTTPException(422, f"params: {', '.join(map(repr, refused))} cannot be set per request "
                                 "(fixed when the server starts)")
    try:
        index.pipeline(name).search_params(**params)
    except RefitNeeded as e:
        raise HTTPException(422, f"params: {e} (set fit parameters when building the index)") from None
    except InputError as e:
        raise HTTPException(422, f"params: {e}") from None


def _check_request(request: SearchRequest, served: list[str], needs_text: dict[str, bool], dim: int,
                   limits: ServeLimits, index: Index) -> list[str | np.ndarray]:
    """The request's queries as texts / normalised rows; HTTPException 422 naming the first problem."""
    name = request.pipeline
    if name not in served:
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
        raise HTTPException(422, f"{why}; this server serves: {', '.join(served)}")
    _check_params(index, name, request.params)
    if not 1 <= request.k <= limits.max_k:
        raise HTTPException(422, f"k must be between 1 and {limits.max_k}, got {request.k}")
    if len(request.queries) > limits.max_batch:
        raise HTTPException(422, f"{len(request.queries)} queries in one request; the limit is {limits.max_batch}")
    out: list[str | np.ndarray] = []
    for i, q in enumerate(request.queries):
        if isinstance(q, EmbeddingQuery):
            if needs_text[name]:
                raise HTTPException(422, f"queries[{i}]: pipeline {name!r} needs the question text, "
                                         "not only its embedding")
            if len(q.embedding) != dim:
                raise HTTPException(422, f"queries[{i}]: embedding has dimension {len(q.embedding)}, "
                                         f"the index has {dim}")
            row = np.asarray([q.embedding], dtype=np.float64)
            if np.abs(row).max() > _FLOAT32_MAX:
                raise HTTPException(422, f"queries[{i}].embedding: values must fit in float32 "
                                         f"(|x| <= {_FLOAT32_MAX:.3g})")
            try:  # float32 as in the index, so a float32 client vector is used unchanged
                out.append(validate_embeddings(row.astype(np.float32), f"queries[{i}].embedding", dim)[0])
            except InputError as e:
                raise HTTPException(422, str(e)) from None
            continue
        text = q if isinstance(q, str) else q.text
        if len(text) > limits.max_query_chars:
            raise HTTPException(422, f"queries[{i}] has {len(text)} characters; the limit is "
                                     f"{limits.max_query_chars}")
        if not text.strip():
            raise HTTPException(422, f"queries[{i}] is empty")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise HTTPException(422, f"queries[{i}] is not valid Unicode text (lone surrogate)") from None
        out.append(text)
    return out


def _server_info(index: Index, served: list[str], limits: ServeLimits) -> dict[str, Any]:
    try:
        manifest = index.manifest
    except RuntimeError:  # an index that was built in memory and never saved
        manifest = None
    try:
        device = resolve_device(index.device)
    except (RuntimeError, ValueError) as e:
        device = f"unavailable ({e})"
    return {
        "version": __version__,
        "passages": index.n_live,
        "pipelines": served,
        "pipelines_needing_text": [p for p in served if pipeline_class(p).needs.query_texts],
        "query_params": {p: query_params_info(p) for p in served},
        "embedder": {"name": index.embedder_name, "dim": int(index.X.shape[1])},
        "device": {"requested": index.device, "resolved": device, "cuda_available": cuda_available()},
        "limits": limits.to_dict(),
        "manifest": manifest,
    }


_QUERY_TAGS = {"string", "text", "embedding"}
_FLOAT32_MAX = float(np.finfo(np.float32).max)


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


async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
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

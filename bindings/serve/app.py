"""The ``hopgraph serve`` HTTP application: FastAPI over one loaded :class:`Index`.

Endpoints: ``POST /search`` (batched questions → hits with text and metadata, and timing;
``where`` / ``allowed_ids`` filters), ``GET /passages/{id}`` (one passage's title, text and
metadata), ``POST /passages`` (add passages) and ``DELETE /passages/{id}`` (delete one) — the
writes: behind the API key when the server has one, refused with 403 in ``--read-only`` mode,
applied to a copy of the index in a writer thread while searches go on, group-committed to the index
directory and then served (:mod:`hopgraph.serve.commits`) — ``GET /health`` (with the segment count and the commit served),
``GET /info`` (index manifest, pipelines, embedder, device, limits, parameter bounds) and the
OpenAPI schema at ``/openapi.json`` (browsable at ``/docs``).

Every request has a budget (:mod:`hopgraph.serve.budget`, :mod:`hopgraph.serve.checks`): a bad or oversized request gets a 4xx
whose ``detail`` names the input and the limit and never reaches a search worker; a search that
runs past ``request_timeout`` is stopped and answered 504 (:mod:`hopgraph.serve.batcher`). Without an API key,
only loopback ``Host`` names and same-origin browser writes are accepted (:mod:`hopgraph.serve.guard`).
"""
from __future__ import annotations

import asyncio
import logging
import time
from functools import partial
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from fastapi import APIRouter, FastAPI, HTTPException
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from .. import __version__
from ..engine.errors import DuplicateIdError, IndexLockedError, InputError
from ..engine.storage import StaleIndexError
from ..engine.pipelines import pipeline_class
from ..index import Index
from ..kernels.dispatch import cuda_available, resolve_device
from .auth import ApiKeyMiddleware
from .batcher import DeadlineExceeded, MicroBatcher, QueueFull
from .budget import IndexShape, ParamLimits, RequestRefused
from .checks import check_search, query_params_info, refused, search_error_status, validation_error
from .commits import COMMIT_WINDOW_MS, LiveWrites
from .guard import HostOriginMiddleware
from .limits import ServeLimits
from .writer import apply_add, apply_delete, unchanged_ids
from .schema import (AddRequest, AddResponse, DeleteResponse, ErrorResponse, PassageOut, SearchRequest, SearchResponse,
                     WriteAccepted, WriteStatus)
from .write_status import Writes

log = logging.getLogger("hopgraph.serve")

_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorResponse, "description": "malformed JSON"},
    401: {"model": ErrorResponse, "description": "missing or wrong API key (when the server has one)"},
    403: {"model": ErrorResponse, "description": "a Host name or a browser origin this server does not accept "
                                                 "(without an API key)"},
    413: {"model": ErrorResponse, "description": "request body larger than limits.max_body_bytes, or an added "
                                                 "passage longer than limits.max_passage_chars"},
    422: {"model": ErrorResponse, "description": "a field is invalid or beyond a limit (a parameter above its "
                                                 "bound, a memory estimate above the budget), or the index cannot "
                                                 "answer the request as asked; detail says which"},
    500: {"model": ErrorResponse, "description": "an internal error (a bug; logged by the server)"},
    503: {"model": ErrorResponse, "description": "too many queries waiting; retry later"},
    504: {"model": ErrorResponse, "description": "the search ran past limits.request_timeout and was stopped"},
}


@dataclass
class Service:
    """What the routes share: the index, the pipelines served, the limits and the batcher."""

    index: Index
    limits: ServeLimits
    served: list[str]
    bounds: ParamLimits
    read_only: bool
    batcher: MicroBatcher
    live: LiveWrites
    writes: Writes = field(default_factory=Writes)
    started: float = field(default_factory=time.time)
    _fit: dict[str, Any] = field(default_factory=dict)

    def shape(self) -> IndexShape:
        """The index as the cost models see it now (writes change its size)."""
        if not self._fit:
            self._fit.update({n: self.index.pipeline(n).fit_params for n in self.served})
        return IndexShape(len(self.index.X), int(self.index.X.shape[1]), self._fit)


def create_app(index: Index, limits: ServeLimits | None = None, api_key: str | None = None,
               pipelines: Sequence[str] | None = None, read_only: bool = False,
               param_limits: ParamLimits | None = None, allowed_hosts: Sequence[str] = (),
               commit_window_ms: float = COMMIT_WINDOW_MS, merge: bool = True, write_process: bool = True) -> FastAPI:
    """The FastAPI app serving ``index``.

    ``pipelines`` (default: those fitted in the index) are fitted now if needed, so no request
    ever waits for a fit. ``api_key`` enables the 401 check (:mod:`hopgraph.serve.auth`); without one, the Host /
    Origin checks apply (:mod:`hopgraph.serve.guard`; ``allowed_hosts``: names accepted besides loopback ones).
    ``read_only`` refuses the write endpoints (403). ``param_limits``: the serving bounds of search
    parameters (default :meth:`ParamLimits.default`). Writes to an index loaded from a directory are
    committed there before they are answered, the writes of one ``commit_window_ms`` sharing a
    commit; ``merge``: merge small segments in the background; commits of other processes are taken
    in before the next search or write (:mod:`hopgraph.serve.commits`); ``write_process``: apply the
    writes in a writer process when the embedder allows (else in a writer thread,
    :mod:`hopgraph.serve.writer`).
    """
    service = _service(index, limits or ServeLimits(), pipelines, read_only, param_limits, commit_window_ms, merge,
                       write_process)
    app = FastAPI(title="hopgraph", version=__version__, lifespan=_lifespan(service),
                  max_body_size=service.limits.max_body_bytes,
                  description="Multi-hop graph retrieval over one hopgraph index. "
                              "POST /search answers a batch of questions with one pipeline.")
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(RequestRefused, refused)
    if api_key is not None:
        app.add_middleware(ApiKeyMiddleware, api_key=api_key)
    else:
        app.add_middleware(HostOriginMiddleware, allowed_hosts=allowed_hosts)
    for router in (_info_routes(service), _search_routes(service), _passage_routes(service)):
        app.include_router(router)
    app.state.batcher = service.batcher
    app.state.live = service.live
    app.state.pipelines = service.served
    return app


def _service(index: Index, limits: ServeLimits, pipelines: Sequence[str] | None, read_only: bool,
             param_limits: ParamLimits | None, commit_window_ms: float = COMMIT_WINDOW_MS,
             merge: bool = True, write_process: bool = True) -> Service:
    served = list(dict.fromkeys(pipelines or index.pipelines))
    if not served:
        raise InputError("the index has no fitted pipeline: give the pipelines to serve (--pipelines)")
    param_limits = param_limits or ParamLimits.default()
    param_limits.require(served)
    for name in served:
        index.pipeline(name)
    batcher = MicroBatcher(index, limits)
    live = LiveWrites(index, batcher.run_exclusive, commit_window_ms, merge=merge and not read_only,
                      process=write_process, pipelines=served)
    batcher.refresh = live.refresh
    return Service(index, limits, served, param_limits, read_only, batcher, live)


def _lifespan(service: Service) -> Any:
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await service.batcher.start()
        try:
            yield
        finally:
            await service.writes.drain()
            await service.live.stop()
            await service.batcher.stop()

    return lifespan


def _info_routes(service: Service) -> APIRouter:
    router = APIRouter()

    @router.get("/health", summary="liveness: the index is loaded and the search workers run; its segments "
                                   "and the commit served")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "passages": service.index.n_live,
                "uptime_s": round(time.time() - service.started, 3), "batches": service.batcher.batches,
                **service.live.health()}

    @router.get("/info", summary="index manifest, pipelines, embedder, device, limits and parameter bounds")
    async def get_info() -> dict[str, Any]:
        return {**_server_info(service), "read_only": service.read_only}

    return router


def _search_routes(service: Service) -> APIRouter:
    router = APIRouter()

    @router.post("/search", summary="top-k passages for each query", response_model=None,
                 responses={200: {"model": SearchResponse}, **_ERRORS})
    async def search(request: SearchRequest) -> JSONResponse:
        t0 = time.perf_counter()
        if request.pipeline is None:  # the server's default: its first served pipeline
            request = request.model_copy(update={"pipeline": service.served[0]})
        deadline = time.monotonic() + service.limits.request_timeout
        checked = check_search(request, service.index, service.served, service.limits, service.bounds,
                               service.shape())
        if not checked.queries:
            return JSONResponse({"pipeline": request.pipeline, "k": request.k, "results": [],
                                 "timing": {"queue_ms": 0.0, "embed_ms": 0.0, "search_ms": 0.0, "total_ms": 0.0,
                                            "batch_queries": 0, "batch_requests": 0, "lane": "none"}, "warnings": []})
        try:
            result = await service.batcher.submit(
                request.pipeline, request.k, checked.queries, request.params,
                group_by_document=request.group_by_document, filters=checked.filters,
                heavy=checked.heavy, memory=checked.cost.memory_bytes,
                deadline=deadline)
        except QueueFull as e:
            raise HTTPException(503, str(e), headers={"Retry-After": "1"}) from None
        except DeadlineExceeded as e:
            raise HTTPException(504, f"{e}; send fewer queries or smaller params, or retry later") from None
        except Exception as e:
            raise _search_failure(e, request.pipeline) from None
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

    return router


def _search_failure(e: Exception, pipeline: str) -> HTTPException:
    status = search_error_status(e)
    if status == 503:  # a shard with no live replica: a temporary fault, named
        return HTTPException(503, str(e), headers={"Retry-After": "1"})
    if status >= 500:
        log.exception("search failed (%s on pipeline %r)", type(e).__name__, pipeline, exc_info=e)
        return HTTPException(status, f"internal error while searching ({type(e).__name__}); "
                                     "the server log has the details")
    return HTTPException(status, str(e))


def _passage_routes(service: Service) -> APIRouter:
    router = APIRouter()
    index, limits, live = service.index, service.limits, service.live

    @router.get("/passages/{pid:path}", summary="one passage by id: title, text and metadata", response_model=None,
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
            raise passage_not_found(pid) from None

    def check_writable() -> None:
        if service.read_only:
            raise HTTPException(403, "this server is read-only (started with --read-only)")

    @router.post("/passages", summary="add passages (embedded by the server); committed to the index",
                 response_model=None, responses={200: {"model": AddResponse}, 202: {"model": WriteAccepted},
                                                 403: {"model": ErrorResponse}, 409: {"model": ErrorResponse},
                                                 **_ERRORS})
    async def add_passages(request: AddRequest, wait: bool = True) -> JSONResponse:
        """Add passages; answered once committed, or at once with ``?wait=false`` (202: the write's id,
        followed at ``GET /commits/{id}``). Passages the index holds unchanged are ``"unchanged"``."""
        check_writable()
        _check_add(request, limits)
        records = [p.model_dump() for p in request.passages]
        held = await _refuse(service, lambda: unchanged_ids(index, records) if live.is_latest() else [])
        if len(held) == len(records):  # a repeated add: nothing to write
            return JSONResponse({"added": [], "replaced": [], "unchanged": held, "passages": index.n_live,
                                 "committed": live.commit_name() is not None, "commit": live.commit_name()})

        def refusable() -> None:  # bad records; ids the served index holds when it is the latest commit
            index.check_add([r for r in records if r["id"] not in held], upsert=request.upsert or not live.is_latest())

        async def embed_beside() -> dict[str, Any]:  # an in-place add: embedded beside the searches first
            return {"embeddings": await service.batcher.run_beside(lambda: index.embed_passages(records))}

        op = partial(apply_add, records=records, upsert=request.upsert)
        await _refuse(service, refusable)
        return await _answer_write(service, _commit(service, op, "POST /passages", embed_beside if live.in_place
                                                    else None), wait)

    @router.delete("/passages/{pid:path}", summary="delete one passage (no search returns it); committed",
                   response_model=None, responses={200: {"model": DeleteResponse}, 202: {"model": WriteAccepted},
                                                   403: {"model": ErrorResponse},
                                                   404: {"model": ErrorResponse,
                                                         "description": "no passage has this id"},
                                                   **_ERRORS})
    async def delete_passage(pid: str, wait: bool = True) -> JSONResponse:
        """Delete a passage; answered once committed, or at once with ``?wait=false`` (202)."""
        check_writable()

        def refusable() -> None:  # an id the served index does not hold, when it is the latest commit
            if live.is_latest() and not index.live_rows([pid]):
                raise KeyError(pid)

        try:
            await _refuse(service, refusable)
        except KeyError:
            raise passage_not_found(pid) from None
        return await _answer_write(service, _commit(service, partial(apply_delete, pid=pid), "DELETE /passages",
                                                    missing=pid), wait)

    @router.get("/commits/{write_id}", summary="the state of a write sent with ?wait=false", response_model=None,
                responses={200: {"model": WriteStatus}, 404: {"model": ErrorResponse}, 401: _ERRORS[401]})
    def write_status(write_id: str) -> JSONResponse:
        """``pending``, ``committed`` (with the write's answer) or ``failed`` (with the error it would have
        answered); 404 for an id this server never gave or no longer remembers."""
        state = service.writes.get(write_id)
        if state is None:
            raise HTTPException(404, f"no write {write_id!r} on this server (ids are kept for the last "
                                     f"{service.writes.maxsize} writes)")
        return JSONResponse(state)

    return router


def _check_add(request: AddRequest, limits: ServeLimits) -> None:
    """422 for no passage or too many; 413 for a passage longer than ``max_passage_chars``."""
    if not request.passages:
        raise HTTPException(422, "passages: give at least one passage")
    if len(request.passages) > limits.max_add:
        raise HTTPException(422, f"{len(request.passages)} passages in one request; the limit is {limits.max_add}")
    for i, p in enumerate(request.passages):
        size = len(p.title) + len(p.text)
        if size > limits.max_passage_chars:
            raise HTTPException(413, f"passages[{i}] ({p.id!r}) has {size} characters of title and text; the limit "
                                     f"is {limits.max_passage_chars} (split long documents into passages first)")


async def _refuse(service: Service, refusable: Callable[[], Any]) -> Any:
    """Run ``refusable()`` in a thread beside the searches (holding their read lock): it raises what
    the write would (bad input, an id already there, an unknown id), so such a write is answered —
    409 / 422, a KeyError raised as it is (the route's 404) — without entering the one write path,
    where writes wait for each other, and before an asynchronous write is accepted. Returns what
    ``refusable()`` returns."""
    try:
        return await asyncio.get_running_loop().run_in_executor(None, _reading, service, refusable)
    except KeyError:
        raise
    except Exception as e:
        raise _write_error(e, "a write's checks") from None


async def _commit(service: Service, op: Any, what: str, prepare: Any = None, missing: str | None = None
                  ) -> dict[str, Any]:
    """Apply the write ``op(index)`` (:mod:`hopgraph.serve.writer`) and wait for its group commit
    (:mod:`hopgraph.serve.commits`); ``prepare()`` (when given) is awaited first and gives more
    keywords of ``op``. Every error is an HTTPException: a KeyError is the 404 of passage ``missing``
    (a delete's unknown id), the others as :func:`_write_error` maps them."""
    try:
        if prepare is not None:
            op = partial(op, **(await prepare()))
        return await service.live.write(op)
    except KeyError as e:
        raise (passage_not_found(missing) if missing is not None else _write_error(e, what)) from None
    except Exception as e:
        raise _write_error(e, what) from None


def passage_not_found(pid: str) -> HTTPException:
    """The 404 of a passage id the index does not hold."""
    return HTTPException(404, f"no passage with id {pid!r} in this index")


def _write_error(e: Exception, what: str) -> HTTPException:
    """409 when another process holds the index's write lock too long, an id is already there or
    another writer's commit conflicts, 422 for bad input, 503 when busy, 500 (logged) for anything else."""
    if isinstance(e, (IndexLockedError, DuplicateIdError, StaleIndexError)):
        return HTTPException(409, str(e))
    status = search_error_status(e)
    if status < 500 or status == 503:
        return HTTPException(422 if status < 500 else 503, str(e))
    log.error("%s failed (%s)", what, type(e).__name__, exc_info=e)
    return HTTPException(500, f"internal error during {what} ({type(e).__name__}); the server log has the details")


async def _answer_write(service: Service, commit: Any, wait: bool) -> JSONResponse:
    """The answer of a write whose checks passed: its result once ``commit`` (a :func:`_commit`
    coroutine) is done, or, when not ``wait``, 202 with the id under which ``GET /commits/{id}``
    follows it (:class:`Writes`)."""
    if wait:
        return JSONResponse(await commit)
    write_id = service.writes.start(commit)
    return JSONResponse({"id": write_id, "status": "pending"}, status_code=202)


def _reading(service: Service, fn: Callable[[], Any]) -> Any:
    """``fn()`` holding the read side of the served index's lock (no update swaps it meanwhile)."""
    with service.batcher.lock.reading():
        return fn()


def _server_info(service: Service) -> dict[str, Any]:
    index, served = service.index, service.served
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
        "param_limits": service.bounds.to_dict(served),
        "embedder": {"name": index.embedder_name, "dim": int(index.X.shape[1])},
        "device": {"requested": index.device, "resolved": device, "cuda_available": cuda_available()},
        "limits": service.limits.to_dict(),
        "manifest": manifest,
    }

"""Python clients of ``hopgraph serve``: same result shape as ``Index.search``.

>>> client = hopgraph.Client("http://127.0.0.1:8080", api_key=None)   # doctest: +SKIP
>>> hits = client.search(["Who founded the prize ...?"], pipeline="dense", k=5)
>>> hits[0][0].id, hits[0][0].score, hits[0][0].text, hits[0][0].metadata
>>> client.passage(hits[0][0].id)          # {"id", "title", "text", "metadata"}
>>> client.search("...", where={"year": {"$gte": 2020}}, allowed_ids=None)   # filters, as Index.search
>>> client.add([{"id": "n1", "title": "...", "text": "..."}])     # POST /passages (committed)
>>> client.delete("n1")                                            # DELETE /passages/n1

:class:`AsyncClient` has the same methods as coroutines (``async with hopgraph.AsyncClient(url)
as c: await c.search(...)``). One AsyncClient may be awaited from any number of event loops, one
after another or at once (``asyncio.run(c.search(...))`` twice): it keeps one connection pool per
event loop. :func:`run_sync` runs one of its coroutines from synchronous code, also inside a
thread that already runs a loop, on one background event loop shared by the process (so
connections are reused from call to call). ``pipeline=None`` (the default) searches with the
server's first served pipeline (``GET /info``'s ``pipelines[0]``, asked once per client). Needs
``httpx`` (the ``[serve]`` extra). A :class:`Client` keeps one connection pool and may be shared
by threads; from asynchronous code, run its calls in a worker thread (``asyncio.to_thread``).
"""
from __future__ import annotations

import asyncio
import threading
from typing import Any, Awaitable, Mapping, Sequence, TypeVar
from urllib.parse import quote

import numpy as np

from .engine.errors import HopgraphError, InputError
from .index import Hit


T = TypeVar("T")
#: seconds an add or delete waits for its commit by default: the server embeds the added passages
#: first, in its writer with one torch thread (docs/decisions/serve-write-answers.md)
WRITE_TIMEOUT = 900.0


def is_write(method: str, path: str) -> bool:
    """Whether a request is a write (``POST /passages``, ``DELETE /passages/ID``): its answer waits
    for a commit."""
    return method == "DELETE" or (method == "POST" and path == "/passages")
_portal: asyncio.AbstractEventLoop | None = None
_portal_lock = threading.Lock()


def _portal_loop() -> asyncio.AbstractEventLoop:
    """The process's background event loop for :func:`run_sync` (a daemon thread, started once)."""
    global _portal
    with _portal_lock:
        if _portal is None or _portal.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="hopgraph-client-loop", daemon=True).start()
            _portal = loop
        return _portal


def run_sync(awaitable: Awaitable[T]) -> T:
    """Run a coroutine (e.g. ``AsyncClient.search(...)``) to completion from synchronous code and
    return its result (or raise its exception), on the process's background event loop: works
    whether or not the calling thread runs an event loop of its own, and any number of times."""
    future = asyncio.run_coroutine_threadsafe(awaitable, _portal_loop())  # type: ignore[arg-type]
    return future.result()


class ServiceError(HopgraphError):
    """The service answered with an error (``status`` is the HTTP status, ``detail`` its message),
    or could not be reached (``status`` is None)."""

    def __init__(self, status: int | None, detail: str) -> None:
        super().__init__(f"hopgraph service answered HTTP {status}: {detail}" if status is not None else detail)
        self.status = status
        self.detail = detail


class RequestRejected(ServiceError, InputError):
    """The service refused the request's content (HTTP 400/413/422), like ``Index.search``'s InputError."""


class PassageNotFound(ServiceError, KeyError):
    """``passage(id)`` of an id the index does not hold (HTTP 404), a KeyError like ``Index.passage``'s."""

    __str__ = ServiceError.__str__  # not KeyError's repr of the message


def encode_queries(queries: str | Sequence[Any] | np.ndarray) -> list[Any]:
    """Questions as the JSON ``queries`` list: texts stay strings, a float matrix
    ``[B, d]`` (or vector ``[d]``) becomes ``{"embedding": [...]}`` rows; dicts pass through."""
    if isinstance(queries, str):
        return [queries]
    if isinstance(queries, np.ndarray):
        if queries.dtype.kind not in "fiu":
            raise InputError(f"query array must hold numbers, got dtype {queries.dtype}")
        matrix = queries if queries.ndim == 2 else queries.reshape(1, -1)
        return [{"embedding": row.tolist()} for row in matrix.astype(np.float64)]
    out: list[Any] = []
    for i, q in enumerate(queries):
        if isinstance(q, (str, Mapping)):
            out.append(dict(q) if isinstance(q, Mapping) else q)
        elif isinstance(q, np.ndarray):
            out.append({"embedding": q.astype(np.float64).ravel().tolist()})
        else:
            raise InputError(f"query {i} must be a string, a mapping or an embedding array, got {type(q).__name__}")
    return out


class _ClientBase:
    """What :class:`Client` and :class:`AsyncClient` share: requests and answers, without the I/O."""

    url: str
    _default_pipeline: str | None = None
    #: the name of the httpx client class the connection uses (``Client`` or ``AsyncClient``)
    def __init__(self, url: str, api_key: str | None = None, timeout: float = 60.0, *,
                 write_timeout: float = WRITE_TIMEOUT, transport: Any = None) -> None:
        """``timeout``: seconds a search or read waits for an answer; ``write_timeout``: seconds an add
        or delete waits for its commit (the server embeds the passages first). ``transport``: an
        ``httpx`` transport (async for :class:`AsyncClient`) to send the requests through (default: HTTP)."""
        httpx = self._httpx()
        self.url = url.rstrip("/")
        self.timeout, self.write_timeout = float(timeout), float(write_timeout)
        self._transport_error, self._timeout_error = httpx.TransportError, httpx.TimeoutException
        self._connect_timeout = httpx.ConnectTimeout
        self._options = dict(base_url=self.url, headers=self._headers(api_key), timeout=timeout, trust_env=False,
                             transport=transport)

    @staticmethod
    def _httpx() -> Any:
        try:
            import httpx
        except ImportError as e:  # pragma: no cover - depends on the installed extras
            raise ImportError("hopgraph.Client and AsyncClient need httpx: pip install 'hopgraph[serve]'") from e
        return httpx

    @staticmethod
    def _headers(api_key: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}"} if api_key else {}

    @staticmethod
    def _search_body(queries: str | Sequence[Any] | np.ndarray, pipeline: str, k: int, with_text: bool,
                     params: Mapping[str, Any] | None, group_by_document: bool = False,
                     where: Mapping[str, Any] | None = None, allowed_ids: Sequence[str] | None = None
                     ) -> dict[str, Any]:
        """The ``POST /search`` body. ``with_text``, ``group_by_document`` and the filters are sent only
        when they differ from the server's defaults, so older servers still answer default requests."""
        body: dict[str, Any] = {"queries": encode_queries(queries), "pipeline": pipeline, "k": k}
        if params:
            body["params"] = dict(params)
        if not with_text:
            body["with_text"] = False
        if group_by_document:
            body["group_by_document"] = group_by_document
        if where is not None:
            body["where"] = dict(where)
        if allowed_ids is not None:
            if isinstance(allowed_ids, str):
                raise InputError("allowed_ids must be a list of passage ids, not one string")
            body["allowed_ids"] = list(allowed_ids)
        return body

    @staticmethod
    def _add_body(passages: Any, upsert: bool) -> dict[str, Any]:
        """The ``POST /passages`` body of what :meth:`hopgraph.Index.add` takes: records ``{"id",
        "title", "text", "metadata"}`` (other fields become metadata), strings (ids ``"0"``, ``"1"``,
        ... by position), a :class:`~hopgraph.Corpus` or a corpus path (read here); checked here
        as ``Index.add`` checks them (InputError naming the record)."""
        from .engine.components.corpus import Corpus

        if isinstance(passages, Mapping):
            raise InputError("passages must be a list of records or strings (or a Corpus or a corpus path), "
                             "not one record")
        if isinstance(upsert, bool) is False:
            raise InputError(f"upsert must be true or false, got {upsert!r}")
        corpus = Corpus.coerce([passages] if isinstance(passages, str) and not _is_path(passages) else passages)
        return {"passages": [{"id": corpus.ids[i], "title": corpus.titles[i], "text": corpus.texts[i],
                              "metadata": corpus.meta(i)} for i in range(len(corpus))], "upsert": upsert}

    def _first_pipeline(self, info: Mapping[str, Any]) -> str:
        served = info.get("pipelines") or []
        if not served:
            raise ServiceError(None, f"the hopgraph service at {self.url} serves no pipeline (GET /info)")
        self._default_pipeline = str(served[0])
        return self._default_pipeline

    @staticmethod
    def _hits(response: Mapping[str, Any]) -> list[list[Hit]]:
        return [[Hit(id=h["id"], score=float(h["score"]), rank=int(h["rank"]), title=h["title"],
                     text=h.get("text"), metadata=h.get("metadata") or {}) for h in r["hits"]]
                for r in response["results"]]

    @staticmethod
    def _commit_path(write_id: str) -> str:
        if not isinstance(write_id, str) or not write_id:
            raise InputError(f"a write id must be a non-empty string, got {write_id!r}")
        return "/commits/" + quote(write_id, safe="")

    @staticmethod
    def _passage_path(pid: str) -> str:
        if not isinstance(pid, str) or not pid:
            raise InputError(f"passage id must be a non-empty string, got {pid!r}")
        return "/passages/" + quote(pid, safe="").replace(".", "%2E")  # no '.' / '..' path segment to drop

    def _unreachable(self, e: Exception, method: str, path: str, timeout: float) -> ServiceError:
        """The error of a request that got no answer: a timeout says how long it waited and, for a
        write, that the write may still commit; anything else that the service cannot be reached."""
        if isinstance(e, self._timeout_error) and not isinstance(e, self._connect_timeout):
            note = ("; the write may still commit (GET /health shows the commit served, a search or "
                    "GET /passages/ID the passage)") if is_write(method, path) else ""
            return ServiceError(None, f"no answer from the hopgraph service at {self.url} to {method} {path} in "
                                      f"{timeout:g} s{note}")
        return ServiceError(None, f"cannot reach the hopgraph service at {self.url}: {type(e).__name__}: {e}")

    def _timeout_of(self, method: str, path: str) -> float:
        """The seconds a request waits for its answer: :attr:`write_timeout` for writes (adds, deletes)."""
        return self.write_timeout if is_write(method, path) else self.timeout

    @staticmethod
    def _write_params(wait: bool) -> dict[str, str]:
        """The query of a write: ``?wait=false`` for an asynchronous one (202 and a commit id)."""
        if not isinstance(wait, bool):
            raise InputError(f"wait must be true or false, got {wait!r}")
        return {} if wait else {"wait": "false"}

    @staticmethod
    def _answer(response: Any) -> dict[str, Any]:
        """The JSON answer, or the error matching its status (:class:`RequestRejected` for
        400/409/413/422, :class:`PassageNotFound` for 404, else :class:`ServiceError`)."""
        if response.status_code >= 400:
            try:
                detail = response.json().get("detail", response.text)
            except ValueError:
                detail = response.text
            detail = detail if isinstance(detail, str) else str(detail)
            error = (RequestRejected if response.status_code in (400, 409, 413, 422) else
                     PassageNotFound if response.status_code == 404 else ServiceError)
            raise error(response.status_code, detail)
        return response.json()


def _is_path(text: str) -> bool:
    """A string given to ``add`` is a corpus path when such a file or folder exists, else a passage text."""
    from pathlib import Path

    try:
        return Path(text).exists()
    except (OSError, ValueError):
        return False


class Client(_ClientBase):
    """Talks to a ``hopgraph serve`` instance at ``url`` (blocking; see :class:`AsyncClient`)."""

    def __init__(self, url: str, api_key: str | None = None, timeout: float = 60.0, *,
                 write_timeout: float = WRITE_TIMEOUT, transport: Any = None) -> None:
        super().__init__(url, api_key, timeout, write_timeout=write_timeout, transport=transport)
        self._http = self._httpx().Client(**self._options)

    def search(self, queries: str | Sequence[Any] | np.ndarray, pipeline: str | None = None, k: int = 5, *,
               with_text: bool = True, group_by_document: bool = False, params: Mapping[str, Any] | None = None,
               where: Mapping[str, Any] | None = None, allowed_ids: Sequence[str] | None = None
               ) -> list[list[Hit]]:
        """Top-``k`` :class:`Hit` lists, one per query, as ``Index.search`` returns them (with each
        passage's text, None with ``with_text=False``, and metadata).

        ``queries``: question texts, a ``[B, d]`` embedding matrix, or a list mixing
        strings, ``{"text": ...}`` and ``{"embedding": [...]}``. ``pipeline``: one the server
        serves; None: its first (``GET /info``, asked once). ``params``: query-time parameters.
        ``group_by_document=True``: each document once, as its best passage (``Index.search``'s).
        ``where`` / ``allowed_ids``: ``Index.search``'s filters.
        """
        return self._hits(self.search_response(queries, pipeline, k, with_text=with_text,
                                               group_by_document=group_by_document, params=params,
                                               where=where, allowed_ids=allowed_ids))

    def search_response(self, queries: str | Sequence[Any] | np.ndarray, pipeline: str | None = None, k: int = 5,
                        *, with_text: bool = True, group_by_document: bool = False,
                        params: Mapping[str, Any] | None = None, where: Mapping[str, Any] | None = None,
                        allowed_ids: Sequence[str] | None = None) -> dict[str, Any]:
        """The raw ``POST /search`` answer (results and the pipeline's ``timing``)."""
        pipeline = pipeline or self._default_pipeline or self._first_pipeline(self.info())
        return self._request("POST", "/search", json=self._search_body(queries, pipeline, k, with_text, params,
                                                                       group_by_document, where, allowed_ids))

    def add(self, passages: Any, upsert: bool = False, *, wait: bool = True) -> dict[str, Any]:
        """``POST /passages`` of what :meth:`hopgraph.Index.add` takes (records, strings, a Corpus or a
        corpus path): ``{"added", "replaced", "unchanged", "passages", "committed", "commit"}`` once
        committed (waiting up to ``write_timeout``). Adding a passage the index holds with the same
        title, text and metadata again succeeds (listed in ``"unchanged"``: a retried add is safe);
        an id it holds with other content raises :class:`RequestRejected` (409) unless ``upsert``.
        ``wait=False``: answered at once, ``{"id", "status": "pending"}``; :meth:`commit` tells
        when it is committed."""
        return self._request("POST", "/passages", json=self._add_body(passages, upsert),
                             params=self._write_params(wait))

    def delete(self, pid: str, *, wait: bool = True) -> dict[str, Any]:
        """``DELETE /passages/{pid}``: ``{"deleted", "passages", "committed", "commit"}``;
        :class:`PassageNotFound` for an id the index does not hold. ``wait=False``: as :meth:`add`'s."""
        return self._request("DELETE", self._passage_path(pid), params=self._write_params(wait))

    def commit(self, write_id: str) -> dict[str, Any]:
        """``GET /commits/{id}`` of an asynchronous write: ``{"id", "status"}`` — ``"pending"``,
        ``"committed"`` (with the write's ``"result"``) or ``"failed"`` (with ``"error": {"status",
        "detail"}``, what the write would have answered)."""
        return self._request("GET", self._commit_path(write_id))

    def passage(self, pid: str) -> dict[str, Any]:
        """``{"id", "title", "text", "metadata"}`` of passage ``pid``; :class:`PassageNotFound`
        (a KeyError) if the index has no such id."""
        return self._request("GET", self._passage_path(pid))

    def health(self) -> dict[str, Any]:
        """Liveness: ``{"status": "ok", "passages", "uptime_s", "batches"}``."""
        return self._request("GET", "/health")

    def info(self) -> dict[str, Any]:
        """Index manifest, served pipelines, embedder, device and limits."""
        return self._request("GET", "/info")

    def _request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        timeout = self._timeout_of(method, path)
        try:
            response = self._http.request(method, path, timeout=timeout, **kwargs)
        except self._transport_error as e:
            raise self._unreachable(e, method, path, timeout) from e
        return self._answer(response)

    def close(self) -> None:
        """Close the HTTP connections (the client cannot be used afterwards)."""
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient(_ClientBase):
    """:class:`Client`'s methods as coroutines, for asyncio applications: ``async with
    hopgraph.AsyncClient(url, api_key=KEY) as c: hits = await c.search(q)``. One ``httpx.AsyncClient``
    connection pool per event loop that awaits it (made on first use in that loop, dropped with
    the loop); from synchronous code: ``hopgraph.client.run_sync(c.search(q))``."""

    def __init__(self, url: str, api_key: str | None = None, timeout: float = 60.0, *,
                 write_timeout: float = WRITE_TIMEOUT, transport: Any = None) -> None:
        super().__init__(url, api_key, timeout, write_timeout=write_timeout, transport=transport)
        self._pools: dict[int, tuple[asyncio.AbstractEventLoop, Any]] = {}
        self._lock = threading.Lock()

    @property
    def _http(self) -> Any:
        """The connection pool of the running event loop (made on first use in that loop)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            for key in [key for key, (other, _) in self._pools.items() if other.is_closed()]:
                del self._pools[key]  # a finished loop's pool cannot be used (nor closed) any more
            entry = self._pools.get(id(loop))
            if entry is None or entry[0] is not loop or entry[1].is_closed:
                entry = self._pools[id(loop)] = (loop, self._httpx().AsyncClient(**self._options))
            return entry[1]

    async def search(self, queries: str | Sequence[Any] | np.ndarray, pipeline: str | None = None, k: int = 5, *,
                     with_text: bool = True, group_by_document: bool = False,
                     params: Mapping[str, Any] | None = None, where: Mapping[str, Any] | None = None,
                     allowed_ids: Sequence[str] | None = None) -> list[list[Hit]]:
        """See :meth:`Client.search`."""
        return self._hits(await self.search_response(queries, pipeline, k, with_text=with_text,
                                                     group_by_document=group_by_document, params=params,
                                                     where=where, allowed_ids=allowed_ids))

    async def search_response(self, queries: str | Sequence[Any] | np.ndarray, pipeline: str | None = None,
                              k: int = 5, *, with_text: bool = True, group_by_document: bool = False,
                              params: Mapping[str, Any] | None = None, where: Mapping[str, Any] | None = None,
                              allowed_ids: Sequence[str] | None = None) -> dict[str, Any]:
        """See :meth:`Client.search_response`."""
        pipeline = pipeline or self._default_pipeline or self._first_pipeline(await self.info())
        body = self._search_body(queries, pipeline, k, with_text, params, group_by_document, where, allowed_ids)
        return await self._request("POST", "/search", json=body)

    async def add(self, passages: Any, upsert: bool = False, *, wait: bool = True) -> dict[str, Any]:
        """See :meth:`Client.add`."""
        return await self._request("POST", "/passages", json=self._add_body(passages, upsert),
                                   params=self._write_params(wait))

    async def delete(self, pid: str, *, wait: bool = True) -> dict[str, Any]:
        """See :meth:`Client.delete`."""
        return await self._request("DELETE", self._passage_path(pid), params=self._write_params(wait))

    async def commit(self, write_id: str) -> dict[str, Any]:
        """See :meth:`Client.commit`."""
        return await self._request("GET", self._commit_path(write_id))

    async def passage(self, pid: str) -> dict[str, Any]:
        """See :meth:`Client.passage`."""
        return await self._request("GET", self._passage_path(pid))

    async def health(self) -> dict[str, Any]:
        """See :meth:`Client.health`."""
        return await self._request("GET", "/health")

    async def info(self) -> dict[str, Any]:
        """See :meth:`Client.info`."""
        return await self._request("GET", "/info")

    async def _request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        timeout = self._timeout_of(method, path)
        try:
            response = await self._http.request(method, path, timeout=timeout, **kwargs)
        except self._transport_error as e:
            raise self._unreachable(e, method, path, timeout) from e
        return self._answer(response)

    async def aclose(self) -> None:
        """Close the running loop's connection pool (those of other loops close with their loops)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            entry = self._pools.pop(id(loop), None)
        if entry is not None and entry[0] is loop:
            await entry[1].aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

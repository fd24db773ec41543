"""Python client of ``hopgraph serve`` (issue 7): same result shape as ``Index.search``.

>>> client = hopgraph.Client("http://127.0.0.1:8080", api_key=None)   # doctest: +SKIP
>>> hits = client.search(["Who founded the prize ...?"], pipeline="dense", k=5)
>>> hits[0][0].id, hits[0][0].score

Needs ``httpx`` (the ``[serve]`` extra). One client keeps one connection pool and
may be shared by threads.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from .engine.errors import HopgraphError, InputError
from .index import Hit


class ServiceError(HopgraphError):
    """The service answered with an error (``status`` is the HTTP status, ``detail`` its message),
    or could not be reached (``status`` is None)."""

    def __init__(self, status: int | None, detail: str) -> None:
        super().__init__(f"hopgraph service answered HTTP {status}: {detail}" if status is not None else detail)
        self.status = status
        self.detail = detail


class RequestRejected(ServiceError, InputError):
    """The service refused the request's content (HTTP 400/413/422), like ``Index.search``'s InputError."""


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


class Client:
    """Talks to a ``hopgraph serve`` instance at ``url``."""

    def __init__(self, url: str, api_key: str | None = None, timeout: float = 60.0) -> None:
        try:
            import httpx
        except ImportError as e:  # pragma: no cover - depends on the installed extras
            raise ImportError("hopgraph.Client needs httpx: pip install 'hopgraph[serve]'") from e
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.url = url.rstrip("/")
        self._transport_error = httpx.TransportError
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout, trust_env=False)

    def search(self, queries: str | Sequence[Any] | np.ndarray, pipeline: str = "g3rag", k: int = 5
               ) -> list[list[Hit]]:
        """Top-``k`` :class:`Hit` lists, one per query, as ``Index.search`` returns them.

        ``queries``: question texts, a ``[B, d]`` embedding matrix, or a list mixing
        strings, ``{"text": ...}`` and ``{"embedding": [...]}``.
        """
        response = self.search_response(queries, pipeline=pipeline, k=k)
        return [[Hit(id=h["id"], score=float(h["score"]), rank=int(h["rank"]), title=h["title"]) for h in r["hits"]]
                for r in response["results"]]

    def search_response(self, queries: str | Sequence[Any] | np.ndarray, pipeline: str = "g3rag", k: int = 5
                        ) -> dict[str, Any]:
        """The raw ``POST /search`` answer (results and the pipeline's ``timing``)."""
        return self._request("POST", "/search", json={"queries": encode_queries(queries), "pipeline": pipeline,
                                                        "k": k})

    def health(self) -> dict[str, Any]:
        return self._request("GET", "/health")

    def info(self) -> dict[str, Any]:
        """Index manifest, served pipelines, embedder, device and limits."""
        return self._request("GET", "/info")

    def _request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            response = self._http.request(method, path, **kwargs)
        except self._transport_error as e:
            raise ServiceError(None, f"cannot reach the hopgraph service at {self.url}: "
                                     f"{type(e).__name__}: {e}") from e
        if response.status_code >= 400:
            try:
                detail = response.json().get("detail", response.text)
            except ValueError:
                detail = response.text
            detail = detail if isinstance(detail, str) else str(detail)
            error = RequestRejected if response.status_code in (400, 413, 422) else ServiceError
            raise error(response.status_code, detail)
        return response.json()

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

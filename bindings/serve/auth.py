"""Optional API-key check of ``hopgraph serve``: an ASGI middleware.

Clients send ``Authorization: Bearer KEY`` or ``X-API-Key: KEY``; the key is compared
in constant time (:func:`hmac.compare_digest`). Without a valid key every path but
``/health`` and the API documentation answers 401 before the body is read.
"""
from __future__ import annotations

import hmac
import json
from pathlib import Path

from starlette.types import ASGIApp, Receive, Scope, Send

from ..engine.errors import InputError

PUBLIC_PATHS = frozenset({"/health", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})


def read_api_key(path: str | Path) -> str:
    """The API key stored in ``path`` (surrounding whitespace removed); refuses an empty file."""
    path = Path(path)
    try:
        key = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"--api-key-file {path}: cannot read it ({e})") from None
    if not key:
        raise InputError(f"--api-key-file {path} is empty")
    if any(c.isspace() for c in key):
        raise InputError(f"--api-key-file {path}: the key must be one line without spaces")
    return key


def presented_key(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    """The key a request presents (Bearer token or X-API-Key header), if any."""
    for name, value in headers:
        name = name.lower()
        if name == b"x-api-key":
            return value.strip()
        if name == b"authorization":
            scheme, _, token = value.strip().partition(b" ")
            if scheme.lower() == b"bearer":
                return token.strip()
    return None


class ApiKeyMiddleware:
    """Answers 401 to requests without the right key (except :data:`PUBLIC_PATHS`)."""

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        self.app = app
        self._key = api_key.encode("utf-8")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in PUBLIC_PATHS:
            await self.app(scope, receive, send)
            return
        key = presented_key(scope["headers"])
        if key is not None and hmac.compare_digest(key, self._key):
            await self.app(scope, receive, send)
            return
        body = json.dumps({"detail": "missing or wrong API key: send 'Authorization: Bearer KEY' "
                                     "or 'X-API-Key: KEY'"}).encode()
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()),
                                (b"www-authenticate", b"Bearer")]})
        await send({"type": "http.response.body", "body": body})

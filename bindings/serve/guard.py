"""Host and Origin checks of a ``hopgraph serve`` without an API key: an ASGI middleware.

A web page can reach a server on loopback by DNS rebinding (its own name resolving to 127.0.0.1):
the browser then sends that name in the ``Host`` header. Only loopback names (``localhost``,
``*.localhost``, loopback addresses) and the names given to ``--allow-host`` are accepted (``*``:
any); other requests get 403. A browser sends ``Origin`` with every cross-origin request: a POST,
PUT, PATCH or DELETE whose ``Origin`` is not the server's own (the scheme, host and port of its
``Host`` header) or an allowed name, or that ``Sec-Fetch-Site`` says is cross-site, gets 403.
Requests without these headers (curl, the Python clients) pass.
"""
from __future__ import annotations

import ipaddress
import json
from typing import Iterable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def split_host(value: str) -> tuple[str, str]:
    """``(name, port)`` of a ``Host`` header value (``[::1]:8080`` → ``("::1", "8080")``), name lower-cased."""
    value = value.strip().lower()
    if value.startswith("["):
        name, _, rest = value[1:].partition("]")
        return name, rest.lstrip(":")
    name, _, port = value.rpartition(":") if value.count(":") == 1 else (value, "", "")
    return name, port


def is_loopback_name(name: str) -> bool:
    """``name`` is ``localhost``, a ``*.localhost`` name or a loopback IP address."""
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class HostOriginMiddleware:
    """403 for a ``Host`` that is not a loopback or allowed name, and for browsers' cross-origin
    writes (module docstring)."""

    def __init__(self, app: ASGIApp, allowed_hosts: Iterable[str] = ()) -> None:
        self.app = app
        allowed = {h.strip().lower().strip("[]") for h in allowed_hosts if h.strip()}
        self.any_host = "*" in allowed
        self.allowed = allowed - {"*"}

    def host_allowed(self, name: str) -> bool:
        """Requests may name host ``name``: any host is allowed, or it is an allowed or loopback name."""
        return self.any_host or name in self.allowed or is_loopback_name(name)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        problem = self.problem(scope["method"], headers)
        if problem is None:
            await self.app(scope, receive, send)
            return
        body = json.dumps({"detail": problem}).encode()
        await send({"type": "http.response.start", "status": 403,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    def problem(self, method: str, headers: dict[str, str]) -> str | None:
        """Why a request with these headers is refused, or None."""
        host = headers.get("host", "")
        name, _ = split_host(host)
        if not self.host_allowed(name):
            return (f"Host {host!r} is not accepted: this server answers loopback names only (start it with "
                    f"--allow-host {name or 'NAME'} to accept this name, or give it an API key)")
        if method.upper() not in UNSAFE_METHODS:
            return None
        origin = headers.get("origin")
        if origin is not None:
            parts = urlsplit(origin)
            same = parts.netloc.lower() == host.strip().lower()
            if not same and not (parts.hostname and (self.any_host or parts.hostname in self.allowed)):
                return f"cross-origin {method.upper()} from {origin!r} refused (a browser page may not write here)"
        if headers.get("sec-fetch-site", "").lower() == "cross-site" and origin is None:
            return f"cross-site {method.upper()} refused (a browser page may not write here)"
        return None

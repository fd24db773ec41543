"""Request limits of ``hopgraph serve`` and their command-line options (issue 7).

This module imports nothing heavy, so the CLI can declare ``serve``'s options
without FastAPI installed.
"""
from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, fields
from typing import Any

from ..engine.errors import InputError


@dataclass(frozen=True)
class ServeLimits:
    """What one request may ask of the service, and how requests are batched.

    Requests beyond a limit get a 4xx answer naming the limit; the service itself
    is not affected.
    """

    max_batch: int = 256            #: queries in one request
    max_query_chars: int = 2000     #: characters in one question
    max_k: int = 100                #: largest k
    max_body_bytes: int = 8 << 20   #: request body size (HTTP 413 above it)
    max_pending: int = 8192         #: queries waiting for the search worker (HTTP 503 above it)
    batch_max_queries: int = 512    #: queries gathered into one micro-batch
    batch_wait_ms: float = 2.0      #: gathering window of a micro-batch, used only under concurrent load
    #: question texts per embedder forward pass within a micro-batch, for embedders without the
    #: padding-free path (engine/packed_bert.py). The embedder groups texts of similar length; small
    #: groups keep the padding low: MiniLM's own encode, 32 HotpotQA questions, 2 CPU cores:
    #: 3.5 ms/question with 8, 5.6 ms with 32 (one timing on a busy machine)
    embed_batch_size: int = 8
    max_add: int = 10_000           #: passages in one POST /passages

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or \
                    (value == 0 and f.name != "batch_wait_ms"):
                raise InputError(f"serve limit {f.name} must be a positive number, got {value!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_HELP = {
    "max_batch": "most queries in one request",
    "max_query_chars": "most characters in one question",
    "max_k": "largest k a request may ask for",
    "max_body_bytes": "largest request body in bytes",
    "max_pending": "most queries waiting for the search worker before answering 503",
    "batch_max_queries": "most queries run together in one micro-batch",
    "batch_wait_ms": "milliseconds a micro-batch waits for more requests under concurrent load",
    "embed_batch_size": "question texts per embedding forward pass within a micro-batch",
    "max_add": "most passages one POST /passages may add",
}


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``hopgraph serve``'s options (address, API key, pipelines, limits) to ``parser``."""
    parser.add_argument("index", help="index directory (hopgraph index ... --out DIR)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    parser.add_argument("--port", type=int, default=8080, help="port to bind (0: any free port)")
    parser.add_argument("--api-key-file", help="file holding the API key clients must send "
                        "(Authorization: Bearer KEY or X-API-Key: KEY)")
    parser.add_argument("--pipelines", type=lambda s: [x.strip() for x in s.split(",") if x.strip()],
                        help="pipelines to serve (default: those fitted in the index); "
                        "missing ones are fitted at start")
    parser.add_argument("--threads", type=int, help="CPU threads of torch and faiss in the search worker "
                        "(default: the libraries' own choice; 1 avoids oversubscription on a busy machine)")
    parser.add_argument("--read-only", action="store_true",
                        help="refuse POST /passages and DELETE /passages/{id} (403); searches only")
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    defaults = ServeLimits()
    for f in fields(ServeLimits):
        parser.add_argument("--" + f.name.replace("_", "-"), type=type(getattr(defaults, f.name)),
                            default=getattr(defaults, f.name),
                            help=f"{_HELP[f.name]} (default: {getattr(defaults, f.name)})")


def limits_from_args(args: argparse.Namespace) -> ServeLimits:
    """The :class:`ServeLimits` given on the command line."""
    return ServeLimits(**{f.name: getattr(args, f.name) for f in fields(ServeLimits)})

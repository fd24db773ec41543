"""Request limits of ``hopgraph serve`` and its command-line options.

This module imports nothing heavy, so the CLI can declare ``serve``'s options without FastAPI
installed. The serving bounds of the search parameters are in :mod:`hopgraph.serve.budget`.
"""
from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass(frozen=True)
class ServeLimits:
    """What one request may ask of the service, how long it may run, and how requests are batched.

    Requests beyond a limit get a 4xx answer naming the limit before they reach a search worker;
    a search past ``request_timeout`` is stopped and answered 504.
    """

    max_batch: int = 256            #: queries in one request
    max_query_chars: int = 2000     #: characters in one question
    max_k: int = 100                #: largest k (a k beyond the live passages is clamped to them)
    max_body_bytes: int = 8 << 20   #: request body size (HTTP 413 above it)
    max_pending: int = 8192         #: queries waiting for the interactive search worker (HTTP 503 above it)
    batch_max_queries: int = 512    #: queries gathered into one micro-batch
    batch_wait_ms: float = 2.0      #: gathering window of a micro-batch, used only under concurrent load
    #: question texts per embedder call within a micro-batch, for embedders other than the packed
    #: sentence-transformers path (whose rows never depend on their batch)
    embed_batch_size: int = 8
    max_add: int = 10_000           #: passages in one POST /passages
    max_passage_chars: int = 100_000  #: characters of one added passage, title and text (HTTP 413 above it)
    request_timeout: float = 5.0    #: seconds from a search's arrival to its answer (HTTP 504 after it)
    max_request_mb: float = 1024.0  #: estimated memory of one search request, MiB (HTTP 422 above it)
    #: estimated work, in default one-question searches of the pipeline, above which a request runs in
    #: the bulk worker (its own queue, lowest CPU priority) instead of the interactive one
    heavy_cost: float = 16.0
    max_pending_bulk: int = 1024    #: queries waiting for the bulk search worker (HTTP 503 above it)
    bulk_batch_size: int = 1        #: queries the bulk worker searches at a time (a cancellation checkpoint between)
    #: distinct metadata fields one ``where`` filter names, through its ``$and`` / ``$or`` / ``$not``
    max_where_fields: int = 16
    #: values one ``where`` filter lists in ``$in`` / ``$nin`` / ``[...]``, over its whole tree (at most
    #: :data:`hopgraph.engine.filters.MAX_WHERE_VALUES`; clauses and nesting have the engine's bounds)
    max_where_values: int = 1024
    max_allowed_ids: int = 100_000  #: ids in one ``allowed_ids`` filter

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or \
                    (value == 0 and f.name != "batch_wait_ms"):
                from ..engine.errors import InputError  # here: the command line's help imports this module

                raise InputError(f"serve limit {f.name} must be a positive number, got {value!r}")

    @property
    def max_request_bytes(self) -> int:
        """``max_request_mb`` in bytes."""
        return int(self.max_request_mb * (1 << 20))

    def to_dict(self) -> dict[str, Any]:
        """Every limit by name (what the service reports in its ``limits``)."""
        return asdict(self)


_HELP = {
    "max_batch": "most queries in one request",
    "max_query_chars": "most characters in one question",
    "max_k": "largest k a request may ask for",
    "max_body_bytes": "largest request body in bytes",
    "max_pending": "most queries waiting for the interactive search worker before answering 503",
    "batch_max_queries": "most queries run together in one micro-batch",
    "batch_wait_ms": "milliseconds a micro-batch waits for more requests under concurrent load",
    "embed_batch_size": "question texts per embedder call within a micro-batch (embedders without the packed path)",
    "max_add": "most passages one POST /passages may add",
    "max_passage_chars": "most characters (title and text) of one added passage; 413 above",
    "request_timeout": "seconds a search may take from its arrival; then it is stopped and answered 504",
    "max_request_mb": "largest estimated memory of one search request in MiB; 422 above",
    "heavy_cost": "estimated work (in default one-question searches) above which a request runs in the "
                  "bulk worker, beside the interactive one",
    "max_pending_bulk": "most queries waiting for the bulk search worker before answering 503",
    "bulk_batch_size": "queries the bulk search worker searches at a time",
    "max_where_fields": "most distinct metadata fields one where filter names, through $and/$or/$not",
    "max_where_values": "most values one where filter lists in $in/$nin/[...], through $and/$or/$not",
    "max_allowed_ids": "most ids in one allowed_ids filter",
}


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``hopgraph serve``'s options (address, API key, hosts, pipelines, limits) to ``parser``."""
    parser.add_argument("index", nargs="?", help="index directory (hopgraph index ... --out DIR)")
    parser.add_argument("--ray", metavar="ADDRESS", help="serve a sharded index (--shards) on this Ray cluster "
                        "('auto', 'ray://host:10001', 'local'; needs the [distributed] extra)")
    parser.add_argument("--shards", metavar="DIR", help="with --ray: the sharded index (hopgraph shard ... --out DIR)")
    parser.add_argument("--replicas", type=int, default=2, help="with --ray: replicas of each shard (default 2)")
    parser.add_argument("--router-replicas", type=int, default=1, help="with --ray: router replicas (default 1)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    parser.add_argument("--port", type=int, default=8080, help="port to bind (0: any free port)")
    parser.add_argument("--api-key-file", help="file holding the API key clients must send "
                        "(Authorization: Bearer KEY or X-API-Key: KEY)")
    parser.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                        help="without --api-key-file, also accept this Host header name (repeatable; '*': any); "
                        "by default only loopback names are (a browser page cannot reach the server by DNS "
                        "rebinding); browsers' cross-origin POST/DELETE are refused either way")
    parser.add_argument("--pipelines", type=lambda s: [x.strip() for x in s.split(",") if x.strip()],
                        help="pipelines to serve (default: those fitted in the index); "
                        "missing ones are fitted at start")
    parser.add_argument("--threads", type=int, help="CPU threads of torch and faiss in the interactive search "
                        "worker (default: the libraries' own choice; 1 avoids oversubscription on a busy machine)")
    parser.add_argument("--read-only", action="store_true",
                        help="refuse POST /passages and DELETE /passages/{id} (403); searches only")
    parser.add_argument("--param-limits", metavar="FILE",
                        help="JSON file of serving bounds of search parameters, {pipeline: {name: largest value}}, "
                        "over the defaults (GET /info's param_limits lists them)")
    parser.add_argument("--param-limit", action="append", default=[], metavar="PIPELINE.NAME=VALUE",
                        help="one serving bound of a search parameter (repeatable; over --param-limits)")
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    defaults = ServeLimits()
    for f in fields(ServeLimits):
        parser.add_argument("--" + f.name.replace("_", "-"), type=type(getattr(defaults, f.name)),
                            default=getattr(defaults, f.name),
                            help=f"{_HELP[f.name]} (default: {getattr(defaults, f.name)})")


def limits_from_args(args: argparse.Namespace) -> ServeLimits:
    """The :class:`ServeLimits` given on the command line."""
    return ServeLimits(**{f.name: getattr(args, f.name) for f in fields(ServeLimits)})

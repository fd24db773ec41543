"""The on-disk layout of a sharded index (``hopgraph shard INDEX --shards S --out DIR``)::

    DIR/shards.json        the shard count, each shard's directory and passage count, the owner rule
    DIR/shard-000/ ...     one normal hopgraph index per shard: its passages (corpus, embeddings,
                           dense index, BM25 postings), searchable on its own
    DIR/graph-000/ ...     the rows of the graphs the router splits (G3RAG's gain graph, ...) that
                           belong to the shard: a passage's rows with its owner, a node's with
                           shard ``node mod S``; manifest.json with every file's checksum
    DIR/router-000000/     what the router holds: manifest.json (its manifest, with every file's size and
                           checksum), the passage ids and titles, the owner shard and local row of
                           every passage, the extraction, and every pipeline's state but the graph
                           rows the shards hold (their row pointers, the rows changed since, models)

A passage id lives in exactly one shard: a new id goes to shard ``crc32(id) mod S``
(:func:`owner_of`; a replaced id has the same owner). A write through the router commits the
owner shard (a segment, as any index) and then a new router directory, named in a new
``shards.json`` (replaced atomically); the old router directory is then removed.
"""
from __future__ import annotations

import json
import os
import zlib
from pathlib import Path
from typing import Any

from ..engine import storage
from ..engine.errors import IndexFormatError, InputError
from ..engine.graphs.shard import GRAPH_FORMAT

SHARDS_FILE = "shards.json"
ROUTER_PREFIX = "router-"
#: the router's parts (ids, titles and components of the rows each router commit added)
PARTS_DIR = "parts"
PART_PREFIX = "part-"
ROUTER_FILE = "manifest.json"  # the name storage.verify_files expects
FORMAT = "hopgraph-shards"
VERSION = 2


def shard_dir_name(shard: int) -> str:
    """The directory of shard ``shard``'s index."""
    return f"shard-{shard:03d}"


def graph_dir_name(shard: int) -> str:
    """The graph rows shard ``shard`` holds (:mod:`hopgraph.engine.graphs.shard`)."""
    return f"graph-{shard:03d}"


def router_dir_name(generation: int) -> str:
    """The router state written by the ``generation``-th commit (0: ``hopgraph shard``'s)."""
    return f"{ROUTER_PREFIX}{generation:06d}"


def owner_of(pid: str, n_shards: int) -> int:
    """The shard a new passage id goes to: ``crc32(utf-8 id) mod n_shards``."""
    return zlib.crc32(pid.encode("utf-8")) % n_shards


def write_shards(directory: Path, meta: dict[str, Any]) -> None:
    """Replace ``DIR/shards.json`` atomically (the commit point of a router write)."""
    tmp = directory / f".{SHARDS_FILE}.tmp-{os.getpid()}"
    storage.write_json(tmp, meta)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, directory / SHARDS_FILE)
    storage.fsync_dir(directory)


def read_shards(directory: str | Path) -> dict[str, Any]:
    """``DIR/shards.json``, checked; InputError when ``directory`` is not a sharded index."""
    directory = Path(directory)
    f = directory / SHARDS_FILE
    if not f.is_file():
        raise InputError(f"{directory} is not a sharded hopgraph index (no {SHARDS_FILE}; make one with "
                         "hopgraph shard INDEX --shards S --out DIR)")
    try:
        meta = json.loads(f.read_text(encoding="utf-8"))
        if meta.get("format") != FORMAT or int(meta["version"]) != VERSION:
            raise IndexFormatError(f"{f}: not a {FORMAT} version {VERSION} file")
        n = int(meta["n_shards"])
        dirs = [str(s["dir"]) for s in meta["shards"]]
    except (ValueError, KeyError, TypeError) as e:
        raise IndexFormatError(f"{f}: unreadable ({type(e).__name__}: {e})") from None
    if n < 1 or len(dirs) != n:
        raise IndexFormatError(f"{f}: {len(dirs)} shard directories for {n} shards")
    if not isinstance(meta.get("router"), str) or "/" in meta["router"] or meta["router"].startswith("."):
        raise IndexFormatError(f"{f}: bad router directory name {meta.get('router')!r}")
    graphs = [str(s["graph"]) for s in meta["shards"] if s.get("graph")]
    for d in dirs + graphs + [meta["router"]]:
        if not (directory / d).is_dir():
            raise IndexFormatError(f"{f}: directory {directory / d} is missing")
    return meta

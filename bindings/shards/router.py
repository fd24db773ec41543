"""The router of a sharded index: an :class:`~hopgraph.index.Index` whose passages' embeddings, texts,
metadata and BM25 postings live in its shards (:mod:`hopgraph.engine.components.sharded`), and whose
pipelines run here, unchanged, on what they read from the shards. Searches return the single index's
ids and scores; filters and deletes apply across shards; adds and deletes go to the owning shard."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..engine import storage
from ..engine.components.corpus import Corpus
from ..engine.components.sharded import RemoteStrings, ShardCalls, ShardedComponents, ShardedRows, ShardMap, ShardSet
from ..engine.errors import IndexFormatError, InputError
from ..engine.pipelines import pipeline_class
from ..index import Index
from ..index.params import validate_params
from ..index.reports import Hit
from .layout import FORMAT, ROUTER_DIR, ROUTER_FILE, VERSION, read_shards


class ShardedIndex(Index):
    """A router over shards (module docstring). Opened by :func:`open_router`; ``shards`` reach them."""

    shards: ShardSet
    router_dir: Path

    # ------------------------------------------------------------------ reads
    def filter_mask(self, allowed_ids: Sequence[str] | None = None,
                    where: Mapping[str, Any] | None = None) -> np.ndarray | None:
        """The filters evaluated by every shard on its passages, assembled over the global rows (and
        the deletes removed)."""
        if allowed_ids is None and where is None:
            return None
        m = self.shards.map
        parts = self.shards.map_calls("filter_mask", {s: (allowed_ids, where) for s in self.shards.holding()})
        mask = np.zeros(len(m), bool)
        for s, local in parts.items():
            if local is not None:
                mask[m.rows_of[s]] = np.asarray(local, bool)
        if self.components.deleted is not None:
            mask &= ~self.components.deleted
        return mask

    def hits(self, ids: np.ndarray, scores: np.ndarray, with_text: bool = True) -> list[list[Hit]]:
        """:meth:`Index.hits`, the hits' texts and metadata read from their shards in one call each."""
        ids = np.asarray(ids)
        rows = sorted({int(j) for j in ids.ravel().tolist() if j >= 0})
        texts = dict(zip(rows, self.corpus.texts.take(rows))) if with_text and rows else {}
        meta = dict(zip(rows, self.corpus.metadata.take(rows))) if rows else {}
        corpus = self.corpus
        return [[Hit(corpus.ids[j], float(s), r + 1, corpus.titles[j], texts.get(j) if with_text else None,
                     json.loads(meta[j]) if meta.get(j) else {})
                 for r, (j, s) in enumerate(zip(row_ids.tolist(), row_scores.tolist())) if j >= 0]
                for row_ids, row_scores in zip(ids, np.asarray(scores))]

    # ------------------------------------------------------------------ not at the router
    def save(self, path: str | Path | None = None, overwrite: bool = False, *, rebase: bool = True) -> Path:
        raise InputError("a sharded index is committed by its shards and its router (hopgraph shard); "
                         "save() of the router alone is not supported")

    def compact(self) -> "Index":
        raise InputError("compact a sharded index by compacting the unsharded index and running hopgraph "
                         "shard again; the router cannot rebuild the graphs without every embedding")


def open_router(directory: str | Path, calls: ShardCalls, embedder: Any = None, device: str = "auto",
                verify: str = "full") -> ShardedIndex:
    """The router of the sharded index at ``directory`` (``hopgraph shard``'s output) over the shards
    ``calls`` reaches. Every router file is checked against its size and checksum
    (``verify="fast"``: sizes only); IndexFormatError names a bad one."""
    directory = Path(directory)
    meta = read_shards(directory)
    path = directory / ROUTER_DIR
    try:
        manifest = json.loads((path / ROUTER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise IndexFormatError(f"{path / ROUTER_FILE}: unreadable ({type(e).__name__}: {e})") from None
    if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise IndexFormatError(f"{path / ROUTER_FILE}: not a {FORMAT} version {VERSION} router")
    problems = storage.verify_files(path, manifest, verify)
    if problems:
        raise IndexFormatError(f"router {path} is corrupt: {problems[0]}")
    try:
        n, dim, n_shards = int(manifest["passages"]), int(manifest["dim"]), int(manifest["n_shards"])
        arrays = storage.load_arrays(path / "map", ["owner", "local"])
        params = validate_params(manifest.get("params") or {}, stored=True)
        pipelines = dict(manifest["pipelines"])
        emb_entry = dict(manifest["embedder"])
    except (KeyError, TypeError, ValueError) as e:
        raise IndexFormatError(f"{path / ROUTER_FILE}: missing or invalid entry {e}") from None
    if n_shards != int(meta["n_shards"]):
        raise IndexFormatError(f"{path / ROUTER_FILE}: {n_shards} shards, {directory} has {meta['n_shards']}")
    owner = storage.check_ids(np.asarray(arrays["owner"]), n_shards, f"{path}/map/owner.npy")
    shard_map = ShardMap(owner, np.asarray(arrays["local"]), n_shards)
    if len(shard_map) != n:
        raise IndexFormatError(f"{path}/map: {len(shard_map)} rows for {n} passages")
    shards = ShardSet(calls, shard_map)
    stored = Corpus.load(path / "corpus", n, str(path / "corpus"))
    corpus = Corpus(stored.ids, stored.titles, RemoteStrings(shards, "texts"), str(directory),
                    RemoteStrings(shards, "metadata"), _validate=False)
    corpus._id_parts = stored._id_parts
    X = ShardedRows(shards, dim)
    components = ShardedComponents.load_segments([(path / "components", manifest["components"], 0, n)], X, corpus,
                                                 None, params.get("bm25"), False).attach(shards)
    index = ShardedIndex(corpus, X, None, str(manifest["embedder_name"]), device=device, params=params,
                         progress=False, components=components, stored_params=True)
    index.embedder_entry = emb_entry
    if embedder is not None:
        from ..engine.embedders import resolve_embedder

        index._embedder = resolve_embedder(embedder)
        components.embedder = index._embedder
    index.shards, index.router_dir = shards, path
    for name, entry in pipelines.items():
        try:
            pipe = pipeline_class(name).load(path / "pipelines" / name, entry["params"], components, index.settings)
        except (InputError, KeyError, TypeError, ValueError, IndexError, OSError, RuntimeError) as e:
            raise IndexFormatError(f"router {path}: pipeline {name} is corrupt or unreadable: "
                                   f"{type(e).__name__}: {e}") from None
        search = {k: v for k, v in index.params.get(name, {}).items() if pipe.SearchParams.accepts(k)}
        index.pipelines[name] = pipe.with_search_defaults(**search) if search else pipe
        index.fit_seconds[name] = float(entry.get("fit_seconds", 0.0))
    return index

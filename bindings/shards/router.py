"""The router of a sharded index: an :class:`~hopgraph.index.Index` whose passages' embeddings, texts,
metadata and BM25 postings live in its shards (:mod:`hopgraph.engine.components.sharded`), and whose
pipelines run here, unchanged, on what they read from the shards. Searches return the single index's
ids and scores; filters and deletes apply across shards; adds and deletes go to the owning shard."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..engine import storage
from ..engine.components.corpus import Corpus
from ..engine.components.sharded import (Pending, RemoteStrings, ShardCalls, ShardedComponents, ShardedRows, ShardMap,
                                         ShardSet, read_fields)
from ..engine.graphs.router_store import RouterStore
from ..engine.errors import IndexFormatError, InputError
from ..engine.filters import check_where, ids_mask
from ..engine.pipelines import pipeline_class
from ..index import Index
from ..index.params import validate_params
from .layout import (FORMAT, ROUTER_FILE, ROUTER_PREFIX, SHARDS_FILE, VERSION, owner_of, read_shards, router_dir_name,
                     write_shards)


#: router directories kept after a commit (the newest ones): another router still reading an older one
#: takes in the newest before its next request
KEEP_ROUTERS = 2


class ShardedIndex(Index):
    """A router over shards (module docstring). Opened by :func:`open_router`; ``shards`` reach them."""

    #: every add and delete is committed (owner shards, then the router state) before it returns
    commits_writes = True
    shards: ShardSet
    #: the sharded index's directory and its ``shards.json`` as last committed
    root: Path
    meta: dict[str, Any]
    #: the router directory the state was opened from (memory-mapped: kept while open)
    opened: str
    #: ``shards.json``'s inode, modification time and size when last read (:meth:`take_in_commits`)
    _stamp: tuple[int, int, int] | None = None
    #: the router's parts in row order (:func:`~.split.write_router_part`)
    parts: list[dict[str, Any]]

    # ------------------------------------------------------------------ other routers' commits
    def take_in_commits(self) -> bool:
        """Reopen from the newest router state when another router committed since this one's
        (``shards.json`` names a later generation); True when it did. Every search and write starts
        with it, so routers of one sharded index (replicas) answer from the latest commit."""
        stamp = _stamp(self.root)
        if stamp == self._stamp:
            return False
        meta = read_shards(self.root)
        if int(meta.get("generation", 0)) == int(self.meta.get("generation", 0)):
            self._stamp = stamp
            return False
        self._reopen()
        return True

    def _reopen(self) -> None:
        """Become the router of the latest commit (this one's embedder kept)."""
        self._adopt(open_router(self.root, self.shards.calls, embedder=self._embedder, device=self.device,
                                verify="fast"))

    def search_arrays(self, *args: Any, **kwargs: Any) -> tuple[np.ndarray, np.ndarray]:
        """As :meth:`Index.search_arrays`, after taking in the commits another router made."""
        if self.take_in_commits():
            kwargs["mask"] = None  # a filter mask computed before is of the state just replaced
        return super().search_arrays(*args, **kwargs)

    # ------------------------------------------------------------------ reads
    def filter_mask(self, allowed_ids: Sequence[str] | None = None,
                    where: Mapping[str, Any] | None = None) -> np.ndarray | None:
        """``allowed_ids`` looked up here (the router holds the ids), ``where`` evaluated by every
        shard on its passages' metadata and assembled over the global rows (as
        :meth:`Index.filter_mask`: deleted ids are refused, searches drop the deleted rows)."""
        if allowed_ids is None and where is None:
            return None
        if where is not None:
            check_where(where)  # refused here, before any shard evaluates it
        deleted = self.components.deleted
        mask = None if allowed_ids is None else ids_mask(self.corpus, allowed_ids, deleted)
        if where is not None:
            m = self.shards.map
            parts = self.shards.map_calls("filter_mask", {s: (None, where) for s in self.shards.holding()})
            passed = np.zeros(len(m), bool)
            for s, local in parts.items():
                passed[m.rows_of[s]] = np.asarray(local, bool)
            mask = passed if mask is None else mask & passed
        return mask

    def _hit_fields(self, rows: list[int], with_text: bool) -> tuple[dict[int, str], dict[int, dict]]:
        """The hits' texts and metadata, read from their shards in one call each."""
        fields = ("metadata", "texts") if with_text else ("metadata",)
        read = read_fields(self.shards, fields, rows)
        meta = {j: json.loads(m) if m else {} for j, m in zip(rows, read[0])}
        return (dict(zip(rows, read[1])) if with_text else {}), meta

    # ------------------------------------------------------------------ writes
    def _embed_pooled(self, new: Corpus, batch_size: int) -> tuple[np.ndarray, None]:
        """The new passages' embeddings alone (STITCH pools its new texts in a pass of its own): the
        router's corpus texts are read from the shards, and pooling would read them all."""
        return self._embed_passages(new, batch_size), None

    def _append(self, new: Corpus, X_new: np.ndarray, replaced: Sequence[int], extended: None = None) -> None:
        """The router's state updated as an unsharded index's add does (its pipelines read the new
        passages from the router, :class:`~hopgraph.engine.components.sharded.Pending`, the old ones
        from the shards), then each new passage sent to its owner shard (committed there), then the
        router's state committed. A failure before the shards commit changes nothing: the router
        reopens its last commit."""
        self.components.read_extractions()
        since = self.components.snapshot()  # the components as last committed
        n_shards = self.shards.n_shards
        owners = np.fromiter((owner_of(pid, n_shards) for pid in new.ids), np.int32, len(new))
        start = len(self.X)
        expected = {s: len(self.shards.map.rows_of[s]) for s in np.unique(owners).tolist()}
        calls = {}
        for s in expected:
            at = np.flatnonzero(owners == s)
            calls[s] = (new.take(at), np.ascontiguousarray(X_new[at], np.float32), True)
        self.shards.pending = Pending(start, new, X_new)
        try:
            corpus = self.corpus.concat(new)
            self.shards.map = self.shards.map.extended(owners)
            corpus.texts, corpus.metadata = self.corpus.texts, self.corpus.metadata  # remote, now over the grown map
            self.components.extend(self.X, corpus, start)
            self.corpus, self._metadata = corpus, None
            self._tombstone(replaced)
            try:
                self.components.embedder = self.embedder  # STITCH embeds the new topic texts with it
            except InputError:
                pass
            for pipe in self.pipelines.values():
                pipe.add(start, progress=self.progress)
            self._variants.clear()
        except BaseException:
            self.shards.pending = None
            self._reopen()
            raise
        self.shards.pending = None
        firsts = self.shards.map_calls("add", calls)
        behind = {s: (int(firsts[s]), expected[s]) for s in expected if int(firsts[s]) != expected[s]}
        if behind:
            s, (first, known) = next(iter(behind.items()))
            raise IndexFormatError(f"shard {s} holds {first - known} passages its router does not know (a write "
                                   f"stopped between the shard's commit and the router's): shard the index again")
        self._commit_router(since, start)

    def add(self, *args: Any, **kwargs: Any) -> Any:
        """:meth:`Index.add` through the router (:meth:`_append`), under the sharded index's write
        lock, after taking in other routers' commits."""
        with storage.WriteLock(self.root):
            self.take_in_commits()
            return super().add(*args, **kwargs)

    def delete(self, ids: Sequence[str] | str) -> Any:
        """:meth:`Index.delete` at the router, then in the owner shards, then committed (under the
        write lock, after taking in other routers' commits)."""
        with storage.WriteLock(self.root):
            self.take_in_commits()
            return self._delete(ids)

    def _delete(self, ids: Sequence[str] | str) -> Any:
        report = super().delete(ids)
        if report.deleted:
            n_shards = self.shards.n_shards
            by_shard: dict[int, list[str]] = {}
            for pid in report.deleted:
                by_shard.setdefault(owner_of(pid, n_shards), []).append(pid)
            self.shards.map_calls("delete", {s: (pids,) for s, pids in by_shard.items()})
            self._commit_router()
        return report

    def _commit_router(self, since: Any = None, start: int | None = None) -> None:
        """Commit the router state: the part the rows from ``start`` add to the components ``since``
        (:func:`~.split.write_router_part`; none for a delete), then a new router directory naming
        every part, then ``shards.json`` pointing at it (the commit point); old directories go."""
        from .split import write_router, write_router_part

        generation = int(self.meta.get("generation", 0)) + 1
        name = router_dir_name(generation)
        if start is not None:
            self.parts = self.parts + [write_router_part(self, self.root, generation, start, since)]
        write_router(self, self.shards.map, self.root / name, self.parts)
        meta = {**self.meta, "router": name, "generation": generation, "passages": len(self.X),
                "shards": [{**s, "passages": len(self.shards.map.rows_of[i])} for i, s in enumerate(self.meta["shards"])]}
        write_shards(self.root, meta)
        self.meta, self._stamp = meta, _stamp(self.root)
        for stale in self.root.glob(f"{ROUTER_PREFIX}*"):
            number = stale.name[len(ROUTER_PREFIX):]
            if number.isdigit() and int(number) < generation - KEEP_ROUTERS + 1 and stale.name != self.opened:
                shutil.rmtree(stale, ignore_errors=True)

    # ------------------------------------------------------------------ not at the router
    def save(self, path: str | Path | None = None, overwrite: bool = False, *, rebase: bool = True) -> Path:
        """Refused (InputError): a router commits every write itself."""
        raise InputError("a sharded index is committed by its shards and its router (hopgraph shard); "
                         "save() of the router alone is not supported")

    def compact(self) -> "Index":
        """Refused (InputError): compact the unsharded index and shard it again."""
        raise InputError("compact a sharded index by compacting the unsharded index and running hopgraph "
                         "shard again; the router cannot rebuild the graphs without every embedding")


def _stamp(root: Path) -> tuple[int, int, int] | None:
    """What changes when ``shards.json`` is replaced (inode, modification time, size): read before
    every request instead of the file."""
    try:
        st = (root / SHARDS_FILE).stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def _parts(directory: Path, manifest: dict[str, Any], n: int, verify: str) -> list[dict[str, Any]]:
    """The router's parts (:func:`~.split.write_router_part`), each checked against its manifest's
    sizes and checksums, consecutive from row 0 to ``n``."""
    try:
        parts = [dict(p) for p in manifest["parts"]]
        first = 0
        for p in parts:
            if int(p["first_row"]) != first or "/" not in p["dir"] or ".." in p["dir"]:
                raise ValueError(f"part {p['dir']} starts at row {p['first_row']}, expected {first}")
            first += int(p["n_rows"])
    except (KeyError, TypeError, ValueError) as e:
        raise IndexFormatError(f"{directory}: the router's parts are invalid: {e}") from None
    if first != n:
        raise IndexFormatError(f"{directory}: the router's parts hold {first} passages, the router {n}")
    for p in parts:
        path = directory / p["dir"]
        try:
            part_manifest = json.loads((path / ROUTER_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise IndexFormatError(f"{path / ROUTER_FILE}: unreadable ({type(e).__name__}: {e})") from None
        problems = storage.verify_files(path, part_manifest, verify)
        if problems:
            raise IndexFormatError(f"router part {path} is corrupt: {problems[0]}")
    return parts


#: passages of each shard whose ids are compared with the router's when it opens (first, last, spread)
ID_SAMPLE = 8


def check_shard_set(directory: Path, meta: dict[str, Any], shards: ShardSet, corpus: Corpus) -> None:
    """Refuse (IndexFormatError naming the ``shards.json`` entry) a shard that is not a shard of
    this index: one holding fewer passages than the router maps to it, or whose passages at
    :data:`ID_SAMPLE` sampled rows have other ids than the router's for those rows. Two calls per
    shard; a shard may hold more passages than the router (a write the router has not committed)."""
    m = shards.map
    info = shards.map_calls("info", {s: () for s in range(m.n_shards)})
    samples: dict[int, np.ndarray] = {}
    for s in range(m.n_shards):
        held, mapped = int(info[s]["passages"]), len(m.rows_of[s])
        if held < mapped:
            raise IndexFormatError(f"{_entry(directory, meta, s)}: holds {held} passages, the router maps {mapped} "
                                   "to it: it is not a shard of this index")
        if mapped:
            samples[s] = np.unique(np.linspace(0, mapped - 1, min(ID_SAMPLE, mapped)).astype(np.int64))
    read = shards.map_calls("strings", {s: (("ids",), local) for s, local in samples.items()})
    for s, local in samples.items():
        for row, theirs in zip(local.tolist(), read[s][0]):
            ours = corpus.ids[int(m.rows_of[s][row])]
            if theirs != ours:
                raise IndexFormatError(f"{_entry(directory, meta, s)}: its passage at row {row} is {theirs!r}, the "
                                       f"router's is {ours!r}: it is not a shard of this index")


def _entry(directory: Path, meta: dict[str, Any], shard: int) -> str:
    return f"{directory / SHARDS_FILE}: shard {shard} ({meta['shards'][shard]['dir']})"


def read_router_manifest(path: Path, verify: str) -> dict[str, Any]:
    """The manifest of the router directory ``path``, its format and version checked and every file
    it lists verified (:func:`~hopgraph.engine.storage.verify_files`, ``verify`` ``"full"`` or
    ``"fast"``); IndexFormatError naming the file at fault."""
    try:
        manifest = json.loads((path / ROUTER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise IndexFormatError(f"{path / ROUTER_FILE}: unreadable ({type(e).__name__}: {e})") from None
    if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise IndexFormatError(f"{path / ROUTER_FILE}: not a {FORMAT} version {VERSION} router")
    problems = storage.verify_files(path, manifest, verify)
    if problems:
        raise IndexFormatError(f"router {path} is corrupt: {problems[0]}")
    return manifest


def router_corpus(directory: Path, parts: list[dict[str, Any]], shards: ShardSet) -> Corpus:
    """The router's corpus: the ids and titles its ``parts`` store under ``directory``, the texts and
    metadata read from the shards on demand (:class:`RemoteStrings`)."""
    stored = None
    for part in parts:
        rows = Corpus.load(directory / part["dir"] / "corpus", int(part["n_rows"]), str(directory / part["dir"] / "corpus"))
        stored = rows if stored is None else stored.concat(rows)
    corpus = Corpus(stored.ids, stored.titles, RemoteStrings(shards, "texts"), str(directory),
                    RemoteStrings(shards, "metadata"), _validate=False)
    corpus._id_parts = stored._id_parts
    return corpus


def load_router_pipelines(index: ShardedIndex, path: Path, pipelines: dict[str, Any]) -> None:
    """Load each pipeline the router at ``path`` stores (``pipelines``: its manifest entries) into
    ``index`` with its stored search defaults and fit time; IndexFormatError naming a corrupt one."""
    for name, entry in pipelines.items():
        try:
            pipe = pipeline_class(name).load(path / "pipelines" / name, entry["params"], index.components,
                                             index.settings)
        except (InputError, KeyError, TypeError, ValueError, IndexError, OSError, RuntimeError) as e:
            raise IndexFormatError(f"router {path}: pipeline {name} is corrupt or unreadable: "
                                   f"{type(e).__name__}: {e}") from None
        search = {k: v for k, v in index.params.get(name, {}).items() if pipe.SearchParams.accepts(k)}
        index.pipelines[name] = pipe.with_search_defaults(**search) if search else pipe
        index.fit_seconds[name] = float(entry.get("fit_seconds", 0.0))


def open_router(directory: str | Path, calls: ShardCalls, embedder: Any = None, device: str = "auto",
                verify: str = "full", cleanup: bool = False) -> ShardedIndex:
    """The router of the sharded index at ``directory`` (``hopgraph shard``'s output) over the shards
    ``calls`` reaches. Every router file is checked against its size and checksum
    (``verify="fast"``: sizes only); IndexFormatError names a bad one. ``cleanup``: remove the
    router directories of earlier commits (a router that writes: no other router may still read them)."""
    directory = Path(directory)
    stamp = _stamp(directory)
    meta = read_shards(directory)
    path = directory / meta["router"]
    manifest = read_router_manifest(path, verify)
    try:
        n, dim, n_shards = int(manifest["passages"]), int(manifest["dim"]), int(manifest["n_shards"])
        arrays = storage.load_arrays(path / "map", ["owner", "local", "deleted"])
        params = validate_params(manifest.get("params") or {}, stored=True)
        pipelines = dict(manifest["pipelines"])
        emb_entry = dict(manifest["embedder"])
    except (KeyError, TypeError, ValueError) as e:
        raise IndexFormatError(f"{path / ROUTER_FILE}: missing or invalid entry {e}") from None
    if n_shards != int(meta["n_shards"]):
        raise IndexFormatError(f"{path / ROUTER_FILE}: {n_shards} shards, {directory} has {meta['n_shards']}")
    parts = _parts(directory, manifest, n, verify)
    owner = storage.check_ids(np.asarray(arrays["owner"]), n_shards, f"{path}/map/owner.npy")
    shard_map = ShardMap(owner, np.asarray(arrays["local"]), n_shards)
    if len(shard_map) != n:
        raise IndexFormatError(f"{path}/map: {len(shard_map)} rows for {n} passages")
    deleted = np.asarray(arrays["deleted"])
    if deleted.shape != (n,) or deleted.dtype != bool:
        raise IndexFormatError(f"{path}/map/deleted.npy: expected {n} booleans")
    shards = ShardSet(calls, shard_map)
    corpus = router_corpus(directory, parts, shards)
    check_shard_set(directory, meta, shards, corpus)
    X = ShardedRows(shards, dim)
    components = ShardedComponents.load_segments(
        [(directory / p["dir"] / "components", p["components"], int(p["first_row"]), int(p["n_rows"])) for p in parts],
        X, corpus, None, params.get("bm25"), False, graphs=RouterStore(shards)).attach(
        shards, int(meta["ivf_bits"]) if meta.get("ivf_bits") else None, int(meta.get("ivf_trained", 0)))
    index = ShardedIndex(corpus, X, None, str(manifest["embedder_name"]), device=device, params=params,
                         progress=False, components=components, stored_params=True)
    index.embedder_entry = emb_entry
    if embedder is not None:
        from ..engine.embedders import resolve_embedder

        index._embedder = resolve_embedder(embedder)
        components.embedder = index._embedder
    if deleted.any():
        components.deleted = np.array(deleted)
    index.shards, index.root, index.meta, index.opened = shards, directory, meta, meta["router"]
    index.parts = parts
    index._stamp = stamp
    index._ops = None  # a router commits every write at once: nothing to replay
    if cleanup:
        for old in directory.glob(f"{ROUTER_PREFIX}*"):
            if old.name != meta["router"] and old.is_dir():
                shutil.rmtree(old, ignore_errors=True)
    load_router_pipelines(index, path, pipelines)
    return index

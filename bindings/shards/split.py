"""``hopgraph shard``: split an index by passage into shard indexes and a router state
(:mod:`hopgraph.shards.layout`)."""
from __future__ import annotations

import copy
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from ..engine import storage
from ..engine.components.corpus import Corpus
from ..engine.components.dense import DenseIndex
from ..engine.components.ivf import IVFIndex
from ..engine.components.sharded import ShardMap
from ..engine.graphs.remote import owners_of
from ..engine.graphs.router_store import RouterStore
from ..engine.sparse import take_rows
from ..engine.errors import InputError
from ..index import Index
from ..kernels.csr import CSR
from .layout import (FORMAT, GRAPH_FORMAT, PART_PREFIX, PARTS_DIR, ROUTER_FILE, SHARDS_FILE, VERSION, graph_dir_name,
                     owner_of, router_dir_name, shard_dir_name)

#: the pipelines each shard fits for itself (its dense index and BM25 postings)
SHARD_PIPELINES = ("dense", "bm25")


def assign_owners(ids: Any, n_shards: int) -> np.ndarray:
    """The owner shard of each passage id (:func:`~.layout.owner_of`)."""
    return np.fromiter((owner_of(pid, n_shards) for pid in ids), np.int32, len(ids))


def shard_index(index: Index, n_shards: int, out: str | Path, progress: bool = False) -> Path:
    """Write ``index`` as ``n_shards`` shard indexes plus the router state under ``out`` (which must
    not exist or be empty, and not be inside the index's own directory; it is written beside and
    renamed into place, so ``out`` never holds a partial result). The index must hold no deleted passage (``compact`` it first).
    Returns ``out``."""
    if isinstance(n_shards, bool) or not isinstance(n_shards, int) or n_shards < 1:
        raise InputError(f"--shards must be a positive integer, got {n_shards!r}")
    out = Path(out)
    if index.path is not None and out.resolve().is_relative_to(Path(index.path).resolve()):
        raise InputError(f"--out {out} is inside the index it shards ({index.path}); write the shards to a "
                         "directory outside it")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError(f"--out {out} exists and is not an empty directory")
    deleted = index.components.deleted
    if deleted is not None and deleted.any():
        raise InputError(f"the index holds {int(deleted.sum())} deleted passages: compact it first "
                         "(hopgraph compact INDEX)")
    n = len(index.X)
    if n_shards > n:
        raise InputError(f"--shards {n_shards} is more than the index's {n} passages")
    for name in index.pipelines:
        index.pipeline(name)
    owner = assign_owners(index.corpus.ids, n_shards)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        dense = index.components.dense
        ivf = dense.ivf if dense.method == "ann" else None
        shards = [_write_shard(index, np.flatnonzero(owner == s), tmp / shard_dir_name(s), ivf, progress)
                  for s in range(n_shards)]
        local = np.zeros(n, np.int64)
        for s in range(n_shards):
            rows = np.flatnonzero(owner == s)
            local[rows] = np.arange(len(rows))
        shard_map = ShardMap(owner, local, n_shards)
        sink = GraphRowWriter(tmp, shard_map)
        router = saving_through(index, RouterStore(sink=sink))
        part = write_router_part(router, tmp, 0, 0)
        write_router(router, shard_map, tmp / router_dir_name(0), [part])
        sink.finish()
        storage.write_json(tmp / SHARDS_FILE, {
            "format": FORMAT, "version": VERSION, "n_shards": n_shards, "passages": n, "owner_rule": "crc32(id) % S",
            "shards": [{"dir": shard_dir_name(s), "passages": p, "graph": graph_dir_name(s)}
                       for s, p in enumerate(shards)],
            "router": router_dir_name(0), "generation": 0, **({"ivf_bits": ivf.bits, "ivf_trained": ivf.n_trained} if ivf is not None else {})})
        storage.fsync_tree(tmp)
        if out.exists():
            out.rmdir()
        os.replace(tmp, out)
        storage.fsync_dir(out.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def saving_through(index: Index, store: Any) -> Index:
    """A shallow copy of ``index`` whose components and pipelines save their graphs through
    ``store`` (the router's state of the index, its graphs' rows sent to the shards); ``index``
    itself is not changed."""
    view = copy.copy(index)
    view.components = copy.copy(index.components)
    view.components.graphs = store
    view.pipelines = {}
    for name, pipe in index.pipelines.items():
        view.pipelines[name] = copy.copy(pipe)
        view.pipelines[name].components = view.components
    return view


class GraphRowWriter:
    """``hopgraph shard``'s :class:`~hopgraph.engine.graphs.router_store.RowSink`: each shard's
    rows of every graph the router saves go to ``DIR/graph-SSS/NAME/`` (``indptr``, ``indices``,
    ``data`` over the shard's rows in its local order, global column ids); :meth:`finish` writes
    each graph directory's manifest with every file's checksum."""

    def __init__(self, out: Path, shard_map: ShardMap) -> None:
        self.out, self.names = out, []
        self.shards = _MapHolder(shard_map)

    def send(self, directory: Path, key: str, item: Any, owners: str) -> str:
        """Write each shard's rows of ``item`` (a CSR: its rows by the ``owners`` rule; a
        2-D array: its rows) and return its name in the shards."""
        where = Path(directory).relative_to(self.out).parts  # under router-NNNNNN/ or parts/part-NNNNNN/
        name = "/".join([*where[2 if where[0] == PARTS_DIR else 1:], key])
        rule = owners_of(owners, self.shards)
        if isinstance(item, np.ndarray):  # a row per node
            for s in range(self.shards.map.n_shards):
                storage.save_arrays(self.out / graph_dir_name(s) / name,
                                    {"values": np.ascontiguousarray(item[rule.rows_of(s, len(item))])})
        else:
            weighted = item[2] is not None  # an unweighted graph: no weights stored
            indices = np.asarray(item[1])
            whole = CSR(np.asarray(item[0], np.int64), indices,
                        np.asarray(item[2]) if weighted else np.zeros(len(indices), np.int8), int(item[3]))
            for s in range(self.shards.map.n_shards):
                part = take_rows(whole, rule.rows_of(s, whole.n_rows))
                arrays = {"indptr": part.indptr, "indices": part.indices}
                storage.save_arrays(self.out / graph_dir_name(s) / name,
                                    {**arrays, "data": part.data} if weighted else arrays)
        self.names.append(name)
        return name

    def finish(self) -> None:
        """Write each shard's graph directory manifest (the graph names, every file's size
        and checksum)."""
        for s in range(self.shards.map.n_shards):
            path = self.out / graph_dir_name(s)
            path.mkdir(exist_ok=True)
            storage.write_json(path / ROUTER_FILE, {
                "format": GRAPH_FORMAT, "version": VERSION, "shard": s, "graphs": self.names,
                "checksum_algorithm": storage.HASH,
                "checksums": {p.as_posix(): {"size": (path / p).stat().st_size, "digest": storage.file_digest(path / p)}
                              for p in storage.data_files(path)}})


class _MapHolder:
    def __init__(self, shard_map: ShardMap) -> None:
        self.map = shard_map


def _write_shard(index: Index, rows: np.ndarray, path: Path, ivf: IVFIndex | None, progress: bool) -> int:
    """Write the shard index of ``rows``; with ``ivf`` (the index searches an IVF index), the shard's
    part of it: the same cells and code ranges, its rows' codes (so the shards' candidates merge
    into the single index's)."""
    corpus = index.corpus.take(rows)
    X = np.ascontiguousarray(index.components.dense.rows(rows), np.float32)
    sub = Index(corpus, X, None, index.embedder_name, device=index.device,
                params={"bm25": index.params.get("bm25", {})}, progress=progress, stored_params=True)
    sub.embedder_entry = index.embedder_entry
    sub._embedder = index._embedder
    if ivf is not None:
        sub.components.dense_mode = "ann"
        sub.components._dense = DenseIndex(sub.X, "ann", code_bits=ivf.bits)
        sub.components._dense._ivf = ivf.with_rows(X)
    for name in SHARD_PIPELINES:
        sub.pipeline(name)
    sub.save(path)
    sub.close()
    return len(rows)


def write_router(index: Index, shard_map: ShardMap, path: Path, parts: list[dict[str, Any]]) -> None:
    """Write the router state of ``index`` over ``shard_map`` to the new directory ``path``
    (:mod:`hopgraph.shards.layout`): the map and the deletes, every pipeline's state (the graph rows
    the shards hold by reference), and the manifest naming the router's ``parts``
    (:func:`write_router_part`: passage ids, titles and components, in row order) with every file's
    checksum."""
    path.mkdir()
    n, n_shards = len(shard_map), shard_map.n_shards
    deleted = index.components.deleted
    storage.save_arrays(path / "map", {"owner": shard_map.owner, "local": shard_map.local,
                                       "deleted": np.zeros(n, bool) if deleted is None else deleted})
    pipelines = {}
    for name, pipe in index.pipelines.items():
        pipe.save(path / "pipelines" / name)
        pipelines[name] = {"params": pipe.fit_params.to_dict(), "fit_seconds": index.fit_seconds.get(name, 0.0)}
    emb = index.embedder_entry or {"name": index.embedder_name, "dim": int(index.X.shape[1])}
    manifest = {
        "format": FORMAT, "version": VERSION, "n_shards": n_shards, "passages": n, "dim": int(index.X.shape[1]),
        "embedder": emb, "embedder_name": index.embedder_name, "params": index.params, "pipelines": pipelines,
        "parts": parts, "corpus": {"n_passages": n, "source": index.corpus.source},
        "checksum_algorithm": storage.HASH, "checksums": _checksums(path),
    }
    storage.write_json(path / ROUTER_FILE, manifest)
    storage.fsync_tree(path)


def write_router_part(index: Index, root: Path, generation: int, start: int, since: Any = None) -> dict[str, Any]:
    """Write what the router's rows ``[start, N)`` add since the components ``since`` (None: all of
    them, whole) as ``root/parts/part-GGGGGG``: the rows' ids and titles, and the components' new
    part (extraction delta, title mention rows; none of what the shards hold), with its own
    manifest of checksums. Returns the router manifest's entry for it. A router commit writes one
    (O(rows added)); the router reads the chain of them in order."""
    name = f"{PARTS_DIR}/{PART_PREFIX}{generation:06d}"
    path = root / name
    path.mkdir(parents=True)
    stop = len(index.X)
    rows = index.corpus.rows(start, stop) if start else index.corpus
    blank = ("",) * (stop - start)
    corpus_entry = Corpus(rows.ids, rows.titles, blank, index.corpus.source, blank, _validate=False).save(path / "corpus")
    comp = copy.copy(index.components)
    comp._postings, comp._bm25, comp._dense, comp.dense_mode = {}, {}, None, "exact"
    components_entry = comp.save_segment(path / "components", since, start, stop)
    storage.write_json(path / ROUTER_FILE, {"format": FORMAT, "version": VERSION, "checksum_algorithm": storage.HASH,
                                            "checksums": _checksums(path)})
    storage.fsync_tree(path)
    return {"dir": name, "first_row": start, "n_rows": stop - start, "corpus": corpus_entry,
            "components": components_entry}


def _checksums(path: Path) -> dict[str, dict[str, Any]]:
    return {p.as_posix(): {"size": (path / p).stat().st_size, "digest": storage.file_digest(path / p)}
            for p in storage.data_files(path)}

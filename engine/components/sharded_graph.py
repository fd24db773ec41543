"""Graph rows held by the shards of a sharded index: the second phase of a sharded graph search.

A pipeline's graph (a CSR over passages or over its own nodes: G3RAG's gain graph W, the title
mention graph, STITCH's hypergraph incidences, DMAR's knowledge graph) is split by row: each row is
stored with the shard that owns it (a passage's row with the passage, a node's row with shard
``node mod S``). The router keeps the row pointer ``indptr`` only; a search reads the entries of
the rows it reaches — the seeds' and candidates' rows, the walk's region, the anchors'
neighbourhoods — from their owners, one call per shard, after its first phase (dense / BM25
seeds gathered from every shard) has named them. Every value read is the stored one, so the
walk, diffusion or Shapley step computes what the single index computes.

* :class:`ShardedCSR` — a CSR ``(indptr, indices, data, n_cols)`` whose ``indices`` and ``data``
  (:class:`RemoteEntries`) read by position (``graph.indices[pos]``, slices), as a memory-mapped
  one does; whole rows are fetched and kept (a stored row never changes);
* :func:`save_graph` / :func:`load_graph` — how a pipeline stores a graph: whole (an unsharded
  index); its rows sent to the shards (``hopgraph shard``, inside :func:`sending_rows`); or, at a
  router, a reference to the shards' rows plus the rows changed since (appended and rewritten
  rows, in the router's own directory).
"""
from __future__ import annotations

import contextlib
import json
import threading
from collections import OrderedDict
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Iterator, Mapping, Protocol

import numpy as np

from ...kernels.csr import CSR, check_csr
from ..errors import IndexFormatError, InputError
from ..ranking import merge_topk
from ..storage import check_indptr, load_array, load_arrays, save_arrays, write_json
from ..storage.deltas import CSRView, OverlayCSR

#: the file naming a graph whose rows are in the shards (``{prefix}rows.json`` beside its ``indptr``)
REF_SUFFIX = "rows.json"
#: the arrays of the rows changed since the shards' rows were written (``{prefix}over_*.npy``)
OVERLAY_FILES = ("over_rows", "over_indptr", "over_indices", "over_data")
#: graph entries a router keeps of the rows it read (both fields; ~12 bytes each)
ROW_CACHE_ENTRIES = 1 << 21


class RowOwners(Protocol):
    """Which shard holds each row of a graph, and at which row there."""

    n_shards: int

    def split(self, rows: np.ndarray) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """``{shard: (positions in rows, local rows)}``."""

    def rows_of(self, shard: int, n_rows: int) -> np.ndarray:
        """The rows below ``n_rows`` held by ``shard``, in its local order."""


class ModuloOwners:
    """Row ``r`` held by shard ``r mod S`` as its row ``r // S`` (graphs over nodes, not passages)."""

    kind = "modulo"

    def __init__(self, n_shards: int) -> None:
        self.n_shards = int(n_shards)

    def split(self, rows: np.ndarray) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        rows = np.asarray(rows, np.int64)
        owner = rows % self.n_shards
        return {s: (pos, rows[pos] // self.n_shards) for s in range(self.n_shards)
                for pos in [np.flatnonzero(owner == s)] if len(pos)}

    def rows_of(self, shard: int, n_rows: int) -> np.ndarray:
        return np.arange(shard, n_rows, self.n_shards, dtype=np.int64)


class PassageOwners:
    """Row ``r`` (a passage) held by the shard owning passage ``r``, at the passage's local row
    (:class:`~hopgraph.engine.components.sharded.ShardMap`; read from ``shards.map``, which only
    grows, so the rows of a stored graph keep their place)."""

    kind = "passage"

    def __init__(self, shards: Any) -> None:
        self.shards = shards

    @property
    def n_shards(self) -> int:
        return self.shards.map.n_shards

    def split(self, rows: np.ndarray) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        return self.shards.map.split(rows)

    def rows_of(self, shard: int, n_rows: int) -> np.ndarray:
        rows = self.shards.map.rows_of[shard]
        return rows[:int(np.searchsorted(rows, n_rows))] if len(rows) and rows[-1] >= n_rows else rows


class RowCache:
    """The rows a router read of one stored item (a stored row never changes), most recently used
    kept up to ``limit`` in ``size(value)`` units; registered with the shards (``forget_rows``)."""

    def __init__(self, shards: Any, limit: int, size: Any = lambda value: 1) -> None:
        self.limit, self.size, self.held = int(limit), size, 0
        self._rows: OrderedDict[int, Any] = OrderedDict()
        self._lock = threading.Lock()
        caches = getattr(shards, "caches", None)
        if caches is not None:
            caches.add(self)

    def get(self, rows: list[int]) -> dict[int, Any]:
        """The kept ones of distinct ``rows``."""
        out = {}
        with self._lock:
            for r in rows:
                value = self._rows.get(r)
                if value is not None:
                    self._rows.move_to_end(r)
                    out[r] = value
        return out

    def put(self, values: Mapping[int, Any]) -> None:
        with self._lock:
            for r, v in values.items():
                self._rows[r] = v
                self.held += self.size(v)
            while self.held > self.limit and self._rows:
                self.held -= self.size(self._rows.popitem(last=False)[1])

    def forget(self) -> None:
        with self._lock:
            self._rows.clear()
            self.held = 0


def owners_of(kind: str, shards: Any) -> RowOwners:
    if kind == PassageOwners.kind:
        return PassageOwners(shards)
    if kind == ModuloOwners.kind:
        return ModuloOwners(shards.map.n_shards)
    raise IndexFormatError(f"unknown graph row owners {kind!r}")


class ShardedCSR(CSRView):
    """A CSR whose ``indptr`` is held here and whose rows' entries are held by the shards (module
    docstring). ``name``: the graph's name in the shards' graph directories. Reads fetch whole rows
    (both fields, one call per shard) and keep them; ``arrays()`` refuses (never gathered whole)."""

    def __init__(self, name: str, indptr: np.ndarray, n_cols: int, owners: RowOwners, shards: Any,
                 dtypes: Mapping[str, str], cache_entries: int = ROW_CACHE_ENTRIES, weighted: bool = True) -> None:
        """``weighted=False``: the shards store no weights (each is 1)."""
        self.name, self.n_cols, self.owners, self.shards = name, int(n_cols), owners, shards
        self.weighted = bool(weighted)
        self.indptr = np.asarray(indptr, np.int64)
        lengths = np.diff(self.indptr)
        #: where each row's entries start in its shard's arrays
        self._local_start = np.zeros(self.n_rows, np.int64)
        for s in range(owners.n_shards):
            rows = owners.rows_of(s, self.n_rows)
            self._local_start[rows] = np.cumsum(lengths[rows]) - lengths[rows]
        self.indices = RemoteEntries(self, "indices", np.dtype(dtypes["indices"]))
        self.data = RemoteEntries(self, "data", np.dtype(dtypes["data"]))
        self.cache = RowCache(shards, cache_entries, lambda value: len(value[0]))
        #: entries fetched from the shards (both fields; what the cache saved is not counted)
        self.fetched = 0

    def arrays(self) -> dict[str, np.ndarray]:
        raise InputError(f"graph {self.name} is held by the shards of a sharded index; it is never read whole")

    def ref(self) -> dict[str, Any]:
        """What a router's directory records of it (:func:`save_graph`)."""
        return {"name": self.name, "owners": self.owners.kind, "n_rows": self.n_rows, "n_cols": self.n_cols,
                "nnz": self.nnz, "weighted": self.weighted,
                "dtypes": {"indices": self.indices.dtype.str, "data": self.data.dtype.str}}

    def fetch_rows(self, rows: np.ndarray) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """``{row: (indices, data)}`` of distinct ``rows``: kept ones from the cache, the others from
        their owners (one call per shard), then kept."""
        rows = np.unique(np.asarray(rows, np.int64))
        if len(rows) and (rows[0] < 0 or rows[-1] >= self.n_rows):
            raise IndexError(f"graph {self.name}: rows out of range [0, {self.n_rows})")
        out = self.cache.get(rows.tolist())
        missing = np.array([r for r in rows.tolist() if r not in out], np.int64)
        if not len(missing):
            return out
        parts = self.owners.split(missing)
        results = self.shards.map_calls("graph_rows", {s: (self.name, local) for s, (_, local) in parts.items()})
        fresh: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for s, (pos, _) in parts.items():
            lengths, ind, dat = results[s]
            if dat is None and not self.weighted:
                dat = np.ones(len(ind), self.data.dtype)
            ends = np.cumsum(np.asarray(lengths, np.int64))
            if len(lengths) != len(pos) or (len(ends) and (ends[-1] != len(ind) or len(ind) != len(dat))):
                raise IndexFormatError(f"shard {s}: graph {self.name} rows do not fit the request")
            for r, a, b in zip(missing[pos].tolist(), (ends - lengths).tolist(), ends.tolist()):
                if b - a != int(self.indptr[r + 1] - self.indptr[r]):
                    raise IndexFormatError(f"shard {s}: graph {self.name} row {r} has {b - a} entries, "
                                           f"the router's indptr {int(self.indptr[r + 1] - self.indptr[r])}")
                fresh[r] = (ind[a:b], dat[a:b])
        self.fetched += sum(len(i) for i, _ in fresh.values())
        self.cache.put(fresh)
        out.update(fresh)
        return out

    def read(self, field: str, pos: np.ndarray) -> np.ndarray:
        """``field`` (``"indices"`` / ``"data"``) at global entry positions ``pos`` (any shape)."""
        pos = np.asarray(pos, np.int64)
        flat = pos.reshape(-1)
        which = 0 if field == "indices" else 1
        dtype = (self.indices if which == 0 else self.data).dtype
        if not len(flat):
            return np.zeros(pos.shape, dtype)
        if flat.min() < 0 or flat.max() >= self.nnz:
            raise IndexError(f"graph {self.name}: entry positions out of range [0, {self.nnz})")
        row = np.searchsorted(self.indptr, flat, side="right") - 1
        got = self.fetch_rows(row)
        uniq, inverse = np.unique(row, return_inverse=True)
        parts = [got[r][which] for r in uniq.tolist()]
        starts = np.cumsum([0] + [len(p) for p in parts[:-1]])
        values = np.concatenate(parts).astype(dtype, copy=False)
        return values[starts[inverse.ravel()] + (flat - self.indptr[row])].reshape(pos.shape)

    def rows_csr(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The CSR of the given rows (local ``indptr``), as :meth:`OverlayCSR.rows_csr`."""
        rows = np.asarray(rows, np.int64)
        got = self.fetch_rows(rows)
        ptr = np.zeros(len(rows) + 1, np.int64)
        ptr[1:] = np.cumsum([len(got[r][0]) for r in rows.tolist()])
        ind = [got[r][0] for r in rows.tolist()]
        dat = [got[r][1] for r in rows.tolist()]
        return (ptr, np.concatenate(ind).astype(self.indices.dtype) if ind else np.zeros(0, self.indices.dtype),
                np.concatenate(dat).astype(self.data.dtype) if dat else np.zeros(0, self.data.dtype))


class RemoteEntries:
    """The ``indices`` or ``data`` of a :class:`ShardedCSR`: read by position or slice; never whole."""

    ndim = 1

    def __init__(self, csr: ShardedCSR, field: str, dtype: np.dtype) -> None:
        self.csr, self.field, self.dtype = csr, field, dtype

    @property
    def shape(self) -> tuple[int]:
        return (self.csr.nnz,)

    def __len__(self) -> int:
        return self.csr.nnz

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            return self.csr.read(self.field, np.arange(start, stop, step, dtype=np.int64))
        if isinstance(key, (int, np.integer)):
            i = int(key) + (len(self) if key < 0 else 0)
            return self.csr.read(self.field, np.array([i]))[0]
        return self.csr.read(self.field, np.asarray(key))

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise InputError(f"graph {self.csr.name}'s {self.field} are held by the shards of a sharded index; "
                         "they are read by rows, never whole")


def sharded_base(graph: Any) -> ShardedCSR | None:
    """The :class:`ShardedCSR` a graph is (or is an overlay or CSR view over), else None."""
    if isinstance(graph, ShardedCSR):
        return graph
    if isinstance(graph, OverlayCSR):
        return sharded_base(graph.base)
    indices = graph[1] if isinstance(graph, tuple) else getattr(graph, "indices", None)
    return indices.csr if isinstance(indices, RemoteEntries) else None


class RowSink(Protocol):
    """Where ``hopgraph shard`` sends the rows of the graphs it splits (:func:`sending_rows`)."""

    def send(self, directory: Path, key: str, item: Any, owners: str) -> str:
        """Write each shard's rows of ``item`` (a CSR, or a 2-D array: a row per node), saved by the
        router in ``directory`` under ``key``, and return its name in the shards."""


_SINK: ContextVar[RowSink | None] = ContextVar("hopgraph_row_sink", default=None)
#: the router's :class:`~hopgraph.engine.components.sharded.ShardSet` while it loads
_SOURCE: ContextVar[Any] = ContextVar("hopgraph_row_source", default=None)


@contextlib.contextmanager
def sending_rows(sink: RowSink) -> Iterator[None]:
    """Graphs saved inside the block send their rows to ``sink`` (``hopgraph shard``)."""
    token = _SINK.set(sink)
    try:
        yield
    finally:
        _SINK.reset(token)


@contextlib.contextmanager
def reading_rows(shards: Any) -> Iterator[None]:
    """Graphs loaded inside the block whose rows are in the shards read them through ``shards`` (a
    :class:`~hopgraph.engine.components.sharded.ShardSet`)."""
    token = _SOURCE.set(shards)
    try:
        yield
    finally:
        _SOURCE.reset(token)


def sending_rows_now() -> bool:
    """Whether graphs saved now send their rows to the shards (inside :func:`sending_rows`)."""
    return _SINK.get() is not None


def _files(prefix: str, names: tuple[str, ...]) -> list[str]:
    return [f"{prefix}{n}" for n in names]


def save_graph(directory: Path, prefix: str, graph: Any, owners: str = PassageOwners.kind,
               weighted: bool = True) -> None:
    """Save ``graph`` in ``directory`` as ``{prefix}indptr`` / ``indices`` / ``data``; inside
    :func:`sending_rows`, its rows go to the shards and ``directory`` keeps ``indptr`` and the
    reference; a graph whose rows are in the shards keeps its reference and the rows changed since
    (``owners``: ``"passage"`` for a graph over passages, ``"modulo"`` over other nodes;
    ``weighted=False``: every weight is 1 and the shards store none)."""
    base = sharded_base(graph)
    sink = _SINK.get()
    if base is None and sink is None:
        save_arrays(directory, {f"{prefix}{k}": v for k, v in graph_arrays(graph).items()})
        return
    if base is None:
        indptr = np.asarray(graph[0], np.int64)
        sent = graph if weighted else CSR(indptr, graph[1], None, int(graph[3]))
        ref = {"name": sink.send(directory, f"{prefix}graph", sent, owners), "owners": owners, "n_rows": len(indptr) - 1,
               "n_cols": int(graph[3]), "nnz": int(indptr[-1]), "weighted": bool(weighted),
               "dtypes": {"indices": np.asarray(graph[1][:0]).dtype.str, "data": np.asarray(graph[2][:0]).dtype.str}}
        save_arrays(directory, {f"{prefix}indptr": indptr})
    else:
        ref = {**base.ref(), "n_cols_now": int(graph[3])}
        arrays = {f"{prefix}indptr": base.indptr}
        if isinstance(graph, OverlayCSR):
            arrays.update({f"{prefix}over_rows": graph.overridden, f"{prefix}over_indptr": graph._optr,
                           f"{prefix}over_indices": np.asarray(graph.indices.extra),
                           f"{prefix}over_data": np.asarray(graph.data.extra)})
        save_arrays(directory, arrays)
    write_json(directory / f"{prefix}{REF_SUFFIX}", ref)


def graph_arrays(graph: Any) -> dict[str, np.ndarray]:
    """``indptr``, ``indices``, ``data`` of a CSR, an overlay over one, or a CSR tuple."""
    if hasattr(graph, "arrays"):
        return graph.arrays()
    return {"indptr": np.asarray(graph[0]), "indices": np.asarray(graph[1]), "data": np.asarray(graph[2])}


def held_by_shards(directory: Path, prefix: str) -> bool:
    """Whether the graph saved in ``directory`` under ``prefix`` has its rows in the shards."""
    return (directory / f"{prefix}{REF_SUFFIX}").is_file()


def _read_ref(ref_file: Path, where: str) -> tuple[Any, dict[str, Any]]:
    """The shards being read from (inside :func:`reading_rows`) and the reference ``ref_file``
    holds; IndexFormatError naming ``where`` outside a router, or the file when it is unreadable."""
    shards = _SOURCE.get()
    if shards is None:
        raise IndexFormatError(f"{where}: its rows are held by the shards of a sharded index "
                               "(open it with hopgraph.shards.open_router)")
    try:
        ref = json.loads(ref_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise IndexFormatError(f"{ref_file}: unreadable ({type(e).__name__}: {e})") from None
    if not isinstance(ref, dict):
        raise IndexFormatError(f"{ref_file}: unreadable (not a JSON object)")
    return shards, ref


def load_graph(directory: Path, prefix: str, n_cols: int, where: str) -> CSR | ShardedCSR | OverlayCSR:
    """A graph saved by :func:`save_graph`: checked and memory-mapped when whole; a
    :class:`ShardedCSR` (under an :class:`OverlayCSR` of the rows changed since) when its rows are
    in the shards (inside :func:`reading_rows`; IndexFormatError naming ``where`` otherwise)."""
    ref_file = directory / f"{prefix}{REF_SUFFIX}"
    if not ref_file.is_file():
        a = load_arrays(directory, _files(prefix, ("indptr", "indices", "data")))
        return check_csr(a[f"{prefix}indptr"], a[f"{prefix}indices"], a[f"{prefix}data"], n_cols, where)
    shards, ref = _read_ref(ref_file, where)
    try:
        name, kind, n_rows = str(ref["name"]), str(ref["owners"]), int(ref["n_rows"])
        base_cols, nnz, dtypes = int(ref["n_cols"]), int(ref["nnz"]), dict(ref["dtypes"])
    except (ValueError, KeyError, TypeError) as e:
        raise IndexFormatError(f"{ref_file}: unreadable ({type(e).__name__}: {e})") from None
    indptr = check_indptr(load_array(directory, f"{prefix}indptr", mmap=False), n_rows, nnz, f"{where} indptr")
    base = ShardedCSR(name, indptr, base_cols, owners_of(kind, shards), shards, dtypes,
                      weighted=bool(ref.get("weighted", True)))
    if not (directory / f"{prefix}over_rows.npy").is_file():
        if base_cols != n_cols:
            raise IndexFormatError(f"{where}: {base_cols} columns, expected {n_cols}")
        return base
    o = load_arrays(directory, _files(prefix, OVERLAY_FILES), mmap=False)
    rows = np.asarray(o[f"{prefix}over_rows"], np.int64)
    optr = check_indptr(o[f"{prefix}over_indptr"], len(rows), len(o[f"{prefix}over_indices"]), f"{where} over_indptr")
    if len(rows) and (np.any(np.diff(rows) <= 0) or rows[0] < 0):
        raise IndexFormatError(f"{where} over_rows: not sorted distinct rows")
    graph = OverlayCSR(base, rows, optr, o[f"{prefix}over_indices"], o[f"{prefix}over_data"], n_cols)
    return graph


class ShardedMatrix:
    """A 2-D array (a row per node: DMAR's ego-subgraph embeddings, ...) whose rows are held by the
    shards (:class:`RowOwners`): ``M[rows]`` gathers them from their owners, one call per shard, and
    keeps them (a stored row never changes); never read whole."""

    ndim = 2

    def __init__(self, name: str, shape: tuple[int, int], dtype: Any, owners: RowOwners, shards: Any,
                 cache_rows: int = 65_536) -> None:
        self.name, self.shape, self.dtype = name, (int(shape[0]), int(shape[1])), np.dtype(dtype)
        self.owners, self.shards = owners, shards
        self.cache = RowCache(shards, cache_rows)
        #: rows fetched from the shards (what the cache saved is not counted)
        self.fetched = 0

    @property
    def size(self) -> int:
        return self.shape[0] * self.shape[1]

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __len__(self) -> int:
        return self.shape[0]

    def ref(self) -> dict[str, Any]:
        return {"name": self.name, "owners": self.owners.kind, "shape": list(self.shape), "dtype": self.dtype.str}

    def _flat_rows(self, rows: np.ndarray) -> np.ndarray:
        """``rows`` flattened, negative ones counted from the end; IndexError outside the rows."""
        flat = np.asarray(rows, np.int64).reshape(-1)
        flat = np.where(flat < 0, flat + self.shape[0], flat)
        if len(flat) and (flat.min() < 0 or flat.max() >= self.shape[0]):
            raise IndexError(f"{self.name}: rows out of range [0, {self.shape[0]})")
        return flat

    def take(self, rows: np.ndarray) -> np.ndarray:
        """``M[rows]`` for integer ``rows`` of any shape."""
        rows = np.asarray(rows, np.int64)
        flat = self._flat_rows(rows)
        if not len(flat):
            return np.empty(rows.shape + (self.shape[1],), self.dtype)
        uniq, inverse = np.unique(flat, return_inverse=True)
        got = np.empty((len(uniq), self.shape[1]), self.dtype)
        held = self.cache.get(uniq.tolist())
        missing = np.array([i for i, r in enumerate(uniq.tolist()) if r not in held], np.int64)
        for i, r in enumerate(uniq.tolist()):
            if r in held:
                got[i] = held[r]
        if len(missing):
            parts = self.owners.split(uniq[missing])
            results = self.shards.map_calls("graph_rows", {s: (self.name, local) for s, (_, local) in parts.items()})
            for s, (pos, _) in parts.items():
                values = np.asarray(results[s])
                if values.shape != (len(pos), self.shape[1]):
                    raise IndexFormatError(f"shard {s}: {self.name} rows of shape {values.shape}, "
                                           f"expected {(len(pos), self.shape[1])}")
                got[missing[pos]] = values
            self.fetched += len(missing)
            self.cache.put({int(uniq[i]): got[i].copy() for i in missing.tolist()})
        return got[inverse.ravel()].reshape(rows.shape + (self.shape[1],))

    def __getitem__(self, key: Any) -> np.ndarray:
        if isinstance(key, slice):
            return self.take(np.arange(self.shape[0])[key])
        if isinstance(key, (int, np.integer)):
            return self.take(np.array([int(key)]))[0]
        return self.take(np.asarray(key))

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise InputError(f"{self.name} is held by the shards of a sharded index; it is read by rows, never whole")


class AppendedRows(ShardedMatrix):
    """A :class:`ShardedMatrix` (``base``) with rows appended since, held here (``tail``): what a
    row-per-node array that grows by appends is at a router. ``M[rows]`` reads each row from its
    place; never read whole."""

    def __init__(self, base: ShardedMatrix, tail: np.ndarray) -> None:  # the base holds the shards and the cache
        tail = np.asarray(tail)
        if tail.ndim != 2 or tail.shape[1] != base.shape[1]:
            raise IndexFormatError(f"{base.name}: appended rows of shape {tail.shape}, expected [*, {base.shape[1]}]")
        self.base, self.tail = base, tail.astype(base.dtype, copy=False)
        self.shape, self.dtype = (base.shape[0] + len(tail), base.shape[1]), base.dtype

    @property
    def name(self) -> str:
        return self.base.name

    def ref(self) -> dict[str, Any]:
        return self.base.ref()

    def take(self, rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows, np.int64)
        flat = self._flat_rows(rows)
        out = np.empty((len(flat), self.shape[1]), self.dtype)
        old = flat < self.base.shape[0]
        out[old] = self.base.take(flat[old])
        out[~old] = self.tail[flat[~old] - self.base.shape[0]]
        return out.reshape(rows.shape + (self.shape[1],))

    def appended(self, rows: np.ndarray) -> "AppendedRows":
        """These rows followed by ``rows``."""
        return AppendedRows(self.base, np.concatenate([self.tail, np.asarray(rows, self.dtype)]))


class MatrixColumn:
    """Column ``column`` of a row-per-node array the shards hold, read as a 1-D array by position
    (``v[rows]``; the rows are fetched with all their columns, and kept); never read whole."""

    ndim = 1

    def __init__(self, matrix: ShardedMatrix, column: int) -> None:
        self.matrix, self.column = matrix, int(column)
        self.dtype, self.shape = matrix.dtype, (matrix.shape[0],)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: Any) -> Any:
        return self.matrix[key][..., self.column]

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise InputError(f"{self.matrix.name} is held by the shards of a sharded index; it is read by rows, never whole")


def with_rows_appended(matrix: "ShardedMatrix | AppendedRows", rows: np.ndarray) -> AppendedRows:
    """A row-per-node array held by the shards with ``rows`` appended (held here)."""
    if isinstance(matrix, AppendedRows):
        return matrix.appended(rows)
    return AppendedRows(matrix, np.asarray(rows, matrix.dtype).reshape(-1, matrix.shape[1]))


def row_held(matrix: Any) -> bool:
    """Whether ``matrix`` is a row-per-node array whose rows the shards hold (read by rows only)."""
    return isinstance(matrix, ShardedMatrix)


def matrix_topk(matrix: ShardedMatrix, mask: ShardedMatrix, Q: np.ndarray, k: int, exclude: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """Exact cosine top-``k`` of ``Q`` over the rows of ``matrix`` held by the shards whose row of
    ``mask`` (a ``[n, 1]`` array stored beside it) is non-zero, except the rows ``exclude``: each
    shard's top ``k`` among its rows (one ``matrix_topk`` call per shard), merged (higher score
    first, ties toward the lower row; -1 / -inf padding)."""
    Q = np.ascontiguousarray(Q, np.float32)
    n_shards = matrix.owners.n_shards
    split = matrix.owners.split(np.asarray(exclude, np.int64))
    calls = {s: (matrix.name, mask.name, Q, int(k), split[s][1] if s in split else np.zeros(0, np.int64))
             for s in range(n_shards)}
    parts = []
    for s, (local, scores) in matrix.shards.map_calls("matrix_topk", calls).items():
        local = np.asarray(local, np.int64)
        rows = matrix.owners.rows_of(s, matrix.shape[0])
        parts.append((np.where(local >= 0, rows[np.maximum(local, 0)] if len(rows) else -1, -1),
                      np.asarray(scores, np.float32)))
    return merge_topk(parts, k, len(Q))


def save_matrix(directory: Path, name: str, matrix: Any, owners: str = ModuloOwners.kind) -> None:
    """Save a 2-D array as ``{name}.npy`` in ``directory``; inside :func:`sending_rows` its rows go
    to the shards and ``directory`` keeps a reference (``{name}.rows.json``), as a
    :class:`ShardedMatrix` does; an :class:`AppendedRows` keeps its reference and its appended rows
    (``{name}.tail.npy``)."""
    sink = _SINK.get()
    if isinstance(matrix, AppendedRows):
        save_arrays(directory, {f"{name}.tail": matrix.tail})
    if isinstance(matrix, ShardedMatrix):
        ref = matrix.ref()
    elif sink is not None:
        matrix = np.asarray(matrix)
        ref = {"name": sink.send(directory, name, matrix, owners), "owners": owners, "shape": list(matrix.shape),
               "dtype": matrix.dtype.str}
    else:
        save_arrays(directory, {name: np.asarray(matrix)})
        return
    write_json(directory / f"{name}.{REF_SUFFIX}", ref)


def load_matrix(directory: Path, name: str, mmap: bool = True) -> "np.ndarray | ShardedMatrix":
    """A 2-D array saved by :func:`save_matrix`: memory-mapped when whole; a :class:`ShardedMatrix`
    when its rows are in the shards (inside :func:`reading_rows`; IndexFormatError otherwise)."""
    ref_file = directory / f"{name}.{REF_SUFFIX}"
    if not ref_file.is_file():
        return load_array(directory, name, mmap=mmap)
    shards, ref = _read_ref(ref_file, str(directory / name))
    try:
        shape, dtype = tuple(int(x) for x in ref["shape"]), np.dtype(ref["dtype"])
        kind, key = str(ref["owners"]), str(ref["name"])
    except (ValueError, KeyError, TypeError) as e:
        raise IndexFormatError(f"{ref_file}: unreadable ({type(e).__name__}: {e})") from None
    if len(shape) != 2:
        raise IndexFormatError(f"{ref_file}: shape {shape} is not 2-D")
    matrix = ShardedMatrix(key, shape, dtype, owners_of(kind, shards), shards)
    if (directory / f"{name}.tail.npy").is_file():
        return AppendedRows(matrix, load_array(directory, f"{name}.tail", mmap=False))
    return matrix

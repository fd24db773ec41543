"""Graphs and row matrices whose rows another process holds: what a sharded index's router reads.

A pipeline's graph (a CSR over passages or over its own nodes) is split by row: each row is held
by the shard that owns it (a passage's row with the passage, a node's row with shard
``node mod S``). The router keeps the row pointer ``indptr`` only; a search reads the entries of
the rows it reaches from their owners, one call per shard. Every value read is the stored one,
so the walk, diffusion or Shapley step computes what the single index computes.

* :class:`ShardedCSR` — a CSR whose ``indices`` and ``data`` (:class:`RemoteEntries`) read by
  position, as a memory-mapped one does; whole rows are fetched and kept (a stored row never
  changes);
* :class:`ShardedMatrix` — a row-per-node array read by rows (``M[rows]``); :class:`AppendedRows`,
  one with rows appended since; :class:`MatrixColumn`, one of its columns as a 1-D array;
* :func:`matrix_topk` — exact cosine top-k over a row matrix held this way, each holder searching
  its rows.

The :class:`~hopgraph.engine.graphs.router_store.RouterStore` saves and loads these; pipelines see them
through the reader interfaces of :mod:`hopgraph.engine.graphs.store`.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Mapping, Protocol

import numpy as np

from ..errors import IndexFormatError, InputError
from ..ranking import merge_topk
from .views import CSRView, OverlayCSR

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
        """``{shard: (positions in rows, local rows)}`` for global ``rows`` (1-D): row ``r``
        at ``r // S`` of shard ``r mod S``."""
        rows = np.asarray(rows, np.int64)
        owner = rows % self.n_shards
        return {s: (pos, rows[pos] // self.n_shards) for s in range(self.n_shards)
                for pos in [np.flatnonzero(owner == s)] if len(pos)}

    def rows_of(self, shard: int, n_rows: int) -> np.ndarray:
        """The rows below ``n_rows`` held by ``shard``, in its local order."""
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
        """The shard count of the current shard map."""
        return self.shards.map.n_shards

    def split(self, rows: np.ndarray) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """``{shard: (positions in rows, local rows)}``: each passage row at its local row
        in its owner."""
        return self.shards.map.split(rows)

    def rows_of(self, shard: int, n_rows: int) -> np.ndarray:
        """The passage rows below ``n_rows`` owned by ``shard``, in its local order."""
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
        """Keep ``values`` (``{row: value}``), dropping the least recently used beyond the
        limit."""
        with self._lock:
            for r, v in values.items():
                self._rows[r] = v
                self.held += self.size(v)
            while self.held > self.limit and self._rows:
                self.held -= self.size(self._rows.popitem(last=False)[1])

    def forget(self) -> None:
        """Drop every kept row."""
        with self._lock:
            self._rows.clear()
            self.held = 0


def owners_of(kind: str, shards: Any) -> RowOwners:
    """The :class:`RowOwners` named ``kind`` (``"passage"`` or ``"modulo"``) over ``shards``;
    IndexFormatError for another name."""
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
        """Refused: the graph's entries are never gathered whole (InputError)."""
        raise InputError(f"graph {self.name} is held by the shards of a sharded index; it is never read whole")

    def ref(self) -> dict[str, Any]:
        """What a router's directory records of it
        (:meth:`~hopgraph.engine.graphs.router_store.RouterStore.save_graph`)."""
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
        """``(nnz,)``."""
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


def remote_base(graph: Any) -> ShardedCSR | None:
    """The :class:`ShardedCSR` a graph is (or is an overlay, a renumbering or a CSR view over),
    else None."""
    if isinstance(graph, ShardedCSR):
        return graph
    if isinstance(graph, (OverlayCSR, RenumberedRows)):
        return remote_base(graph.base)
    indices = graph[1] if isinstance(graph, tuple) else getattr(graph, "indices", None)
    return indices.csr if isinstance(indices, RemoteEntries) else None


class RenumberedRows:
    """The stored rows of a :class:`ShardedCSR` over the current rows and entity ids: current row
    ``r`` is stored row ``row_base[r]`` (-1: none, an empty row) with each entity id ``c`` read as
    ``col_ids[c]`` (None: as stored). Entries read by position (``indices[pos]``), as a CSR's."""

    def __init__(self, base: ShardedCSR, row_base: np.ndarray, col_ids: np.ndarray | None, n_cols: int) -> None:
        self.base, self.n_cols = base, int(n_cols)
        self.row_base = np.asarray(row_base, np.int64)
        self.col_ids = None if col_ids is None else np.asarray(col_ids, np.int64)
        base_lens = np.diff(base.indptr)
        lens = np.where(self.row_base >= 0, base_lens[np.maximum(self.row_base, 0)], 0)
        self.indptr = np.zeros(len(self.row_base) + 1, np.int64)
        np.cumsum(lens, out=self.indptr[1:])
        self.indices = _Renumbered(self, base.indices, self.col_ids)
        self.data = _Renumbered(self, base.data, None)

    def base_positions(self, pos: np.ndarray) -> np.ndarray:
        """The stored entry positions of the current entry positions ``pos``."""
        row = np.searchsorted(self.indptr, pos, side="right") - 1
        return self.base.indptr[self.row_base[row]] + (pos - self.indptr[row])


class _Renumbered:
    """``indices`` / ``data`` of :class:`RenumberedRows`."""

    ndim = 1

    def __init__(self, rows: RenumberedRows, stored: Any, ids: np.ndarray | None) -> None:
        self.rows, self.stored, self.ids = rows, stored, ids
        self.dtype = np.dtype(np.int64) if ids is not None else stored.dtype
        self.shape = (int(rows.indptr[-1]),)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: Any) -> np.ndarray:
        if isinstance(key, slice):
            key = np.arange(*key.indices(len(self)), dtype=np.int64)
        pos = np.asarray(key, np.int64)
        if not pos.size:
            return np.zeros(pos.shape, self.dtype)
        values = np.asarray(self.stored[self.rows.base_positions(pos.ravel())])
        return (values if self.ids is None else self.ids[values]).reshape(pos.shape)

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise InputError(f"graph {self.rows.base.name} is held by the shards of a sharded index; "
                         "it is read by rows, never whole")



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
        """Rows times columns."""
        return self.shape[0] * self.shape[1]

    @property
    def nbytes(self) -> int:
        """The bytes the whole matrix would take."""
        return self.size * self.dtype.itemsize

    def __len__(self) -> int:
        return self.shape[0]

    def ref(self) -> dict[str, Any]:
        """What a router's directory records of it (name, row owners, shape, type)."""
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
        """The stored matrix's name in the shards."""
        return self.base.name

    def ref(self) -> dict[str, Any]:
        """The stored matrix's reference (the appended rows are saved beside it)."""
        return self.base.ref()

    def take(self, rows: np.ndarray) -> np.ndarray:
        """``M[rows]`` for integer ``rows`` of any shape, each row read from the shards or
        the appended rows."""
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


def held_elsewhere(item: Any) -> bool:
    """Whether ``item`` (a graph, a row matrix, or a column of one) reads rows another process holds."""
    return isinstance(item, (ShardedMatrix, MatrixColumn)) or remote_base(item) is not None


def read_by_rows(matrix: Any) -> bool:
    """Whether ``matrix`` is a row-per-node array whose rows another process holds (read by rows
    only, never whole)."""
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



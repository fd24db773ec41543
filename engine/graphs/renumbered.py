"""Graphs and row matrices over renumbered nodes whose stored rows the shards hold (DMAR's knowledge
graph and subgraph embeddings at a sharded index's router after adds).

``hopgraph shard`` sends the rows of the passage → entities graph, of the ego subgraphs and of the
subgraph embeddings to the shards (through the
:class:`~hopgraph.engine.graphs.router_store.RouterStore`); those stored rows never change. An add
through the router renumbers the entities (the names stay a sorted vocabulary: new names are
inserted, every old id moves up, in order) and changes some rows. The router then holds, over the
stored rows:

* ``base_ids`` — the current id of every entity of the stored rows (increasing);
* the **held rows**: every row that differs from its stored one (new passages and entities, rows the
  add changed), in current ids.

A row not held is its stored row with its entity ids renumbered (:class:`RenumberedRows`,
:class:`HeldRowsMatrix`), so a search still reads from the shards only the rows it reaches, and
each add costs the rows it changes.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ...kernels.csr import CSR
from ..errors import IndexFormatError
from ..sparse import take_rows
from ..storage import check_indptr, load_arrays, save_arrays
from ..storage.deltas import changed_rows
from .remote import RenumberedRows, ShardedCSR, ShardedMatrix
from .views import OverlayCSR

#: the arrays of a graph's held rows (``{prefix}held_*``; weights are ones, not stored)
HELD_FILES = ("held_rows", "held_indptr", "held_indices")
#: the current id of each entity of the stored rows
BASE_IDS = "kg_base_ids"


def held_graph(base: ShardedCSR, row_base: np.ndarray, col_ids: np.ndarray | None, held_rows: np.ndarray,
               held_ptr: np.ndarray, held_ind: np.ndarray, n_cols: int) -> OverlayCSR:
    """The current graph: the held rows (weights one) over the renumbered stored ones."""
    rows = RenumberedRows(base, row_base, col_ids, n_cols)
    return OverlayCSR(rows, held_rows, held_ptr, np.asarray(held_ind, np.int32),
                      np.ones(len(held_ind), np.float32), n_cols)


def stored_graph(graph: Any) -> ShardedCSR | None:
    """The :class:`ShardedCSR` of the stored rows under a current graph (itself, or under held rows)."""
    if isinstance(graph, ShardedCSR):
        return graph
    if isinstance(graph, OverlayCSR) and isinstance(graph.base, RenumberedRows):
        return graph.base.base
    return None


class HeldRowsMatrix(ShardedMatrix):
    """Subgraph embeddings: row ``r`` is ``held_values[i]`` when ``held_rows[i] == r``, else stored row
    ``row_base[r]`` of a :class:`ShardedMatrix` (read from the shards, one call per shard); never
    read whole (a :class:`ShardedMatrix` of the current rows, whose reference is the stored one's)."""

    def __init__(self, base: ShardedMatrix, row_base: np.ndarray, held_rows: np.ndarray,
                 held_values: np.ndarray) -> None:
        self.base, self.name, self.dtype = base, base.name, base.dtype
        self.row_base = np.asarray(row_base, np.int64)
        self.held_rows, self.held_values = np.asarray(held_rows, np.int64), np.asarray(held_values, base.dtype)
        self.shape = (len(self.row_base), base.shape[1])

    @property
    def fetched(self) -> int:
        """Rows fetched from the shards by the stored matrix."""
        return self.base.fetched

    def ref(self) -> dict[str, Any]:
        """The stored matrix's reference."""
        return self.base.ref()

    def take(self, rows: np.ndarray) -> np.ndarray:
        """``M[rows]`` for integer ``rows`` of any shape: held rows from memory, the others
        from their stored rows."""
        rows = np.asarray(rows, np.int64)
        flat = rows.reshape(-1)
        if len(flat) and (flat.min() < 0 or flat.max() >= self.shape[0]):
            raise IndexError(f"{self.name}: rows out of range [0, {self.shape[0]})")
        at = np.minimum(np.searchsorted(self.held_rows, flat), max(len(self.held_rows) - 1, 0))
        held = self.held_rows[at] == flat if len(self.held_rows) else np.zeros(len(flat), bool)
        out = np.empty((len(flat), self.shape[1]), self.dtype)
        out[held] = self.held_values[at[held]]
        if (~held).any():
            out[~held] = self.base.take(self.row_base[flat[~held]])
        return out.reshape(rows.shape + (self.shape[1],))


def stored_matrix(matrix: Any) -> ShardedMatrix | None:
    """The :class:`ShardedMatrix` of the stored rows under current embeddings (or None: whole)."""
    if isinstance(matrix, HeldRowsMatrix):
        return matrix.base
    return matrix if isinstance(matrix, ShardedMatrix) else None


# ---------------------------------------------------------------------- an add
def renumber(graph: Any, new_of_old: np.ndarray, n_rows: int, n_cols: int, entity_rows: bool,
             rows: np.ndarray, new_rows: Any) -> OverlayCSR:
    """``graph`` (stored rows, possibly under held rows) after an add: entity ids renumbered by
    ``new_of_old`` (increasing), rows too when ``entity_rows``; it holds its held rows and ``rows``
    (sorted current rows, the rows that differ from the stored ones now), read from the whole new
    graph ``new_rows``."""
    base = stored_graph(graph)
    if isinstance(graph, OverlayCSR):
        prev_rows, prev = graph.base, graph.overridden
        base_ids = new_of_old[prev_rows.col_ids] if prev_rows.col_ids is not None else new_of_old
        old_row_base = prev_rows.row_base
    else:
        prev, base_ids = np.zeros(0, np.int64), new_of_old
        old_row_base = np.arange(base.n_rows, dtype=np.int64)
    moved = new_of_old[prev] if entity_rows else prev
    held = np.union1d(moved, np.asarray(rows, np.int64))
    row_base = np.full(n_rows, -1, np.int64)
    if entity_rows:
        row_base[new_of_old] = old_row_base
    else:
        row_base[:len(old_row_base)] = old_row_base
    part = take_rows(new_rows, held)
    return held_graph(base, row_base, base_ids, held, part.indptr, part.indices, n_cols)


def renumber_matrix(matrix: Any, new_of_old: np.ndarray, n_rows: int, rows: np.ndarray,
                    values: np.ndarray) -> HeldRowsMatrix:
    """Subgraph embeddings after an add: entities renumbered by ``new_of_old``; held: the rows held
    before (moved) and ``rows`` (sorted current ids) with ``values``."""
    base = stored_matrix(matrix)
    if isinstance(matrix, HeldRowsMatrix):
        old_row_base, prev, prev_values = matrix.row_base, matrix.held_rows, matrix.held_values
    else:
        old_row_base = np.arange(base.shape[0], dtype=np.int64)
        prev, prev_values = np.zeros(0, np.int64), np.zeros((0, base.shape[1]), base.dtype)
    row_base = np.full(n_rows, -1, np.int64)
    row_base[new_of_old] = old_row_base
    rows = np.asarray(rows, np.int64)
    keep = ~np.isin(new_of_old[prev], rows)
    held = np.concatenate([new_of_old[prev][keep], rows])
    order = np.argsort(held, kind="stable")
    vals = np.concatenate([prev_values[keep], np.asarray(values, base.dtype)])[order]
    return HeldRowsMatrix(base, row_base, held[order], vals)


# ---------------------------------------------------------------------- persistence
def save_held(directory: Path, prefix: str, graph: OverlayCSR) -> None:
    """The held rows of a current graph (``{prefix}held_*``); its stored rows' reference is saved
    with :meth:`~hopgraph.engine.graphs.router_store.RouterStore.save_graph` of :func:`stored_graph`."""
    save_arrays(directory, {f"{prefix}held_rows": graph.overridden, f"{prefix}held_indptr": graph._optr,
                            f"{prefix}held_indices": np.asarray(graph.indices.extra, np.int32)})


def save_entity_ids(directory: Path, base_ids: np.ndarray) -> None:
    """Save the current id of every entity of the stored rows (``base_ids``, :data:`BASE_IDS`)."""
    save_arrays(directory, {BASE_IDS: np.asarray(base_ids, np.int64)})


def load_entity_ids(directory: Path, n_entities: int, where: str) -> np.ndarray | None:
    """``base_ids`` when stored (after an add), checked: increasing ids below ``n_entities`` (one per
    stored entity: the stored graphs' references check their count)."""
    if not (directory / f"{BASE_IDS}.npy").is_file():
        return None
    ids = np.asarray(load_arrays(directory, [BASE_IDS], mmap=False)[BASE_IDS], np.int64)
    if ids.ndim != 1 or (len(ids) and (ids[0] < 0 or ids[-1] >= n_entities or (np.diff(ids) <= 0).any())):
        raise IndexFormatError(f"{where} {BASE_IDS}: expected increasing entity ids below {n_entities}")
    return ids


def load_held(directory: Path, prefix: str, base: ShardedCSR, base_ids: np.ndarray, entity_rows: bool,
              n_rows: int, n_cols: int, where: str) -> OverlayCSR:
    """A current graph saved as :func:`save_held` over its stored rows ``base``, checked."""
    a = load_arrays(directory, [f"{prefix}{n}" for n in HELD_FILES], mmap=False)
    held = np.asarray(a[f"{prefix}held_rows"], np.int64)
    ind = np.asarray(a[f"{prefix}held_indices"])
    ptr = check_indptr(a[f"{prefix}held_indptr"], len(held), len(ind), f"{where} {prefix}held_indptr")
    if len(held) and (np.any(np.diff(held) <= 0) or held[0] < 0 or held[-1] >= n_rows):
        raise IndexFormatError(f"{where} {prefix}held_rows: not sorted distinct rows below {n_rows}")
    if len(ind) and (ind.dtype.kind not in "iu" or ind.min() < 0 or ind.max() >= n_cols):
        raise IndexFormatError(f"{where} {prefix}held_indices: entity ids out of [0, {n_cols})")
    if (entity_rows and base.n_rows != len(base_ids)) or base.n_rows > n_rows:
        raise IndexFormatError(f"{where} {prefix}*: {base.n_rows} stored rows do not fit {n_rows} rows "
                               f"and {len(base_ids)} stored entities")
    row_base = np.full(n_rows, -1, np.int64)
    if entity_rows:
        row_base[base_ids] = np.arange(len(base_ids))
    else:
        row_base[:base.n_rows] = np.arange(base.n_rows)
    return held_graph(base, row_base, base_ids, held, ptr, ind, n_cols)


def save_held_matrix(directory: Path, name: str, matrix: HeldRowsMatrix) -> None:
    """Save the held rows and their values of ``matrix`` (``{name}_held_rows`` /
    ``_held_values``)."""
    save_arrays(directory, {f"{name}_held_rows": matrix.held_rows, f"{name}_held_values": matrix.held_values})


def load_held_matrix(directory: Path, name: str, base: ShardedMatrix, base_ids: np.ndarray, n_rows: int,
                     where: str) -> HeldRowsMatrix:
    """Embeddings saved as :func:`save_held_matrix` over their stored rows ``base``, checked (held rows
    sorted and distinct, values finite of the stored width)."""
    a = load_arrays(directory, [f"{name}_held_rows", f"{name}_held_values"], mmap=False)
    held, values = np.asarray(a[f"{name}_held_rows"], np.int64), np.asarray(a[f"{name}_held_values"])
    if len(held) and (np.any(np.diff(held) <= 0) or held[0] < 0 or held[-1] >= n_rows):
        raise IndexFormatError(f"{where} {name}_held_rows: not sorted distinct rows below {n_rows}")
    if values.shape != (len(held), base.shape[1]) or values.dtype != base.dtype or not np.isfinite(values).all():
        raise IndexFormatError(f"{where} {name}_held_values: expected finite {base.dtype} [{len(held)}, {base.shape[1]}]")
    row_base = np.full(n_rows, -1, np.int64)
    row_base[base_ids] = np.arange(len(base_ids))
    missing = (row_base < 0) & ~np.isin(np.arange(n_rows), held)
    if missing.any():
        raise IndexFormatError(f"{where} {name}: no embedding for entity {int(np.flatnonzero(missing)[0])}")
    return HeldRowsMatrix(base, row_base, held, values)


def read_whole_matrix(matrix: Any) -> Any:
    """Embeddings whose rows the shards hold read whole (every row fetched): for a write that needs
    them all (a full re-encoding); anything else as it is."""
    if stored_matrix(matrix) is None:
        return matrix
    return matrix.take(np.arange(matrix.shape[0], dtype=np.int64))


def spread(part: Any, rows: np.ndarray, n_rows: int) -> Any:
    """A CSR of ``n_rows`` rows holding ``part``'s rows at the sorted distinct ``rows``, others empty."""
    lens = np.zeros(n_rows, np.int64)
    lens[np.asarray(rows, np.int64)] = np.diff(part.indptr)
    ptr = np.zeros(n_rows + 1, np.int64)
    np.cumsum(lens, out=ptr[1:])
    return CSR(ptr, np.asarray(part.indices), np.asarray(part.data), part.n_cols)


def differing_rows(old: Any, new: Any, rows: np.ndarray, old_row: np.ndarray, new_of_old: np.ndarray
                   ) -> tuple[np.ndarray, Any]:
    """Those of the sorted current ``rows`` whose entity ids in ``new`` (a whole graph) differ, in
    order, from those of row ``old_row[r]`` of ``old`` (-1: a new row, empty before) renumbered by
    ``new_of_old``; and ``old``'s rows read (a CSR over ``old``'s rows, the others empty, old ids).
    Reads only those rows of ``old``. O(entries of the rows)."""
    rows = np.asarray(rows, np.int64)
    o = old_row[rows]
    known = o >= 0
    part = take_rows(old, o[known])
    old_read = spread(part, o[known], len(old[0]) - 1)
    aligned = spread(part, np.flatnonzero(known), len(rows))
    now = take_rows(new, rows)
    diff = changed_rows((aligned.indptr, new_of_old[np.asarray(aligned.indices, np.int64)], np.zeros(len(aligned.indices), np.uint8)),
                        (now.indptr, now.indices, np.zeros(len(now.indices), np.uint8)), len(rows))
    return rows[diff], old_read


def read_whole_graph(graph: Any) -> Any:
    """A graph whose rows the shards hold read whole as a CSR (weights one; every row fetched): for
    a write that needs it all; anything else as it is."""
    if stored_graph(graph) is None:
        return graph
    ptr, ind, _ = graph.rows_csr(np.arange(len(graph[0]) - 1, dtype=np.int64))
    return CSR(ptr, np.asarray(ind, np.int32), np.ones(len(ind), np.float32), int(graph[3]))

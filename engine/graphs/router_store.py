"""The graph store of a sharded index's router (:mod:`hopgraph.engine.graphs.store`).

A graph whose rows the shards hold is saved at the router as its row pointer ``{prefix}indptr``,
a reference ``{prefix}rows.json`` (the graph's name in the shards' graph directories, how its
rows are split, its shape and types) and the rows changed since (``{prefix}over_*``); a matrix
as a reference ``{name}.rows.json`` and the rows appended since (``{name}.tail.npy``). Loaded, they
read their rows from the shards (:mod:`hopgraph.engine.graphs.remote`). Built with a
:class:`RowSink` (``hopgraph shard``), the store sends the rows of every whole graph and matrix
saved through it to the shards and keeps the reference; without one, an item held whole at the
router is saved whole, as :class:`~hopgraph.engine.graphs.store.LocalStore` saves it.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ...kernels.csr import CSR
from ..errors import IndexFormatError
from ..storage import check_indptr, load_array, load_arrays, save_arrays, write_json
from .remote import AppendedRows, ShardedCSR, ShardedMatrix, held_elsewhere, owners_of, remote_base
from .store import NODE_ROWS, PASSAGE_ROWS, REF_SUFFIX, GraphStore, LocalStore
from .views import OverlayCSR, csr_rows

#: the arrays of the rows changed since the shards' rows were written (``{prefix}over_*.npy``)
OVERLAY_FILES = ("over_rows", "over_indptr", "over_indices", "over_data")


class RowSink(Protocol):
    """Where ``hopgraph shard`` sends the rows of the graphs it splits."""

    def send(self, directory: Path, key: str, item: Any, owners: str) -> str:
        """Write each shard's rows of ``item`` (a CSR, or a 2-D array: a row per node), saved by the
        router in ``directory`` under ``key``, and return its name in the shards."""


def _read_ref(ref_file: Path) -> dict[str, Any]:
    """The reference ``ref_file`` holds; IndexFormatError naming the file when it is unreadable."""
    try:
        ref = json.loads(ref_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise IndexFormatError(f"{ref_file}: unreadable ({type(e).__name__}: {e})") from None
    if not isinstance(ref, dict):
        raise IndexFormatError(f"{ref_file}: unreadable (not a JSON object)")
    return ref


class RouterStore(GraphStore):
    """The store of a router over ``shards`` (a :class:`~hopgraph.engine.components.sharded.ShardSet`;
    module docstring); ``sink``: where whole items saved through it send their rows (``hopgraph
    shard``; None: they are saved whole)."""

    def __init__(self, shards: Any = None, sink: RowSink | None = None) -> None:
        self.shards, self.sink = shards, sink
        self._whole = LocalStore()

    def by_reference(self, item: Any) -> bool:
        """True for an item whose rows the shards hold, and for any item with a sink."""
        return self.sink is not None or held_elsewhere(item)

    def keep_rows(self, old: Any, new: Any, rows: Any) -> Any:
        """``new`` as ``old``'s rows in the shards with the rows ``rows()`` names, the appended rows
        and the rows ``old`` already replaced read from ``new`` (an :class:`OverlayCSR`); ``new`` when
        ``old``'s rows are not in the shards."""
        base = remote_base(old)
        if base is None:
            return new
        keep = np.union1d(rows(), np.arange(base.n_rows, new.n_rows))
        if isinstance(old, OverlayCSR):
            keep = np.union1d(keep, old.overridden)
        ptr, ind, dat = csr_rows(new.indptr, new.indices, new.data, keep)
        return OverlayCSR(base, keep, ptr, ind, dat, new.n_cols)

    # ------------------------------------------------------------------ graphs
    def save_graph(self, directory: Path, prefix: str, graph: Any, rows_by: str = PASSAGE_ROWS,
                   weighted: bool = True, entries: str = "indices") -> bool:
        """A graph whose rows the shards hold: its reference and the rows changed since; a whole
        graph: its rows sent (with a sink) or saved whole."""
        base = remote_base(graph)
        if base is None and self.sink is None:
            return self._whole.save_graph(directory, prefix, graph, rows_by, weighted, entries)
        if base is None:
            indptr = np.asarray(graph[0], np.int64)
            sent = graph if weighted else CSR(indptr, graph[1], None, int(graph[3]))
            dtypes = {"indices": np.asarray(graph[1][:0]).dtype.str, "data": np.asarray(graph[2][:0]).dtype.str}
            ref = {"name": self.sink.send(directory, f"{prefix}graph", sent, rows_by), "owners": rows_by,
                   "n_rows": len(indptr) - 1, "n_cols": int(graph[3]), "nnz": int(indptr[-1]),
                   "weighted": bool(weighted), "dtypes": dtypes}
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
        return True

    def load_graph(self, directory: Path, prefix: str, n_cols: int, where: str, weighted: bool = True,
                   entries: str = "indices") -> Any:
        """A :class:`~hopgraph.engine.graphs.remote.ShardedCSR` (under an :class:`OverlayCSR` of the
        rows changed since) when the rows are in the shards, else the whole graph."""
        ref_file = directory / f"{prefix}{REF_SUFFIX}"
        if not ref_file.is_file():
            return self._whole.load_graph(directory, prefix, n_cols, where, weighted, entries)
        ref = _read_ref(ref_file)
        try:
            name, kind, n_rows = str(ref["name"]), str(ref["owners"]), int(ref["n_rows"])
            base_cols, nnz, dtypes = int(ref["n_cols"]), int(ref["nnz"]), dict(ref["dtypes"])
        except (ValueError, KeyError, TypeError) as e:
            raise IndexFormatError(f"{ref_file}: unreadable ({type(e).__name__}: {e})") from None
        indptr = check_indptr(load_array(directory, f"{prefix}indptr", mmap=False), n_rows, nnz, f"{where} indptr")
        base = ShardedCSR(name, indptr, base_cols, owners_of(kind, self.shards), self.shards, dtypes,
                          weighted=bool(ref.get("weighted", True)))
        if not (directory / f"{prefix}over_rows.npy").is_file():
            if base_cols != n_cols:
                raise IndexFormatError(f"{where}: {base_cols} columns, expected {n_cols}")
            return base
        o = load_arrays(directory, [f"{prefix}{n}" for n in OVERLAY_FILES], mmap=False)
        rows = np.asarray(o[f"{prefix}over_rows"], np.int64)
        optr = check_indptr(o[f"{prefix}over_indptr"], len(rows), len(o[f"{prefix}over_indices"]),
                            f"{where} over_indptr")
        if len(rows) and (np.any(np.diff(rows) <= 0) or rows[0] < 0):
            raise IndexFormatError(f"{where} over_rows: not sorted distinct rows")
        return OverlayCSR(base, rows, optr, o[f"{prefix}over_indices"], o[f"{prefix}over_data"], n_cols)

    # ------------------------------------------------------------------ matrices
    def save_matrix(self, directory: Path, name: str, matrix: Any, rows_by: str = NODE_ROWS) -> bool:
        """A matrix whose rows the shards hold: its reference (and the rows appended since, an
        :class:`~hopgraph.engine.graphs.remote.AppendedRows`); a whole one: sent (with a sink) or
        saved whole."""
        if isinstance(matrix, AppendedRows):
            save_arrays(directory, {f"{name}.tail": matrix.tail})
        if isinstance(matrix, ShardedMatrix):
            ref = matrix.ref()
        elif self.sink is not None:
            matrix = np.asarray(matrix)
            ref = {"name": self.sink.send(directory, name, matrix, rows_by), "owners": rows_by,
                   "shape": list(matrix.shape), "dtype": matrix.dtype.str}
        else:
            return self._whole.save_matrix(directory, name, matrix, rows_by)
        write_json(directory / f"{name}.{REF_SUFFIX}", ref)
        return True

    def load_matrix(self, directory: Path, name: str, mmap: bool = True) -> Any:
        """A :class:`~hopgraph.engine.graphs.remote.ShardedMatrix` (an
        :class:`~hopgraph.engine.graphs.remote.AppendedRows` with the rows appended since) when its
        rows are in the shards, else the whole array."""
        ref_file = directory / f"{name}.{REF_SUFFIX}"
        if not ref_file.is_file():
            return self._whole.load_matrix(directory, name, mmap)
        ref = _read_ref(ref_file)
        try:
            shape, dtype = tuple(int(x) for x in ref["shape"]), np.dtype(ref["dtype"])
            kind, key = str(ref["owners"]), str(ref["name"])
        except (ValueError, KeyError, TypeError) as e:
            raise IndexFormatError(f"{ref_file}: unreadable ({type(e).__name__}: {e})") from None
        if len(shape) != 2:
            raise IndexFormatError(f"{ref_file}: shape {shape} is not 2-D")
        matrix = ShardedMatrix(key, shape, dtype, owners_of(kind, self.shards), self.shards)
        if (directory / f"{name}.tail.npy").is_file():
            return AppendedRows(matrix, load_array(directory, f"{name}.tail", mmap=False))
        return matrix

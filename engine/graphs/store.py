"""The graph store: where an index keeps the graphs and row matrices its pipelines save and load.

Every pipeline and shared component saves its graphs (CSR: G3RAG's gain graph W, STITCH's chunk
graph P and hypergraph incidences, DMAR's knowledge graph, the title mention graph) and its
row-per-node arrays (embeddings, per-state columns) through the :class:`GraphStore` of its index
(``components.graphs``), and reads them back through two reader interfaces:

* :class:`CSRReader` — ``indptr`` (an array), ``indices`` / ``data`` read by position,
  ``n_rows``, ``n_cols``, ``nnz``, unpacking as the CSR tuple
  (:class:`~hopgraph.kernels.csr.CSR`, :class:`~hopgraph.engine.graphs.views.OverlayCSR`, a
  graph read by rows);
* :class:`RowMatrixReader` — ``shape``, ``dtype``, ``M[rows]`` (a NumPy array, or one read by rows).

The index chooses the store; what a save writes depends on the store and on the item, never on
who calls it:

* :class:`LocalStore` — arrays in the index's own files (an unsharded index): a graph as
  ``{prefix}indptr`` / ``indices`` / ``data``, a matrix as ``{name}.npy``, memory-mapped on load;
* :class:`~hopgraph.engine.graphs.router_store.RouterStore` — a sharded index's router: a graph's row
  pointer and a reference to the rows the shards hold, plus the rows changed since; built with a
  row sink (``hopgraph shard``) it sends whole graphs' rows to the shards;
* :class:`~hopgraph.engine.graphs.shard.ShardRows` — what one shard holds of those rows and serves
  by name.

* :class:`~hopgraph.engine.graphs.device_store.DeviceStore` — an index opened on a GPU: the graphs
  above, saved and loaded through a base store, held on the device (each copied there once, within
  a memory budget); pipelines hand them to kernels through :func:`kernel_graph`, and give the
  store the graphs they build from other arrays (:meth:`GraphStore.hold`).

The index chooses the store in one place (:attr:`~hopgraph.engine.components.shared.Components.graphs`).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ...kernels.csr import CSR, check_csr
from ..errors import IndexFormatError
from ..storage import load_array, load_arrays, save_arrays
from .remote import remote_base

#: the file naming an item whose rows another process holds (``{prefix}rows.json`` beside a graph's
#: ``indptr``, ``{name}.rows.json`` for a matrix)
REF_SUFFIX = "rows.json"
#: how a graph's rows are split when another process holds them: by passage owner, or by node id
PASSAGE_ROWS, NODE_ROWS = "passage", "modulo"


@runtime_checkable
class CSRReader(Protocol):
    """A graph read as a CSR: ``indptr`` int64 [n_rows + 1] in memory, ``indices`` / ``data``
    read by position (``g.indices[pos]``, slices), ``n_cols``; unpacks as
    ``(indptr, indices, data, n_cols)``."""

    indptr: np.ndarray
    indices: Any
    data: Any
    n_cols: int


@runtime_checkable
class RowMatrixReader(Protocol):
    """A row-per-node array: ``shape`` ``(n, d)``, ``dtype``, and ``M[rows]`` for integer rows."""

    shape: tuple[int, ...]
    dtype: Any

    def __getitem__(self, key: Any) -> Any:
        """The rows ``key`` (an int, a slice, or an integer array of any shape)."""


def graph_arrays(graph: Any) -> dict[str, np.ndarray]:
    """``indptr``, ``indices``, ``data`` of a CSR, an overlay over one, or a CSR tuple, as arrays."""
    if hasattr(graph, "arrays"):
        return graph.arrays()
    return {"indptr": np.asarray(graph[0]), "indices": np.asarray(graph[1]), "data": np.asarray(graph[2])}


def saved_by_reference(directory: Path, name: str) -> bool:
    """Whether the item saved in ``directory`` as ``name`` (a graph's prefix, or ``"{matrix}."``)
    keeps a reference to rows another process holds instead of its entries."""
    return (Path(directory) / f"{name}{REF_SUFFIX}").is_file()


def whole_graph(graph: Any) -> Any:
    """``graph`` with every entry in memory: itself when it is read from arrays of this process,
    else a :class:`~hopgraph.kernels.csr.CSR` of every row read (O(entries) bytes, for a step
    that needs the whole graph)."""
    if remote_base(graph) is None:
        return graph
    ptr, ind, dat = graph.rows_csr(np.arange(graph.n_rows, dtype=np.int64))
    return CSR(ptr, ind, dat, graph.n_cols)


def device_arrays(item: Any) -> Any:
    """``item``'s arrays as tensors on the device where a store holds it there (a graph's
    ``(indptr, indices, data)``, an array's tensor: ``item.on_device()``, copied once), else None."""
    on_device = getattr(item, "on_device", None)
    return on_device() if on_device is not None else None


def kernel_graph(graph: Any) -> Any:
    """What a kernel is handed for ``graph``: its tensors where a store holds it on the device
    (:func:`device_arrays`), else :func:`whole_graph` (host arrays, which a kernel on a device
    copies per call)."""
    tensors = device_arrays(graph)
    return tensors if tensors is not None else whole_graph(graph)


class GraphStore(ABC):
    """Where an index's graphs and row matrices are saved and loaded (module docstring). Each save
    returns whether it stored a reference to rows held elsewhere (True) or the item whole."""

    @abstractmethod
    def save_graph(self, directory: Path, prefix: str, graph: Any, rows_by: str = PASSAGE_ROWS,
                   weighted: bool = True, entries: str = "indices") -> bool:
        """Save ``graph`` (a :class:`CSRReader`) in ``directory`` under ``prefix``. ``rows_by``:
        :data:`PASSAGE_ROWS` for a graph over passages, :data:`NODE_ROWS` over other nodes;
        ``weighted=False``: every weight is 1 and none is stored; ``entries``: the name of the
        entries' file (``{prefix}{entries}``). Returns True when a reference was saved."""

    @abstractmethod
    def load_graph(self, directory: Path, prefix: str, n_cols: int, where: str, weighted: bool = True,
                   entries: str = "indices") -> Any:
        """The graph :meth:`save_graph` saved, checked (:class:`IndexFormatError` naming ``where``);
        ``weighted=False``: unit weights (float32)."""

    @abstractmethod
    def save_matrix(self, directory: Path, name: str, matrix: Any, rows_by: str = NODE_ROWS) -> bool:
        """Save a 2-D array (a :class:`RowMatrixReader`) as ``name`` in ``directory``; True when a
        reference was saved."""

    @abstractmethod
    def load_matrix(self, directory: Path, name: str, mmap: bool = True) -> Any:
        """The matrix :meth:`save_matrix` saved (memory-mapped when whole and ``mmap``)."""

    def by_reference(self, item: Any) -> bool:
        """Whether saving ``item`` here stores a reference to rows held elsewhere. Default: never."""
        return False

    def hold(self, item: Any, component: str) -> Any:
        """``item`` (a graph a pipeline built or read otherwise than through :meth:`load_graph`) as
        this store keeps it for searches, ``component`` naming it. Default: itself; a
        :class:`~hopgraph.engine.graphs.device_store.DeviceStore` holds it on its device."""
        return item

    def keep_rows(self, old: Any, new: Any, rows: Any) -> Any:
        """The graph to hold after an update that made ``new`` (whole, in memory) from ``old``:
        ``new`` itself, unless ``old``'s rows are held elsewhere — then ``old``'s stored rows with
        the rows ``rows()`` names (a callable giving the sorted rows below ``old``'s count that may
        differ) and the appended ones replaced by ``new``'s. Default: ``new``."""
        return new


class LocalStore(GraphStore):
    """Graphs and matrices as arrays in the index's own files (module docstring); an item whose
    rows another process holds is refused on load (it belongs to a sharded index's router)."""

    def save_graph(self, directory: Path, prefix: str, graph: Any, rows_by: str = PASSAGE_ROWS,
                   weighted: bool = True, entries: str = "indices") -> bool:
        """``{prefix}indptr``, ``{prefix}{entries}`` and, when ``weighted``, ``{prefix}data``."""
        arrays = graph_arrays(graph) if weighted else {"indptr": np.asarray(graph[0]), "indices": np.asarray(graph[1])}
        names = {"indptr": "indptr", "indices": entries, "data": "data"}
        save_arrays(directory, {f"{prefix}{names[k]}": v for k, v in arrays.items()})
        return False

    def load_graph(self, directory: Path, prefix: str, n_cols: int, where: str, weighted: bool = True,
                   entries: str = "indices") -> Any:
        """The arrays memory-mapped and checked (:func:`~hopgraph.kernels.csr.check_csr`)."""
        refuse_reference(directory, prefix, where)
        fields = [f"{prefix}indptr", f"{prefix}{entries}"] + ([f"{prefix}data"] if weighted else [])
        a = load_arrays(directory, fields)
        data = a[f"{prefix}data"] if weighted else np.ones(len(a[f"{prefix}{entries}"]), np.float32)
        return check_csr(a[f"{prefix}indptr"], a[f"{prefix}{entries}"], data, n_cols, where)

    def save_matrix(self, directory: Path, name: str, matrix: Any, rows_by: str = NODE_ROWS) -> bool:
        """``{name}.npy``."""
        save_arrays(directory, {name: np.asarray(matrix)})
        return False

    def load_matrix(self, directory: Path, name: str, mmap: bool = True) -> Any:
        """``{name}.npy`` (memory-mapped when ``mmap``)."""
        refuse_reference(directory, f"{name}.", str(Path(directory) / name))
        return load_array(directory, name, mmap=mmap)


def refuse_reference(directory: Path, name: str, where: str) -> None:
    """IndexFormatError naming ``where`` when the item saved as ``name`` keeps a reference to rows
    another process holds (it is read through a sharded index's router only)."""
    if saved_by_reference(directory, name):
        raise IndexFormatError(f"{where}: its rows are held by the shards of a sharded index "
                               "(open it with hopgraph.shards.open_router)")


#: the store of an index whose graphs are in its own files
LOCAL = LocalStore()

"""What one shard of a sharded index holds of the graphs its router splits, and serves by name.

``hopgraph shard`` writes, per shard, ``DIR/graph-SSS/NAME/``: a graph's rows owned by the shard
(``indptr``, ``indices``, ``data`` over the shard's rows in its local order, global column ids;
an unweighted graph stores no ``data``) or a row matrix's rows (``values``), and a manifest with
every file's checksum. :class:`ShardRows` is the shard's side of
:class:`~hopgraph.engine.graphs.router_store.RouterStore`: the rows a router's
:class:`~hopgraph.engine.graphs.remote.ShardedCSR` or
:class:`~hopgraph.engine.graphs.remote.ShardedMatrix` reads (``graph_rows``), and the exact top-k
over a row matrix among its flagged rows (``matrix_topk``).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ...kernels.csr import CSR
from .. import storage
from ..components.dense import DenseIndex
from ..errors import IndexFormatError, InputError
from .views import csr_rows

#: the format name of a shard's graph rows manifest
GRAPH_FORMAT = "hopgraph-shard-graphs"
#: the manifest's file name (the name :func:`~hopgraph.engine.storage.verify_files` expects)
MANIFEST_FILE = "manifest.json"


class ShardRows:
    """The graph rows one shard holds (``DIR/graph-SSS``, written by ``hopgraph shard``, never
    changed): each graph as ``indptr`` / ``indices`` / ``data`` over the shard's rows, memory-mapped
    and checked against the manifest's sizes and checksums (``verify="fast"``: sizes)."""

    def __init__(self, path: Path, verify: str = "full") -> None:
        self.path = path
        try:
            manifest = json.loads((path / MANIFEST_FILE).read_text(encoding="utf-8"))
            names = [str(n) for n in manifest["graphs"]]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise IndexFormatError(f"{path / MANIFEST_FILE}: unreadable ({type(e).__name__}: {e})") from None
        if manifest.get("format") != GRAPH_FORMAT:
            raise IndexFormatError(f"{path / MANIFEST_FILE}: not a {GRAPH_FORMAT} manifest")
        problems = storage.verify_files(path, manifest, verify)
        if problems:
            raise IndexFormatError(f"graph rows {path} are corrupt: {problems[0]}")
        self.graphs: dict[str, CSR | np.ndarray] = {}
        self._exact: dict[str, Any] = {}
        for name in names:
            if (path / name / "values.npy").is_file():
                self.graphs[name] = storage.load_array(path / name, "values")
                continue
            weighted = (path / name / "data.npy").is_file()  # unweighted graphs store no weights
            a = storage.load_arrays(path / name, ["indptr", "indices", *(("data",) if weighted else ())])
            ptr = storage.check_indptr(a["indptr"], len(a["indptr"]) - 1, len(a["indices"]), f"{path / name} indptr")
            if weighted and len(a["data"]) != len(a["indices"]):
                raise IndexFormatError(f"{path / name}: indices and data differ in length")
            self.graphs[name] = CSR(ptr, a["indices"], a["data"] if weighted else None, 0)

    def rows(self, name: str, rows: np.ndarray) -> Any:
        """A graph's rows as ``(lengths, indices, data)``; a row-per-node array's rows as an array."""
        graph = self.graphs.get(name)
        if graph is None:
            raise InputError(f"no graph {name!r} in {self.path}")
        rows = np.asarray(rows, np.int64)
        n_rows = len(graph) if isinstance(graph, np.ndarray) else graph.n_rows
        if len(rows) and (rows.min() < 0 or rows.max() >= n_rows):
            raise InputError(f"graph {name}: rows out of range [0, {n_rows})")
        if isinstance(graph, np.ndarray):
            return np.ascontiguousarray(graph[rows])
        if graph.data is None:
            ptr, ind, _ = csr_rows(graph.indptr, graph.indices, graph.indices, rows)
            return np.diff(ptr), ind, None
        ptr, ind, dat = csr_rows(graph.indptr, graph.indices, graph.data, rows)
        return np.diff(ptr), ind, dat

    def topk(self, name: str, mask: str, Q: np.ndarray, k: int, exclude: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Exact cosine top-``k`` over the rows of the array ``name`` whose row of ``mask`` is non-zero,
        except the rows ``exclude`` (:class:`~hopgraph.engine.components.dense.DenseIndex`, exact)."""
        values, flags = self.graphs.get(name), self.graphs.get(mask)
        if not isinstance(values, np.ndarray) or not isinstance(flags, np.ndarray) or len(flags) != len(values):
            raise InputError(f"no row-per-node array {name!r} with mask {mask!r} in {self.path}")
        if name not in self._exact:
            self._exact[name] = DenseIndex(values, mode="exact")
        allowed = np.asarray(flags).reshape(len(flags), -1)[:, 0] != 0
        exclude = np.asarray(exclude, np.int64)
        if len(exclude):
            allowed = allowed.copy()
            allowed[exclude] = False
        return self._exact[name].topk(np.asarray(Q, np.float32), int(k), None if allowed.all() else allowed)

"""One shard of a sharded index, as its router calls it: a normal index (its passages' corpus,
embeddings, dense index and BM25 postings) answering the router's reads by local row, and taking
the writes of the passages it owns (committed to its own directory)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..engine import storage
from ..engine.components.bm25 import BM25Params, TermStats
from ..engine.components.corpus import Corpus
from ..engine.errors import InputError
from ..engine.graphs.shard import ShardRows
from ..index import Index

#: the corpus fields a router may read from a shard (``ids``: to check that it is a shard of its index)
FIELDS = ("ids", "texts", "metadata")
#: what a router may call on a shard
CALLS = ("info", "dense_topk", "dense_exact", "ivf_candidates", "ivf_centroids", "ivf_cell_rows", "rows", "term_stats",
         "bm25_topk", "bm25_scores", "strings", "filter_mask", "graph_rows", "matrix_topk", "add", "delete")


class ShardService:
    """The reads and writes a router sends to one shard (:mod:`hopgraph.engine.components.sharded`);
    every row is local to this shard."""

    def __init__(self, path: str | Path, verify: str = "full", graphs: str | Path | None = None,
                 dense: str | None = None) -> None:
        """``path``: the shard's index; ``graphs``: its graph rows directory (``DIR/graph-SSS``; None:
        the sharded index keeps its graphs at the router); ``dense``: ``"ann"`` when the shard holds
        its part of the sharded index's IVF index (None: the process's dense mode)."""
        self.path, self.verify, self.dense = Path(path), verify, dense
        self.index = Index.load(self.path, progress=False, verify=verify, dense=dense)
        self.current = storage.read_current(self.path)[0]
        self.graphs = None if graphs is None else ShardRows(Path(graphs), verify)

    def fresh(self) -> None:
        """Take in a commit another replica of this shard made (the shard's ``CURRENT`` moved): every
        call starts with it, so a replica never answers from an older commit than the router wrote."""
        current = storage.read_current(self.path)[0]
        if current != self.current:
            self.index.close()
            self.index = Index.load(self.path, progress=False, verify=self.verify, dense=self.dense)
            self.current = current

    def call(self, method: str, *args: Any) -> Any:
        """Run one of :data:`CALLS` on the shard's latest commit (:meth:`fresh` first)."""
        if method not in CALLS:
            raise InputError(f"a shard answers {', '.join(CALLS)}; not {method!r}")
        self.fresh()
        return getattr(self, method)(*args)

    def info(self) -> dict[str, Any]:
        """Passages held (deleted ones included) and live."""
        return {"passages": len(self.index.X), "live": self.index.n_live, "path": str(self.path)}

    def dense_topk(self, Q: np.ndarray, k: int, allowed: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """The exact top-``k`` of the shard's rows under the filter."""
        return self.index.components.dense.exact_topk(Q, k, self._allowed(allowed))

    def dense_exact(self, Q: np.ndarray, k: int, allowed: np.ndarray | None, subset: bool
                    ) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-``k`` of the shard's rows: among the ``allowed`` ones only (``subset``), else by a
        blocked scan under the filter (how the single index searches a narrow filter, and a query
        its IVF search leaves short)."""
        dense = self.index.components.dense
        allowed = self._allowed(allowed)
        if subset:
            return dense.subset_topk(Q, k, allowed if allowed is not None else np.ones(len(self.index.X), bool))
        return dense.scan_topk(Q, k, allowed)

    def ivf_candidates(self, Q: np.ndarray, n: int, nprobe: int, allowed: np.ndarray | None
                       ) -> tuple[np.ndarray, np.ndarray]:
        """The shard's best ``n`` IVF candidates (local rows) and their code scores
        (:meth:`~hopgraph.engine.components.dense.IVFIndex.scored_candidates`)."""
        return self.index.components.dense.ivf.scored_candidates(Q, n, nprobe, self._allowed(allowed))

    def ivf_centroids(self) -> np.ndarray:
        """The cells' centroids of the shard's IVF index (the sharded index's)."""
        return self.index.components.dense.ivf.centroids()

    def ivf_cell_rows(self, cells: np.ndarray) -> np.ndarray:
        """The shard's rows (local, sorted) in the given IVF cells."""
        return self.index.components.dense.ivf.cell_members(np.asarray(cells, np.int64))

    def rows(self, rows: np.ndarray) -> np.ndarray:
        """Embeddings of the shard's local ``rows``."""
        return self.index.components.dense.rows(np.asarray(rows, np.int64))

    def term_stats(self, tokens: Sequence[Sequence[str]], params: BM25Params) -> TermStats:
        """The shard's BM25 statistics of ``tokens``."""
        return self.index.components.bm25(params).term_stats(tokens)

    def bm25_topk(self, tokens: list[list[str]], k: int, allowed: np.ndarray | None, stats: TermStats,
                  params: BM25Params) -> tuple[np.ndarray, np.ndarray]:
        """BM25 top-``k`` of the shard's rows under the filter, scored with the global
        ``stats``."""
        return self.index.components.bm25(params).with_stats(stats).topk(tokens, k, self._allowed(allowed))

    def bm25_scores(self, tokens: Sequence[list[str]], rows: np.ndarray, stats: TermStats,
                    params: BM25Params) -> np.ndarray:
        """BM25 score of local row ``rows[i]`` for query ``tokens[i]`` (float32 [n])."""
        bm25 = self.index.components.bm25(params).with_stats(stats)
        rows = np.asarray(rows, np.int64)
        out = np.zeros(len(rows), np.float32)
        groups: dict[tuple[str, ...], list[int]] = {}
        for i, t in enumerate(tokens):
            groups.setdefault(tuple(t), []).append(i)
        for t, at in groups.items():
            out[at] = bm25.scores_at(list(t), rows[at])
        return out

    def strings(self, fields: Sequence[str], rows: np.ndarray) -> list[list[str]]:
        """Per field of ``fields`` (:data:`FIELDS`), its values at the local ``rows``."""
        bad = [f for f in fields if f not in FIELDS]
        if bad:
            raise InputError(f"fields must be among {FIELDS}, got {bad[0]!r}")
        rows = np.asarray(rows, np.int64).tolist()
        return [[getattr(self.index.corpus, f)[r] for r in rows] for f in fields]

    def filter_mask(self, allowed_ids: Sequence[str] | None, where: Mapping[str, Any] | None) -> np.ndarray | None:
        """The local rows the filters pass (bool [n]; None: no filter). Deleted rows are not removed
        here: the router holds the deletes."""
        return self.index.filter_mask(allowed_ids, where)

    def graph_rows(self, name: str, rows: np.ndarray) -> Any:
        """Rows (local, in this shard's order of graph ``name``) of a graph held here:
        ``(lengths, indices, data)`` with the rows' entries concatenated."""
        if self.graphs is None:
            raise InputError(f"shard {self.path} holds no graph rows")
        return self.graphs.rows(name, rows)

    def matrix_topk(self, name: str, mask: str, Q: np.ndarray, k: int, exclude: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
        """Exact cosine top-``k`` (local rows, scores) over the rows of the row-per-node array ``name``
        held here whose row of ``mask`` is non-zero, except the local rows ``exclude``."""
        if self.graphs is None:
            raise InputError(f"shard {self.path} holds no graph rows")
        return self.graphs.topk(name, mask, Q, k, exclude)

    def add(self, records: Corpus, embeddings: np.ndarray, upsert: bool) -> int:
        """Append the passages ``records`` (embedded by the router) and commit; returns the first new
        local row."""
        start = len(self.index.X)
        self.index.add(records, embeddings=embeddings, upsert=upsert)
        self.index.save()
        self.current = storage.read_current(self.path)[0]
        return start

    def delete(self, ids: Sequence[str]) -> list[str]:
        """Delete passages and commit; returns the ids deleted."""
        report = self.index.delete(list(ids))
        if report.deleted:
            self.index.save()
            self.current = storage.read_current(self.path)[0]
        return list(report.deleted)

    def _allowed(self, allowed: np.ndarray | None) -> np.ndarray | None:
        if allowed is None:
            return None
        allowed = np.asarray(allowed, bool)
        if allowed.shape != (len(self.index.X),):
            raise InputError(f"allowed mask of {allowed.shape} for a shard of {len(self.index.X)} passages")
        return allowed

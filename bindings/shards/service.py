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
from ..index import Index

#: the corpus fields a router may read from a shard
FIELDS = ("texts", "metadata")
#: what a router may call on a shard
CALLS = ("info", "dense_topk", "rows", "term_stats", "bm25_topk", "bm25_scores", "strings", "filter_mask", "add",
         "delete")


class ShardService:
    """The reads and writes a router sends to one shard (:mod:`hopgraph.engine.components.sharded`);
    every row is local to this shard."""

    def __init__(self, path: str | Path, verify: str = "full") -> None:
        self.path, self.verify = Path(path), verify
        self.index = Index.load(self.path, progress=False, verify=verify)
        self.current = storage.read_current(self.path)[0]

    def fresh(self) -> None:
        """Take in a commit another replica of this shard made (the shard's ``CURRENT`` moved): every
        call starts with it, so a replica never answers from an older commit than the router wrote."""
        current = storage.read_current(self.path)[0]
        if current != self.current:
            self.index.close()
            self.index = Index.load(self.path, progress=False, verify=self.verify)
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
        return self.index.components.dense.topk(Q, k, self._allowed(allowed))

    def rows(self, rows: np.ndarray) -> np.ndarray:
        return self.index.components.dense.rows(np.asarray(rows, np.int64))

    def term_stats(self, tokens: Sequence[Sequence[str]], params: BM25Params) -> TermStats:
        return self.index.components.bm25(params).term_stats(tokens)

    def bm25_topk(self, tokens: list[list[str]], k: int, allowed: np.ndarray | None, stats: TermStats,
                  params: BM25Params) -> tuple[np.ndarray, np.ndarray]:
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

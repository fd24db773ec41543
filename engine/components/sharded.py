"""The shared components of a sharded index, as its router sees them: the passages' embeddings,
texts, metadata, dense index and BM25 postings live in the shards, and so do the rows of the
pipelines' graphs (:mod:`hopgraph.engine.graphs.router_store`); the router holds the passage ids and titles, the shard
map, the extraction (read by writes only) and the pipelines' small state, and reads the rest
through :class:`ShardCalls` (one call per shard a batch needs, run side by side).

* :class:`ShardMap` — the owner shard and local row of every global row;
* :class:`ShardedRows` — X as rows gathered from their owners (``X[rows]``; never all of X);
* :class:`ShardedDense` — dense top-k searched as the single index searches: each shard's exact
  top-k under the filter, merged (score, then the lower global row); or, with the single index's
  IVF index split over the shards (:class:`ShardedIVF`), the shards' best candidates by code score
  merged into its candidate list, then rescored exactly;
* :class:`ShardedBM25` — BM25 with global statistics: each batch first gathers the passage count,
  total length and document frequency of its tokens from every shard (:class:`TermStats`), then the
  shards score their passages with them, so the scores equal one index over all passages;
* :class:`RemoteStrings` — a corpus field (texts, metadata) read from the owners;
* :class:`Pending` — the passages a router write adds, read from the router until the shards hold
  them;
* :class:`ShardedComponents` — :class:`~hopgraph.engine.components.shared.Components` over these.

Pipelines run unchanged on the router over them: what a search reads is fetched from the shards
that own it, and every fetched value is the one the single index would have read.
"""
from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Any, Iterator, Mapping, Protocol, Sequence

import numpy as np

from ..errors import InputError
from ..ranking import PAD_ID, PAD_SCORE, merge_topk
from .bm25 import BM25Params, TermStats
from .dense import DEFAULT_NPROBE, SUBSET_MAX_FRACTION, ann_nprobe, dense_method, rescore, rescore_candidates
from .shared import Components
from .tokenizer import tokenize

#: term statistics kept per router for recent token sets (a batch asks for them several times)
STATS_CACHE = 256
#: embeddings a router keeps of the rows it read (float32: 24 MB at d = 384)
ROW_CACHE = 16_384


class ShardCalls(Protocol):
    """How a router reaches its shards: ``map(method, {shard: args})`` calls ``method(*args)`` on each
    named shard (side by side) and returns ``{shard: result}``; a shard with no live replica raises
    :class:`~hopgraph.engine.errors.ShardUnavailableError` naming it."""

    n_shards: int

    def map(self, method: str, calls: Mapping[int, tuple]) -> dict[int, Any]:
        """``{shard: method(*args)}`` for each ``{shard: args}`` of ``calls``, run side by side."""


class ShardMap:
    """Owner shard (``owner`` int [N]) and row within it (``local`` int64 [N]) of every global row;
    ``rows_of[s]``: the global rows of shard ``s`` in local order."""

    def __init__(self, owner: np.ndarray, local: np.ndarray, n_shards: int) -> None:
        self.owner, self.local, self.n_shards = np.asarray(owner, np.int32), np.asarray(local, np.int64), n_shards
        if self.owner.shape != self.local.shape:
            raise InputError("shard map: owner and local rows differ in length")
        self.rows_of: list[np.ndarray] = []
        for s in range(n_shards):
            rows = np.flatnonzero(self.owner == s)
            out = np.empty(len(rows), np.int64)
            out[self.local[rows]] = rows
            self.rows_of.append(out)

    def __len__(self) -> int:
        return len(self.owner)

    def extended(self, owners: np.ndarray) -> "ShardMap":
        """This map with new global rows owned by ``owners`` appended (each after its shard's rows)."""
        owners = np.asarray(owners, np.int32)
        counts = np.array([len(r) for r in self.rows_of], np.int64)
        local = np.empty(len(owners), np.int64)
        for i, s in enumerate(owners.tolist()):
            local[i] = counts[s]
            counts[s] += 1
        return ShardMap(np.concatenate([self.owner, owners]), np.concatenate([self.local, local]), self.n_shards)

    def split(self, rows: np.ndarray) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """``{shard: (positions in rows, local rows)}`` for global ``rows`` (1-D)."""
        rows = np.asarray(rows, np.int64)
        owner = self.owner[rows]
        return {s: (pos, self.local[rows[pos]]) for s in range(self.n_shards)
                for pos in [np.flatnonzero(owner == s)] if len(pos)}

    def local_mask(self, allowed: np.ndarray | None, shard: int) -> np.ndarray | None:
        """A global row mask (bool [N]) restricted to shard ``shard``, in its local order."""
        return None if allowed is None else np.ascontiguousarray(allowed[self.rows_of[shard]])

    def to_global(self, shard: int, local_ids: np.ndarray) -> np.ndarray:
        """Global rows of a shard's local row ids (-1 stays -1)."""
        local_ids = np.asarray(local_ids, np.int64)
        return np.where(local_ids >= 0, self.rows_of[shard][np.maximum(local_ids, 0)], PAD_ID)


class Pending:
    """The passages a router write adds (global rows from ``start``: their corpus ``records`` and
    embeddings ``X``), read from the router while it updates its state, before the shards hold them."""

    def __init__(self, start: int, records: Any, X: np.ndarray) -> None:
        self.start, self.records, self.X = int(start), records, np.asarray(X, np.float32)
        #: the IVF cell of each new row (:class:`ShardedIVF`), found once
        self.cells: np.ndarray | None = None

    def field(self, name: str, row: int) -> str:
        """Corpus field ``name`` (``"texts"``, ``"metadata"``) of global row ``row`` of the
        pending passages."""
        return getattr(self.records, name)[row - self.start]


class ShardSet:
    """A router's shards: the ``calls`` that reach them and the current :class:`ShardMap` (replaced,
    never changed in place, when passages are added). Every proxy of one index shares it."""

    def __init__(self, calls: ShardCalls, shard_map: ShardMap) -> None:
        if calls.n_shards != shard_map.n_shards:
            raise InputError(f"{calls.n_shards} shards reachable, the shard map has {shard_map.n_shards}")
        self.calls, self.map = calls, shard_map
        #: what keeps rows read from the shards (each with a ``forget()``): :meth:`forget_rows`
        self.caches: weakref.WeakSet = weakref.WeakSet()
        #: passages a write is adding, read from here until the shards hold them (:class:`Pending`)
        self.pending: Pending | None = None

    def forget_rows(self) -> None:
        """Drop every row the router keeps of what it read (embeddings, graph rows)."""
        for cache in list(self.caches):
            cache.forget()

    @property
    def n_shards(self) -> int:
        """The shard count."""
        return self.map.n_shards

    def map_calls(self, method: str, calls: Mapping[int, tuple]) -> dict[int, Any]:
        """``calls.map(method, calls)`` (nothing to call: ``{}``)."""
        return self.calls.map(method, calls) if calls else {}

    def holding(self) -> list[int]:
        """The shards that hold at least one passage."""
        return [s for s in range(self.map.n_shards) if len(self.map.rows_of[s])]


class ShardedRows:
    """The embeddings X of a sharded index: ``len``, ``shape``, ``dtype`` and ``X[rows]`` (rows read
    from their owners, one call per shard). Never materialised whole (``np.asarray`` raises)."""

    ndim = 2
    dtype = np.dtype(np.float32)
    #: read by rows only (``X[rows]``): code that would read all of X reads the rows it needs
    rows_only = True

    def __init__(self, shards: ShardSet, dim: int, cache_rows: int = ROW_CACHE) -> None:
        self.shards, self.dim, self.cache_rows = shards, int(dim), int(cache_rows)
        #: rows read before (sorted global rows and their embeddings): a row's embedding never changes
        #: (a replaced passage gets a new row), so what was read stays valid; cleared when full
        self._cached_ids = np.zeros(0, np.int64)
        self._cached = np.zeros((0, self.dim), np.float32)
        self._lock = threading.Lock()
        if getattr(shards, "caches", None) is not None:
            shards.caches.add(self)

    def forget(self) -> None:
        """Drop the rows kept of what was read."""
        with self._lock:
            self._cached_ids, self._cached = np.zeros(0, np.int64), np.zeros((0, self.dim), np.float32)

    @property
    def map(self) -> ShardMap:
        """The current :class:`ShardMap`."""
        return self.shards.map

    def _from_cache(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(found mask, positions in the cache, cache values)`` for sorted unique ``rows``."""
        with self._lock:
            ids, values = self._cached_ids, self._cached
        pos = np.minimum(np.searchsorted(ids, rows), max(len(ids) - 1, 0))
        found = (ids[pos] == rows) if len(ids) else np.zeros(len(rows), bool)
        return found, pos, values

    def _remember(self, rows: np.ndarray, values: np.ndarray) -> None:
        with self._lock:
            if len(self._cached_ids) + len(rows) > self.cache_rows:
                self._cached_ids, self._cached = np.zeros(0, np.int64), np.zeros((0, self.dim), np.float32)
            if len(rows) > self.cache_rows:
                return
            ids = np.concatenate([self._cached_ids, rows])
            order = np.argsort(ids, kind="stable")
            self._cached_ids, self._cached = ids[order], np.concatenate([self._cached, values])[order]

    @property
    def shape(self) -> tuple[int, int]:
        """``(rows, dim)``."""
        return (len(self.map), self.dim)

    def __len__(self) -> int:
        return len(self.map)

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise InputError("a sharded index never gathers all its embeddings in one place; this operation "
                         "needs them (run it on an unsharded index)")

    def take(self, rows: np.ndarray) -> np.ndarray:
        """``X[rows]`` (any shape of row ids) float32."""
        rows = np.asarray(rows, np.int64)
        flat = rows.reshape(-1)
        out = np.empty((len(flat), self.dim), np.float32)
        if len(flat):
            if flat.min() < 0 or flat.max() >= len(self.map):
                raise IndexError(f"rows out of range [0, {len(self.map)})")
            uniq, inverse = np.unique(flat, return_inverse=True)
            got = np.empty((len(uniq), self.dim), np.float32)
            found, at, values = self._from_cache(uniq)
            got[found] = values[at[found]]
            pending = self.shards.pending
            if pending is not None:  # a write's new rows: from the router until the shards hold them
                new = uniq >= pending.start
                got[new] = pending.X[uniq[new] - pending.start]
                found = found | new
            missing = np.flatnonzero(~found)
            parts = self.map.split(uniq[missing])
            results = self.shards.map_calls("rows", {s: (local,) for s, (_, local) in parts.items()})
            for s, (pos, _) in parts.items():
                got[missing[pos]] = results[s]
            if len(missing):
                self._remember(uniq[missing], got[missing])
            out = got[inverse]
        return out.reshape(rows.shape + (self.dim,))

    def __getitem__(self, key: Any) -> np.ndarray:
        if isinstance(key, slice):
            return self.take(np.arange(len(self))[key])
        if isinstance(key, (int, np.integer)):
            return self.take(np.array([int(key)]))[0]
        return self.take(np.asarray(key))

    def __iter__(self) -> Iterator[np.ndarray]:
        raise InputError("a sharded index's embeddings are read by rows, not iterated")


class ShardedDense:
    """Dense top-k over a sharded X (module docstring), searched as the single index searches:
    exactly (each shard's exact top-k under the filter, merged: score, then the lower global row),
    or — when the single index would search its IVF index (``dense_method`` of the global row
    count) and the shards hold their parts of it (``ivf``: the code width; same cells and code
    ranges) — by the IVF search split in two phases: every shard's best candidates by code score
    in the same probed cells, merged into the single index's candidate list, rescored exactly with
    their rows; a narrow filter, and a query the IVF search leaves short, searched exactly."""

    def __init__(self, X: ShardedRows, mode: str = "exact", ivf_bits: int | None = None,
                 nprobe: int = DEFAULT_NPROBE, ivf_trained: int = 0) -> None:
        self.X, self.mode, self.ivf_bits, self.nprobe = X, mode, ivf_bits, int(nprobe)
        self._ivf = None if ivf_bits is None else ShardedIVF(X, ivf_bits, ivf_trained)

    @property
    def method(self) -> str:
        """``"exact"`` or ``"ann"``: how the single index of this many rows searches."""
        return dense_method(self.mode, len(self.X)) if self.ivf_bits is not None else "exact"

    def topk(self, Q: np.ndarray, k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Dense top-``k`` of ``Q`` under ``allowed`` (bool [N]; None: every row): global
        ids and scores, as the single index searches."""
        Q = np.ascontiguousarray(Q, np.float32)
        if self.method == "exact":
            return self._gather("dense_topk", Q, k, allowed)
        n = len(self.X)
        passing = n if allowed is None else int(np.count_nonzero(allowed))
        if allowed is not None and passing <= SUBSET_MAX_FRACTION * n:
            return self._gather("dense_exact", Q, k, allowed, True)
        m = self.X.map
        wanted = rescore_candidates(k, self.ivf_bits)
        parts = self.X.shards.map_calls("ivf_candidates", {
            s: (Q, wanted, ann_nprobe(self.nprobe, n, passing), m.local_mask(allowed, s)) for s in self.X.shards.holding()})
        cand, _ = merge_topk([(m.to_global(s, ids), scores) for s, (ids, scores) in parts.items()], wanted, len(Q))
        ids, scores = rescore(Q, cand, k, self.X.take)
        short = np.flatnonzero((ids >= 0).sum(axis=1) < min(k, passing))
        if len(short):
            ids[short], scores[short] = self._gather("dense_exact", Q[short], k, allowed, False)
        return ids, scores

    def _gather(self, method: str, Q: np.ndarray, k: int, allowed: np.ndarray | None, *extra: Any
                ) -> tuple[np.ndarray, np.ndarray]:
        """Every shard's top-``k`` by ``method`` under the filter, merged."""
        m = self.X.map
        calls = {s: (Q, k, m.local_mask(allowed, s), *extra) for s in self.X.shards.holding()}
        results = self.X.shards.map_calls(method, calls)
        return merge_topk([(m.to_global(s, ids), scores) for s, (ids, scores) in results.items()], k, len(Q))

    def rows(self, rows: np.ndarray) -> np.ndarray:
        """``X[rows]`` read from the owners."""
        return self.X.take(rows)

    def add(self, X: ShardedRows, start: int) -> None:
        """Nothing to do: the owner shards index the rows they are sent."""

    def ivf_state(self) -> None:
        """No IVF index at the router to commit (the shards commit theirs)."""
        return None

    @property
    def ivf(self) -> "ShardedIVF":
        """The IVF index as the router's writes read it; InputError when the shards hold
        none."""
        if self._ivf is None:
            raise InputError("this sharded index's shards hold no IVF index (it searched exactly when sharded)")
        return self._ivf


class ShardedIVF:
    """The IVF index of a sharded index as the router's writes read it (G3RAG's candidates of added
    rows): the cells' centroids (every shard holds the same; read once from one), the cell of a
    row (its nearest centroid, as faiss files it), the rows of given cells gathered from the shards."""

    def __init__(self, X: ShardedRows, bits: int, n_trained: int) -> None:
        self.X, self.bits, self.n_trained = X, int(bits), int(n_trained)
        self._centroids: np.ndarray | None = None
        self._quantizer: Any = None

    def centroids(self) -> np.ndarray:
        """The cells' centroids (read once from one shard)."""
        if self._centroids is None:
            holding = self.X.shards.holding()[:1]
            self._centroids = np.asarray(self.X.shards.map_calls("ivf_centroids", {s: () for s in holding})[holding[0]],
                                         np.float32)
        return self._centroids

    @property
    def nlist(self) -> int:
        """The cell count."""
        return len(self.centroids())

    def assign(self, X: np.ndarray) -> np.ndarray:
        """The cell of each row of ``X`` (its nearest centroid, as faiss files it)."""
        if self._quantizer is None:
            import faiss

            self._quantizer = faiss.IndexFlatIP(self.centroids().shape[1])
            self._quantizer.add(self.centroids())
        _, cells = self._quantizer.search(np.ascontiguousarray(X, dtype=np.float32), 1)
        return cells[:, 0].astype(np.int64)

    def cell_members(self, cells: np.ndarray) -> np.ndarray:
        """The rows of the given cells (global, sorted)."""
        cells = np.unique(np.asarray(cells, np.int64))
        m = self.X.map
        parts = self.X.shards.map_calls("ivf_cell_rows", {s: (cells,) for s in self.X.shards.holding()})
        rows = [m.to_global(s, local) for s, local in parts.items()]
        pending = self.X.shards.pending
        if pending is not None and len(pending.X):  # a write's new rows, before the shards hold them
            if pending.cells is None:
                pending.cells = self.assign(pending.X)
            rows.append(pending.start + np.flatnonzero(np.isin(pending.cells, cells)))
        return np.sort(np.concatenate(rows)) if rows else np.zeros(0, np.int64)


class ShardedBM25:
    """BM25 over the shards with global statistics (module docstring); the interface of
    :class:`~hopgraph.engine.components.bm25.BM25Index` that searches use."""

    def __init__(self, shards: ShardSet, params: BM25Params) -> None:
        self.shards, self.params = shards, params
        self._stats: OrderedDict[tuple, TermStats] = OrderedDict()

    @property
    def map(self) -> ShardMap:
        """The current :class:`ShardMap`."""
        return self.shards.map

    @property
    def n_docs(self) -> int:
        """The passage count of the index."""
        return len(self.map)

    def tokenize(self, texts: Sequence[str]) -> list[list[str]]:
        """``texts`` tokenized as the shards' BM25 indexes tokenize."""
        return tokenize(texts, self.params.stopwords)

    def term_stats(self, tokens: Sequence[Sequence[str]]) -> TermStats:
        """The statistics of every shard for these tokens, summed (cached for recent token sets)."""
        key = (len(self.map), *sorted({t for q in tokens for t in q}))
        if key in self._stats:
            self._stats.move_to_end(key)
            return self._stats[key]
        wanted = list(key[1:])
        parts = self.shards.map_calls("term_stats", {s: ([wanted], self.params) for s in self.shards.holding()})
        total = TermStats(0, 0, {t: 0 for t in wanted})
        for s in sorted(parts):
            total = total.plus(parts[s])
        self._stats[key] = total
        while len(self._stats) > STATS_CACHE:
            self._stats.popitem(last=False)
        return total

    def topk(self, tokens: list[list[str]], k: int, allowed: np.ndarray | None = None
             ) -> tuple[np.ndarray, np.ndarray]:
        """BM25 top-``k`` of the token lists under ``allowed``: global ids and scores with
        global statistics."""
        stats = self.term_stats(tokens)
        m = self.map
        results = self.shards.map_calls("bm25_topk", {s: (tokens, k, m.local_mask(allowed, s), stats, self.params)
                                                      for s in self.shards.holding()})
        return merge_topk([(m.to_global(s, ids), scores) for s, (ids, scores) in results.items()], k, len(tokens))

    def scores_at_batch(self, tokens: Sequence[list[str]], docs: np.ndarray) -> np.ndarray:
        """BM25 score of ``docs[b]`` for query ``b`` (float32, ``docs``' shape; -1 → 0)."""
        docs = np.asarray(docs, np.int64)
        out = np.zeros(docs.shape, np.float32)
        stats = self.term_stats(tokens)
        valid = docs >= 0
        parts = self.map.split(docs[valid])
        query = np.nonzero(valid)[0]
        calls = {}
        for s, (pos, local) in parts.items():
            q = query[pos]
            calls[s] = ([tokens[b] for b in q.tolist()], local, stats, self.params)
        results = self.shards.map_calls("bm25_scores", calls)
        flat = np.zeros(int(valid.sum()), np.float32)
        for s, (pos, _) in parts.items():
            flat[pos] = results[s]
        out[valid] = flat
        return out

    def term_scores_at(self, tokens: Sequence[str], docs: np.ndarray) -> np.ndarray:
        """Each token's BM25 score at ``docs`` (int [C]; float32 [len(tokens), C]), with global
        statistics: :meth:`scores_at_batch` of one single-token query per token."""
        docs = np.asarray(docs, np.int64).ravel()
        return self.scores_at_batch([[t] for t in tokens], np.tile(docs, (len(tokens), 1)))

    def scores_at(self, tokens: list[str], docs: np.ndarray) -> np.ndarray:
        """BM25 scores of ``docs`` for one query's ``tokens`` (``docs``' shape)."""
        docs = np.asarray(docs, np.int64)
        return self.scores_at_batch([tokens], docs.reshape(1, -1)).reshape(docs.shape)


def read_fields(shards: ShardSet, fields: Sequence[str], rows: Sequence[int]) -> list[list[str]]:
    """Corpus ``fields`` (``"texts"``, ``"metadata"``) of global ``rows``, read from their owners in
    one call per shard: one list per field, in the order of ``rows``."""
    rows = np.asarray(list(rows), np.int64)
    out: list[list[str]] = [[""] * len(rows) for _ in fields]
    pending = shards.pending
    if pending is not None:  # a write's new passages: from the router until the shards hold them
        for i in np.flatnonzero(rows >= pending.start).tolist():
            for f, name in enumerate(fields):
                out[f][i] = pending.field(name, int(rows[i]))
        rows = np.where(rows >= pending.start, -1, rows)
    at_shards = np.flatnonzero(rows >= 0)
    parts = {s: (at_shards[pos], local) for s, (pos, local) in shards.map.split(rows[at_shards]).items()}
    results = shards.map_calls("strings", {s: (tuple(fields), local) for s, (_, local) in parts.items()})
    for s, (pos, _) in parts.items():
        at = pos.tolist()
        for f, values in enumerate(results[s]):
            for p, value in zip(at, values):
                out[f][p] = value
    return out


class RemoteStrings(Sequence[str]):
    """A corpus field (``"texts"`` or ``"metadata"``) of a sharded index, read from the owners."""

    def __init__(self, shards: ShardSet, field: str) -> None:
        self.shards, self.field = shards, field

    @property
    def map(self) -> ShardMap:
        """The current :class:`ShardMap`."""
        return self.shards.map

    def __len__(self) -> int:
        return len(self.map)

    def take(self, rows: Sequence[int]) -> list[str]:
        """The field of ``rows``, one call per owner shard."""
        return read_fields(self.shards, (self.field,), rows)[0]

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return self.take(range(*i.indices(len(self))))
        i = int(i)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"row {i} out of range")
        return self.take([i])[0]

    def __iter__(self) -> Iterator[str]:
        step = 4096
        for lo in range(0, len(self), step):
            yield from self.take(range(lo, min(lo + step, len(self))))


class ShardedComponents(Components):
    """:class:`~hopgraph.engine.components.shared.Components` of a router (module docstring): X, the dense
    index and BM25 read from the shards; the extraction and title mentions held here. Build with
    :meth:`Components.load_segments` over a :class:`ShardedRows` X, then :meth:`attach`."""

    shards: ShardSet

    @property  # type: ignore[override]
    def _extractions(self) -> dict:
        """The extractions, read from their files on first use: a router's searches never read them
        (its writes do), so opening a router does not."""
        pending = self.__dict__.pop("_extraction_segments", None)
        if pending is not None:
            super()._load_extractions(pending)
        return self.__dict__["_extraction_dict"]

    @_extractions.setter
    def _extractions(self, value: dict) -> None:
        self.__dict__["_extraction_dict"] = value

    def _load_extractions(self, segments: Sequence[tuple[Any, dict[str, Any], int, int]]) -> None:
        self.__dict__["_extraction_segments"] = list(segments)

    def read_extractions(self) -> None:
        """Read the stored extractions now (before a write grows the rows they are checked against)."""
        self._extractions

    def attach(self, shards: ShardSet, ivf_bits: int | None = None, ivf_trained: int = 0) -> "ShardedComponents":
        """Reach the shards; ``ivf_bits``: the code width of the IVF index parts they hold (None:
        none; the dense search is then exact), ``ivf_trained``: the rows it was trained on."""
        self.shards = shards
        self._dense = ShardedDense(self.X, self.dense_mode, ivf_bits, ivf_trained=ivf_trained)  # type: ignore[assignment]
        return self

    def bm25(self, params: BM25Params | None = None, who: str = "bm25") -> ShardedBM25:  # type: ignore[override]
        """The BM25 view over the shards scored with ``params`` (None: the index's)."""
        params = self.bm25_params if params is None else params
        if params not in self._bm25:
            self._bm25[params] = ShardedBM25(self.shards, params)  # type: ignore[assignment]
        return self._bm25[params]  # type: ignore[return-value]

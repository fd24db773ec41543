"""BM25 on the device: the postings of a :class:`~.bm25.BM25Index` held by the index's graph store
(:class:`~hopgraph.engine.graphs.device_store.DeviceStore`), a batch's top-``k`` and its scores at
candidate rows computed there, as :meth:`BM25Index.topk` and :meth:`BM25Index.scores_at_batch`
compute them on the host, bit for bit.

What stays on the host is the query side (:class:`DeviceQuery`): the vocabulary lookup (a host
hash table) gives each query token its ``(part, vocabulary id)`` hits, whose postings spans
(``indptr``, on the host) and idf (from the summed or the given statistics) go to the device once
per batch, as one array. There the postings entries are gathered and scored with the host's
arithmetic (:func:`~.bm25.term_weights` in float64 on the same values, rounded once to float32),
and each query's scores summed per passage in float32, token after token: one ``index_add_`` per
(token place, part) group, in which a (query, passage) pair occurs at most once, so every sum is
made in the host's order and equals it. The selection (zero scores are padding, equal scores
toward the lower passage, the batch's filter) is one stable sort; ids and scores leave the device
only when a host caller asks for them.

Memory: a batch's queries are scored in blocks of at most :data:`BLOCK_ENTRIES` posting entries
(a query with more is a block of its own), accumulated over the (query, passage) pairs they touch
only — never a ``[B, N]`` row. The postings are placed per part (their ``docs``, ``tf`` and
``doc_len``; ``indptr`` is read on the host); a part the store refuses leaves the search on the
host (:meth:`DeviceBM25.of` is None).
"""
from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import numpy as np
import torch

from ...kernels.tensors import as_tensor
from ..graphs.device_store import DeviceStore
from ..ranking import PAD_ID, PAD_SCORE
from ..sparse import segment_positions_tensors
from .bm25 import BM25Index, term_weights

#: posting entries scored at once: a block of a batch's queries holds at most this many (bounds the
#: device's work arrays to a few hundred bytes per entry)
BLOCK_ENTRIES = 1 << 24
#: the name the postings are held under in the store (its warning names it when they do not fit)
COMPONENT = "bm25 postings"
#: the fields of a query hit, in the order of the rows of a :class:`DeviceQuery`'s ``hits`` (``idf``: its
#: float32 bits)
HIT_FIELDS = ("query", "step", "part", "start", "length", "idf")


class Group(NamedTuple):
    """Hits ``[first, stop)`` of a :class:`DeviceQuery`: the ``step``-th known token of the queries
    of one block, held in part ``part``; ``entries`` their posting entries, ``longest`` the longest
    posting among them."""

    step: int
    part: int
    first: int
    stop: int
    entries: int
    longest: int


class Block(NamedTuple):
    """Queries ``[first, stop)`` of a batch scored together, with their groups (in step order)."""

    first: int
    stop: int
    entries: int
    groups: list[Group]


def query_hits(index: BM25Index, tokens: Sequence[Sequence[str]]) -> np.ndarray:
    """The hits of the token lists ``tokens`` (int64 [6, H], :data:`HIT_FIELDS`), in query, token,
    part order: the vocabulary looked up once per part for the whole batch."""
    found = index.token_postings([t for query in tokens for t in query])
    rows: list[tuple[int, int, int, int, int, int]] = []
    at = 0
    for q, query in enumerate(tokens):
        step = 0
        for token, hits in zip(query, found[at:at + len(query)]):
            if not hits:
                continue
            idf = int(np.float32(index.token_idf(token, hits)).view(np.int32))
            for p, t in hits:
                start = int(index.parts[p].indptr[t])
                rows.append((q, step, p, start, int(index.parts[p].indptr[t + 1]) - start, idf))
            step += 1
        at += len(query)
    return np.asarray(rows, np.int64).reshape(-1, len(HIT_FIELDS)).T


def query_blocks(per_query: np.ndarray, block_entries: int) -> tuple[np.ndarray, list[Block]]:
    """Consecutive queries grouped into blocks of at most ``block_entries`` posting entries
    (``per_query`` each; one over the bound is a block of its own): each query's block and the
    blocks (without their groups yet)."""
    block_of = np.zeros(len(per_query), np.int64)
    blocks: list[Block] = []
    first, total = 0, 0
    for q in range(len(per_query) + 1):
        if q == len(per_query) or (q > first and total + per_query[q] > block_entries):
            if q > first:
                block_of[first:q] = len(blocks)
                blocks.append(Block(first, q, total, []))
            first, total = q, 0
        if q < len(per_query):
            total += int(per_query[q])
    return block_of, blocks


class DeviceQuery:
    """The host side of a batch of token lists over ``index`` (module docstring): one hit per
    (query, known token, part holding it) — ``hits`` int64 [6, H] (:data:`HIT_FIELDS`: the query,
    the token's place among the query's known tokens, repeats counted, the part, the posting's
    start and length there, the bits of the token's float32 idf) ordered by block, step, part,
    query — and the :class:`Block` s of at most ``block_entries`` entries. :meth:`tensors` makes
    it a tensor on ``device`` (the batch's one crossing in; none without a hit)."""

    def __init__(self, index: BM25Index, tokens: Sequence[Sequence[str]], device: Any,
                 block_entries: int = BLOCK_ENTRIES) -> None:
        self.n_queries, self.device = len(tokens), device
        hits = query_hits(index, tokens)
        per_query = np.bincount(hits[0], weights=hits[4], minlength=self.n_queries).astype(np.int64)
        block_of, self.blocks = query_blocks(per_query, block_entries)
        order = np.lexsort((hits[0], hits[2], hits[1], block_of[hits[0]]))
        self.hits = np.ascontiguousarray(hits[:, order])
        keys = np.stack([block_of[self.hits[0]], self.hits[1], self.hits[2]])  # block, step, part
        cuts = np.concatenate([[0], np.flatnonzero(np.any(keys[:, 1:] != keys[:, :-1], axis=0)) + 1, [len(order)]])
        for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist()):
            if a < b:
                lengths = self.hits[4, a:b]
                self.blocks[int(keys[0, a])].groups.append(Group(int(keys[1, a]), int(keys[2, a]), a, b,
                                                                 int(lengths.sum()), int(lengths.max())))
        self._sent: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def n_hits(self) -> int:
        """The number of hits."""
        return self.hits.shape[1]

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(hits int64 [6, H], idf float32 [H])`` on the device, sent (one array) on the first call."""
        if self._sent is None:
            hits = as_tensor(self.hits, device=self.device, name="bm25 query postings")
            self._sent = hits, hits[5].to(torch.int32).view(torch.float32)
        return self._sent


class DeviceBM25:
    """``index``'s postings on a device (``parts``: per part its ``docs``, ``tf`` and ``doc_len``
    tensors) and the searches made there (module docstring)."""

    def __init__(self, index: BM25Index, parts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
                 device: torch.device) -> None:
        self.index, self.parts, self.device = index, parts, device
        self.first = [int(f) for f in index.first]

    @classmethod
    def of(cls, index: Any, store: Any) -> "DeviceBM25 | None":
        """``index``'s postings held by ``store`` (placed on first use, kept by the store while the
        postings live), or None when ``store`` is no :class:`DeviceStore`, ``index`` is no
        :class:`BM25Index` (a sharded view) or a part does not fit the store's budget."""
        if not isinstance(store, DeviceStore) or not isinstance(index, BM25Index):
            return None
        parts = store.place_together(lambda: [store.place((p.docs, p.tf, p.doc_len), COMPONENT, ("docs", "tf", "doc_len"))
                                              for p in index.parts])
        return None if parts is None else cls(index, parts, store.device)

    def query(self, tokens: Sequence[Sequence[str]], block_entries: int = BLOCK_ENTRIES) -> DeviceQuery:
        """The host side of the token lists ``tokens`` (:class:`DeviceQuery`)."""
        return DeviceQuery(self.index, tokens, self.device, block_entries)

    def _scored(self, query: DeviceQuery, g: Group) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Every posting entry of group ``g``: ``(query int64, passage int64 global, score float32)``."""
        hits, idf = query.tensors()
        docs, tf, doc_len = self.parts[g.part]
        seg, pos = segment_positions_tensors(hits[3, g.first:g.stop], hits[4, g.first:g.stop], g.entries)
        local = docs[pos].to(torch.int64)
        scores = self._weights(tf[pos], doc_len[local], idf[g.first:g.stop][seg])
        return hits[0, g.first:g.stop][seg], local + self.first[g.part], scores

    def _weights(self, tf: torch.Tensor, doc_len: torch.Tensor, idf: torch.Tensor) -> torch.Tensor:
        """:func:`~.bm25.score_postings` on tensors (the same float64 operations, rounded once to float32)."""
        avgdl = torch.full((), float(self.index.avgdl), dtype=torch.float64, device=self.device)
        params = self.index.params
        return term_weights(tf.to(torch.float64), doc_len.to(torch.float64), idf.to(torch.float64),
                            float(params.k1), float(params.b), avgdl).to(torch.float32)

    def topk(self, query: DeviceQuery, k: int, allowed: torch.Tensor | None = None
             ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`BM25Index.topk` of ``query``'s token lists on the device: ``(ids int64 [B, k],
        scores float32 [B, k])``, best first, equal scores toward the lower passage, zero scores
        and the passages outside ``allowed`` (bool [N] on the device) left out, -1 / -inf padding."""
        B, N = query.n_queries, self.index.n_docs
        ids = torch.full((B, k), PAD_ID, dtype=torch.int64, device=self.device)
        out = torch.full((B, k), PAD_SCORE, dtype=torch.float32, device=self.device)
        if k == 0 or N == 0 or query.n_hits == 0:
            return ids, out
        for block in query.blocks:
            if block.entries:
                self._block_topk(query, block, k, allowed, ids, out)
        return ids, out

    def _block_topk(self, query: DeviceQuery, block: Block, k: int, allowed: torch.Tensor | None,
                    ids: torch.Tensor, out: torch.Tensor) -> None:
        """The top-``k`` of one block's queries, written into their rows of ``ids`` / ``out``."""
        N, Bb = self.index.n_docs, block.stop - block.first
        scored = [self._scored(query, g) for g in block.groups]
        keys = torch.cat([(q - block.first) * N + d for q, d, _ in scored])
        uniq, inverse = torch.unique(keys, return_inverse=True)  # sorted: by query, then passage
        acc = torch.zeros(len(uniq), dtype=torch.float32, device=self.device)
        at = 0
        for (_, d, s), g in zip(scored, block.groups):  # step after step: the host's summation order
            if allowed is not None:
                s = torch.where(allowed[d], s, torch.zeros((), dtype=torch.float32, device=self.device))
            acc.index_add_(0, inverse[at:at + g.entries], s)
            at += g.entries
        q = uniq // N
        # best first within a query; positive float32 scores order as their bits; zero (filtered) last;
        # the stable sort keeps the passages ascending among equal scores
        rank_key = q * (1 << 32) + (0x7FFFFFFF - acc.view(torch.int32).to(torch.int64))
        rank_key, order = torch.sort(rank_key, stable=True)
        starts = torch.searchsorted(rank_key, torch.arange(Bb, device=self.device, dtype=torch.int64) * (1 << 32))
        q, best = q[order], acc[order]
        rank = torch.arange(len(order), device=self.device) - starts[q]
        keep = (rank < k) & (best > 0)
        slot = q * (k + 1) + torch.where(keep, rank, k)  # column k: a dump for what is not kept
        got_ids = torch.full((Bb * (k + 1),), PAD_ID, dtype=torch.int64, device=self.device)
        got_scores = torch.full((Bb * (k + 1),), PAD_SCORE, dtype=torch.float32, device=self.device)
        got_ids[slot] = torch.where(keep, uniq[order] % N, PAD_ID)
        got_scores[slot] = torch.where(keep, best, PAD_SCORE)
        ids[block.first:block.stop] = got_ids.view(Bb, k + 1)[:, :k]
        out[block.first:block.stop] = got_scores.view(Bb, k + 1)[:, :k]

    def scores_at(self, query: DeviceQuery, cand: torch.Tensor) -> torch.Tensor:
        """:meth:`BM25Index.scores_at_batch` on the device: the score of ``cand[b]`` (int64 [B, C]
        on the device, -1 = padding → 0) for query ``b`` (float32 [B, C]). Each hit's posting is
        searched for the candidates (a binary search within its span), read at them only."""
        cand = cand.to(torch.int64)
        out = torch.zeros(cand.shape, dtype=torch.float32, device=self.device)
        if query.n_hits == 0 or cand.numel() == 0:
            return out
        hits, idf = query.tensors()
        zero = torch.zeros((), dtype=torch.float32, device=self.device)
        for block in query.blocks:
            for g in block.groups:  # in step order per query; a candidate lies in one part only
                docs, tf, doc_len = self.parts[g.part]
                q, start, length = hits[0, g.first:g.stop], hits[3, g.first:g.stop], hits[4, g.first:g.stop]
                local = cand[q] - self.first[g.part]
                inside = (cand[q] >= 0) & (local >= 0) & (local < len(doc_len))
                lo, hi = start[:, None].expand_as(local).clone(), (start + length)[:, None].expand_as(local).clone()
                for _ in range(max(g.longest, 1).bit_length()):
                    open_ = lo < hi
                    mid = (lo + hi) // 2
                    right = open_ & (docs[mid.clamp_max(len(docs) - 1)] < local)
                    lo = torch.where(right, mid + 1, lo)
                    hi = torch.where(open_ & ~right, mid, hi)
                end = (start + length)[:, None]
                at = lo.clamp_max(max(len(docs) - 1, 0))
                hit = inside & (lo < end) & (docs[at].to(torch.int64) == local)
                scores = self._weights(tf[at], doc_len[local.clamp(0, max(len(doc_len) - 1, 0))],
                                       idf[g.first:g.stop][:, None].expand_as(local))
                out.index_add_(0, q, torch.where(hit, scores, zero))
        return out

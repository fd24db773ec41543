"""The BM25 component (Lucene variant, bm25s's scoring): one lexical index per index, shared by every
pipeline that uses BM25 (bm25, hybrid, g3rag, stitch, ppr_binary, dmar, hop); DMAR's candidate recall
(SPEC §3 step 1) is its top n.

Its parameters (:class:`BM25Params`: ``k1``, ``b``, ``stopwords``) are the ``"bm25"`` entry of the
index parameters and apply to every pipeline that uses BM25.

Stored as term-frequency postings, one :class:`Postings` per segment of the index (its passages'
tokens, a vocabulary of its own); the statistics — the passage count N, each token's document
frequency, the average length — are summed over the segments when a query is scored, so the scores
equal those of one index built over all the passages (deleted passages count until a compaction
drops them, as in Lucene). Each score is bm25s's ("lucene" idf and term-frequency component,
:func:`score_postings`) to the bit: ``float32(idf · tf / (tf + k1 · (1 − b + b · len / avglen)))``
with idf ``float32(ln(1 + (N − df + 0.5) / (df + 0.5)))``, the products in float64 as bm25s makes
them; a query's scores are the float32 sums of its tokens' scores in token order (repeats counted).
Other ``k1`` / ``b`` values read the same postings.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import IndexFormatError
from ..params import FitParams, choice, real
from ..ranking import PAD_ID, PAD_SCORE
from ..storage import HashTable, check_ids, check_indptr, check_packed, load_arrays, pack_strings, save_arrays
from .corpus import SMALL_PART, PackedStrings
from .tokenizer import STOPWORDS, tokenize, tokenize_ids


@dataclass(frozen=True)
class BM25Params(FitParams):
    """BM25 scoring (Robertson/Lucene): term saturation ``k1``, length normalisation ``b``."""

    pipeline = "bm25"
    k1: float = real(1.5, low=0.0)
    b: float = real(0.75, low=0.0, high=1.0)
    stopwords: str | None = choice("en", STOPWORDS, nullable=True)


#: passages tokenized at once when postings are built (bounds the flat token arrays)
BUILD_CHUNK = 200_000


class Postings:
    """Term-frequency postings of consecutive passages: ``vocab`` (sorted tokens), and per token
    (``indptr`` int64 [V + 1]) the passages holding it (``docs`` int32, local, ascending) with its
    count there (``tf`` int32); ``doc_len`` (int32 [n], tokens per passage). A stored one reads
    its vocabulary through a hash table (:class:`~hopgraph.engine.storage.HashTable`), an in-memory
    one through a dict."""

    ARRAYS = ("indptr", "docs", "tf", "doc_len", "vocab_data", "vocab_offsets")
    #: the vocabulary's hash table, stored from :data:`~.corpus.SMALL_PART` tokens up
    TABLE = ("vocab_hashes", "vocab_positions")

    def __init__(self, vocab: Sequence[str], indptr: np.ndarray, docs: np.ndarray, tf: np.ndarray,
                 doc_len: np.ndarray, table: HashTable | None = None) -> None:
        self.vocab, self.indptr, self.docs, self.tf, self.doc_len = vocab, indptr, docs, tf, doc_len
        self.table = table
        self._dict: dict[str, int] | None = None
        self.total_len = int(np.asarray(doc_len, np.int64).sum())

    @property
    def n_docs(self) -> int:
        """The number of passages indexed."""
        return len(self.doc_len)

    @classmethod
    def empty(cls) -> "Postings":
        """Postings of no passage and no term."""
        z = np.zeros(0, np.int32)
        return cls([], np.zeros(1, np.int64), z, z, z)

    @classmethod
    def build(cls, texts: Sequence[str], stopwords: str | None, progress: bool = False) -> "Postings":
        """Tokenize ``texts`` (:mod:`.tokenizer`) and count each token per passage, in chunks of
        :data:`BUILD_CHUNK` passages (joined by :meth:`merge`); with ``progress``, one bar per stage
        (``bm25: tokenize``, ``bm25: index``). Cost: O(tokens) plus a sort per chunk."""
        bars = [None, None]
        if progress and len(texts):
            from tqdm.auto import tqdm

            bars = [tqdm(total=len(texts), desc=f"bm25: {stage}", unit="passage", unit_scale=True, dynamic_ncols=True)
                    for stage in ("tokenize", "index")]
        parts = []
        for lo in range(0, max(len(texts), 1), BUILD_CHUNK):
            ids, lens, vocab = tokenize_ids(texts[lo:lo + BUILD_CHUNK], stopwords, bars[0])
            parts.append(cls._from_ids(ids, lens, vocab))
            if bars[1] is not None:
                bars[1].update(len(lens))
        for bar in bars:
            if bar is not None:
                bar.close()
        return parts[0] if len(parts) == 1 else cls.merge(parts)

    @classmethod
    def _from_ids(cls, ids: np.ndarray, lens: np.ndarray, vocab: list[str]) -> "Postings":
        n = len(lens)
        order = sorted(range(len(vocab)), key=vocab.__getitem__)
        rank = np.empty(len(vocab), np.int64)
        rank[order] = np.arange(len(vocab))
        doc = np.repeat(np.arange(n, dtype=np.int64), lens)
        key, tf = np.unique(rank[ids] * max(n, 1) + doc, return_counts=True)
        tok = key // max(n, 1)
        indptr = np.zeros(len(vocab) + 1, np.int64)
        np.cumsum(np.bincount(tok, minlength=len(vocab)), out=indptr[1:])
        return cls([vocab[i] for i in order], indptr, (key % max(n, 1)).astype(np.int32), tf.astype(np.int32),
                   lens.astype(np.int32))

    @classmethod
    def merge(cls, parts: Sequence["Postings"]) -> "Postings":
        """The postings of the passages of ``parts`` in order (one vocabulary; each token's passages
        renumbered and concatenated in part order)."""
        parts = [p for p in parts if p.n_docs] or list(parts[:1]) or [cls.empty()]
        if len(parts) == 1:
            return parts[0]
        vocab = sorted(set(itertools.chain.from_iterable(p.vocab for p in parts)))
        where = {t: i for i, t in enumerate(vocab)}
        offsets = np.cumsum([0] + [p.n_docs for p in parts])
        toks, docs, tfs = [], [], []
        for p, off in zip(parts, offsets):
            ids = np.fromiter((where[t] for t in p.vocab), np.int64, len(p.vocab))
            toks.append(np.repeat(ids, np.diff(np.asarray(p.indptr))))
            docs.append(np.asarray(p.docs, np.int64) + off)
            tfs.append(np.asarray(p.tf))
        tok, doc, tf = np.concatenate(toks), np.concatenate(docs), np.concatenate(tfs)
        order = np.lexsort((doc, tok))
        indptr = np.zeros(len(vocab) + 1, np.int64)
        np.cumsum(np.bincount(tok, minlength=len(vocab)), out=indptr[1:])
        return cls(vocab, indptr, doc[order].astype(np.int32), tf[order].astype(np.int32),
                   np.concatenate([np.asarray(p.doc_len) for p in parts]).astype(np.int32))

    # ------------------------------------------------------------------ access
    def token_ids(self, tokens: Sequence[str]) -> np.ndarray:
        """Vocabulary id of each token (-1: not in these passages)."""
        if self.table is not None:
            return self.table.find(list(tokens), self.vocab.__getitem__)
        if self._dict is None:
            self._dict = {t: i for i, t in enumerate(self.vocab)}
        return np.fromiter((self._dict.get(t, -1) for t in tokens), np.int64, len(tokens))

    def posting(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        """``(docs int64 ascending, tf int64)`` of vocabulary id ``t``."""
        a, b = int(self.indptr[t]), int(self.indptr[t + 1])
        return np.asarray(self.docs[a:b], np.int64), np.asarray(self.tf[a:b], np.int64)

    def df(self, t: int) -> int:
        """The document frequency of term id ``t`` (the passages whose text holds it)."""
        return int(self.indptr[t + 1] - self.indptr[t])

    # ------------------------------------------------------------------ persistence
    def arrays(self) -> dict[str, np.ndarray]:
        """The postings as named arrays (vocabulary packed, with its hash table from
        :data:`SMALL_PART` terms up), for :func:`~hopgraph.engine.storage.save_arrays`."""
        vocab_data, vocab_offsets = pack_strings(list(self.vocab))
        out = {"indptr": np.asarray(self.indptr, np.int64), "docs": self.docs, "tf": self.tf,
               "doc_len": self.doc_len, "vocab_data": vocab_data, "vocab_offsets": vocab_offsets}
        if len(self.vocab) >= SMALL_PART:
            table = self.table if self.table is not None else HashTable.build(list(self.vocab))
            out.update(table.arrays("vocab_"))
        return out

    def save(self, directory: Path) -> dict[str, Any]:
        """Write :meth:`arrays` under ``directory``; returns the manifest entry (passage, term and
        posting counts)."""
        save_arrays(directory, self.arrays())
        return {"n_docs": self.n_docs, "vocab": len(self.vocab), "postings": len(self.docs)}

    @classmethod
    def load(cls, directory: Path, n_docs: int) -> "Postings":
        """Stored postings of ``n_docs`` passages (memory-mapped), checked: vocabulary strings and hash
        table, offsets, passage ids in range and ascending per token, counts ≥ 1, lengths ≥ 0 and
        equal to the counts' sums (IndexFormatError naming the file)."""
        where = f"BM25 postings {directory}"
        a = load_arrays(directory, cls.ARRAYS + (cls.TABLE if (directory / "vocab_hashes.npy").is_file() else ()))
        check_packed(a["vocab_data"], a["vocab_offsets"], f"{where} vocab")
        vocab = PackedStrings(a["vocab_data"], a["vocab_offsets"])
        V = len(vocab)
        table = HashTable.from_arrays(a, "vocab_", V, where) if "vocab_hashes" in a else None
        docs = check_ids(a["docs"], max(n_docs, 1), f"{where} docs.npy")
        indptr = check_indptr(a["indptr"], V, len(docs), f"{where} indptr.npy")
        tf = np.asarray(a["tf"])
        doc_len = np.asarray(a["doc_len"])
        if tf.shape != docs.shape or tf.dtype.kind != "i" or (len(tf) and tf.min() < 1):
            raise IndexFormatError(f"{where} tf.npy: counts must be integers >= 1, one per posting")
        if doc_len.shape != (n_docs,) or doc_len.dtype.kind != "i":
            raise IndexFormatError(f"{where} doc_len.npy: expected {n_docs} integer lengths")
        starts = np.zeros(len(docs), bool)
        starts[indptr[:-1][np.diff(indptr) > 0]] = True
        if len(docs) > 1 and ((np.diff(np.asarray(docs, np.int64)) <= 0) & ~starts[1:]).any():
            raise IndexFormatError(f"{where} docs.npy: passages must be distinct and ascending per token")
        if not np.array_equal(np.bincount(docs, weights=tf, minlength=n_docs).astype(np.int64),
                              doc_len.astype(np.int64)):
            raise IndexFormatError(f"{where} doc_len.npy: lengths differ from the token counts")
        return cls(vocab, indptr, a["docs"], a["tf"], a["doc_len"], table)


def score_postings(tf: np.ndarray, doc_len: np.ndarray, idf: np.float32, k1: float, b: float,
                   avgdl: np.float64) -> np.ndarray:
    """bm25s's score of one token in passages with counts ``tf`` and lengths ``doc_len`` (float32):
    :func:`term_weights` in float64, rounded once to float32."""
    return term_weights(np.asarray(tf, np.float64), np.asarray(doc_len, np.float64), np.float64(idf), k1, b,
                        avgdl).astype(np.float32)


def term_weights(tf: Any, doc_len: Any, idf: Any, k1: float, b: float, avgdl: Any) -> Any:
    """``idf · tf / (tf + k1 · ((1 − b) + b · len / avgdl))`` of float64 NumPy arrays or torch
    tensors (``k1``, ``b`` Python floats): one IEEE operation after the other in this order, so
    both libraries give the same bits (on CUDA ``avgdl`` must be a tensor on the device: torch
    divides by a host scalar as a multiplication by its reciprocal there)."""
    norm = k1 * ((1 - b) + b * doc_len / avgdl)
    return idf * (tf / (norm + tf))


def lucene_idf(n_docs: int, df: int) -> np.float32:
    """bm25s's "lucene" idf, ``ln(1 + (N − df + 0.5) / (df + 0.5))`` in double, stored as float32."""
    return np.float32(math.log(1 + (n_docs - df + 0.5) / (df + 0.5)))


@dataclass(frozen=True)
class TermStats:
    """The corpus statistics BM25 scores with — passage count, total length, and the document
    frequency of each query token — summed over every part of a corpus held in several places
    (the shards of a sharded index: :meth:`BM25Index.term_stats` of each, added with :meth:`plus`)."""

    n_docs: int
    total_len: int
    df: dict[str, int]

    def plus(self, other: "TermStats") -> "TermStats":
        """The statistics of both parts of the corpus together (counts and lengths added, document
        frequencies summed per token); neither is changed."""
        df = dict(self.df)
        for t, n in other.df.items():
            df[t] = df.get(t, 0) + n
        return TermStats(self.n_docs + other.n_docs, self.total_len + other.total_len, df)


class BM25Index:
    """BM25 over the passages' ``"title: text"`` (module docstring): ``parts`` are the postings of
    consecutive row ranges (segments) in row order; queries come as token lists (:mod:`.tokenizer`).
    ``stats``: score with these corpus statistics instead of this index's own (a shard scoring as
    the whole corpus would: :class:`TermStats`); the passages searched are still this index's."""

    def __init__(self, parts: Sequence[Postings], params: BM25Params, stats: TermStats | None = None) -> None:
        self.parts = list(parts) or [Postings.empty()]
        self.params = params
        self.first = np.zeros(len(self.parts) + 1, np.int64)
        np.cumsum([p.n_docs for p in self.parts], out=self.first[1:])
        self.n_docs = int(self.first[-1])
        self.total_len = sum(p.total_len for p in self.parts)
        self.stats = stats
        n, total = (self.n_docs, self.total_len) if stats is None else (stats.n_docs, stats.total_len)
        #: the average passage length, as bm25s computes it (an exact sum, one division)
        self.avgdl = np.float64(total) / np.float64(max(n, 1))

    @classmethod
    def build(cls, texts: Sequence[str], params: BM25Params, progress: bool = False) -> "BM25Index":
        """Tokenize and index ``texts`` (one part); with ``progress``, one bar ``bm25: tokenize``."""
        return cls([Postings.build(texts, params.stopwords, progress)], params)

    def with_params(self, params: BM25Params) -> "BM25Index":
        """The same postings scored with other ``k1`` / ``b`` (same stop words)."""
        return BM25Index(self.parts, params, self.stats)

    def with_stats(self, stats: TermStats | None) -> "BM25Index":
        """The same postings scored with the corpus statistics ``stats`` (None: their own)."""
        return BM25Index(self.parts, self.params, stats)

    def term_stats(self, tokens: Sequence[Sequence[str]]) -> TermStats:
        """This index's own statistics for the tokens of ``tokens`` (lists of query tokens)."""
        wanted = list(dict.fromkeys(t for query in tokens for t in query))
        df = {t: self._own_df(hits) for t, hits in zip(wanted, self.token_postings(wanted))}
        return TermStats(self.n_docs, self.total_len, df)

    def extended(self, texts: Sequence[str], progress: bool = False, join_below: int = 4096) -> "BM25Index":
        """This index with the passages ``texts`` appended (their postings only are built; a last
        in-memory part of fewer than ``join_below`` passages is joined with them)."""
        new = Postings.build(texts, self.params.stopwords, progress)
        parts = list(self.parts)
        last = parts[-1]
        if last.table is None and last.n_docs < join_below:
            parts[-1] = Postings.merge([last, new])
        else:
            parts.append(new)
        return BM25Index(parts, self.params)

    def tokenize(self, texts: Sequence[str]) -> list[list[str]]:
        """Query tokens, by the same rules as the passages."""
        return tokenize(texts, self.params.stopwords)

    # ------------------------------------------------------------------ scoring
    def token_postings(self, tokens: Sequence[str]) -> list[list[tuple[int, int]]]:
        """Per query token, the ``(part, vocabulary id)`` pairs holding it."""
        found = [[] for _ in tokens]
        for p, part in enumerate(self.parts):
            ids = part.token_ids(tokens)
            for i in np.flatnonzero(ids >= 0).tolist():
                found[i].append((p, int(ids[i])))
        return found

    def _own_df(self, hits: Sequence[tuple[int, int]]) -> int:
        """A token's document frequency in these postings (its ``(part, vocabulary id)`` pairs)."""
        return sum(self.parts[p].df(t) for p, t in hits)

    def token_idf(self, token: str, hits: Sequence[tuple[int, int]]) -> np.float32:
        """The idf of ``token`` (held at ``hits``, its ``(part, vocabulary id)`` pairs): from this
        index's own statistics, or from ``stats`` when given."""
        if self.stats is None:
            return lucene_idf(self.n_docs, self._own_df(hits))
        return lucene_idf(self.stats.n_docs, self.stats.df[token])

    def _scored(self, tokens: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per known query token (in order, repeats kept): ``(global docs ascending, scores float32)``."""
        out = []
        k1, b = float(self.params.k1), float(self.params.b)
        for token, hits in zip(tokens, self.token_postings(tokens)):
            if not hits:
                continue
            idf = self.token_idf(token, hits)
            docs, scores = [], []
            for p, t in hits:
                d, tf = self.parts[p].posting(t)
                scores.append(score_postings(tf, np.asarray(self.parts[p].doc_len)[d], idf, k1, b, self.avgdl))
                docs.append(d + self.first[p])
            out.append((np.concatenate(docs), np.concatenate(scores)))
        return out

    def topk(self, tokens: list[list[str]], k: int, allowed: np.ndarray | None = None
             ) -> tuple[np.ndarray, np.ndarray]:
        """BM25 top-``k`` (ids int64, scores float32) per tokenized query, best first, ties toward the
        lower passage id; zero-score hits are padding (-1 / -inf). ``allowed`` (bool [N]) restricts
        the result to those passages. Read from the query tokens' postings only (:meth:`matching`),
        not over all N (``bench/bench_bm25_topk.py``)."""
        B = len(tokens)
        ids = np.full((B, k), PAD_ID, np.int64)
        out = np.full((B, k), PAD_SCORE, np.float32)
        if B == 0 or k == 0 or self.n_docs == 0:
            return ids, out
        allowed = None if allowed is None else np.asarray(allowed, bool)
        scratch = self.scratch()
        for q, query in enumerate(tokens):
            docs, scores = self.matching(query, scratch)
            keep = scores > 0
            if allowed is not None:
                keep &= allowed[docs]
            docs, scores = docs[keep], scores[keep]
            if len(docs) > k:  # the k best (and every doc tied with the k-th), then the exact order
                part = np.argpartition(-scores, k - 1)[:k]
                kth = scores[part].min()
                cut = scores >= kth
                docs, scores = docs[cut], scores[cut]
            order = np.lexsort((docs, -scores))[:k]
            ids[q, :len(order)], out[q, :len(order)] = docs[order], scores[order]
        return ids, out

    def scratch(self) -> tuple[np.ndarray, np.ndarray]:
        """The work arrays of :meth:`matching` (a zeroed float32 score row and an int64 stamp row
        over the N passages), made once per batch and left as they were found by each query."""
        return np.zeros(self.n_docs, np.float32), np.empty(self.n_docs, np.int64)

    def matching(self, tokens: list[str], scratch: tuple[np.ndarray, np.ndarray] | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
        """``(docs int64, scores float32)``: every passage holding one of the query's tokens, each
        once (in no particular order), with its BM25 score — :meth:`scores` at those passages, bit
        for bit; the other passages score 0.

        Work: the tokens' postings, not N — the scores accumulate in the zeroed row of ``scratch``
        (:meth:`scratch`; reset at the touched passages afterwards), and the distinct passages are
        found without a sort by stamping each posting entry's position into the stamp row: an entry
        is a passage's first when the stamp read back is its own."""
        posts = self._scored(tokens)
        if not posts:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        acc, stamp = scratch if scratch is not None else self.scratch()
        for d, v in posts:  # one token's posting holds a passage at most once: a plain indexed add
            acc[d] += v
        cat = np.concatenate([d for d, _ in posts]).astype(np.int64, copy=False)
        pos = np.arange(len(cat))
        stamp[cat[::-1]] = pos[::-1]  # reversed: the first entry of each passage writes last
        docs = cat[stamp[cat] == pos]
        scores = acc[docs]  # a copy (fancy indexing)
        acc[docs] = 0.0
        return docs, scores

    def scores(self, tokens: list[str]) -> np.ndarray:
        """BM25 score of every passage for one tokenized query (float32 [N]; zeros if no token is known)."""
        out = np.zeros(self.n_docs, np.float32)
        for d, v in self._scored(tokens):
            out[d] += v
        return out

    def term_scores_at(self, tokens: Sequence[str], docs: np.ndarray) -> np.ndarray:
        """Each token's BM25 score in the passages ``docs`` (int [C], -1 = padding → 0): float32
        [len(tokens), C], row t the score of ``tokens[t]`` alone, equal to ``scores_at([tokens[t]],
        docs)``. Only the hits are scored: O(|tokens| · C · log df), whatever the postings' length."""
        docs = np.asarray(docs, np.int64).ravel()
        out = np.zeros((len(tokens), len(docs)), np.float32)
        k1, b = float(self.params.k1), float(self.params.b)
        for i, hits in enumerate(self.token_postings(tokens)):
            if not hits:
                continue
            idf = self.token_idf(tokens[i], hits)
            for p, t in hits:
                d, tf = self.parts[p].posting(t)
                local = docs - self.first[p]
                inside = (docs >= 0) & (local >= 0) & (local < self.parts[p].n_docs)
                if not len(d) or not inside.any():
                    continue
                pos = np.minimum(np.searchsorted(d, local), len(d) - 1)
                hit = inside & (d[pos] == local)
                out[i, hit] = score_postings(tf[pos[hit]], np.asarray(self.parts[p].doc_len)[local[hit]], idf, k1, b,
                                             self.avgdl)
        return out

    def scores_at_batch(self, tokens: Sequence[list[str]], docs: np.ndarray) -> np.ndarray:
        """:meth:`scores_at` of ``docs[b]`` for query ``tokens[b]`` (float32 [B, C])."""
        docs = np.asarray(docs, np.int64)
        out = np.zeros(docs.shape, np.float32)
        for b in range(len(docs)):
            out[b] = self.scores_at(tokens[b], docs[b])
        return out

    def scores_at(self, tokens: list[str], docs: np.ndarray) -> np.ndarray:
        """BM25 score of the passages ``docs`` (int, any shape; -1 = padding → 0) for one tokenized
        query (float32, ``docs``' shape): :meth:`scores` read at ``docs`` only, bit for bit, without
        an ``[N]`` score row. Each token's postings (ascending) are searched for the docs:
        O(|tokens| · |docs| · log df)."""
        docs = np.asarray(docs, np.int64)
        out = np.zeros(docs.shape, np.float32)
        flat, valid = docs.ravel(), docs.ravel() >= 0
        acc = out.reshape(-1)
        for post, data in self._scored(tokens):
            pos = np.minimum(np.searchsorted(post, flat), len(post) - 1)
            hit = valid & (post[pos] == flat)
            acc += np.where(hit, data[pos], np.float32(0.0))
        return out

"""The BM25 component (bm25s, Lucene variant): one lexical index per index, shared by every
pipeline that uses BM25 (bm25, hybrid, g3rag, stitch, ppr_binary, dmar); DMAR's candidate
recall (SPEC §3 step 1) is its top n.

Its parameters (:class:`BM25Params`: ``k1``, ``b``, ``stopwords``) are the ``"bm25"`` entry of
the index parameters and apply to every pipeline that uses BM25.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import bm25s
import numpy as np

from ..params import FitParams, choice, real
from ..ranking import PAD_ID, PAD_SCORE
from .tokenizer import STOPWORDS, tokenize


@dataclass(frozen=True)
class BM25Params(FitParams):
    """BM25 scoring (Robertson/Lucene): term saturation ``k1``, length normalisation ``b``."""

    pipeline = "bm25"
    k1: float = real(1.5, low=0.0)
    b: float = real(0.75, low=0.0, high=1.0)
    stopwords: str | None = choice("en", STOPWORDS, nullable=True)


class BM25Index:
    """bm25s over the passages' ``"title: text"``; queries as token lists (:mod:`.tokenizer`)."""

    def __init__(self, retriever: bm25s.BM25, params: BM25Params, n_docs: int) -> None:
        self.retriever, self.params, self.n_docs = retriever, params, int(n_docs)

    @classmethod
    def build(cls, texts: Sequence[str], params: BM25Params, progress: bool = False) -> "BM25Index":
        """Tokenize and index ``texts``; with ``progress``, one hopgraph bar per stage (``bm25: tokenize``,
        ``bm25: index``) instead of bm25s's own bars."""
        retriever = bm25s.BM25(k1=params.k1, b=params.b)
        tokens = tokenize(texts, params.stopwords, progress)
        if not progress:
            retriever.index(tokens, show_progress=False)
            return cls(retriever, params, len(texts))
        from tqdm.auto import tqdm

        with tqdm(total=len(texts), desc="bm25: index", unit="passage", unit_scale=True, dynamic_ncols=True) as bar:
            retriever.index(tokens, show_progress=False)
            bar.update(len(texts))
        return cls(retriever, params, len(texts))

    def tokenize(self, texts: Sequence[str]) -> list[list[str]]:
        """Query tokens, by the same rules as the passages."""
        return tokenize(texts, self.params.stopwords)

    def topk(self, tokens: list[list[str]], k: int, allowed: np.ndarray | None = None
             ) -> tuple[np.ndarray, np.ndarray]:
        """BM25 top-``k`` (ids int64, scores float32) per tokenized query, best first, ties toward the
        lower passage id; zero-score hits are padding (-1 / -inf). ``allowed`` (bool [N]) restricts
        the result to those passages.

        Read from bm25s's precomputed score matrix over the passages that hold a query token only
        (:meth:`matching`), not over all N: bm25s's own ``retrieve`` builds an ``[N]`` score row
        per query and ``np.argpartition``-s it, which, on a row that is mostly zeros, cost 14 ms
        per query at 10⁵ passages (``bench/bench_bm25_topk.py``). The scores are bm25s's bit for
        bit (:meth:`matching`); only the order of equal scores is defined here (bm25s leaves it to
        ``argpartition``)."""
        B = len(tokens)
        ids = np.full((B, k), PAD_ID, np.int64)
        out = np.full((B, k), PAD_SCORE, np.float32)
        if B == 0 or k == 0 or self.n_docs == 0:
            return ids, out
        allowed = None if allowed is None else np.asarray(allowed, bool)
        scratch = self.scratch()
        for b, query in enumerate(tokens):
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
            ids[b, :len(order)], out[b, :len(order)] = docs[order], scores[order]
        return ids, out

    def scratch(self) -> tuple[np.ndarray, np.ndarray]:
        """The work arrays of :meth:`matching` (a zeroed float32 score row and an int64 stamp row
        over the N passages), made once per batch and left as they were found by each query."""
        return np.zeros(self.n_docs, np.float32), np.empty(self.n_docs, np.int64)

    def matching(self, tokens: list[str], scratch: tuple[np.ndarray, np.ndarray] | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
        """``(docs int64, scores float32)``: every passage holding one of the query's tokens, each
        once (in no particular order), with its BM25 score — :meth:`scores` at those passages, bit
        for bit (each known token's precomputed score added in the query's token order in float32,
        repeats counted, as bm25s sums them); the other passages score 0.

        Work: the tokens' posting lists, not N — the scores accumulate in the zeroed row of
        ``scratch`` (:meth:`scratch`; reset at the touched passages afterwards), and the distinct
        passages are found without a sort by stamping each posting entry's position into the
        stamp row: an entry is a passage's first when the stamp read back is its own."""
        posts = [p for p in (self._posting(w) for w in tokens) if p is not None]
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

    def _posting(self, token: str) -> tuple[np.ndarray, np.ndarray] | None:
        """``(docs ascending, precomputed scores float32)`` of ``token``'s column of bm25s's CSC score
        matrix; None for a token outside the vocabulary or without passages."""
        t = self.retriever.vocab_dict.get(token)
        if t is None:
            return None
        sc = self.retriever.scores
        start, end = int(sc["indptr"][t]), int(sc["indptr"][t + 1])
        if end == start:
            return None
        return np.asarray(sc["indices"][start:end]), np.asarray(sc["data"][start:end], np.float32)

    def scores(self, tokens: list[str]) -> np.ndarray:
        """BM25 score of every passage for one tokenized query (float32 [N]; zeros if no token is known)."""
        known = [w for w in tokens if w in self.retriever.vocab_dict]
        if not known:
            return np.zeros(self.n_docs, np.float32)
        return np.asarray(self.retriever.get_scores(known), np.float32)

    def scores_at(self, tokens: list[str], docs: np.ndarray) -> np.ndarray:
        """BM25 score of the passages ``docs`` (int, any shape; -1 = padding → 0) for one tokenized
        query (float32, ``docs``' shape): :meth:`scores` read at ``docs`` only, bit for bit (each
        query token's precomputed score is added in the query's token order in float32, as bm25s
        sums them), without the ``[N]`` score row (issue 14). Each token's posting list (the
        documents of its column of the CSC score matrix, ascending) is searched for the docs:
        O(|tokens| · |docs| · log df)."""
        docs = np.asarray(docs, np.int64)
        out = np.zeros(docs.shape, np.float32)
        flat, valid = docs.ravel(), docs.ravel() >= 0
        acc = out.reshape(-1)
        for w in tokens:
            posting = self._posting(w)
            if posting is None:
                continue
            post, data = posting
            pos = np.minimum(np.searchsorted(post, flat), len(post) - 1)
            hit = valid & (post[pos] == flat)
            acc += np.where(hit, data[pos], np.float32(0.0))
        return out

    def save(self, directory: Path) -> None:
        self.retriever.save(str(directory))

    @classmethod
    def load(cls, directory: Path, params: BM25Params, n_docs: int) -> "BM25Index":
        """Open a saved index (memory-mapped) and check its structure: parameters, document count,
        token ids in range of the score matrix, CSC offsets, document ids in ``[0, n_docs)``,
        finite non-negative scores (IndexFormatError naming the directory otherwise)."""
        from ..errors import IndexFormatError
        from ..storage import check_finite, check_ids, check_indptr

        retriever = bm25s.BM25.load(str(directory), mmap=True, show_progress=False)
        where = f"BM25 index {directory}"
        if (float(retriever.k1), float(retriever.b)) != (float(params.k1), float(params.b)):
            raise IndexFormatError(f"{where}: stored k1={retriever.k1}, b={retriever.b}; the manifest says "
                                   f"k1={params.k1}, b={params.b}")
        scores = retriever.scores
        if int(scores.get("num_docs", -1)) != n_docs:
            raise IndexFormatError(f"{where}: {scores.get('num_docs')} documents, the index has {n_docs}")
        data, indices = scores["data"], scores["indices"]
        n_tokens = len(scores["indptr"]) - 1
        check_indptr(scores["indptr"], n_tokens, len(indices), f"{where} indptr.csc.index.npy")
        check_ids(indices, n_docs, f"{where} indices.csc.index.npy")
        check_finite(data, f"{where} data.csc.index.npy", (len(indices),))
        if len(data) and float(np.min(data)) < 0:
            raise IndexFormatError(f"{where} data.csc.index.npy: negative BM25 scores")
        vocab = retriever.vocab_dict
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in vocab.values()) or \
                len(set(vocab.values())) != len(vocab):
            raise IndexFormatError(f"{where} vocab.index.json: token ids must be distinct integers")
        # bm25s maps the empty token to one id past the score matrix (never scored)
        check_ids(np.fromiter((v for k, v in vocab.items() if k), np.int64), n_tokens,
                  f"{where} vocab.index.json token ids")
        if "" in vocab and not 0 <= vocab[""] <= n_tokens:
            raise IndexFormatError(f"{where} vocab.index.json: bad id {vocab['']} of the empty token")
        return cls(retriever, params, n_docs)

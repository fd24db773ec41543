"""Embeddings of the extraction's topic and description texts pooled from their passage's own forward
pass (late chunking), so that no token runs through the model twice.

Every topic is a sentence of its passage and every description the sentences that mention the entity
(:mod:`hopgraph.engine.components.extraction`), so each text is a set of character ranges of the
passage's embedding text (``"title: text"``). A text's embedding is the L2-normalised mean of the last
hidden states of its tokens in the passage's pass. A text used by several passages is pooled in the
first one that uses it (the passage that created its id), so live updates equal a fresh fit. Texts with
no token inside the model's window, texts not found in their passage, and every text of an embedder
that :class:`~hopgraph.engine.embedders.packed_bert.PackedBertEncoder` cannot run (hashing, API,
callables) are embedded on their own.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .corpus import Corpus
from .extraction import Extraction, extract
from ..embedders import Embedder
from ..embedders.packed_bert import BULK_CHUNK, PackedBertEncoder
from ..errors import InputError
from ..sparse import csr_from_keys


@dataclass(frozen=True)
class TextSpans:
    """Where texts lie in the passages: request ``r`` is text ``text[r]`` (an index into the texts
    embedded), found in passage ``chunk[r]`` at the character ranges
    ``ranges[indptr[r]:indptr[r + 1]]`` (``[a, b)`` of the passage's embedding text)."""

    text: np.ndarray  # int64 [R]
    chunk: np.ndarray  # int64 [R], ascending
    indptr: np.ndarray  # int64 [R + 1]
    ranges: np.ndarray  # int64 [K, 2]

    def __len__(self) -> int:
        return len(self.text)


def text_spans(ex: Extraction, passage_texts: Sequence[str], first_text: int = 0) -> TextSpans:
    """The spans of texts ``ex.texts[first_text:]`` (request ``text`` numbers count from
    ``first_text``) in the first passage that uses each, among ``passage_texts`` (the corpus's
    embedding texts). A topic is found by ``str.find`` of its sentence, searching on from the
    previous topic of its passage; a description's ranges are those of the topics (sentences)
    that mention its state. Texts not found are left out (embedded on their own), and so is a text
    equal to its passage's embedding text (a title state's description: the passage's own row)."""
    U = len(ex.texts)
    never = np.iinfo(np.int64).max
    first = np.full(U, never, np.int64)
    np.minimum.at(first, ex.topic_text.astype(np.int64), ex.topic_chunk.astype(np.int64))
    np.minimum.at(first, ex.node_text.astype(np.int64), ex.node_chunk.astype(np.int64))
    wanted = np.flatnonzero(first[first_text:] != never) + first_text
    topic_order = np.argsort(ex.topic_chunk, kind="stable")
    topic_start = np.searchsorted(ex.topic_chunk[topic_order], np.arange(ex.n_chunks + 1))
    node_start = np.searchsorted(ex.node_chunk, np.arange(ex.n_chunks + 1))
    node_indptr, node_mentions = csr_from_keys(ex.mention_node.astype(np.int64), ex.n_nodes)
    texts, chunks, counts, ranges = [], [], [], []
    by_chunk = wanted[np.argsort(first[wanted], kind="stable")]
    bounds = np.searchsorted(first[by_chunk], np.arange(ex.n_chunks + 1))
    for c in np.unique(first[by_chunk]).tolist():
        passage = passage_texts[c]
        span: dict[int, tuple[int, int]] = {}  # topic → its range in the passage
        cursor = 0
        for e in topic_order[topic_start[c]:topic_start[c + 1]].tolist():
            sentence = ex.texts[int(ex.topic_text[e])]
            a = passage.find(sentence, cursor)
            a = passage.find(sentence) if a < 0 else a
            if a >= 0:
                span[e] = (a, a + len(sentence))
                cursor = a + len(sentence)
        of_text: dict[int, list[tuple[int, int]]] = {}
        for e, r in span.items():
            of_text.setdefault(int(ex.topic_text[e]), [r])
        for v in range(int(node_start[c]), int(node_start[c + 1])):
            t = int(ex.node_text[v])
            if t in of_text:
                continue
            topics = ex.mention_topic[node_mentions[node_indptr[v]:node_indptr[v + 1]]].tolist()
            found = sorted(span[e] for e in set(topics) if e in span)
            if found and len(found) == len(set(topics)):
                of_text[t] = found
        for t in by_chunk[bounds[c]:bounds[c + 1]].tolist():
            if t in of_text and ex.texts[t] != passage:  # a title state's description is the passage: X's row
                texts.append(t - first_text)
                chunks.append(c)
                counts.append(len(of_text[t]))
                ranges.extend(of_text[t])
    indptr = np.zeros(len(texts) + 1, np.int64)
    np.cumsum(counts, out=indptr[1:])
    return TextSpans(np.asarray(texts, np.int64), np.asarray(chunks, np.int64), indptr,
                     np.asarray(ranges, np.int64).reshape(-1, 2))


@dataclass(frozen=True)
class LateTexts:
    """Late-chunked embeddings of the requests of ``spans``: ``emb[r]`` (float32, unit) where
    ``ok[r]``; a request that is not ok had no token in the model's window (zero row)."""

    spans: TextSpans
    emb: np.ndarray
    ok: np.ndarray


def late_texts(ex: Extraction, passage_texts: Sequence[str], embedder, first_text: int = 0,
               progress: bool = False) -> LateTexts | None:
    """The late-chunked embeddings of ``ex.texts[first_text:]`` (one pass over the passages that
    first use them), or None when ``embedder`` is not a model the packed encoder runs."""
    both = _pooled(ex, passage_texts, embedder, first_text, None, progress)
    return None if both is None else both[1]


def embed_with_texts(ex: Extraction, passage_texts: Sequence[str], embedder, progress: bool = False,
                     start: int = 0, first_text: int = 0) -> tuple[np.ndarray, LateTexts] | None:
    """One pass over the passages ``start:`` giving both their embeddings (the model's own, as
    ``embedder.encode`` up to float rounding: the packed encoder is checked against it) and the
    late-chunked embeddings of ``ex.texts[first_text:]`` (request ``text`` numbers count from
    ``first_text``); None when ``embedder`` is not a model the packed encoder runs. ``Index.build``
    uses it (every passage, every text) when a pipeline it fits wants late-chunked texts, and
    ``Index.add`` for the appended passages (``start``: the first of them) and the texts the grown
    extraction adds (``first_text``: their first id, all first used by those passages), so that no
    passage runs through the model twice."""
    return _pooled(ex, passage_texts, embedder, first_text, np.arange(start, len(passage_texts)), progress,
                   "embed passages and topic/description texts")


def _pooled(ex: Extraction, passage_texts: Sequence[str], embedder, first_text: int, passages: np.ndarray | None,
            progress: bool, desc: str = "embed passages (late-chunked texts)") -> tuple[np.ndarray, LateTexts] | None:
    """:func:`pool_spans` of the spans of ``ex.texts[first_text:]`` in ``passages`` (None: those
    holding one) as ``(passage embeddings, LateTexts)``, or None when ``embedder`` is not a model the
    packed encoder runs."""
    encoder = PackedBertEncoder.for_embedder(embedder) if embedder is not None else None
    if encoder is None:
        return None
    spans = text_spans(ex, passage_texts, first_text)
    if passages is not None and len(spans) and spans.chunk[0] < (passages[0] if len(passages) else len(passage_texts)):
        raise InputError(f"late pooling: a text from id {first_text} is first used by passage {spans.chunk[0]}, "
                         f"before the passages pooled (from {passages[0]})")
    X, emb, ok = pool_spans(encoder, passage_texts, spans, passages, progress=progress, desc=desc)
    return X, LateTexts(spans, emb, ok)


def pool_spans(encoder: PackedBertEncoder, passage_texts: Sequence[str], spans: TextSpans,
               passages: np.ndarray | None = None, chunk_passages: int = BULK_CHUNK, progress: bool = False,
               desc: str = "embed passages (late-chunked texts)") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Late-chunked embeddings of the requests of ``spans`` found in ``passages`` (ascending passage
    numbers; default: every passage holding a request) with ``encoder``, from the passages' own
    forward pass: ``(passage embeddings [len(passages), d], request embeddings [R', d] float32,
    ok [R'] bool)``, the R' requests those of ``passages`` in request order (all of ``spans`` by
    default; a contiguous range of requests for a contiguous range of passages). The passages run
    ``chunk_passages`` at a time (by default as many as
    :func:`~hopgraph.engine.embedders.packed_bert.encode_bulk` runs), in order of length (few
    distinct token lengths a pass)."""
    from tqdm.auto import tqdm

    passages = np.unique(spans.chunk) if passages is None else np.asarray(passages, np.int64)
    first = np.searchsorted(spans.chunk, passages)
    last = np.searchsorted(spans.chunk, passages, side="right")
    row = np.zeros(len(passages) + 1, np.int64)  # passage i's requests are rows row[i]:row[i + 1] of the output
    np.cumsum(last - first, out=row[1:])
    out = np.zeros((int(row[-1]), encoder.dim), np.float32)
    ok = np.zeros(len(out), bool)
    X = np.zeros((len(passages), encoder.dim), np.float32)
    order = np.argsort([len(passage_texts[c]) for c in passages.tolist()], kind="stable")
    for lo in tqdm(range(0, len(order), chunk_passages), desc=desc, disable=not progress, unit="chunk"):
        part = order[lo:lo + chunk_passages]
        requests = np.concatenate([np.arange(first[i], last[i]) for i in part])
        rows = np.concatenate([np.arange(row[i], row[i + 1]) for i in part])
        local = {int(passages[i]): j for j, i in enumerate(part.tolist())}
        X[part], emb, good = encoder.encode_spans(
            [passage_texts[int(passages[i])] for i in part],
            [(local[int(spans.chunk[r])], spans.ranges[spans.indptr[r]:spans.indptr[r + 1]]) for r in requests])
        out[rows], ok[rows] = emb, good
    return X, out, ok


def embed_corpus(corpus: Corpus, embedder: Embedder, pooled: Sequence[tuple[bool, bool]], batch_size: int = 64,
                 progress: bool = False) -> tuple[np.ndarray, tuple[tuple[bool, bool], Extraction, LateTexts | None] | None]:
    """The passages' embeddings X and, when ``pooled`` names extraction options (``title_entities``,
    ``numbers``) whose texts a pipeline late-chunks, that extraction with its texts pooled in the same
    forward pass (:func:`embed_with_texts`: no passage runs through the model twice; ``None`` texts
    when the embedder cannot give token states). Returns ``(X, (options, extraction, texts) | None)``."""
    if not pooled:
        return embedder.encode(corpus.embedding_texts(), batch_size=batch_size, progress=progress), None
    key = pooled[0]
    ex = extract(corpus, *key, progress=progress)
    both = embed_with_texts(ex, corpus.embedding_texts(), embedder, progress=progress)
    if both is not None:
        return both[0], (key, ex, both[1])
    return embedder.encode(corpus.embedding_texts(), batch_size=batch_size, progress=progress), (key, ex, None)

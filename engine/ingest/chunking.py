"""Chunking long documents into passages, and the embedder's length limit.

:func:`chunk_corpus` splits every document into windows of ``tokens`` tokens, consecutive
windows sharing ``overlap`` tokens. A token is a **whitespace-separated word** (``\\S+``): it
is independent of the embedder, so an index's passages do not change with the embedder, and
it is what people count when they say "300-word chunks". A passage's text is the span of the
original text from its first to its last word (the document's own spacing and line breaks are
kept). Passage ``k`` (from 0) of document ``DOCID`` has id ``DOCID#k`` — every document, short
ones included (one passage ``DOCID#0``), so the mapping is uniform — the document's title, and
the document's metadata plus ``{"document": DOCID, "chunk": k}``: the passage→document map,
stored with the index like all metadata (:func:`document_of`).

Wordpiece models see more tokens than words (MiniLM: about 1.3 per English word, more for
numbers and rare names) and silently truncate beyond their maximum (all-MiniLM-L6-v2: 256 word
pieces). :func:`check_passage_lengths` counts each passage's word pieces with the embedder's
own tokenizer when it exposes one (a sentence-transformers ``model`` with ``max_seq_length``
and ``tokenizer``), else estimates words × 1.3, and :func:`warn_long_passages` warns with a
:class:`PassageLengthWarning` naming how many passages are cut and the longest.
"""
from __future__ import annotations

import json
import math
import re
import warnings
from typing import Any, Callable, Sequence

import numpy as np

from ..components.corpus import Corpus
from ..errors import InputError
from ..ranking import PAD_ID, PAD_SCORE

#: word pieces per whitespace word assumed when the embedder has no tokenizer
WORDPIECES_PER_WORD = 1.3
_WORD = re.compile(r"\S+")


class PassageLengthWarning(UserWarning):
    """Passages longer than the embedder's maximum input: their ends are not embedded."""


def check_chunking(tokens: Any, overlap: Any) -> tuple[int, int]:
    """Validate ``tokens`` (a positive integer) and ``overlap`` (0 <= overlap < tokens)."""
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise InputError(f"chunk tokens must be a positive integer, got {tokens!r}")
    if isinstance(overlap, bool) or not isinstance(overlap, int) or not 0 <= overlap < tokens:
        raise InputError(f"chunk overlap must be an integer with 0 <= overlap < chunk tokens ({tokens}), "
                         f"got {overlap!r}")
    return tokens, overlap


def split_text(text: str, tokens: int, overlap: int = 0) -> list[str]:
    """``text`` as windows of ``tokens`` whitespace words, each starting ``tokens - overlap`` words
    after the previous one, the last one ending at the last word (no window lies inside the
    previous one). Each window is the original text from its first to its last word."""
    tokens, overlap = check_chunking(tokens, overlap)
    spans = [m.span() for m in _WORD.finditer(text)]
    if not spans:
        return []
    out = []
    for start in range(0, len(spans), tokens - overlap):
        stop = min(start + tokens, len(spans))
        out.append(text[spans[start][0]:spans[stop - 1][1]])
        if stop == len(spans):
            break
    return out


def chunk_corpus(corpus: Corpus, tokens: int, overlap: int = 0) -> Corpus:
    """Split each document of ``corpus`` into passages of at most ``tokens`` words, ``overlap``
    words shared by consecutive passages of a document (see the module docstring for ids, titles
    and the ``{"document", "chunk"}`` metadata; these two keys replace any of the same name in
    the document's metadata). The result is a new, validated corpus; its ids are unique because
    the document ids are (``DOCID#k`` splits at the last ``#`` into the document and k)."""
    tokens, overlap = check_chunking(tokens, overlap)
    ids, titles, texts, meta = [], [], [], []
    for row in range(len(corpus)):
        doc, title = corpus.ids[row], corpus.titles[row]
        base = corpus.meta(row)
        for k, text in enumerate(split_text(corpus.texts[row], tokens, overlap)):
            ids.append(f"{doc}#{k}"), titles.append(title), texts.append(text)
            meta.append(json.dumps({**base, "document": doc, "chunk": k}, ensure_ascii=False, sort_keys=True))
    return Corpus(tuple(ids), tuple(titles), tuple(texts), corpus.source, tuple(meta))


def document_of(corpus: Corpus, row: int) -> str:
    """The document of passage ``row``: its ``"document"`` metadata (set by :func:`chunk_corpus`),
    else its own id (a corpus that was not chunked: every passage is its own document)."""
    raw = corpus.metadata[row]
    if raw and '"document"' in raw:
        doc = json.loads(raw).get("document")
        if isinstance(doc, (str, int)) and not isinstance(doc, bool):
            return str(doc)
    return corpus.ids[row]


def embedder_limit(embedder: Any) -> tuple[int | None, Callable[[list[str]], list[int]] | None]:
    """``(maximum input length in word pieces, counter)`` of an embedder: a sentence-transformers
    ``embedder.model`` gives ``max_seq_length`` and its tokenizer (counts include the special
    tokens); ``(None, None)`` when the embedder states no limit."""
    model = getattr(embedder, "model", None)
    limit = getattr(model, "max_seq_length", None) if model is not None else None
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        return None, None
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is None or not callable(tokenizer):
        return limit, None

    def count(texts: list[str]) -> list[int]:
        enc = tokenizer(texts, add_special_tokens=True, truncation=False, verbose=False)
        return [len(ids) for ids in enc["input_ids"]]

    return limit, count


def check_passage_lengths(texts: Sequence[str], limit: int,
                          count: Callable[[list[str]], list[int]] | None = None) -> tuple[int, int]:
    """``(number of texts longer than limit word pieces, the longest length)``: counted with
    ``count`` (a tokenizer) when given, else estimated as ceil(words × 1.3). Only texts that could
    exceed the limit are tokenized (a word piece covers at least one non-space character)."""
    over, longest = 0, 0
    if count is None:
        for t in texts:
            n = math.ceil(len(_WORD.findall(t)) * WORDPIECES_PER_WORD)
            over += n > limit
            longest = max(longest, n)
        return over, longest
    candidates = [t for t in texts if len(t) + 2 > limit]
    for lo in range(0, len(candidates), 256):
        for n in count(candidates[lo:lo + 256]):
            over += n > limit
            longest = max(longest, n)
    return over, longest


def warn_long_passages(corpus: Corpus, embedder: Any) -> str | None:
    """Warn (:class:`PassageLengthWarning`) when passages of ``corpus`` as embedded (``"title:
    text"``) exceed ``embedder``'s maximum input length; returns the message (None if none do or
    the embedder states no limit)."""
    limit, count = embedder_limit(embedder)
    if limit is None:
        return None
    over, longest = 0, 0
    for lo in range(0, len(corpus), 4096):
        o, n = check_passage_lengths(corpus.embedding_texts(lo, lo + 4096), limit, count)
        over, longest = over + o, max(longest, n)
    if not over:
        return None
    how = "word pieces" if count is not None else f"word pieces (estimated as words × {WORDPIECES_PER_WORD})"
    message = (f"{over} of {len(corpus)} passages exceed the embedder's maximum input of {limit} word pieces "
               f"(longest: {longest} {how}); the embedder ignores the rest of each — chunk them "
               f"(--chunk-tokens / chunk_tokens=, e.g. {max(16, int(limit / WORDPIECES_PER_WORD) - 20)})")
    warnings.warn(message, PassageLengthWarning, stacklevel=3)
    return message


def group_by_document(search: Callable[[int], tuple[np.ndarray, np.ndarray]], corpus: Corpus, k: int
                      ) -> tuple[np.ndarray, np.ndarray]:
    """The top-``k`` documents per query from a passage search: ``search(depth)`` returns the top
    ``depth`` passages ``(rows int64 [B, depth], scores [B, depth])`` (``-1`` padded); each
    document (:func:`document_of`) keeps its first (best) passage. The search is repeated with
    twice the depth until every query has ``k`` documents, its pipeline returns no more
    passages, or the depth covers the corpus. Returns ``(rows int64 [B, k], scores float32
    [B, k])``, padded with ``-1`` / ``-inf``."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InputError(f"k must be a positive integer, got {k!r}")
    n = len(corpus)
    depth = min(n, max(4 * k, k + 16))
    docs: dict[int, str] = {}
    while True:
        rows, scores = search(depth)
        rows, scores = np.asarray(rows), np.asarray(scores)
        out_rows = np.full((len(rows), k), PAD_ID, np.int64)
        out_scores = np.full((len(rows), k), PAD_SCORE, np.float32)
        complete = True
        for b, (r, s) in enumerate(zip(rows, scores)):
            seen: set[str] = set()
            for j, sc in zip(r.tolist(), s.tolist()):
                if j < 0 or len(seen) == k:
                    continue
                doc = docs.get(j)
                if doc is None:
                    doc = docs[j] = document_of(corpus, j)
                if doc not in seen:
                    out_rows[b, len(seen)], out_scores[b, len(seen)] = j, sc
                    seen.add(doc)
            exhausted = int((r >= 0).sum()) < depth
            complete &= len(seen) == k or exhausted
        if complete or depth >= n:
            return out_rows, out_scores
        depth = min(n, 2 * depth)

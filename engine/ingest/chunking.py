"""Chunking long documents into passages, and the embedder's length limit.

:func:`chunk_corpus` splits every document into passages of at most ``tokens`` tokens, consecutive
passages of a document sharing up to ``overlap`` tokens. Tokens are the **embedder's own**
(:func:`token_counter`: a Hugging Face tokenizer's word pieces, special tokens not counted), or
whitespace-separated words for an embedder without a tokenizer (hashing, callables, OpenAI). The
split (``semantic_text_splitter``) takes the largest pieces that fit, preferring, in order,
paragraph breaks, line breaks, sentence ends, then words, so a passage ends at a sentence end
whenever one fits; leading and trailing whitespace is trimmed. Passage ``k`` (from 0) of document
``DOCID`` has id ``DOCID#k`` — every document, short ones included (one passage ``DOCID#0``), so
the mapping is uniform —, the document's title, and the document's metadata plus ``{"document":
DOCID, "chunk": k, "start_char": s, "end_char": e}``: the passage's text is exactly
``document_text[s:e]`` (character offsets, as Python slices the document's text), and the
passage→document map is stored with the index like all metadata (:func:`document_of`; a search
:class:`~hopgraph.index.Hit` reads them as ``document_id``, ``start_char``, ``end_char``).

Models silently truncate inputs beyond their maximum (all-MiniLM-L6-v2: 256 word pieces, the two
special tokens included). :func:`check_passage_lengths` counts each passage as embedded (``"title:
text"``) with the embedder's own tokenizer when it exposes one (a sentence-transformers ``model``
with ``max_seq_length`` and ``tokenizer``), else estimates words × 1.3, and
:func:`warn_long_passages` warns with a :class:`PassageLengthWarning` naming how many passages are
cut, the longest, and the chunk size that fits (:func:`fitting_chunk_tokens`).
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
from ..ranking import PAD_ID, PAD_SCORE, check_k

#: word pieces per whitespace word assumed when the embedder has no tokenizer
WORDPIECES_PER_WORD = 1.3
#: special tokens a BERT-type model adds to every input ([CLS], [SEP])
SPECIAL_TOKENS = 2
#: the smallest chunk size the length warning suggests
MIN_SUGGESTED_TOKENS = 16
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


def _hf_tokenizer(embedder: Any) -> Any:
    """The embedder's ``tokenizers.Tokenizer`` (its ``tokenizer``, or the one behind its
    sentence-transformers model's fast tokenizer), as a copy without padding or truncation; or None."""
    from tokenizers import Tokenizer

    own = getattr(type(embedder), "tokenizer", None)
    backend = embedder.tokenizer if own is not None else None
    if not isinstance(backend, Tokenizer):
        model = getattr(embedder, "model", None)
        backend = getattr(getattr(model, "tokenizer", None), "backend_tokenizer", None)
    if backend is None:
        return None

    tok = Tokenizer.from_str(backend.to_str())
    tok.no_padding()
    tok.no_truncation()
    return tok


def token_counter(embedder: Any = None) -> tuple[Any, str]:
    """``(tokenizer, unit)``: the embedder's ``tokenizers.Tokenizer`` and ``"tokens"``, or, for an
    embedder without one (or None), a whitespace-word counter and ``"words"``."""
    tok = _hf_tokenizer(embedder) if embedder is not None else None
    if tok is not None:
        return tok, "tokens"
    return (lambda text: len(_WORD.findall(text))), "words"


def splitter(tokens: int, overlap: int = 0, embedder: Any = None) -> Any:
    """A ``semantic_text_splitter.TextSplitter`` of ``tokens``-token chunks sharing up to ``overlap``
    tokens, counting with :func:`token_counter`."""
    from semantic_text_splitter import TextSplitter

    tokens, overlap = check_chunking(tokens, overlap)
    counter, unit = token_counter(embedder)
    if unit == "tokens":
        return TextSplitter.from_huggingface_tokenizer(counter, tokens, overlap=overlap)
    return TextSplitter.from_callback(counter, tokens, overlap=overlap)


def chunk_spans(text: str, split: Any) -> list[tuple[int, int]]:
    """The ``(start, end)`` character spans of ``text``'s chunks by ``split`` (:func:`splitter`),
    in order: ``text[start:end]`` is each chunk."""
    out = []
    for start, chunk in split.chunk_indices(text):
        end = start + len(chunk)
        if text[start:end] != chunk:  # the splitter's offsets are characters; a mismatch is a bug there
            raise RuntimeError(f"chunk offsets do not slice the text at {start}: {chunk[:40]!r}")
        out.append((start, end))
    return out


def split_text(text: str, tokens: int, overlap: int = 0, embedder: Any = None) -> list[str]:
    """``text`` as chunks of at most ``tokens`` tokens of ``embedder`` (whitespace words without one),
    consecutive chunks sharing up to ``overlap`` tokens (see the module docstring)."""
    return [text[a:b] for a, b in chunk_spans(text, splitter(tokens, overlap, embedder))]


def chunk_corpus(corpus: Corpus, tokens: int, overlap: int = 0, embedder: Any = None) -> Corpus:
    """Split each document of ``corpus`` into passages of at most ``tokens`` tokens of ``embedder``
    (whitespace words without one), ``overlap`` tokens shared by consecutive passages of a document
    (see the module docstring for ids, titles and the ``{"document", "chunk", "start_char",
    "end_char"}`` metadata; these keys replace any of the same name in the document's metadata).
    The result is a new, validated corpus; its ids are unique because the document ids are
    (``DOCID#k`` splits at the last ``#`` into the document and k)."""
    split = splitter(tokens, overlap, embedder)
    ids, titles, texts, meta = [], [], [], []
    for row in range(len(corpus)):
        doc, title, text = corpus.ids[row], corpus.titles[row], corpus.texts[row]
        base = corpus.meta(row)
        for k, (a, b) in enumerate(chunk_spans(text, split)):
            ids.append(f"{doc}#{k}"), titles.append(title), texts.append(text[a:b])
            meta.append(json.dumps({**base, "document": doc, "chunk": k, "start_char": a, "end_char": b},
                                   ensure_ascii=False, sort_keys=True))
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
    """``(maximum input length in tokens, counter)`` of an embedder: its own ``max_seq_length`` and
    ``tokenizer`` (a ``tokenizers.Tokenizer``), else a sentence-transformers ``embedder.model``'s
    ``max_seq_length`` and tokenizer (counts include the special tokens); ``(None, None)`` when the
    embedder states no limit."""
    from tokenizers import Tokenizer

    limit = getattr(embedder, "max_seq_length", None)
    if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 and \
            getattr(type(embedder), "tokenizer", None) is not None and isinstance(embedder.tokenizer, Tokenizer):
        tok = embedder.tokenizer

        def count_own(texts: list[str]) -> list[int]:
            return [len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=True)]

        return limit, count_own
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


def fitting_chunk_tokens(corpus: Corpus, limit: int, count: Callable[[list[str]], list[int]] | None) -> int:
    """The largest ``chunk_tokens`` whose passages fit ``limit`` once embedded as ``"title: text"``
    with the special tokens: ``limit`` less :data:`SPECIAL_TOKENS` and the longest title's ``"title:
    "`` (counted as :func:`check_passage_lengths` counts; in words ÷ 1.3 without a tokenizer), at
    least :data:`MIN_SUGGESTED_TOKENS`."""
    titles = sorted({t for t in corpus.titles if t}, key=len)[-64:]  # the longest few: counting all is slow
    if count is None:
        title = max((math.ceil(len(_WORD.findall(t)) * WORDPIECES_PER_WORD) + 1 for t in titles), default=0)
        return max(MIN_SUGGESTED_TOKENS, int((limit - SPECIAL_TOKENS - title) / WORDPIECES_PER_WORD))
    title = max((n - SPECIAL_TOKENS for n in count([f"{t}:" for t in titles])), default=0) if titles else 0
    return max(MIN_SUGGESTED_TOKENS, limit - SPECIAL_TOKENS - title)


def warn_long_passages(corpus: Corpus, embedder: Any, chunk_tokens: int | None = None) -> str | None:
    """Warn (:class:`PassageLengthWarning`) when passages of ``corpus`` as embedded (``"title:
    text"``) exceed ``embedder``'s maximum input length; returns the message (None if none do or
    the embedder states no limit). The message names the chunk size that fits
    (:func:`fitting_chunk_tokens`) and, when ``chunk_tokens`` (the size in use) is larger, says so."""
    limit, count = embedder_limit(embedder)
    if limit is None:
        return None
    over, longest = 0, 0
    for lo in range(0, len(corpus), 4096):
        o, n = check_passage_lengths(corpus.embedding_texts(lo, lo + 4096), limit, count)
        over, longest = over + o, max(longest, n)
    if not over:
        return None
    fits = fitting_chunk_tokens(corpus, limit, count)
    unit = "tokens" if count is not None else f"tokens (estimated as words × {WORDPIECES_PER_WORD})"
    advice = (f"chunk_tokens={chunk_tokens} is more than fits: use --chunk-tokens / chunk_tokens= at most {fits}"
              if chunk_tokens is not None and chunk_tokens > fits else
              f"chunk them (--chunk-tokens / chunk_tokens= at most {fits})")
    message = (f"{over} of {len(corpus)} passages exceed the embedder's maximum input of {limit} {unit} "
               f"(longest: {longest}, title and special tokens included); the embedder ignores the rest of "
               f"each — {advice}")
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
    k = check_k(k)
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

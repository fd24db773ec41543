"""The lexical tokenizer of the BM25 component (bm25s's rules: lower case, words of two or
more letters, stop words removed), in one place so that passages and questions are
tokenized alike and each question batch is tokenized once."""
from __future__ import annotations

import itertools
from typing import Any, Sequence

import bm25s
import numpy as np

#: stop-word lists bm25s ships (``None``: keep every word)
STOPWORDS = ("en", "english", "en_plus", "de", "nl", "fr", "es", "pt", "it", "ru", "sv", "no", "zh", "tr", "ko",
             "da")


#: texts per bm25s.tokenize call when a progress bar is shown (each text is tokenized on its own, so
#: chunking changes nothing but how often the bar moves)
PROGRESS_CHUNK = 4096


def tokenize(texts: Sequence[str], stopwords: str | None = "en", progress: bool = False) -> list[list[str]]:
    """Each text as its list of tokens (strings, not vocabulary ids).

    With ``progress``, one hopgraph bar named ``bm25: tokenize`` (bm25s's own bars stay off)."""
    if not len(texts):
        return []
    texts = list(texts)
    if not progress:
        return bm25s.tokenize(texts, stopwords=stopwords or [], return_ids=False, show_progress=False)
    from tqdm.auto import tqdm

    out: list[list[str]] = []
    with tqdm(total=len(texts), desc="bm25: tokenize", unit="passage", unit_scale=True, dynamic_ncols=True) as bar:
        for lo in range(0, len(texts), PROGRESS_CHUNK):
            chunk = texts[lo:lo + PROGRESS_CHUNK]
            out.extend(bm25s.tokenize(chunk, stopwords=stopwords or [], return_ids=False, show_progress=False))
            bar.update(len(chunk))
    return out


def tokenize_ids(texts: Sequence[str], stopwords: str | None = "en", bar: Any = None
                 ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The tokens of ``texts`` (:func:`tokenize`'s) as ids into a vocabulary: ``(ids int64 [tokens],
    tokens per text int64 [n], vocabulary)``, the ids of text i being ``ids[sum(lens[:i]):][:lens[i]]``.
    Tokenized by bm25s in chunks (its own vocabulary each, joined here); ``bar`` (a tqdm bar or None)
    counts the texts."""
    texts = list(texts)
    vocab: dict[str, int] = {}
    ids_parts, lens_parts = [], []
    for lo in range(0, len(texts), PROGRESS_CHUNK):
        chunk = texts[lo:lo + PROGRESS_CHUNK]
        tok = bm25s.tokenize(chunk, stopwords=stopwords or [], return_ids=True, show_progress=False)
        local = tok.vocab
        remap = np.empty(len(local), np.int64)
        for word, i in local.items():
            remap[i] = vocab.setdefault(word, len(vocab))
        lens = np.fromiter((len(d) for d in tok.ids), np.int64, len(chunk))
        flat = np.fromiter(itertools.chain.from_iterable(tok.ids), np.int64, int(lens.sum()))
        ids_parts.append(remap[flat])
        lens_parts.append(lens)
        if bar is not None:
            bar.update(len(chunk))
    if not ids_parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), []
    return np.concatenate(ids_parts), np.concatenate(lens_parts), list(vocab)

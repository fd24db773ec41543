"""The lexical tokenizer of the BM25 component (bm25s's rules: lower case, words of two or
more letters, stop words removed), in one place so that passages and questions are
tokenized alike and each question batch is tokenized once."""
from __future__ import annotations

from typing import Sequence

import bm25s

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

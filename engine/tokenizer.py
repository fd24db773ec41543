"""The lexical tokenizer of the BM25 component (bm25s's rules: lower case, words of two or
more letters, stop words removed), in one place so that passages and questions are
tokenized alike and each question batch is tokenized once."""
from __future__ import annotations

from typing import Sequence

import bm25s

#: stop-word lists bm25s ships (``None``: keep every word)
STOPWORDS = ("en", "english", "en_plus", "de", "nl", "fr", "es", "pt", "it", "ru", "sv", "no", "zh", "tr", "ko",
             "da")


def tokenize(texts: Sequence[str], stopwords: str | None = "en", progress: bool = False) -> list[list[str]]:
    """Each text as its list of tokens (strings, not vocabulary ids)."""
    if not len(texts):
        return []
    return bm25s.tokenize(list(texts), stopwords=stopwords or [], return_ids=False, show_progress=progress)

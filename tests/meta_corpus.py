"""A corpus with metadata objects and ids holding '/', '#', '?' and spaces (the text and
metadata tests of the index, CLI, server and clients share it)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hopgraph import Corpus


def meta_id(i: int) -> str:
    """Passage ``i``'s id: path-like, with characters a URL must encode."""
    return f"wiki/doc {i}#p?{i % 3}"


def meta_of(i: int, pid: str) -> dict[str, Any]:
    """Passage ``i``'s expected metadata: its ``metadata`` object merged with the extra field ``lang``."""
    return {"url": f"https://example.org/{pid}", "n": i, "tags": ["t", str(i)], "lang": "en", "ü": None}


def write_meta_corpus(demo_corpus: Corpus, path: Path) -> Path:
    """The demo corpus as JSON lines, each record with a ``metadata`` object and one extra field."""
    with open(path, "w", encoding="utf-8") as f:
        for i, (title, text) in enumerate(zip(demo_corpus.titles, demo_corpus.texts)):
            meta = {k: v for k, v in meta_of(i, meta_id(i)).items() if k != "lang"}
            f.write(json.dumps({"id": meta_id(i), "title": title, "text": text, "lang": "en",
                                "metadata": meta}, ensure_ascii=False) + "\n")
    return path

"""The title mention graph M of a corpus: an edge s → j when the text of passage s mentions the title
of passage j ≠ s.

A mention is a word n-gram (n ≤ :data:`MAX_TITLE_WORDS`) of φ(text(s)) equal to φ(title(j)) or to φ
of the title without a trailing parenthesis (``"Bethel University (Minnesota)"`` →
``"bethel university"``), φ being the extraction's canonical name
(:func:`hopgraph.engine.components.extraction.canonical_name`). Zero-token and sparse; built once per
index (:meth:`hopgraph.engine.components.shared.Components.title_mentions`, linear in the corpus
text), saved with the components and memory-mapped on load. Its reader is the title bridge
(:mod:`hopgraph.engine.pipelines.title_bridge`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from .extraction import canonical_name
from ..storage import RowReader

#: the longest title (in canonical words) that is looked for in a passage text
MAX_TITLE_WORDS = 8
#: a trailing parenthesis of a title (a Wikipedia disambiguation), dropped for the second form
_PAREN = re.compile(r"\s*\([^()]*\)\s*$")


def title_forms(title: str) -> set[str]:
    """The canonical forms a mention of ``title`` may take: φ(title) and φ without a trailing
    parenthesis; empty forms dropped."""
    return {f for f in (canonical_name(title), canonical_name(_PAREN.sub("", title))) if f}


@dataclass(frozen=True)
class TitleMentions:
    """The title mention graph M as CSR: row s lists (sorted) the passages whose title passage s
    mentions (``indptr`` int64 [N + 1], ``indices`` int64 [nnz])."""

    indptr: np.ndarray
    indices: np.ndarray

    @property
    def n_chunks(self) -> int:
        return len(self.indptr) - 1

    def row(self, s: int) -> np.ndarray:
        """Row ``s`` of M (read as :meth:`rows` reads)."""
        with RowReader(self.indices) as read:
            return self._row(read, s)

    def rows(self, seeds: Iterable[int]) -> np.ndarray:
        """The sorted distinct passages the titles of ``seeds`` mention (the union of their rows). A
        memory-mapped M (a loaded index) is read with plain reads (:class:`~.storage.RowReader`):
        through the mapping, the rows read stayed in the resident set (issue 14: 0.3 GB at 10⁶
        generated passages, whose rows hold thousands of entries)."""
        with RowReader(self.indices) as read:
            parts = [self._row(read, s) for s in seeds]
        return np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int64)

    def _row(self, read: RowReader, s: int) -> np.ndarray:
        return read(int(self.indptr[s]), int(self.indptr[s + 1]))

    @classmethod
    def build(cls, titles: Sequence[str], texts: Sequence[str]) -> "TitleMentions":
        """M of a corpus (module docstring): every word n-gram of φ(text) looked up in the table of
        title forms."""
        vocab: dict[str, list[int]] = {}
        for j, t in enumerate(titles):
            for form in title_forms(t):
                vocab.setdefault(form, []).append(j)
        longest = min(MAX_TITLE_WORDS, max((len(f.split()) for f in vocab), default=0))
        indptr = np.zeros(len(texts) + 1, np.int64)
        rows: list[np.ndarray] = []
        for s, text in enumerate(texts):
            words = canonical_name(text).split()
            hit: set[int] = set()
            for n in range(1, longest + 1):
                for a in range(len(words) - n + 1):
                    found = vocab.get(" ".join(words[a:a + n]))
                    if found:
                        hit.update(found)
            hit.discard(s)
            rows.append(np.asarray(sorted(hit), np.int64))
            indptr[s + 1] = indptr[s] + len(hit)
        indices = np.concatenate(rows) if rows else np.zeros(0, np.int64)
        return cls(indptr, indices)

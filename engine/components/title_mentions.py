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

from ...kernels.csr import CSR
from .extraction import canonical_name
from ..sparse import unit_weights
from ..storage import RowReader, check_ids, check_indptr

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
    """The title mention graph M as an unweighted :class:`CSR` ``[N, N]``: row s lists (sorted) the
    passages whose title passage s mentions (int64 ``indices``, unit weights)."""

    graph: CSR

    #: the arrays :meth:`arrays` returns and :meth:`from_arrays` reads
    ARRAY_FILES = ("indptr", "indices")

    @property
    def n_chunks(self) -> int:
        return self.graph.n_rows

    def row(self, s: int) -> np.ndarray:
        """Row ``s`` of M (read as :meth:`rows` reads)."""
        with RowReader(self.graph.indices) as read:
            return self._row(read, s)

    def rows(self, seeds: Iterable[int]) -> np.ndarray:
        """The sorted distinct passages the titles of ``seeds`` mention (the union of their rows). A
        memory-mapped M (a loaded index) is read with plain reads (:class:`~.storage.RowReader`), so
        the rows read do not stay in the resident set."""
        with RowReader(self.graph.indices) as read:
            parts = [self._row(read, s) for s in seeds]
        return np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int64)

    def _row(self, read: RowReader, s: int) -> np.ndarray:
        return read(int(self.graph.indptr[s]), int(self.graph.indptr[s + 1]))

    @classmethod
    def from_indices(cls, indptr: np.ndarray, indices: np.ndarray) -> "TitleMentions":
        """M of ``len(indptr) - 1`` passages from its row offsets and sorted rows (not checked)."""
        return cls(CSR(indptr, indices, unit_weights(len(indices)), len(indptr) - 1))

    def arrays(self) -> dict[str, np.ndarray]:
        """What an index stores of M: ``indptr`` int64 [N + 1] and ``indices`` int64 [nnz]."""
        return {"indptr": self.graph.indptr, "indices": self.graph.indices}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], n_chunks: int, where: str) -> "TitleMentions":
        """The stored :meth:`arrays` of an index of ``n_chunks`` passages, checked (ids in range, row
        offsets from 0 to the entry count; IndexFormatError naming the file) and kept as they are (a
        memory-mapped ``indices`` stays mapped)."""
        indices = check_ids(arrays["indices"], n_chunks, f"{where}/indices.npy")
        indptr = check_indptr(arrays["indptr"], n_chunks, len(indices), f"{where}/indptr.npy")
        return cls.from_indices(indptr, arrays["indices"])

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
        return cls.from_indices(indptr, indices)

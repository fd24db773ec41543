"""The title mention graph M of a corpus: an edge s → j when the text of passage s mentions the title
of passage j ≠ s.

A mention is a word n-gram (n ≤ :data:`MAX_TITLE_WORDS`) of φ(text(s)) equal to φ(title(j)) or to φ
of the title without a trailing parenthesis (``"Bethel University (Minnesota)"`` →
``"bethel university"``), φ being the extraction's canonical name
(:func:`hopgraph.engine.components.extraction.canonical_name`). Zero-token and sparse; built once per
index (:meth:`hopgraph.engine.components.shared.Components.title_mentions`, linear in the corpus
text), saved with the components and memory-mapped on load. Its reader is the title bridge
(:mod:`hopgraph.engine.pipelines.title_bridge`).

Live indexes: appended passages get their rows (against every title, old and new:
:meth:`TitleMentions.extended`); a stored row is not rewritten when a later passage's title appears
in its text. Each row records its *horizon*, the number of passages whose titles it was computed
against, and :meth:`TitleMentions.rows` adds the mentions of later titles when a row is read (the
row's text against the forms of the titles from its horizon on), so every read equals the row of M
built from scratch. A segment stores its passages' rows and horizons only.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
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
    #: per row, the passages whose titles it was computed against (int64 [N]; None: all N)
    horizon: np.ndarray | None = None
    #: the corpus (titles and texts) read for rows whose horizon is below N
    corpus: object = field(default=None, compare=False, repr=False)
    _late: dict = field(default_factory=dict, compare=False, repr=False)

    #: the arrays :meth:`arrays` returns and :meth:`from_arrays` reads
    ARRAY_FILES = ("indptr", "indices")
    #: the arrays of a segment's rows (:meth:`tail_arrays`)
    TAIL_FILES = ("indptr", "indices", "horizon")

    @property
    def n_chunks(self) -> int:
        return self.graph.n_rows

    def row(self, s: int) -> np.ndarray:
        """Row ``s`` of M (read as :meth:`rows` reads)."""
        with RowReader(self.graph.indices) as read:
            return np.unique(self._row(read, s))

    def rows(self, seeds: Iterable[int]) -> np.ndarray:
        """The sorted distinct passages the titles of ``seeds`` mention (the union of their rows). A
        memory-mapped M (a loaded index) is read with plain reads (:class:`~.storage.RowReader`), so
        the rows read do not stay in the resident set. A row whose horizon is below N gets the
        mentions of the later titles (module docstring)."""
        with RowReader(self.graph.indices) as read:
            parts = [self._row(read, s) for s in seeds]
        return np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int64)

    def _row(self, read: RowReader, s: int) -> np.ndarray:
        stored = read(int(self.graph.indptr[s]), int(self.graph.indptr[s + 1]))
        if self.horizon is None or int(self.horizon[s]) >= self.n_chunks:
            return stored
        return np.concatenate([stored, self._late_mentions(s, int(self.horizon[s]))])

    def _late_mentions(self, s: int, horizon: int) -> np.ndarray:
        """The passages ``j >= horizon``, ``j != s``, whose title passage ``s`` mentions."""
        low = int(np.min(self.horizon))
        if self._late.get("low") != low or self._late.get("n") != self.n_chunks:
            titles = self.corpus.titles[low:self.n_chunks]
            self._late.update(low=low, n=self.n_chunks, vocab=title_vocabulary(titles, low))
        hit = [j for j in mentioned(self.corpus.texts[s], self._late["vocab"]) if j >= horizon and j != s]
        return np.asarray(sorted(hit), np.int64)

    def extended(self, corpus, start: int) -> "TitleMentions":
        """M of ``corpus``, whose passages ``[start, N)`` were appended to the corpus of this M: their
        rows (against every title), horizon N; the stored rows are kept (module docstring)."""
        n = len(corpus)
        vocab = title_vocabulary(corpus.titles)
        rows = [mentioned(corpus.texts[s], vocab, s) for s in range(start, n)]
        indptr = np.concatenate([np.asarray(self.graph.indptr, np.int64),
                                 int(self.graph.indptr[-1]) + np.cumsum([len(r) for r in rows], dtype=np.int64)])
        indices = np.concatenate([np.asarray(self.graph.indices, np.int64)] +
                                 [np.asarray(sorted(r), np.int64) for r in rows])
        horizon = np.concatenate([self.horizons(), np.full(n - start, n, np.int64)])
        return TitleMentions(CSR(indptr, indices, unit_weights(len(indices)), n), horizon, corpus)

    def horizons(self) -> np.ndarray:
        """The horizon of every row (int64 [N])."""
        return np.full(self.n_chunks, self.n_chunks, np.int64) if self.horizon is None \
            else np.asarray(self.horizon, np.int64)

    def tail_arrays(self, start: int, stop: int) -> dict[str, np.ndarray]:
        """The rows ``[start, stop)`` for a segment: local ``indptr``, ``indices``, ``horizon``."""
        a, b = int(self.graph.indptr[start]), int(self.graph.indptr[stop])
        return {"indptr": np.asarray(self.graph.indptr[start:stop + 1], np.int64) - a,
                "indices": np.asarray(self.graph.indices[a:b], np.int64), "horizon": self.horizons()[start:stop]}

    def with_tails(self, tails: Sequence[dict[str, np.ndarray]], corpus, where: str) -> "TitleMentions":
        """This M (its rows are the first ones) with the segments' rows appended, checked (ids and
        horizons in range, row offsets; IndexFormatError naming ``where``)."""
        from ..errors import IndexFormatError

        n = self.n_chunks + sum(len(t["horizon"]) for t in tails)
        indptr = [np.asarray(self.graph.indptr, np.int64)]
        indices = [np.asarray(self.graph.indices, np.int64)]
        horizon = [self.horizons()]
        first = self.n_chunks
        for i, t in enumerate(tails):
            m = len(t["horizon"])
            ind = check_ids(t["indices"], n, f"{where} tail {i} indices.npy")
            ptr = check_indptr(t["indptr"], m, len(ind), f"{where} tail {i} indptr.npy")
            hor = np.asarray(check_ids(t["horizon"], n + 1, f"{where} tail {i} horizon.npy", m), np.int64)
            if m and (hor <= np.arange(first, first + m)).any():
                raise IndexFormatError(f"{where} tail {i} horizon.npy: a row's horizon does not cover the row")
            indptr.append(ptr[1:] + indptr[-1][-1])
            indices.append(np.asarray(ind, np.int64))
            horizon.append(hor)
            first += m
        ind = np.concatenate(indices)
        return TitleMentions(CSR(np.concatenate(indptr), ind, unit_weights(len(ind)), n), np.concatenate(horizon),
                             corpus)

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
        vocab = title_vocabulary(titles)
        indptr = np.zeros(len(texts) + 1, np.int64)
        rows: list[np.ndarray] = []
        for s, text in enumerate(texts):
            hit = mentioned(text, vocab, s)
            rows.append(np.asarray(sorted(hit), np.int64))
            indptr[s + 1] = indptr[s] + len(hit)
        indices = np.concatenate(rows) if rows else np.zeros(0, np.int64)
        return cls.from_indices(indptr, indices)


class TitleVocabulary(dict):
    """Each title form (:func:`title_forms`) → the passages whose title has it; ``longest``: the
    most words a form has (at most :data:`MAX_TITLE_WORDS`)."""

    longest = 0


def title_vocabulary(titles: Sequence[str], first: int = 0) -> TitleVocabulary:
    """The :class:`TitleVocabulary` of ``titles`` (passage ``first + i`` has ``titles[i]``)."""
    vocab = TitleVocabulary()
    for j, t in enumerate(titles, first):
        for form in title_forms(t):
            vocab.setdefault(form, []).append(j)
    vocab.longest = min(MAX_TITLE_WORDS, max((len(f.split()) for f in vocab), default=0))
    return vocab


def mentioned(text: str, vocab: TitleVocabulary, own: int = -1) -> set[int]:
    """The passages of ``vocab`` whose title form is a word n-gram of φ(``text``), but ``own``."""
    words = canonical_name(text).split()
    hit: set[int] = set()
    for n in range(1, vocab.longest + 1):
        for a in range(len(words) - n + 1):
            found = vocab.get(" ".join(words[a:a + n]))
            if found:
                hit.update(found)
    hit.discard(own)
    return hit

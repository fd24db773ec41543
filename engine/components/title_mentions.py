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
:meth:`TitleMentions.extended`; the stored titles looked up through a stored table of their forms,
:class:`TitleForms`, nothing decoded ahead); a stored row is not rewritten when a later passage's
title appears in its text. Each row records its *horizon*, the number of passages whose titles it
was computed against, and :meth:`TitleMentions.rows` adds the mentions of later titles when a row
is read (the row's text against the forms of the titles from its horizon on), so every read equals
the row of M built from scratch. A segment stores its passages' rows and horizons only; in memory
the rows after the stored ones are held apart (:attr:`TitleMentions.tail`), so an add copies
nothing stored.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

from ...kernels.csr import CSR
from .extraction import canonical_name
from ..sparse import unit_weights
from ..storage import RowReader, check_ids, check_indptr, load_arrays, save_arrays, string_hashes
from ..graphs.remote import ShardedCSR, remote_base
from ..graphs.store import LOCAL, GraphStore, saved_by_reference

#: the longest title (in canonical words) that is looked for in a passage text
MAX_TITLE_WORDS = 8
#: a trailing parenthesis of a title (a Wikipedia disambiguation), dropped for the second form
_PAREN = re.compile(r"\s*\([^()]*\)\s*$")


def title_forms(title: str) -> set[str]:
    """The canonical forms a mention of ``title`` may take: φ(title) and φ without a trailing
    parenthesis; empty forms dropped."""
    return {f for f in (canonical_name(title), canonical_name(_PAREN.sub("", title))) if f}


class TitleVocabulary(dict):
    """Each title form (:func:`title_forms`) → the passages whose title has it; ``longest``: the
    most words a form has (at most :data:`MAX_TITLE_WORDS`)."""

    longest = 0

    def find(self, grams: Sequence[str]) -> Iterable[int]:
        """The passages whose title has one of the forms ``grams`` (in the order found)."""
        for g in grams:
            yield from self.get(g, ())


def title_vocabulary(titles: Sequence[str], first: int = 0) -> TitleVocabulary:
    """The :class:`TitleVocabulary` of ``titles`` (passage ``first + i`` has ``titles[i]``)."""
    vocab = TitleVocabulary()
    for j, t in enumerate(titles, first):
        for form in title_forms(t):
            vocab.setdefault(form, []).append(j)
    vocab.longest = min(MAX_TITLE_WORDS, max((len(f.split()) for f in vocab), default=0))
    return vocab


@dataclass(frozen=True)
class TitleForms:
    """The title forms of passages ``[0, n)`` as a stored table: the forms' 64-bit hashes
    (``hashes`` uint64, sorted; a form whose hash another form shares has its own entry) and, per
    entry, the passages whose title has the form (CSR ``indptr``, ``rows``); ``longest`` as in
    :class:`TitleVocabulary`. A look-up reads a few entries and checks a found form against one of
    its titles (``titles``)."""

    hashes: np.ndarray
    indptr: np.ndarray
    rows: np.ndarray
    longest: int
    titles: Any = field(default=None, compare=False, repr=False)

    ARRAY_FILES = ("form_hashes", "form_indptr", "form_rows", "form_longest")

    @classmethod
    def build(cls, titles: Sequence[str]) -> "TitleForms":
        """The title forms of ``titles`` (:func:`title_vocabulary`) with their hashes and
        rows."""
        vocab = title_vocabulary(titles)
        forms = list(vocab)
        h = string_hashes(forms)
        order = np.argsort(h, kind="stable")
        sizes = np.fromiter((len(vocab[forms[i]]) for i in order.tolist()), np.int64, len(forms))
        indptr = np.zeros(len(forms) + 1, np.int64)
        np.cumsum(sizes, out=indptr[1:])
        rows = np.fromiter((j for i in order.tolist() for j in vocab[forms[i]]), np.int64, int(indptr[-1]))
        return cls(h[order], indptr, rows, vocab.longest, titles)

    def find(self, grams: Sequence[str]) -> Iterable[int]:
        """The passages whose title has one of the forms ``grams``."""
        if not len(grams) or not len(self.hashes):
            return
        h = string_hashes(grams)
        lo = np.searchsorted(self.hashes, h, side="left")
        hi = np.searchsorted(self.hashes, h, side="right")
        for g, a, b in zip(grams, lo.tolist(), hi.tolist()):
            for e in range(a, b):
                rows = np.asarray(self.rows[int(self.indptr[e]):int(self.indptr[e + 1])])
                if len(rows) and g in title_forms(self.titles[int(rows[0])]):
                    yield from rows.tolist()

    def arrays(self) -> dict[str, np.ndarray]:
        """What an index stores of the forms: hashes, the form → rows CSR, the longest form."""
        return {"form_hashes": self.hashes, "form_indptr": self.indptr, "form_rows": self.rows,
                "form_longest": np.asarray([self.longest], np.int64)}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], n: int, titles: Sequence[str], where: str) -> "TitleForms":
        """The stored table of ``n`` passages' titles, checked (IndexFormatError naming ``where``)."""
        from ..errors import IndexFormatError

        hashes = np.asarray(arrays["form_hashes"])
        rows = check_ids(arrays["form_rows"], max(n, 1), f"{where}/form_rows.npy")
        indptr = check_indptr(arrays["form_indptr"], len(hashes), len(rows), f"{where}/form_indptr.npy")
        longest = check_ids(arrays["form_longest"], MAX_TITLE_WORDS + 1, f"{where}/form_longest.npy", 1)
        if hashes.dtype != np.uint64 or (len(hashes) > 1 and not (hashes[1:] >= hashes[:-1]).all()):
            raise IndexFormatError(f"{where}/form_hashes.npy: not sorted uint64 hashes")
        return cls(hashes, indptr, arrays["form_rows"], int(longest[0]), titles)


class _Lookup:
    """Title forms of the stored passages (:class:`TitleForms`) and of the later ones (a
    :class:`TitleVocabulary`) looked up as one."""

    def __init__(self, stored: TitleForms | TitleVocabulary, later: TitleVocabulary) -> None:
        self.stored, self.later = stored, later
        self.longest = max(stored.longest, later.longest)

    def find(self, grams: Sequence[str]) -> Iterable[int]:
        yield from self.stored.find(grams)
        yield from self.later.find(grams)


def mentioned(text: str, vocab: "TitleVocabulary | _Lookup", own: int = -1) -> set[int]:
    """The passages of ``vocab`` whose title form is a word n-gram of φ(``text``), but ``own``."""
    words = canonical_name(text).split()
    grams = [" ".join(words[a:a + n]) for n in range(1, vocab.longest + 1) for a in range(len(words) - n + 1)]
    hit = set(vocab.find(grams))
    hit.discard(own)
    return hit


@dataclass(frozen=True)
class TitleMentions:
    """The title mention graph M as an unweighted :class:`CSR` ``[N, N]``: row s lists (sorted) the
    passages whose title passage s mentions (int64 ``indices``, unit weights). ``graph`` holds the
    stored rows, ``tail`` (None: none) the rows appended after them (module docstring)."""

    graph: CSR
    #: per row, the passages whose titles it was computed against (int64 [N]; None: all N)
    horizon: np.ndarray | None = None
    #: the corpus (titles and texts) read for appended rows and for rows whose horizon is below N
    corpus: Any = field(default=None, compare=False, repr=False)
    #: rows ``[graph.n_rows, N)``
    tail: CSR | None = None
    #: the title forms of the stored rows (None: made from their titles when first needed)
    forms: TitleForms | None = field(default=None, compare=False, repr=False)
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    #: the arrays :meth:`arrays` returns and :meth:`from_arrays` reads
    ARRAY_FILES = ("indptr", "indices")
    #: the arrays of a segment's rows (:meth:`tail_arrays`)
    TAIL_FILES = ("indptr", "indices", "horizon")

    @property
    def n_stored(self) -> int:
        """Rows of the stored graph (the rows appended since are in the tail)."""
        return self.graph.n_rows

    @property
    def n_chunks(self) -> int:
        """Rows of M: the stored graph's and the tail's."""
        return self.graph.n_rows + (self.tail.n_rows if self.tail is not None else 0)

    def row(self, s: int) -> np.ndarray:
        """Row ``s`` of M (read as :meth:`rows` reads)."""
        return self.each_row([s])[0]

    def rows(self, seeds: Iterable[int]) -> np.ndarray:
        """The sorted distinct passages the titles of ``seeds`` mention (the union of their rows,
        read as :meth:`each_row` reads them)."""
        parts = self.each_row(seeds)
        return np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int64)

    def each_row(self, seeds: Iterable[int]) -> list[np.ndarray]:
        """Row of each of ``seeds`` (sorted distinct passages), read together: a memory-mapped M (a
        loaded index) with plain reads (:class:`~.storage.RowReader`), so the rows read do not stay
        in the resident set; a sharded M from its shards, one call each. A row whose horizon is
        below N gets the mentions of the later titles (module docstring)."""
        seeds = [int(s) for s in seeds]
        if isinstance(self.graph, ShardedCSR):
            self.graph.fetch_rows(np.asarray([s for s in seeds if s < self.n_stored], np.int64))
        with RowReader(self.graph.indices) as read:
            return [np.unique(self._row(read, s)) for s in seeds]

    def _row(self, read: RowReader, s: int) -> np.ndarray:
        s = int(s)
        if s < self.n_stored:
            stored = read(int(self.graph.indptr[s]), int(self.graph.indptr[s + 1]))
        else:
            t = s - self.n_stored
            stored = np.asarray(self.tail.indices[int(self.tail.indptr[t]):int(self.tail.indptr[t + 1])])
        if self.horizon is None or int(self.horizon[s]) >= self.n_chunks:
            return stored
        horizon = int(self.horizon[s])
        late = [j for j in mentioned(self.corpus.texts[s], self._lookup()) if j >= horizon and j != s]
        return np.concatenate([stored, np.asarray(sorted(late), np.int64)])

    def _stored_forms(self, corpus: Any = None) -> "TitleForms | TitleVocabulary":
        """The title forms of the stored rows (:attr:`forms`, else made once from their titles)."""
        if self.forms is not None:
            return self.forms
        if "stored" not in self._cache:
            self._cache["stored"] = title_vocabulary((corpus if corpus is not None else self.corpus)
                                                     .titles[:self.n_stored])
        return self._cache["stored"]

    def _later_forms(self, corpus: Any = None, n: int | None = None) -> TitleVocabulary:
        """The title forms of the rows ``[n_stored, n)`` (default: all), kept and grown from the last ones."""
        corpus = corpus if corpus is not None else self.corpus
        n = self.n_chunks if n is None else n
        have = self._cache.get("later_n")
        if have != n:
            if have is not None and have < n:
                later = TitleVocabulary({k: list(v) for k, v in self._cache["later"].items()})
                for k, v in title_vocabulary(corpus.titles[have:n], have).items():
                    later.setdefault(k, []).extend(v)
                later.longest = max(self._cache["later"].longest,
                                    min(MAX_TITLE_WORDS, max((len(f.split()) for f in later), default=0)))
            else:
                later = title_vocabulary(corpus.titles[self.n_stored:n], self.n_stored)
            return later
        return self._cache["later"]

    def _lookup(self) -> _Lookup:
        later = self._later_forms()
        self._cache.update(later=later, later_n=self.n_chunks)
        return _Lookup(self._stored_forms(), later)

    def extended(self, corpus: Any, start: int) -> "TitleMentions":
        """M of ``corpus``, whose passages ``[start, N)`` were appended to the corpus of this M: their
        rows (against every title, old and new), horizon N; the stored rows are kept, nothing stored
        is copied (module docstring)."""
        n = len(corpus)
        if self._cache.get("later_n") != start:
            self._cache.update(later=self._later_forms(corpus, start), later_n=start)
        later = self._later_forms(corpus, n)
        lookup = _Lookup(self._stored_forms(corpus), later)
        rows = [np.asarray(sorted(mentioned(corpus.texts[s], lookup, s)), np.int64) for s in range(start, n)]
        old_tail = self.tail if self.tail is not None else CSR(np.zeros(1, np.int64), np.zeros(0, np.int64),
                                                              np.zeros(0, np.float32), n)
        indptr = np.concatenate([np.asarray(old_tail.indptr, np.int64),
                                 int(old_tail.indptr[-1]) + np.cumsum([len(r) for r in rows], dtype=np.int64)])
        indices = np.concatenate([np.asarray(old_tail.indices, np.int64)] + rows)
        horizon = np.concatenate([self.horizons(), np.full(n - start, n, np.int64)])
        cache = {"later": later, "later_n": n}
        if isinstance(lookup.stored, TitleVocabulary):
            cache["stored"] = lookup.stored
        return TitleMentions(self.graph, horizon, corpus, CSR(indptr, indices, unit_weights(len(indices)), n),
                             self.forms, cache)

    def horizons(self) -> np.ndarray:
        """The horizon of every row (int64 [N])."""
        return np.full(self.n_chunks, self.n_chunks, np.int64) if self.horizon is None \
            else np.asarray(self.horizon, np.int64)

    def _indptr(self, s: int) -> int:
        """Where row ``s`` starts in the rows of :meth:`merged_arrays`."""
        if s <= self.n_stored:
            return int(self.graph.indptr[s])
        return int(self.graph.indptr[-1]) + int(self.tail.indptr[s - self.n_stored])

    def tail_arrays(self, start: int, stop: int) -> dict[str, np.ndarray]:
        """The rows ``[start, stop)`` for a segment: local ``indptr``, ``indices``, ``horizon``."""
        starts = np.asarray([self._indptr(s) for s in range(start, stop + 1)], np.int64)
        with RowReader(self.graph.indices) as read:
            indices = [self._stored_row(read, s) for s in range(start, stop)]
        return {"indptr": starts - starts[0],
                "indices": np.concatenate(indices) if indices else np.zeros(0, np.int64),
                "horizon": self.horizons()[start:stop]}

    def _stored_row(self, read: RowReader, s: int) -> np.ndarray:
        """Row ``s`` as stored (without the later titles' mentions)."""
        if s < self.n_stored:
            return read(int(self.graph.indptr[s]), int(self.graph.indptr[s + 1]))
        t = s - self.n_stored
        return np.asarray(self.tail.indices[int(self.tail.indptr[t]):int(self.tail.indptr[t + 1])], np.int64)

    def with_tails(self, tails: Sequence[dict[str, np.ndarray]], corpus: Any, where: str) -> "TitleMentions":
        """This M (its rows are the stored ones) with the segments' rows appended (held in memory,
        :attr:`tail`), checked (ids and horizons in range, row offsets; IndexFormatError naming
        ``where``)."""
        from ..errors import IndexFormatError

        n = self.n_chunks + sum(len(t["horizon"]) for t in tails)
        indptr, indices, horizon = [np.zeros(1, np.int64)], [np.zeros(0, np.int64)], [self.horizons()]
        first = self.n_chunks
        for i, t in enumerate(tails):
            m = len(t["horizon"])
            ind = check_ids(t["indices"], n, f"{where} tail {i} indices.npy")
            ptr = check_indptr(t["indptr"], m, len(ind), f"{where} tail {i} indptr.npy")
            hor = np.asarray(check_ids(t["horizon"], n + 1, f"{where} tail {i} horizon.npy", m), np.int64)
            if m and (hor <= np.arange(first, first + m)).any():
                raise IndexFormatError(f"{where} tail {i} horizon.npy: a row's horizon does not cover the row")
            indptr.append(np.asarray(ptr[1:], np.int64) + indptr[-1][-1])
            indices.append(np.asarray(ind, np.int64))
            horizon.append(hor)
            first += m
        ind = np.concatenate(indices)
        tail = CSR(np.concatenate(indptr), ind, unit_weights(len(ind)), n) if tails else self.tail
        return TitleMentions(self.graph, np.concatenate(horizon), corpus, tail, self.forms)

    @classmethod
    def from_indices(cls, indptr: np.ndarray, indices: np.ndarray) -> "TitleMentions":
        """M of ``len(indptr) - 1`` passages from its row offsets and sorted rows (not checked)."""
        return cls(CSR(indptr, indices, unit_weights(len(indices)), len(indptr) - 1))

    def arrays(self) -> dict[str, np.ndarray]:
        """What an index stores of M whole: ``indptr`` int64 [N + 1], ``indices`` int64 [nnz], the
        rows' ``horizon`` when some is below N, and the title forms (:class:`TitleForms`) when the
        corpus is known."""
        if self.tail is None:
            out = {"indptr": self.graph.indptr, "indices": self.graph.indices}
        else:
            tail = self.tail_arrays(self.n_stored, self.n_chunks)
            out = {"indptr": np.concatenate([np.asarray(self.graph.indptr, np.int64),
                                             int(self.graph.indptr[-1]) + tail["indptr"][1:]]),
                   "indices": np.concatenate([np.asarray(self.graph.indices, np.int64), tail["indices"]])}
        if self.horizon is not None:
            out["horizon"] = self.horizons()
        if self.corpus is not None:
            out.update(TitleForms.build(self.corpus.titles[:self.n_chunks]).arrays())
        return out

    def save(self, directory: Any, store: GraphStore = LOCAL) -> None:
        """Save M whole (:meth:`arrays`); when ``store`` keeps its rows elsewhere (a sharded index's
        router, :mod:`~hopgraph.engine.graphs.router_store`), they go to (or stay in) the shards that own
        their passages and ``directory`` keeps the row pointer, the reference, the rows appended
        since (``tail_*``), the horizons and the title forms."""
        base = remote_base(self.graph)
        if not store.by_reference(self.graph):
            save_arrays(directory, self.arrays())
            return
        out = self.arrays() if base is None else {}
        graph = CSR(out["indptr"], out["indices"], unit_weights(len(out["indices"])), self.n_chunks) \
            if base is None else self.graph
        store.save_graph(directory, "", graph, weighted=False)
        if base is not None:
            if self.tail is not None:
                out.update({f"tail_{k}": v for k, v in self.tail_arrays(self.n_stored, self.n_chunks).items()})
            if self.horizon is not None:
                out["horizon"] = self.horizons()
            if self.corpus is not None:
                out.update(TitleForms.build(self.corpus.titles[:self.n_chunks]).arrays())
        save_arrays(directory, {k: v for k, v in out.items() if k not in ("indptr", "indices")})

    @classmethod
    def load(cls, directory: Any, n_chunks: int, corpus: Any = None, store: GraphStore = LOCAL) -> "TitleMentions":
        """M as :meth:`save` left it in ``directory`` (``n_chunks`` passages in all), checked; rows
        saved by reference read through ``store``."""
        optional = [f for f in ("horizon", *TitleForms.ARRAY_FILES) if (directory / f"{f}.npy").is_file()]
        if not saved_by_reference(directory, ""):
            return cls.from_arrays(load_arrays(directory, list(cls.ARRAY_FILES) + optional), n_chunks,
                                   str(directory), corpus)
        tail = {k: load_arrays(directory, [f"tail_{k}"])[f"tail_{k}"] for k in cls.TAIL_FILES
                if (directory / f"tail_{k}.npy").is_file()}
        n_stored = n_chunks - (len(tail["horizon"]) if tail else 0)
        graph = store.load_graph(directory, "", n_stored, str(directory))
        arrays = load_arrays(directory, optional)
        forms = TitleForms.from_arrays(arrays, n_chunks, corpus.titles, str(directory)) \
            if corpus is not None and all(f in arrays for f in TitleForms.ARRAY_FILES) else None
        horizon = None
        if "horizon" in arrays:
            horizon = np.asarray(check_ids(arrays["horizon"], n_chunks + 1, f"{directory}/horizon.npy", n_chunks), np.int64)
        M = cls(graph, horizon[:n_stored] if horizon is not None else None, corpus, None, forms)
        if tail:
            M = M.with_tails([tail], corpus, str(directory))
            M = TitleMentions(M.graph, horizon, corpus, M.tail, forms)
        return M

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], n_chunks: int, where: str,
                    corpus: Any = None) -> "TitleMentions":
        """The stored :meth:`arrays` of an index of ``n_chunks`` passages, checked (ids in range, row
        offsets from 0 to the entry count; IndexFormatError naming the file) and kept as they are (a
        memory-mapped ``indices`` stays mapped)."""
        indices = check_ids(arrays["indices"], n_chunks, f"{where}/indices.npy")
        indptr = check_indptr(arrays["indptr"], n_chunks, len(indices), f"{where}/indptr.npy")
        forms = None
        if corpus is not None and all(f in arrays for f in TitleForms.ARRAY_FILES):
            forms = TitleForms.from_arrays(arrays, n_chunks, corpus.titles, where)
        horizon = None
        if "horizon" in arrays:
            horizon = np.asarray(check_ids(arrays["horizon"], n_chunks + 1, f"{where}/horizon.npy", n_chunks), np.int64)
        return cls(CSR(indptr, arrays["indices"], unit_weights(len(indices)), n_chunks), horizon, corpus, None, forms)

    @classmethod
    def build(cls, titles: Sequence[str], texts: Sequence[str], corpus: Any = None) -> "TitleMentions":
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
        m = cls.from_indices(indptr, indices)
        return m if corpus is None else TitleMentions(m.graph, None, corpus, None, None, {"stored": vocab})

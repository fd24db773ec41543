"""The extraction data type (SPEC §2): :class:`Extraction`, its arrays and validation, and the
string structures it holds — :class:`TextIndex` (where each text sits), :class:`WordSet` (the
corpus's lower-case words) and :class:`MergedStrings` (a stored sorted vocabulary with names
inserted, :func:`merge_names`).

Texts (topic sentences and descriptions) are stored once in ``Extraction.texts`` and referred to by
index, so identical texts are embedded once. Their ids are prefix-stable: ordered by the first
passage that creates or uses them, so the texts of the extraction of a corpus's first passages are
the first texts of the whole corpus's.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Sequence

import numpy as np

from ....kernels.checks import check_ids
from ...errors import InputError
from ...storage import HashTable, check_packed, check_utf8, pack_strings, release_pages
from ..corpus import PackedStrings

@dataclass
class Extraction:
    """A topic hypergraph's raw extraction as arrays (SPEC §2).

    Topics (hyperedges) ``e``: ``topic_chunk[e]`` and text ``texts[topic_text[e]]``.
    Entity states (nodes) ``v``: chunk ``node_chunk[v]``, canonical name
    ``names[node_name[v]]`` and description ``texts[node_text[v]]``.
    Mentions (incidences, sorted by topic then node): state ``mention_node[m]``
    occurs in topic ``mention_topic[m]`` — two states co-occur within a sentence
    when they share a topic. ``names`` is the sorted canonical-name vocabulary;
    ``texts`` holds every distinct topic/description text once.
    """

    n_chunks: int
    topic_chunk: np.ndarray  # int32 [T]
    topic_text: np.ndarray  # int32 [T]
    node_chunk: np.ndarray  # int32 [V]
    node_name: np.ndarray  # int32 [V]
    node_text: np.ndarray  # int32 [V]
    mention_node: np.ndarray  # int32 [M]
    mention_topic: np.ndarray  # int32 [M]
    names: Sequence[str]  # a list, or PackedStrings once loaded
    texts: Sequence[str]
    #: the lower-case words of the corpus texts the extraction was made from (:func:`extract`'s
    #: ``common`` set), kept (and saved) so :func:`extend_extraction` need not rescan the texts
    common_words: "set[str] | Sequence[str] | None" = field(default=None, repr=False, compare=False)
    #: where each text sits (:class:`TextIndex`; transient: made by a build or on first use)
    text_index: "TextIndex | None" = field(default=None, repr=False, compare=False)
    #: transient: ``(chunks, names, old id → id)`` of the extraction this one extends (its chunk and
    #: name counts and where each of its names went), for structures keyed by name id to follow
    previous_names: "tuple[int, int, np.ndarray] | None" = field(default=None, repr=False, compare=False)
    #: the stored id of each name (int64 [len(names)]; None = its position): names keep the id they
    #: were first stored with while ``names`` stays sorted, so a segment stores only its new names
    #: and the stable ids of its nodes' names (:func:`extraction_delta`)
    name_stable: np.ndarray | None = field(default=None, repr=False, compare=False)
    #: transient: structures a reader derives from this extraction once (keyed by the reader's name;
    #: an extended extraction is a new object and starts empty)
    derived: dict = field(default_factory=dict, repr=False, compare=False)
    #: transient: the ``derived`` structures of the extraction this one extends (set by
    #: :func:`extend_extraction`), for a reader to extend its structure instead of remaking it
    previous_derived: "dict | None" = field(default=None, repr=False, compare=False)

    @property
    def n_topics(self) -> int:
        """The number of topics (hyperedges)."""
        return len(self.topic_chunk)

    @property
    def n_nodes(self) -> int:
        """The number of entity states (nodes)."""
        return len(self.node_chunk)

    def name_ids(self) -> dict[str, int]:
        """Canonical name → its id in ``names``."""
        return {n: i for i, n in enumerate(self.names)}

    def stable_ids(self) -> np.ndarray:
        """The stored id of every name (:attr:`name_stable`; int64)."""
        return np.arange(len(self.names), dtype=np.int64) if self.name_stable is None else self.name_stable

    def common_set(self) -> set[str]:
        """:attr:`common_words` as a set."""
        return set(self.common_words) if self.common_words is not None else set()

    def text_lookup(self) -> TextIndex:
        """:attr:`text_index`, made on first use (a dict over the texts: read once)."""
        if self.text_index is None:
            self.text_index = TextIndex(self.texts, extra=dict(zip(self.texts, range(len(self.texts)))))
        return self.text_index

    def cooccurring_names(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Distinct unordered pairs of name ids co-occurring within a topic (sentence),
        with the number of topics they share: ``(a int32, b int32, count int32)``, ``a < b``."""
        t, nm = self.mention_topic.astype(np.int64), self.node_name[self.mention_node].astype(np.int64)
        order = np.lexsort((nm, t))
        t, nm = t[order], nm[order]
        starts = np.flatnonzero(np.r_[True, t[1:] != t[:-1]])
        sizes = np.diff(np.r_[starts, len(t)])
        # every later mention of the same topic pairs with each mention (vectorised repeat)
        pos = np.arange(len(t)) - np.repeat(starts, sizes)
        later = np.repeat(sizes, sizes) - 1 - pos
        total = int(later.sum())
        if total == 0:
            z = np.zeros(0, np.int32)
            return z, z, z
        src = np.repeat(np.arange(len(t)), later)
        dst = src + 1 + np.arange(total) - np.repeat(np.cumsum(later) - later, later)
        a, b = nm[src], nm[dst]
        lo, hi = np.minimum(a, b), np.maximum(a, b)
        keep = lo != hi
        key = lo[keep] * len(self.names) + hi[keep]
        uniq, counts = np.unique(key, return_counts=True)
        return ((uniq // len(self.names)).astype(np.int32), (uniq % len(self.names)).astype(np.int32),
                counts.astype(np.int32))

    ARRAYS = ("topic_chunk", "topic_text", "node_chunk", "node_name", "node_text", "mention_node", "mention_topic")

    def arrays(self) -> dict[str, np.ndarray]:
        """The extraction as named arrays (strings packed), for :func:`~hopgraph.engine.storage.save_arrays`;
        the corpus's lower-case words too when known (``common_*``)."""
        names_blob, names_offsets = pack_strings(list(self.names))
        texts_blob, texts_offsets = pack_strings(list(self.texts))
        out = {**{a: getattr(self, a) for a in self.ARRAYS}, "names_blob": names_blob,
               "names_offsets": names_offsets, "texts_blob": texts_blob, "texts_offsets": texts_offsets}
        if self.common_words is not None:
            out["common_blob"], out["common_offsets"] = pack_strings(sorted(self.common_words))
        out.update(HashTable.build(list(self.texts)).arrays("texts_"))
        return out

    #: the files :meth:`arrays` gives (one ``.npy`` each when saved); optional ones: the corpus's
    #: lower-case words and the texts' hash table
    ARRAY_FILES = ARRAYS + ("names_blob", "names_offsets", "texts_blob", "texts_offsets")
    OPTIONAL_FILES = ("common_blob", "common_offsets", "texts_hashes", "texts_positions")

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], n_chunks: int, where: str = "extraction") -> "Extraction":
        """The inverse of :meth:`arrays` (validated; errors name ``where``). ``names`` and ``texts``
        stay packed (:class:`~hopgraph.engine.components.corpus.PackedStrings` over the memory-mapped bytes,
        a string decoded when read): a query never reads the texts, and decoding them all would
        cost every load time and memory in proportion to the corpus (``docs/decisions/memory-at-a-million.md``)."""
        ex = cls(n_chunks=n_chunks, **{a: np.asarray(arrays[a]) for a in cls.ARRAYS},
                 names=packed(arrays["names_blob"], arrays["names_offsets"], f"{where}/names_*.npy"),
                 texts=packed(arrays["texts_blob"], arrays["texts_offsets"], f"{where}/texts_*.npy")
                 ).validate()
        if "common_blob" in arrays:
            ex.common_words = WordSet(packed(arrays["common_blob"], arrays["common_offsets"], f"{where}/common_*.npy"))
        if "texts_hashes" in arrays:
                ex.text_index = TextIndex(ex.texts, HashTable.from_arrays(arrays, "texts_", len(ex.texts), where))
        release_pages(*(arrays[a] for a in cls.ARRAYS))  # the checks read every page; a query reads few
        return ex

    def validate(self, since: tuple[int, int, int] = (0, 0, 0)) -> "Extraction":
        """Check array shapes and index ranges; InputError names the bad field. ``since``: the
        topics, nodes and mentions before these counts were checked already (an extraction
        extended by :func:`extend_extraction`, whose old ids keep their order): only the entries
        from there on are read, O(what was appended)."""
        T, V = self.n_topics, self.n_nodes
        t0, v0, m0 = since
        checks = [("topic_chunk", self.topic_chunk, self.n_chunks, t0), ("topic_text", self.topic_text, len(self.texts), t0),
                  ("node_chunk", self.node_chunk, self.n_chunks, v0), ("node_name", self.node_name, len(self.names), v0),
                  ("node_text", self.node_text, len(self.texts), v0), ("mention_node", self.mention_node, V, m0),
                  ("mention_topic", self.mention_topic, T, m0)]
        for name, arr, bound, first in checks:
            if arr.ndim != 1:
                raise InputError(f"extraction field {name} must be 1-D")
            check_ids(arr[first:], name, bound, "extraction")
        if len(self.topic_text) != T or len(self.node_name) != V or len(self.node_text) != V \
                or len(self.mention_topic) != len(self.mention_node):
            raise InputError("extraction arrays have inconsistent lengths")
        if V > 1:  # one state per (chunk, name), sorted by both
            first = max(v0 - 1, 0)
            key = np.asarray(self.node_chunk[first:], np.int64) * max(len(self.names), 1) + \
                np.asarray(self.node_name[first:], np.int64)
            if (np.diff(key) <= 0).any():
                raise InputError("extraction nodes must be distinct and sorted by chunk, then name")
        return self


def packed(data: np.ndarray, offsets: np.ndarray, name: str) -> PackedStrings:
    """Saved packed strings, structure and UTF-8 checked (IndexFormatError naming ``name``), kept packed."""
    check_packed(data, offsets, name)
    check_utf8(data, offsets, name)
    return PackedStrings(data, offsets)


class TextIndex:
    """Where each text of an extraction sits: a stored hash table of its first ``n_stored`` texts
    (:class:`~hopgraph.engine.storage.HashTable`, read a few entries at a time) and a dict of the
    texts after them. Shared by the extractions that extend one another; a look-up answers only
    ids below the asking extraction's text count."""

    def __init__(self, texts: Sequence[str], table: HashTable | None = None, extra: dict[str, int] | None = None
                 ) -> None:
        self.texts, self.table = texts, table
        self.n_stored = len(table.hashes) if table is not None else 0
        self.extra = extra if extra is not None else {}

    def find(self, text: str, below: int) -> int:
        """The id of ``text`` among the first ``below`` texts, -1 if none."""
        i = self.extra.get(text, -1)
        if 0 <= i < below:
            return i
        if self.table is not None:
            j = int(self.table.find([text], self.texts.__getitem__)[0])
            if 0 <= j < min(below, self.n_stored):
                return j
        return -1


class WordSet:
    """A set of words held as a sorted stored list (looked up by bisection, nothing decoded ahead)
    and a set of the words added since (:func:`extend_extraction`'s ``common`` words)."""

    def __init__(self, stored: Sequence[str] = (), extra: Iterable[str] = ()) -> None:
        self.stored, self.extra = stored, set(extra)

    def __contains__(self, word: object) -> bool:
        if word in self.extra:
            return True
        i = bisect.bisect_left(self.stored, word)
        return i < len(self.stored) and self.stored[i] == word

    def union(self, words: Iterable[str]) -> "WordSet":
        """A new set holding these words and ``words`` (this one is not changed)."""
        return WordSet(self.stored, self.extra | set(words))

    def __iter__(self) -> Iterator[str]:
        yield from self.stored
        yield from (w for w in self.extra if w not in self.stored)


def merge_names(old: Sequence[str], new: list[str]) -> tuple[Sequence[str], np.ndarray, np.ndarray]:
    """Merge two sorted vocabularies (code-point order, as ``np.unique`` sorts them): returns the
    sorted union and the int64 maps old id → union id, new id → union id. Cost: a binary search per
    new name; the union reads ``old`` lazily (:class:`MergedStrings`) when it is stored (packed), else
    it is a list."""
    pos = np.fromiter((bisect.bisect_left(old, n) for n in new), np.int64, len(new))
    present = np.fromiter((p < len(old) and old[p] == n for p, n in zip(pos.tolist(), new)), bool, len(new))
    ins = np.flatnonzero(~present)
    ins_pos = pos[ins]  # non-decreasing: ``new`` is sorted
    old_map = np.arange(len(old), dtype=np.int64) + np.searchsorted(ins_pos, np.arange(len(old)), side="right")
    new_map = np.empty(len(new), np.int64)
    new_map[present] = old_map[pos[present]]
    new_map[ins] = ins_pos + np.arange(len(ins))
    if not len(ins):
        return (old if isinstance(old, (PackedStrings, MergedStrings)) else list(old)), old_map, new_map
    if isinstance(old, (PackedStrings, MergedStrings)):
        return MergedStrings(old, [new[k] for k in ins.tolist()], new_map[ins]), old_map, new_map
    merged: list[str] = []
    prev = 0
    for p, k in zip(ins_pos.tolist(), ins.tolist()):
        merged.extend(old[prev:p])
        merged.append(new[k])
        prev = p
    merged.extend(old[prev:])
    return merged, old_map, new_map


class MergedStrings(Sequence[str]):
    """A stored sorted list of strings with others inserted (at the sorted positions ``at``), read
    without copying or decoding the stored one."""

    def __init__(self, base: Sequence[str], inserted: list[str], at: np.ndarray) -> None:
        if isinstance(base, MergedStrings):  # flatten: one level of insertions over the stored list
            merged_at = np.asarray(at, np.int64)
            keep = np.ones(len(base) + len(inserted), bool)
            keep[merged_at] = False
            old_positions = np.flatnonzero(keep)  # where base's items went
            items = [(int(p), s) for p, s in zip(merged_at.tolist(), inserted)] + \
                [(int(old_positions[i]), base.inserted[j]) for j, i in enumerate(base.at.tolist())]
            items.sort()
            self.base, self.inserted = base.base, [s for _, s in items]
            self.at = np.asarray([p for p, _ in items], np.int64)
        else:
            self.base, self.inserted, self.at = base, list(inserted), np.asarray(at, np.int64)

    def __len__(self) -> int:
        return len(self.base) + len(self.inserted)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        k = int(np.searchsorted(self.at, i))
        if k < len(self.at) and self.at[k] == i:
            return self.inserted[k]
        return self.base[i - k]

    def __iter__(self) -> Iterator[str]:
        k = 0
        for j, s in enumerate(self.base):
            while k < len(self.at) and self.at[k] == j + k:
                yield self.inserted[k]
                k += 1
            yield s
        yield from self.inserted[k:]

"""Topic / entity extraction for the STITCH topic hypergraph (SPEC §2, "Index").

Two sources produce the same :class:`Extraction` (arrays, not Python objects):

* :func:`extract` — hopgraph's default **zero-token** extractor (no language model).
  Deterministic rules, applied to every passage (chunk) in corpus order:

  1. **Topics** (hyperedges) are the sentences of the passage text. Sentences end at
     ``. ! ?`` (optionally followed by closing quotes/brackets) followed by white
     space and a non-lower-case character, except after a single letter
     (``J. R. R. Tolkien``), a dotted acronym (``U.S.``) or a common abbreviation (``Mr``, ``St``, ``Inc``, ``Jan`` ...). A passage
     with no sentence end is one topic.
  2. **Entities** of a sentence:

     * the **passage title** (when non-empty and ``title_entities=True``) is an
       entity of every sentence of its passage — the passage is about it;
     * **capitalised spans**: maximal runs of capitalised words separated only by
       spaces or hyphens (or the dot of an initial, ``George T. Solomon``), which
       may contain the lower-case connectors ``of the de del della da di la le von
       van der den du y for`` (a connector must be followed by a capitalised word;
       ``and`` never joins). Leading function words (``The``, ``In``, ``He`` ...)
       are dropped; a possessive ``'s`` ends a span; a span left with only a
       month/weekday name or a function word is dropped, and so is a one-word span
       opening the sentence whose lower-case form occurs as a word elsewhere in
       the corpus (``Originally``, ``Traditional``);
     * **numbers** (``numbers=True``): digit tokens of 3+ digits (years, counts;
       ``1,000`` is one token). Smaller numbers form huge, meaningless groups.

  3. **Entity states** (nodes): one per (passage, canonical name) — the same name
     mentioned in several sentences of a passage is one state that belongs to all
     those hyperedges. Its **description** ψ(v) is the sentence (sentences joined
     by a space, in order) that mention it; the title state's description is the
     passage's embedding text ``"title: text"`` (shared with the chunk embedding).
  4. **Canonical name** φ = :func:`canonical_name`: Unicode NFKC, casefold, a
     trailing possessive removed, punctuation turned into spaces, white space
     collapsed, leading articles (``the``, ``a``, ``an``) removed.

  Cost: linear in the text length (pure Python regular expressions; the arrays are
  assembled with numpy). The index builds it once and shares it (one per
  ``(title_entities, numbers)`` pair, :mod:`hopgraph.engine.components.shared`) between
  ``stitch``, ``ppr_binary`` and ``dmar``.

* :func:`load_extractions` — extractions made elsewhere (e.g. by a language model)
  as JSON lines, one chunk a line (SPEC §2)::

      {"chunk_id": "...", "topics": [{"text": "...", "entities": [{"name": "...", "description": "..."}]}]}

  Every problem is reported as an :class:`~hopgraph.engine.errors.InputError`
  naming the file and line. Chunks without a line have no topics. An entity met
  in several topics of a chunk is one state whose description joins the distinct
  descriptions given.

Texts (topic sentences and descriptions) are stored once in ``Extraction.texts``
and referred to by index, so identical texts are embedded once. Their ids are
prefix-stable: ordered by the first passage that creates or uses them, so the texts of
the extraction of a corpus's first passages are the first texts of the whole corpus's.

* :func:`extend_extraction` — live indexes: the extraction of a corpus grown by
  appended passages, from the old extraction and the new passages only (old ids kept; one
  documented approximation for old passages until ``Index.compact()`` re-extracts).
"""
from __future__ import annotations

import bisect
import re
from array import array
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np

from .corpus import Corpus, PackedStrings, chain
from .records import input_path, iter_jsonl
from ...kernels.checks import check_ids
from ..errors import InputError
from ..storage import HashTable, check_packed, check_utf8, pack_strings, release_pages

#: lower-case words allowed inside a capitalised span (between capitalised words)
CONNECTORS = frozenset("of the de del della da di la le von van der den du y for".split())
#: capitalised words that are not entities on their own and are dropped at a span's start
FUNCTION_WORDS = frozenset("""
a an the in on at of for to from by with as and or but nor so yet if when while after before during
since until unlike despite although though because however thus also then there here this that these
those it its he she his her hers they them their we our you your i my me him us who whom whose which
what where why how all some many most several each every both either neither no not one another other
such first last later early late born is was are were be been has had have do does did can could will
would may might must shall should according following located based known called named
""".split())
MONTHS_DAYS = frozenset("""
january february march april may june july august september october november december
monday tuesday wednesday thursday friday saturday sunday
""".split())
ABBREVIATIONS = frozenset("""
mr mrs ms dr prof st jr sr inc co ltd corp no vs etc mt ft gen col lt sgt rev hon gov sen rep
jan feb mar apr jun jul aug sep sept oct nov dec est approx fig vol pp ca
""".split())
ARTICLES = ("the ", "a ", "an ")

_SENT_END = re.compile(r"[.!?][\"'”’)\]]*\s+")
_WORD = re.compile(r"[^\W_](?:[\w&]|['’\-.](?=\w)|,(?=\d{3}))*")
_NON_WORD = re.compile(r"[\W_]+")
_LOWER_WORD = re.compile(r"(?<![\w'’\-])[a-z]+(?![\w'’\-])")
_POSSESSIVE = re.compile(r"['’]s$", re.IGNORECASE)


def canonical_name(name: str) -> str:
    """φ: NFKC, casefold, possessive and punctuation removed, leading article dropped.

    >>> canonical_name("The  Beatles'")
    'beatles'
    >>> canonical_name("Hello Love's")
    'hello love'
    """
    s = unicodedata.normalize("NFKC", name).casefold().strip()
    s = _POSSESSIVE.sub("", s)
    s = _NON_WORD.sub(" ", s).strip()
    for art in ARTICLES:
        if s.startswith(art) and len(s) > len(art):
            s = s[len(art):]
            break
    return s


def split_sentences(text: str) -> list[str]:
    """Topics of a passage: its sentences (rules in the module docstring), stripped, non-empty."""
    out, start = [], 0
    for m in _SENT_END.finditer(text):
        before = text[start:m.start()].rsplit(None, 1)
        last = before[-1].rstrip(".") if before else ""
        word = _NON_WORD.sub("", last).lower()
        if (len(word) <= 1 and not word.isdigit()) or word in ABBREVIATIONS or "." in last:
            continue  # initial, abbreviation or dotted acronym (U.S.)
        nxt = text[m.end():m.end() + 1]
        if nxt and nxt.islower():
            continue
        out.append(text[start:m.end()].strip())
        start = m.end()
    tail = text[start:].strip()
    if tail:
        out.append(tail)
    return [s for s in out if s]


def _is_capitalised(word: str) -> bool:
    return word[0].isupper() or (word[0].isdigit() and any(c.isupper() for c in word))


def sentence_entities(sentence: str, numbers: bool = True, common_words: frozenset[str] | set[str] = frozenset()
                      ) -> list[str]:
    """Surface forms of the entities of one sentence (capitalised spans, numbers), in order.

    ``common_words``: lower-case words of the corpus; a one-word span at the start of
    the sentence that is such a word (``Originally``, ``Traditional``) is dropped.
    """
    words = list(_WORD.finditer(sentence))
    found: list[str] = []
    i, n = 0, len(words)
    while i < n:
        w = words[i].group()
        if not _is_capitalised(w):
            if numbers and w.replace(",", "").isdigit() and len(w.replace(",", "")) >= 3:
                found.append(w)
            i += 1
            continue
        span = [i]
        j = i
        while not _POSSESSIVE.search(words[j].group()) and j + 1 < n:
            gap = sentence[words[j].end():words[j + 1].start()]
            if len(words[j].group()) == 1 and gap.startswith("."):
                gap = gap[1:]  # an initial: George T. Solomon
            if gap.strip(" -"):
                break
            nw = words[j + 1].group()
            if _is_capitalised(nw):
                j += 1
                span.append(j)
                continue
            if nw in CONNECTORS and j + 2 < n and _is_capitalised(words[j + 2].group()) \
                    and not sentence[words[j + 1].end():words[j + 2].start()].strip(" -"):
                span += [j + 1, j + 2]
                j += 2
                continue
            break
        tokens = [words[k].group() for k in span]
        while tokens and tokens[0].lower() in FUNCTION_WORDS:
            tokens.pop(0)
        single = _POSSESSIVE.sub("", tokens[0].lower()) if len(tokens) == 1 else ""
        if single and (single in MONTHS_DAYS or single in FUNCTION_WORDS or (span[0] == 0 and single in common_words)):
            tokens = []
        if tokens:
            found.append(" ".join(tokens))
        i = j + 1
    return found


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

    @property
    def n_topics(self) -> int:
        return len(self.topic_chunk)

    @property
    def n_nodes(self) -> int:
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
        from ..storage import HashTable

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
            from ..storage import HashTable

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
        for field, arr, bound, first in checks:
            if arr.ndim != 1:
                raise InputError(f"extraction field {field} must be 1-D")
            check_ids(arr[first:], field, bound, "extraction")
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
        return WordSet(self.stored, self.extra | set(words))

    def __iter__(self) -> Iterator[str]:
        yield from self.stored
        yield from (w for w in self.extra if w not in self.stored)


class _Builder:
    """Accumulates (chunk, topic, surface name, description) mentions and assembles arrays.

    Text ids are **prefix-stable**: :meth:`build` orders the texts by the first chunk that
    creates or uses them (within a chunk: the texts created while reading it, in creation order,
    then the joined descriptions of its states, in state order), so the texts of an extraction
    of passages ``[0, s)`` are the first texts of the extraction of any longer corpus with the
    same mentions in those passages. ``base`` (and its :class:`TextIndex` ``lookup``) are the texts
    of an earlier extraction (:func:`extend_extraction`): they keep their ids, new texts follow
    (held here; the earlier ones are read only when looked up or joined).
    """

    def __init__(self, n_chunks: int, base: Sequence[str] = (), lookup: TextIndex | None = None) -> None:
        self.n_chunks = n_chunks
        self.base = base
        self.n_base = len(base)
        self.lookup = lookup if lookup is not None or not self.n_base else \
            TextIndex(base, extra=dict(zip(base, range(self.n_base))))
        self.texts: list[str] = []  # the new texts, ids n_base + position
        self.text_ids: dict[str, int] = {}
        # sort key (chunk, phase, sequence) of each text created here (id - n_base): phase 0 =
        # created while reading the chunk (sequence = id), phase 1 = a joined description (= node).
        # Per-text and per-mention columns are typed arrays (8 bytes an entry, not a Python int
        # object each) and a mention's name is the id of its distinct name (memory at scale:
        # docs/decisions/memory-at-a-million.md)
        self.key_chunk = array("q")
        self.key_phase = array("q")
        self.key_seq = array("q")
        self.topic_chunk = array("q")
        self.topic_text = array("q")
        self.m_topic = array("q")
        self.m_name = array("q")
        self.m_desc = array("q")
        self.name_ids: dict[str, int] = {}

    def get(self, i: int) -> str:
        return self.base[i] if i < self.n_base else self.texts[i - self.n_base]

    def text(self, s: str, chunk: int, phase: int = 0, seq: int | None = None) -> int:
        """Id of text ``s``, created if new, with sort key (``chunk``, ``phase``, ``seq``; default
        its id). Chunks are read in increasing order, so only a joined description (``phase`` 1,
        made after every chunk was read) can give an existing text a smaller key."""
        i = self.text_ids.get(s)
        if i is None and self.lookup is not None:
            i = self.lookup.find(s, self.n_base)
            if i < 0:
                i = None
        if i is None:
            i = self.text_ids[s] = self.n_base + len(self.texts)
            self.texts.append(s)
            self.key_chunk.append(chunk)
            self.key_phase.append(phase)
            self.key_seq.append(i if seq is None else seq)
        elif phase and i >= self.n_base:
            j = i - self.n_base
            key = (chunk, phase, i if seq is None else seq)
            if key < (self.key_chunk[j], self.key_phase[j], self.key_seq[j]):
                self.key_chunk[j], self.key_phase[j], self.key_seq[j] = key
        return i

    def topic(self, chunk: int, text: str) -> tuple[int, int]:
        """A new topic of ``chunk`` with ``text``: ``(topic id, text id)``."""
        t = self.text(text, chunk)
        self.topic_chunk.append(chunk)
        self.topic_text.append(t)
        return len(self.topic_chunk) - 1, t

    def mention(self, topic: int, phi: str, description: int) -> None:
        self.m_topic.append(topic)
        i = self.name_ids.get(phi)
        if i is None:
            i = self.name_ids[phi] = len(self.name_ids)
        self.m_name.append(i)
        self.m_desc.append(description)

    def _sorted_names(self) -> tuple[list[str], np.ndarray]:
        """The distinct mention names in sorted order and each mention's index in it."""
        names = list(self.name_ids)
        order = sorted(range(len(names)), key=names.__getitem__)
        rank = np.empty(len(names), np.int64)
        rank[order] = np.arange(len(names))
        return [names[i] for i in order], rank[np.frombuffer(self.m_name, np.int64)]

    def _order_texts(self) -> np.ndarray:
        """Sort the texts created here by their key (class docstring); returns old id → new id."""
        n_new = len(self.texts)
        remap = np.arange(self.n_base + n_new, dtype=np.int64)
        order = np.lexsort((np.asarray(self.key_seq, np.int64), np.asarray(self.key_phase, np.int64),
                            np.asarray(self.key_chunk, np.int64))) if n_new else np.zeros(0, np.int64)
        if (order != np.arange(n_new)).any():
            remap[self.n_base + order] = np.arange(self.n_base, self.n_base + n_new)
            moved = [self.texts[o] for o in order.tolist()]
            self.texts[:] = moved
            for k, t in enumerate(moved):
                self.text_ids[t] = self.n_base + k
        return remap

    def build(self) -> Extraction:
        topic_chunk = np.asarray(self.topic_chunk, np.int32)
        m_topic = np.frombuffer(self.m_topic, np.int64)
        names, m_name = self._sorted_names()
        m_chunk = topic_chunk[m_topic].astype(np.int64) if len(m_topic) else np.zeros(0, np.int64)
        n_names = max(len(names), 1)
        state_key = m_chunk * n_names + m_name
        keys, m_node = np.unique(state_key, return_inverse=True)
        m_node = m_node.astype(np.int64)
        # description of a state: its distinct mention descriptions, joined in mention order
        node_text = np.zeros(len(keys), np.int64)
        order = np.lexsort((np.arange(len(m_node)), m_node))
        if len(order):
            starts = np.flatnonzero(np.r_[True, m_node[order][1:] != m_node[order][:-1]])
            sizes = np.diff(np.r_[starts, len(order)])
            m_desc = np.frombuffer(self.m_desc, np.int64)
            node_text[:] = m_desc[order[starts]]
            m_desc = m_desc[order]
            differ = np.maximum.reduceat(m_desc, starts) != np.minimum.reduceat(m_desc, starts)
            for v in np.flatnonzero(differ):  # only states with several distinct descriptions are joined
                ids = list(dict.fromkeys(m_desc[starts[v]:starts[v] + sizes[v]].tolist()))
                if len(ids) > 1:
                    node_text[v] = self.text(" ".join(self.get(i) for i in ids), int(keys[v] // n_names),
                                             phase=1, seq=int(v))
        remap = self._order_texts()
        # incidences: distinct (topic, node), sorted by topic then node
        inc = np.unique(m_topic * max(len(keys), 1) + m_node)
        mention_topic = inc // max(len(keys), 1)
        mention_node = inc % max(len(keys), 1)
        ex = Extraction(
            n_chunks=self.n_chunks,
            topic_chunk=topic_chunk,
            topic_text=remap[np.asarray(self.topic_text, np.int64)].astype(np.int32),
            node_chunk=(keys // n_names).astype(np.int32),
            node_name=(keys % n_names).astype(np.int32),
            node_text=remap[node_text].astype(np.int32),
            mention_node=mention_node.astype(np.int32),
            mention_topic=mention_topic.astype(np.int32),
            names=names,
            texts=(list(self.base) + self.texts if isinstance(self.base, (list, tuple)) else chain(self.base, self.texts))
            if self.n_base else self.texts,
        ).validate()
        lookup = self.lookup if self.lookup is not None else TextIndex(ex.texts)
        lookup.extra.update(self.text_ids)
        ex.text_index = lookup
        return ex


def lower_words(texts: Iterable[str]) -> set[str]:
    """The lower-case words occurring in ``texts`` (the ``common`` words of :func:`extract`)."""
    out: set[str] = set()
    for text in texts:
        out.update(_LOWER_WORD.findall(text))
    return out


def _read_passages(b: _Builder, corpus: Corpus, start: int, title_entities: bool, numbers: bool,
                   common: set[str], progress: bool) -> None:
    """Feed passages ``[start, N)`` of ``corpus`` to ``b`` by the zero-token rules (module
    docstring, SPEC §2 "Index" steps 1–3), ``common`` being the corpus's lower-case words."""
    from tqdm.auto import tqdm

    emb_texts = corpus.embedding_texts(start)
    for c in tqdm(range(start, len(corpus)), desc="extract topics/entities", disable=not progress, unit="passage"):
        title = corpus.titles[c]
        phi_title = canonical_name(title) if title_entities and title else ""
        title_desc = b.text(emb_texts[c - start], c) if phi_title else -1
        for sentence in split_sentences(corpus.texts[c]):
            e, desc = b.topic(c, sentence)
            if phi_title:
                b.mention(e, phi_title, title_desc)
            for surface in sentence_entities(sentence, numbers, common):
                phi = canonical_name(surface)
                if phi and phi != phi_title:
                    b.mention(e, phi, desc)


def extract(corpus: Corpus, title_entities: bool = True, numbers: bool = True,
            progress: bool = False) -> Extraction:
    """The zero-token extractor (rules in the module docstring); deterministic."""
    common = lower_words(corpus.texts)
    b = _Builder(len(corpus))
    _read_passages(b, corpus, 0, title_entities, numbers, common, progress)
    ex = b.build()
    ex.common_words = common
    return ex


def load_extractions(path: str | Path, corpus: Corpus) -> Extraction:
    """Read SPEC §2 JSON lines for ``corpus``; InputError names the file and line of each problem."""
    path = input_path(path, "extraction file")
    b = _Builder(len(corpus))
    seen: dict[int, int] = {}
    records: list[tuple[int, int, list]] = []
    for lineno, rec in iter_jsonl(path):
        where = f"{path} line {lineno}"
        if "chunk_id" not in rec:
            raise InputError(f"{where}: missing field 'chunk_id'")
        cid = rec["chunk_id"]
        if not isinstance(cid, (str, int)) or isinstance(cid, bool):
            raise InputError(f"{where}: 'chunk_id' must be a string or integer")
        try:
            c = corpus.position(str(cid))
        except KeyError:
            raise InputError(f"{where}: chunk_id {cid!r} is not a passage of the corpus") from None
        if c in seen:
            raise InputError(f"{where}: chunk_id {cid!r} repeated (first on line {seen[c]})")
        seen[c] = lineno
        topics = rec.get("topics")
        if not isinstance(topics, list):
            raise InputError(f"{where}: 'topics' must be a list")
        records.append((c, lineno, topics))
    records.sort(key=lambda r: r[0])  # chunk order t(c), whatever the file order
    for c, lineno, topics in records:
        where = f"{path} line {lineno}"
        for ti, topic in enumerate(topics):
            if not isinstance(topic, dict):
                raise InputError(f"{where}: topic {ti} must be an object")
            text = topic.get("text")
            if not isinstance(text, str) or not text.strip():
                raise InputError(f"{where}: topic {ti} needs a non-empty string 'text'")
            entities = topic.get("entities", [])
            if not isinstance(entities, list):
                raise InputError(f"{where}: topic {ti} 'entities' must be a list")
            e, _ = b.topic(c, text.strip())
            for ei, ent in enumerate(entities):
                if not isinstance(ent, dict):
                    raise InputError(f"{where}: topic {ti} entity {ei} must be an object")
                name, desc = ent.get("name"), ent.get("description", text)
                if not isinstance(name, str) or not canonical_name(name):
                    raise InputError(f"{where}: topic {ti} entity {ei} needs a non-empty string 'name'")
                if not isinstance(desc, str) or not desc.strip():
                    raise InputError(f"{where}: topic {ti} entity {ei} 'description' must be a non-empty string")
                b.mention(e, canonical_name(name), b.text(desc.strip(), c))
    return b.build()


def query_names(texts: Sequence[str], name_ids: dict[str, int], max_words: int = 6,
                stop: Iterable[str] = ()) -> list[np.ndarray]:
    """Name ids mentioned by each query: every word n-gram (n ≤ ``max_words``) of the
    canonical query text that is a canonical name of the vocabulary (minus ``stop``).

    Used for query-side entity matching (binary PPR seeds, SPEC §2 baseline).
    """
    stop = set(stop)
    out = []
    for text in texts:
        words = canonical_name(text).split()
        ids = set()
        for n in range(1, max_words + 1):
            for s in range(len(words) - n + 1):
                phrase = " ".join(words[s:s + n])
                i = name_ids.get(phrase)
                if i is not None and phrase not in stop:
                    ids.add(i)
        out.append(np.asarray(sorted(ids), np.int32))
    return out


def extend_extraction(old: Extraction, corpus: Corpus, start: int, title_entities: bool = True,
                      numbers: bool = True, progress: bool = False) -> Extraction:
    """The extraction of ``corpus`` after passages ``[start, N)`` were appended to the corpus
    ``old`` was extracted from (SPEC §2 "Index" steps 1–4 on the new passages only).

    Only the new passages are read (the rules of :func:`extract`); the result is merged with
    ``old``, which is not changed: the old chunks keep their topics, states, mentions and
    descriptions; ``old.texts`` keep their ids and the new distinct texts follow them (so
    embeddings computed for the old texts stay valid by index; a new passage repeating an old
    text shares its id); ``names`` stays the sorted vocabulary (``node_name`` remapped) and nodes
    stay sorted by (chunk, name). Cost: the new passages' extraction, plus array merges linear in
    the extraction and a dict over ``old.texts``; the corpus's lower-case words are rescanned only
    when ``old`` does not carry them (``common_words`` is not saved: the first add after
    ``Index.load`` reads the old texts once).

    **Approximation (until** ``Index.compact()`` **):** :func:`extract` drops a one-word span
    opening a sentence whose lower-case form occurs as a word anywhere in the corpus
    (``common`` words). The new passages use the words of the whole grown corpus, but the old
    passages are not re-read: a word first written in lower case by a new passage does not
    remove the entity that a one-word sentence-initial span of an old passage (``Traditional``)
    made. Whenever the new passages bring no such word, the result equals ``extract(corpus)``
    (arrays, names and texts, given an ``old`` made by :func:`extract`). ``start == N`` returns
    ``old`` itself.
    """
    if not 0 <= start <= len(corpus) or old.n_chunks != start:
        raise InputError(f"extend_extraction: the old extraction covers {old.n_chunks} passages, "
                         f"start is {start} of {len(corpus)}")
    if start == len(corpus):
        return old
    common = old.common_words if old.common_words is not None else WordSet(extra=lower_words(corpus.texts[:start]))
    common = (common if isinstance(common, WordSet) else WordSet(extra=common)).union(lower_words(corpus.texts[start:]))
    b = _Builder(len(corpus), old.texts, old.text_lookup())
    _read_passages(b, corpus, start, title_entities, numbers, common, progress)
    new = b.build()  # nodes / topics / names local to the new passages; texts already merged
    names, old_map, new_map = merge_names(old.names, new.names)
    stable = np.empty(len(names), np.int64)
    stable[old_map] = old.stable_ids()
    inserted = np.setdiff1d(np.arange(len(names)), old_map)
    stable[inserted] = len(old.names) + np.arange(len(inserted))
    ex = Extraction(
        n_chunks=len(corpus),
        topic_chunk=np.concatenate([old.topic_chunk, new.topic_chunk]).astype(np.int32),
        topic_text=np.concatenate([old.topic_text, new.topic_text]).astype(np.int32),
        node_chunk=np.concatenate([old.node_chunk, new.node_chunk]).astype(np.int32),
        node_name=np.concatenate([old_map[np.asarray(old.node_name, np.int64)],
                                  new_map[new.node_name.astype(np.int64)]]).astype(np.int32),
        node_text=np.concatenate([old.node_text, new.node_text]).astype(np.int32),
        mention_node=np.concatenate([old.mention_node, new.mention_node + old.n_nodes]).astype(np.int32),
        mention_topic=np.concatenate([old.mention_topic, new.mention_topic + old.n_topics]).astype(np.int32),
        names=names,
        texts=new.texts,
    ).validate(since=(old.n_topics, old.n_nodes, len(old.mention_node)))  # old ids: remapped in order
    ex.common_words = common
    ex.text_index = new.text_index  # the stored table and the texts added since: no dict over every text
    ex.name_stable = stable
    ex.previous_names = (old.n_chunks, len(old.names), old_map)
    return ex


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


# ---------------------------------------------------------------------- segments
#: below this many texts an extraction without a stored text table indexes its texts in a dict at load
SMALL_TEXTS = 1 << 16
#: the arrays :func:`extraction_delta` gives (a segment's part of an extraction)
DELTA_FILES = ("topic_chunk", "topic_text", "node_chunk", "node_text", "node_name_stable", "mention_node",
               "mention_topic", "names_blob", "names_offsets", "texts_blob", "texts_offsets", "common_blob",
               "common_offsets")


def extraction_delta(old: Extraction, new: Extraction, common: Sequence[str] = ()) -> dict[str, np.ndarray]:
    """What ``new`` — ``old`` extended by :func:`extend_extraction`, once or several times — adds to it,
    as arrays for a segment: the appended topics, nodes and mentions (their ids as in ``new``, the
    nodes' names as stable ids, :attr:`Extraction.name_stable`), the names new to ``new`` in stable
    order, the texts new to it, and ``common`` (the segment's passages' lower-case words).
    :func:`apply_extraction_deltas` restores ``new`` from ``old`` and this."""
    T, V, M, U, W = old.n_topics, old.n_nodes, len(old.mention_node), len(old.texts), len(old.names)
    stable = new.stable_ids()
    added = np.flatnonzero(stable >= W)
    added = added[np.argsort(stable[added], kind="stable")]
    names_blob, names_offsets = pack_strings([new.names[i] for i in added.tolist()])
    texts_blob, texts_offsets = pack_strings(list(new.texts[U:]))
    common_blob, common_offsets = pack_strings(sorted(set(common)))
    return {"topic_chunk": new.topic_chunk[T:], "topic_text": new.topic_text[T:], "node_chunk": new.node_chunk[V:],
            "node_text": new.node_text[V:], "node_name_stable": stable[np.asarray(new.node_name[V:], np.int64)],
            "mention_node": new.mention_node[M:], "mention_topic": new.mention_topic[M:],
            "names_blob": names_blob, "names_offsets": names_offsets, "texts_blob": texts_blob,
            "texts_offsets": texts_offsets, "common_blob": common_blob, "common_offsets": common_offsets}


def apply_extraction_deltas(base: Extraction, deltas: Sequence[dict[str, np.ndarray]], n_chunks: int,
                            where: str = "extraction") -> Extraction:
    """``base`` extended by the segments' :func:`extraction_delta` arrays, in order, over ``n_chunks``
    passages (validated: every id in range; IndexFormatError naming ``where``). The names stay
    sorted: the new ones are merged in (:func:`merge_names`) and every node's name id follows."""
    from ..errors import IndexFormatError
    from ..storage import unpack_strings

    if not deltas:
        return base
    new_names: list[str] = []
    for i, d in enumerate(deltas):
        new_names += unpack_strings(d["names_blob"], d["names_offsets"], f"{where} delta {i} names")
    stable_old = base.stable_ids()
    order = sorted(range(len(new_names)), key=new_names.__getitem__)
    sorted_new = [new_names[i] for i in order]
    if len(set(sorted_new)) != len(sorted_new):
        raise IndexFormatError(f"{where}: a name is stored twice by the segments")
    names, old_map, new_map = merge_names(base.names, sorted_new)
    if len(names) != len(base.names) + len(sorted_new):
        raise IndexFormatError(f"{where}: a segment stores a name the extraction already holds")
    W = len(base.names)
    sorted_of_stable = np.empty(W + len(new_names), np.int64)
    sorted_of_stable[stable_old] = old_map
    sorted_of_stable[W + np.asarray(order, np.int64)] = new_map
    parts: dict[str, list[np.ndarray]] = {a: [np.asarray(getattr(base, a))] for a in Extraction.ARRAYS}
    parts["node_name"] = [old_map[np.asarray(base.node_name, np.int64)]]
    texts: Sequence[str] = base.texts
    common = base.common_words if isinstance(base.common_words, WordSet) else \
        (WordSet(extra=base.common_words) if base.common_words is not None else None)
    lookup = base.text_lookup() if base.text_index is not None or len(base.texts) < SMALL_TEXTS else None
    n_texts = len(base.texts)
    extra: dict[str, int] = {}
    for i, d in enumerate(deltas):
        for a in ("topic_chunk", "topic_text", "node_chunk", "node_text", "mention_node", "mention_topic"):
            parts[a].append(np.asarray(d[a]))
        stable = np.asarray(d["node_name_stable"], np.int64)
        check_ids(stable, "node_name_stable", len(sorted_of_stable), where, error=IndexFormatError)
        parts["node_name"].append(sorted_of_stable[stable])
        added = packed(d["texts_blob"], d["texts_offsets"], f"{where} delta {i} texts")
        texts = chain(texts, added)
        extra.update(zip(added, range(n_texts, n_texts + len(added))))
        n_texts += len(added)
        if common is not None:
            common = common.union(unpack_strings(d["common_blob"], d["common_offsets"],
                                                 f"{where} delta {i} common words"))
    try:
        ex = Extraction(n_chunks=n_chunks, names=names, texts=texts,
                        **{a: np.concatenate(v).astype(np.int32) for a, v in parts.items()}).validate()
    except InputError as e:
        raise IndexFormatError(f"{where}: {e}") from None
    if ex.n_nodes and (np.diff(ex.node_chunk) < 0).any():
        raise IndexFormatError(f"{where}: nodes are not sorted by chunk")
    ex.common_words = common
    ex.name_stable = np.argsort(sorted_of_stable).astype(np.int64)
    ex.previous_names = (base.n_chunks, len(base.names), old_map)
    if lookup is not None:
        ex.text_index = TextIndex(ex.texts, lookup.table, {**lookup.extra, **extra})
    return ex

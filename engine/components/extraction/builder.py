"""Building an extraction: :class:`ExtractionBuilder` (mentions in, arrays with prefix-stable text
ids out), :func:`extract` (the zero-token rules of :mod:`~hopgraph.engine.components.extraction.rules`
over a corpus) and :func:`load_extractions` (extractions made elsewhere).

:func:`load_extractions` reads JSON lines, one chunk a line (SPEC §2)::

    {"chunk_id": "...", "topics": [{"text": "...", "entities": [{"name": "...", "description": "..."}]}]}

Every problem is reported as an :class:`~hopgraph.engine.errors.InputError` naming the file and
line. Chunks without a line have no topics. An entity met in several topics of a chunk is one state
whose description joins the distinct descriptions given.
"""
from __future__ import annotations

from array import array
from pathlib import Path
from typing import Sequence

import numpy as np

from ...errors import InputError
from ..corpus import Corpus, chain
from ..records import input_path, iter_jsonl
from .data import Extraction, TextIndex
from .rules import canonical_name, lower_words, sentence_entities, split_sentences

class ExtractionBuilder:
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
        """The text with id ``i`` (a base text or one created here)."""
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
        """Record that canonical name ``phi`` occurs in ``topic`` with description text id
        ``description`` (the state of ``phi`` in the topic's chunk is made by :meth:`build`)."""
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
        """The :class:`~hopgraph.engine.components.extraction.data.Extraction` of the mentions
        recorded: one state per (chunk, name), its description the distinct descriptions of its mentions
        joined in mention order, names sorted, texts in prefix-stable order (class docstring); validated."""
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


def read_passages(b: ExtractionBuilder, corpus: Corpus, start: int, title_entities: bool, numbers: bool,
                   common: set[str], progress: bool) -> None:
    """Feed passages ``[start, N)`` of ``corpus`` to ``b`` by the zero-token rules
    (:mod:`~hopgraph.engine.components.extraction.rules`, SPEC §2 "Index" steps 1–3),
    ``common`` being the corpus's lower-case words."""
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
    """The zero-token extractor (the rules of :mod:`~hopgraph.engine.components.extraction.rules`);
    deterministic."""
    common = lower_words(corpus.texts)
    b = ExtractionBuilder(len(corpus))
    read_passages(b, corpus, 0, title_entities, numbers, common, progress)
    ex = b.build()
    ex.common_words = common
    return ex


def load_extractions(path: str | Path, corpus: Corpus) -> Extraction:
    """Read SPEC §2 JSON lines for ``corpus``; InputError names the file and line of each problem."""
    path = input_path(path, "extraction file")
    b = ExtractionBuilder(len(corpus))
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

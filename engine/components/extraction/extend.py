"""Live indexes: the extraction of a corpus grown by appended passages, from the old extraction and
the new passages only (:func:`extend_extraction`; old ids kept; one documented approximation for old
passages until ``Index.compact()`` re-extracts).
"""
from __future__ import annotations

import numpy as np

from ...errors import InputError
from ..corpus import Corpus
from .builder import ExtractionBuilder, read_passages
from .data import Extraction, WordSet, merge_names
from .rules import lower_words

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
    b = ExtractionBuilder(len(corpus), old.texts, old.text_lookup())
    read_passages(b, corpus, start, title_entities, numbers, common, progress)
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
    ex.previous_derived = old.derived
    return ex

"""What a segment stores of an extraction (:func:`extraction_delta`) and the extraction restored from
a base and the segments' deltas, in order (:func:`apply_extraction_deltas`).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ....kernels.checks import check_ids
from ...errors import IndexFormatError, InputError
from ...storage import pack_strings, unpack_strings
from ..corpus import chain
from .data import Extraction, TextIndex, WordSet, merge_names, packed

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

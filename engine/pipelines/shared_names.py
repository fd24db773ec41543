"""Shared names among a question's candidates: the rarest name, other than the question's own, that
two candidates both hold.

The zero-token extraction (:mod:`hopgraph.engine.components.extraction`, SPEC §2 "Index", shared with
STITCH, DMAR and G3RAG) gives every passage its canonical names φ (:class:`~.g3rag.name_links.ChunkNames`:
the passages' distinct names and each name's ``idf = ln(N / df)``). The passages of a multi-hop chain
share the bridge entity: the first names it, the second is about it, and the third shares the
second's next entity. A name the question holds links every passage about the question's own
entity, so it is left out. The *shared-name link* of candidates a ≠ b is the largest
``idf(n) / ln N`` over the names n both hold that are not a word n-gram of φ(question): in [0, 1],
near 1 for a name two passages alone hold, 0 for a name every passage holds and for no shared name.

Cost: per question, the names of its candidates only (O(Σ names of the candidates) and the pairs
inside each name's group), never an array of size N; the question's names are checked only for the
names two candidates share.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..components.extraction import Extraction, canonical_name
from ..sparse import row_entries
from .g3rag.name_links import ChunkNames, group_pairs

#: the key of the passages' names among an extraction's derived structures
DERIVED_KEY = "chunk_names"


def chunk_names(ex: Extraction) -> ChunkNames:
    """The passages' names of the extraction ``ex`` (:meth:`ChunkNames.from_extraction`, no title
    links), made once per extraction object and held with it; where ``ex`` extends an extraction
    whose names were made (a live add), those names extended by the new passages' only
    (:meth:`ChunkNames.extended`, equal to remaking them)."""
    names = ex.derived.get(DERIVED_KEY)
    if names is None or names.n_chunks != ex.n_chunks:
        previous = (ex.previous_derived or {}).get(DERIVED_KEY)
        names = previous.extended(ex, ()) if previous is not None else None
        ex.derived[DERIVED_KEY] = names = names if names is not None else ChunkNames.from_extraction(ex)
        ex.previous_derived = None  # the older names are no longer needed
    return names


def question_form(question: str) -> str:
    """φ(question) padded by a space each side, for :func:`shared_name_links`' word n-gram test."""
    return f" {canonical_name(question)} "


def shared_name_links(names: ChunkNames, vocabulary: Sequence[str], candidates: np.ndarray, question: str
                      ) -> np.ndarray:
    """float64 [C, C]: the shared-name link (module docstring) of every two of the ``candidates``
    (passage rows, distinct, -1 never among them), symmetric, 0 on the diagonal; ``vocabulary``: the
    extraction's names (``Extraction.names``), ``question``: the question's text."""
    C = len(candidates)
    links = np.zeros((C, C))
    if C < 2 or names.n_chunks < 2:
        return links
    slot, name = row_entries(names.indptr, names.names, np.asarray(candidates, np.int64))
    order = np.argsort(name, kind="stable")  # group the (candidate, name) entries by name
    slot, name = slot[order], name[order]
    shared, first, count = np.unique(name, return_index=True, return_counts=True)
    form = question_form(question)
    keep = (count >= 2) & (names.idf[shared] > 0)
    keep[keep] = [f" {vocabulary[int(n)]} " not in form for n in shared[keep]]
    if not keep.any():
        return links
    starts, sizes = first[keep], count[keep]
    group_ptr = np.concatenate([[0], np.cumsum(sizes)])
    member = np.arange(group_ptr[-1]) + np.repeat(starts - group_ptr[:-1], sizes)  # the kept groups' entries
    a, b, _ = group_pairs(group_ptr, member, C)
    weight = names.idf[name[a]] / math.log(names.n_chunks)
    np.maximum.at(links, (slot[a], slot[b]), weight)
    return links

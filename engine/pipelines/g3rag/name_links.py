"""Name links among a query's candidates: the shared name graph inside G3RAG's fused query.

The zero-token extraction (:mod:`hopgraph.engine.components.extraction`, SPEC §2 "Index", shared with STITCH and
DMAR) gives every passage a set of canonical names φ. Two passages are *name-linked* when they hold a
common name; the link weight is the sum over their common names of ``idf(n) = ln(N / df(n))``
(``df`` = passages holding n), so a name held by every passage links nothing and a rare name (a
bridge entity) links strongly. This is the chunk graph STITCH walks (SPEC §2 query step 6), with
idf weights in place of its ``1 / (|g| − 1)``. *Title links*: when the shared name is the title of
the target passage j (s names what j is about: the bridge of a multi-hop question), the link s → j
weighs ``(1 + title_weight) · idf(n)`` instead (directed; passages without a title have none).

G3RAG's fused scoring (SPEC §1 query step 2) diffuses its seed vector p — a softmax over the
``m`` candidates — one step over this graph *restricted to the candidates*: with ``A[s, j]`` the
link weight of candidates s ≠ j and ``T = A`` row-normalised over the candidates (rows with no link
stay zero), ``y = pᵀT``. A candidate gains when the likely-relevant candidates name what it names,
which is how the second passage of a multi-hop question (the one holding the bridge entity) is found.

Cost: the pairs are formed per query from the candidates' name lists only — O(B · Σ_n c_n²) with
c_n ≤ m the number of a query's candidates holding name n — never an array of size N or N².
The measurements behind the default weights: ``docs/decisions/g3rag-name-links.md``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ...errors import IndexFormatError
from ...components.extraction import Extraction, canonical_name
from ...sparse import row_edge_positions
from ...storage import check_finite, check_ids, check_indptr


def group_pairs(indptr: np.ndarray, members: np.ndarray, max_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All ordered pairs (a, b), a ≠ b, of members within each group of size 2..max_size,
    with the group's size: vectorised by repeats (cost = ``Σ |g|²`` over kept groups)."""
    sizes = np.diff(indptr)
    keep = (sizes >= 2) & (sizes <= max_size)
    starts, sz = indptr[:-1][keep], sizes[keep]
    if len(sz) == 0:
        z = np.zeros(0, np.int64)
        return z, z, z
    # member positions of kept groups, each repeated |g| times (one per partner)
    pos = np.repeat(starts, sz) + (np.arange(sz.sum()) - np.repeat(np.cumsum(sz) - sz, sz))
    gsize = np.repeat(sz, sz)
    a_pos = np.repeat(pos, gsize)
    first = np.repeat(np.repeat(starts, sz), gsize)
    k = np.arange(len(a_pos)) - np.repeat(np.cumsum(gsize) - gsize, gsize)
    b_pos = first + k
    off = a_pos != b_pos
    return members[a_pos[off]], members[b_pos[off]], np.repeat(gsize, gsize)[off]


@dataclass(frozen=True)
class ChunkNames:
    """Every passage's distinct name ids as CSR (``indptr`` int64 [N + 1], ``names`` int64 [nnz],
    sorted within a row), the idf of every name (``idf`` float64 [V], ``ln(N / df)``) and the name id
    of every passage's title (``title`` int64 [N], -1 where the title is empty or not a name)."""

    indptr: np.ndarray
    names: np.ndarray
    idf: np.ndarray
    title: np.ndarray

    @property
    def n_chunks(self) -> int:
        """The number of passages N."""
        return len(self.indptr) - 1

    @classmethod
    def from_extraction(cls, ex: Extraction, titles: Sequence[str] = ()) -> "ChunkNames":
        """The distinct (passage, name) pairs of the extraction's entity states and the names of the
        passages' ``titles`` (φ of each, as the extraction's ``title_entities`` rule makes them;
        none given: no title links)."""
        n, v = ex.n_chunks, len(ex.names)
        keys = np.unique(np.asarray(ex.node_chunk, np.int64) * max(v, 1) + np.asarray(ex.node_name, np.int64))
        chunk, names = keys // max(v, 1), keys % max(v, 1)
        indptr = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(chunk, minlength=n), out=indptr[1:])
        df = np.bincount(names, minlength=v)
        idf = np.log(n / np.maximum(df, 1)) if n else np.zeros(v)
        ids = ex.name_ids()
        title = np.array([ids.get(canonical_name(t), -1) if t else -1 for t in titles], np.int64)
        if len(title) != n:
            title = np.full(n, -1, np.int64)
        return cls(indptr, names, idf, title)

    def extended(self, ex: Extraction, titles: Sequence[str]) -> "ChunkNames | None":
        """The names of ``ex``, which extends the extraction these names were made from
        (:attr:`Extraction.previous_names`: this one's passages and names, where each name went), read
        from this one and the new passages' states only: the stored rows' name ids follow the merged
        vocabulary, the new passages' rows are appended, every idf is recomputed from the counts
        (``ln(N / df)`` over the whole vocabulary, as :meth:`from_extraction`); ``titles``: the titles
        of the new passages. Equals ``from_extraction(ex, all titles)``. None when ``ex`` does not
        extend this one's extraction."""
        prev = ex.previous_names
        if prev is None or prev[0] != self.n_chunks or prev[1] != len(self.idf):
            return None
        start, name_map = prev[0], np.asarray(prev[2], np.int64)
        n, v = ex.n_chunks, len(ex.names)
        first = int(np.searchsorted(np.asarray(ex.node_chunk), start))
        keys = np.unique(np.asarray(ex.node_chunk[first:], np.int64) * max(v, 1) +
                         np.asarray(ex.node_name[first:], np.int64))
        chunk, names = keys // max(v, 1), keys % max(v, 1)
        counts = np.bincount(chunk - start, minlength=n - start)
        indptr = np.concatenate([np.asarray(self.indptr, np.int64),
                                 int(self.indptr[-1]) + np.cumsum(counts, dtype=np.int64)])
        all_names = np.concatenate([name_map[np.asarray(self.names, np.int64)], names])
        df = np.bincount(all_names, minlength=v)
        idf = np.log(n / np.maximum(df, 1)) if n else np.zeros(v)
        old_title = np.asarray(self.title, np.int64)
        vocab = ex.names if len(titles) * DECODE_ALL_FACTOR < len(ex.names) else list(ex.names)
        new_title = np.array([_name_id(vocab, canonical_name(t)) if t else -1 for t in titles], np.int64)
        if len(new_title) != n - start:
            new_title = np.full(n - start, -1, np.int64)
        title = np.concatenate([np.where(old_title >= 0, name_map[np.maximum(old_title, 0)], -1), new_title])
        return ChunkNames(indptr, all_names, idf, title)

    def arrays(self) -> dict[str, np.ndarray]:
        """The arrays to save with the index (file names ``names_*``), read back by :meth:`from_arrays`."""
        return {f"{ARRAY_PREFIX}{k}": getattr(self, k) for k in ARRAY_FIELDS}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], n_chunks: int, where: str) -> "ChunkNames":
        """Saved arrays (memory-mapped) checked against ``n_chunks`` passages: row offsets from 0 to
        the entry count, name ids inside the idf table, finite non-negative idf, title ids -1 or a
        name; :class:`IndexFormatError` naming ``where`` otherwise."""
        a = {k: arrays[f"{ARRAY_PREFIX}{k}"] for k in ARRAY_FIELDS}
        idf = check_finite(a["idf"], f"{where} names_idf", (None,))
        if len(idf) and float(idf.min()) < 0:
            raise IndexFormatError(f"{where} names_idf: holds negative values")
        names = check_ids(a["names"], len(idf), f"{where} names_names")
        indptr = check_indptr(a["indptr"], n_chunks, len(names), f"{where} names_indptr")
        title = check_ids(np.asarray(a["title"]) + 1, len(idf) + 1, f"{where} names_title", n_chunks) - 1
        return cls(indptr, names, idf, title)


#: the new titles' names are looked up in the vocabulary decoded once (not by a binary search over the
#: stored strings, each probe decoding one) when the vocabulary holds fewer than this many names a title
DECODE_ALL_FACTOR = 100


def _name_id(names: Sequence[str], name: str) -> int:
    """The id of ``name`` in the sorted vocabulary ``names`` (a binary search), -1 if absent."""
    import bisect

    i = bisect.bisect_left(names, name)
    return i if i < len(names) and names[i] == name else -1


#: the fields of a :class:`ChunkNames` saved as arrays, and their file-name prefix
ARRAY_FIELDS = ("indptr", "names", "idf", "title")
ARRAY_PREFIX = "names_"


def name_link_diffusion(chunk_names: ChunkNames, cand: np.ndarray, p: np.ndarray,
                        title_weight: float = 0.0) -> np.ndarray:
    """``y = pᵀT`` over the name links among each query's candidates (module docstring), title
    links weighted ``1 + title_weight``.

    ``cand`` (int64 [B, m], -1 = padding, no passage twice in a row) and ``p`` ([B, m], the seed
    weights of the candidates); returns y (float32 [B, m], 0 at padding and at candidates no
    other candidate is linked to)."""
    cand = np.asarray(cand, np.int64)
    B, m = cand.shape
    y = np.zeros((B, m), np.float64)
    valid = np.flatnonzero(cand.ravel() >= 0)
    if len(valid) == 0:
        return y.astype(np.float32)
    seg, pos = row_edge_positions(chunk_names.indptr, cand.ravel()[valid])
    slot_flat = valid[seg]  # b · m + slot of every (candidate, name) entry
    name = chunk_names.names[pos]
    query = slot_flat // m
    # group the entries by (query, name): the members of a group are the candidates naming n
    key = query * np.int64(len(chunk_names.idf)) + name
    order = np.argsort(key, kind="stable")
    bounds = np.flatnonzero(np.diff(key[order])) + 1
    group_indptr = np.concatenate([[0], bounds, [len(order)]]).astype(np.int64)
    a, b, _ = group_pairs(group_indptr, order, m)
    weight = chunk_names.idf[name[a]]
    if title_weight:
        weight = weight * np.where(chunk_names.title[cand.ravel()[slot_flat[b]]] == name[b], 1.0 + title_weight, 1.0)
    src, dst = slot_flat[a], slot_flat[b]
    row_sum = np.bincount(src, weights=weight, minlength=B * m)
    flow = np.asarray(p, np.float64).ravel()[src] * np.divide(weight, row_sum[src], out=np.zeros_like(weight),
                                                              where=row_sum[src] > 0)
    y = np.bincount(dst, weights=flow, minlength=B * m).reshape(B, m)
    return y.astype(np.float32)

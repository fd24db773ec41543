"""The corpus knowledge graph of DMAR (SPEC §3 step 2, structural path).

Nodes are canonical entity names φ from the zero-token extractor
(:mod:`hopgraph.engine.components.extraction`, the same entities as STITCH). Two names are joined
by an edge weighted by the number of sentences (topics) in which they co-occur. An
external edge list (``head<TAB>relation<TAB>tail`` per line, names canonicalised, new
names added as nodes without passages) adds weight 1 per listed edge; the relation is
kept only for validation.

Subgraphs: the subgraph of an entity e is its **ego network of radius 1, capped** to e
plus its ``ego_size − 1`` heaviest neighbours (ties toward the lower id; ``ego_size`` = 16). G_D of a
passage D are the subgraphs of the entities D mentions (its ``max_passage_entities`` = 32
rarest ones); G_Q of a query are those of the names it links.

Linking (choice documented here): a passage links the entities the extractor found in
it. A query links every canonical name of the vocabulary that occurs as a word n-gram
of its canonical text (:func:`hopgraph.engine.components.extraction.query_names`); a match lying
inside a longer match (``nolan`` in ``christopher nolan``) is dropped; in the default mode
``"capitalised"`` a match must also contain a word the query writes with a capital or a
digit first (not counting a function word opening the question), so common words that
happen to be names somewhere (``country``, ``state``) do not link (``"ngram"``: no such
filter); of the rest the ``max_query_entities`` (8) rarest (fewest passages) are kept.

Everything is built with vectorised array code (sort/unique/CSR), linear up to the
sorts in passages + entity states + incidences; no per-entity Python lists.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ...errors import InputError
from ....kernels.csr import CSR, check_csr
from ...components.extraction import FUNCTION_WORDS, Extraction, canonical_name, query_names
from ...components.records import decode_lines, input_path
from ...graphs.renumbered import (load_entity_ids, load_held, read_whole_graph, save_entity_ids, save_held,
                                  stored_graph)
from ...graphs.store import LOCAL, NODE_ROWS, PASSAGE_ROWS, GraphStore, saved_by_reference
from ...sparse import csr_from_scipy, row_of_entries
from ...storage import check_indptr, load_arrays, pack_strings, save_arrays, unpack_strings


LINK_MODES = ("capitalised", "ngram")
_TOKEN = re.compile(r"[^\W_][\w'’.\-]*")


def capitalised_words(text: str) -> set[str]:
    """Canonical words of ``text`` written with a capital or a digit first, except a
    function word opening the text (``Who``, ``The``): evidence that a name is meant."""
    out = set()
    for k, m in enumerate(_TOKEN.finditer(text)):
        w = m.group()
        if (w[0].isupper() or w[0].isdigit()) and not (k == 0 and w.lower() in FUNCTION_WORDS):
            out.update(canonical_name(w).split())
    return out


def read_edge_list(path: str | Path) -> tuple[list[str], list[str]]:
    """Read ``head<TAB>relation<TAB>tail`` lines; returns canonical (heads, tails).

    Blank lines and lines starting with ``#`` are skipped; errors name the file and line.
    """
    path = input_path(path, "edge list")
    heads, tails = [], []
    for lineno, line in enumerate(decode_lines(path), start=1):
        line = line.rstrip("\n\r")
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != 3:
            raise InputError(f"{path} line {lineno}: expected head<TAB>relation<TAB>tail, got {len(parts)} field(s)")
        h, t = canonical_name(parts[0]), canonical_name(parts[2])
        if not h or not t:
            raise InputError(f"{path} line {lineno}: empty head or tail entity name")
        heads.append(h), tails.append(t)
    return heads, tails


def top_per_row(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, cap: int) -> tuple[np.ndarray, np.ndarray]:
    """Keep the ``cap`` heaviest entries of each CSR row (ties toward the lower column);
    returns the new (indptr, indices), rows ordered by weight."""
    n = len(indptr) - 1
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    order = np.lexsort((indices, -data, rows))
    rank = np.arange(len(order)) - np.repeat(indptr[:-1], np.diff(indptr))
    keep = order[rank < cap]
    counts = np.minimum(np.diff(indptr), cap)
    new_ptr = np.zeros(n + 1, np.int64)
    new_ptr[1:] = np.cumsum(counts)
    return new_ptr, indices[keep].astype(np.int32)


@dataclass
class KnowledgeGraph:
    """Arrays of the corpus KG (see module docstring); its graphs are :class:`CSR`."""

    names: list[str]
    adj: CSR  # [E, E] float32, symmetric co-occurrence weights, columns sorted in a row
    #: [N, E] unit weights, the linked entities of each passage (rarest first capped); a graph saved
    #: by reference is read by rows (:meth:`load`)
    passage_entities: CSR
    ego: CSR  # [E, E] unit weights, row e = nodes of e's capped ego subgraph (e included); as above
    df: np.ndarray  # int32 [E] passages mentioning each entity
    max_query_entities: int = 8
    _name_ids: dict[str, int] | None = field(default=None, repr=False)

    @property
    def n_entities(self) -> int:
        """The entity count E."""
        return len(self.names)

    @property
    def name_ids(self) -> dict[str, int]:
        """``{canonical name: entity id}``, built on first use."""
        if self._name_ids is None:
            self._name_ids = {n: i for i, n in enumerate(self.names)}
        return self._name_ids

    def link_queries(self, texts: Sequence[str], mode: str = "capitalised") -> list[np.ndarray]:
        """Entity ids linked in each query (rules in the module docstring), rarest first."""
        if mode not in LINK_MODES:
            raise InputError(f"query linking mode must be one of {LINK_MODES}, got {mode!r}")
        out = []
        for text, ids in zip(texts, query_names(texts, self.name_ids)):
            names = [self.names[i] for i in ids]
            cap = capitalised_words(text) if mode == "capitalised" else None
            keep = [i for i, n in zip(ids, names)
                    if not any(m != n and f" {n} " in f" {m} " for m in names)
                    and (cap is None or not cap.isdisjoint(n.split()))]
            keep = np.asarray(keep, np.int64)
            keep = keep[np.lexsort((keep, self.df[keep]))][: self.max_query_entities]
            out.append(keep.astype(np.int32))
        return out

    # ------------------------------------------------------------------ persistence
    def arrays(self) -> dict[str, np.ndarray]:
        """The graph as named arrays (``kg_*``) for the index's storage."""
        blob, offsets = pack_strings(self.names)
        return {"kg_names_blob": blob, "kg_names_offsets": offsets,
                "kg_adj_indptr": self.adj.indptr, "kg_adj_indices": self.adj.indices, "kg_adj_data": self.adj.data,
                "kg_pe_indptr": self.passage_entities.indptr, "kg_pe_indices": self.passage_entities.indices,
                "kg_ego_indptr": self.ego.indptr, "kg_ego_indices": self.ego.indices,
                "kg_df": self.df.astype(np.int32),
                "kg_meta": np.asarray([self.max_query_entities], np.int64)}

    @classmethod
    def from_arrays(cls, a: dict[str, np.ndarray], n_passages: int, where: str = "knowledge graph",
                    held: dict[str, Any] | None = None) -> "KnowledgeGraph":
        """The inverse of :meth:`arrays`, validated: every graph a CSR with ids in range and the
        expected rows, ``adj`` symmetric, each ego row holding its entity, ``df`` [E] at least the
        passages linking each entity, ``kg_meta`` >= 1. ``held``: ``pe`` / ``ego`` graphs loaded by
        reference (:meth:`load`), checked by their row count only (their rows are never read whole);
        ``adj`` is then checked by its row pointer only (read by writes, never by a search).
        Errors (InputError) name ``where`` and the array."""
        names = unpack_strings(a["kg_names_blob"], a["kg_names_offsets"], f"{where} kg_names_*")
        E = len(names)
        held = held or {}

        def graph(name: str, n_rows: int, data: np.ndarray | None = None) -> Any:
            """A stored graph validated as the engine's one CSR type (weights 1 when none are stored)."""
            if name in held:
                g = held[name]
            else:
                indptr, indices = a[f"kg_{name}_indptr"], a[f"kg_{name}_indices"]
                data = np.ones(len(indices), np.float32) if data is None else data
                g = check_csr(indptr, indices, data, E, f"{where} kg_{name}_*")
            if len(g[0]) - 1 != n_rows:
                raise InputError(f"{where} kg_{name}_*: {len(g[0]) - 1} rows, expected {n_rows}")
            return g

        pe, ego = graph("pe", n_passages), graph("ego", E)
        if held:  # no search reads adj; the files beside a reference are checksummed: its row pointer checked
            indptr = check_indptr(a["kg_adj_indptr"], E, len(a["kg_adj_indices"]), f"{where} kg_adj_indptr")
            if len(a["kg_adj_data"]) != len(a["kg_adj_indices"]):
                raise InputError(f"{where} kg_adj_*: indices and data differ in length")
            adj = CSR(indptr, a["kg_adj_indices"], a["kg_adj_data"], E)
        else:
            adj = graph("adj", E, a["kg_adj_data"])
            A = adj.to_scipy()
            if adj.nnz and abs(A - A.T).max() > 0:
                raise InputError(f"{where} kg_adj_*: the co-occurrence graph must be symmetric")
        if "ego" not in held:
            own = np.bincount(ego.indices[row_of_entries(ego.indptr) == ego.indices], minlength=E)
            if (own != 1).any():
                raise InputError(f"{where} kg_ego_*: every ego subgraph must hold its own entity")
        df, meta = np.asarray(a["kg_df"]), np.asarray(a["kg_meta"])
        if df.shape != (E,) or df.dtype.kind not in "iu" or \
                (E and "pe" not in held and (df < np.bincount(pe.indices, minlength=E)).any()):
            raise InputError(f"{where} kg_df: must hold, for each of the {E} entities, at least the passages linking it")
        if meta.shape != (1,) or meta.dtype.kind not in "iu" or int(meta[0]) < 1:
            raise InputError(f"{where} kg_meta: must hold max_query_entities >= 1")
        return cls(names=names, adj=adj, passage_entities=pe, ego=ego, df=df, max_query_entities=int(meta[0]))

    #: the graphs a graph store may keep by reference (rows held elsewhere, read by rows), and how
    #: their rows are split: passage → entities by passage, the ego subgraphs by entity; ``adj``
    #: stays with the names (no search reads it; every add reads it whole)
    ROW_GRAPHS = {"pe": PASSAGE_ROWS, "ego": NODE_ROWS}

    def save(self, directory: Path, store: GraphStore = LOCAL) -> None:
        """Save the arrays of :meth:`arrays`; the graphs of :attr:`ROW_GRAPHS` that ``store`` keeps
        by reference (:meth:`~hopgraph.engine.graphs.store.GraphStore.by_reference`) are saved
        through it (every weight is 1: none stored), with, after an add renumbered the entities, the
        rows held since and the entities' current ids (:mod:`~hopgraph.engine.graphs.renumbered`)."""
        graphs = {"pe": self.passage_entities, "ego": self.ego}
        by_ref = {k: g for k, g in graphs.items() if store.by_reference(g)}
        arrays = self.arrays()
        for k, g in by_ref.items():
            del arrays[f"kg_{k}_indptr"], arrays[f"kg_{k}_indices"]
            stored = stored_graph(g)
            store.save_graph(directory, f"kg_{k}_", stored if stored is not None else g, self.ROW_GRAPHS[k],
                             weighted=False)
            if stored is not None and stored is not g:
                save_held(directory, f"kg_{k}_", g)
                save_entity_ids(directory, g.base.col_ids)
        save_arrays(directory, arrays)

    @classmethod
    def load(cls, directory: Path, n_passages: int, where: str, store: GraphStore = LOCAL) -> "KnowledgeGraph":
        """A graph saved by :meth:`save` (:meth:`from_arrays`' checks; graphs saved by reference read
        through ``store``, under the rows held since)."""
        by_ref = [k for k in cls.ROW_GRAPHS if saved_by_reference(directory, f"kg_{k}_")]
        names = [n for n in cls.ARRAY_NAMES if not any(n.startswith(f"kg_{k}_") for k in by_ref)]
        a = load_arrays(directory, names)
        if not by_ref:
            return cls.from_arrays(a, n_passages, where)
        E = len(a["kg_names_offsets"]) - 1
        base_ids = load_entity_ids(directory, E, where)
        held = {}
        for k in by_ref:
            g = store.load_graph(directory, f"kg_{k}_", E if base_ids is None else len(base_ids), f"{where} kg_{k}_*")
            if base_ids is not None:
                g = load_held(directory, f"kg_{k}_", g, base_ids, k == "ego", E if k == "ego" else n_passages, E,
                              where)
            held[k] = g
        return cls.from_arrays(a, n_passages, where, held)

    def read_whole(self) -> "KnowledgeGraph":
        """This graph with every graph in memory (rows held elsewhere read, weights ones as
        :meth:`from_arrays` makes them): what a write that needs them whole reads."""
        pe, ego = (read_whole_graph(g) for g in (self.passage_entities, self.ego))
        if pe is self.passage_entities and ego is self.ego:
            return self
        return KnowledgeGraph(names=self.names, adj=self.adj, passage_entities=pe, ego=ego, df=self.df,
                              max_query_entities=self.max_query_entities, _name_ids=self._name_ids)

    ARRAY_NAMES = ("kg_names_blob", "kg_names_offsets", "kg_adj_indptr", "kg_adj_indices", "kg_adj_data",
                   "kg_pe_indptr", "kg_pe_indices", "kg_ego_indptr", "kg_ego_indices", "kg_df", "kg_meta")


def build_knowledge_graph(extraction: Extraction, n_passages: int, edge_list: str | Path | None = None,
                          ego_size: int = 16, max_passage_entities: int = 32,
                          max_query_entities: int = 8) -> KnowledgeGraph:
    """Build the KG from an :class:`Extraction` (+ optional external edge list); SPEC §3."""
    import scipy.sparse as sp

    if extraction.n_chunks != n_passages:
        raise InputError(f"extraction covers {extraction.n_chunks} chunks but the corpus has {n_passages} passages")
    for name, v in (("ego_size", ego_size), ("max_passage_entities", max_passage_entities),
                    ("max_query_entities", max_query_entities)):
        if v < 1:
            raise InputError(f"{name} must be >= 1, got {v}")
    names = list(extraction.names)
    a, b, w = extraction.cooccurring_names()
    a, b, w = a.astype(np.int64), b.astype(np.int64), w.astype(np.float32)
    if edge_list is not None:
        heads, tails = read_edge_list(edge_list)
        ids = {n: i for i, n in enumerate(names)}
        for n in dict.fromkeys(heads + tails):
            if n not in ids:
                ids[n] = len(names)
                names.append(n)
        h = np.fromiter((ids[x] for x in heads), np.int64, len(heads))
        t = np.fromiter((ids[x] for x in tails), np.int64, len(tails))
        keep = h != t
        a, b, w = np.r_[a, h[keep]], np.r_[b, t[keep]], np.r_[w, np.ones(int(keep.sum()), np.float32)]
    E = len(names)
    adj = sp.coo_matrix((np.r_[w, w], (np.r_[a, b], np.r_[b, a])), shape=(E, E)).tocsr()  # sums duplicates
    adj.sort_indices()
    # passages → entities: one entity state per (passage, name) in the extraction
    chunk, name = extraction.node_chunk.astype(np.int64), extraction.node_name.astype(np.int64)
    df = np.bincount(name, minlength=E).astype(np.int32)
    order = np.lexsort((name, df[name], chunk))  # per passage, rarest first
    chunk, name = chunk[order], name[order]
    starts = np.searchsorted(chunk, np.arange(n_passages + 1))
    rank = np.arange(len(chunk)) - np.repeat(starts[:-1], np.diff(starts))
    keep = rank < max_passage_entities
    pe = sp.csr_matrix((np.ones(int(keep.sum()), np.float32), (chunk[keep], name[keep])), shape=(n_passages, E))
    # capped ego subgraphs: e itself + its ego_size-1 heaviest neighbours
    nb_ptr, nb_idx = top_per_row(adj.indptr.astype(np.int64), adj.indices, adj.data, ego_size - 1)
    rows = np.r_[np.arange(E), np.repeat(np.arange(E), np.diff(nb_ptr))]
    cols = np.r_[np.arange(E), nb_idx]
    ego = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(E, E))
    return KnowledgeGraph(names=names, adj=csr_from_scipy(adj), passage_entities=csr_from_scipy(pe),
                          ego=csr_from_scipy(ego), df=df, max_query_entities=max_query_entities)

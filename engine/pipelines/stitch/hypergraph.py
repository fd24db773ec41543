"""The semi-merged topic hypergraph H = (V, E, φ, ψ) of STITCH-RAG as arrays (SPEC §2 "Index").

Built from an :class:`~hopgraph.engine.components.extraction.Extraction` with vectorised numpy
code whose cost is linear in passages + entity states + incidences (plus the pairs
of the φ-induced chunk graph, bounded by ``max_group_chunks`` per state):

* ``node_chunk[V]``, ``node_group[V]`` (name-equivalence group = canonical name id),
  ``group_size[G]`` and the group → node CSR ``group_indptr``/``group_nodes``;
* hyperedge ↔ node incidence as CSR both ways: ``edge_indptr``/``edge_nodes`` (edge →
  nodes, the incidence order) and ``node_indptr``/``node_incidence`` (node → the positions
  of its entries in ``edge_nodes``); the chunk index t(c) is the corpus order c itself, so
  a state's t is its ``node_chunk``;
* the φ-induced chunk graph as a column-stochastic CSR ``P`` (``graph_*``): chunks c ≠ c'
  are linked when they hold states of the same group g with
  ``2 ≤ |g| ≤ max_group_chunks`` (default 64); the link weight is ``Σ_g 1 / (|g| − 1)`` (a walk
  c → g → c' with g and c' chosen uniformly), columns normalised to sum to 1; chunks
  with no link are dangling (the PPR kernel gives them a self-loop). Names held by
  more than ``max_group_chunks`` passages (``united states``) link everything to
  everything and carry no information, so they do not link chunks (they still count
  in the activation and the prior, SPEC §2.5); this also keeps the graph linear in
  the number of states;
* ``text_emb[U, d]``: one embedding per distinct text (topic sentences and
  descriptions; ``node_text`` / ``edge_text`` index it), stored as **float16**
  (:data:`TEXT_EMB_DTYPE`: half the bytes of the largest STITCH array; the rounding moves a
  cosine by < 1e-3; ``docs/decisions/stitch-text-float16.md``). Indexes saved with float32 rows
  load as they are. A text equal to a passage's
  embedding text (the title state's description) reuses that passage's row of X
  instead of being embedded again. Similarities with questions are computed in float32
  row blocks (:func:`text_similarity`), so no float32 copy of the whole array is made.

Live indexes: the arrays are pure arithmetic on the extraction and the text
embeddings, so an index that grows rebuilds them with :func:`build_hypergraph` from the
extended extraction, after embedding only the texts that are new
(:func:`extend_text_embeddings`).
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp
from tqdm.auto import tqdm

from ...components.corpus import Corpus
from ...embedders import Embedder, validate_embeddings
from ...errors import IndexFormatError, InputError
from ...components.extraction import Extraction
from ....kernels.csr import CSR, check_csr
from ...components.late_pooling import LateTexts
from ...graphs.remote import held_elsewhere, read_by_rows, with_rows_appended
from ...graphs.store import LOCAL, NODE_ROWS, PASSAGE_ROWS, GraphStore, saved_by_reference
from ...sparse import csr_from_keys, csr_from_scipy, row_edge_positions
from ...embedders.packed_bert import encode_bulk
from ...ingest.streaming import TEXT_EMB_FILE
from ...storage import (check_ids, check_indptr, check_packed, check_unit_rows, load_array, load_arrays, pack_strings,
                      release_pages, save_arrays, unpack_strings)
from .row_layout import (ROW_FIELDS, TEXT_STATES, keep_state_rows, keep_text_flags, load_rows, load_text_flags,
                         save_rows, save_text_flags)


#: the saved fields of the chunk graph P (``{GRAPH_PREFIX}indptr`` / ``indices`` / ``data``)
GRAPH_PREFIX = "graph_"
GRAPH_FIELDS = tuple(f"{GRAPH_PREFIX}{k}" for k in ("indptr", "indices", "data"))
#: P's column sums, saved beside a P saved by reference (its reader never reads all of P)
COLUMN_SUMS_FILE = "graph_column_sums"


#: entries of P per block of its column sums (:meth:`TopicHypergraph.column_sums`)
COLUMN_SUM_BLOCK = 1 << 22


def chunk_links(indptr: np.ndarray, member_chunks: np.ndarray, n_chunks: int, max_size: int) -> CSR:
    """The φ-induced link weights ``W[c', c] = Σ_g 1 / (|g| − 1)`` over the groups g of size
    2..``max_size`` holding states in both chunks c ≠ c' (SPEC §2 step 6; module docstring).

    ``indptr`` / ``member_chunks`` list each group's states by chunk (a chunk holds at most one
    state of a name, so a group's chunks are distinct). Computed as the sparse product
    ``Bᵀ D B`` of the kept groups' chunk incidence B [G', N] with D = diag(1 / (|g| − 1)), minus
    its diagonal: the product's memory is its output (the links), not the ``Σ |g|²`` (chunk, chunk)
    pairs that listing every pair of every group holds before summing duplicates. Returns the
    links as a :class:`CSR` ``[N, N]`` with float64 weights (the exact sums)."""
    sizes = np.diff(indptr)
    keep = (sizes >= 2) & (sizes <= max_size)
    kept = np.flatnonzero(keep)
    if len(kept) == 0:
        return CSR(np.zeros(n_chunks + 1, np.int64), np.zeros(0, np.int32), np.zeros(0, np.float64), n_chunks)
    sz = sizes[kept]
    row_ptr = np.zeros(len(kept) + 1, np.int64)
    np.cumsum(sz, out=row_ptr[1:])
    # member positions of the kept groups, in group order
    pos = np.repeat(indptr[:-1][kept] - row_ptr[:-1], sz) + np.arange(int(row_ptr[-1]))
    cols = np.asarray(member_chunks)[pos].astype(np.int32)
    B = sp.csr_matrix((np.ones(len(cols), np.float64), cols, row_ptr), shape=(len(kept), n_chunks))
    DB = sp.csr_matrix((np.repeat(1.0 / (sz - 1.0), sz), cols, row_ptr), shape=(len(kept), n_chunks))
    W = sp.csr_matrix(B.T.tocsr() @ DB)
    W.setdiag(0.0)
    W.eliminate_zeros()
    return csr_from_scipy(W, np.float64)


def check_column_sums(sums: np.ndarray, n_chunks: int, where: str) -> np.ndarray:
    """Stored column sums of P: float64 [n_chunks], each in [0, 1 + 1e-4] (IndexFormatError otherwise)."""
    sums = np.asarray(sums)
    if sums.shape != (n_chunks,) or sums.dtype != np.float64 or not np.isfinite(sums).all() \
            or (len(sums) and (sums.min() < 0 or sums.max() > 1 + 1e-4)):
        raise IndexFormatError(f"{where}: expected {n_chunks} column sums in [0, 1]")
    return sums


def changed_chunk_rows(old: "TopicHypergraph", new: "TopicHypergraph", P: CSR) -> np.ndarray:
    """The chunks below ``old.n_chunks`` whose row of P may differ between ``old`` and ``new``, built
    from ``old``'s extraction grown by appending (:func:`~hopgraph.engine.components.extraction.extend_extraction`:
    ``old``'s states are ``new``'s first ones, unchanged): the chunks C of every name group that gained
    a state, and their neighbours in ``new``'s P (= P). A link weight ``W[i, j]`` sums over the groups
    holding both chunks, so it changes only when i and j are in C; a column sum only for j in C;
    P[i, j] = W[i, j] / sum_j then only for i in C or a neighbour of C. O(V + links of C); reads
    nothing of ``old`` but its state count (its rows may be read by rows only)."""
    ng = np.asarray(new.node_group, np.int64)
    groups = np.unique(ng[old.n_nodes:])
    C = np.unique(np.asarray(new.node_chunk, np.int64)[np.isin(ng, groups)])
    rows = np.union1d(C, np.asarray(P.indices[row_edge_positions(P.indptr, C)[1]], np.int64))
    return rows[rows < old.n_chunks]


def column_stochastic(W: sp.spmatrix) -> sp.csr_matrix:
    """Normalise the columns of a non-negative adjacency (``W[i, j]`` = weight j → i) to sum
    to 1 (duplicates summed, indices sorted); all-zero columns stay zero (dangling)."""
    W = sp.csr_matrix(W, dtype=np.float64)
    W.sum_duplicates()
    col = np.asarray(W.sum(axis=0)).ravel()
    inv = np.divide(1.0, col, out=np.zeros_like(col), where=col > 0)
    P = sp.csr_matrix(W.multiply(inv[None, :]))
    P.sort_indices()
    return P


@dataclass
class TopicHypergraph:
    """Arrays of the topic hypergraph and its chunk graph (see module docstring)."""

    n_chunks: int
    node_chunk: np.ndarray
    node_group: np.ndarray
    node_text: np.ndarray
    group_size: np.ndarray
    group_indptr: np.ndarray
    group_nodes: np.ndarray
    edge_text: np.ndarray
    edge_indptr: np.ndarray
    edge_nodes: np.ndarray
    node_indptr: np.ndarray
    node_incidence: np.ndarray
    graph_indptr: np.ndarray
    graph_indices: np.ndarray
    graph_data: np.ndarray
    text_emb: np.ndarray
    names_data: np.ndarray
    names_offsets: np.ndarray
    #: the column sums of P once computed (:meth:`column_sums`; saved only beside a P saved by
    #: reference, :data:`COLUMN_SUMS_FILE`)
    _column_sums: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)
    #: P when it was loaded by reference (read by rows; or an overlay of the rows changed since over
    #: such a P); None: P is the ``graph_*`` arrays
    _graph: Any = field(default=None, init=False, repr=False, compare=False)
    #: with text embeddings loaded by reference: their stored description flags
    #: (:data:`~.row_layout.TEXT_MASK`, a row matrix) and the rows whose flag changed since
    _text_mask: Any = field(default=None, init=False, repr=False, compare=False)
    _text_flips: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)
    #: with the states loaded by reference: the CSRs of :data:`~.row_layout.ROW_CSRS` and the text →
    #: states CSR (:data:`~.row_layout.TEXT_STATES`) by prefix (the stored rows, the rows changed since)
    _row_graphs: dict[str, Any] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def rows_by_reference(self) -> bool:
        """Whether the states, hyperedges and groups were loaded by reference (read by rows,
        :mod:`.row_layout`)."""
        return held_elsewhere(self.node_chunk)

    @property
    def n_nodes(self) -> int:
        """The entity-state count V."""
        return len(self.node_chunk)

    @property
    def n_edges(self) -> int:
        """The hyperedge (topic) count T."""
        return len(self.edge_text)

    @property
    def n_groups(self) -> int:
        """The name-group count G."""
        return len(self.group_size)

    def names(self) -> list[str]:
        """The canonical name of each group."""
        return unpack_strings(self.names_data, self.names_offsets)

    def transition(self) -> CSR:
        """The column-stochastic chunk-graph matrix P (row = target chunk, SPEC §2 step 6) as the
        engine's one sparse-graph type, validated; P loaded by reference as it was loaded (read by
        rows; its holders checked their files)."""
        if self._graph is not None:
            return self._graph
        return check_csr(self.graph_indptr, self.graph_indices, self.graph_data, self.n_chunks,
                         "STITCH chunk graph")

    def column_sums(self) -> np.ndarray:
        """Out-mass of every chunk in P (1, or 0 for a dangling chunk; float64 [N]), computed once
        (by :meth:`validate` on load, else on first use) in blocks of :data:`COLUMN_SUM_BLOCK`
        entries, each block's pages dropped after it: no float64 copy of P and no mapped P in the
        resident set."""
        if self._column_sums is None:
            if self._graph is not None:
                raise IndexFormatError("the column sums of a chunk graph saved by reference are saved with it")
            P, sums = self.transition(), np.zeros(self.n_chunks)
            for s in range(0, P.nnz, COLUMN_SUM_BLOCK):
                e = min(P.nnz, s + COLUMN_SUM_BLOCK)
                sums += np.bincount(np.asarray(P.indices[s:e]), weights=np.asarray(P.data[s:e], np.float64),
                                    minlength=self.n_chunks)
                release_pages(self.graph_indices, self.graph_data)
            self._column_sums = sums
        return self._column_sums

    def node_text_mask(self) -> np.ndarray:
        """Which texts are some state's description (bool [U])."""
        if self._row_graphs is not None:
            return np.diff(self._row_graphs[TEXT_STATES].indptr) > 0
        mask = np.zeros(len(self.text_emb), bool)
        mask[np.asarray(self.node_text, np.int64)] = True
        return mask

    def group_alpha(self, groups: np.ndarray | None = None) -> np.ndarray:
        """α_G = |G| / mean group size (SPEC §2.3), float32, of ``groups`` (None: all [G]). The mean
        is ``V / G`` (the sizes sum to V), so a few groups cost O(their count)."""
        if self.n_groups == 0:
            return np.zeros(0, np.float32)
        sizes = self.group_size if groups is None else np.asarray(self.group_size[np.asarray(groups, np.int64)])
        return (sizes / (self.n_nodes / self.n_groups)).astype(np.float32)

    # ------------------------------------------------------------------ persistence
    @classmethod
    def stored(cls) -> list[str]:
        """The saved fields (every constructor field; not the cache of :meth:`column_sums`)."""
        return [f.name for f in fields(cls) if f.init]

    def save(self, directory: Path, store: GraphStore = LOCAL) -> None:
        """Write the stored arrays (:meth:`stored`) into ``directory``, one ``.npy`` each, through
        ``store`` (:mod:`hopgraph.engine.graphs.store`): P as a graph (with its column sums beside
        it when saved by reference); the text embeddings, when not zero-width, as a row matrix (with
        their description flags when saved by reference); the states, hyperedges and groups as rows
        by reference when ``store`` keeps them so (:mod:`.row_layout`), else as arrays."""
        split_texts = self.text_emb.shape[1] > 0
        by_rows = store.by_reference(self.node_chunk)
        held = ROW_FIELDS if by_rows else ()
        arrays = {name: getattr(self, name) for name in self.stored()
                  if name not in ("n_chunks",) + GRAPH_FIELDS + held + (("text_emb",) if split_texts else ())}
        arrays["n_chunks"] = np.asarray([self.n_chunks], np.int64)
        save_arrays(directory, arrays)
        P = self._graph if self._graph is not None else \
            (self.graph_indptr, self.graph_indices, self.graph_data, self.n_chunks)
        if store.save_graph(directory, GRAPH_PREFIX, P, PASSAGE_ROWS):
            save_arrays(directory, {COLUMN_SUMS_FILE: self.column_sums()})
        if by_rows:
            save_rows(self, directory, store)
        if split_texts and store.save_matrix(directory, "text_emb", self.text_emb, NODE_ROWS):
            save_text_flags(self, directory, store)

    @classmethod
    def load(cls, directory: Path, mmap: bool = True, n_chunks: int | None = None,
             store: GraphStore = LOCAL) -> "TopicHypergraph":
        """Open saved arrays (memory-mapped) and :meth:`validate` them (IndexFormatError naming the
        file); what was saved by reference read through ``store``."""
        graph_ref = saved_by_reference(directory, GRAPH_PREFIX)
        texts_ref = saved_by_reference(directory, "text_emb.")
        rows_ref = saved_by_reference(directory, "node_columns.")
        names = [n for n in cls.stored() if not (graph_ref and n in GRAPH_FIELDS)
                 and not (texts_ref and n == "text_emb") and not (rows_ref and n in ROW_FIELDS)]
        arrays = load_arrays(directory, names, mmap=mmap)
        row_graphs = load_rows(directory, arrays, store) if rows_ref else None
        if texts_ref:
            arrays["text_emb"] = store.load_matrix(directory, "text_emb")
        stored = check_ids(arrays["n_chunks"], np.iinfo(np.int64).max, f"{directory / 'n_chunks.npy'}", length=1)
        arrays["n_chunks"] = int(stored[0])
        if n_chunks is not None and arrays["n_chunks"] != n_chunks:
            raise IndexFormatError(f"{directory / 'n_chunks.npy'}: hypergraph has {arrays['n_chunks']} chunks, "
                                   f"the index {n_chunks}")
        if not graph_ref:
            H = cls(**arrays)
        else:
            P = store.load_graph(directory, GRAPH_PREFIX, arrays["n_chunks"], f"{directory} chunk graph")
            H = cls(**arrays, graph_indptr=P.indptr, graph_indices=P.indices, graph_data=P.data)
            H._graph = P
            H._column_sums = check_column_sums(load_array(directory, COLUMN_SUMS_FILE, mmap=False), H.n_chunks,
                                               str(directory / f"{COLUMN_SUMS_FILE}.npy"))
        H._row_graphs = row_graphs
        if row_graphs is not None and row_graphs[TEXT_STATES].n_rows != len(H.text_emb):
            raise IndexFormatError(f"{directory}: text_rows has {row_graphs[TEXT_STATES].n_rows} rows, "
                                   f"{len(H.text_emb)} texts")
        if texts_ref:
            load_text_flags(H, directory, store)
        return H.validate(directory)

    def with_stored_rows(self, old: "TopicHypergraph", store: GraphStore) -> "TopicHypergraph":
        """This hypergraph (built from an extraction grown since ``old``) with what ``old`` kept by
        reference kept so: P as ``old``'s stored rows plus the rows that differ
        (:func:`changed_chunk_rows`) and the appended ones (:meth:`GraphStore.keep_rows`; its column
        sums computed first, from the whole new P); the text description flags with the texts whose
        flag changed since; the states' rows (:func:`~.row_layout.keep_state_rows`). Else itself."""
        if old._text_mask is not None and read_by_rows(self.text_emb):
            keep_text_flags(self, old)
        if old._graph is not None:
            sums, P = self.column_sums(), self.transition()
            kept = store.keep_rows(old._graph, P, lambda: changed_chunk_rows(old, self, P))
            if kept is not P:
                self.graph_indptr, self.graph_indices, self.graph_data = kept.indptr, kept.indices, kept.data
                self._graph, self._column_sums = kept, sums
        keep_state_rows(self, old, store)
        return self

    def validate(self, directory: Path | str = "hypergraph") -> "TopicHypergraph":
        """Check every array against what it indexes (ids in range, CSR offsets, the two incidence
        directions and the groups consistent, a column-stochastic chunk graph, finite unit text
        embeddings): stored arrays are trusted by the kernels, so a corrupt one must not pass."""
        d = Path(directory)
        f = lambda name: str(d / f"{name}.npy")  # noqa: E731
        if self.rows_by_reference:  # their holders' files are checksummed: what is held whole here
            if not np.array_equal(np.asarray(self.group_size), np.diff(self.group_indptr)):
                raise IndexFormatError(f"{f('group_size')}: groups do not match group_indptr")
        else:
            self._validate_rows(d)
        if self._graph is None:
            try:
                P = self.transition()
            except InputError as e:
                raise IndexFormatError(f"{d}/graph_*.npy: {e}") from None
            if P.nnz:
                col = self.column_sums()
                if np.abs(col[col > 0] - 1.0).max() > 1e-4:
                    raise IndexFormatError(f"{f('graph_data')}: chunk graph columns must sum to 1")
        if self.text_emb.ndim != 2:
            raise IndexFormatError(f"{f('text_emb')}: must be 2-D")
        if self.text_emb.shape[1] and not read_by_rows(self.text_emb):
            check_unit_rows(self.text_emb, f("text_emb"))
        elif self.text_emb.shape[1] and len(getattr(self.text_emb, "tail", ())):  # the rows appended since
            check_unit_rows(self.text_emb.tail, f("text_emb.tail"))
        check_packed(self.names_data, self.names_offsets, f"{d}/names_*.npy", len(self.group_size))
        release_pages(*(getattr(self, name) for name in self.stored()))  # what the checks read stays on disk
        return self

    def _validate_rows(self, d: Path) -> None:
        """The checks of :meth:`validate` on the states, hyperedges and groups (held whole)."""
        f = lambda name: str(d / f"{name}.npy")  # noqa: E731
        N, V, T, G, U = self.n_chunks, len(self.node_chunk), len(self.edge_text), len(self.group_size), len(self.text_emb)
        check_ids(self.node_chunk, N, f("node_chunk"))
        if V and np.diff(self.node_chunk).min() < 0:
            raise IndexFormatError(f"{f('node_chunk')}: nodes must be sorted by chunk")
        check_ids(self.node_group, G, f("node_group"), V)
        check_ids(self.node_text, U, f("node_text"), V)
        check_ids(self.edge_text, U, f("edge_text"))
        check_indptr(self.group_indptr, G, V, f("group_indptr"))
        check_ids(self.group_nodes, V, f("group_nodes"), V)
        if not np.array_equal(np.asarray(self.group_size), np.diff(self.group_indptr)) or \
                not np.array_equal(np.asarray(self.node_group)[self.group_nodes],
                                   np.repeat(np.arange(G), np.diff(self.group_indptr))):
            raise IndexFormatError(f"{f('group_size')}, {f('group_nodes')}: groups do not match node_group")
        M = len(self.edge_nodes)
        check_indptr(self.edge_indptr, T, M, f("edge_indptr"))
        check_ids(self.edge_nodes, V, f("edge_nodes"))
        check_indptr(self.node_indptr, V, M, f("node_indptr"))
        check_ids(self.node_incidence, M, f("node_incidence"), M)
        if not np.array_equal(np.asarray(self.edge_nodes)[self.node_incidence],
                              np.repeat(np.arange(V), np.diff(self.node_indptr))):
            raise IndexFormatError(f"{f('node_incidence')}: does not invert edge_nodes")


#: storage type of the topic/description embeddings (module docstring)
TEXT_EMB_DTYPE = np.float16
#: rows per block when converting, multiplying or embedding text embeddings (bounds float32 temporaries)
TEXT_BLOCK_ROWS = 1 << 16



def as_text_embeddings(E: np.ndarray) -> np.ndarray:
    """``E`` [U, d] as the stored text-embedding type (:data:`TEXT_EMB_DTYPE`), converted in
    row blocks (no float32 temporary of the whole array); already-converted input is returned as is."""
    if read_by_rows(E):  # rows held elsewhere, already stored as such
        return E
    E = np.asarray(E) if not isinstance(E, np.memmap) else E
    if E.ndim != 2:
        raise InputError(f"text embeddings must be 2-D, got shape {list(E.shape)}")
    if E.dtype == TEXT_EMB_DTYPE and E.flags.c_contiguous:
        return E
    out = np.empty(E.shape, TEXT_EMB_DTYPE)
    for a in range(0, len(E), TEXT_BLOCK_ROWS):
        out[a:a + TEXT_BLOCK_ROWS] = E[a:a + TEXT_BLOCK_ROWS]
    return out


def text_similarity(Q: np.ndarray, text_emb: np.ndarray) -> np.ndarray:
    """``Q @ text_embᵀ`` [B, U] float32 for float32 questions Q [B, d], the text embeddings
    (float16 or, from an older index, float32) converted to float32 one row block at a time."""
    Q = np.asarray(Q, np.float32)
    if text_emb.dtype == np.float32:
        return Q @ np.asarray(text_emb).T
    out = np.empty((len(Q), len(text_emb)), np.float32)
    for a in range(0, len(text_emb), TEXT_BLOCK_ROWS):
        out[:, a:a + TEXT_BLOCK_ROWS] = Q @ np.asarray(text_emb[a:a + TEXT_BLOCK_ROWS], np.float32).T
    return out


def text_embedding_rows(n: int, d: int, work_dir: Path | None = None) -> np.ndarray:
    """A ``[n, d]`` :data:`TEXT_EMB_DTYPE` array to fill with text embeddings: in memory, or with a
    ``work_dir`` (a build's work directory, :mod:`hopgraph.engine.ingest.streaming`) a memory-mapped
    :data:`TEXT_EMB_FILE` there, whose filled pages :func:`embed_texts` releases from the resident
    set block by block (``docs/decisions/memory-at-a-million.md``)."""
    if work_dir is None:
        return np.empty((n, d), TEXT_EMB_DTYPE)
    path = Path(work_dir) / TEXT_EMB_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)  # a new file: an earlier build's array may still map the old one
    return np.lib.format.open_memmap(path, mode="w+", dtype=TEXT_EMB_DTYPE, shape=(n, d))


def embed_texts(texts: list[str], corpus: Corpus, X: np.ndarray, embedder: Embedder | None,
                progress: bool = False, batch_size: int = 64, late: Callable[[], LateTexts | None] | None = None,
                work_dir: Path | None = None, first_row: int = 0) -> np.ndarray:
    """Embeddings of ``texts`` (distinct: :class:`Extraction` stores each text once) as
    :data:`TEXT_EMB_DTYPE` [U, d] (in :func:`text_embedding_rows`: in ``work_dir`` when given);
    passage embedding texts reuse rows of X. ``late`` (a function giving the texts' late-chunked
    embeddings, :mod:`hopgraph.engine.components.late_pooling`, or None when the embedder cannot give them)
    supplies the others it can; what is left is embedded on its own, :data:`TEXT_BLOCK_ROWS` texts at
    a time, padding-free in length order (:func:`~hopgraph.engine.embedders.packed_bert.encode_bulk`).
    Only the passages from ``first_row`` on are read for texts equal to theirs (an add's new texts:
    the earlier passages are not decoded)."""
    row_of = {t: i + first_row for i, t in enumerate(corpus.embedding_texts(first_row))}
    rows = np.fromiter((row_of.get(t, -1) for t in texts), np.int64, len(texts))
    del row_of
    out = text_embedding_rows(len(texts), X.shape[1], work_dir)
    have = np.flatnonzero(rows >= 0)
    for a in range(0, len(have), TEXT_BLOCK_ROWS):
        out[have[a:a + TEXT_BLOCK_ROWS]] = X[rows[have[a:a + TEXT_BLOCK_ROWS]]]
        release_pages(out)
    todo = rows < 0
    if todo.any() and embedder is None:
        raise InputError("STITCH needs an embedder to embed topic and entity descriptions")
    pooled = late() if late is not None and todo.any() else None
    if pooled is not None:
        use = pooled.ok & todo[pooled.spans.text]
        if pooled.emb.shape[1] != X.shape[1]:
            raise InputError(f"late-chunked texts have dimension {pooled.emb.shape[1]}, the passages {X.shape[1]}")
        out[pooled.spans.text[use]] = pooled.emb[use]
        todo[pooled.spans.text[use]] = False
        release_pages(out)
    todo = np.flatnonzero(todo)
    blocks = range(0, len(todo), TEXT_BLOCK_ROWS)
    for a in tqdm(blocks, desc="embed topics/descriptions", unit="block", disable=not progress or len(blocks) < 2):
        part = todo[a:a + TEXT_BLOCK_ROWS]
        emb = encode_bulk(embedder, [texts[i] for i in part], batch_size, progress and len(blocks) < 2,
                          "embed topics/descriptions")
        if emb.shape[1] != X.shape[1]:
            raise InputError(f"embedder {embedder.name} has dimension {emb.shape[1]}, the passages {X.shape[1]}")
        out[part] = validate_embeddings(emb, "topic/description embeddings")
        release_pages(out)
    return out


def extend_text_embeddings(old_emb: np.ndarray, texts: list[str], corpus: Corpus, X: np.ndarray,
                           embedder: Embedder | None, progress: bool = False, batch_size: int = 64,
                           late: Callable[[int], LateTexts | None] | None = None, first_row: int = 0
                           ) -> np.ndarray:
    """Embeddings of ``texts`` (the texts of an extraction grown by
    :func:`~hopgraph.engine.components.extraction.extend_extraction`, whose first ``len(old_emb)`` are the
    texts ``old_emb`` embeds, by id): the old rows are kept and only the texts after them (first
    used by the passages from ``first_row`` on) are embedded, by :func:`embed_texts`' rules (a text equal to a passage's embedding text, e.g. a new
    title state's description, reuses that passage's row of X; ``late(first_text)`` gives the
    late-chunked embeddings of the texts from ``first_text`` on). A zero-width ``old_emb`` (a
    pipeline that needs no text embeddings) gives zero-width rows."""
    U = len(old_emb)
    if len(texts) < U:
        raise InputError(f"{len(texts)} extraction texts, fewer than the {U} already embedded")
    if old_emb.shape[1] == 0:
        return np.zeros((len(texts), 0), TEXT_EMB_DTYPE)
    if read_by_rows(old_emb):  # the old rows stay where they are held, the new ones are held here
        return old_emb if len(texts) == U else with_rows_appended(
            old_emb, as_text_embeddings(embed_texts(texts[U:], corpus, X, embedder, progress, batch_size,
                                                    None if late is None else (lambda: late(U)),
                                                    first_row=first_row)))
    old = as_text_embeddings(old_emb)
    if len(texts) == U:
        return np.array(old) if isinstance(old, np.memmap) else old
    new = embed_texts(texts[U:], corpus, X, embedder, progress, batch_size,
                      None if late is None else (lambda: late(U)), first_row=first_row)
    return np.concatenate([old, new])


def build_hypergraph(ex: Extraction, text_emb: np.ndarray, max_group_chunks: int = 64) -> TopicHypergraph:
    """Assemble the index arrays from an extraction and the embeddings of ``ex.texts``."""
    ex.validate()
    if len(text_emb) != len(ex.texts):
        raise InputError(f"{len(text_emb)} text embeddings for {len(ex.texts)} extraction texts")
    if max_group_chunks < 2:
        raise InputError(f"max_group_chunks must be >= 2, got {max_group_chunks}")
    N, V, T = ex.n_chunks, ex.n_nodes, ex.n_topics
    # nodes sorted by chunk (Extraction guarantees it: states are keyed chunk-major)
    if V and (np.diff(ex.node_chunk) < 0).any():
        raise InputError("extraction nodes must be sorted by chunk")
    # groups: only names that have a state
    used, node_group = np.unique(ex.node_name, return_inverse=True)
    node_group = node_group.astype(np.int64)
    G = len(used)
    group_size = np.bincount(node_group, minlength=G).astype(np.int32)
    group_indptr, group_nodes = csr_from_keys(node_group, G)
    names = [ex.names[i] for i in used.tolist()]
    # incidence CSR both ways (mentions are sorted by topic then node)
    edge_indptr = np.zeros(T + 1, np.int64)
    np.cumsum(np.bincount(ex.mention_topic, minlength=T), out=edge_indptr[1:])
    node_indptr, node_incidence = csr_from_keys(ex.mention_node.astype(np.int64), V)
    # φ-induced chunk graph: pairs of chunks sharing a (small enough) group
    P = column_stochastic(chunk_links(group_indptr, ex.node_chunk[group_nodes], N, max_group_chunks).to_scipy())
    names_data, names_offsets = pack_strings(names)
    return TopicHypergraph(
        n_chunks=N,
        node_chunk=ex.node_chunk.astype(np.int32),
        node_group=node_group.astype(np.int32),
        node_text=ex.node_text.astype(np.int32),
        group_size=group_size,
        group_indptr=group_indptr,
        group_nodes=group_nodes.astype(np.int32),
        edge_text=ex.topic_text.astype(np.int32),
        edge_indptr=edge_indptr,
        edge_nodes=ex.mention_node.astype(np.int32),
        node_indptr=node_indptr,
        node_incidence=node_incidence.astype(np.int32),
        graph_indptr=P.indptr.astype(np.int64),
        graph_indices=P.indices.astype(np.int32),
        graph_data=P.data.astype(np.float32),
        text_emb=as_text_embeddings(text_emb),  # [U, 0] when no pipeline step needs them
        names_data=names_data,
        names_offsets=names_offsets,
    )

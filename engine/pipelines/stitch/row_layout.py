"""The topic hypergraph's states, hyperedges and groups as rows a graph store keeps by reference.

When the index's graph store keeps rows by reference (their entries held elsewhere and read by
rows, :mod:`hopgraph.engine.graphs.store`), the hypergraph saves its per-state arrays as the
columns of one ``[V, 3]`` int32 row matrix (:data:`NODE_COLUMNS`), the hyperedges' texts as a
``[T, 1]`` one, and its CSRs without values (:data:`ROW_CSRS`, plus the text → states CSR
:data:`TEXT_STATES`) as graphs; its text embeddings come with the flags of which texts were some
state's description when they were stored (:data:`TEXT_MASK`, and :data:`TEXT_FLIPS`: the texts
whose flag changed since). A search reads the rows it reaches; :class:`ReferencedTextIndex`
searches the text embeddings where their rows are held. After an add, :func:`keep_state_rows`
keeps the stored rows and holds the changed and appended ones beside them.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ....kernels.csr import CSR
from ...errors import IndexFormatError
from ...graphs.remote import AppendedRows, MatrixColumn, matrix_topk, with_rows_appended
from ...graphs.store import NODE_ROWS, GraphStore
from ...ranking import PAD_ID, merge_topk, topk_rows
from ...sparse import csr_from_keys
from ...storage import check_ids, load_array, save_arrays

if TYPE_CHECKING:
    from .hypergraph import TopicHypergraph

#: the per-state arrays, kept as the columns of one [V, 3] int32 row matrix (``node_columns``)
NODE_COLUMNS = ("node_chunk", "node_group", "node_text")
#: the hypergraph's CSRs (no values) kept by reference, by save prefix: (row pointer, entries)
ROW_CSRS = {"group_": ("group_indptr", "group_nodes"), "edge_": ("edge_indptr", "edge_nodes"),
            "node_": ("node_indptr", "node_incidence")}
#: the text → states CSR, saved with the rows kept by reference (else derived from node_text)
TEXT_STATES = "text_"
#: the fields kept by reference with the states (not saved as ``.npy`` files then)
ROW_FIELDS = NODE_COLUMNS + ("edge_text",) + tuple(f for pair in ROW_CSRS.values() for f in pair)
#: beside text embeddings kept by reference: which of their texts were some state's description
#: when they were stored ([U, 1] uint8, kept with them: their top-k is searched among those) and
#: the texts whose flag changed since (held whole)
TEXT_MASK, TEXT_FLIPS = "text_node_mask", "text_mask_flips"


def whole_row_graphs(H: "TopicHypergraph") -> dict[str, tuple]:
    """The CSRs :func:`save_rows` saves, from the whole arrays (entries only: uint8 zero values)."""
    n_cols = {"group_": H.n_nodes, "edge_": H.n_nodes, "node_": len(H.edge_nodes)}
    out: dict[str, tuple] = {}
    for prefix, (ptr, entries) in ROW_CSRS.items():
        ind = np.asarray(getattr(H, entries))
        out[prefix] = (np.asarray(getattr(H, ptr), np.int64), ind, np.zeros(len(ind), np.uint8), n_cols[prefix])
    ptr, nodes = csr_from_keys(np.asarray(H.node_text, np.int64), len(H.text_emb))
    out[TEXT_STATES] = (ptr, nodes.astype(np.int32), np.zeros(len(nodes), np.uint8), H.n_nodes)
    return out


def save_rows(H: "TopicHypergraph", directory: Path, store: GraphStore) -> None:
    """The states' arrays, the hyperedges' texts, the CSRs of :data:`ROW_CSRS` and the text →
    states CSR through ``store``, by reference (module docstring)."""
    if H.rows_by_reference:
        store.save_matrix(directory, "node_columns", H.node_chunk.matrix)
        store.save_matrix(directory, "edge_text", H.edge_text.matrix)
        if not isinstance(H.node_group, MatrixColumn):  # renumbered by an add: held whole
            save_arrays(directory, {"node_group": np.asarray(H.node_group)})
    else:
        store.save_matrix(directory, "node_columns",
                          np.stack([np.asarray(getattr(H, n), np.int32) for n in NODE_COLUMNS], axis=1), NODE_ROWS)
        store.save_matrix(directory, "edge_text", np.asarray(H.edge_text, np.int32)[:, None], NODE_ROWS)
    for prefix, graph in (H._row_graphs or whole_row_graphs(H)).items():
        store.save_graph(directory, prefix, graph, NODE_ROWS)


def load_rows(directory: Path, arrays: dict[str, Any], store: GraphStore) -> dict[str, Any]:
    """What :func:`save_rows` wrote, into ``arrays`` (the fields of :data:`ROW_FIELDS`); returns the
    CSRs by prefix (IndexFormatError when their shapes do not fit)."""
    nodes, edge_text = store.load_matrix(directory, "node_columns"), store.load_matrix(directory, "edge_text")
    V, T, G = nodes.shape[0], edge_text.shape[0], len(arrays["group_size"])
    if nodes.shape[1] != len(NODE_COLUMNS) or edge_text.shape[1] != 1:
        raise IndexFormatError(f"{directory}: node_columns / edge_text of shapes {nodes.shape}, {edge_text.shape}")
    arrays.update({n: MatrixColumn(nodes, i) for i, n in enumerate(NODE_COLUMNS)}, edge_text=MatrixColumn(edge_text, 0))
    if (directory / "node_group.npy").is_file():  # held whole since an add renumbered the groups
        arrays["node_group"] = check_ids(load_array(directory, "node_group"), G, str(directory / "node_group.npy"), V)
    edge = store.load_graph(directory, "edge_", V, f"{directory} hyperedges")
    rows = {"group_": (G, V), "edge_": (T, V), "node_": (V, edge.nnz), TEXT_STATES: (None, V)}
    graphs = {p: edge if p == "edge_" else store.load_graph(directory, p, n_cols, f"{directory} {p}rows")
              for p, (_, n_cols) in rows.items()}
    for p, (n_rows, _) in rows.items():
        if n_rows is not None and graphs[p].n_rows != n_rows:
            raise IndexFormatError(f"{directory}: {p}rows has {graphs[p].n_rows} rows, expected {n_rows}")
    for p, (ptr, entries) in ROW_CSRS.items():
        arrays[ptr], arrays[entries] = graphs[p].indptr, graphs[p].indices
    return graphs


def save_text_flags(H: "TopicHypergraph", directory: Path, store: GraphStore) -> None:
    """The description flags of text embeddings saved by reference (:data:`TEXT_MASK`, through
    ``store``) and the texts whose flag changed since (:data:`TEXT_FLIPS`)."""
    mask = H._text_mask if H._text_mask is not None else H.node_text_mask()[:, None].astype(np.uint8)
    store.save_matrix(directory, TEXT_MASK, mask, NODE_ROWS)
    save_arrays(directory, {TEXT_FLIPS: H._text_flips if H._text_flips is not None else np.zeros(0, np.int64)})


def load_text_flags(H: "TopicHypergraph", directory: Path, store: GraphStore) -> None:
    """What :func:`save_text_flags` wrote, into ``H`` (IndexFormatError when the shapes do not fit)."""
    H._text_mask = store.load_matrix(directory, TEXT_MASK)
    U0 = len(getattr(H.text_emb, "base", H.text_emb))
    if H._text_mask.shape != (U0, 1):
        raise IndexFormatError(f"{directory / TEXT_MASK}: shape {H._text_mask.shape}, expected {(U0, 1)}")
    H._text_flips = check_ids(load_array(directory, TEXT_FLIPS, mmap=False), U0, str(directory / f"{TEXT_FLIPS}.npy"))


def keep_text_flags(new: "TopicHypergraph", old: "TopicHypergraph") -> None:
    """``old``'s stored description flags in ``new``, with the texts whose flag differs now."""
    U0 = old._text_mask.shape[0]
    was = old.node_text_mask()[:U0]
    was[old._text_flips] ^= True  # the flags as stored
    new._text_mask, new._text_flips = old._text_mask, np.flatnonzero(new.node_text_mask()[:U0] != was)


def keep_state_rows(new: "TopicHypergraph", old: "TopicHypergraph", store: GraphStore) -> None:
    """The states' chunks and texts, the hyperedges' texts and the hyperedge, incidence and text →
    states CSRs of ``new`` as ``old``'s stored rows plus the rows changed or appended since, when
    ``old``'s are kept by reference: the extraction grew by appending, so ``old``'s states,
    hyperedges and incidences are the first ones, unchanged, and the text rows that change are
    those of the texts that gained a state. The name groups are renumbered (names are kept
    sorted), so ``node_group`` and the group CSR are held whole from then on."""
    if not old.rows_by_reference or not isinstance(new.node_chunk, np.ndarray):
        return
    V0, T0 = old.n_nodes, old.n_edges
    if not np.array_equal(np.asarray(new.edge_indptr[:T0 + 1]), np.asarray(old.edge_indptr)) or \
            not np.array_equal(np.asarray(new.node_indptr[:V0 + 1]), np.asarray(old.node_indptr)):
        return  # not grown by appending (never from extend_extraction): held whole
    texts = np.asarray(new.node_text[V0:], np.int64)
    changed = {"edge_": np.zeros(0, np.int64), "node_": np.zeros(0, np.int64),
               TEXT_STATES: np.unique(texts[texts < len(old.text_emb)])}
    graphs: dict[str, Any] = {}
    for prefix, whole in whole_row_graphs(new).items():
        graphs[prefix] = CSR(*whole) if prefix == "group_" else \
            store.keep_rows(old._row_graphs[prefix], CSR(*whole), lambda p=prefix: changed[p])
    nodes = with_rows_appended(old.node_chunk.matrix,
                               np.stack([np.asarray(getattr(new, n)[V0:], np.int32) for n in NODE_COLUMNS], axis=1))
    edge_text = with_rows_appended(old.edge_text.matrix, np.asarray(new.edge_text[T0:], np.int32)[:, None])
    for i, name in enumerate(NODE_COLUMNS):
        if name != "node_group":  # held whole (renumbered); its stored column is not read
            setattr(new, name, MatrixColumn(nodes, i))
    new.edge_text = MatrixColumn(edge_text, 0)
    for prefix, (ptr, entries) in ROW_CSRS.items():
        setattr(new, ptr, graphs[prefix].indptr)
        setattr(new, entries, graphs[prefix].indices)
    new._row_graphs = graphs


class ReferencedTextIndex:
    """Exact cosine top-k over text embeddings saved by reference: each holder of their rows
    searches its rows that were descriptions when stored
    (:func:`~hopgraph.engine.graphs.remote.matrix_topk`), except the rows whose flag changed since,
    merged with the top-k over the rows flagged since and the rows appended since (their
    embeddings gathered). Equal to the single index's exact search (ties toward the lower row)."""

    method = "exact"

    def __init__(self, H: "TopicHypergraph") -> None:
        self.H = H

    def topk(self, Q: np.ndarray, k: int, mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` texts per question among ``mask`` (bool [U]; None: every text): ids, scores."""
        H, Q = self.H, np.ascontiguousarray(Q, np.float32)
        emb = H.text_emb
        base = emb.base if isinstance(emb, AppendedRows) else emb
        U0 = base.shape[0]
        now = np.ones(len(emb), bool) if mask is None else np.asarray(mask, bool)
        flips = H._text_flips
        extra = np.concatenate([flips[now[flips]], U0 + np.flatnonzero(now[U0:])]).astype(np.int64)
        parts = [matrix_topk(base, H._text_mask, Q, k, flips[~now[flips]])]
        if len(extra):
            cols, scores = topk_rows(Q @ np.asarray(emb.take(extra), np.float32).T, min(k, len(extra)))
            parts.append((np.where(cols >= 0, extra[np.maximum(cols, 0)], PAD_ID), scores))
        return merge_topk(parts, k, len(Q))

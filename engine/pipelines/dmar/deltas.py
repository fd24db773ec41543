"""DMAR's state after a live add, stored as a delta of the state before it (a segment's ``dmar`` or
``hop`` folder): the subgraph embeddings of the entities that are new or were encoded again, by
entity name, and the encoder and gate weights when they changed. The knowledge graph is arithmetic
on the extraction and is rebuilt when the index is opened (SPEC §3 offline steps)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ...errors import IndexFormatError
from ...storage import check_unit_rows, load_arrays, pack_strings, unpack_strings
from .gate import Gate
from .gnn import encoder_arrays, encoder_from_arrays
from .knowledge_graph import KnowledgeGraph

#: a fitted state: knowledge graph, encoder, subgraph embeddings, gate
State = tuple[KnowledgeGraph, Any, Any, Gate]


def delta_arrays(state: State, since: tuple[KnowledgeGraph, Any, dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The arrays of ``state``'s delta over ``since`` (``(knowledge graph, subgraph embeddings,
    weights)`` of the snapshot): the rows of the entities whose embedding is new or changed, their
    names (``emb_names_*``, ``emb_rows``), and every weight when one changed."""
    kg, encoder, emb, gate = state
    old_kg, old_emb, old_weights = since
    emb = np.asarray(emb)
    ids = old_kg.name_ids
    pos = np.fromiter((ids.get(n, -1) for n in kg.names), np.int64, kg.n_entities)
    old_emb = np.asarray(old_emb)
    same = pos >= 0
    same[same] = (old_emb[pos[same]] == emb[same]).all(axis=1)
    rows = np.flatnonzero(~same)
    blob, offsets = pack_strings([kg.names[i] for i in rows.tolist()])
    arrays = {"emb_names_blob": blob, "emb_names_offsets": offsets, "emb_rows": emb[rows]}
    weights = {**encoder_arrays(encoder), **gate.arrays()}
    if weights.keys() != old_weights.keys() or any(not np.array_equal(v, old_weights[k]) for k, v in weights.items()):
        arrays.update(weights)
    return arrays


def read_deltas(parts: Sequence[tuple[Path, int]], base: State, build_kg: Callable[[], KnowledgeGraph]) -> State:
    """The state after the deltas in the folders ``parts`` (in order) over ``base``: the knowledge
    graph ``build_kg()`` builds from the index's (extended) extraction; each entity's subgraph
    embedding the last one stored under its name (the deltas in order, then ``base``); the last
    encoder and gate weights stored. IndexFormatError when an entity has no embedding."""
    kg0, encoder, emb0, gate = base
    sources: list[np.ndarray] = [np.asarray(emb0)]
    where: dict[str, tuple[int, int]] = {n: (0, i) for i, n in enumerate(kg0.names)}
    d_out = sources[0].shape[1]
    for d, _ in parts:
        names = sorted(p.stem for p in d.glob("*.npy"))
        weights = [n for n in names if n.startswith(("gnn.", "gate."))]
        a = load_arrays(d, ["emb_names_blob", "emb_names_offsets", "emb_rows", *weights])
        emb_names = unpack_strings(a["emb_names_blob"], a["emb_names_offsets"], f"{d} emb_names")
        rows = check_unit_rows(a["emb_rows"], str(d / "emb_rows.npy"), rows=len(emb_names), dim=d_out,
                               allow_zero=True)
        sources.append(np.asarray(rows))
        for i, n in enumerate(emb_names):
            where[n] = (len(sources) - 1, i)
        if weights:
            encoder, gate = encoder_from_arrays(a), Gate.from_arrays(a)
    kg = build_kg()
    missing = [n for n in kg.names if n not in where]
    if missing:
        raise IndexFormatError(f"{parts[-1][0]}: no subgraph embedding stored for entity {missing[0]!r}")
    emb = np.empty((kg.n_entities, d_out), np.float32)
    for i, n in enumerate(kg.names):
        k, j = where[n]
        emb[i] = sources[k][j]
    return kg, encoder, emb, gate

"""``ppr_binary``: SPEC §2's binary-seed baseline (HippoRAG / LinearRAG) on STITCH's chunk graph.

The prior is 1 on the chunks holding a state whose canonical name occurs in the question (word n-gram
match of φ(question) against the name vocabulary), normalised; a question matching no name falls back
to its ``n_seeds`` most relevant chunks. The walk and ranking are STITCH's (:mod:`.walk`). No text
embeddings are kept. Where the index's graph store holds the name groups' states, their chunks and
the walk on the device, the prior is made there from the matched (question, name) pairs
(:func:`binary_prior_tensors`) and stays there for the walk.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ....kernels.tensors import as_tensor
from ...components.extraction import Extraction, query_names
from ...components.query_batch import QueryBatch
from ...graphs.store import device_arrays
from ...sparse import row_entries, row_positions_tensors
from . import device_walk
from .device_walk import DeviceRows
from .local_rows import LocalRows
from .walk import ChunkGraphFit, ChunkGraphWalk, WalkSearch, on_host, top_k_distribution

#: the hypergraph arrays the prior reads on the device: each name group's states and each state's chunk
PRIOR_ARRAYS = ("group_indptr", "group_nodes", "node_chunk")


class PPRBinary(ChunkGraphWalk[ChunkGraphFit, WalkSearch]):
    """Binary entity-match prior + PPR on the STITCH chunk graph (published behaviour: no prior
    mixing, dense relevance, ``n_seeds`` 8 for the fallback)."""

    name = "ppr_binary"
    ablations = {"ppr=False": {"ppr": False}, "localise=False": {"localise": False}, "balance=0": {"balance": 0.0}}

    def _text_embeddings(self, ex: Extraction, progress: bool, old: np.ndarray | None = None,
                         first_row: int = 0) -> np.ndarray:
        """None needed: the binary prior never looks at topic or description embeddings."""
        return np.zeros((len(ex.texts), 0), np.float16)

    def _text_dim(self) -> int:
        return 0

    def resident_prior(self) -> bool:
        """:meth:`~.walk.ChunkGraphWalk.resident_prior`: and the name groups' arrays held there."""
        return self._held_prior() is not None and super().resident_prior()

    def _held_prior(self) -> dict[str, Any] | None:
        """The arrays of :data:`PRIOR_ARRAYS` as tensors where the index's graph store holds them on
        the device (each copied once), else None."""
        if "held prior" not in self._cache:
            self._cache["held prior"] = {key: self.components.graphs.hold(getattr(self.hypergraph_, key),
                                                                          f"{self.name} {key}")
                                         for key in PRIOR_ARRAYS}
        tensors = {key: device_arrays(value) for key, value in self._cache["held prior"].items()}
        return None if any(t is None for t in tensors.values()) else tensors

    def _matched(self, batch: QueryBatch) -> tuple[np.ndarray, np.ndarray]:
        """The (batch row, name group) pairs of the names each question mentions (int64)."""
        H = self.hypergraph_
        if "name_ids" not in self._cache:
            self._cache["name_ids"] = {n: i for i, n in enumerate(H.names())}
        matched = query_names(batch.texts, self._cache["name_ids"])
        rows = np.repeat(np.arange(len(batch.texts)), [len(m) for m in matched]).astype(np.int64)
        groups = np.concatenate(matched).astype(np.int64) if matched else np.zeros(0, np.int64)
        return rows, groups

    def prior_rows(self, batch: QueryBatch, rel: LocalRows | DeviceRows, params: WalkSearch
                   ) -> tuple[LocalRows | DeviceRows, np.ndarray | torch.Tensor]:
        """p = 1 on chunks holding a state of a name the question mentions (normalised; the chunks read
        from the matched name groups' rows only); questions with no match fall back to the ``seed_k``
        most relevant chunks. Made on the device (:func:`binary_prior_tensors`) where
        :meth:`resident_prior` and the relevance is there."""
        H = self.hypergraph_
        rows, groups = self._matched(batch)
        held = self._held_prior() if isinstance(rel, DeviceRows) else None
        if held is not None:
            return binary_prior_tensors(held, rows, groups, rel, params.n_seeds)
        rel = on_host(rel)
        texts = batch.texts
        seg, nodes = row_entries(H.group_indptr, H.group_nodes, groups)  # the matched groups' states
        q, c = rows[seg], np.asarray(H.node_chunk[nodes], np.int64)
        p = LocalRows.from_entries(q, c, 1.0, len(texts), H.n_chunks).on(np.union1d(np.unique(c), rel.cols))
        values = p.values
        none = values.sum(1) == 0
        if none.any():
            values[none] = top_k_distribution(rel.on(p.cols).values[none], params.n_seeds, p.n)
        s = values.sum(1, keepdims=True)
        return p.with_values(np.divide(values, s, out=np.zeros_like(values), where=s > 0)), s[:, 0] <= 0


def binary_prior_tensors(held: dict[str, torch.Tensor], rows: np.ndarray, groups: np.ndarray, rel: DeviceRows,
                         n_seeds: int) -> tuple[DeviceRows, torch.Tensor]:
    """:meth:`PPRBinary.prior_rows` on the device: the matched (batch row, name group) pairs go in,
    their groups' states and chunks are read from the held arrays ``held`` (:data:`PRIOR_ARRAYS`),
    rows without a match take the relevance ``rel``'s ``n_seeds`` best chunks
    (:func:`~.device_walk.top_k_distribution`); each row is normalised there. Returns the prior
    and the rows without mass (bool [B] on the device, as :func:`~.device_walk.normalised`)."""
    dev = rel.values.device
    q, g = as_tensor(np.stack([rows, groups]), device=dev, name="matched (question, name) pairs")
    seg, pos = row_positions_tensors(held["group_indptr"], g)
    chunks = held["node_chunk"][held["group_nodes"][pos].to(torch.int64)].to(torch.int64)
    cols = torch.unique(torch.cat([chunks, rel.cols]))
    values = torch.zeros((len(rel), len(cols)), dtype=torch.float64, device=dev)
    values[q[seg], torch.searchsorted(cols, chunks)] = 1.0
    seeds = device_walk.top_k_distribution(rel.on(cols).values.to(torch.float64), n_seeds, rel.n)
    values = torch.where((values.sum(1) == 0)[:, None], seeds, values)
    return device_walk.normalised(DeviceRows(cols, values, rel.n))

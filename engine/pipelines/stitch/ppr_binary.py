"""``ppr_binary``: SPEC §2's binary-seed baseline (HippoRAG / LinearRAG) on STITCH's chunk graph.

The prior is 1 on the chunks holding a state whose canonical name occurs in the question (word n-gram
match of φ(question) against the name vocabulary), normalised; a question matching no name falls back
to its ``n_seeds`` most relevant chunks. The walk and ranking are STITCH's (:mod:`.walk`). No text
embeddings are kept.
"""
from __future__ import annotations

import numpy as np

from ...components.extraction import Extraction, query_names
from ...components.query_batch import QueryBatch
from ...sparse import row_entries
from .local_rows import LocalRows
from .walk import ChunkGraphFit, ChunkGraphWalk, WalkSearch, top_k_distribution


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

    def prior_rows(self, batch: QueryBatch, rel: LocalRows, params: WalkSearch) -> tuple[LocalRows, np.ndarray]:
        """p = 1 on chunks holding a state of a name the question mentions (normalised; the chunks read
        from the matched name groups' rows only); questions with no match fall back to the ``seed_k``
        most relevant chunks."""
        H = self.hypergraph_
        if "name_ids" not in self._cache:
            self._cache["name_ids"] = {n: i for i, n in enumerate(H.names())}
        texts = batch.texts
        matched = query_names(texts, self._cache["name_ids"])
        rows = np.repeat(np.arange(len(texts)), [len(m) for m in matched])
        groups = np.concatenate(matched).astype(np.int64) if matched else np.zeros(0, np.int64)
        seg, nodes = row_entries(H.group_indptr, H.group_nodes, groups)  # the matched groups' states
        q, c = rows[seg], np.asarray(H.node_chunk[nodes], np.int64)
        p = LocalRows.from_entries(q, c, 1.0, len(texts), H.n_chunks).on(np.union1d(np.unique(c), rel.cols))
        values = p.values
        none = values.sum(1) == 0
        if none.any():
            values[none] = top_k_distribution(rel.on(p.cols).values[none], params.n_seeds, p.n)
        s = values.sum(1, keepdims=True)
        return p.with_values(np.divide(values, s, out=np.zeros_like(values), where=s > 0)), s[:, 0] <= 0

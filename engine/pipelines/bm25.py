"""BM25 baseline: the shared BM25 component (bm25s, Lucene variant, English stop words by default;
:mod:`hopgraph.engine.components.bm25`). Its fit parameters are the index's BM25 parameters, which
every pipeline that uses BM25 shares; a pipeline fitted with other values gets its own BM25 index.

The passages sharing a term with the question come first, by BM25 score (ties toward the lower
id); when fewer than ``k`` do, the list is completed with the lowest allowed ids among the others,
score 0 (as a sort of every passage's score, zeros included, would rank them), so ``k`` results
come back whenever ``k`` passages pass the filter."""
from __future__ import annotations

import numpy as np

from ...kernels.tensors import as_numpy
from ..components.bm25 import BM25Params
from ..components.device_bm25 import DeviceBM25
from ..components.query_batch import QueryBatch
from ..cost import PASSAGE_ARRAYS, Cost, IndexShape
from ..params import SearchParams
from ..ranking import fill_lowest
from ..timing import StageTimer
from .base import Needs, Pipeline

BM25Search = SearchParams.none_for("bm25", "BM25Search", __name__)


class BM25(Pipeline):
    """Lexical top-k over ``"title: text"`` of each passage (zero-score tail: module docstring)."""

    name = "bm25"
    FitParams = BM25Params
    SearchParams = BM25Search
    needs = Needs(corpus=True, query_texts=True)
    components_used = ("bm25",)
    stages = ("tokenize", "bm25")

    def _fit(self, progress: bool) -> None:
        self.components.bm25(self.fit_params, who=self.name)

    @classmethod
    def cost(cls, shape: IndexShape, params: BM25Search, batch: int, k: int, grouped: bool = False) -> Cost:
        """:meth:`Pipeline.cost`: the postings (``n`` per question) read instead of the dense scan,
        and the per-passage score arrays."""
        n, depth = max(shape.n, 1), cls.cost_depth(shape, params, k, grouped)
        lists = super().cost(shape, params, batch, k, grouped)
        return Cost(batch * (n + depth), lists.memory + PASSAGE_ARRAYS * n)

    def _search_batch(self, batch: QueryBatch, k: int, params: BM25Search, timer: StageTimer
                      ) -> tuple[np.ndarray, np.ndarray]:
        bm25 = self.components.bm25(self.fit_params, who=self.name)
        with timer("tokenize"):
            tokens = bm25.tokenize(batch.texts)
        with timer("bm25"):
            resident = DeviceBM25.of(bm25, self.components.graphs) if batch.device is not None else None
            if resident is None:
                ids, scores = bm25.topk(tokens, k, batch.allowed)
            else:  # the postings held on the device: the query side in, ids and scores out
                ids_t, scores_t = resident.topk(resident.query(tokens), k, batch.allowed_tensor())
                ids, scores = as_numpy(ids_t), as_numpy(scores_t)
            return fill_lowest(ids, scores, batch.allowed, len(self.components.X))

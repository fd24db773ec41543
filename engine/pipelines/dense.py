"""Dense baseline: cosine top-k over the passage embeddings (the shared dense component,
:class:`~hopgraph.engine.components.dense.DenseIndex`: faiss exact inner product, or IVF candidates
rescored exactly at scale)."""
from __future__ import annotations

import numpy as np

from ..components.query_batch import QueryBatch
from ..params import FitParams, SearchParams
from ..timing import StageTimer
from .base import Pipeline

DenseFit = FitParams.none_for("dense", "DenseFit", __name__)
DenseSearch = SearchParams.none_for("dense", "DenseSearch", __name__)


class Dense(Pipeline):
    """Cosine-similarity top-k: the non-graph dense baseline. No parameters."""

    name = "dense"
    FitParams = DenseFit
    SearchParams = DenseSearch
    components_used = ("dense",)
    stages = ("dense",)

    def _fit(self, progress: bool) -> None:
        """Nothing of its own: the dense component is built on first search."""

    def _search_batch(self, batch: QueryBatch, k: int, params: DenseSearch, timer: StageTimer
                      ) -> tuple[np.ndarray, np.ndarray]:
        with timer("dense"):
            return batch.dense_topk(k)

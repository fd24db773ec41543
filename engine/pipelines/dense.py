"""Dense baseline: cosine top-k over the passage embeddings (the shared dense component,
:mod:`hopgraph.engine.components.dense`: faiss exact inner product, or a blocked file scan at scale)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..params import PipelineParams
from .base import Pipeline


@dataclass(frozen=True)
class DenseParams(PipelineParams):
    """The dense baseline has no parameters."""

    pipeline = "dense"


class Dense(Pipeline):
    """Cosine-similarity top-k: the non-graph dense baseline."""

    name = "dense"
    Params = DenseParams
    components_used = ("dense",)

    def _fit(self, progress: bool) -> None:
        """Nothing of its own: the dense component is built on first search."""

    def search(self, Q: np.ndarray, top_k: int = 5,
               query_texts: Sequence[str] | None = None, allowed: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        Q = self._check_queries(Q, top_k, query_texts)
        with self._timer()("dense"):
            return self.components.dense.topk(Q, top_k, self.components.allowed(allowed))

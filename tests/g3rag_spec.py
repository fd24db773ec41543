"""G3RAG's published query (SPEC §1 query steps 1-4) read from the SPEC, one question at a time, in
plain Python and float64: the reference the pipeline's batched, sparse masked scoring is checked
against. Nothing here is taken from the implementation.

SPEC §1 query: (1) seeds: the ``seed_k`` passages most similar to q; (2) p uniform over the seeds, one
diffusion step ``y = pᵀT`` with T = W row-normalised (index step 6: rows with zero sum stay zero);
(3) y on the seeds = −inf; (4) result = the seeds in similarity order, then the top diffused
passages, filled up to ``top_k`` with the next most similar passages. Each result carries the score it
was ranked by in its part (similarity for seeds and fill, y for diffused passages) and its part.
"""
from __future__ import annotations

import numpy as np

SEED, DIFFUSED, FILL = "seed", "diffused", "fill"


def result_list(seeds: list[tuple[int, float]], diffused: list[tuple[int, float]],
                fill: list[tuple[int, float]], top_k: int) -> list[tuple[int, float, str]]:
    """Step 4 from its three ranked parts ``[(passage, score), ...]``: the seeds, then the diffused
    passages, then the fill passages, a passage listed once (where it first comes), ``top_k`` at most."""
    out: list[tuple[int, float, str]] = []
    listed: set[int] = set()
    for part, tier in ((seeds, SEED), (diffused, DIFFUSED), (fill, FILL)):
        for j, score in part:
            if j not in listed:
                listed.add(j)
                out.append((j, score, tier))
    return out[:top_k]


def masked_query(X: np.ndarray, W: np.ndarray, q: np.ndarray, seed_k: int, top_k: int
                 ) -> list[tuple[int, float, str]]:
    """Steps 1-4 for one question ``q`` over passages ``X`` and the dense gain graph ``W`` [N, N]."""
    n = len(X)
    sim = X.astype(np.float64) @ q.astype(np.float64)
    by_similarity = sorted(range(n), key=lambda j: (-sim[j], j))
    seeds = by_similarity[:seed_k]
    sums = W.sum(axis=1, keepdims=True)
    T = np.divide(W, sums, out=np.zeros_like(W), where=sums > 0)
    p = np.zeros(n)
    p[seeds] = 1.0 / len(seeds)
    y = p @ T
    y[seeds] = -np.inf
    diffused = [j for j in sorted(range(n), key=lambda j: (-y[j], j)) if y[j] > 0]
    return result_list([(j, sim[j]) for j in seeds], [(j, y[j]) for j in diffused],
                       [(j, sim[j]) for j in by_similarity[seed_k:]], top_k)

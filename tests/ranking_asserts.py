"""What "a question's results never depend on its batch" means, as one assertion.

A question's top-k searched in a batch equals its top-k searched alone up to float near-ties: the
scores position by position within ``atol``, and the ids equal except among entries whose scores
lie within ``atol`` of each other (a tie run), which may come in another order, or, for the run at
the k-th cut, be other entries of the same score. Products of other widths (a batch's block
against a single question's) round differently in the last bits (MKL takes other kernels by width,
and which ones differs between CPUs), so exact ties can fall either way; nothing else may differ.
"""
from __future__ import annotations

import numpy as np


def tie_runs(scores: np.ndarray, atol: float) -> list[slice]:
    """The runs of consecutive positions of a ranked score row whose neighbours differ by ≤ atol."""
    with np.errstate(invalid="ignore"):  # -inf padding after -inf: NaN, no break (padding ties)
        breaks = np.flatnonzero(np.abs(np.diff(scores)) > atol) + 1
    edges = [0, *breaks.tolist(), len(scores)]
    return [slice(a, b) for a, b in zip(edges[:-1], edges[1:])]


def assert_same_up_to_ties(ids: np.ndarray, scores: np.ndarray, ref_ids: np.ndarray, ref_scores: np.ndarray,
                           atol: float, where: str = "") -> None:
    """One ranked row ``(ids, scores)`` equals ``(ref_ids, ref_scores)`` up to float near-ties
    (module docstring)."""
    np.testing.assert_allclose(scores, ref_scores, rtol=0, atol=atol, err_msg=where)
    runs = tie_runs(np.asarray(ref_scores, np.float64), atol)
    for run in runs[:-1]:  # every run but the one at the cut holds the same ids
        assert sorted(ids[run].tolist()) == sorted(ref_ids[run].tolist()), f"{where}: ids {ids} vs {ref_ids}"
    if np.array_equal(ids, ref_ids):
        return
    last = runs[-1]
    assert np.abs(np.asarray(scores[last], np.float64) - float(ref_scores[last.start])).max() <= 2 * atol, \
        f"{where}: ids {ids} vs {ref_ids} differ beyond a tie at the cut"

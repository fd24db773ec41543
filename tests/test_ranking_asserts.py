"""The near-tie comparison of batch-independence tests fails on anything but ties."""
from __future__ import annotations

import numpy as np
import pytest

from ranking_asserts import assert_same_up_to_ties

REF_IDS = np.array([7, 3, 5, 9, 1])
REF_SCORES = np.array([0.9, 0.5, 0.5 - 1e-7, 0.2, 0.1])


def test_equal_rows_and_swapped_ties_pass():
    assert_same_up_to_ties(REF_IDS, REF_SCORES, REF_IDS, REF_SCORES, 1e-5)
    assert_same_up_to_ties(np.array([7, 5, 3, 9, 1]), REF_SCORES, REF_IDS, REF_SCORES, 1e-5)
    cut = np.array([0.9, 0.5, 0.4, 0.1, 0.1 + 1e-7])  # a tie at the cut: another entry of the same score
    assert_same_up_to_ties(np.array([7, 3, 5, 9, 4]), cut, REF_IDS, cut, 1e-5)


@pytest.mark.parametrize("ids,scores", [
    (np.array([3, 7, 5, 9, 1]), REF_SCORES),  # a swap of entries that do not tie
    (np.array([7, 3, 5, 4, 1]), REF_SCORES),  # another entry above the cut
    (np.array([7, 3, 5, 9, 4]), np.array([0.9, 0.5, 0.5 - 1e-7, 0.2, 0.05])),  # another entry at the cut, no tie
    (REF_IDS, REF_SCORES + np.array([0, 0, 0, 1e-3, 0])),  # a score moved
])
def test_anything_but_a_tie_fails(ids, scores):
    with pytest.raises(AssertionError):
        assert_same_up_to_ties(ids, scores, REF_IDS, REF_SCORES, 1e-5)

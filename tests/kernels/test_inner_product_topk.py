"""``inner_product_topk`` against the NumPy reference (:func:`hopgraph.engine.ranking.topk_rows` on the
whole score matrix ``Q @ X.T``), bit for bit on integer-valued inputs (every product exact, so the two
paths compute the same floats): random and adversarial inputs — ties everywhere, k > N, no query, no
row, filters passing no row or a few, zero vectors, NaN (not a result), -0.0 against +0.0 — over every
block size and over X given in parts."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from hopgraph import kernels
from hopgraph.engine.ranking import topk_rows
from hopgraph.kernels.errors import InputError
from hopgraph.kernels.inner_product_topk import decoded, inner_product_topk, score_keys

from ranking_asserts import assert_same_up_to_ties


def reference(Q: np.ndarray, X: np.ndarray, k: int, allowed: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    S = (Q.astype(np.float32) @ X.astype(np.float32).T).astype(np.float32)
    if allowed is not None:
        S[:, ~allowed] = -np.inf
    return topk_rows(S, k)


def run(Q, X, k, allowed=None, **kw):
    parts = [torch.from_numpy(p) for p in X] if isinstance(X, list) else torch.from_numpy(X)
    ids, scores = kernels.inner_product_topk(torch.from_numpy(Q), parts, k,
                                             None if allowed is None else torch.from_numpy(allowed), device="cpu", **kw)
    assert ids.dtype == torch.int64 and scores.dtype == torch.float32 and ids.shape == scores.shape == (len(Q), k)
    return ids.numpy(), scores.numpy()


@pytest.mark.parametrize("seed", range(40))
def test_equals_the_numpy_reference_on_ties_filters_and_padding(seed):
    g = np.random.default_rng(seed)
    B, N, d = int(g.integers(0, 7)), int(g.integers(0, 60)), int(g.integers(1, 6))
    Q = g.integers(-2, 3, (B, d)).astype(np.float32)  # few distinct scores: ties everywhere
    X = g.integers(-2, 3, (N, d)).astype(np.float32)
    if N and seed % 3 == 0:
        X[g.integers(N)] = 0  # a zero vector
    if B and seed % 4 == 0:
        Q[g.integers(B)] = 0  # a question scoring 0 everywhere: its k lowest rows
    k = int(g.integers(1, 70))  # k > N often
    allowed = None if seed % 2 else g.random(N) < [0.0, 0.05, 0.5, 1.0][seed % 8 // 2]
    want = reference(Q, X, k, allowed)
    for block_rows in (None, 1, 3, 17):
        got = run(Q, X, k, allowed, block_rows=block_rows)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
    if N > 2:  # X in parts (the segments of an index): the same lists
        cut = sorted(g.choice(np.arange(1, N), 2, replace=False))
        got = run(Q, np.split(X, cut), k, allowed, block_rows=4)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])


def test_random_float_inputs_equal_the_reference_up_to_rounding(rng):
    Q = rng.standard_normal((33, 24)).astype(np.float32)
    X = rng.standard_normal((500, 24)).astype(np.float32)
    X[250:260] = X[100]  # duplicate rows: exact ties, toward the lower row
    ids, scores = run(Q, X, 25, block_rows=64)
    want_ids, want_scores = reference(Q, X, 25, None)
    np.testing.assert_allclose(scores, want_scores, rtol=0, atol=1e-5)
    assert (ids == want_ids).mean() > 0.95
    for b in range(len(Q)):  # the duplicates of row 100 come in row order
        dup = [i for i in ids[b] if i == 100 or 250 <= i < 260]
        assert dup == sorted(dup)


def test_nan_is_not_a_result_and_filters_passing_nothing_pad():
    Q = np.array([[1.0, 0.0], [np.nan, 1.0]], np.float32)
    X = np.array([[1.0, 0.0], [np.nan, 0.0], [0.5, 0.5], [0.0, 1.0]], np.float32)
    ids, scores = run(Q, X, 5)
    assert ids.tolist() == [[0, 2, 3, -1, -1], [-1] * 5]  # row 1 (NaN) never; a NaN question: nothing
    assert scores[0, :3].tolist() == [1.0, 0.5, 0.0] and np.isneginf(scores[0, 3:]).all()
    ids, scores = run(Q[:1], X, 3, np.zeros(4, bool))
    assert ids.tolist() == [[-1, -1, -1]] and np.isneginf(scores).all()
    ids, _ = run(Q[:1], X, 2, np.array([False, False, False, True]))
    assert ids.tolist() == [[3, -1]]


def test_no_query_no_row_and_half_precision_rows():
    X = np.eye(3, dtype=np.float32)
    assert run(np.zeros((0, 3), np.float32), X, 4)[0].shape == (0, 4)
    ids, scores = run(np.ones((2, 3), np.float32), np.zeros((0, 3), np.float32), 2)
    assert (ids == -1).all() and np.isneginf(scores).all()
    Q = np.array([[0.25, 1.0, 0.5]], np.float32)
    half = kernels.inner_product_topk(torch.from_numpy(Q), torch.from_numpy(X.astype(np.float16)), 3)
    assert half[0].tolist() == [[1, 2, 0]] and half[1].tolist() == [[1.0, 0.5, 0.25]]


def test_keys_order_scores_then_lower_rows_and_decode_bit_for_bit():
    s = torch.tensor([[-np.inf, -2.5, -0.0, 0.0, 1e-30, 3.0, np.inf, 3.0]], dtype=torch.float32)
    rows = torch.arange(8)[None, :]
    keys = score_keys(s, rows)
    order = torch.sort(keys, descending=True).indices[0].tolist()
    assert order == [6, 5, 7, 4, 2, 3, 1, 0]  # equal scores (3.0; -0.0 and 0.0) toward the lower row
    r, back = decoded(keys)
    assert r.tolist() == [[-1, 1, 2, 3, 4, 5, 6, 7]]
    assert torch.equal(back[:, 1:], torch.where(s == 0, 0.0, s)[:, 1:])


def test_bad_inputs_name_the_argument():
    Q, X = torch.ones((2, 3)), torch.ones((4, 3))
    with pytest.raises(InputError, match="inner_product_topk: k must be an integer >= 1"):
        inner_product_topk(Q, X, 0)
    with pytest.raises(InputError, match="X has 2 columns, the queries 3"):
        inner_product_topk(Q, torch.ones((4, 2)), 1)
    with pytest.raises(InputError, match="allowed must be a bool tensor"):
        inner_product_topk(Q, X, 1, torch.ones(3, dtype=torch.bool))
    with pytest.raises(InputError, match="Q must be a 2-D floating-point matrix"):
        inner_product_topk(torch.ones(3), X, 1)


def test_a_question_does_not_depend_on_its_batch(rng):
    Q = rng.standard_normal((17, 16)).astype(np.float32)
    X = rng.standard_normal((300, 16)).astype(np.float32)
    Q /= np.linalg.norm(Q, axis=1, keepdims=True)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    together = run(Q, X, 10)
    for b in (0, 7, 16):
        alone = run(Q[b:b + 1], X, 10)
        assert_same_up_to_ties(alone[0][0], alone[1][0], together[0][b], together[1][b], 1e-6, f"row {b}")

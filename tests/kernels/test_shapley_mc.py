"""Batched Monte Carlo Shapley (SPEC §3 step 2): convergence to exact enumeration, parity."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from hopgraph.kernels import call
from hopgraph.kernels.shapley_mc import coalition_value, shapley_exact, shapley_mc


def random_problem(B: int, G: int, U: int, C: int, seed: int = 0):
    g = np.random.default_rng(seed)
    sets = (g.random((B, G, U)) < 0.3).astype(np.float32)
    sets[:, np.arange(G), np.arange(G) % U] = 1.0  # every subgraph holds at least its centre
    n_sub = g.integers(1, G + 1, B)
    for b in range(B):
        sets[b, n_sub[b]:] = 0
    cand = (g.random((B, C, U)) < 0.4).astype(np.float32)
    best = g.random((B, C, G)).astype(np.float32)
    return [torch.from_numpy(a) for a in (sets, n_sub, cand, best)]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 6])
def test_converges_to_exact_enumeration(n):
    sets, _, cand, best = random_problem(1, n, 10, 3, seed=n)
    n_sub = torch.tensor([n])
    phi, score = shapley_mc(sets, n_sub, cand, best, lam=0.4, T=4000, seed=1)
    for c in range(3):
        exact = shapley_exact(sets[0].numpy(), cand[0, c].numpy(), best[0, c].numpy(), lam=0.4)
        np.testing.assert_allclose(phi[0, c].numpy(), exact, atol=0.01)
        assert score[0, c].item() == pytest.approx(exact.mean(), abs=0.01)


def test_error_shrinks_with_T():
    sets, _, cand, best = random_problem(1, 6, 12, 2, seed=7)
    n_sub = torch.tensor([6])
    exact = shapley_exact(sets[0].numpy(), cand[0, 0].numpy(), best[0, 0].numpy(), lam=0.5)
    errs = []
    for T in (10, 160, 2560):
        e = [np.abs(shapley_mc(sets, n_sub, cand, best, T=T, seed=s)[0][0, 0].numpy() - exact).mean()
             for s in range(5)]
        errs.append(np.mean(e))
    assert errs[0] > errs[1] > errs[2]


def test_shared_mode_mean_is_exact_by_efficiency():
    sets, _, cand, best = random_problem(1, 5, 9, 2, seed=3)
    n_sub = torch.tensor([5])
    _, score = shapley_mc(sets, n_sub, cand, best, T=3, seed=0, mode="shared")
    full = coalition_value(list(range(5)), sets[0].numpy(), cand[0, 1].numpy(), best[0, 1].numpy(), 0.5)
    assert score[0, 1].item() == pytest.approx(full / 5, abs=1e-5)


def test_seeded_and_batched_like_single_queries():
    sets, n_sub, cand, best = random_problem(4, 5, 16, 7, seed=2)
    a = shapley_mc(sets, n_sub, cand, best, seed=11)[1]
    b = shapley_mc(sets, n_sub, cand, best, seed=11)[1]
    assert torch.equal(a, b)
    assert not torch.equal(a, shapley_mc(sets, n_sub, cand, best, seed=12)[1])
    # padding rows carry no value; query without subgraphs scores 0
    n0 = n_sub.clone()
    n0[0] = 0
    phi, score = shapley_mc(sets, n0, cand, best)
    assert torch.all(score[0] == 0) and torch.all(phi[1, :, n_sub[1]:] == 0)


def test_bad_inputs_named():
    sets, n_sub, cand, best = random_problem(2, 3, 4, 5)
    with pytest.raises(ValueError, match="best_sim"):
        shapley_mc(sets, n_sub, cand, best[:, :, :2])
    with pytest.raises(ValueError, match="lam"):
        shapley_mc(sets, n_sub, cand, best, lam=2.0)
    with pytest.raises(ValueError, match="T"):
        shapley_mc(sets, n_sub, cand, best, T=0)


@pytest.mark.parametrize("case", ["random", "adversarial"])
def test_triton_parity(case):
    if case == "random":
        sets, n_sub, cand, best = random_problem(2, 5, 12, 3, seed=5)
    else:  # empty query, empty candidate node sets, zero similarities, G not a power of two
        sets, n_sub, cand, best = random_problem(3, 3, 5, 2, seed=6)
        n_sub[0] = 0
        cand[1] = 0
        best[2] = 0
    cpu = call("shapley_mc", sets, n_sub, cand, best, T=6, seed=4, device="cpu", backend="cpu")
    tri = call("shapley_mc", sets, n_sub, cand, best, T=6, seed=4, device="cpu", backend="triton")
    for x, y in zip(cpu, tri):
        np.testing.assert_allclose(x.numpy(), y.numpy(), atol=1e-5)


@pytest.mark.parametrize("G,U,C", [(32, 70, 3), (9, 150, 40)])
def test_triton_parity_wide_subgraph_sets_and_many_chunks(G, U, C):
    """G = 32 (the wide blocks), U over several node chunks, C over several candidate blocks."""
    sets, n_sub, cand, best = random_problem(2, G, U, C, seed=G)
    n_sub[0] = G
    cpu = call("shapley_mc", sets, n_sub, cand, best, T=3, seed=1, device="cpu", backend="cpu")
    tri = call("shapley_mc", sets, n_sub, cand, best, T=3, seed=1, device="cpu", backend="triton")
    for x, y in zip(cpu, tri):
        np.testing.assert_allclose(x.numpy(), y.numpy(), atol=1e-5)


@pytest.mark.parametrize("backend", ["cpu", "triton"])
@pytest.mark.parametrize("kwargs,words", [
    ({"lam": "0.5"}, "lam must be a number"), ({"lam": True}, "lam must be a number"),
    ({"T": 2.5}, "T .* must be an integer"), ({"T": "50"}, "T .* must be an integer"),
    ({"seed": -1}, "seed must be an integer"), ({"seed": 1.5}, "seed must be an integer"),
    ({"mode": "greedy"}, "mode must be one of"),
])
def test_bad_parameters_are_input_errors(backend, kwargs, words):
    from hopgraph.kernels.errors import InputError

    sets, n_sub, cand, best = random_problem(2, 3, 4, 5)
    with pytest.raises(InputError, match=words):
        call("shapley_mc", sets, n_sub, cand, best, device="cpu", backend=backend, **kwargs)


@pytest.mark.parametrize("backend", ["cpu", "triton"])
def test_float_n_sub_and_non_membership_values_are_refused(backend):
    from hopgraph.kernels.errors import InputError

    sets, n_sub, cand, best = random_problem(2, 3, 4, 5)
    with pytest.raises(InputError, match="n_sub must be an integer"):
        call("shapley_mc", sets, n_sub.double(), cand, best, device="cpu", backend=backend)
    for name, bad in (("node_sets", sets * 0.5), ("cand_nodes", cand * 2)):
        args = {"node_sets": sets, "cand_nodes": cand, name: bad}
        with pytest.raises(InputError, match=f"{name} must hold memberships"):
            call("shapley_mc", args["node_sets"], n_sub, args["cand_nodes"], best, device="cpu", backend=backend)


def test_empty_batch():
    phi, score = shapley_mc(torch.zeros((0, 3, 4)), torch.zeros(0, dtype=torch.long),
                            torch.zeros((0, 5, 4)), torch.zeros((0, 5, 3)))
    assert phi.shape == (0, 5, 3) and score.shape == (0, 5)


def _take(problem, rows):
    """The sub-batch ``rows`` of a problem, re-padded to its own largest |G_Q| (as a batch of
    just these questions would be built) — padding widths differ from the full batch."""
    sets, n_sub, cand, best = problem
    n = n_sub[rows]
    G = max(int(n.max()), 1)
    return sets[rows][:, :G], n, cand[rows], best[rows][:, :, :G]


@pytest.mark.parametrize("mode", ["independent", "shared"])
@pytest.mark.parametrize("backend", ["cpu", pytest.param("triton", marks=pytest.mark.slow)])
def test_query_estimates_do_not_depend_on_the_batch(mode, backend):
    """A query's Monte Carlo estimates are the same alone, at any position of any batch, and
    whatever the batch's padding G (draws depend on the seed and the query only)."""
    problem = random_problem(5, 6, 14, 4, seed=9)
    problem[1][:] = torch.tensor([6, 2, 4, 1, 3])
    full = call("shapley_mc", *problem, T=8, seed=3, mode=mode, device="cpu", backend=backend)
    for rows in ([0], [1], [2], [3, 1], [4, 2, 2, 0], [2, 4]):
        sub = call("shapley_mc", *_take(problem, torch.tensor(rows)), T=8, seed=3, mode=mode,
                   device="cpu", backend=backend)
        G = sub[0].shape[2]
        np.testing.assert_allclose(sub[1].numpy(), full[1][rows].numpy(), atol=1e-6)
        np.testing.assert_allclose(sub[0].numpy(), full[0][rows][:, :, :G].numpy(), atol=1e-6)


def test_predecessor_masks_are_per_query():
    """Each query's block equals query_predecessors(n) and padding is empty."""
    from hopgraph.kernels.shapley_mc import predecessor_masks, query_predecessors

    pred = predecessor_masks(torch.tensor([3, 0, 5, 3]), 7, T=4, seed=2)
    assert torch.equal(pred[0], pred[3])  # same |G_Q|, same samples
    assert torch.equal(pred[2, :, :5, :5].bool(), query_predecessors(5, 4, 2))
    assert pred[1].sum() == 0 and pred[0, :, 3:].sum() == 0 and pred[0, :, :, 3:].sum() == 0
    assert not torch.equal(query_predecessors(5, 4, 2), query_predecessors(5, 4, 3))


@pytest.mark.parametrize("name", ["node_sets", "cand_nodes", "best_sim"])
@pytest.mark.parametrize("backend", ["cpu", "triton"])
def test_nan_inputs_refused(name, backend):
    from hopgraph.kernels.errors import InputError

    sets, n_sub, cand, best = random_problem(2, 3, 4, 5)
    args = {"node_sets": sets, "cand_nodes": cand, "best_sim": best}
    args[name] = args[name].clone()
    args[name].view(-1)[1] = float("nan")
    with pytest.raises(InputError, match=f"{name} must be finite"):
        call("shapley_mc", args["node_sets"], n_sub, args["cand_nodes"], args["best_sim"], device="cpu",
             backend=backend)
    with pytest.raises(InputError, match="lam"):
        call("shapley_mc", sets, n_sub, cand, best, lam=float("nan"), device="cpu", backend=backend)

"""Every kernel op validates its inputs once, in the CPU-side preparation shared by
both paths, and raises InputError naming the argument. Each fault is tried on the CPU path and
on the Triton path (TRITON_INTERPRET=1); on the Triton path the kernel launch is replaced by a
tripwire, so a check that ran after the launch (or not at all) fails the test."""
from __future__ import annotations

import importlib

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from conftest import random_unit

from hopgraph.kernels import call
from hopgraph.kernels.errors import InputError

BACKENDS = [None, "triton"]


class Tripwire:
    """Stands in for a @triton.jit kernel: any launch fails the test."""

    def __getitem__(self, grid):
        raise AssertionError("a Triton kernel was launched on invalid input")


@pytest.fixture
def no_launch(monkeypatch):
    """``no_launch(op, *kernels)``: replace the op's Triton kernels by a :class:`Tripwire`."""
    def patch(op: str, *kernels: str) -> None:
        module = importlib.import_module(f"hopgraph.kernels.{op}_triton")
        for k in kernels:
            monkeypatch.setattr(module, k, Tripwire())
    return patch


def run(op: str, backend: str | None, no_launch, kernels: tuple[str, ...], *args, **kwargs):
    if backend == "triton":
        no_launch(op, *kernels)
    return call(op, *args, device="cpu", backend=backend, **kwargs)


# ---------------------------------------------------------------- hyperedge_max_propagate
def hypergraph():
    """3 nodes, 2 hyperedges {0, 1}, {1, 2}: edge CSR and the node-sorted incidence CSR."""
    edge_indptr = torch.tensor([0, 2, 4])
    edge_nodes = torch.tensor([0, 1, 1, 2], dtype=torch.int32)
    node_indptr = torch.tensor([0, 1, 3, 4])
    node_incidence = torch.tensor([0, 1, 2, 3], dtype=torch.int32)
    return {"A": torch.rand(2, 3), "S": torch.rand(2, 2), "edge_indptr": edge_indptr, "edge_nodes": edge_nodes,
            "node_indptr": node_indptr, "node_incidence": node_incidence}


def _space(**changes):
    args = hypergraph()
    args.update(changes)
    return args


SPACE_FAULTS = {
    "edge_nodes too large": (lambda: _space(edge_nodes=torch.tensor([0, 1, 1, 3], dtype=torch.int32)),
                             r"edge_nodes must hold node ids in \[0, 3\); edge_nodes\[3\] = 3"),
    "edge_nodes negative": (lambda: _space(edge_nodes=torch.tensor([0, -1, 1, 2], dtype=torch.int32)),
                            r"edge_nodes\[1\] = -1"),
    "edge_nodes float": (lambda: _space(edge_nodes=torch.tensor([0.0, 1, 1, 2])), "edge_nodes must be an integer"),
    "node_incidence too large": (lambda: _space(node_incidence=torch.tensor([0, 1, 2, 4], dtype=torch.int32)),
                                 r"node_incidence must hold positions in edge_nodes in \[0, 4\)"),
    "node_incidence inconsistent": (lambda: _space(node_incidence=torch.tensor([1, 0, 2, 3], dtype=torch.int32)),
                                    "node_incidence disagrees with node_indptr"),
    "edge_indptr decreasing": (lambda: _space(edge_indptr=torch.tensor([0, 5, 4])), "edge_indptr must never decrease"),
    "node_indptr not from 0": (lambda: _space(node_indptr=torch.tensor([1, 1, 3, 4])), "node_indptr must start at 0"),
    "A NaN": (lambda: _space(A=torch.tensor([[0.5, float("nan"), 0.1], [0.1, 0.2, 0.3]])),
              r"A must be finite \(no NaN or infinity\); A\[0, 1\] = nan"),
    "S inf": (lambda: _space(S=torch.tensor([[0.5, float("inf")], [0.1, 0.2]])), r"S\[0, 1\] = inf"),
    "S negative": (lambda: _space(S=torch.tensor([[0.5, -0.1], [0.1, 0.2]])), "S must be non-negative"),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fault", sorted(SPACE_FAULTS))
def test_hyperedge_max_propagate_refuses(fault, backend, no_launch):
    make, message = SPACE_FAULTS[fault]
    with pytest.raises(InputError, match="hyperedge_max_propagate: .*" + message):
        run("hyperedge_max_propagate", backend, no_launch, ("_edge_kernel", "_node_kernel"), **make())


@pytest.mark.parametrize("backend", BACKENDS)
def test_hyperedge_max_propagate_valid_input_still_runs(backend):
    out = call("hyperedge_max_propagate", **hypergraph(), device="cpu", backend=backend)
    assert out.shape == (2, 3) and bool(torch.isfinite(out).all())


# ---------------------------------------------------------------- group_decay_propagate
def groups(**changes):
    """4 nodes in 2 name groups {0, 2}, {1, 3}."""
    args = {"A": torch.rand(2, 4) + 0.1, "w": torch.rand(2, 4), "node_group": torch.tensor([0, 1, 0, 1]),
            "node_t": torch.tensor([0, 1, 2, 3]), "group_indptr": torch.tensor([0, 2, 4]),
            "group_nodes": torch.tensor([0, 2, 1, 3], dtype=torch.int32), "alpha": torch.tensor([1.0, 1.0])}
    args.update(changes)
    return args


TIME_FAULTS = {
    "node_group too large": (lambda: groups(node_group=torch.tensor([0, 1, 0, 2])),
                             r"node_group must hold group ids .*in \[0, 2\); node_group\[3\] = 2"),
    "node_group negative": (lambda: groups(node_group=torch.tensor([0, -1, 0, 1])), r"node_group\[1\] = -1"),
    "group_nodes too large": (lambda: groups(group_nodes=torch.tensor([0, 2, 1, 4], dtype=torch.int32)),
                              r"group_nodes must hold node ids in \[0, 4\); group_nodes\[3\] = 4"),
    "group_nodes inconsistent": (lambda: groups(group_nodes=torch.tensor([0, 1, 2, 3], dtype=torch.int32)),
                                 "group_nodes disagrees with node_group"),
    "group_indptr decreasing": (lambda: groups(group_indptr=torch.tensor([0, 5, 4])),
                                "group_indptr must never decrease"),
    "group_indptr wrong end": (lambda: groups(group_indptr=torch.tensor([0, 2, 3])), "group_indptr must end at 4"),
    "A NaN": (lambda: groups(A=torch.tensor([[float("nan"), 1, 1, 1], [1, 1, 1, 1.0]])), r"A\[0, 0\] = nan"),
    "w NaN": (lambda: groups(w=torch.tensor([[1, 1, 1, 1], [1, 1, float("nan"), 1.0]])),
              r"w must be finite \(no NaN or infinity\); w\[1, 2\] = nan"),
    "alpha NaN": (lambda: groups(alpha=torch.tensor([1.0, float("nan")])), r"alpha\[1\] = nan"),
    "alpha negative": (lambda: groups(alpha=torch.tensor([1.0, -1.0])), "alpha must be non-negative"),
    "node_t inf": (lambda: groups(node_t=torch.tensor([0, 1, float("inf"), 3])), r"node_t\[2\] = inf"),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fault", sorted(TIME_FAULTS))
def test_group_decay_propagate_refuses(fault, backend, no_launch):
    make, message = TIME_FAULTS[fault]
    with pytest.raises(InputError, match="group_decay_propagate: .*" + message):
        run("group_decay_propagate", backend, no_launch, ("_decay_kernel",), **make())


@pytest.mark.parametrize("backend", BACKENDS)
def test_group_decay_propagate_valid_input_still_runs(backend):
    out = call("group_decay_propagate", **groups(), device="cpu", backend=backend)
    assert out.shape == (2, 4) and bool(torch.isfinite(out).all()) and float(out.sum()) > 0


# ---------------------------------------------------------------- batched_ppr
def stochastic(n: int = 6) -> sp.csr_matrix:
    """A column-stochastic ring with one dangling column (5)."""
    rows, cols = np.arange(1, n) % n, np.arange(0, n - 1)
    return sp.csr_matrix((np.ones(n - 1), (rows, cols)), shape=(n, n))


def triple(indptr=None, indices=None, data=None):
    P = stochastic()
    return (P.indptr if indptr is None else np.asarray(indptr), P.indices if indices is None else np.asarray(indices),
            P.data if data is None else np.asarray(data, np.float64))


PRIORS = np.eye(6)[:2]
PPR_FAULTS = {
    "negative weight": (lambda: {"P": triple(data=[1, 1, -1, 1, 1])}, r"P: data must be non-negative; data\[2\]"),
    "NaN weight": (lambda: {"P": triple(data=[1, 1, np.nan, 1, 1])}, r"P: data must be finite .*data\[2\] = nan"),
    "non-stochastic column": (lambda: {"P": triple(data=[1, 1, 0.5, 1, 1])},
                              "P must be column-stochastic .* column 2 sums to 0.5"),
    "decreasing indptr": (lambda: {"P": triple(indptr=[0, 0, 2, 1, 3, 4, 5])}, "P: indptr must never decrease"),
    "indptr not from 0": (lambda: {"P": triple(indptr=[1, 1, 2, 3, 4, 5, 5])}, "P: indptr must start at 0"),
    "column id out of range": (lambda: {"P": triple(indices=[0, 1, 2, 3, 6])},
                               r"P: indices must hold column ids in \[0, 6\); indices\[4\] = 6"),
    "float indptr": (lambda: {"P": triple(indptr=np.array([0, 0, 1, 2, 3, 4, 5], float))},
                     "P: indptr must be an integer array"),
    "NaN prior": (lambda: {"priors": np.array([[np.nan, 0, 0, 0, 0, 1]])}, r"priors\[0, 0\] = nan"),
    "negative prior": (lambda: {"priors": -PRIORS}, "priors must be non-negative"),
    "NaN tol": (lambda: {"tol": float("nan")}, "tol must be a finite number > 0"),
    "zero max_iter": (lambda: {"max_iter": 0}, "max_iter must be an integer >= 1"),
    "NaN damping": (lambda: {"d": float("nan")}, r"damping d must lie in \(0, 1\)"),
    "float region": (lambda: {"region": np.ones((2, 6))}, "region must be a bool"),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fault", sorted(PPR_FAULTS))
def test_batched_ppr_refuses(fault, backend, no_launch):
    make, message = PPR_FAULTS[fault]
    args = {"P": stochastic(), "priors": PRIORS, **make()}
    P, priors = args.pop("P"), args.pop("priors")
    with pytest.raises(InputError, match="batched_ppr: .*" + message):
        run("batched_ppr", backend, no_launch, ("_ppr_step_kernel",), P, priors, **args)


@pytest.mark.parametrize("backend", BACKENDS)
def test_batched_ppr_accepts_float32_rounding_and_dangling(backend):
    P = stochastic().astype(np.float32)
    P.data[:] = np.float32(1 + 3e-7)  # float32 rounding of a normalised column
    pi, _ = call("batched_ppr", P, PRIORS, device="cpu", backend=backend)
    assert pi.shape == (2, 6) and bool(torch.isfinite(pi).all())


# ---------------------------------------------------------------- sparse_diffusion
GRAPH = (np.array([0, 2, 3, 4]), np.array([1, 2, 0, 1]), np.array([0.5, 0.5, 1.0, 1.0], np.float32), 3)


def diffusion(seeds=np.array([[0, -1]]), weights=None, indptr=None, indices=None, data=None, n_cols=None):
    g = GRAPH
    return (seeds, weights, g[0] if indptr is None else np.asarray(indptr),
            g[1] if indices is None else np.asarray(indices), g[2] if data is None else np.asarray(data),
            g[3] if n_cols is None else n_cols)


DIFFUSION_FAULTS = {
    "seed id too large": (lambda: diffusion(seeds=np.array([[0, 3]])),
                          r"sparse_diffusion: seed_ids must hold graph rows in \[0, 3\) or -1 \(padding\); "
                          r"seed_ids\[0, 1\] = 3"),
    "seed id below padding": (lambda: diffusion(seeds=np.array([[-2, 0]])), r"seed_ids\[0, 0\] = -2"),
    "float seed ids": (lambda: diffusion(seeds=np.array([[0.0, 1.0]])), "seed_ids must be an integer"),
    "NaN seed weight": (lambda: diffusion(weights=np.array([[np.nan, 0]], np.float32)),
                        r"seed_weights must be finite .*seed_weights\[0, 0\] = nan"),
    "decreasing indptr": (lambda: diffusion(indptr=[0, 3, 2, 4]), "graph: indptr must never decrease"),
    "column id out of range": (lambda: diffusion(indices=[1, 2, 0, 3]),
                               r"graph: indices must hold column ids in \[0, 3\); indices\[3\] = 3"),
    "NaN weight": (lambda: diffusion(data=[0.5, np.nan, 1, 1]), r"graph: data must be finite"),
    "negative n_cols": (lambda: diffusion(n_cols=-1), "n_cols must be an integer >= 0"),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fault", sorted(DIFFUSION_FAULTS))
def test_sparse_diffusion_refuses(fault, backend, no_launch):
    make, message = DIFFUSION_FAULTS[fault]
    with pytest.raises(InputError, match=message):
        run("sparse_diffusion", backend, no_launch, ("_seed_terms_kernel", "_run_sums_kernel"), *make())


# ---------------------------------------------------------------- gain_knn and density
def embeddings(fault: str) -> np.ndarray:
    X = random_unit(8, 4, 0)
    X[3, 1] = {"nan": np.nan, "inf": np.inf}[fault]
    return X


EMBEDDING_FAULTS = {
    "X NaN": (lambda: {"X": embeddings("nan")}, r"X must be finite \(no NaN or infinity\); X\[3, 1\] = nan"),
    "X inf": (lambda: {"X": embeddings("inf")}, r"X\[3, 1\] = inf"),
    "X 1-D": (lambda: {"X": np.ones(4, np.float32)}, r"X must be a 2-D \[N, d\] array"),
    "X strings": (lambda: {"X": np.array([["a", "b"]])}, "X must be a numeric array"),
}
GAIN_FAULTS = {
    **EMBEDDING_FAULTS,
    "penalty NaN": (lambda: {"penalty": np.array([1, 1, np.nan, 1, 1, 1, 1, 1])}, r"penalty\[2\] = nan"),
    "penalty negative": (lambda: {"penalty": -np.ones(8)}, "penalty must be non-negative"),
    "penalty strings": (lambda: {"penalty": np.array(["x"] * 8)}, "penalty must be a numeric array"),
    "sim_min string": (lambda: {"sim_min": "0.3"}, "sim_min and sim_max must be numbers"),
    "sim_max NaN": (lambda: {"sim_max": float("nan")}, "need finite sim_min <= sim_max"),
}
DENSITY_FAULTS = {
    **EMBEDDING_FAULTS,
    "negative seed": (lambda: {"mode": "sampled", "seed": -1}, "seed must be an integer >= 0"),
    "zero samples": (lambda: {"mode": "sampled", "n_samples": 0}, "n_samples must be a positive integer"),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fault", sorted(GAIN_FAULTS))
def test_gain_knn_refuses(fault, backend, no_launch):
    make, message = GAIN_FAULTS[fault]
    args = {"X": random_unit(8, 4, 0), **make()}
    with pytest.raises(InputError, match="gain_knn: .*" + message):
        run("gain_knn", backend, no_launch, ("_gain_knn_kernel",), args.pop("X"), k=3, **args)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fault", sorted(DENSITY_FAULTS))
def test_density_refuses(fault, backend, no_launch):
    make, message = DENSITY_FAULTS[fault]
    args = {"X": random_unit(8, 4, 0), **make()}
    with pytest.raises(InputError, match="density: .*" + message):
        run("density", backend, no_launch, ("_density_kernel",), args.pop("X"), **args)


@pytest.mark.parametrize("op", ["gain_knn", "density"])
def test_cpu_block_size_is_checked(op):
    with pytest.raises(InputError, match=f"{op}: block must be an integer >= 1"):
        call(op, random_unit(8, 4, 0), block=0, device="cpu")

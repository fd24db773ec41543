"""hyperedge_max_propagate and group_decay_propagate (SPEC §2 steps 2–3): CPU vs a
brute-force reference, Triton (TRITON_INTERPRET=1) vs CPU on random and adversarial inputs."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from hopgraph.kernels import call


def random_hypergraph(V: int, E: int, rng: np.random.Generator, max_size: int = 4):
    """Edges with 1..max_size distinct members; some nodes in no edge, some edges empty."""
    members = []
    for e in range(E):
        k = int(rng.integers(0, max_size + 1)) if e % 5 else 1  # empty and singleton edges included
        members.append(sorted(rng.choice(V, size=min(k, V), replace=False).tolist()))
    edge_indptr = np.r_[0, np.cumsum([len(m) for m in members])].astype(np.int64)
    edge_nodes = np.asarray([v for m in members for v in m], np.int32)
    node_incidence = np.argsort(edge_nodes, kind="stable").astype(np.int32)
    node_indptr = np.r_[0, np.cumsum(np.bincount(edge_nodes, minlength=V))].astype(np.int64)
    return members, tuple(torch.from_numpy(a) for a in (edge_indptr, edge_nodes, node_indptr, node_incidence))


def space_reference(A: np.ndarray, S: np.ndarray, members: list[list[int]]) -> np.ndarray:
    out = np.zeros_like(A)
    for b in range(A.shape[0]):
        for e, mem in enumerate(members):
            for v in mem:
                for u in mem:
                    if u != v:
                        out[b, v] = max(out[b, v], A[b, u] * S[b, e])
    return out


def activations(B: int, n: int, rng: np.random.Generator, ties: bool = False) -> np.ndarray:
    A = rng.random((B, n)).astype(np.float32)
    A[A < 0.4] = 0  # thresholded activations: many zeros
    if ties:
        A = np.round(A * 3) / 3  # many equal values: ties at the top of hyperedges
    return A


@pytest.mark.parametrize("B,V,E,ties", [(3, 12, 9, False), (2, 7, 6, True), (1, 5, 1, False)])
def test_space_cpu_matches_reference(rng, B, V, E, ties):
    members, csr = random_hypergraph(V, E, rng)
    A, S = activations(B, V, rng, ties), rng.random((B, E)).astype(np.float32)
    got = call("hyperedge_max_propagate", torch.from_numpy(A), torch.from_numpy(S), *csr, device="cpu")
    np.testing.assert_allclose(got.numpy(), space_reference(A, S, members), rtol=1e-6)


@pytest.mark.parametrize("B,V,E,ties", [(3, 12, 9, False), (20, 9, 7, True), (0, 5, 3, False)])
def test_space_triton_parity(rng, B, V, E, ties):
    members, csr = random_hypergraph(V, E, rng, max_size=20)
    A, S = activations(B, V, rng, ties), rng.random((B, E)).astype(np.float32)
    args = (torch.from_numpy(A), torch.from_numpy(S), *csr)
    cpu = call("hyperedge_max_propagate", *args, device="cpu")
    tri = call("hyperedge_max_propagate", *args, device="cpu", backend="triton")
    assert tri.shape == (B, V)
    np.testing.assert_allclose(tri.numpy(), cpu.numpy(), rtol=1e-6)


def test_space_triton_is_bit_for_bit_over_many_programs(rng):
    """More hyperedges and nodes than one program takes and more queries than one block: maxima are
    exact and no atomics are used, so the [V, B]-layout kernels give the CPU path's result exactly."""
    from hopgraph.kernels.hyperedge_max_propagate_triton import BLOCK_B, EDGES, NODES

    B, V, E = BLOCK_B + 6, 2 * NODES + 5, 3 * EDGES + 1
    members, csr = random_hypergraph(V, E, rng, max_size=BLOCK_B // 2)
    A, S = activations(B, V, rng, True), rng.random((B, E)).astype(np.float32)
    args = (torch.from_numpy(A), torch.from_numpy(S), *csr)
    cpu = call("hyperedge_max_propagate", *args, device="cpu")
    tri = call("hyperedge_max_propagate", *args, device="cpu", backend="triton")
    assert torch.equal(tri, cpu)


def test_space_no_incidences_and_bad_input(rng):
    z = torch.zeros(1, dtype=torch.int64)
    A, S = torch.rand(2, 4), torch.rand(2, 0)
    csr = (z, torch.zeros(0, dtype=torch.int32), torch.zeros(5, dtype=torch.int64), torch.zeros(0, dtype=torch.int32))
    assert call("hyperedge_max_propagate", A, S, *csr, device="cpu").abs().sum() == 0
    assert call("hyperedge_max_propagate", A, S, *csr, device="cpu", backend="triton").abs().sum() == 0
    with pytest.raises(ValueError, match="non-negative"):
        call("hyperedge_max_propagate", -A, S, *csr, device="cpu")
    with pytest.raises(ValueError, match="node_indptr"):
        call("hyperedge_max_propagate", A, S, z, csr[1], z, csr[3], device="cpu")


def random_groups(V: int, G: int, rng: np.random.Generator):
    node_group = rng.integers(0, G, V)
    node_group[: min(G, V)] = np.arange(min(G, V))  # every group used; some are singletons
    order = np.argsort(node_group, kind="stable")
    indptr = np.r_[0, np.cumsum(np.bincount(node_group, minlength=G))].astype(np.int64)
    sizes = np.diff(indptr)
    alpha = (sizes / sizes.mean()).astype(np.float32)
    node_t = np.sort(rng.integers(0, 3 * V, V))
    return node_group, node_t, indptr, order, alpha


def time_reference(A, w, node_group, node_t, alpha):
    B, V = A.shape
    out = np.zeros((B, V), np.float64)
    for b in range(B):
        for v in range(V):
            best = 0.0
            for u in range(V):
                if u != v and node_group[u] == node_group[v] and A[b, u] > 0:
                    g = node_group[v]
                    best = max(best, A[b, u] * math.exp(-math.tanh(alpha[g] * abs(node_t[u] - node_t[v]))))
            out[b, v] = w[b, v] * best
    return out


def group_args(A, w, node_group, node_t, indptr, order, alpha):
    return (torch.from_numpy(A), torch.from_numpy(w), torch.from_numpy(node_group), torch.from_numpy(node_t),
            torch.from_numpy(indptr), torch.from_numpy(order.astype(np.int32)), torch.from_numpy(alpha))


@pytest.mark.parametrize("B,V,G", [(3, 15, 5), (2, 9, 9), (1, 40, 2)])
def test_time_cpu_matches_reference_and_triton(rng, B, V, G):
    grp = random_groups(V, G, rng)
    A, w = activations(B, V, rng), rng.random((B, V)).astype(np.float32)
    args = group_args(A, w, *grp)
    cpu = call("group_decay_propagate", *args, device="cpu")
    np.testing.assert_allclose(cpu.numpy(), time_reference(A, w, grp[0], grp[1], grp[4]), rtol=1e-5, atol=1e-7)
    tri = call("group_decay_propagate", *args, device="cpu", backend="triton")
    np.testing.assert_allclose(tri.numpy(), cpu.numpy(), rtol=1e-5, atol=1e-7)


def test_time_adversarial(rng):
    # singleton groups only -> nothing propagates; no activation -> nothing; empty batch
    grp = random_groups(6, 6, rng)
    A, w = activations(2, 6, rng), np.ones((2, 6), np.float32)
    for backend in (None, "triton"):
        assert call("group_decay_propagate", *group_args(A, w, *grp), device="cpu", backend=backend).sum() == 0
    grp = random_groups(6, 2, rng)
    zero = np.zeros((2, 6), np.float32)
    for backend in (None, "triton"):
        assert call("group_decay_propagate", *group_args(zero, w, *grp), device="cpu", backend=backend).sum() == 0
        out = call("group_decay_propagate", *group_args(zero[:0], w[:0], *grp), device="cpu", backend=backend)
        assert out.shape == (0, 6)
    with pytest.raises(ValueError, match="non-negative"):
        call("group_decay_propagate", *group_args(-w, w, *grp), device="cpu")

"""batched_ppr (SPEC §2 step 6): exact solve, dangling self-loops, per-column convergence,
localisation, Triton (TRITON_INTERPRET=1) parity on random and adversarial graphs."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from hopgraph.engine.hypergraph import column_stochastic
from hopgraph.kernels import call


def random_graph(n: int, density: float, seed: int, dangling: tuple[int, ...] = ()) -> sp.csr_matrix:
    W = sp.random(n, n, density=density, random_state=seed, format="lil")
    for j in dangling:
        W[:, j] = 0
    return column_stochastic(W)


def exact_ppr(P: sp.csr_matrix, priors: np.ndarray, d: float, region: np.ndarray | None = None) -> np.ndarray:
    n = P.shape[0]
    M = P.toarray() + np.diag((np.asarray(P.sum(0)).ravel() == 0).astype(float))
    out = np.zeros_like(priors, dtype=np.float64)
    for b, p in enumerate(priors):
        mask = region[b] if region is not None else np.ones(n, bool)
        Mb = M * mask[:, None]  # mass leaving the region is dropped
        out[b] = np.linalg.solve(np.eye(n) - d * Mb, (1 - d) * p * mask)
    return out


def priors_for(B: int, n: int, rng: np.random.Generator) -> np.ndarray:
    p = rng.random((B, n)) * (rng.random((B, n)) < 0.2)
    p[0] = 0  # an all-zero prior
    if B > 1:
        p[1, 0] = 1.0  # a one-hot prior
    return p / np.maximum(p.sum(1, keepdims=True), 1e-12)


def test_cpu_matches_exact_solve_with_dangling(rng):
    P = random_graph(40, 0.08, 1, dangling=(3, 7))
    pri = priors_for(6, 40, rng)
    pi, iters = call("batched_ppr", P, pri, d=0.85, tol=1e-12, max_iter=1000, device="cpu")
    np.testing.assert_allclose(pi.numpy(), exact_ppr(P, pri, 0.85), atol=1e-10)
    np.testing.assert_allclose(pi.numpy().sum(1), pri.sum(1), atol=1e-9)  # self-loops keep the mass
    assert iters[0] == 1 and (iters[2:] > 1).all()  # per-column convergence


def test_region_localises(rng):
    P = random_graph(30, 0.15, 2, dangling=(5,))
    pri = priors_for(4, 30, rng)
    region = rng.random((4, 30)) < 0.6
    pi, _ = call("batched_ppr", P, pri, d=0.8, tol=1e-12, max_iter=1000, region=region, device="cpu")
    assert (pi.numpy()[~region] == 0).all()
    np.testing.assert_allclose(pi.numpy(), exact_ppr(P, pri, 0.8, region), atol=1e-10)


@pytest.mark.parametrize("n,B,dense", [(10, 3, 0.2), (6, 20, 0.4), (5, 1, 0.0)])
def test_triton_parity(rng, n, B, dense):
    P = random_graph(n, dense, 3, dangling=(0,))
    pri = priors_for(B, n, rng).astype(np.float32)
    region = rng.random((B, n)) < 0.7
    for reg in (None, region):
        cpu, it_c = call("batched_ppr", P, pri, d=0.85, tol=1e-6, max_iter=12, region=reg, device="cpu")
        tri, it_t = call("batched_ppr", P, pri, d=0.85, tol=1e-6, max_iter=12, region=reg, device="cpu",
                         backend="triton")
        np.testing.assert_allclose(tri.numpy(), cpu.numpy(), atol=1e-6)
        assert torch.equal(it_c, it_t)


def test_empty_batch_and_triple_input():
    P = random_graph(10, 0.2, 4)
    for backend in (None, "triton"):
        pi, it = call("batched_ppr", P, np.zeros((0, 10), np.float32), device="cpu", backend=backend)
        assert pi.shape == (0, 10) and it.shape == (0,)
    pri = np.eye(10)[:2]
    a, _ = call("batched_ppr", P, pri, device="cpu")
    b, _ = call("batched_ppr", (P.indptr, P.indices, P.data), torch.from_numpy(pri), device="cpu")
    assert torch.equal(a, b)


def test_bad_inputs_named():
    P = random_graph(10, 0.2, 4)
    with pytest.raises(ValueError, match="priors must be"):
        call("batched_ppr", P, np.ones((2, 9)), device="cpu")
    with pytest.raises(ValueError, match="non-negative"):
        call("batched_ppr", P, -np.ones((2, 10)), device="cpu")
    with pytest.raises(ValueError, match="damping"):
        call("batched_ppr", P, np.ones((2, 10)), d=1.0, device="cpu")
    with pytest.raises(ValueError, match="region"):
        call("batched_ppr", P, np.ones((2, 10)), region=np.ones((1, 10), bool), device="cpu")
    with pytest.raises(ValueError, match="square"):
        call("batched_ppr", sp.csr_matrix((3, 4)), np.ones((1, 4)), device="cpu")


def test_cpu_path_restores_torch_threads():
    before = torch.get_num_threads()
    call("batched_ppr", random_graph(8, 0.3, 5), np.eye(8)[:2], threads=1, device="cpu")
    assert torch.get_num_threads() == before


@pytest.mark.parametrize("B", [1, 4])
def test_cpu_never_writes_the_callers_priors(rng, B):
    """The driver iterates in place on its start block: a prior tensor whose transpose is
    contiguous (a [N, B] block seen as [B, N], or B = 1) must be copied, not overwritten."""
    P = random_graph(20, 0.2, 6, dangling=(2,))
    pri = rng.random((B, 20)) + 0.1  # no column stops at the first iteration (no compaction copy)
    block = torch.from_numpy(np.ascontiguousarray((pri / pri.sum(1, keepdims=True)).T))  # [N, B]
    before = block.clone()
    pi, _ = call("batched_ppr", P, block.T, d=0.85, tol=1e-12, max_iter=500, device="cpu")
    assert torch.equal(block, before)
    np.testing.assert_allclose(pi.numpy(), exact_ppr(P, before.T.numpy(), 0.85), atol=1e-10)


@pytest.mark.parametrize("share", [0.0, 0.25, 1.0])
def test_columns_stopping_together_and_apart_agree(rng, monkeypatch, share):
    """One batch where columns stop at different iterations and the same columns one at a time
    (each stops alone: the block is returned as it is), with stopped columns removed from the
    block at once (share 0), once they are a quarter of it (the default), or never (1.0): each
    column's result is its iterate at its own stop."""
    import importlib

    monkeypatch.setattr(importlib.import_module("hopgraph.kernels.batched_ppr"), "COMPACT_SHARE", share)
    P = random_graph(50, 0.1, 7, dangling=(1, 9))
    pri = priors_for(7, 50, rng)
    region = rng.random((7, 50)) < 0.8
    pi, iters = call("batched_ppr", P, pri, d=0.85, tol=1e-9, max_iter=500, region=region, device="cpu")
    assert len(set(iters.tolist())) > 2
    for b in range(7):
        one, it = call("batched_ppr", P, pri[b:b + 1], d=0.85, tol=1e-9, max_iter=500, region=region[b:b + 1],
                       device="cpu")
        np.testing.assert_allclose(one.numpy()[0], pi.numpy()[b], rtol=0, atol=1e-15)  # its own stop, not later
        assert it[0] == iters[b]


def test_iterate_block_memory():
    """Large iterate blocks live on 2 MiB-aligned private mappings (huge pages where the OS gives
    them), small ones are ordinary tensors; both are writable and outlive their mapping's name."""
    import importlib
    import mmap

    bp = importlib.import_module("hopgraph.kernels.batched_ppr")
    like = torch.zeros(1, dtype=torch.float64)
    small = bp.iterate_block((10, 3), like)
    assert small.shape == (10, 3) and small.dtype == torch.float64
    rows = bp.HUGE_MIN_BYTES // (8 * 4) + 1
    big = bp.iterate_block((rows, 4), like)
    assert big.shape == (rows, 4) and big.dtype == torch.float64 and big.is_contiguous()
    if hasattr(mmap, "MADV_HUGEPAGE"):
        assert big.data_ptr() % bp.HUGE_PAGE == 0
    big.fill_(2.0)
    big[-1, -1] = 3.0
    assert float(big.sum()) == 2.0 * rows * 4 + 1.0


def test_sparse_start_matches_dense_product(rng, monkeypatch):
    """One-hot priors on a sparse graph: the first iterations multiply only the columns under the
    iterate's support (CpuStep's sparse start); the result must be the exact solve's, and the
    same, bit for bit, as with the sparse start switched off."""
    import importlib

    bp = importlib.import_module("hopgraph.kernels.batched_ppr")
    n = 600
    P = random_graph(n, 3.0 / n, 8, dangling=(4, 11))
    pri = np.zeros((5, n))
    pri[np.arange(5), rng.choice(n, 5, replace=False)] = 1.0
    pri[4, [4, 11]] = 0.5  # a dangling chunk in the prior
    region = np.ones((5, n), bool)
    region[2, rng.choice(n, n // 3, replace=False)] = False
    sparse_calls = []
    orig = bp.CpuStep.__call__

    def spy(self, x, y, c, mask):
        sparse_calls.append(self.support is not None)
        orig(self, x, y, c, mask)

    monkeypatch.setattr(bp.CpuStep, "__call__", spy)
    for reg in (None, region):
        sparse_calls.clear()
        pi, it = call("batched_ppr", P, pri, d=0.85, tol=1e-12, max_iter=1000, region=reg, device="cpu")
        assert sum(sparse_calls) >= 3  # the support grew through several sparse iterations
        np.testing.assert_allclose(pi.numpy(), exact_ppr(P, pri, 0.85, reg), atol=1e-10)
        monkeypatch.setattr(bp, "SPARSE_SHARE", 0.0)
        dense, it_d = call("batched_ppr", P, pri.astype(np.float32), d=0.85, tol=1e-6, max_iter=1000, region=reg,
                           device="cpu")
        monkeypatch.setattr(bp, "SPARSE_SHARE", 0.25)
        sparse, it_s = call("batched_ppr", P, pri.astype(np.float32), d=0.85, tol=1e-6, max_iter=1000, region=reg,
                            device="cpu")
        assert torch.equal(dense, sparse) and torch.equal(it_d, it_s)


@pytest.mark.parametrize("n", [0, 5, 1024, 3 * 4096 + 77])
def test_convergence_test_sums(n):
    """column_change (chunked on the CPU) and column_l1 (float32 blocks, float64 across) give the
    float64 column L1 norms of y − x to float32 accuracy, tails and empty blocks included."""
    import importlib

    bp = importlib.import_module("hopgraph.kernels.batched_ppr")
    g = torch.Generator().manual_seed(n)
    y, x = torch.rand(n, 5, generator=g), torch.rand(n, 5, generator=g)
    y[n // 2:] *= 1e-3  # uneven magnitudes along the column
    exact = (y.double() - x.double()).abs().sum(0)
    got = bp.column_change(y, x, bp.change_scratch(y))
    assert got.dtype == torch.float64 and got.shape == (5,)
    np.testing.assert_allclose(got.numpy(), exact.numpy(), rtol=1e-6, atol=0)
    np.testing.assert_allclose(bp.column_l1((y - x).abs()).numpy(), exact.numpy(), rtol=1e-6, atol=0)

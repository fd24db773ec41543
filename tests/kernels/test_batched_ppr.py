"""batched_ppr (SPEC §2 step 6): exact solve, dangling self-loops, per-column convergence,
localisation, Triton (TRITON_INTERPRET=1) parity on random and adversarial graphs.

Paths and batches are compared within rounding (:func:`assert_same_walk`), never bit for bit across
two products: MKL rounds a column by the width of its block, differently on different CPUs. Every
such comparison runs twice, with this machine's product and with :mod:`ppr_rounding`'s stand-in for
a CPU whose product rounds blocks of 4–24 columns another way (the ``rounding`` fixture)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch

import ppr_rounding
from suite.kernels import local_regions
from hopgraph.engine.pipelines.stitch.hypergraph import column_stochastic
from hopgraph.kernels import call
from hopgraph.kernels.errors import InputError, ToleranceWarning

#: the rounding error of a walk, in units of ε·‖p‖₁/(1 − d) (the error of one product, contracted)
ROUNDING_UNITS = 16


@pytest.fixture(params=["native", "width-dependent"])
def rounding(request, monkeypatch) -> str:
    """This machine's MKL product, or :mod:`ppr_rounding`'s width-dependent one."""
    if request.param != "native":
        ppr_rounding.install(monkeypatch)
    return request.param


def assert_same_walk(got: tuple[torch.Tensor, torch.Tensor], ref: tuple[torch.Tensor, torch.Tensor],
                     priors: np.ndarray, tol: float, d: float) -> None:
    """Two results ``(π, iterations)`` of the same walks by two paths (or batches) agree within
    rounding: iteration counts equal in float64 and at most one apart in float32 (a change within
    rounding of the tolerance); each column's π within the L1 rounding of a walk, plus its
    tolerance where the counts differ (one iteration's change)."""
    (pi, it), (pi_ref, it_ref) = got, ref
    assert pi.dtype == pi_ref.dtype and pi.shape == pi_ref.shape
    eps = torch.finfo(pi.dtype).eps
    apart = (it - it_ref).abs().numpy()
    assert apart.max(initial=0) <= (0 if pi.dtype == torch.float64 else 1), (it, it_ref)
    mass = np.abs(priors).sum(1)
    tols = np.maximum(tol, eps * mass)
    bound = ROUNDING_UNITS * eps * mass / (1 - d) + tols * apart
    diff = (pi.double() - pi_ref.double()).abs().sum(1).numpy()
    assert (diff <= bound).all(), (diff, bound)


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
def test_triton_parity(rng, rounding, n, B, dense):
    P = random_graph(n, dense, 3, dangling=(0,))
    pri = priors_for(B, n, rng).astype(np.float32)
    region = rng.random((B, n)) < 0.7
    for reg in (None, region):
        cpu = call("batched_ppr", P, pri, d=0.85, tol=1e-6, max_iter=12, region=reg, device="cpu")
        tri = call("batched_ppr", P, pri, d=0.85, tol=1e-6, max_iter=12, region=reg, device="cpu", backend="triton")
        assert_same_walk(tri, cpu, pri, 1e-6, 0.85)


@pytest.mark.parametrize("B,dtype,regions,max_iter", [(20, np.float32, True, 37), (130, np.float64, False, 10)])
def test_triton_parity_many_programs_columns_and_compactions(rng, rounding, B, dtype, regions, max_iter):
    """More rows than one program takes, a hub row longer than a gather chunk, a third of the
    columns stopping at the first iteration (frozen on the device, then compacted at the host's
    check, the stride padded again to a multiple of 16), more columns than one program takes,
    float32 and float64, with and without a region."""
    from hopgraph.kernels.batched_ppr_triton import ROWS_PER_PROGRAM

    n = ROWS_PER_PROGRAM + 26
    W = sp.random(n, n, density=0.05, random_state=7, format="lil")
    W[5, :] = 1.0  # a hub row: every chunk points to chunk 5
    W[:, 11] = 0  # a dangling chunk
    P = column_stochastic(W)
    pri = priors_for(B, n, rng).astype(dtype)
    pri[2:B // 2] = np.roll(pri[2:B // 2], 1, axis=1)  # various sparsity patterns: various stop times
    pri[B // 2:B // 2 + B // 3] = 0  # a third stop at once: the block is compacted
    pri[3] = np.eye(n)[11]  # all mass on the dangling chunk: a fixed point
    region = rng.random((B, n)) < 0.8
    for reg in (None, region) if regions else (None,):
        cpu = call("batched_ppr", P, pri, d=0.7, tol=1e-4, max_iter=max_iter, region=reg, device="cpu")
        tri = call("batched_ppr", P, pri, d=0.7, tol=1e-4, max_iter=max_iter, region=reg, device="cpu",
                   backend="triton")
        assert_same_walk(tri, cpu, pri, 1e-4, 0.7)
        it_c = cpu[1]
        assert (it_c == 1).sum() >= B / 3 and (it_c > 8).any()


@pytest.mark.parametrize("backend", [None, "triton"])
@pytest.mark.parametrize("threads", [0, -1, 2.5, True, "2"])
def test_threads_must_be_a_positive_integer(backend, threads):
    P = random_graph(8, 0.3, 5)
    with pytest.raises(InputError, match="threads must be an integer >= 1"):
        call("batched_ppr", P, np.eye(8)[:2], threads=threads, device="cpu", backend=backend)


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
def test_columns_stopping_together_and_apart_agree(rng, monkeypatch, rounding, share):
    """One batch where columns stop at different iterations and the same columns one at a time
    (each stops alone: the block is returned as it is), with stopped columns removed from the
    block at once (share 0), once they are a quarter of it (the default), or never (1.0): each
    column's result is its iterate at its own stop (the same count; π within rounding: the batch's
    block and a single column are products of other widths)."""
    import importlib

    monkeypatch.setattr(importlib.import_module("hopgraph.kernels.batched_ppr"), "COMPACT_SHARE", share)
    P = random_graph(50, 0.1, 7, dangling=(1, 9))
    pri = priors_for(7, 50, rng)
    region = rng.random((7, 50)) < 0.8
    pi, iters = call("batched_ppr", P, pri, d=0.85, tol=1e-9, max_iter=500, region=region, device="cpu")
    assert len(set(iters.tolist())) > 2
    for b in range(7):
        one = call("batched_ppr", P, pri[b:b + 1], d=0.85, tol=1e-9, max_iter=500, region=region[b:b + 1],
                   device="cpu")
        assert_same_walk(one, (pi[b:b + 1], iters[b:b + 1]), pri[b:b + 1], 1e-9, 0.85)  # its own stop, not later


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


def test_sparse_start_matches_dense_product(rng, monkeypatch, rounding):
    """One-hot priors on a sparse graph: the first iterations multiply only the columns under the
    iterate's support (CpuStep's sparse start); the result must be the exact solve's, and the
    same within rounding as with the sparse start switched off (the same row sums without their
    zero terms, by a product of another matrix)."""
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
        dense = call("batched_ppr", P, pri.astype(np.float32), d=0.85, tol=1e-6, max_iter=1000, region=reg,
                     device="cpu")
        monkeypatch.setattr(bp, "SPARSE_SHARE", 0.25)
        sparse = call("batched_ppr", P, pri.astype(np.float32), d=0.85, tol=1e-6, max_iter=1000, region=reg,
                      device="cpu")
        assert_same_walk(sparse, dense, pri, 1e-6, 0.85)


@pytest.mark.parametrize("n,B", [(0, 5), (5, 5), (1024, 5), (3 * 4096 + 77, 5), (3 * 4096 + 77, 64), (70_000, 8)])
def test_convergence_test_sums(n, B):
    """column_change (chunked on the CPU: several chunks for the last two shapes) and column_l1
    (float32 blocks, float64 across) give the float64 column L1 norms of y − x to float32
    accuracy, tails and empty blocks included."""
    import importlib

    bp = importlib.import_module("hopgraph.kernels.batched_ppr")
    g = torch.Generator().manual_seed(n)
    y, x = torch.rand(n, B, generator=g), torch.rand(n, B, generator=g)
    y[n // 2:] *= 1e-3  # uneven magnitudes along the column
    exact = (y.double() - x.double()).abs().sum(0)
    got = bp.column_change(y, x, bp.change_scratch(y))
    assert got.dtype == torch.float64 and got.shape == (B,)
    np.testing.assert_allclose(got.numpy(), exact.numpy(), rtol=1e-6, atol=0)
    np.testing.assert_allclose(bp.column_l1((y - x).abs()).numpy(), exact.numpy(), rtol=1e-6, atol=0)


# --- segmented strategy of localised walks (one block-diagonal walk, one block per query) ---

def bpr():
    import importlib

    return importlib.import_module("hopgraph.kernels.batched_ppr")


def segmented():
    import importlib

    return importlib.import_module("hopgraph.kernels.ppr_segmented")


def adversarial_rows(pri: np.ndarray, region: np.ndarray, dangling: tuple[int, ...]) -> None:
    """In place: row 0 an empty region (its prior kept), row 1 a region whose prior is zero, row 2
    a region around a dangling chunk carrying prior mass."""
    region[0] = False
    pri[1] = 0.0
    j = dangling[0]
    region[2, j] = True
    pri[2, j] = pri[2].sum() or 1.0
    pri[2] /= pri[2].sum()


def with_strategy(monkeypatch, segmented: bool, fn):
    """``fn()`` with the strategy chooser forced (SEGMENT_SHARE 1: every localised walk is segmented;
    -1: none but an all-empty one), asserting the strategy taken; returns fn's result."""
    bp = bpr()
    taken = []
    orig = bp.segmented_ppr

    def spy(*a, **k):
        taken.append(True)
        return orig(*a, **k)

    monkeypatch.setattr(bp, "segmented_ppr", spy)
    monkeypatch.setattr(bp, "SEGMENT_SHARE", 1.0 if segmented else -1.0)
    try:
        out = fn()
    finally:
        monkeypatch.setattr(bp, "SEGMENT_SHARE", 1 / 8)
        monkeypatch.setattr(bp, "segmented_ppr", orig)
    assert bool(taken) == segmented
    return out


def both_strategies(monkeypatch, P, pri, region, **kw):
    """((π, iterations) segmented, (π, iterations) union block) of one call."""
    run = lambda: call("batched_ppr", P, pri, region=region, device="cpu", **kw)  # noqa: E731
    return with_strategy(monkeypatch, True, run), with_strategy(monkeypatch, False, run)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-11), (np.float32, 1e-6)])
def test_segmented_matches_block_and_exact(monkeypatch, rounding, seed, dtype, tol):
    """Random graphs (dangling chunks included), random small regions (seeds + one hop) plus the
    adversarial rows: the segmented walk equals the union-block walk within rounding (iteration
    counts equal in float64, at most one apart in float32), and the exact solve of each confined walk."""
    rng = np.random.default_rng(seed)
    dangling = (3, 17)
    P = random_graph(120, 0.03, 10 + seed, dangling=dangling)
    pri, region = local_regions(P, 10, 3, rng)
    adversarial_rows(pri, region, dangling)
    (seg, it_s), (blk, it_b) = both_strategies(monkeypatch, P, pri.astype(dtype), region, d=0.85, tol=tol,
                                               max_iter=1000)
    assert seg.dtype == blk.dtype == torch.from_numpy(np.zeros(0, dtype)).dtype
    assert_same_walk((seg, it_s), (blk, it_b), pri, tol, 0.85)
    assert (seg.numpy()[~region] == 0).all() and (seg[0] == 0).all() and (seg[1] == 0).all()
    assert it_s[0] == 1 and it_s[1] == 1  # an empty region and a zero prior stop at once, as in the block path
    if dtype == np.float64:
        np.testing.assert_allclose(seg.numpy(), exact_ppr(P, pri, 0.85, region), rtol=0, atol=1e-9)


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-10), (np.float32, 1e-6)])
def test_segmented_edge_batches(monkeypatch, rng, rounding, dtype, tol):
    """B = 1; walks stopped by max_iter; regions that are every chunk (no union restriction)."""
    P = random_graph(60, 0.06, 20, dangling=(5,))
    pri, region = local_regions(P, 4, 4, rng)
    pri = pri.astype(dtype)
    for p, r, max_iter in ((pri[:1], region[:1], 500), (pri, region, 3), (pri[:2], np.ones_like(region[:2]), 500)):
        (seg, it_s), (blk, it_b) = both_strategies(monkeypatch, P, p, r, d=0.85, tol=tol, max_iter=max_iter)
        assert_same_walk((seg, it_s), (blk, it_b), p, tol, 0.85)
        assert (it_s <= max_iter).all() and (it_b <= max_iter).all()
        assert max_iter != 3 or int(it_s.max()) == int(it_b.max()) == 3


def test_all_empty_regions_match_the_block_path():
    """Every region empty (the chooser takes the segmented walk: 0 entries): π = 0 and one iteration
    per row, what the block path gives on an empty union (its driver called directly here)."""
    bp = bpr()
    P = random_graph(30, 0.1, 21)
    x0 = torch.zeros((0, 3), dtype=torch.float64)
    A = bp.iteration_matrix(P.indptr, P.indices, P.data, 30, np.zeros(30, bool), 0.85, np.dtype(np.float64),
                            np.zeros(0, np.int64))
    _, it_block = bp.power_iterate(bp.CpuStep(A, x0), x0, x0, x0, torch.full((3,), 1e-6, dtype=torch.float64), 100)
    for dtype in (np.float64, np.float32):
        pi, it = call("batched_ppr", P, np.full((3, 30), 1 / 30, dtype), region=np.zeros((3, 30), bool),
                      device="cpu")
        assert pi.shape == (3, 30) and (pi == 0).all() and torch.equal(it, it_block) and (it == 1).all()


def test_chooser_picks_by_share(monkeypatch, rng):
    """Small regions take the segmented walk; regions that all overlap fully (every row the same
    region: Σ|R_b| = U·B) take the union block."""
    bp = bpr()
    P = random_graph(200, 0.02, 22)
    pri, region = local_regions(P, 16, 2, rng)
    assert region.sum() <= bp.SEGMENT_SHARE * region.any(0).sum() * len(region)
    taken = []
    orig = bp.segmented_ppr
    monkeypatch.setattr(bp, "segmented_ppr", lambda *a, **k: taken.append(1) or orig(*a, **k))
    call("batched_ppr", P, pri, region=region, device="cpu")
    assert taken == [1]
    same = np.repeat(region[:1], 16, axis=0)
    call("batched_ppr", P, pri, region=same, device="cpu")
    assert taken == [1]


def test_segmented_batch_independence(monkeypatch, rng):
    """A row's segmented walk depends on its own prior and region only: alone, in its batch, in a
    shuffled batch with duplicates — bit for bit, iterations included."""
    P = random_graph(150, 0.03, 23, dangling=(7,))
    pri, region = local_regions(P, 8, 3, rng)
    adversarial_rows(pri, region, (7,))
    kw = dict(d=0.85, tol=1e-9, max_iter=500, device="cpu")
    run = lambda p, r: call("batched_ppr", P, p, region=r, **kw)  # noqa: E731
    pi, iters = with_strategy(monkeypatch, True, lambda: run(pri, region))
    order = np.r_[rng.permutation(8), [3, 3, 5]]
    sh, it_sh = with_strategy(monkeypatch, True, lambda: run(pri[order], region[order]))
    assert torch.equal(sh, pi[order]) and torch.equal(it_sh, iters[order])
    for b in range(8):
        one, it = with_strategy(monkeypatch, True, lambda: run(pri[b:b + 1], region[b:b + 1]))
        assert torch.equal(one[0], pi[b]) and it[0] == iters[b]


@pytest.mark.parametrize("share", [0.0, 0.5, 1.01])
def test_segmented_compaction_is_exact(monkeypatch, rng, share):
    """Stopped segments dropped at once (0), at half the iterate (the default) or never (1.01):
    the same π bit for bit, and each query's own stop."""
    bp = bpr()
    P = random_graph(150, 0.03, 24, dangling=(2,))
    pri, region = local_regions(P, 9, 3, rng)
    kw = dict(d=0.85, tol=1e-9, max_iter=500, region=region, device="cpu")
    ref = with_strategy(monkeypatch, True, lambda: call("batched_ppr", P, pri, **kw))
    assert len(set(ref[1].tolist())) > 2
    monkeypatch.setattr(segmented(), "SEGMENT_COMPACT_SHARE", share)
    got = with_strategy(monkeypatch, True, lambda: call("batched_ppr", P, pri, **kw))
    assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1])


@pytest.mark.parametrize("budget", [1, 7, 1 << 16])
def test_block_diagonal_is_each_regions_submatrix(monkeypatch, rng, budget):
    """block_diagonal (vectorised, chunked by EXPAND_ENTRIES) equals scipy's block_diag of the
    per-query sub-matrices A[R_b][:, R_b], rows and columns sorted; keep_entries drops whole blocks."""
    bp, sg = bpr(), segmented()
    monkeypatch.setattr(sg, "EXPAND_ENTRIES", budget)
    P = random_graph(90, 0.05, 25, dangling=(4,))
    _, region = local_regions(P, 6, 3, rng)
    region[2] = False  # an empty block
    rows = bp.union_rows(region)
    A = bp.iteration_matrix(P.indptr, P.indices, P.data, 90, np.asarray(P.sum(0)).ravel() == 0, 0.85,
                            np.dtype(np.float64), rows)
    query, node, offsets = sg.region_entries(region, rows)
    chunks = sg.expand_chunks(np.diff(A.indptr)[node], budget)
    assert chunks[0][0] == 0 and chunks[-1][1] == len(node) and (len(chunks) > 1) == (budget < 1 << 16)
    BD = sg.block_diagonal(A, query, node)
    blocks = [A[node[offsets[b]:offsets[b + 1]]][:, node[offsets[b]:offsets[b + 1]]] for b in range(6)]
    ref = sp.block_diag(blocks, format="csr")
    assert BD.shape == ref.shape == (int(region.sum()),) * 2 and BD.has_sorted_indices
    assert BD.nnz == ref.nnz and abs(BD - ref).max() == 0
    keep = np.repeat(np.arange(6) % 2 == 1, np.diff(offsets))
    kept = sg.keep_entries(BD, keep)
    assert abs(kept - sp.block_diag(blocks[1::2], format="csr")).max() == 0


def test_segment_sums_empty_segments():
    bp = segmented()
    v = np.arange(1, 7, dtype=np.float32)
    got = bp.segment_sums(v, np.array([0, 2, 0, 3, 1, 0]))
    assert got.dtype == np.float64 and got.tolist() == [0.0, 3.0, 0.0, 12.0, 6.0, 0.0]
    assert bp.segment_sums(np.zeros(0), np.array([0, 0])).tolist() == [0.0, 0.0]


# --- column groups of the CPU block path ---

def test_column_groups_rule():
    """Groups of GROUP_COLUMNS only where the whole block exceeds the cache budget and a group fits."""
    bp = bpr()
    cache = bp.GROUP_CACHE_BYTES
    small = cache // (64 * 4)  # rows whose [rows, 64] float32 block just fits: one group
    assert bp.column_groups(small, 64, 4) == [slice(0, 64)]
    rows = cache // (bp.GROUP_COLUMNS * 4)  # a group's block just fits, the whole one does not
    groups = bp.column_groups(rows, 20, 4)
    assert [(g.start, g.stop) for g in groups] == [(0, 8), (8, 16), (16, 20)]
    assert bp.column_groups(rows + 1, 20, 4) == [slice(0, 20)]  # not even a group fits
    assert bp.column_groups(rows, bp.GROUP_COLUMNS, 4) == [slice(0, bp.GROUP_COLUMNS)]


@pytest.mark.parametrize("localised", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_column_groups_change_no_column(monkeypatch, rng, rounding, localised, dtype):
    """The block path in column groups (forced by a tiny cache budget; walked one after the other and
    on three threads side by side) returns, for every column, the whole block's π and iteration
    count within rounding (groups of 8 and 3 columns are products of other widths than the whole
    block's 19): sparse and dense priors, columns stopping apart, an empty region, a zero prior, a
    dangling chunk (SPEC §2 step 6)."""
    bp = bpr()
    n, B = 60, 19
    P = random_graph(n, 0.08, 11, dangling=(3, 40))
    pri = priors_for(B, n, rng).astype(dtype)
    pri[::3] = np.where(rng.random((len(pri[::3]), n)) < 0.05, 1.0, 0.0)  # sparse rows: the sparse start
    pri[::3] /= np.maximum(pri[::3].sum(1, keepdims=True), 1e-30)
    region = rng.random((B, n)) < 0.7
    adversarial_rows(pri, region, (3, 40))
    tol = 1e-9 if dtype == np.float64 else 1e-6
    kw = dict(d=0.85, tol=tol, max_iter=300, region=region if localised else None, device="cpu")
    run = lambda: call("batched_ppr", P, pri, **kw)  # noqa: E731
    whole = with_strategy(monkeypatch, False, run) if localised else run()
    monkeypatch.setattr(bp, "GROUP_CACHE_BYTES", n * bp.GROUP_COLUMNS * np.dtype(dtype).itemsize)
    assert len(bp.column_groups(n, B, np.dtype(dtype).itemsize)) == 3
    grouped = with_strategy(monkeypatch, False, run) if localised else run()
    kw["threads"] = 3  # three groups walked side by side
    side = with_strategy(monkeypatch, False, run) if localised else run()
    assert len(set(whole[1].tolist())) > 2
    for got in (grouped, side):
        assert_same_walk(got, whole, pri, tol, 0.85)
    np.testing.assert_allclose(grouped[0].numpy(), exact_ppr(P, pri, 0.85, region if localised else None),
                               rtol=0, atol=tol * 0.85 / 0.15 + 1e-6)  # the stop: within tol·d/(1 − d)


# --- the stop rule: tolerances the float type can resolve, and columns whose change stalls ---

@pytest.mark.parametrize("backend", [None, "triton"])
def test_tol_below_the_float_resolution_warns_and_uses_the_floor(rng, backend):
    """float32 priors with tol = 1e-12 (below one rounding unit of a prior's mass): a
    ToleranceWarning, and each column stops as it does at its own floor ε·‖p_b‖₁; float64 priors
    resolve 1e-12 and do not warn."""
    P = random_graph(80, 0.05, 30, dangling=(2,))
    pri = priors_for(5, 80, rng).astype(np.float32)
    pri[3] *= 4.0  # a heavier prior: a higher floor than the others
    kw = dict(d=0.85, max_iter=300, device="cpu", backend=backend)
    with pytest.warns(ToleranceWarning, match=r"tol=1e-12 is below what torch.float32 resolves"):
        low = call("batched_ppr", P, pri, tol=1e-12, **kw)
    floor = np.finfo(np.float32).eps * pri.sum(1, dtype=np.float64)
    for b in (1, 3):
        with pytest.warns(ToleranceWarning):  # tol just under the floor: the floor itself is used
            at_floor = call("batched_ppr", P, pri[b:b + 1], tol=float(floor[b]) * (1 - 1e-4), **kw)
        assert_same_walk(at_floor, (low[0][b:b + 1], low[1][b:b + 1]), pri[b:b + 1], float(floor[b]), 0.85)
    assert (low[1] < 300).all()  # every column stops well before max_iter
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", ToleranceWarning)
        call("batched_ppr", P, pri.astype(np.float64), tol=1e-12, **kw)


def test_stop_rule_meets_tolerance_or_stalls():
    """StopRule: a column stops when its change is at most its tolerance, or when it has gone
    STALL_ITERS iterations without a new smallest change (and not before)."""
    from hopgraph.kernels.ppr_stop import STALL_ITERS, StopRule

    rule = StopRule(torch.tensor([1e-3, 1e-9, 1e-9], dtype=torch.float64))
    changes = [[1.0, 1.0, 1.0], [1e-2, 1e-6, 0.5], [1e-4, 2e-6, 0.25]] + [[1e-4, 3e-6, 0.1]] * STALL_ITERS
    got = [rule.done(torch.tensor(c, dtype=torch.float64)).tolist() for c in changes]
    assert got[2][0] and not any(g[0] for g in got[:2])  # column 0: its tolerance at the third iteration
    stalled = [g[1] for g in got]
    assert stalled[1 + STALL_ITERS] and not any(stalled[:1 + STALL_ITERS])  # column 1: no new minimum since the second
    assert not any(g[2] for g in got)  # column 2: still decreasing
    rule.keep(torch.tensor([2]))
    assert rule.tols.tolist() == [1e-9] and rule.best.tolist() == [0.1]


def test_cycling_walks_stop_at_the_stall_not_max_iter():
    """A walk whose iterate cycles (a change that never falls: what float rounding does near the
    fixed point) stops STALL_ITERS iterations after its smallest change, in the block driver and
    in the segmented walk, while a converging column of the same batch stops at its tolerance."""
    from hopgraph.kernels.ppr_stop import STALL_ITERS

    bp = bpr()
    x0 = torch.tensor([[1.0, 1.0], [0.0, 1.0]], dtype=torch.float64)  # column 0 cycles, column 1 halves

    def step(x, y, c, mask):  # c marks each column's kind (compacted with the block)
        torch.where(c == 1, x.flip(0), 0.5 * x, out=y)  # a swap (change 2 every iteration), or a halving

    kinds = torch.tensor([[1.0, 0.0], [1.0, 0.0]], dtype=torch.float64)
    tols = torch.full((2,), 1e-6, dtype=torch.float64)
    pi, iters = bp.power_iterate(step, x0, kinds, None, tols, 1000)
    assert iters[0] == 1 + STALL_ITERS and 20 < iters[1] < 30
    swap = sp.csr_matrix(np.array([[0.0, 1.0], [1.0, 0.0]]))
    out, seg_iters = segmented().segmented_iterate(swap, np.array([1.0, 0.0]), np.zeros(2), np.array([0, 2]),
                                          torch.full((1,), 1e-6, dtype=torch.float64), 1000)
    assert seg_iters.tolist() == [1 + STALL_ITERS]


@pytest.mark.parametrize("backend", [None, "triton"])
def test_tol_none_runs_every_column_max_iter_iterations(rng, backend):
    """tol=None: every column runs max_iter iterations (a fixed number of steps: the benchmarks' work),
    an all-zero prior and a converged walk included, without a warning; π is that many power steps."""
    import warnings

    P = random_graph(40, 0.1, 31, dangling=(2,))
    pri = priors_for(4, 40, rng).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ToleranceWarning)
        pi, iters = call("batched_ppr", P, pri, d=0.85, tol=None, max_iter=40, device="cpu", backend=backend)
    assert iters.tolist() == [40] * 4
    M = P.toarray() + np.diag((np.asarray(P.sum(0)).ravel() == 0).astype(float))
    x = pri.astype(np.float64).T
    for _ in range(40):
        x = 0.15 * pri.T + 0.85 * M @ x
    np.testing.assert_allclose(pi.numpy(), x.T, rtol=0, atol=1e-6)


@pytest.mark.parametrize("backend", [None, "triton"])
def test_p_as_tensors_stays_where_it_is(rng, monkeypatch, backend):
    """P given as a triple of tensors (on a GPU: the pipelines' device-resident graph) is checked
    where it is — the same results as scipy's P, the same named errors — and the Triton path never
    copies it to the host (tensors of this CPU stand for a device's here)."""
    bp = bpr()
    P = random_graph(30, 0.15, 32, dangling=(4,))
    pri = priors_for(3, 30, rng).astype(np.float32)
    triple = tuple(torch.from_numpy(a) for a in (P.indptr.astype(np.int64), P.indices, P.data.astype(np.float32)))
    copied = []
    monkeypatch.setattr(bp, "as_numpy", lambda a: copied.append(a) or np.asarray(a))
    got = call("batched_ppr", triple, pri, d=0.85, tol=1e-6, max_iter=100, device="cpu", backend=backend)
    assert (copied == []) == (backend == "triton")
    monkeypatch.undo()
    ref = call("batched_ppr", P, pri, d=0.85, tol=1e-6, max_iter=100, device="cpu", backend=backend)
    assert_same_walk(got, ref, pri, 1e-6, 0.85)
    bad_data = triple[2].clone()
    bad_data[5] = -bad_data[5]
    bad_cols = triple[1].clone()
    bad_cols[3] = 30
    for P_bad, message in (((triple[0], triple[1], bad_data), r"data must be non-negative; data\[5\]"),
                           ((triple[0], bad_cols, triple[2]), r"indices must hold column ids in \[0, 30\)"),
                           ((triple[0], triple[1], triple[2] * 2), "must be column-stochastic")):
        with pytest.raises(InputError, match=message):
            call("batched_ppr", P_bad, pri, device="cpu", backend=backend)


@pytest.mark.parametrize("backend", [None, "triton"])
def test_scipy_p_is_checked_where_the_path_runs(rng, monkeypatch, backend):
    """A scipy P (what a user hands ``call``) is checked as NumPy on the CPU path and, on the Triton
    path, copied to its device once and checked there (no pass over its arrays on the host); both
    give the same walk and the same named errors."""
    bp = bpr()
    P = random_graph(30, 0.15, 33, dangling=(4,))
    pri = priors_for(3, 30, rng).astype(np.float32)
    seen = []
    validate = bp.validate_csr
    monkeypatch.setattr(bp, "validate_csr", lambda *a, **k: seen.append(type(a[0])) or validate(*a, **k))
    got = call("batched_ppr", P, pri, d=0.85, tol=1e-6, max_iter=100, device="cpu", backend=backend)
    assert seen == [torch.Tensor if backend == "triton" else np.ndarray]
    monkeypatch.undo()
    assert_same_walk(got, call("batched_ppr", P, pri, d=0.85, tol=1e-6, max_iter=100, device="cpu"), pri, 1e-6, 0.85)
    bad = P.copy()
    bad.data[2] = np.nan
    with pytest.raises(InputError, match=r"P: data must be finite \(no NaN or infinity\); data\[2\] = nan"):
        call("batched_ppr", bad, pri, device="cpu", backend=backend)

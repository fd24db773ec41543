"""The ops of :mod:`hopgraph.kernels` at the 10⁶ shapes, as their Triton wrappers launch them: the
input of :mod:`.gpu_model` (bytes and FLOPs the op needs; per launch its CTAs, the executions of
its instructions per CTA and the traffic of the implementation).

An op whose wrapper autotunes gets one workload per configuration; the model keeps the fastest
estimate, as the autotuner would. Data-dependent trip counts come from stated models:
:func:`select_stream` for the top-k selection of ``gain_knn`` (a row's candidates in random order).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .gpu_model import Launch, Workload
from .sass import Listing, Loop, skips

F32, F64 = 4, 8
#: SMs of an H100 / H200 (for the waves that share X through L2)
SMS = 132
#: the 10⁶ shapes (MiniLM's d, G3RAG's k, the PPR block of 256 priors, STITCH's batch of 64)
N, D, K = 10 ** 6, 384, 32
PPR = {"n": 10 ** 6, "nnz": 10 ** 7, "B": 256, "iterations": 30}
#: near-misses per entering entry: candidates whose hi·hi bound passes a row's k-th weight but whose
#: weight does not. Their share is the weight density at the threshold times the bound's width over
#: the tail mass beyond it (the hazard rate): for a Gaussian-like tail at the top-32-of-10⁶ quantile
#: (z ≈ 4.5, σ ≈ 0.07) and a width of 2⁻⁹·|g'| ≤ 0.003, about 0.15; taken as 0.25
NEAR_MISS = 0.25


def mma_loops(listing: Listing) -> list[Loop]:
    """The loops holding tensor-core instructions, in address order."""
    return [l for l in listing.loops if l.mma]


def select_stream(n: int, k: int, block_m: int, block_n: int) -> tuple[float, float]:
    """(passing tiles, selection rounds) per CTA of ``gain_knn``'s register top-k over ``n`` columns
    in tiles of ``block_n``, ``block_m`` rows a CTA, when each row meets its candidates in random
    order: the entry at position t enters a row's top-k with probability min(1, k/t), so a row takes
    ``e_j = Σ_{t ∈ tile j} min(1, k/t)`` entries (Poisson) from tile j; the tile passes the bound when
    some row of the CTA may take one (near-misses included, :data:`NEAR_MISS`), and its selection
    runs as many rounds as the most entries a row takes (at most k)."""
    tiles = math.ceil(n / block_n)
    t = np.arange(1, n + 1, dtype=np.float64)
    enter = np.minimum(1.0, k / t)
    e = np.add.reduceat(enter, np.arange(0, n, block_n))
    passing = 1.0 - np.exp(-block_m * e * (1.0 + NEAR_MISS))
    rounds = np.zeros(tiles)
    for j in range(tiles):  # E[max of block_m Poisson(e_j)], capped at k
        lam = e[j]
        if lam <= 0:
            continue
        cdf, term, total, m = math.exp(-lam), math.exp(-lam), 0.0, 0
        while m < k and 1.0 - cdf ** block_m > 1e-12:
            total += 1.0 - cdf ** block_m
            m += 1
            term *= lam / m
            cdf += term
        rounds[j] = total
    return float(passing.sum()), float(rounds.sum())


def register_topk_launch(kernel: str, config: str, b: Any, rows: int, cols: int) -> tuple[Launch, float, float]:
    """One launch of a register top-k kernel (``gain_knn``'s or ``gain_knn_rows``'s) over ``rows`` rows and
    ``cols`` columns: ``(launch, passing tiles, selection rounds)`` per CTA. A tile passes its rows'
    similarity floors as often as :func:`select_stream` says a row may take one of its entries (the floor
    is the k-th weight at the largest penalty: the rows' top entries are taken to have penalties near it)."""
    bm, bn, bd = (b.constexprs[x] for x in ("BLOCK_M", "BLOCK_N", "BLOCK_D"))
    tiles = cols / bn
    passing, rounds = select_stream(cols, K, bm, bn)
    steps = math.ceil(D / bd)

    def execs(loop: Loop | None, address: int, listing: Listing) -> float:
        mma = mma_loops(listing)
        if loop is None:
            return 1.0
        if loop.mma:  # hi·hi every tile; its two correction terms on passing tiles
            return steps * (tiles if loop is mma[0] else passing)
        if loop.depth == 2:
            return rounds
        floor = skips(listing, loop)[0]  # the similarity floor's if
        if address <= floor.address or address >= floor.target:
            return tiles  # hi·hi scaled and compared with the floor; the loop's tail
        return passing  # the split completed and the selection, on tiles over the floor

    ctas = math.ceil(rows / bm)
    resident = SMS * max(1, 16 // b.num_warps)
    tile_bytes = (bm + bn) * D * 2  # float16 operands
    launch = Launch(kernel, config, ctas, execs, hbm_bytes=(rows + cols) * D * 2 * math.ceil(ctas / resident),
                    l2_bytes=ctas * (tiles + 2 * passing) * tile_bytes)
    return launch, passing / tiles, rounds


def gain_knn(builds: dict) -> list[Workload]:
    """gain_knn at N = 10⁶, d = 384, k = 32: every autotuned configuration of the register top-k
    (:func:`register_topk_launch`)."""
    out = []
    for (kernel, config), b in builds.items():
        if kernel != "gain_knn" or not config.startswith(f"k{K}-"):
            continue
        launch, passing, rounds = register_topk_launch("gain_knn", config, b, N, N)
        out.append(Workload("gain_knn", {"N": N, "d": D, "k": K}, bytes=N * D * F32 + N * K * 8,
                            flops=2 * N * N * D, precision="fp16", passes=3, launches=[launch],
                            host_bytes=N * K * 8,
                            notes=[f"{passing:.0%} of tiles pass the bound, {rounds:.0f} rounds a CTA"]))
    return out


#: rows added at once in the model of ``gain_knn_rows`` (G3RAG's add of 1,000 passages to N = 10⁶)
ADDED = 1000


def gain_knn_rows(builds: dict) -> list[Workload]:
    """gain_knn_rows as G3RAG's add of :data:`ADDED` passages to N = 10⁶ runs it: the added rows among all
    N, and the reverse direction (the N rows among the added ones, the same kernel with the two sets
    exchanged), every autotuned configuration. The reverse launch is modelled as if its rows held no edge
    yet (their floors are their k-th weights in the graph, so fewer of its tiles pass: an upper bound)."""
    out = []
    for (kernel, config), b in builds.items():
        if kernel != "gain_knn_rows" or not config.startswith(f"k{K}-"):
            continue
        fwd, passing, _ = register_topk_launch(kernel, config, b, ADDED, N)
        rev, _, _ = register_topk_launch(kernel, config, b, N, ADDED)
        out.append(Workload(kernel, {"M": ADDED, "N": N, "d": D, "k": K}, bytes=(N + ADDED) * D * F32
                            + (N + ADDED) * K * 8, flops=2 * 2 * ADDED * N * D, precision="fp16", passes=3,
                            launches=[fwd, rev], host_bytes=(N + ADDED) * K * 8,
                            notes=[f"{passing:.0%} of the added rows' tiles pass the bound"]))
    return out


def density(builds: dict) -> list[Workload]:
    """density, exact mode, at N = 10⁶, d = 384: every autotuned configuration."""
    out = []
    for (kernel, config), b in builds.items():
        if kernel != "density" or not config.startswith("exact-"):
            continue
        bm, bn, bd = (b.constexprs[x] for x in ("BLOCK_M", "BLOCK_N", "BLOCK_D"))
        tiles = N / bn

        def execs(loop: Loop | None, address: int, listing: Listing, tiles=tiles, steps=math.ceil(D / bd)) -> float:
            if loop is None:
                return 1.0
            return tiles * (steps if loop.mma else 1)

        ctas = math.ceil(N / bm)
        resident = SMS * max(1, 16 // b.num_warps)
        launch = Launch("density", config, ctas, execs, hbm_bytes=2 * N * D * 2 * math.ceil(ctas / resident),
                        l2_bytes=ctas * tiles * 3 * (bm + bn) * D * 2)
        out.append(Workload("density", {"N": N, "d": D, "mode": "exact"}, bytes=N * D * F32 + N * F64,
                            flops=2 * N * N * D, precision="fp16", passes=3, launches=[launch], host_bytes=N * F64))
    return out


def batched_ppr(builds: dict) -> list[Workload]:
    """batched_ppr, 30 iterations at 10⁶ nodes, 10⁷ edges (≈ 10 a row), 256 float32 priors: one launch
    per iteration, rows in entry-count order (a step's rows have the same length, ⌈10 / CHUNK⌉ chunks),
    the column changes summed on the device, a host round trip every 8 iterations."""
    from hopgraph.kernels.batched_ppr_triton import CHECK_EVERY, ROWS, ROWS_PER_PROGRAM, padded, tile

    n, nnz, B, it = PPR["n"], PPR["nnz"], PPR["B"], PPR["iterations"]
    bp = padded(B)
    block_b, chunk = tile(bp, F32)
    ctas = math.ceil(n / ROWS_PER_PROGRAM) * math.ceil(bp / block_b)
    steps = ROWS_PER_PROGRAM // ROWS
    chunks = math.ceil(nnz / n / chunk)

    def execs(loop: Loop | None, address: int, listing: Listing) -> float:
        if loop is None:
            return 1.0
        return steps * (chunks if loop.depth == 2 else 1)

    block = n * bp * F32
    shares = math.ceil(n / ROWS_PER_PROGRAM) * bp * F32
    step = Launch("batched_ppr", f"b{B}-fp32", ctas, execs, count=it,
                  hbm_bytes=nnz * bp * F32 + 3 * block + nnz * 8 * (bp // block_b) + n * 24 + shares)
    # per iteration on the device: the shares summed (torch), the stop flags and counts updated
    test = Launch("batched_ppr", f"b{B}-fp32", 0, lambda l, a, s: 0.0, hbm_bytes=shares, count=it * 4)
    ideal = it * (nnz * B * F32 + 3 * n * B * F32 + nnz * 8)
    return [Workload("batched_ppr", {"n": n, "nnz": nnz, "B": B, "iterations": it, "dtype": "float32"},
                     bytes=ideal, flops=2 * nnz * B * it, precision="fp32", launches=[step, test],
                     syncs=math.ceil(it / CHECK_EVERY))]


def shapley_mc(builds: dict) -> list[Workload]:
    """shapley_mc at DMAR's batch: B = 256 questions, C = 100 candidates, G = 16, U = 128, T = 50."""
    from hopgraph.kernels.shapley_mc_triton import blocks

    B, C, G, U, T = 256, 100, 16, 128, 50
    bl = blocks(G, C, U)
    ctas = B * math.ceil(C / bl["BLOCK_C"])
    chunks = math.ceil(U / bl["BLOCK_U"])
    config = next(c for (k, c) in builds if k == "shapley_mc" and c.startswith(f"g{G}u{U}-"))

    def execs(loop: Loop | None, address: int, listing: Listing) -> float:
        if loop is None:
            return 1.0
        return T * (chunks if loop.depth == 2 else 1)

    launch = Launch("shapley_mc", config, ctas, execs, hbm_bytes=B * T * G * G + B * C * U + B * G * U + B * C * G * 8,
                    l2_bytes=ctas * T * (G * G + chunks * bl["BLOCK_U"] * (G + bl["BLOCK_C"])))
    blocks_c = math.ceil(C / bl["BLOCK_C"])
    flops = 2 * B * T * (blocks_c * G * G * U + 2 * G * U * C)  # unions per candidate block, two overlaps
    return [Workload("shapley_mc", {"B": B, "C": C, "G": G, "U": U, "T": T},
                     bytes=B * T * G * G + B * C * U + B * G * U + B * C * G * 8, flops=flops,
                     precision="fp16", launches=[launch], host_bytes=B * T * G * G)]


def hyperedge_max_propagate(builds: dict) -> list[Workload]:
    """hyperedge_max_propagate at B = 64, V = 10⁶ nodes, E = 2·10⁵ hyperedges, I = 3·10⁶ incidences
    (15 members a hyperedge, 3 hyperedges a node): A transposed to [V, B], contiguous rows."""
    from hopgraph.kernels.hyperedge_max_propagate_triton import BLOCK_M, EDGES, NODES, block_b

    B, V, E, I = 64, 10 ** 6, 2 * 10 ** 5, 3 * 10 ** 6
    bb = block_b(B)
    nb = math.ceil(B / bb)
    member_steps = math.ceil(I / E / BLOCK_M)
    inc_steps = math.ceil(I / V / BLOCK_M)

    def per(items: int, steps: int):
        return lambda loop, address, listing: 1.0 if loop is None else items * (steps if loop.depth == 2 else 1)

    edge_cfg = next(c for (k, c) in builds if k == "hyperedge_max_propagate" and c.startswith("edge-"))
    node_cfg = next(c for (k, c) in builds if k == "hyperedge_max_propagate" and c.startswith("node-"))
    row = B * F32
    transposes = Launch("hyperedge_max_propagate", edge_cfg, 0, lambda l, a, s: 0.0, hbm_bytes=4 * V * row, count=2)
    edge = Launch("hyperedge_max_propagate", edge_cfg, math.ceil(E / EDGES) * nb, per(EDGES, member_steps),
                  hbm_bytes=I * row + I * row + E * row + I * 4 + E * 8, l2_bytes=3 * I * row)
    node = Launch("hyperedge_max_propagate", node_cfg, math.ceil(V / NODES) * nb, per(NODES, inc_steps),
                  hbm_bytes=I * row + V * row + I * 4 + V * 8)
    ideal = B * V * F32 * 2 + B * E * F32 + (E + V) * 8 + 2 * I * 4
    return [Workload("hyperedge_max_propagate", {"B": B, "V": V, "E": E, "I": I}, bytes=ideal, flops=3 * B * I,
                     precision="fp32", launches=[transposes, edge, node])]


def group_decay_propagate(builds: dict) -> list[Workload]:
    """group_decay_propagate at B = 64, V = 10⁶, 5,000 activated nodes per question, groups of 20:
    one program per activated state, atomic maxima into [B, V]."""
    B, V, active, size = 64, 10 ** 6, 5000, 20
    sources = B * active
    launch = Launch("group_decay_propagate", "m32", sources,
                    lambda loop, a, s: 1.0 if loop is None else math.ceil(size / 32),
                    hbm_bytes=sources * size * (4 + 8 + 32) + 2 * B * V * F32)
    return [Workload("group_decay_propagate", {"B": B, "V": V, "active": active, "group": size},
                     bytes=3 * B * V * F32 + sources * size * 12, flops=sources * size * 8, precision="fp32",
                     launches=[launch])]


def sparse_diffusion(builds: dict) -> list[Workload]:
    """sparse_diffusion at B = 256 questions, 8 seeds, N = 10⁶, 32 out-edges a row, ``top=100``:
    seed terms, a stable sort of their keys, float64 run sums; the runs (not a [B, N] array) to the host."""
    from hopgraph.kernels.sparse_diffusion_triton import BLOCK, RUNS

    B, s, n, k = 256, 8, 10 ** 6, 32
    terms = B * s * k

    def per_seed(loop: Loop | None, address: int, listing: Listing) -> float:
        if loop is None:
            return 1.0
        return k if loop.inclusive.get("DADD") else math.ceil(k / BLOCK)

    def per_run(loop: Loop | None, address: int, listing: Listing) -> float:
        return 1.0 if loop is None else 1.0

    seeds = Launch("sparse_diffusion", "terms-norm", B * s, per_seed, hbm_bytes=B * s * (k * 8 + 32) + terms * 16)
    sort = Launch("sparse_diffusion", "runs-r128", 0, lambda l, a, x: 0.0, hbm_bytes=4 * terms * 16, count=4)
    runs = Launch("sparse_diffusion", f"runs-r{RUNS}", math.ceil(terms / RUNS), per_run, hbm_bytes=terms * 24)
    ideal = B * s * (16 + k * 8) + B * 100 * 12
    return [Workload("sparse_diffusion", {"B": B, "seeds": s, "N": n, "k": k, "top": 100}, bytes=ideal,
                     flops=2 * terms, precision="fp32", launches=[seeds, sort, runs], syncs=2,
                     host_bytes=terms * 12)]


def workloads(builds: dict[tuple[str, str], Any]) -> list[Workload]:
    """Every op's workloads (several per autotuned op: one a configuration)."""
    return [w for f in (density, gain_knn, gain_knn_rows, sparse_diffusion, hyperedge_max_propagate, group_decay_propagate,
                        batched_ppr, shapley_mc) for w in f(builds)]

"""The ops of :mod:`hopgraph.kernels` at the 10⁶ shapes, as their Triton wrappers launch them: the
input of :mod:`.gpu_model` (bytes and FLOPs the op needs; per launch its CTAs, the trip counts of
its loops and the traffic of the implementation)."""
from __future__ import annotations

import math
from typing import Any

from .gpu_model import Launch, Workload
from .sass import Listing, Loop

F32 = 4


def _mma_loop(loop: Loop) -> bool:
    return loop.has("HMMA", "HGMMA", "FFMA") and loop.inclusive.get("FFMA", 0) + loop.inclusive.get("HMMA", 0) \
        + loop.inclusive.get("HGMMA", 0) >= 16


def gain_knn(builds: dict) -> Workload:
    """gain_knn at N = 10⁶, d = 384, k = 32: one program per BLOCK_M rows walks every column tile."""
    N, d, k = 10 ** 6, 384, 32
    bm, bn, bd = 16, 32, 32
    tiles = N / bn

    def execs(loop: Loop, listing: Listing) -> float:
        if loop.depth == 1:
            return tiles
        return tiles * (math.ceil(d / bd) if _mma_loop(loop) else k)

    x_bytes = N * d * F32
    ctas = math.ceil(N / bm)
    launch = Launch("gain_knn", "k32-m16n32d32", ctas, execs, hbm_bytes=x_bytes * math.ceil(ctas / (132 * 7)),
                    l2_bytes=N * N * d * F32 * (1 / bm + 1 / bn))
    return Workload("gain_knn", {"N": N, "d": d, "k": k}, bytes=x_bytes + N * k * 8, flops=2 * N * N * d,
                    precision="fp32", launches=[launch], host_bytes=N * k * 8)


def density(builds: dict) -> Workload:
    """density, exact mode, at N = 10⁶, d = 384."""
    N, d = 10 ** 6, 384
    bm, bn, bd = 16, 32, 32
    tiles = N / bn

    def execs(loop: Loop, listing: Listing) -> float:
        return tiles if loop.depth == 1 else tiles * math.ceil(d / bd)

    ctas = math.ceil(N / bm)
    launch = Launch("density", "m16n32d32", ctas, execs, hbm_bytes=N * d * F32 * math.ceil(ctas / (132 * 5)),
                    l2_bytes=N * N * d * F32 * (1 / bm + 1 / bn))
    return Workload("density", {"N": N, "d": d, "mode": "exact"}, bytes=N * d * F32 + N * 8,
                    flops=2 * N * N * d, precision="fp32", launches=[launch], host_bytes=N * 8)


def batched_ppr(builds: dict) -> Workload:
    """batched_ppr, 30 iterations at 10⁶ nodes, 10⁷ edges, 256 float32 priors: one CTA per (row,
    16 columns) per iteration, then the convergence test in torch and a host sync."""
    n, nnz, B, it = 10 ** 6, 10 ** 7, 256, 30
    block = n * B * F32
    gathers = nnz * B * F32
    ideal = it * (gathers + 3 * block + nnz * 8)  # gathers, y written, c and x[row] read, P read
    ctas = n * math.ceil(B / 16)

    def execs(loop: Loop, listing: Listing) -> float:
        return math.ceil(nnz / n / 32)

    step = Launch("batched_ppr", "fp32-nnz32b16", ctas, execs, count=it,
                  hbm_bytes=gathers + 3 * block + (B / 16) * nnz * 8)
    # the torch convergence test per iteration: y − x, abs, blocked sums (≈ 5 passes over the block)
    test = Launch("batched_ppr", "fp32-nnz32b16", 0, lambda l, s: 0, hbm_bytes=5 * block, count=it * 4)
    return Workload("batched_ppr", {"n": n, "nnz": nnz, "B": B, "iterations": it, "dtype": "float32"},
                    bytes=ideal, flops=2 * nnz * B * it, precision="fp32", launches=[step, test], syncs=it)


def shapley_mc(builds: dict) -> Workload:
    """shapley_mc at DMAR's batch: B = 256 questions, C = 100 candidates, G = 16, U = 128, T = 50."""
    B, C, G, U, T = 256, 100, 16, 128, 50
    ctas = B * C
    launch = Launch("shapley_mc", "g16u128", ctas, lambda loop, s: T,
                    hbm_bytes=B * T * G * G * F32 + B * C * U * F32 + B * G * U * F32,
                    l2_bytes=ctas * T * G * G * F32)
    return Workload("shapley_mc", {"B": B, "C": C, "G": G, "U": U, "T": T},
                    bytes=B * T * G * G * F32 + B * C * (U + G) * F32 + B * C * G * F32,
                    flops=2 * ctas * T * G * G * U, precision="fp32", launches=[launch])


def hyperedge_max_propagate(builds: dict) -> Workload:
    """hyperedge_max_propagate at B = 64, V = 10⁶ nodes, E = 2·10⁵ hyperedges, I = 3·10⁶
    incidences: A[b, member] gathered across b at stride V (a 32-byte sector per value)."""
    B, V, E, I = 64, 10 ** 6, 2 * 10 ** 5, 3 * 10 ** 6
    sector = 32
    edge = Launch("hyperedge_max_propagate", "edge-m16b16", E * math.ceil(B / 16), lambda loop, s: 1,
                  hbm_bytes=3 * I * B * sector + I * B * sector + B * E * sector)
    node = Launch("hyperedge_max_propagate", "node-m16b16", V * math.ceil(B / 16), lambda loop, s: 1,
                  hbm_bytes=I * B * sector + V * B * sector)
    ideal = B * V * F32 * 2 + B * E * F32 + (E + V) * 8 + 2 * I * 4
    return Workload("hyperedge_max_propagate", {"B": B, "V": V, "E": E, "I": I}, bytes=ideal,
                    flops=3 * B * I, precision="fp32", launches=[edge, node])


def group_decay_propagate(builds: dict) -> Workload:
    """group_decay_propagate at B = 64, V = 10⁶, 5,000 activated nodes per question, groups of 20."""
    B, V, active, size = 64, 10 ** 6, 5000, 20
    sources = B * active
    launch = Launch("group_decay_propagate", "m32", sources, lambda loop, s: math.ceil(size / 32),
                    hbm_bytes=sources * size * (4 + 8 + 32) + 2 * B * V * F32)
    return Workload("group_decay_propagate", {"B": B, "V": V, "active": active, "group": size},
                    bytes=3 * B * V * F32 + sources * size * 12, flops=sources * size * 8, precision="fp32",
                    launches=[launch])


def sparse_diffusion(builds: dict) -> Workload:
    """sparse_diffusion at B = 256 questions, 8 seeds, N = 10⁶, 32 out-edges per row: a dense
    [B, N] result zeroed on the device and copied to the host."""
    B, s, N, k = 256, 8, 10 ** 6, 32
    launch = Launch("sparse_diffusion", "norm-b128", B * s, lambda loop, l: 1,
                    hbm_bytes=B * N * F32 + B * s * k * (8 + 32))
    ideal = B * s * (16 + k * 8) + B * 100 * 8
    return Workload("sparse_diffusion", {"B": B, "seeds": s, "N": N, "k": k}, bytes=ideal,
                    flops=2 * B * s * k, precision="fp32", launches=[launch], host_bytes=B * N * F32)


def workloads(builds: dict[tuple[str, str], Any]) -> list[Workload]:
    return [f(builds) for f in (density, gain_knn, sparse_diffusion, hyperedge_max_propagate,
                                group_decay_propagate, batched_ppr, shapley_mc)]

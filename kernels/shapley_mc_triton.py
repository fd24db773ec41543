"""Triton path of the batched Monte Carlo Shapley op (SPEC §3 step 2; see :mod:`.shapley_mc`).

One program per (query b, block of ``BLOCK_C`` candidates) loops over the T samples; per sample,
for all subgraphs g at once, as in :func:`.shapley_mc.marginal_terms`:

* nodes(S) of g's predecessors S: ``(pred_t · M) > 0``, a ``[G, G] × [G, U]`` product of 0/1
  matrices on tensor cores (float16 operands, float32 sums: exact), in chunks of ``BLOCK_U`` nodes;
* their sizes and their overlaps with the candidates' node sets: ``[G, U] × [U, C]`` products of
  0/1 matrices (exact), weighted by λ/|nodes(S)| and λ/|nodes(S ∪ {g})| into the sum over samples
  of F(S ∪ {g}) − F(S)'s overlap terms.

F's similarity terms are linear in ``best``: their sum over the samples is
``Σ_h Q[g, h]·best[c, h] + best[c, g]·Σ_t v_sg[g]`` with ``Q = Σ_t pred_t · (v_sg − v_s)`` and
``v_s = (1 − λ)/|S|``, ``v_sg = (1 − λ)/(|S| + 1)``: one ``[G, G] × [G, C]`` product after the
loop (three-term TF32 split, near-FP32).

The predecessor masks are drawn on the host by the CPU path's per-query generators
(:func:`.shapley_mc.predecessor_masks`), so both paths estimate from the same samples and a
query's estimate does not depend on its batch. Registers are bounded by the chunk sizes, not by U.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .gain_knn_triton import split_tf32
from .shapley_mc import _check_inputs, as_tensors, check_mode, finish, predecessor_masks

#: candidates per program (at most) and local nodes per chunk
BLOCK_C = 32
BLOCK_U = 64
#: the launch: 4 warps, no software pipelining (the tiles are small and stay in L1), a register cap
#: that keeps three CTAs per SM (12 warps, more than half the 16 at 128 registers)
NUM_WARPS, NUM_STAGES, MAX_REGISTERS = 4, 1, 168


@triton.jit
def _shapley_kernel(pred_ptr, sets_ptr, cand_ptr, best_ptr, out_ptr, T, G, U, C, lam,
                    BLOCK_G: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_U: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)  # int64 bases: b · T · G² grows with the batch
    c0 = tl.program_id(1) * BLOCK_C
    offs_c = c0 + tl.arange(0, BLOCK_C)
    offs_g = tl.arange(0, BLOCK_G)
    g_ok = offs_g < G
    c_ok = offs_c < C
    sets = sets_ptr + b * G * U  # the query's node sets [G, U]
    cand = cand_ptr + (b * C + c0) * U  # the block's candidate node sets [BLOCK_C, U]
    overlap = tl.zeros((BLOCK_G, BLOCK_C), dtype=tl.float32)  # Σ_t of the overlap terms of F(S ∪ {g}) − F(S)
    Q = tl.zeros((BLOCK_G, BLOCK_G), dtype=tl.float32)  # Σ_t pred_t[g, h] · (v_sg − v_s)[g]
    V = tl.zeros((BLOCK_G,), dtype=tl.float32)  # Σ_t v_sg[g]
    for t in range(0, T):
        P = tl.load(pred_ptr + (b * T + t) * G * G + offs_g[:, None] * G + offs_g[None, :],
                    mask=g_ok[:, None] & g_ok[None, :], other=0).to(tl.float16)  # [G, H] 0/1
        count_s = tl.sum(P.to(tl.float32), axis=1)  # |S|
        size_s = tl.zeros((BLOCK_G,), dtype=tl.float32)
        size_sg = tl.zeros((BLOCK_G,), dtype=tl.float32)
        inter_s = tl.zeros((BLOCK_G, BLOCK_C), dtype=tl.float32)
        inter_sg = tl.zeros((BLOCK_G, BLOCK_C), dtype=tl.float32)
        for u0 in range(0, U, BLOCK_U):
            offs_u = u0 + tl.arange(0, BLOCK_U)
            u_ok = offs_u < U
            M = tl.load(sets + offs_g[:, None] * U + offs_u[None, :],
                        mask=g_ok[:, None] & u_ok[None, :], other=0).to(tl.float16)  # [G, U]
            H = tl.load(cand + tl.arange(0, BLOCK_C)[:, None] * U + offs_u[None, :],
                        mask=c_ok[:, None] & u_ok[None, :], other=0).to(tl.float16)  # [C, U]
            union_s = tl.dot(P, M) > 0  # nodes(S)
            union_sg = union_s | (M > 0)  # nodes(S ∪ {g}): row g adds its own nodes
            size_s += tl.sum(union_s.to(tl.float32), axis=1)
            size_sg += tl.sum(union_sg.to(tl.float32), axis=1)
            inter_s = tl.dot(union_s.to(tl.float16), tl.trans(H), inter_s)
            inter_sg = tl.dot(union_sg.to(tl.float16), tl.trans(H), inter_sg)
        # F's weights per subgraph (F(∅) = 0), divided once per subgraph, not per candidate
        w_s = tl.where(count_s > 0, lam / tl.maximum(size_s, 1.0), 0.0)
        w_sg = lam / tl.maximum(size_sg, 1.0)
        v_s = tl.where(count_s > 0, (1 - lam) / tl.maximum(count_s, 1.0), 0.0)
        v_sg = (1 - lam) / (count_s + 1.0)
        overlap += inter_sg * w_sg[:, None] - inter_s * w_s[:, None]
        Q += P.to(tl.float32) * (v_sg - v_s)[:, None]
        V += v_sg
    # the similarity terms, once: Σ_t Σ_{h∈S} best[c, h]·(v_sg − v_s) + best[c, g]·Σ_t v_sg
    bestT = tl.load(best_ptr + (b * C + offs_c[None, :]) * G + offs_g[:, None], mask=g_ok[:, None] & c_ok[None, :],
                    other=0.0)
    q_hi, q_lo = split_tf32(Q)
    b_hi, b_lo = split_tf32(bestT)
    struct = tl.dot(q_hi, b_hi, tl.dot(q_hi, b_lo, tl.dot(q_lo, b_hi, input_precision="tf32"),
                                       input_precision="tf32"), input_precision="tf32")
    total = overlap + struct + bestT * V[:, None]
    tl.store(out_ptr + (b * C + offs_c[None, :]) * G + offs_g[:, None], total / T, mask=g_ok[:, None] & c_ok[None, :])


def blocks(G: int, C: int, U: int) -> dict[str, int]:
    """The constexpr block sizes for a problem of G subgraphs, C candidates and U local nodes (at
    least 16: the tensor-core products' smallest side; from G = 32 on, smaller candidate and node
    blocks keep the program within :data:`MAX_REGISTERS` without spilling)."""
    block_g = max(16, triton.next_power_of_2(G))
    wide = block_g >= 32
    return {"BLOCK_G": block_g, "BLOCK_C": min(16 if wide else BLOCK_C, max(16, triton.next_power_of_2(C))),
            "BLOCK_U": min(32 if wide else BLOCK_U, max(16, triton.next_power_of_2(max(U, 1))))}


def shapley_mc_triton(node_sets: torch.Tensor, n_sub: torch.Tensor, cand_nodes: torch.Tensor,
                      best_sim: torch.Tensor, lam: float = 0.5, T: int = 50, seed: int = 0,
                      mode: str = "independent", device: str = "cuda") -> tuple[torch.Tensor, torch.Tensor]:
    """Triton implementation of ``shapley_mc`` (same arguments and results; tolerance against the
    CPU path 1e-5 absolute: the same samples, sums in another order)."""
    node_sets, n_sub, cand_nodes, best_sim = as_tensors(node_sets, n_sub, cand_nodes, best_sim)
    B, G, U, C = _check_inputs(node_sets, n_sub, cand_nodes, best_sim, lam, T, seed)
    check_mode(mode)
    dev = torch.device("cuda") if device == "cuda" else node_sets.device
    if B == 0 or C == 0 or G == 0:
        return torch.zeros((B, C, G), device=dev), torch.zeros((B, C), device=dev)
    pred = predecessor_masks(n_sub, G, T, seed, mode).to(torch.uint8).to(dev).contiguous()
    sets = node_sets.to(dev, torch.uint8).contiguous()
    cand = cand_nodes.to(dev, torch.uint8).contiguous()
    best = best_sim.to(dev, torch.float32).contiguous()
    out = torch.empty((B, C, G), dtype=torch.float32, device=dev)
    bl = blocks(G, C, U)
    launch = {} if device == "cpu" else {"num_warps": NUM_WARPS, "num_stages": NUM_STAGES, "maxnreg": MAX_REGISTERS}
    _shapley_kernel[(B, triton.cdiv(C, bl["BLOCK_C"]))](pred, sets, cand, best, out, T, G, U, C, float(lam), **bl,
                                                         **launch)
    return finish(out, n_sub.to(dev))


def launch_builds(shapes: dict) -> list[dict]:
    """The builds :func:`shapley_mc_triton` launches at DMAR's subgraph-set sizes (ahead-of-time compile check)."""
    sig = {"pred_ptr": "*u8", "sets_ptr": "*u8", "cand_ptr": "*u8", "best_ptr": "*fp32", "out_ptr": "*fp32",
           "T": "i32", "G": "i32", "U": "i32", "C": "i32", "lam": "fp32", "BLOCK_G": "constexpr",
           "BLOCK_C": "constexpr", "BLOCK_U": "constexpr"}
    out = []
    for g, u in shapes["shapley"]:
        bl = blocks(g, BLOCK_C, u)
        out.append({"kernel": "shapley_mc", "config": f"g{g}u{u}-c{bl['BLOCK_C']}u{bl['BLOCK_U']}",
                    "fn": "shapley_mc_triton:_shapley_kernel", "signature": sig, "constexprs": bl,
                    "aligned": (*tuple(sig)[:5], "U"), "num_warps": NUM_WARPS, "num_stages": NUM_STAGES,
                    "maxnreg": MAX_REGISTERS})
    return out

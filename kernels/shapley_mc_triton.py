"""Triton path of the batched Monte Carlo Shapley op (SPEC §3 step 2; see shapley_mc.py).

One program per (query b, candidate c). It loops over the T samples; for each it
computes, for all subgraphs g at once, nodes(S) as a [G, G, U] max-reduction of the
predecessor mask against the query's subgraph node sets, then F(S) and F(S ∪ {g}).
The predecessor masks are drawn on the host by the same per-query generators as the CPU
path (``shapley_mc.predecessor_masks``: seeded with (seed, |G_Q|), so a query's samples do
not depend on its batch), and both paths produce the same estimates.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .shapley_mc import _check_inputs, as_tensors, finish, predecessor_masks


@triton.jit
def _shapley_kernel(pred_ptr, sets_ptr, cand_ptr, best_ptr, out_ptr, T, G, U, C, lam,
                    BLOCK_G: tl.constexpr, BLOCK_U: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)  # int64 offsets: b · T · G² grows with the batch
    c = tl.program_id(1).to(tl.int64)
    offs_g = tl.arange(0, BLOCK_G)
    offs_h = tl.arange(0, BLOCK_G)
    offs_u = tl.arange(0, BLOCK_U)
    g_ok = offs_g < G
    u_ok = offs_u < U
    # subgraph node sets M[h, u] of query b
    m_ptrs = sets_ptr + b * G * U + offs_h[:, None] * U + offs_u[None, :]
    M = tl.load(m_ptrs, mask=(offs_h[:, None] < G) & u_ok[None, :], other=0.0)
    cand = tl.load(cand_ptr + (b * C + c) * U + offs_u, mask=u_ok, other=0.0)
    best_h = tl.load(best_ptr + (b * C + c) * G + offs_h, mask=offs_h < G, other=0.0)
    best_g = tl.load(best_ptr + (b * C + c) * G + offs_g, mask=g_ok, other=0.0)
    acc = tl.zeros((BLOCK_G,), dtype=tl.float32)
    for t in range(0, T):
        p_ptrs = pred_ptr + ((b * T + t) * G + offs_g[:, None]) * G + offs_h[None, :]
        P = tl.load(p_ptrs, mask=g_ok[:, None] & (offs_h[None, :] < G), other=0.0)  # [G, H]
        union_s = tl.max(P[:, :, None] * M[None, :, :], axis=1)  # [G, U]
        union_s = tl.where(union_s > 0, 1.0, 0.0)
        union_sg = tl.maximum(union_s, M)  # row g adds its own nodes (M rows indexed by g)
        inter_s = tl.sum(union_s * cand[None, :], axis=1)
        inter_sg = tl.sum(union_sg * cand[None, :], axis=1)
        size_s = tl.sum(union_s, axis=1)
        size_sg = tl.sum(union_sg, axis=1)
        struct_s = tl.sum(P * best_h[None, :], axis=1)
        count_s = tl.sum(P, axis=1)
        f_s = lam * inter_s / tl.maximum(size_s, 1.0) + (1 - lam) * struct_s / tl.maximum(count_s, 1.0)
        f_s = tl.where(count_s > 0, f_s, 0.0)
        f_sg = lam * inter_sg / tl.maximum(size_sg, 1.0) + (1 - lam) * (struct_s + best_g) / (count_s + 1.0)
        acc += f_sg - f_s
    tl.store(out_ptr + (b * C + c) * G + offs_g, acc / T, mask=g_ok)


def shapley_mc_triton(node_sets: torch.Tensor, n_sub: torch.Tensor, cand_nodes: torch.Tensor,
                      best_sim: torch.Tensor, lam: float = 0.5, T: int = 50, seed: int = 0,
                      mode: str = "independent", device: str = "cuda") -> tuple[torch.Tensor, torch.Tensor]:
    """Triton implementation of ``shapley_mc`` (same arguments and results)."""
    node_sets, n_sub, cand_nodes, best_sim = as_tensors(node_sets, n_sub, cand_nodes, best_sim)
    B, G, U, C = _check_inputs(node_sets, n_sub, cand_nodes, best_sim, lam)
    dev = torch.device("cuda") if device == "cuda" else node_sets.device
    if B == 0 or C == 0 or G == 0:
        return torch.zeros((B, C, G), device=dev), torch.zeros((B, C), device=dev)
    pred = predecessor_masks(n_sub, G, T, seed, mode).to(dev).contiguous()
    sets = node_sets.to(dev, torch.float32).contiguous()
    cand = cand_nodes.to(dev, torch.float32).contiguous()
    best = best_sim.to(dev, torch.float32).contiguous()
    out = torch.empty((B, C, G), dtype=torch.float32, device=dev)
    block_g = max(triton.next_power_of_2(G), 2)
    block_u = max(triton.next_power_of_2(max(U, 1)), 2)
    _shapley_kernel[(B, C)](pred, sets, cand, best, out, T, G, U, C, float(lam),
                            BLOCK_G=block_g, BLOCK_U=block_u)
    return finish(out, n_sub.to(dev))


def launch_builds(shapes: dict) -> list[dict]:
    """The builds :func:`shapley_mc_triton` launches at DMAR's subgraph-set sizes (ahead-of-time compile check)."""
    sig = {"pred_ptr": "*fp32", "sets_ptr": "*fp32", "cand_ptr": "*fp32", "best_ptr": "*fp32", "out_ptr": "*fp32",
           "T": "i32", "G": "i32", "U": "i32", "C": "i32", "lam": "fp32", "BLOCK_G": "constexpr", "BLOCK_U": "constexpr"}
    return [{"kernel": "shapley_mc", "config": f"g{g}u{u}", "fn": "shapley_mc_triton:_shapley_kernel",
             "signature": sig, "constexprs": {"BLOCK_G": g, "BLOCK_U": u}, "aligned": tuple(sig)[:5]}
            for g, u in shapes["shapley"]]

"""Batched Monte Carlo Shapley scores of query subgraphs (SPEC §3 step 2, structural path).

For one query Q with subgraph set G_Q = {g_1..g_n} and one candidate D with subgraph set G_D,

    F(S) = λ · |nodes(S) ∩ nodes(G_D)| / |nodes(S)|
           + (1 − λ) · mean_{g_s ∈ S} max_{g_d ∈ G_D} structsim(g_s, g_d),      F(∅) = 0,

and Shapley(g) is estimated from T random permutations of G_Q \\ {g}, each cut at a random
prefix S, as the mean marginal gain F(S ∪ {g}) − F(S). Score_ent = mean_g Shapley(g).

The op works on a whole batch at once as tensor operations (no Python loop over
permutations, subgraphs or candidates). Its inputs are already reduced to what F needs:

- ``node_sets`` ``[B, G, U]``: membership (0/1) of the query's local node u in subgraph g
  (rows g ≥ ``n_sub[b]`` are padding);
- ``n_sub`` ``[B]`` (integers): |G_Q| per query;
- ``cand_nodes`` ``[B, C, U]``: whether (0/1) local node u ∈ nodes(G_D) for candidate c;
- ``best_sim`` ``[B, C, G]``: max_{g_d ∈ G_D} structsim(g, g_d) (0 when G_D is empty).

Sampling (choice documented here, SPEC leaves it open): for each (query, t, g) we draw
independent uniform keys for all subgraphs; the predecessors of g under the key order
are a uniformly random permutation of G_Q \\ {g} cut at a uniformly random prefix
length, which is exactly the Shapley weighting. The same permutations are used for
every candidate of a query (common random numbers), so candidates are ranked
against identical samples. ``mode="shared"`` instead uses one permutation per t for all
g (Castro et al. 2009); it is lower-variance, and the mean over g is then exactly
F(G_Q)/|G_Q| by the efficiency axiom.

**Batch independence**: a query's keys depend only on ``seed`` and on its own |G_Q| = n:
they come from a generator seeded with ``(seed, n)`` as a ``[T, n, n]`` block
(:func:`query_predecessors`), never from one stream shared by the batch, so a question
gets the same estimates alone, anywhere in any batch, and whatever the batch's largest
|G_Q| (the padding G). Queries of a batch with the same n share their permutations; each
query's estimate has exactly the distribution it would have with a stream of its own
(only the correlation between different queries changes, which no ranking looks at).
The keys are drawn on the host, so the CPU and Triton paths see identical samples.
"""
from __future__ import annotations

from itertools import combinations
from math import factorial

import numpy as np
import torch

from .errors import InputError
from .dispatch import register
from .tensors import as_tensor

MODES = ("independent", "shared")


def check_mode(mode: str) -> None:
    """``mode`` must be one of :data:`MODES` (:class:`InputError` otherwise)."""
    if mode not in MODES:
        raise InputError(f"mode must be one of {MODES}, got {mode!r}")


def query_predecessors(n: int, T: int, seed: int, mode: str = "independent") -> torch.Tensor:
    """``pred[t, g, h]`` (bool ``[T, n, n]``): subgraph h precedes g in sample t of a query
    with n subgraphs. A function of ``(seed, n, T, mode)`` only (batch independence, module
    docstring): the keys come from a NumPy generator seeded with the pair ``(seed, n)``."""
    rng = np.random.default_rng((int(seed), int(n)))
    shape = (T, n, n) if mode == "independent" else (T, 1, n)
    keys = torch.from_numpy(rng.random(shape)).expand(T, n, n)  # float64: ties are negligible
    own = torch.diagonal(keys, dim1=1, dim2=2)[..., None]  # [T, n, 1] key of g itself
    return (keys < own) & ~torch.eye(n, dtype=torch.bool)


def predecessor_masks(n_sub: torch.Tensor, G: int, T: int, seed: int, mode: str = "independent") -> torch.Tensor:
    """``pred[b, t, g, h] = 1`` when subgraph h precedes g in sample t of query b (float32
    ``[B, T, G, G]``), from :func:`query_predecessors` for each query's own n = ``n_sub[b]``.

    Only valid subgraphs (g, h < n_sub[b], h ≠ g) are set; padding rows and columns are 0.
    """
    check_mode(mode)
    if T < 1:
        raise InputError(f"T (number of permutations) must be >= 1, got {T}")
    n_cpu = n_sub.detach().cpu().to(torch.int64)
    pred = torch.zeros((int(n_cpu.shape[0]), T, G, G), dtype=torch.float32)
    for n in torch.unique(n_cpu).tolist():  # one draw per distinct |G_Q|, not per query
        if n >= 2:  # with fewer than two subgraphs nothing precedes anything
            pred[n_cpu == n, :, :n, :n] = query_predecessors(n, T, seed, mode).to(torch.float32)
    return pred


def _check_inputs(node_sets: torch.Tensor, n_sub: torch.Tensor, cand_nodes: torch.Tensor,
                  best_sim: torch.Tensor, lam: float, T: int = 1, seed: int = 0) -> tuple[int, int, int, int]:
    """Validate both paths' inputs (shapes, integer ``n_sub`` in [0, G], 0/1 memberships, finite
    ``best_sim``, ``lam`` a number in [0, 1], ``T`` a positive and ``seed`` a non-negative integer);
    returns ``(B, G, U, C)``. Raises :class:`InputError` naming the argument."""
    if node_sets.ndim != 3:
        raise InputError(f"node_sets must be [B, G, U], got shape {tuple(node_sets.shape)}")
    B, G, U = node_sets.shape
    if tuple(n_sub.shape) != (B,):
        raise InputError(f"n_sub must have shape ({B},), got {tuple(n_sub.shape)}")
    if n_sub.dtype.is_floating_point or n_sub.dtype.is_complex or n_sub.dtype == torch.bool:
        raise InputError(f"n_sub must be an integer array (|G_Q| per query), got dtype {n_sub.dtype}")
    if cand_nodes.ndim != 3 or cand_nodes.shape[0] != B or cand_nodes.shape[2] != U:
        raise InputError(f"cand_nodes must be [B={B}, C, U={U}], got {tuple(cand_nodes.shape)}")
    C = cand_nodes.shape[1]
    if tuple(best_sim.shape) != (B, C, G):
        raise InputError(f"best_sim must be [B={B}, C={C}, G={G}], got {tuple(best_sim.shape)}")
    if isinstance(lam, bool) or not isinstance(lam, (int, float, np.integer, np.floating)) or not 0.0 <= lam <= 1.0:
        raise InputError(f"lam must be a number in [0, 1], got {lam!r}")
    if isinstance(T, bool) or not isinstance(T, (int, np.integer)) or T < 1:
        raise InputError(f"T (number of permutations) must be an integer >= 1, got {T!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InputError(f"seed must be an integer >= 0, got {seed!r}")
    if (n_sub < 0).any() or (n_sub > G).any():
        raise InputError(f"n_sub values must lie in [0, {G}]")
    if best_sim.is_floating_point() and not bool(torch.isfinite(best_sim).all()):
        raise InputError("best_sim must be finite: it holds NaN or infinite values")
    for name, x in (("node_sets", node_sets), ("cand_nodes", cand_nodes)):
        if x.is_floating_point() and not bool(torch.isfinite(x).all()):
            raise InputError(f"{name} must be finite: it holds NaN or infinite values")
        if x.numel() and not bool(((x == 0) | (x == 1)).all()):
            raise InputError(f"{name} must hold memberships (0 or 1)")
    return B, G, U, C


def marginal_terms(pred: torch.Tensor, node_sets: torch.Tensor, cand_nodes: torch.Tensor,
                   best_sim: torch.Tensor, lam: float) -> torch.Tensor:
    """Mean marginal gains ``[B, C, G]`` for given predecessor masks (the core tensor program)."""
    B, T, G, _ = pred.shape
    C = cand_nodes.shape[1]
    M = node_sets.to(torch.float32)
    H = cand_nodes.to(torch.float32)
    P = pred.reshape(B, T * G, G)
    union_s = (torch.bmm(P, M) > 0).to(torch.float32)  # nodes(S)          [B, T*G, U]
    own = M[:, None, :, :].expand(B, T, G, M.shape[2]).reshape(B, T * G, -1)
    union_sg = torch.maximum(union_s, own)  # nodes(S ∪ {g})                [B, T*G, U]
    Ht = H.transpose(1, 2)  # [B, U, C]
    inter_s = torch.bmm(union_s, Ht)  # |nodes(S) ∩ nodes(G_D)|             [B, T*G, C]
    inter_sg = torch.bmm(union_sg, Ht)
    size_s = union_s.sum(-1, keepdim=True)
    size_sg = union_sg.sum(-1, keepdim=True)
    best = best_sim.to(torch.float32)
    struct_s = torch.bmm(P, best.transpose(1, 2))  # Σ_{h∈S} best[c, h]        [B, T*G, C]
    count_s = P.sum(-1, keepdim=True)  # |S|
    best_g = best.transpose(1, 2)[:, None, :, :].expand(B, T, G, C).reshape(B, T * G, C)
    f_s = torch.where(count_s > 0,
                      lam * inter_s / size_s.clamp_min(1.0) + (1 - lam) * struct_s / count_s.clamp_min(1.0),
                      torch.zeros((), dtype=torch.float32))
    f_sg = lam * inter_sg / size_sg.clamp_min(1.0) + (1 - lam) * (struct_s + best_g) / (count_s + 1.0)
    marg = (f_sg - f_s).reshape(B, T, G, C).mean(1)  # [B, G, C]
    return marg.transpose(1, 2).contiguous()


def shapley_mc(node_sets: torch.Tensor, n_sub: torch.Tensor, cand_nodes: torch.Tensor, best_sim: torch.Tensor,
               lam: float = 0.5, T: int = 50, seed: int = 0, mode: str = "independent",
               device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """CPU/torch path. Returns ``(phi [B, C, G], score [B, C])``: per-subgraph Shapley
    estimates (0 on padding rows) and Score_ent = mean over the query's valid subgraphs
    (0 for queries with no subgraph)."""
    node_sets, n_sub, cand_nodes, best_sim = as_tensors(node_sets, n_sub, cand_nodes, best_sim)
    B, G, U, C = _check_inputs(node_sets, n_sub, cand_nodes, best_sim, lam, T, seed)
    check_mode(mode)
    if B == 0 or C == 0 or G == 0:
        return torch.zeros((B, C, G)), torch.zeros((B, C))
    pred = predecessor_masks(n_sub, G, T, seed, mode).to(node_sets.device)
    phi = marginal_terms(pred, node_sets, cand_nodes, best_sim, lam)
    return finish(phi, n_sub)


def as_tensors(node_sets, n_sub, cand_nodes, best_sim) -> tuple[torch.Tensor, ...]:
    """The four inputs as tensors (NumPy accepted; tensors unchanged), for both paths."""
    names = ("node_sets", "n_sub", "cand_nodes", "best_sim")
    return tuple(as_tensor(a, name=n) for a, n in zip((node_sets, n_sub, cand_nodes, best_sim), names))


def finish(phi: torch.Tensor, n_sub: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Zero padding subgraphs and average the valid ones into Score_ent."""
    G = phi.shape[2]
    valid = (torch.arange(G, device=phi.device)[None, :] < n_sub.to(phi.device)[:, None]).to(phi.dtype)
    phi = phi * valid[:, None, :]
    score = phi.sum(-1) / n_sub.to(phi.device).clamp_min(1).to(phi.dtype)[:, None]
    return phi, score


def coalition_value(members: list[int], node_sets: np.ndarray, cand_nodes: np.ndarray, best_sim: np.ndarray,
                    lam: float) -> float:
    """F(S) for one query/candidate pair (numpy; reference for tests and docs)."""
    if not members:
        return 0.0
    union = np.any(node_sets[members] > 0, axis=0)
    overlap = float(np.sum(union & (cand_nodes > 0))) / max(float(union.sum()), 1.0)
    return lam * overlap + (1 - lam) * float(np.mean(best_sim[members]))


def shapley_exact(node_sets: np.ndarray, cand_nodes: np.ndarray, best_sim: np.ndarray, lam: float = 0.5
                  ) -> np.ndarray:
    """Exact Shapley values ``[n]`` by enumerating every coalition (one query, one candidate).

    ``node_sets`` ``[n, U]``, ``cand_nodes`` ``[U]``, ``best_sim`` ``[n]``. Exponential in n:
    refuses n > 12.
    """
    n = len(node_sets)
    if n > 12:
        raise InputError(f"exact enumeration is for small subgraph sets (n <= 12), got n = {n}")
    phi = np.zeros(n)
    for g in range(n):
        others = [h for h in range(n) if h != g]
        for size in range(n):
            weight = factorial(size) * factorial(n - size - 1) / factorial(n)
            for S in combinations(others, size):
                S = list(S)
                phi[g] += weight * (coalition_value(S + [g], node_sets, cand_nodes, best_sim, lam)
                                    - coalition_value(S, node_sets, cand_nodes, best_sim, lam))
    return phi


register("shapley_mc", shapley_mc, triton="hopgraph.kernels.shapley_mc_triton:shapley_mc_triton",
         tensors=("node_sets", "n_sub", "cand_nodes", "best_sim"))

"""DMAR's structural path (SPEC §3 step 2): Score_ent of every candidate passage D for a
query Q, the mean Monte Carlo Shapley value of Q's subgraphs G_Q against D's subgraphs G_D,
over the corpus knowledge graph (:mod:`hopgraph.engine.pipelines.dmar.knowledge_graph`) and the stored
Siamese-GNN subgraph embeddings (:mod:`hopgraph.engine.pipelines.dmar.gnn`).

Batched over queries and candidates in three steps, each a stage of the caller's timer:
``subgraphs`` (query-local node vocabularies, the node sets of G_Q and the membership of
nodes(G_D)), ``gnn`` (structsim = cosine of subgraph embeddings, once per distinct (query
subgraph, candidate entity) pair of the batch, then the best match per candidate), and
``shapley`` (op ``shapley_mc`` through the kernel dispatch). Where the index's graph store holds the
knowledge graph and the subgraph embeddings on the device, :mod:`.device_structural` does the same
there.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from .... import kernels
from ....kernels.tensors import as_numpy
from .knowledge_graph import KnowledgeGraph
from ...sparse import join, row_of_entries, take_rows_once
from ...timing import StageTimer


class QuerySubgraphs(NamedTuple):
    """G_Q of a batch over query-local node ids: ``node_sets`` [B, G, U] (1 = node in subgraph),
    ``local_nodes`` [B, U] (entity id of each local node, -1 padding), ``n_sub`` [B] subgraphs
    per query, and the flat list of query subgraph centres ``ents`` with their (query, slot)."""

    node_sets: np.ndarray
    local_nodes: np.ndarray
    n_sub: np.ndarray
    ents: np.ndarray
    q_of: np.ndarray
    g_of: np.ndarray


def query_subgraphs(kg: KnowledgeGraph, linked: list[np.ndarray]) -> QuerySubgraphs:
    """The ego subgraphs of each query's linked entities, on a query-local node vocabulary."""
    B, E = len(linked), kg.n_entities
    n_sub = np.asarray([len(g) for g in linked], np.int64)
    G = max(int(n_sub.max(initial=0)), 1)
    q_of = np.repeat(np.arange(B), n_sub)
    g_of = np.concatenate([np.arange(n) for n in n_sub]) if n_sub.sum() else np.zeros(0, np.int64)
    ents = np.concatenate(linked).astype(np.int64) if n_sub.sum() else np.zeros(0, np.int64)
    ego_rows = take_rows_once(kg.ego, ents)
    sizes = np.diff(ego_rows.indptr)
    t_q, t_g, t_node = np.repeat(q_of, sizes), np.repeat(g_of, sizes), ego_rows.indices.astype(np.int64)
    keys, local = np.unique(t_q * E + t_node, return_inverse=True)
    key_q = keys // E
    first = np.searchsorted(key_q, np.arange(B))
    local_of_key = np.arange(len(keys)) - first[key_q]
    U = max(int(local_of_key.max(initial=-1)) + 1, 1)
    node_sets = np.zeros((B, G, U), np.float32)
    node_sets[t_q, t_g, local_of_key[local]] = 1.0
    local_nodes = np.full((B, U), -1, np.int64)
    local_nodes[key_q, local_of_key] = keys % E
    return QuerySubgraphs(node_sets, local_nodes, n_sub, ents, q_of, g_of)


def candidate_subgraphs(kg: KnowledgeGraph, cand: np.ndarray, local_nodes: np.ndarray
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For candidates ``cand`` [B, C]: membership of each query-local node in nodes(G_D)
    (float32 [B, C, U]), which candidates link any entity (bool [B, C]) and their entity
    lists padded with -1 (int64 [B·C, Dm])."""
    B, C = cand.shape
    U = local_nodes.shape[1]
    valid = cand >= 0
    pe = take_rows_once(kg.passage_entities, np.where(valid, cand, 0).ravel())
    # nodes(G_D): every node of the ego subgraphs of D's entities, looked up among its query's local
    # nodes by the key query · E + node (O(entries · log(B · U)), nothing of size E)
    E = np.int64(max(kg.n_entities, 1))
    ego_of = take_rows_once(kg.ego, pe.indices)  # each distinct entity's row read once
    row = row_of_entries(pe.indptr)[row_of_entries(ego_of.indptr)]  # the candidate (b · C + c) of each node
    qb, qu = np.nonzero(local_nodes >= 0)
    local_keys = qb * E + local_nodes[qb, qu]
    order = np.argsort(local_keys, kind="stable")
    pos, found = join(local_keys[order], row // C * E + ego_of.indices)
    member = np.zeros((B * C, U), np.float32)
    member[row[found], qu[order[pos[found]]]] = 1.0
    cand_nodes = member.reshape(B, C, U) * valid[..., None]
    n_ent = np.diff(pe.indptr)
    linked = (n_ent.reshape(B, C) > 0) & valid
    Dm = max(int(n_ent.max(initial=0)), 1)
    pos = np.arange(len(pe.indices)) - np.repeat(pe.indptr[:-1], n_ent)
    ent_pad = np.full((B * C, Dm), -1, np.int64)
    ent_pad[np.repeat(np.arange(B * C), n_ent), pos] = pe.indices
    return cand_nodes, linked, ent_pad


def best_structsim(Z: np.ndarray, q: QuerySubgraphs, ent_pad: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """``max_{g_d ∈ G_D} structsim(g, g_d)`` for every query subgraph g and candidate D
    (float32 [B, C, G]; 0 for padding), structsim = cosine of unit subgraph embeddings ``Z``."""
    B, C = valid.shape
    G = q.node_sets.shape[1]
    Dm = ent_pad.shape[1]
    ent_ok = ent_pad >= 0
    uniq, inv = np.unique(np.where(ent_ok, ent_pad, -1), return_inverse=True)
    inv = inv.reshape(B, C, Dm)
    # one gather of the query subgraphs' and the candidates' entities (one read of the rows when Z's
    # rows are held elsewhere, read by rows)
    rows = np.asarray(Z[np.concatenate([np.asarray(q.ents, np.int64), np.maximum(uniq, 0)])], np.float32)
    Zq = torch.from_numpy(rows[:len(q.ents)]) if len(q.ents) else torch.zeros((0, Z.shape[1]))
    S = torch.cat([Zq @ torch.from_numpy(rows[len(q.ents):]).T,
                   torch.zeros((1, len(uniq)))])  # last row: padding subgraph
    qg = np.full((B, G), len(q.ents), np.int64)
    qg[q.q_of, q.g_of] = np.arange(len(q.ents))
    sims = S[torch.from_numpy(qg)[:, None, None, :], torch.from_numpy(inv)[..., None]]  # [B, C, Dm, G]
    sims = sims.masked_fill(~torch.from_numpy(ent_ok).reshape(B, C, Dm, 1), -2.0).amax(2)
    return (sims.clamp_min(-1.0) * (sims > -2).float() * torch.from_numpy(valid)[..., None]).numpy()


def structural_scores(kg: KnowledgeGraph, Z: np.ndarray, cand: np.ndarray, linked: list[np.ndarray],
                      lam: float, T: int, seed: int, mode: str, device: str,
                      timer: StageTimer | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Score_ent [B, C] of candidates ``cand`` for queries linking ``linked`` entities
    (SPEC §3 step 2), and which candidates link any entity (bool [B, C])."""
    timer = timer or StageTimer()
    valid = cand >= 0
    with timer("subgraphs"):
        q = query_subgraphs(kg, linked)
        cand_nodes, cand_linked, ent_pad = candidate_subgraphs(kg, cand, q.local_nodes)
    with timer("gnn"):
        best = best_structsim(Z, q, ent_pad, valid)
    with timer("shapley"):
        _, score = kernels.call("shapley_mc", q.node_sets, q.n_sub, cand_nodes.astype(np.float32), best,
                                lam=lam, T=T, seed=seed, mode=mode, device=device)
        score = as_numpy(score)  # waits for a GPU kernel, so its time counts in this stage
    return np.where(valid, score, 0.0).astype(np.float32), cand_linked

"""DMAR's structural path (SPEC §3 step 2, :mod:`.structural`) on arrays the index's graph store
holds on the device: the knowledge graph's ego and passage → entity graphs and the subgraph
embeddings. The query subgraphs G_Q, the candidates' subgraph memberships nodes(G_D) and the best
structsim are cut and computed there and handed to ``shapley_mc`` as they are: the linked
(question, entity) pairs go in once per batch, the candidates once per scoring, Score_ent comes out.

The same selections and arithmetic as the host path (:func:`~.structural.query_subgraphs`,
:func:`~.structural.candidate_subgraphs`, :func:`~.structural.best_structsim`) in the same order,
on torch: the 0/1 memberships equal, the cosines equal up to how the two matrix products round.
"""
from __future__ import annotations

import threading
from typing import Any, NamedTuple

import numpy as np
import torch

from .... import kernels
from ....kernels.tensors import as_numpy, as_tensor
from ...graphs.store import device_arrays
from ...sparse import row_positions_tensors
from ...timing import StageTimer
from .knowledge_graph import KnowledgeGraph


class QueryTensors(NamedTuple):
    """G_Q of a batch on the device (as :class:`~.structural.QuerySubgraphs`): ``node_sets``
    [B, G, U], ``n_sub`` [B], the subgraph centres ``ents`` with their (query, slot) ``q_of`` /
    ``g_of``, and the query-local vocabulary: the sorted keys ``query · E + entity`` with each
    key's local id ``local_of_key``."""

    node_sets: torch.Tensor
    n_sub: torch.Tensor
    ents: torch.Tensor
    q_of: torch.Tensor
    g_of: torch.Tensor
    keys: torch.Tensor
    local_of_key: torch.Tensor


class ResidentStructure:
    """The structural path on held tensors (module docstring): ``ego`` and ``passage_entities``
    (``(indptr, indices, data)`` tensors), the subgraph embeddings ``Z`` (a tensor), all on one
    device; ``pe_indptr`` the passage → entity row pointer on the host (how many entities each
    candidate links, read without a crossing). The last batch's query subgraphs are kept, so the
    scorings of one batch (its two stages) share them."""

    def __init__(self, ego: tuple[torch.Tensor, ...], passage_entities: tuple[torch.Tensor, ...], Z: torch.Tensor,
                 pe_indptr: np.ndarray, n_entities: int) -> None:
        self.ego, self.pe, self.Z, self.pe_indptr, self.E = ego, passage_entities, Z, pe_indptr, n_entities
        self._last: tuple[list[np.ndarray], QueryTensors] | None = None
        self._lock = threading.Lock()

    def query(self, linked: list[np.ndarray]) -> QueryTensors:
        """G_Q of the queries linking ``linked`` (computed once per list: the same list object
        gives the same tensors back)."""
        with self._lock:
            last = self._last
        if last is not None and last[0] is linked:
            return last[1]
        dev, E, B = self.Z.device, self.E, len(linked)
        n_sub_host = np.asarray([len(g) for g in linked], np.int64)
        G = max(int(n_sub_host.max(initial=0)), 1)
        ents_host = np.concatenate(linked).astype(np.int64) if n_sub_host.sum() else np.zeros(0, np.int64)
        q_of, ents = as_tensor(np.stack([np.repeat(np.arange(B, dtype=np.int64), n_sub_host), ents_host]),
                               device=dev, name="linked (question, entity) pairs")
        n_sub = torch.bincount(q_of, minlength=B)
        g_of = torch.arange(len(ents), device=dev) - (torch.cumsum(n_sub, 0) - n_sub)[q_of]
        seg, pos = row_positions_tensors(self.ego[0], ents)
        t_q, t_g, t_node = q_of[seg], g_of[seg], self.ego[1][pos].to(torch.int64)
        keys, local = torch.unique(t_q * E + t_node, return_inverse=True)
        key_q = keys // E
        first = torch.searchsorted(key_q, torch.arange(B, device=dev))
        local_of_key = torch.arange(len(keys), device=dev) - first[key_q]
        U = int(local_of_key.max()) + 1 if len(keys) else 1
        node_sets = torch.zeros((B, G, U), dtype=torch.float32, device=dev)
        node_sets[t_q, t_g, local_of_key[local]] = 1.0
        out = QueryTensors(node_sets, n_sub, ents, q_of, g_of, keys, local_of_key)
        with self._lock:
            self._last = (linked, out)
        return out

    def candidates(self, q: QueryTensors, cand: np.ndarray, cand_tensor: torch.Tensor | None = None
                   ) -> tuple[torch.Tensor, np.ndarray, torch.Tensor, torch.Tensor]:
        """:func:`~.structural.candidate_subgraphs` on the device for host candidates ``cand``
        (:meth:`candidates_tensors`), which candidates link any entity read on the host (bool [B, C],
        no crossing). ``cand_tensor``: ``cand`` already on the device (else it goes in)."""
        cand_t = cand_tensor if cand_tensor is not None else \
            as_tensor(np.asarray(cand, np.int64), device=self.Z.device, name="candidates")
        cand_nodes, _, ent_pad, valid = self.candidates_tensors(q, cand_t)
        flat_host = np.where(cand >= 0, cand, 0).ravel().astype(np.int64)
        n_ent = np.asarray(self.pe_indptr[flat_host + 1] - self.pe_indptr[flat_host], np.int64)
        return cand_nodes, (n_ent.reshape(cand.shape) > 0) & (cand >= 0), ent_pad, valid

    def candidates_tensors(self, q: QueryTensors, cand_t: torch.Tensor
                           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """:func:`~.structural.candidate_subgraphs` on the device for candidates there (int [B, C],
        -1 = padding): the membership of each query-local node in nodes(G_D) (float32 [B, C, U]),
        which candidates link any entity (bool [B, C]), their entity lists padded with -1
        ([B·C, Dm]) and ``cand >= 0`` [B, C], all tensors there."""
        dev, (B, C) = self.Z.device, cand_t.shape
        U = q.node_sets.shape[2]
        cand_t = cand_t.to(torch.int64)
        valid = cand_t >= 0
        flat = torch.where(valid, cand_t, 0).ravel()
        n_ent = (self.pe[0][flat + 1] - self.pe[0][flat]).to(torch.int64)
        linked = (n_ent.reshape(B, C) > 0) & valid
        pe_seg, pe_pos = row_positions_tensors(self.pe[0], flat)
        ents = self.pe[1][pe_pos].to(torch.int64)
        ego_seg, ego_pos = row_positions_tensors(self.ego[0], ents)
        row = pe_seg[ego_seg]  # the candidate (b · C + c) of each node of its entities' ego subgraphs
        probe = row // C * self.E + self.ego[1][ego_pos].to(torch.int64)
        pos = torch.searchsorted(q.keys, probe).clamp_max(max(len(q.keys) - 1, 0))
        found = q.keys[pos] == probe if len(q.keys) else torch.zeros(len(probe), dtype=torch.bool, device=dev)
        member = torch.zeros((B * C, U), dtype=torch.float32, device=dev)
        member[row[found], q.local_of_key[pos[found]]] = 1.0
        cand_nodes = member.reshape(B, C, U) * valid[..., None]
        Dm = max(int(n_ent.max()) if len(n_ent) else 0, 1)
        ent_pad = torch.full((B * C, Dm), -1, dtype=torch.int64, device=dev)
        ent_pad[pe_seg, pe_pos - self.pe[0][flat][pe_seg]] = ents
        return cand_nodes, linked, ent_pad, valid

    def best_structsim(self, q: QueryTensors, ent_pad: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """:func:`~.structural.best_structsim` on the device (float32 [B, C, G])."""
        B, C = valid.shape
        G, Dm, nq = q.node_sets.shape[1], ent_pad.shape[1], len(q.ents)
        ent_ok = ent_pad >= 0
        uniq, inv = torch.unique(torch.where(ent_ok, ent_pad, -1), return_inverse=True)
        rows = self.Z[torch.cat([q.ents, uniq.clamp_min(0)])].to(torch.float32)
        S = torch.cat([rows[:nq] @ rows[nq:].T, torch.zeros((1, len(uniq)), device=rows.device)])
        qg = torch.full((B, G), nq, dtype=torch.int64, device=rows.device)
        qg[q.q_of, q.g_of] = torch.arange(nq, device=rows.device)
        sims = S[qg[:, None, None, :], inv.reshape(B, C, Dm)[..., None]]  # [B, C, Dm, G]
        sims = sims.masked_fill(~ent_ok.reshape(B, C, Dm, 1), -2.0).amax(2)
        return sims.clamp_min(-1.0) * (sims > -2).float() * valid[..., None]

    def scores(self, cand: np.ndarray, linked: list[np.ndarray], lam: float, T: int, seed: int, mode: str,
               device: str, timer: StageTimer | None = None, cand_tensor: torch.Tensor | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        """:func:`~.structural.structural_scores` on the device: Score_ent [B, C] and which
        candidates link any entity (bool [B, C]); ``cand_tensor``: ``cand`` already there."""
        cand_t = cand_tensor if cand_tensor is not None else \
            as_tensor(np.asarray(cand, np.int64), device=self.Z.device, name="candidates")
        score, _ = self.scores_tensors(cand_t, linked, lam, T, seed, mode, device, timer)
        flat_host = np.where(cand >= 0, cand, 0).ravel().astype(np.int64)
        n_ent = np.asarray(self.pe_indptr[flat_host + 1] - self.pe_indptr[flat_host], np.int64)
        return as_numpy(score), (n_ent.reshape(cand.shape) > 0) & (cand >= 0)

    def scores_tensors(self, cand_t: torch.Tensor, linked: list[np.ndarray], lam: float, T: int, seed: int,
                       mode: str, device: str, timer: StageTimer | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`scores` of candidates on the device (int [B, C], -1 = padding): Score_ent (float32
        [B, C], 0 at padding) and which candidates link any entity (bool [B, C]), tensors there."""
        timer = timer or StageTimer()
        with timer("subgraphs"):
            q = self.query(linked)
            cand_nodes, cand_linked, ent_pad, valid = self.candidates_tensors(q, cand_t)
        with timer("gnn"):
            best = self.best_structsim(q, ent_pad, valid)
        with timer("shapley"):
            _, score = kernels.call("shapley_mc", q.node_sets, q.n_sub, cand_nodes, best, lam=lam, T=T, seed=seed,
                                    mode=mode, device=device)
        return torch.where(valid, score.to(torch.float32), 0.0), cand_linked


def held_structure(graphs: Any, kg: KnowledgeGraph, Z: Any, name: str) -> dict[str, Any]:
    """The knowledge graph's ego and passage → entity graphs and the subgraph embeddings ``Z``
    given to the index's graph store to hold (:meth:`~hopgraph.engine.graphs.store.GraphStore.hold`;
    the index's own files keep them as they are), named ``"{name} …"``."""
    return {"ego": graphs.hold(kg.ego, f"{name} kg ego"),
            "passage_entities": graphs.hold(kg.passage_entities, f"{name} kg passage entities"),
            "Z": graphs.hold(Z, f"{name} subgraph embeddings")}


def resident_structure(held: dict[str, Any], n_entities: int) -> ResidentStructure | None:
    """A :class:`ResidentStructure` over the held items (:func:`held_structure`) where the store
    holds all three on the device (each copied there once), else None (the host path)."""
    tensors = {key: device_arrays(value) for key, value in held.items()}
    if any(t is None for t in tensors.values()):
        return None
    return ResidentStructure(tensors["ego"], tensors["passage_entities"], tensors["Z"],
                             np.asarray(held["passage_entities"].indptr), n_entities)


class HeldStructure:
    """What a DMAR pipeline's structural path reads, as its index's graph store holds it: held
    again when an add or a load replaced the knowledge graph or the embeddings."""

    def __init__(self) -> None:
        self._held: tuple[Any, ...] | None = None

    def resident(self, graphs: Any, kg: KnowledgeGraph, Z: Any, name: str) -> ResidentStructure | None:
        """The structural path on the device (:class:`ResidentStructure`, its last batch's query
        subgraphs kept) where ``graphs`` holds the knowledge graph's ego and passage → entity
        graphs and ``Z`` there (each copied once), else None (the host path)."""
        held = self._held
        if held is None or held[0] is not kg or held[1] is not Z:
            held = self._held = (kg, Z, held_structure(graphs, kg, Z, name), None)
        if held[3] is None:
            resident = resident_structure(held[2], kg.n_entities)
            if resident is None:
                return None
            held = self._held = held[:3] + (resident,)
        return held[3]

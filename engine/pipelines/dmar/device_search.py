"""DMAR's search (SPEC §3 steps 1–6) on the device, for a batch whose index's graph store holds X, the
knowledge graph and the subgraph embeddings there: the stage-1 candidates (the batch's top lists
fused there), the dual-path score (semantic from the held X, lexical from the held BM25 postings,
Score_ent from the held structure, :mod:`.device_structural`), the gate, the z-scores, the anchors,
the rule reformulation Q′, the stage-2 dense search with Q′, the union and the fidelity rerank run
on tensors there; only the questions (and BM25's query side, the linked (question, entity) pairs)
go in and the top-k ids and scores come out.

The host path's selections and arithmetic (:class:`~.pipeline.DMAR`, :mod:`.scores`,
:func:`~.reformulation.rule_vectors`) in the same order, on torch: the z-scores in float64 as the
host's, Q′ in float64 as NumPy promotes it; the sums round differently (torch's against NumPy's
and faiss's), so the scores equal the host's within float rounding and near-ties may swap
(``docs/decisions/dmar-on-the-device.md``). Where a step needs the host — a text generator for Q′,
the MMR anchors, a store that holds X or the structure on the host — :func:`device_search` gives
None and the host path answers.
"""
from __future__ import annotations

import weakref
from typing import Any

import numpy as np
import torch

from ....kernels.tensors import as_numpy
from ...components.device_dense import gather_held_rows
from ...components.hybrid_ranking import hybrid_ranking_tensors
from ...components.query_batch import QueryBatch
from ...ranking import PAD_ID
from ...ranking_tensors import first_places, topk_columns
from ...timing import StageTimer
from .gate import Gate

#: the gate's copy on each device it ran on (its weights placed there once)
_GATES: "weakref.WeakKeyDictionary[Gate, dict[torch.device, Gate]]" = weakref.WeakKeyDictionary()


def zscore_tensors(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """:func:`~.scores.zscore` on tensors: row-wise z-scores over ``mask`` in float64, 0 elsewhere
    and for flat rows; float32."""
    m = mask.to(torch.float64)
    cnt = m.sum(1, keepdim=True).clamp_min(1)
    v = torch.where(mask, values.to(torch.float64), 0.0)
    mean = v.sum(1, keepdim=True) / cnt
    std = torch.sqrt(torch.where(mask, (v - mean) ** 2, 0.0).sum(1, keepdim=True) / cnt)
    z = torch.where(std > 1e-9, (v - mean) / std.clamp_min(1e-9), 0.0)
    return torch.where(mask, z, 0.0).to(torch.float32)


def dedupe_tensors(ids: torch.Tensor) -> torch.Tensor:
    """:func:`~.scores.dedupe_rows` on tensors: repeated ids within a row (after the first) → -1."""
    return torch.where(first_places(ids), ids, PAD_ID)


def top_ids(scores: torch.Tensor, ids: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` best ``ids`` [B, C] by ``scores`` (padding -1 never chosen), best first, ties toward
    the lower column (:func:`~hopgraph.engine.ranking.topk_rows`); padded -1 / -inf."""
    C = ids.shape[1]
    cols, top = topk_columns(torch.where(ids >= 0, scores, float("-inf")),
                             torch.arange(C, dtype=torch.int64, device=ids.device), k)
    return torch.where(cols >= 0, ids.gather(1, cols.clamp_min(0)), PAD_ID), top


def rule_vectors_tensors(Q: torch.Tensor, rows: list[torch.Tensor], anchors: torch.Tensor, shift: float
                         ) -> torch.Tensor:
    """:func:`~.reformulation.rule_vectors` on tensors: ``normalise(q + shift · mean anchor row)``,
    float64 as NumPy promotes it, float32 out."""
    valid = anchors >= 0
    A = gather_held_rows(rows, torch.where(valid, anchors, 0)) * valid[..., None]
    mean = A.sum(1).to(torch.float64) / valid.sum(1, keepdim=True).clamp_min(1)
    out = Q.to(torch.float64) + shift * mean
    norms = torch.linalg.vector_norm(out, dim=1, keepdim=True)
    return torch.where(norms > 0, out / norms.clamp_min(1e-12), Q.to(torch.float64)).to(torch.float32)


def gate_on(gate: Gate, device: torch.device) -> Gate:
    """``gate`` with its weights on ``device`` (placed once per gate and device)."""
    if next(gate.parameters()).device == device:
        return gate
    copies = _GATES.setdefault(gate, {})
    if device not in copies:
        import copy

        copies[device] = copy.deepcopy(gate).to(device).eval()
    return copies[device]


class DeviceDMAR:
    """One batch's DMAR search on the device (module docstring): the pipeline ``pipe``, the batch,
    its dense search over the held X, the held structure (None: the structural path is off)."""

    def __init__(self, pipe: Any, batch: QueryBatch, params: Any, dense: Any, resident: Any,
                 timer: StageTimer) -> None:
        self.pipe, self.batch, self.params, self.dense, self.resident, self.timer = \
            pipe, batch, params, dense, resident, timer
        self.Q = batch.question_tensor()

    def raw(self, cand: torch.Tensor, linked: list[np.ndarray]) -> dict[str, torch.Tensor]:
        """Raw semantic / structural / lexical scores of candidates ``cand`` [B, C] (the host's
        ``DMAR._dual_path(only_raw=True)``), with the candidates' rows ``"X"``."""
        p = self.params
        with self.timer("fusion"):
            valid = cand >= 0
            Xc = gather_held_rows(self.dense.rows, torch.where(valid, cand, 0))
            sem = torch.einsum("bcd,bd->bc", Xc, self.Q)
            raw = {"X": Xc, "sem": sem, "struct": torch.zeros_like(sem), "struct_ok": torch.zeros_like(valid),
                   "lex": self.batch.bm25_of_tensors(cand).to(torch.float32) if p.bm25_weight else torch.zeros_like(sem)}
        if self.resident is not None:
            raw["struct"], raw["struct_ok"] = self.resident.scores_tensors(
                cand, linked, p.shapley_lambda, p.shapley_samples, p.random_state, p.shapley_mode, self.pipe.device,
                self.timer)
        return raw

    def query_ok(self, linked: list[np.ndarray]) -> torch.Tensor:
        """[B, 1] bool: the query links enough entities (adaptive fusion), from the linked pairs there."""
        if self.resident is None:
            return torch.zeros((len(self.batch), 1), dtype=torch.bool, device=self.Q.device)
        return (self.resident.query(linked).n_sub >= self.params.min_query_entities)[:, None]

    def fuse(self, cand: torch.Tensor, raw: dict[str, torch.Tensor], query_ok: torch.Tensor) -> torch.Tensor:
        """The host's ``DMAR._fuse`` on tensors: z-scores, the gate's ``[α, β]``, the lexical term."""
        p, valid = self.params, cand >= 0
        with self.timer("fusion"):
            z_sem = zscore_tensors(raw["sem"], valid)
            z_struct = zscore_tensors(raw["struct"], valid & raw["struct_ok"])
            if p.gate:
                with torch.no_grad():
                    w = gate_on(self.pipe.gate_, self.Q.device)(self.Q, raw["X"])
                alpha, beta = w[..., 0], w[..., 1]
            else:
                alpha = beta = torch.full(cand.shape, 0.5, dtype=torch.float32, device=cand.device)
            fused = torch.where(query_ok, alpha * z_sem + beta * z_struct, z_sem)
            if p.bm25_weight:
                fused = fused + p.bm25_weight * zscore_tensors(raw["lex"], valid)
            return fused.to(torch.float32)

    def recall(self) -> torch.Tensor:
        """Step 1: the ``candidate_depth`` candidates from the batch's top lists on the device."""
        p = self.params
        if p.candidate_source == "hybrid":
            return hybrid_ranking_tensors(self.batch, p.candidate_depth, depth=p.candidate_depth)[0]
        return self.batch.bm25_topk_tensors(p.candidate_depth)[0]

    def search(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """SPEC §3 steps 1–6; the top-``k`` ids and scores come back (-1 / -inf padding)."""
        p, timer = self.params, self.timer
        with timer("recall"):
            cand = self.recall()
        with timer("link"):
            linked = self.pipe._link(self.batch.texts, p)
        query_ok = self.query_ok(linked)
        raw1 = self.raw(cand, linked)
        fused1 = self.fuse(cand, raw1, query_ok)
        with timer("second_stage"):
            Q2 = self.Q
            if p.reformulate:
                anchors, _ = top_ids(fused1, cand, min(p.anchors, cand.shape[1]))
                Q2 = rule_vectors_tensors(self.Q, self.dense.rows, anchors, p.shift)
            ids2, _ = self.dense.topk_tensors(Q2, max(p.second_stage_depth, k), self.batch.allowed_tensor())
        with timer("rerank"):
            if p.union_depth > 0:
                C = cand.shape[1]
                cols1, _ = topk_columns(torch.where(cand >= 0, fused1, float("-inf")),
                                        torch.arange(C, dtype=torch.int64, device=cand.device), min(p.union_depth, C))
                keep1 = torch.where(cols1 >= 0, cand.gather(1, cols1.clamp_min(0)), PAD_ID)
                final = dedupe_tensors(torch.cat([keep1, ids2], 1))
                new = self.raw(final[:, keep1.shape[1]:], linked)
                at = cols1.clamp_min(0)
                raw = {key: torch.cat([(value.gather(1, at) if value.dim() == 2 else
                                        value.gather(1, at[..., None].expand(-1, -1, value.shape[2]))),
                                       new[key]], 1) for key, value in raw1.items()}
            else:
                final = ids2
                raw = self.raw(final, linked)
            ids, scores = top_ids(self.fuse(final, raw, query_ok), final, k)
        return as_numpy(ids), as_numpy(torch.where(ids >= 0, scores, float("-inf")))


def device_search(pipe: Any, batch: QueryBatch, k: int, params: Any, timer: StageTimer
                  ) -> tuple[np.ndarray, np.ndarray] | None:
    """DMAR's search of ``batch`` on the device (:class:`DeviceDMAR`), or None where a step needs the
    host: no device store, X not held there, a text generator (Q′ embedded on the host), the MMR
    anchors, the structural path on without the knowledge graph and embeddings held there."""
    if batch.device is None or (params.reformulate and params.generator is not None) or params.mmr > 0:
        return None
    dense = batch.dense_on_device()
    if dense is None:
        return None
    resident = None
    if params.structural:
        resident = pipe._resident(batch, params)
        if resident is None:  # no entities, or the structure refused by the store's budget
            return None
    return DeviceDMAR(pipe, batch, params, dense, resident, timer).search(k)

"""DMAR — dynamic multi-anchor retrieval (SPEC §3), batched over queries.

Index (``fit``): the shared BM25 and dense components, the shared zero-token extraction
(:mod:`hopgraph.engine.components.extraction`, the same entities as STITCH) and from it the corpus
knowledge graph (:mod:`hopgraph.engine.pipelines.dmar.knowledge_graph`), the Siamese GraphSAGE encoder
(:mod:`hopgraph.engine.pipelines.dmar.gnn`) with the embedding of every entity's ego subgraph, and the
fusion gate (:mod:`hopgraph.engine.pipelines.dmar.gate`, untrained = equal weights). Saved: the knowledge
graph, the encoder weights, the gate and the subgraph embeddings.

GNN decision: when ``hopgraph train-gnn`` has not been run, ``fit`` pre-trains the encoder
itself for ``gnn_steps = 60`` triplet steps (batch 64, seeded), so DMAR works out of the box
in ``Index.build`` and ``hopgraph eval``; ``hopgraph train-gnn`` trains longer
(``train_gnn(steps=600)``) and re-encodes.

Live indexes (issue 13): ``Index.add`` calls ``add`` (:meth:`DMAR._add`): the knowledge graph
is rebuilt from the extended extraction, the trained encoder and the gate are kept (no
retraining until ``Index.compact()``), and only the ego subgraphs whose input changed are
encoded again.

Query (``search``), for a batch; each stage is timed in ``DMAR.timings`` (:data:`STAGES`):

1. Candidate recall (SPEC §3 step 1), n = ``n_recall`` = 100: ``recall="bm25"`` (SPEC) or
   ``"hybrid"`` (dense + BM25 reciprocal rank fusion, issue #6; the default).
2. Dual-path score of every candidate (step 2): semantic ``cos(q, x_D)``; structural
   Score_ent = mean Shapley value of the query's subgraphs (:mod:`hopgraph.engine.pipelines.dmar.structural`,
   op ``shapley_mc``, T = 50, λ = ``lam`` = 0.5), structsim = cosine of stored subgraph
   embeddings. Adaptive fusion: a query linking fewer than ``min_query_entities`` (1)
   entities uses the semantic path only; a candidate linking none gets a neutral structural
   z-score (0). Scores are z-normalised within the candidate set and fused
   ``α z_sem + β z_struct`` with ``[α, β]`` from the gate (``gate=False``: fixed 1/2, 1/2).
   Option ``lexical`` (issue #6, default 0.5) adds ``lexical · z_bm25`` (the candidate's
   BM25 score for Q); 0 = SPEC.
3. Anchors (step 3): the top m = ``anchors`` = 3 fused candidates; ``mmr > 0`` picks them by
   maximal marginal relevance (fused score minus ``mmr`` × max cosine to the anchors
   already chosen); default ``mmr = 0`` (plain top m).
4. Reformulation (step 4, :mod:`hopgraph.engine.pipelines.dmar.reformulation`): the default rule (no
   generator: the query vector moved toward the anchors, ``shift`` = 1), or a ``generator``
   whose text Q′ is embedded.
5. Second stage (step 5): top p = ``p`` = 20 of the shared dense index with Q′.
6. Fidelity rerank (step 6): the dual-path score again against the ORIGINAL Q, over the
   stage-2 candidates (SPEC, ``union=0``) or those plus the ``union`` best fused stage-1
   candidates (default ``union=20``, issue #6); top k.

Title bridge (issue 15, after the ranking; not in the SPEC, a query-time addition in the spirit of
SPEC §3's second hop): the top ``bridge_depth`` (20) of the ranking are re-ranked by
:func:`hopgraph.engine.components.title_mentions.bridge_rerank` — + ``bridge`` (0.4) for the passages whose title
the ``bridge_seeds`` (1) best passage mentions; ``bridge=0`` (the ``no_bridge`` ablation; also in
``no_graph`` and the published parameters) switches it off.

Query linking (``query_linking``): ``"capitalised"`` (default) or ``"ngram"``, see
:mod:`hopgraph.engine.pipelines.dmar.knowledge_graph`.

Defaults follow the SPEC (n = 100, m = 3, p = 20, T = 50, k = 5) plus the issue-#6 options,
one set for every corpus: ``recall="hybrid"``, ``union=20``, ``lexical=0.5``,
``query_linking="capitalised"``, ``mmr=0``. Published behaviour: ``DMARParams.published()``
(= ``DMAR(published=True)``, a constructor shortcut; = ``DMAR.ablations["published"]``):
BM25 recall, the stage-2 pool only in the rerank, no lexical term. ``no_graph`` (issue 15: the
pipeline without its knowledge-graph path) is ``structural=False`` under the name every graph
pipeline gives its no-graph ablation. Each option has an
ablation (``hopgraph eval --pipelines dmar --ablations``); the measured Recall is in the
README ("Defaults and the measurements behind them").
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from ....kernels.dispatch import DEVICES
from ....kernels.shapley_mc import MODES as SHAPLEY_MODES
from ...components.shared import QueryBatch
from ...embedders.core import encode_queries
from ...errors import IndexFormatError, InputError
from .gate import Gate, train_gate
from .gnn import (SubgraphEncoder, changed_subgraphs, encode_all, encode_subgraphs, encoder_arrays,
                   encoder_from_arrays, entity_features, pretrain)
from .knowledge_graph import LINK_MODES, KnowledgeGraph, build_knowledge_graph
from ...params import PipelineParams, anything, choice, flag, integer, path, real
from ...ranking import PAD_ID, PAD_SCORE, topk_rows
from .reformulation import anchor_snippets, generate_texts, resolve_generator, rule_vectors
from ...storage import check_unit_rows, load_arrays, save_arrays
from .structural import structural_scores
from ...timing import StageTimer
from ...components import title_mentions as title_bridge
from ..base import Pipeline
from ..hybrid import hybrid_ranking

RECALLS = ("bm25", "hybrid")
#: per-stage seconds of the last ``search`` (``DMAR.timings``): recall (BM25 / hybrid), query
#: entity linking, subgraph/candidate node sets, GNN structsim cosines, Shapley kernel, semantic/
#: lexical/gate fusion, anchors + reformulation + faiss second stage, final rerank, title bridge (issue 15)
STAGES = ("recall", "link", "subgraphs", "gnn", "shapley", "fusion", "second_stage", "rerank", "title_bridge")


def zscore(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Row-wise z-scores over the entries where ``mask`` holds; 0 elsewhere and for flat rows."""
    m = mask.astype(np.float64)
    cnt = np.maximum(m.sum(1, keepdims=True), 1)
    v = np.where(mask, values, 0.0).astype(np.float64)
    mean = v.sum(1, keepdims=True) / cnt
    std = np.sqrt((np.where(mask, (v - mean) ** 2, 0.0)).sum(1, keepdims=True) / cnt)
    z = np.where(std > 1e-9, (v - mean) / np.maximum(std, 1e-9), 0.0)
    return np.where(mask, z, 0.0).astype(np.float32)


def dedupe_rows(ids: np.ndarray) -> np.ndarray:
    """Replace repeated ids within a row (after the first) by padding -1."""
    order = np.argsort(ids, axis=1, kind="stable")
    s = np.take_along_axis(ids, order, 1)
    dup_sorted = np.zeros_like(s, bool)
    dup_sorted[:, 1:] = (s[:, 1:] == s[:, :-1]) & (s[:, 1:] >= 0)
    dup = np.zeros_like(dup_sorted)
    np.put_along_axis(dup, order, dup_sorted, 1)
    return np.where(dup, PAD_ID, ids)


def _is_generator(value: Any) -> bool:
    return value is None or (isinstance(value, str) and bool(value)) or callable(value)


@dataclass(frozen=True)
class DMARParams(PipelineParams):
    """DMAR parameters (SPEC §3). Fit-time: the knowledge graph and GNN (``ego_size``,
    ``max_passage_entities``, ``max_query_entities``, ``gnn_steps``, ``edge_list``); the rest is
    query-time."""

    pipeline = "dmar"
    n_recall: int = integer(100, low=1, query=True)
    anchors: int = integer(3, low=1, query=True)
    p: int = integer(20, low=1, query=True)
    structural: bool = flag(True, query=True)
    reformulate: bool = flag(True, query=True)
    gate: bool = flag(True, query=True)
    lam: float = real(0.5, low=0.0, high=1.0, query=True)
    T: int = integer(50, low=1, query=True)
    seed: int = integer(0, low=0, query=True)
    recall: str = choice("hybrid", RECALLS, query=True)
    union: int = integer(20, low=0, query=True)
    lexical: float = real(0.5, low=0.0, query=True)
    mmr: float = real(0.0, low=0.0, query=True)
    shift: float = real(1.0, low=0.0, query=True)
    min_query_entities: int = integer(1, low=0, query=True)
    shapley_mode: str = choice("independent", SHAPLEY_MODES, query=True)
    query_linking: str = choice("capitalised", LINK_MODES, query=True)
    ego_size: int = integer(16, low=1)
    max_passage_entities: int = integer(32, low=1)
    max_query_entities: int = integer(8, low=1)
    gnn_steps: int = integer(60, low=0)
    edge_list: str | None = path(None)
    generator: Any = anything(None, _is_generator, "a seq2seq model folder or a callable (question, "
                              "snippets) -> text", query=True)
    device: str = choice("auto", DEVICES, query=True)
    bridge: float = title_bridge.weight_field()
    bridge_seeds: int = title_bridge.seeds_field()
    bridge_depth: int = title_bridge.depth_field()

    @classmethod
    def published_values(cls) -> dict[str, Any]:
        """SPEC §3 as published: BM25 recall, the stage-2 pool only, no lexical term, top-m anchors,
        no title bridge."""
        return {"recall": "bm25", "union": 0, "lexical": 0.0, "mmr": 0.0, "bridge": 0.0}


class DMAR(Pipeline):
    """Dynamic multi-anchor retrieval (module docstring; SPEC §3)."""

    name = "dmar"
    Params = DMARParams
    components_used = ("dense", "bm25", "extraction")
    needs_corpus = True
    needs_query_texts = True
    ablations = {
        "published": DMARParams.published_values(),
        "structural=False": {"structural": False},
        "no_graph": {"structural": False, "bridge": 0.0},  # issue 15: no knowledge-graph path, no title bridge
        "no_bridge": {"bridge": 0.0},
        "reformulate=False": {"reformulate": False},
        "gate=False": {"gate": False},
        "anchors=1": {"anchors": 1},
        "recall=bm25": {"recall": "bm25"},
        "union=0": {"union": 0},
        "lexical=0": {"lexical": 0.0},
        "mmr=0.5": {"mmr": 0.5},
        "query_linking=ngram": {"query_linking": "ngram"},
    }

    def __init__(self, params: DMARParams | dict[str, Any] | None = None, /, **overrides: Any) -> None:
        super().__init__(params, **overrides)
        self.kg: KnowledgeGraph | None = None
        self.encoder: SubgraphEncoder | None = None
        self.subgraph_emb: np.ndarray | None = None
        self.gate_mlp: Gate | None = None

    # ------------------------------------------------------------------ index
    def _fit(self, progress: bool) -> None:
        self.kg = self._build_kg()
        self.train_gnn(self.gnn_steps, progress=progress)
        self.gate_mlp = Gate(self.X.shape[1])

    def _build_kg(self) -> KnowledgeGraph:
        """The knowledge graph of the shared extraction (SPEC §3 step 2), BM25 built on the way."""
        comp = self.components
        comp.bm25(who=self.name)
        return build_knowledge_graph(comp.extraction(who=self.name), len(self.X), self.edge_list, self.ego_size,
                                     self.max_passage_entities, self.max_query_entities)

    def _add(self, start: int, progress: bool) -> None:
        """Passages ``[start, N)`` were appended (issue 13; SPEC §3 step 2 on the grown corpus): the
        knowledge graph is rebuilt from the extended shared extraction (arithmetic), the entity
        features recomputed, and with the **same** encoder (not retrained: ``Index.compact()`` or
        ``hopgraph train-gnn`` retrains it) only the ego subgraphs whose encoder input changed are
        encoded again (:func:`~hopgraph.engine.pipelines.dmar.gnn.changed_subgraphs`: new entities, changed ego
        node sets, nodes linked by other passages, i.e. with other features, or edges among the
        nodes); the others keep their embeddings. The gate is kept. The result equals a fit on the
        grown corpus whose encoder has these weights (given the extraction's documented
        approximation). When an old entity's id moves out of order (a name known only from the
        ``edge_list`` that the corpus now mentions), every subgraph is encoded again."""
        old_kg, old_emb = self.kg, np.asarray(self.subgraph_emb)
        self.kg = self._build_kg()
        features = entity_features(self.kg.passage_entities, self.X)
        ids = self.kg.name_ids
        pos = np.fromiter((ids.get(n, -1) for n in old_kg.names), np.int64, old_kg.n_entities)
        if (pos < 0).any() or (np.diff(pos) <= 0).any():
            self.subgraph_emb = encode_all(self.encoder, self.kg.ego, self.kg.adj, features, progress=progress)
            return
        old_ids = np.full(self.kg.n_entities, -1, np.int64)
        old_ids[pos] = np.arange(old_kg.n_entities)
        changed = changed_subgraphs(old_kg.ego, old_kg.adj, old_kg.passage_entities, self.kg.ego, self.kg.adj,
                                    self.kg.passage_entities, old_ids)
        emb = np.empty((self.kg.n_entities, old_emb.shape[1]), np.float32)
        emb[~changed] = old_emb[old_ids[~changed]]
        emb[changed] = encode_subgraphs(self.encoder, self.kg.ego, self.kg.adj, features, np.flatnonzero(changed),
                                        progress=progress)
        self.subgraph_emb = emb

    def train_gnn(self, steps: int, seed: int | None = None, progress: bool = False,
                  log: Callable[[str], None] | None = None) -> list[float]:
        """(Re)train the Siamese encoder from scratch with the triplet loss and re-encode every
        ego subgraph (SPEC §3); returns the per-step losses."""
        features = entity_features(self.kg.passage_entities, self.X)
        torch.manual_seed(self.seed if seed is None else seed)  # seeds the initial weights too
        self.encoder = SubgraphEncoder(features.shape[1])
        losses = pretrain(self.encoder, self.kg.ego, self.kg.adj, features, steps=steps,
                          seed=self.seed if seed is None else seed, progress=progress, log=log)
        self.subgraph_emb = encode_all(self.encoder, self.kg.ego, self.kg.adj, features, progress=progress)
        return losses

    def train_gate(self, Q: np.ndarray, query_texts: Sequence[str], gold_rows: Sequence[Sequence[int]],
                   epochs: int = 200, seed: int = 0, log: Callable[[str], None] | None = None) -> list[float]:
        """Train a new fusion gate on questions with gold passage rows (SPEC §3 step 2, listwise
        loss over the stage-1 candidates, :func:`hopgraph.engine.pipelines.dmar.gate.train_gate`) and use it;
        returns the per-epoch losses."""
        data = self.gate_training_data(Q, query_texts, gold_rows)
        gate = Gate(self.X.shape[1])
        losses = train_gate(gate, **data, epochs=epochs, seed=seed, log=log)
        self.gate_mlp = gate
        return losses

    def carry_state(self, old: "DMAR") -> None:
        """A gate trained with :meth:`train_gate` survives ``Index.compact()`` (it depends on the
        embedding dimension only)."""
        self.gate_mlp = old.gate_mlp

    def reset_gate(self) -> None:
        """Back to the untrained gate (equal weights)."""
        self.gate_mlp = Gate(self.X.shape[1])

    def save(self, directory: Path) -> None:
        arrays = {**self.kg.arrays(), **encoder_arrays(self.encoder), **self.gate_mlp.arrays(),
                  "subgraph_emb": self.subgraph_emb}
        save_arrays(directory, arrays)

    def _load(self, directory: Path) -> None:
        """Open the saved KG, GNN, gate and subgraph embeddings, checked against each other and X."""
        weights = sorted(p.stem for p in directory.glob("*.npy") if p.stem.startswith(("gnn.", "gate.")))
        arrays = load_arrays(directory, [*KnowledgeGraph.ARRAY_NAMES, "subgraph_emb", *weights])
        self.kg = KnowledgeGraph.from_arrays(arrays, len(self.X), str(directory))
        self.encoder = encoder_from_arrays(arrays)
        self.gate_mlp = Gate.from_arrays(arrays)
        d = self.X.shape[1]
        d_in, d_out = self.encoder.layers[0].self_lin.in_features, self.encoder.layers[-1].self_lin.out_features
        if d_in != d or self.gate_mlp.mlp[0].in_features != 2 * d:
            raise IndexFormatError(f"{directory}: GNN input {d_in} / gate input {self.gate_mlp.mlp[0].in_features} "
                                   f"do not fit embeddings of dimension {d}")
        self.subgraph_emb = check_unit_rows(arrays["subgraph_emb"], str(directory / "subgraph_emb.npy"),
                                            rows=self.kg.n_entities, dim=d_out, allow_zero=True)

    # ------------------------------------------------------------------ query
    def search(self, Q: np.ndarray, top_k: int = 5,
               query_texts: Sequence[str] | None = None, allowed: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        Q = self._check_queries(Q, top_k, query_texts)
        timer = self._timer()
        for stage in STAGES:
            self.timings[stage] = 0.0
        batch = self.components.batch(Q, query_texts, allowed)
        with timer("recall"):
            cand = self._recall(batch)
        with timer("link"):
            linked = self._link(batch.texts)
        fused1, parts1 = self._dual_path(batch, cand, linked, timer)
        with timer("second_stage"):
            anchors = self._anchors(cand, fused1)
            Q2 = self._reformulate(Q, batch.texts, anchors)
            ids2, _ = batch.dense_topk_of(Q2, self.p)
        with timer("rerank"):  # the dual-path stages nested here count in their own stages
            if self.union > 0:
                cols1, _ = topk_rows(np.where(cand >= 0, fused1, -np.inf), min(self.union, cand.shape[1]))
                keep1 = np.where(cols1 >= 0, np.take_along_axis(cand, np.maximum(cols1, 0), 1), PAD_ID)
                final = dedupe_rows(np.concatenate([keep1, ids2], 1))
                _, parts_new = self._dual_path(batch, final[:, keep1.shape[1]:], linked, timer, only_raw=True)
                raw = {k: np.concatenate([np.take_along_axis(parts1[k], np.maximum(cols1, 0), 1), parts_new[k]], 1)
                       for k in parts1}
                fused = self._fuse(Q, final, raw, linked)
            else:
                final = ids2
                fused, _ = self._dual_path(batch, final, linked, timer)
            fused = np.where(final >= 0, fused, -np.inf)
            cols, scores = topk_rows(fused, self._list_k(top_k))
            ids = np.where(cols >= 0, np.take_along_axis(final, np.maximum(cols, 0), 1), PAD_ID)
        return self._bridge(ids, np.where(ids >= 0, scores, PAD_SCORE).astype(np.float32), top_k, allowed, timer)

    def gate_training_data(self, Q: np.ndarray, query_texts: Sequence[str], gold_rows: Sequence[Sequence[int]]
                           ) -> dict[str, np.ndarray]:
        """Stage-1 inputs of :func:`hopgraph.engine.pipelines.dmar.gate.train_gate` for questions with gold rows:
        ``q, d, z_sem, z_struct, gold, valid, offset`` (offset = the lexical term, fixed)."""
        Q = self._check_queries(Q, 1, query_texts)
        batch = self.components.batch(Q, query_texts)
        cand = self._recall(batch)
        linked = self._link(batch.texts)
        _, raw = self._dual_path(batch, cand, linked, StageTimer(), only_raw=True)
        valid = cand >= 0
        gold = np.zeros(cand.shape, bool)
        for b, rows in enumerate(gold_rows):
            gold[b] = np.isin(cand[b], np.asarray(rows)) & valid[b]
        offset = self.lexical * zscore(raw["lex"], valid) if self.lexical else np.zeros(cand.shape, np.float32)
        return {"q": Q, "d": self.components.dense.rows(np.where(valid, cand, 0)), "z_sem": zscore(raw["sem"], valid),
                "z_struct": zscore(raw["struct"], valid & raw["struct_ok"]) * self._query_ok(linked), "gold": gold,
                "valid": valid, "offset": offset}

    def _query_ok(self, linked: list[np.ndarray]) -> np.ndarray:
        """[B, 1] bool: the query links enough entities for the structural path (adaptive fusion)."""
        enough = np.fromiter((len(g) >= self.min_query_entities for g in linked), bool, len(linked))
        return enough[:, None] & bool(self.structural)  # bool dtype even for an empty batch

    def _link(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Entity ids linked in each query (none when the structural path is off)."""
        if not self.structural:
            return [np.zeros(0, np.int32)] * len(texts)
        return self.kg.link_queries(texts, self.query_linking)

    def _recall(self, batch: QueryBatch) -> np.ndarray:
        if self.recall == "hybrid":
            ids, _ = hybrid_ranking(batch, self.n_recall, depth=self.n_recall)
        else:
            ids, _ = batch.bm25_topk(self.n_recall)
        return ids

    def _dual_path(self, batch: QueryBatch, cand: np.ndarray, linked: list[np.ndarray], timer: StageTimer,
                   only_raw: bool = False) -> tuple[np.ndarray | None, dict[str, np.ndarray]]:
        """Raw semantic / structural / lexical scores of candidates ``cand`` [B, C]; fused unless ``only_raw``."""
        with timer("fusion"):
            valid = cand >= 0
            Xc = self.components.dense.rows(np.where(valid, cand, 0))
            sem = np.einsum("bcd,bd->bc", Xc, batch.Q)
            raw = {"sem": sem, "struct": np.zeros_like(sem), "struct_ok": np.zeros_like(valid),
                   "lex": batch.bm25_of(cand) if self.lexical else np.zeros_like(sem)}
        if self.structural and self.kg.n_entities:
            raw["struct"], raw["struct_ok"] = structural_scores(
                self.kg, self.subgraph_emb, cand, linked, self.lam, self.T, self.seed, self.shapley_mode,
                self.device, timer)
        if only_raw:
            return None, raw
        with timer("fusion"):
            fused = self._fuse(batch.Q, cand, raw, linked)
        return fused, raw

    def _fuse(self, Q: np.ndarray, cand: np.ndarray, raw: dict[str, np.ndarray], linked: list[np.ndarray]
              ) -> np.ndarray:
        valid = cand >= 0
        z_sem = zscore(raw["sem"], valid)
        z_struct = zscore(raw["struct"], valid & raw["struct_ok"])
        if self.gate:
            w = self.gate_mlp.weights(Q, self.components.dense.rows(np.where(valid, cand, 0)))
            alpha, beta = w[..., 0], w[..., 1]
        else:
            alpha = beta = np.full(cand.shape, 0.5, np.float32)
        # structural path off → only the semantic path counts
        fused = np.where(self._query_ok(linked), alpha * z_sem + beta * z_struct, z_sem)
        if self.lexical:
            fused = fused + self.lexical * zscore(raw["lex"], valid)
        return fused.astype(np.float32)

    def _anchors(self, cand: np.ndarray, fused: np.ndarray) -> np.ndarray:
        """Top-m fused candidates, or an MMR selection when ``mmr > 0``."""
        fused = np.where(cand >= 0, fused, -np.inf)
        m = min(self.anchors, cand.shape[1])
        if self.mmr <= 0 or m == 1:
            cols, _ = topk_rows(fused, m)
        else:
            B, C = cand.shape
            Xc = self.components.dense.rows(np.maximum(cand, 0))
            cols = np.full((B, m), -1, np.int64)
            penalty = np.zeros((B, C), np.float32)
            score = fused.copy()
            for j in range(m):  # m greedy steps, vectorised over the batch and candidates
                pick = np.argmax(score - self.mmr * penalty, axis=1)
                ok = np.isfinite(score[np.arange(B), pick])
                cols[:, j] = np.where(ok, pick, -1)
                sim = np.einsum("bcd,bd->bc", Xc, Xc[np.arange(B), pick])
                penalty = np.maximum(penalty, sim)
                score[np.arange(B), pick] = -np.inf
        return np.where(cols >= 0, np.take_along_axis(cand, np.maximum(cols, 0), 1), PAD_ID)

    def _reformulate(self, Q: np.ndarray, texts: Sequence[str], anchors: np.ndarray) -> np.ndarray:
        if not self.reformulate:
            return Q
        if getattr(self, "_generator_key", self) is not self.generator:
            self._generator_fn, self._generator_key = resolve_generator(self.generator), self.generator
        gen = self._generator_fn
        if gen is None:
            return rule_vectors(Q, self.X, anchors, self.shift)
        if self.components.embedder is None:
            raise InputError("a reformulation generator needs the index's embedder to embed Q′")
        new_texts = generate_texts(gen, texts, anchor_snippets(self.components.corpus, anchors))
        return encode_queries(self.components.embedder, new_texts, progress=False)

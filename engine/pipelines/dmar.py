"""DMAR — dynamic multi-anchor retrieval (SPEC §3), batched over queries.

Index (``fit``): the BM25 baseline index (reused as is), a faiss exact inner-product
index over X, the corpus knowledge graph (:mod:`hopgraph.engine.knowledge_graph`, entities
from the zero-token extractor), the Siamese GraphSAGE encoder (:mod:`hopgraph.engine.gnn`)
and the embedding of every entity's ego subgraph, and the fusion gate
(:mod:`hopgraph.engine.gate`, untrained = equal weights).

GNN decision: when ``hopgraph train-gnn`` has not been run, ``fit`` pre-trains the encoder
itself for ``gnn_steps = 60`` triplet steps (batch 64, seeded; a few seconds on a 2-core
CPU), so DMAR works out of the box in ``Index.build`` and ``hopgraph eval``;
``hopgraph train-gnn`` trains longer (``train_gnn(steps=600)``) and re-encodes.

Query (``search``), for a batch:

1. Candidate recall, n = ``n_recall`` = 100: ``recall="bm25"`` (SPEC) or ``"hybrid"``
   (dense + BM25 reciprocal rank fusion, issue #6).
2. Dual-path score of every candidate: semantic ``cos(q, x_D)``; structural
   Score_ent = mean Shapley value of the query's subgraphs (op ``shapley_mc``, T = 50,
   λ = ``lam``), structsim = cosine of stored subgraph embeddings. Adaptive fusion: a
   query linking fewer than ``min_query_entities`` entities uses the semantic path only;
   a candidate linking none gets a neutral structural z-score (0). Scores are z-normalised
   within the candidate set and fused ``α z_sem + β z_struct`` with ``[α, β]`` from the gate
   (``gate=False``: fixed 1/2, 1/2). Option ``lexical`` (issue #6) adds ``lexical · z_bm25``
   (the candidate's BM25 score for Q), 0 = SPEC.
3. Anchors: the top m = ``anchors`` fused candidates; ``mmr > 0`` picks them by maximal
   marginal relevance (fused score minus ``mmr`` × max cosine to the anchors already chosen).
4. Reformulation (:mod:`hopgraph.engine.reformulation`): default rule, or a generator.
5. Second stage: faiss top p = ``p`` with Q′.
6. Fidelity rerank: the dual-path score again against the ORIGINAL Q, over the
   stage-2 candidates (SPEC, ``union=0``) or those plus the ``union`` best fused stage-1
   candidates (default ``union=20``, issue #6); top k.

Query linking (``query_linking``): ``"capitalised"`` (default) or ``"ngram"``, see
:mod:`hopgraph.engine.knowledge_graph`.

Defaults follow the SPEC (n = 100, m = 3, p = 20, T = 50, k = 5) plus the issue-#6 options,
one set for every corpus: ``recall="hybrid"``, ``union=20``, ``lexical=0.5``,
``query_linking="capitalised"`` (``mmr=0``: MMR anchors did not change Recall@5 on the shared
sets). The ``published`` ablation restores the SPEC behaviour (BM25 recall, stage-2 pool only,
no lexical term). Recall@5 measured with ``hopgraph eval`` (MiniLM, untrained gate, fit-time
GNN): hotpotqa 0.865 (hybrid 0.815), musique 0.693 (dense 0.612); ablations in the
``ablations`` dict (``hopgraph eval --pipelines dmar --ablations``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from ... import kernels
from ..corpus import Corpus
from ..embedders import Embedder
from ..errors import InputError
from ..extraction import extract
from ..gate import Gate
from ..gnn import SubgraphEncoder, encode_all, encoder_arrays, encoder_from_arrays, entity_features, pretrain
from ..knowledge_graph import KnowledgeGraph, build_knowledge_graph
from ..ranking import PAD_ID, PAD_SCORE, topk_rows
from ..reformulation import anchor_snippets, generate_texts, resolve_generator, rule_vectors
from ..storage import load_arrays, save_arrays
from .base import Pipeline
from .bm25 import BM25
from .dense import Dense, faiss_topk
from .hybrid import hybrid_ranking

RECALLS = ("bm25", "hybrid")
#: per-stage seconds of the last ``search`` (``DMAR.timings``): recall (BM25 / hybrid), query
#: entity linking, subgraph/candidate node sets, GNN structsim cosines, Shapley kernel, semantic/
#: lexical/gate fusion, anchors + reformulation + faiss second stage, final rerank
STAGES = ("recall", "link", "subgraphs", "gnn", "shapley", "fusion", "second_stage", "rerank")


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


class DMAR(Pipeline):
    """Dynamic multi-anchor retrieval (module docstring; SPEC §3)."""

    name = "dmar"
    needs_corpus = True
    needs_query_texts = True
    query_params = frozenset({"n_recall", "anchors", "p", "structural", "reformulate", "gate", "lam", "T",
                              "seed", "recall", "union", "lexical", "mmr", "shift", "min_query_entities",
                              "shapley_mode", "query_linking", "generator", "device"})
    ablations = {
        "published": {"recall": "bm25", "union": 0, "lexical": 0.0, "mmr": 0.0},
        "structural=False": {"structural": False},
        "reformulate=False": {"reformulate": False},
        "gate=False": {"gate": False},
        "anchors=1": {"anchors": 1},
        "recall=bm25": {"recall": "bm25"},
        "union=0": {"union": 0},
        "lexical=0": {"lexical": 0.0},
        "mmr=0.5": {"mmr": 0.5},
        "query_linking=ngram": {"query_linking": "ngram"},
    }

    def __init__(self, n_recall: int = 100, anchors: int = 3, p: int = 20, structural: bool = True,
                 reformulate: bool = True, gate: bool = True, lam: float = 0.5, T: int = 50, seed: int = 0,
                 recall: str = "hybrid", union: int = 20, lexical: float = 0.5, mmr: float = 0.0,
                 shift: float = 1.0, min_query_entities: int = 1, shapley_mode: str = "independent",
                 query_linking: str = "capitalised",
                 ego_size: int = 16, max_passage_entities: int = 32, max_query_entities: int = 8,
                 gnn_steps: int = 60, edge_list: str | None = None,
                 generator: str | Callable[[str, list[str]], str] | None = None, device: str = "auto") -> None:
        if recall not in RECALLS:
            raise InputError(f"recall must be one of {RECALLS}, got {recall!r}")
        for nm, v in (("n_recall", n_recall), ("anchors", anchors), ("p", p), ("T", T)):
            if isinstance(v, bool) or int(v) < 1:
                raise InputError(f"{nm} must be a positive integer, got {v!r}")
        if not 0.0 <= lam <= 1.0:
            raise InputError(f"lam must be in [0, 1], got {lam}")
        self.n_recall, self.anchors, self.p, self.T = int(n_recall), int(anchors), int(p), int(T)
        self.structural, self.reformulate, self.gate = bool(structural), bool(reformulate), bool(gate)
        self.lam, self.seed, self.recall, self.union = float(lam), int(seed), recall, int(union)
        self.lexical, self.mmr, self.shift = float(lexical), float(mmr), float(shift)
        self.min_query_entities, self.shapley_mode = int(min_query_entities), shapley_mode
        self.query_linking = query_linking
        self.ego_size, self.max_passage_entities = int(ego_size), int(max_passage_entities)
        self.max_query_entities, self.gnn_steps = int(max_query_entities), int(gnn_steps)
        self.edge_list, self.generator, self.device = edge_list, generator, device
        self.X = None
        self.corpus: Corpus | None = None
        self.embedder: Embedder | None = None
        self.bm25 = BM25()
        self.dense = Dense()
        self.kg: KnowledgeGraph | None = None
        self.encoder: SubgraphEncoder | None = None
        self.subgraph_emb: np.ndarray | None = None
        self.gate_mlp: Gate | None = None
        self.timings: dict[str, float] = {}

    def get_params(self) -> dict[str, Any]:
        return {"n_recall": self.n_recall, "anchors": self.anchors, "p": self.p, "structural": self.structural,
                "reformulate": self.reformulate, "gate": self.gate, "lam": self.lam, "T": self.T, "seed": self.seed,
                "recall": self.recall, "union": self.union, "lexical": self.lexical, "mmr": self.mmr,
                "shift": self.shift, "min_query_entities": self.min_query_entities,
                "shapley_mode": self.shapley_mode, "query_linking": self.query_linking, "ego_size": self.ego_size,
                "max_passage_entities": self.max_passage_entities, "max_query_entities": self.max_query_entities,
                "gnn_steps": self.gnn_steps, "edge_list": self.edge_list,
                # a callable generator cannot be stored; pass it again after loading
                "generator": self.generator if isinstance(self.generator, str) else None,
                "device": self.device}

    # ------------------------------------------------------------------ index
    def fit(self, X: np.ndarray, corpus: Corpus | None = None, embedder: Embedder | None = None,
            progress: bool = False) -> "DMAR":
        self.X = self._check_fit_inputs(X, corpus, True, self.name)
        self.corpus, self.embedder = corpus, embedder
        self.bm25.fit(self.X, corpus, progress=progress)
        self.dense.fit(self.X)
        extraction = extract(corpus, progress=progress)
        self.kg = build_knowledge_graph(extraction, len(corpus), self.edge_list, self.ego_size,
                                        self.max_passage_entities, self.max_query_entities)
        self.train_gnn(self.gnn_steps, progress=progress)
        self.gate_mlp = Gate(self.X.shape[1])
        return self

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

    def save(self, directory: Path) -> None:
        self.bm25.save(directory)
        arrays = {**self.kg.arrays(), **encoder_arrays(self.encoder), **self.gate_mlp.arrays(),
                  "subgraph_emb": self.subgraph_emb}
        save_arrays(directory, arrays)

    @classmethod
    def load(cls, directory: Path, params: dict[str, Any], X: np.ndarray, corpus: Corpus | None,
             embedder: Embedder | None) -> "DMAR":
        self = cls(**params)
        self.X, self.corpus, self.embedder = X, corpus, embedder
        self.bm25 = BM25.load(directory, {}, X, corpus, embedder)
        self.dense.fit(X)
        names = sorted(p.stem for p in directory.glob("*.npy"))
        arrays = load_arrays(directory, names)
        self.kg = KnowledgeGraph.from_arrays(arrays, len(X))
        self.encoder = encoder_from_arrays(arrays)
        self.gate_mlp = Gate.from_arrays(arrays)
        self.subgraph_emb = arrays["subgraph_emb"]
        return self

    # ------------------------------------------------------------------ query
    def search(self, Q: np.ndarray, top_k: int = 5,
               query_texts: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
        Q = self._check_queries(Q, top_k, query_texts)
        import time

        t = {k: 0.0 for k in STAGES}
        clock = time.perf_counter
        t0 = clock()
        cand = self._recall(Q, query_texts)
        t["recall"] += clock() - t0
        t0 = clock()
        linked = self._link(query_texts)
        t["link"] += clock() - t0
        fused1, parts1 = self._dual_path(Q, query_texts, cand, linked, t)
        t0 = clock()
        anchors = self._anchors(cand, fused1)
        Q2 = self._reformulate(Q, query_texts, anchors)
        ids2, _ = faiss_topk(self.dense._index, Q2, self.p)
        t["second_stage"] += clock() - t0
        t0, nested = clock(), sum(t.values())
        if self.union > 0:
            cols1, _ = topk_rows(np.where(cand >= 0, fused1, -np.inf), min(self.union, cand.shape[1]))
            keep1 = np.where(cols1 >= 0, np.take_along_axis(cand, np.maximum(cols1, 0), 1), PAD_ID)
            final = dedupe_rows(np.concatenate([keep1, ids2], 1))
            _, parts_new = self._dual_path(Q, query_texts, final[:, keep1.shape[1]:], linked, t, only_raw=True)
            raw = {k: np.concatenate([np.take_along_axis(parts1[k], np.maximum(cols1, 0), 1), parts_new[k]], 1)
                   for k in parts1}
            fused = self._fuse(Q, final, raw, linked)
        else:
            final = ids2
            fused, _ = self._dual_path(Q, query_texts, final, linked, t)
        fused = np.where(final >= 0, fused, -np.inf)
        cols, scores = topk_rows(fused, top_k)
        ids = np.where(cols >= 0, np.take_along_axis(final, np.maximum(cols, 0), 1), PAD_ID)
        t["rerank"] += clock() - t0 - (sum(t.values()) - nested)  # exclusive of the nested stages
        self.timings = t
        return ids, np.where(ids >= 0, scores, PAD_SCORE).astype(np.float32)

    def gate_training_data(self, Q: np.ndarray, query_texts: Sequence[str], gold_rows: Sequence[Sequence[int]]
                           ) -> dict[str, np.ndarray]:
        """Stage-1 inputs of :func:`hopgraph.engine.gate.train_gate` for questions with gold rows:
        ``q, d, z_sem, z_struct, gold, valid, offset`` (offset = the lexical term, fixed)."""
        Q = self._check_queries(Q, 1, query_texts)
        t = {k: 0.0 for k in STAGES}
        cand = self._recall(Q, query_texts)
        linked = self._link(query_texts)
        _, raw = self._dual_path(Q, query_texts, cand, linked, t, only_raw=True)
        valid = cand >= 0
        query_ok = np.asarray([len(g) >= self.min_query_entities for g in linked])[:, None] & self.structural
        gold = np.zeros(cand.shape, bool)
        for b, rows in enumerate(gold_rows):
            gold[b] = np.isin(cand[b], np.asarray(rows)) & valid[b]
        offset = self.lexical * zscore(raw["lex"], valid) if self.lexical else np.zeros(cand.shape, np.float32)
        return {"q": Q, "d": np.asarray(self.X)[np.where(valid, cand, 0)], "z_sem": zscore(raw["sem"], valid),
                "z_struct": zscore(raw["struct"], valid & raw["struct_ok"]) * query_ok, "gold": gold,
                "valid": valid, "offset": offset}

    def _link(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Entity ids linked in each query (none when the structural path is off)."""
        if not self.structural:
            return [np.zeros(0, np.int32)] * len(texts)
        return self.kg.link_queries(texts, self.query_linking)

    def _recall(self, Q: np.ndarray, texts: Sequence[str]) -> np.ndarray:
        if self.recall == "hybrid":
            ids, _ = hybrid_ranking(self.dense, self.bm25, Q, texts, self.n_recall, depth=self.n_recall)
        else:
            ids, _ = self.bm25.scores(texts, self.n_recall)
        return ids

    def _dual_path(self, Q: np.ndarray, texts: Sequence[str], cand: np.ndarray, linked: list[np.ndarray],
                   t: dict[str, float], only_raw: bool = False) -> tuple[np.ndarray | None, dict[str, np.ndarray]]:
        """Raw semantic / structural / lexical scores of candidates ``cand`` [B, C]; fused unless ``only_raw``."""
        import time

        t0 = time.perf_counter()
        valid = cand >= 0
        Xc = np.asarray(self.X)[np.where(valid, cand, 0)]
        sem = np.einsum("bcd,bd->bc", Xc, Q)
        raw = {"sem": sem, "struct": np.zeros_like(sem), "struct_ok": np.zeros_like(valid),
               "lex": np.zeros_like(sem)}
        if self.lexical:
            raw["lex"] = self._lexical(texts, cand)
        t["fusion"] += time.perf_counter() - t0
        if self.structural and self.kg.n_entities:
            raw["struct"], raw["struct_ok"] = self._structural(cand, linked, t)
        if only_raw:
            return None, raw
        t0 = time.perf_counter()
        fused = self._fuse(Q, cand, raw, linked)
        t["fusion"] += time.perf_counter() - t0
        return fused, raw

    def _fuse(self, Q: np.ndarray, cand: np.ndarray, raw: dict[str, np.ndarray], linked: list[np.ndarray]
              ) -> np.ndarray:
        valid = cand >= 0
        z_sem = zscore(raw["sem"], valid)
        z_struct = zscore(raw["struct"], valid & raw["struct_ok"])
        query_ok = np.asarray([len(g) >= self.min_query_entities for g in linked])[:, None] & self.structural
        if self.gate:
            Xc = np.asarray(self.X)[np.where(valid, cand, 0)]
            w = self.gate_mlp.weights(Q, Xc)
            alpha, beta = w[..., 0], w[..., 1]
        else:
            alpha = beta = np.full(cand.shape, 0.5, np.float32)
        # structural path off → only the semantic path counts
        fused = np.where(query_ok, alpha * z_sem + beta * z_struct, z_sem)
        if self.lexical:
            fused = fused + self.lexical * zscore(raw["lex"], valid)
        return fused.astype(np.float32)

    def _lexical(self, texts: Sequence[str], cand: np.ndarray) -> np.ndarray:
        import bm25s

        out = np.zeros(cand.shape, np.float32)
        retr = self.bm25.retriever
        vocab = retr.vocab_dict
        tokens = bm25s.tokenize(list(texts), stopwords=self.bm25.stopwords, return_ids=False, show_progress=False)
        for b, toks in enumerate(tokens):
            toks = [w for w in toks if w in vocab]
            if toks:
                scores = retr.get_scores(toks)
                out[b] = np.where(cand[b] >= 0, scores[np.maximum(cand[b], 0)], 0.0)
        return out

    def _structural(self, cand: np.ndarray, linked: list[np.ndarray], t: dict[str, float] | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
        """Score_ent [B, C] by batched Monte Carlo Shapley, and which candidates link entities."""
        import time

        t = t if t is not None else {k: 0.0 for k in STAGES}
        t0 = time.perf_counter()
        kg = self.kg
        B, C = cand.shape
        E = kg.n_entities
        n_sub = np.asarray([len(g) for g in linked], np.int64)
        G = max(int(n_sub.max(initial=0)), 1)
        # query subgraphs → query-local node vocabulary
        q_of = np.repeat(np.arange(B), n_sub)
        g_of = np.concatenate([np.arange(n) for n in n_sub]) if n_sub.sum() else np.zeros(0, np.int64)
        ents = np.concatenate(linked).astype(np.int64) if n_sub.sum() else np.zeros(0, np.int64)
        ego_rows = kg.ego[ents]
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
        # candidates: nodes(G_D) membership of the local nodes, and their entity lists
        valid = cand >= 0
        flat = np.where(valid, cand, 0).ravel()
        pe = kg.passage_entities[flat]
        nodes_d = (pe @ kg.ego).tocsr()
        rows = np.repeat(np.arange(B * C), U)
        cols = np.repeat(local_nodes, C, axis=0).ravel()
        ok = cols >= 0
        member = np.zeros(B * C * U, np.float32)
        member[ok] = np.asarray(nodes_d[rows[ok], cols[ok]]).ravel() > 0
        cand_nodes = member.reshape(B, C, U) * valid[..., None]
        n_ent = np.diff(pe.indptr)
        struct_ok = (n_ent.reshape(B, C) > 0) & valid
        Dm = max(int(n_ent.max(initial=0)), 1)
        pos = np.arange(len(pe.indices)) - np.repeat(pe.indptr[:-1], n_ent)
        ent_pad = np.full((B * C, Dm), -1, np.int64)
        ent_pad[np.repeat(np.arange(B * C), n_ent), pos] = pe.indices
        t1 = time.perf_counter()
        t["subgraphs"] += t1 - t0
        # structsim(g, g_d) = cosine of stored unit subgraph embeddings, computed once per
        # distinct (query subgraph, candidate entity) pair of the batch, then gathered
        Z = self.subgraph_emb
        ent_ok = ent_pad >= 0
        uniq, inv = np.unique(np.where(ent_ok, ent_pad, -1), return_inverse=True)
        inv = inv.reshape(B, C, Dm)
        Zq = torch.from_numpy(np.asarray(Z[ents], np.float32)) if len(ents) else torch.zeros((0, Z.shape[1]))
        S = torch.cat([Zq @ torch.from_numpy(np.asarray(Z[np.maximum(uniq, 0)], np.float32)).T,
                       torch.zeros((1, len(uniq)))])  # last row: padding subgraph
        qg = np.full((B, G), len(ents), np.int64)
        qg[q_of, g_of] = np.arange(len(ents))
        sims = S[torch.from_numpy(qg)[:, None, None, :], torch.from_numpy(inv)[..., None]]  # [B, C, Dm, G]
        sims = sims.masked_fill(~torch.from_numpy(ent_ok).reshape(B, C, Dm, 1), -2.0).amax(2)
        best = (sims.clamp_min(-1.0) * (sims > -2).float() * torch.from_numpy(valid)[..., None]).numpy()
        t2 = time.perf_counter()
        t["gnn"] += t2 - t1
        _, score = kernels.call("shapley_mc", torch.from_numpy(node_sets), torch.from_numpy(n_sub),
                                torch.from_numpy(cand_nodes.astype(np.float32)), torch.from_numpy(best),
                                lam=self.lam, T=self.T, seed=self.seed, mode=self.shapley_mode,
                                device=self.device)
        score = score.cpu().numpy()  # waits for a GPU kernel, so its time counts in this stage
        t["shapley"] += time.perf_counter() - t2
        return np.where(valid, score, 0.0).astype(np.float32), struct_ok

    def _anchors(self, cand: np.ndarray, fused: np.ndarray) -> np.ndarray:
        """Top-m fused candidates, or an MMR selection when ``mmr > 0``."""
        fused = np.where(cand >= 0, fused, -np.inf)
        m = min(self.anchors, cand.shape[1])
        if self.mmr <= 0 or m == 1:
            cols, _ = topk_rows(fused, m)
        else:
            B, C = cand.shape
            Xc = np.asarray(self.X)[np.maximum(cand, 0)]
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
        if self.embedder is None:
            raise InputError("a reformulation generator needs the index's embedder to embed Q′")
        new_texts = generate_texts(gen, texts, anchor_snippets(self.corpus, anchors))
        return self.embedder.encode(new_texts, progress=False)

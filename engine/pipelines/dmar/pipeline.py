"""DMAR — dynamic multi-anchor retrieval (SPEC §3), batched over queries.

Index (``fit``): the shared BM25 and dense components, the shared zero-token extraction
(:mod:`hopgraph.engine.components.extraction`, the same entities as STITCH) and from it the corpus
knowledge graph (:mod:`hopgraph.engine.pipelines.dmar.knowledge_graph`), the Siamese GraphSAGE encoder
(:mod:`hopgraph.engine.pipelines.dmar.gnn`) with the embedding of every entity's ego subgraph, and the
fusion gate (:mod:`hopgraph.engine.pipelines.dmar.gate`, untrained = equal weights). Saved: the knowledge
graph, the encoder weights, the gate and the subgraph embeddings.

When ``hopgraph train-gnn`` has not been run, ``fit`` pre-trains the encoder itself for
``gnn_steps`` (60) triplet steps (batch 64, seeded), so DMAR works out of the box in
``Index.build`` and ``hopgraph eval``; ``hopgraph train-gnn`` trains longer
(``train_gnn(steps=600)``) and re-encodes.

Live indexes: ``Index.add`` calls ``add`` (:meth:`DMAR._add`): the knowledge graph is rebuilt
from the extended extraction, the trained encoder and the gate are kept (no retraining until
``Index.compact()``), and only the ego subgraphs whose input changed are encoded again.

Query (``search``), for a batch; each stage is timed in ``DMAR.timings`` (:data:`STAGES`):

1. Candidate recall (SPEC §3 step 1), n = ``candidate_depth`` (100): ``candidate_source="bm25"``
   (SPEC) or ``"hybrid"`` (dense + BM25 reciprocal rank fusion; the default).
2. Dual-path score of every candidate (step 2): semantic ``cos(q, x_D)``; structural
   Score_ent = mean Shapley value of the query's subgraphs (:mod:`hopgraph.engine.pipelines.dmar.structural`,
   op ``shapley_mc``, T = ``shapley_samples`` (50), λ = ``shapley_lambda`` (0.5)), structsim =
   cosine of stored subgraph embeddings. Adaptive fusion: a query linking fewer than
   ``min_query_entities`` (1) entities uses the semantic path only; a candidate linking none gets a
   neutral structural z-score (0). Scores are z-normalised within the candidate set and fused
   ``α z_sem + β z_struct`` with ``[α, β]`` from the gate (``gate=False``: fixed 1/2, 1/2).
   ``bm25_weight`` (0.5) adds ``bm25_weight · z_bm25`` (the candidate's BM25 score for Q); 0 = SPEC.
3. Anchors (step 3): the top m = ``anchors`` (3) fused candidates; ``mmr > 0`` picks them by
   maximal marginal relevance (fused score minus ``mmr`` × max cosine to the anchors
   already chosen); default ``mmr = 0`` (plain top m).
4. Reformulation (step 4, :mod:`hopgraph.engine.pipelines.dmar.reformulation`): the default rule (no
   generator: the query vector moved toward the anchors, ``shift`` = 1), or a ``generator``
   whose text Q′ is embedded.
5. Second stage (step 5): the top ``second_stage_depth`` (20) of the shared dense index with Q′
   (the top k when k is larger, so that k passages come back whenever k pass).
6. Fidelity rerank (step 6): the dual-path score again against the ORIGINAL Q, over the
   stage-2 candidates (SPEC, ``union_depth=0``) or those plus the ``union_depth`` (20) best fused
   stage-1 candidates; top k.

Then the title bridge (:mod:`hopgraph.engine.pipelines.title_bridge`; not in the SPEC, a query-time
second hop in the spirit of SPEC §3); ``bridge=0`` switches it off.

Query linking (``query_linking``): ``"capitalised"`` (default) or ``"ngram"``, see
:mod:`hopgraph.engine.pipelines.dmar.knowledge_graph`.

Defaults: the SPEC's (n = 100, m = 3, p = 20, T = 50, k = 5) plus ``candidate_source="hybrid"``,
``union_depth=20``, ``bm25_weight=0.5``, ``query_linking="capitalised"``, ``mmr=0``, one set for
every corpus; the measurements behind them: ``docs/decisions/dmar-defaults.md``. Published
behaviour: ``DMAR(published=True)`` (= ``DMAR.ablations["published"]``): BM25 recall, the stage-2
pool only in the rerank, no lexical term. ``no_graph`` (the pipeline without its knowledge-graph
path) is ``structural=False`` without the bridge, under the name every graph pipeline gives its
no-graph ablation. Each option has an ablation (``hopgraph eval --pipelines dmar --ablations``).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from ....kernels.shapley_mc import MODES as SHAPLEY_MODES
from ....kernels.tensors import as_numpy
from ...components.hybrid_ranking import hybrid_ranking, hybrid_ranking_tensors
from ...components.query_batch import QueryBatch
from ...components.shared import state_source
from ...graphs.renumbered import (differing_rows, load_held_matrix, load_entity_ids, renumber, renumber_matrix,
                                  save_held_matrix, spread, stored_graph, stored_matrix)
from ...graphs.store import NODE_ROWS, saved_by_reference
from ...cost import LIST_ENTRY, PASSAGE_ARRAYS, Cost, IndexShape
from ...sparse import take_rows
from ...storage.deltas import changed_rows
from ...embedders.queries import encode_queries
from ...errors import IndexFormatError, InputError
from .gate import Gate, train_gate
from .gnn import (SubgraphEncoder, changed_subgraphs, encode_all, encode_subgraphs, encoder_arrays,
                   encoder_from_arrays, entity_features, pretrain)
from .knowledge_graph import LINK_MODES, KnowledgeGraph, build_knowledge_graph
from ...params import FitParams, anything, choice, flag, integer, path, real
from ...ranking import PAD_ID, PAD_SCORE, topk_rows
from .reformulation import anchor_snippets, generate_texts, resolve_generator, rule_vectors
from ...storage import check_unit_rows, load_arrays, pack_strings, save_arrays
from .scores import dedupe_rows, zscore
from .deltas import delta_arrays, read_deltas
from .device_search import device_search
from .device_structural import HeldStructure
from .structural import structural_scores
from ...timing import StageTimer
from ..base import Needs, Pipeline
from ..title_bridge import BridgeSearch, TitleBridge

CANDIDATE_SOURCES = ("bm25", "hybrid")
#: per-stage seconds of the last ``search`` (``DMAR.timings``): recall (BM25 / hybrid), query
#: entity linking, subgraph/candidate node sets, GNN structsim cosines, Shapley kernel, semantic/
#: lexical/gate fusion, anchors + reformulation + faiss second stage, final rerank, title bridge
STAGES = ("recall", "link", "subgraphs", "gnn", "shapley", "fusion", "second_stage", "rerank", "title_bridge")


def _is_generator(value: Any) -> bool:
    return value is None or (isinstance(value, str) and bool(value)) or callable(value)


@dataclass(frozen=True)
class DMARFit(FitParams):
    """DMAR's fit parameters: the knowledge graph and the GNN (SPEC §3 step 2)."""

    pipeline = "dmar"
    ego_size: int = integer(16, low=1)
    max_passage_entities: int = integer(32, low=1)
    max_query_entities: int = integer(8, low=1)
    gnn_steps: int = integer(60, low=0)
    edge_list: str | None = path(None)


@dataclass(frozen=True)
class DMARSearch(BridgeSearch):
    """DMAR's search parameters (SPEC §3 steps 1–6)."""

    pipeline = "dmar"
    renamed = {"n_recall": "candidate_depth", "p": "second_stage_depth", "union": "union_depth",
               "recall": "candidate_source", "seed": "random_state", "lexical": "bm25_weight",
               "T": "shapley_samples", "lam": "shapley_lambda"}
    candidate_source: str = choice("hybrid", CANDIDATE_SOURCES)
    candidate_depth: int = integer(100, low=1, serving_bound=500)
    anchors: int = integer(3, low=1, serving_bound=32)
    second_stage_depth: int = integer(20, low=1, serving_bound=500)
    union_depth: int = integer(20, low=0, serving_bound=500)
    structural: bool = flag(True)
    reformulate: bool = flag(True)
    gate: bool = flag(True)
    shapley_lambda: float = real(0.5, low=0.0, high=1.0)
    shapley_samples: int = integer(50, low=1, serving_bound=500)
    shapley_mode: str = choice("independent", SHAPLEY_MODES)
    random_state: int = integer(0, low=0, serving_bound=2**32 - 1)
    bm25_weight: float = real(0.5, low=0.0)
    mmr: float = real(0.0, low=0.0)
    shift: float = real(1.0, low=0.0)
    min_query_entities: int = integer(1, low=0, serving_bound=64)
    query_linking: str = choice("capitalised", LINK_MODES)
    generator: Any = anything(None, _is_generator, "a seq2seq model folder or a callable (question, "
                              "snippets) -> text")

    @classmethod
    def published_values(cls) -> dict[str, Any]:
        """SPEC §3 as published: BM25 candidates, the stage-2 pool only, no lexical term, top-m
        anchors, no title bridge."""
        return {"candidate_source": "bm25", "union_depth": 0, "bm25_weight": 0.0, "mmr": 0.0, "bridge": 0.0}


class DMAR(Pipeline[DMARFit, DMARSearch]):
    """Dynamic multi-anchor retrieval (module docstring; SPEC §3).

    Fitted state: ``knowledge_graph_``, ``encoder_`` (the Siamese GraphSAGE encoder),
    ``subgraph_emb_`` (float32 [n_entities, d]) and ``gate_`` (the fusion gate)."""

    name = "dmar"
    FitParams = DMARFit
    SearchParams = DMARSearch
    needs = Needs(corpus=True, query_texts=True)
    components_used = ("dense", "bm25", "extraction")
    runs_kernels = True
    rerank = (TitleBridge(),)
    stages = STAGES
    ablations = {
        "published": DMARSearch.published_values(),
        "structural=False": {"structural": False},
        "no_graph": {"structural": False, "bridge": 0.0},
        "no_bridge": {"bridge": 0.0},
        "reformulate=False": {"reformulate": False},
        "gate=False": {"gate": False},
        "anchors=1": {"anchors": 1},
        "candidate_source=bm25": {"candidate_source": "bm25"},
        "union_depth=0": {"union_depth": 0},
        "bm25_weight=0": {"bm25_weight": 0.0},
        "mmr=0.5": {"mmr": 0.5},
        "query_linking=ngram": {"query_linking": "ngram"},
    }

    def __init__(self, params: dict[str, Any] | None = None, /, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self.knowledge_graph_: KnowledgeGraph | None = None
        self.encoder_: SubgraphEncoder | None = None
        self.subgraph_emb_: np.ndarray | None = None
        self.gate_: Gate | None = None
        #: the knowledge graph and subgraph embeddings as the graph store holds them for the structural path
        self._held = HeldStructure()

    @classmethod
    def cost(cls, shape: IndexShape, params: DMARSearch, batch: int, k: int, grouped: bool = False) -> Cost:
        """:meth:`Pipeline.cost` plus the second dense pass of the reformulated questions, the C
        candidates' vectors, and the Monte Carlo Shapley tensors (``shapley_samples · G · (3U + 7C)``
        floats per question for G query entities and U = G · ego_size local nodes; SPEC §3 step 4)."""
        n, d, depth = max(shape.n, 1), shape.d, cls.cost_depth(shape, params, k, grouped)
        fit = cls.cost_fit(shape)
        G = fit.max_query_entities
        U = G * fit.ego_size
        C = max(params.candidate_depth, params.union_depth + max(params.second_stage_depth, depth))
        shapley = params.shapley_samples * G * (3 * U + 7 * C) if params.structural else 0
        own = Cost(batch * (2 * n * d + n + C * d + shapley * (G + 2)),
                   PASSAGE_ARRAYS * n + batch * (C * d * 4 * 3 + C * LIST_ENTRY * 4 + shapley * 4))
        return super().cost(shape, params, batch, k, grouped) + own

    # ------------------------------------------------------------------ index
    def _fit(self, progress: bool) -> None:
        """KG, pre-trained encoder, subgraph embeddings, gate: once per index (:meth:`Components.shared_fit`)."""
        self.knowledge_graph_, self.encoder_, self.subgraph_emb_, self.gate_ = self.components.shared_fit(
            self._fit_key(), lambda: self._fit_state(progress))

    def _fit_key(self) -> tuple:
        """What the fitted state depends on besides the components: fit parameters, pre-training seed."""
        return ("dmar", tuple(sorted(self.fit_params.to_dict().items())), self.search_defaults.random_state)

    def _fit_state(self, progress: bool) -> tuple[KnowledgeGraph, SubgraphEncoder, np.ndarray, Gate]:
        self.knowledge_graph_ = self._build_kg()
        self.train_gnn(self.fit_params.gnn_steps, progress=progress)
        return self.knowledge_graph_, self.encoder_, self.subgraph_emb_, Gate(self.components.X.shape[1])

    def _build_kg(self) -> KnowledgeGraph:
        """The knowledge graph of the shared extraction (SPEC §3 step 2), BM25 built on the way."""
        comp, fp = self.components, self.fit_params
        comp.bm25(who=self.name)
        return build_knowledge_graph(comp.extraction(who=self.name), len(comp.X), fp.edge_list, fp.ego_size,
                                     fp.max_passage_entities, fp.max_query_entities)

    def _add(self, start: int, progress: bool) -> None:
        """:meth:`_update`, once for the pipelines holding the same state (:meth:`Components.shared_update`)."""
        old = (self.knowledge_graph_, self.subgraph_emb_, self.encoder_)
        self.knowledge_graph_, self.subgraph_emb_ = self.components.shared_update(
            self._fit_key(), old, lambda: self._update(start, progress))

    def _update(self, start: int, progress: bool) -> tuple[KnowledgeGraph, np.ndarray]:
        """Passages ``[start, N)`` were appended (SPEC §3 step 2 on the grown corpus): the
        knowledge graph is rebuilt from the extended shared extraction (arithmetic), the entity
        features recomputed, and with the **same** encoder (not retrained: ``Index.compact()`` or
        ``hopgraph train-gnn`` retrains it) only the ego subgraphs whose encoder input changed are
        encoded again (:func:`~hopgraph.engine.pipelines.dmar.gnn.changed_subgraphs`: new entities, changed ego
        node sets, nodes linked by other passages, i.e. with other features, or edges among the
        nodes); the others keep their embeddings. The gate is kept. The result equals a fit on the
        grown corpus whose encoder has these weights (given the extraction's documented
        approximation). When an old entity's id moves out of order (a name known only from the
        ``edge_list`` that the corpus now mentions), every subgraph is encoded again. When the
        graphs were loaded by reference (their rows held elsewhere, read by rows):
        :meth:`_add_over_stored` (the same result, reading the rows that can differ); when every
        subgraph is encoded again, the new graphs and embeddings are held whole. Returns the new (KG, embeddings)."""
        old_kg = self.knowledge_graph_
        kg = self.knowledge_graph_ = self._build_kg()
        ids = kg.name_ids
        pos = np.fromiter((ids.get(n, -1) for n in old_kg.names), np.int64, old_kg.n_entities)
        if (pos < 0).any() or (np.diff(pos) <= 0).any():
            features = entity_features(kg.passage_entities, self.components.X)
            self.subgraph_emb_ = encode_all(self.encoder_, kg.ego, kg.adj, features, progress=progress)
            return kg, self.subgraph_emb_
        old_ids = np.full(kg.n_entities, -1, np.int64)
        old_ids[pos] = np.arange(old_kg.n_entities)
        if stored_graph(old_kg.ego) is not None:
            self._add_over_stored(old_kg, start, pos, old_ids, progress)
            return self.knowledge_graph_, self.subgraph_emb_
        old_emb = np.asarray(self.subgraph_emb_)
        features = entity_features(kg.passage_entities, self.components.X)
        changed = changed_subgraphs(old_kg.ego, old_kg.adj, old_kg.passage_entities, kg.ego, kg.adj,
                                    kg.passage_entities, old_ids)
        emb = np.empty((kg.n_entities, old_emb.shape[1]), np.float32)
        emb[~changed] = old_emb[old_ids[~changed]]
        emb[changed] = encode_subgraphs(self.encoder_, kg.ego, kg.adj, features, np.flatnonzero(changed),
                                        progress=progress)
        return kg, emb

    def _add_over_stored(self, old_kg: KnowledgeGraph, start: int, new_of_old: np.ndarray, old_ids: np.ndarray,
                         progress: bool) -> None:
        """:meth:`_add` over passage → entities and ego rows and embeddings loaded by reference
        (:mod:`~hopgraph.engine.graphs.renumbered`): the same changed subgraphs and embeddings,
        reading of the old graphs only the rows that can differ — an ego row where its entity's
        co-occurrences (``adj``, held whole) changed, a passage's row where one of its entities'
        passage count changed (the row is its rarest entities) — and of the embeddings only the
        passages linking the nodes encoded again; the rows that differ from the stored ones (and
        the entities' new ids) are then held over the stored rows."""
        kg, X = self.knowledge_graph_, self.components.X
        E, N = kg.n_entities, len(X)
        was_new = old_ids < 0
        before = take_rows(old_kg.adj, np.where(was_new, 0, old_ids))
        adj_changed = changed_rows((before.indptr, new_of_old[np.asarray(before.indices, np.int64)], before.data),
                                   kg.adj[:3], E)
        ego_rows = np.union1d(adj_changed, np.flatnonzero(was_new))
        old_df = np.where(was_new, -1, np.asarray(old_kg.df)[np.maximum(old_ids, 0)])
        ex = self.components.extraction(who=self.name)
        chunk, name = np.asarray(ex.node_chunk, np.int64), np.asarray(ex.node_name, np.int64)
        recounted = (kg.df != old_df)[name] & (chunk < start)
        pe_rows = np.union1d(np.unique(chunk[recounted]), np.arange(start, N, dtype=np.int64))
        ego_differ, old_ego = differing_rows(old_kg.ego, kg.ego, ego_rows, old_ids, new_of_old)
        passage_row = np.where(np.arange(N) < start, np.arange(N), -1)
        pe_differ, old_pe = differing_rows(old_kg.passage_entities, kg.passage_entities, pe_rows, passage_row,
                                           new_of_old)
        changed = changed_subgraphs(old_ego, old_kg.adj, old_pe, kg.ego, kg.adj,
                                    spread(take_rows(kg.passage_entities, pe_rows), pe_rows, N), old_ids,
                                    compared_ego=spread(take_rows(kg.ego, ego_rows), ego_rows, E))
        todo = np.flatnonzero(changed)
        nodes = np.unique(np.asarray(take_rows(kg.ego, todo).indices, np.int64))
        features = entity_features(kg.passage_entities, X, entities=nodes)
        values = encode_subgraphs(self.encoder_, kg.ego, kg.adj, features, todo, progress=progress)
        self.subgraph_emb_ = renumber_matrix(self.subgraph_emb_, new_of_old, E, todo, values)
        self.knowledge_graph_ = KnowledgeGraph(
            names=kg.names, adj=kg.adj, df=kg.df, max_query_entities=kg.max_query_entities, _name_ids=kg._name_ids,
            passage_entities=renumber(old_kg.passage_entities, new_of_old, N, E, False, pe_differ,
                                      kg.passage_entities),
            ego=renumber(old_kg.ego, new_of_old, E, E, True, ego_differ, kg.ego))

    def train_gnn(self, steps: int, seed: int | None = None, progress: bool = False,
                  log: Callable[[str], None] | None = None) -> list[float]:
        """(Re)train the Siamese encoder from scratch with the triplet loss and re-encode every
        ego subgraph (SPEC §3); returns the per-step losses."""
        kg = self.knowledge_graph_.read_whole()  # rows held elsewhere: every one read
        seed = self.search_defaults.random_state if seed is None else seed
        features = entity_features(kg.passage_entities, self.components.X)
        torch.manual_seed(seed)  # seeds the initial weights too
        self.encoder_ = SubgraphEncoder(features.shape[1])
        losses = pretrain(self.encoder_, kg.ego, kg.adj, features, steps=steps, seed=seed, progress=progress, log=log)
        self.subgraph_emb_ = encode_all(self.encoder_, kg.ego, kg.adj, features, progress=progress)
        self.changed()
        return losses

    def train_gate(self, Q: np.ndarray, query_texts: Sequence[str], gold_rows: Sequence[Sequence[int]],
                   epochs: int = 200, seed: int = 0, log: Callable[[str], None] | None = None) -> list[float]:
        """Train a new fusion gate on questions with gold passage rows (SPEC §3 step 2, listwise
        loss over the stage-1 candidates, :func:`hopgraph.engine.pipelines.dmar.gate.train_gate`) and use it;
        returns the per-epoch losses."""
        data = self.gate_training_data(Q, query_texts, gold_rows)
        gate = Gate(self.components.X.shape[1])
        losses = train_gate(gate, **data, epochs=epochs, seed=seed, log=log)
        self.gate_ = gate
        self.changed()
        return losses

    def carry_state(self, old: "DMAR") -> None:
        """A gate trained with :meth:`train_gate` survives ``Index.compact()`` (it depends on the
        embedding dimension only)."""
        self.gate_ = old.gate_

    def reset_gate(self) -> None:
        """Back to the untrained gate (equal weights)."""
        self.gate_ = Gate(self.components.X.shape[1])
        self.changed()

    def _save(self, directory: Path) -> None:
        """:meth:`_write_state`, or the name of a folder beside with this state (:meth:`Components.save_state`)."""
        self.components.save_state(directory, self._parts(), self._write_state)

    def _parts(self) -> tuple[KnowledgeGraph, SubgraphEncoder, Any, Gate]:
        """The fitted state: knowledge graph, encoder, subgraph embeddings, gate."""
        return self.knowledge_graph_, self.encoder_, self.subgraph_emb_, self.gate_

    def _write_state(self, directory: Path) -> None:
        """The knowledge graph (:meth:`KnowledgeGraph.save`), the encoder and gate weights and the
        subgraph embeddings, by entity, through the index's graph store (with, over embeddings
        loaded by reference, the rows held since)."""
        graphs = self.components.graphs
        self.knowledge_graph_.save(directory, graphs)
        save_arrays(directory, {**encoder_arrays(self.encoder_), **self.gate_.arrays()})
        stored = stored_matrix(self.subgraph_emb_)
        graphs.save_matrix(directory, "subgraph_emb", self.subgraph_emb_ if stored is None else stored, NODE_ROWS)
        if stored is not None and stored is not self.subgraph_emb_:
            save_held_matrix(directory, "subgraph_emb", self.subgraph_emb_)

    def _snapshot(self) -> tuple[KnowledgeGraph, np.ndarray, dict[str, np.ndarray]]:
        return self.knowledge_graph_, self.subgraph_emb_, {**encoder_arrays(self.encoder_), **self.gate_.arrays()}

    def _save_delta(self, directory: Path, since: tuple[KnowledgeGraph, np.ndarray, dict[str, np.ndarray]],
                    start: int, stop: int) -> str | None:
        """The subgraph embeddings of the entities that are new or were encoded again since ``since``,
        by entity name (``emb_names_*``, ``emb_rows``), and the encoder and gate weights when they
        changed; the knowledge graph is arithmetic on the extraction and rebuilt when the index is
        opened. None (stored whole) with an ``edge_list``. A pipeline holding the same state and
        snapshot as one whose delta this segment already holds names that folder
        (:meth:`Components.save_state`)."""
        if self.fit_params.edge_list is not None:
            return None
        parts = (*self._parts(), since[0], since[1])
        self.components.save_state(directory, parts, lambda d: save_arrays(d, delta_arrays(self._parts(), since)))
        return "delta"

    def _load_deltas(self, parts: list[tuple[Path, int]]) -> None:
        """The state after the deltas ``parts``, read once for the pipelines that loaded the same
        state and whose deltas are the same folders (:meth:`Components.shared_update`)."""
        sources = [(state_source(d), n) for d, n in parts]
        old = self._parts()
        self.knowledge_graph_, self.encoder_, self.subgraph_emb_, self.gate_ = self.components.shared_update(
            ("deltas", tuple((str(d), n) for d, n in sources)), old, lambda: read_deltas(sources, old, self._build_kg))

    def _load(self, directory: Path) -> None:
        """:meth:`_read_state` of ``directory`` or of the folder it names, once (:meth:`Components.stored_state`)."""
        self.knowledge_graph_, self.encoder_, self.subgraph_emb_, self.gate_ = self.components.stored_state(
            directory, self._stored_rows, self._read_state)

    def _read_state(self, directory: Path) -> tuple[KnowledgeGraph, SubgraphEncoder, Any, Gate]:
        """Open the saved KG, GNN, gate and subgraph embeddings, checked against each other and X."""
        weights = sorted(p.stem for p in directory.glob("*.npy") if p.stem.startswith(("gnn.", "gate.")))
        arrays = load_arrays(directory, weights)
        X = self.components.X
        self.knowledge_graph_ = KnowledgeGraph.load(directory, self._stored_rows, str(directory),
                                                    self.components.graphs)
        self.encoder_ = encoder_from_arrays(arrays)
        self.gate_ = Gate.from_arrays(arrays)
        d = X.shape[1]
        d_in, d_out = self.encoder_.layers[0].self_lin.in_features, self.encoder_.layers[-1].self_lin.out_features
        if d_in != d or self.gate_.mlp[0].in_features != 2 * d:
            raise IndexFormatError(f"{directory}: GNN input {d_in} / gate input {self.gate_.mlp[0].in_features} "
                                   f"do not fit embeddings of dimension {d}")
        emb, E = self.components.graphs.load_matrix(directory, "subgraph_emb"), self.knowledge_graph_.n_entities
        if saved_by_reference(directory, "subgraph_emb."):  # rows held elsewhere (checksummed there): shape and type
            base_ids = load_entity_ids(directory, E, str(directory))
            n_base = E if base_ids is None else len(base_ids)
            if emb.shape != (n_base, d_out) or emb.dtype != np.float32:
                raise IndexFormatError(f"{directory} subgraph_emb: {emb.dtype} {list(emb.shape)} stored by reference, "
                                       f"expected float32 [{n_base}, {d_out}]")
            self.subgraph_emb_ = emb if base_ids is None else \
                load_held_matrix(directory, "subgraph_emb", emb, base_ids, E, str(directory))
        else:
            self.subgraph_emb_ = check_unit_rows(emb, str(directory / "subgraph_emb.npy"),
                                                 rows=self.knowledge_graph_.n_entities, dim=d_out, allow_zero=True)
        return self._parts()

    # ------------------------------------------------------------------ search
    def _search_batch(self, batch: QueryBatch, k: int, params: DMARSearch, timer: StageTimer
                      ) -> tuple[np.ndarray, np.ndarray]:
        """SPEC §3 steps 1–6 for one batch: on the device where it can run there (:mod:`.device_search`)."""
        on_device = device_search(self, batch, k, params, timer)
        if on_device is not None:
            return on_device
        with timer("recall"):
            cand, cand_t = self._recall(batch, params, on_device=self._resident(batch, params) is not None)
        with timer("link"):
            linked = self._link(batch.texts, params)
        fused1, parts1 = self._dual_path(batch, cand, linked, params, timer, cand_tensor=cand_t)
        with timer("second_stage"):
            anchors = self._anchors(cand, fused1, params)
            Q2 = self._reformulate(batch.Q, batch.texts, anchors, params)
            ids2, _ = batch.dense_topk_of(Q2, max(params.second_stage_depth, k))  # k hits whenever k pass
        with timer("rerank"):  # the dual-path stages nested here count in their own stages
            if params.union_depth > 0:
                cols1, _ = topk_rows(np.where(cand >= 0, fused1, -np.inf), min(params.union_depth, cand.shape[1]))
                keep1 = np.where(cols1 >= 0, np.take_along_axis(cand, np.maximum(cols1, 0), 1), PAD_ID)
                final = dedupe_rows(np.concatenate([keep1, ids2], 1))
                _, parts_new = self._dual_path(batch, final[:, keep1.shape[1]:], linked, params, timer, only_raw=True)
                raw = {key: np.concatenate([np.take_along_axis(parts1[key], np.maximum(cols1, 0), 1),
                                            parts_new[key]], 1) for key in parts1}
                fused = self._fuse(batch.Q, final, raw, linked, params)
            else:
                final = ids2
                fused, _ = self._dual_path(batch, final, linked, params, timer)
            fused = np.where(final >= 0, fused, -np.inf)
            cols, scores = topk_rows(fused, k)
            ids = np.where(cols >= 0, np.take_along_axis(final, np.maximum(cols, 0), 1), PAD_ID)
        return ids, np.where(ids >= 0, scores, PAD_SCORE).astype(np.float32)

    def gate_training_data(self, Q: np.ndarray, query_texts: Sequence[str], gold_rows: Sequence[Sequence[int]],
                           params: DMARSearch | None = None) -> dict[str, np.ndarray]:
        """Stage-1 inputs of :func:`hopgraph.engine.pipelines.dmar.gate.train_gate` for questions with gold rows:
        ``q, d, z_sem, z_struct, gold, valid, offset`` (offset = the lexical term, fixed)."""
        params = params or self.search_defaults
        Q, texts = self._check_queries(Q, 1, query_texts)
        batch = self.components.batch(Q, texts)
        cand, _ = self._recall(batch, params)
        linked = self._link(batch.texts, params)
        _, raw = self._dual_path(batch, cand, linked, params, StageTimer(), only_raw=True)
        valid = cand >= 0
        gold = np.zeros(cand.shape, bool)
        for b, rows in enumerate(gold_rows):
            gold[b] = np.isin(cand[b], np.asarray(rows)) & valid[b]
        offset = params.bm25_weight * zscore(raw["lex"], valid) if params.bm25_weight else \
            np.zeros(cand.shape, np.float32)
        return {"q": Q, "d": self.components.dense.rows(np.where(valid, cand, 0)), "z_sem": zscore(raw["sem"], valid),
                "z_struct": zscore(raw["struct"], valid & raw["struct_ok"]) * self._query_ok(linked, params), "gold": gold,
                "valid": valid, "offset": offset}

    def _query_ok(self, linked: list[np.ndarray], params: DMARSearch) -> np.ndarray:
        """[B, 1] bool: the query links enough entities for the structural path (adaptive fusion)."""
        enough = np.fromiter((len(g) >= params.min_query_entities for g in linked), bool, len(linked))
        return enough[:, None] & bool(params.structural)  # bool dtype even for an empty batch

    def _link(self, texts: Sequence[str], params: DMARSearch) -> list[np.ndarray]:
        """Entity ids linked in each query (none when the structural path is off)."""
        if not params.structural:
            return [np.zeros(0, np.int32)] * len(texts)
        return self.knowledge_graph_.link_queries(texts, params.query_linking)

    def _recall(self, batch: QueryBatch, params: DMARSearch, on_device: bool = False
                ) -> tuple[np.ndarray, torch.Tensor | None]:
        """Step 1: the ``candidate_depth`` candidates (BM25, or the dense + BM25 RRF), and, when
        ``on_device``, the same ids as a tensor on the batch's device: taken (and fused) from the
        batch's top lists there, for the structural path there (:meth:`_resident`); the ids come to
        the host once, for the stages that run there (semantic and lexical scores, the gate, the
        anchors, the reformulation). Else None."""
        if on_device:
            if params.candidate_source == "hybrid":
                ids_t, _ = hybrid_ranking_tensors(batch, params.candidate_depth, depth=params.candidate_depth)
            else:
                ids_t, _ = batch.bm25_topk_tensors(params.candidate_depth)
            return as_numpy(ids_t), ids_t
        if params.candidate_source == "hybrid":
            ids, _ = hybrid_ranking(batch, params.candidate_depth, depth=params.candidate_depth)
        else:
            ids, _ = batch.bm25_topk(params.candidate_depth)
        return ids, None

    def _resident(self, batch: QueryBatch, params: DMARSearch) -> Any:
        """The structural path on the device (:class:`~.device_structural.ResidentStructure`) where
        the batch is searched there and the graph store holds the knowledge graph and the subgraph
        embeddings there, else None."""
        if batch.device is None or not params.structural or not self.knowledge_graph_.n_entities:
            return None
        return self._held.resident(self.components.graphs, self.knowledge_graph_, self.subgraph_emb_, self.name)

    def _dual_path(self, batch: QueryBatch, cand: np.ndarray, linked: list[np.ndarray], params: DMARSearch,
                   timer: StageTimer, only_raw: bool = False, cand_tensor: torch.Tensor | None = None
                   ) -> tuple[np.ndarray | None, dict[str, np.ndarray]]:
        """Raw semantic / structural / lexical scores of candidates ``cand`` [B, C]; fused unless
        ``only_raw``. ``cand_tensor``: the same ids on the device, read there by the structural path."""
        with timer("fusion"):
            valid = cand >= 0
            Xc = self.components.dense.rows(np.where(valid, cand, 0))
            sem = np.einsum("bcd,bd->bc", Xc, batch.Q)
            raw = {"sem": sem, "struct": np.zeros_like(sem), "struct_ok": np.zeros_like(valid),
                   "lex": batch.bm25_of(cand) if params.bm25_weight else np.zeros_like(sem)}
        if params.structural and self.knowledge_graph_.n_entities:
            shapley = (params.shapley_lambda, params.shapley_samples, params.random_state, params.shapley_mode,
                       self.device, timer)
            resident = self._held.resident(self.components.graphs, self.knowledge_graph_, self.subgraph_emb_, self.name)
            if resident is not None:  # the graph store holds the KG and the embeddings on the device: cut there
                raw["struct"], raw["struct_ok"] = resident.scores(cand, linked, *shapley, cand_tensor=cand_tensor)
            else:
                raw["struct"], raw["struct_ok"] = structural_scores(self.knowledge_graph_, self.subgraph_emb_, cand,
                                                                    linked, *shapley)
        if only_raw:
            return None, raw
        with timer("fusion"):
            fused = self._fuse(batch.Q, cand, raw, linked, params)
        return fused, raw

    def _fuse(self, Q: np.ndarray, cand: np.ndarray, raw: dict[str, np.ndarray], linked: list[np.ndarray],
              params: DMARSearch) -> np.ndarray:
        valid = cand >= 0
        z_sem = zscore(raw["sem"], valid)
        z_struct = zscore(raw["struct"], valid & raw["struct_ok"])
        if params.gate:
            w = self.gate_.weights(Q, self.components.dense.rows(np.where(valid, cand, 0)))
            alpha, beta = w[..., 0], w[..., 1]
        else:
            alpha = beta = np.full(cand.shape, 0.5, np.float32)
        # structural path off → only the semantic path counts
        fused = np.where(self._query_ok(linked, params), alpha * z_sem + beta * z_struct, z_sem)
        if params.bm25_weight:
            fused = fused + params.bm25_weight * zscore(raw["lex"], valid)
        return fused.astype(np.float32)

    def _anchors(self, cand: np.ndarray, fused: np.ndarray, params: DMARSearch) -> np.ndarray:
        """Step 3: the top ``anchors`` fused candidates, or an MMR selection when ``mmr > 0``."""
        fused = np.where(cand >= 0, fused, -np.inf)
        m = min(params.anchors, cand.shape[1])
        if params.mmr <= 0 or m == 1:
            cols, _ = topk_rows(fused, m)
        else:
            B, C = cand.shape
            Xc = self.components.dense.rows(np.maximum(cand, 0))
            cols = np.full((B, m), -1, np.int64)
            penalty = np.zeros((B, C), np.float32)
            score = fused.copy()
            for j in range(m):  # m greedy steps, vectorised over the batch and candidates
                pick = np.argmax(score - params.mmr * penalty, axis=1)
                ok = np.isfinite(score[np.arange(B), pick])
                cols[:, j] = np.where(ok, pick, -1)
                sim = np.einsum("bcd,bd->bc", Xc, Xc[np.arange(B), pick])
                penalty = np.maximum(penalty, sim)
                score[np.arange(B), pick] = -np.inf
        return np.where(cols >= 0, np.take_along_axis(cand, np.maximum(cols, 0), 1), PAD_ID)

    def _reformulate(self, Q: np.ndarray, texts: Sequence[str], anchors: np.ndarray, params: DMARSearch
                     ) -> np.ndarray:
        """Step 4: Q′, the rule's (the query moved toward the anchors) or the generator's text embedded."""
        if not params.reformulate:
            return Q
        if getattr(self, "_generator_key", self) is not params.generator:
            self._generator_fn, self._generator_key = resolve_generator(params.generator), params.generator
        gen = self._generator_fn
        if gen is None:
            return rule_vectors(Q, self.components.dense.rows, anchors, params.shift)
        if self.components.embedder is None:
            raise InputError("a reformulation generator needs the index's embedder to embed Q′")
        new_texts = generate_texts(gen, texts, anchor_snippets(self.components.corpus, anchors))
        return encode_queries(self.components.embedder, new_texts, progress=False)

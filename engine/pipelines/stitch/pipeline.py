"""STITCH-RAG (SPEC §2): topic hypergraph, spatial and temporal influence, localised PPR.

Fit (SPEC §2 "Index"): the shared zero-token extraction (:mod:`hopgraph.engine.components.extraction`,
shared with ``ppr_binary`` and ``dmar``; or an ``extractions`` file), the embedding of every distinct
topic and description text (``text_pooling``: ``"late"``, pooled from the passage's own forward pass,
:mod:`hopgraph.engine.components.late_pooling`; ``"separate"``, each text embedded on its own), and the
hypergraph with its chunk graph (:mod:`.hypergraph`).

Search, per batch (the heavy steps are kernels, dispatched by :func:`hopgraph.kernels.call`):

1. Activation ``A(v) = sim(q, ψ(v))`` if ``≥ δ_q`` else 0, over the states of the ``description_depth``
   description texts nearest q (a :class:`~hopgraph.engine.components.dense.DenseIndex` over the text
   embeddings: exact, or IVF rescored exactly at scale); ``S(e) = max(0, sim(q, text(e)))``.
   ``delta_mode="relative"`` (default): ``δ_q = delta · max_v sim(q, ψ(v))``, so every question
   activates its best-matching states whatever the embedder's scale; ``"absolute"``: δ_q = ``delta``.
2. Spatial channel: ``hyperedge_max_propagate`` (``spatial``).
3. Temporal channel: ``group_decay_propagate`` with ``w(v) = S(e_v) · max(0, sim(q, c_v))`` (``temporal``).
4. ``a(v)`` = mean of A and the enabled channels.
5. Chunk prior ``I(c) = Σ_{v∈c} a(v) ln(1 + N_v)``, ``p = I / ΣI`` (uniform if ΣI = 0), mixed with the
   relevance on the ``n_seeds`` most relevant chunks: ``p ← (1 − prior_mix) p + prior_mix · r``.
6. The walk and 7. the ranking (:mod:`.walk`), then the title bridge.

The activation, propagation and prior run on the sub-hypergraph the activated states reach
(:func:`~hopgraph.engine.pipelines.stitch.local_graph.local_hypergraph`): nothing of size [B, n_states].

``STITCH(published=True)``: absolute δ = 0.5, ``n_seeds`` 8, no prior mixing, dense relevance, no
bridge. Live updates keep the old text embeddings and embed only the new texts. The measurements
behind the defaults: ``docs/decisions/stitch-*.md``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from .... import kernels
from ....kernels.tensors import as_numpy, as_tensor
from ...components.corpus import Corpus
from ...components.dense import DenseIndex
from ...components.device_dense import DeviceDenseSearch
from ...components.exact_search import gather_rows
from ...components.extraction import Extraction
from ...components.late_pooling import LateTexts, late_texts
from ...components.query_batch import QueryBatch
from ...graphs.remote import read_by_rows
from ...graphs.store import device_arrays
from ...errors import IndexFormatError
from ...params import choice, flag, integer, real
from ...sparse import csr_from_keys
from ..base import Needs
from .hypergraph import TopicHypergraph, embed_texts, extend_text_embeddings
from .row_layout import TEXT_STATES, ReferencedTextIndex
from .activation import activated, activated_tensors
from .device_influence import held_arrays, influence_tensors
from .device_walk import DeviceRows, normalised
from .local_graph import local_hypergraph
from .local_rows import LocalRows
from .walk import ChunkGraphFit, ChunkGraphWalk, WalkSearch

DELTA_MODES = ("relative", "absolute")
#: how topic/description texts are embedded (:mod:`hopgraph.engine.components.late_pooling`)
TEXT_POOLINGS = ("late", "separate")
#: folder (and ``.json`` entry) of the saved text IVF index in a STITCH pipeline directory
TEXT_IVF = "text-ivf"
#: bits a dimension of the text IVF's codes (candidates are rescored exactly)
TEXT_CODE_BITS = 4
#: description texts matched per question before the activation threshold (step 1)
DESCRIPTION_DEPTH = 128


@dataclass(frozen=True)
class STITCHFit(ChunkGraphFit):
    """STITCH's fit parameters: the chunk graph's, and how the texts are embedded."""

    pipeline = "stitch"
    #: indexes saved before late chunking embedded their texts on their own
    saved_defaults = {"text_pooling": "separate"}
    text_pooling: str = choice("late", TEXT_POOLINGS)


@dataclass(frozen=True)
class STITCHSearch(WalkSearch):
    """STITCH's search parameters: the walk's, and the influence prior's (steps 1–5)."""

    pipeline = "stitch"
    renamed = {**WalkSearch.renamed, "match_k": "description_depth"}
    n_seeds: int = integer(2, low=1, serving_bound=64)
    relevance: str = choice("hybrid", ("dense", "hybrid"))
    prior_mix: float = real(0.5, low=0.0, high=1.0)
    delta: float = real(0.8, low=-1.0, high=1.0)
    delta_mode: str = choice("relative", DELTA_MODES)
    spatial: bool = flag(True)
    temporal: bool = flag(True)
    description_depth: int = integer(DESCRIPTION_DEPTH, low=1, serving_bound=1_024)
    bridge: float = real(0.4, low=0.0)

    def check(self) -> None:
        """InputError when ``delta`` is outside (0, 1] in ``relative`` mode."""
        if self.delta_mode == "relative" and not 0.0 < self.delta <= 1.0:
            raise self.invalid("delta", "must lie in (0, 1] when delta_mode is 'relative'")

    @classmethod
    def published_values(cls) -> dict[str, Any]:
        """SPEC §2 as published: absolute δ = 0.5, k = 8, the pure influence prior, dense relevance."""
        return {"delta_mode": "absolute", "delta": 0.5, "prior_mix": 0.0, "relevance": "dense", "n_seeds": 8,
                "bridge": 0.0}


class STITCH(ChunkGraphWalk[STITCHFit, STITCHSearch]):
    """STITCH-RAG retrieval (module docstring): ``STITCH().fit(X, corpus, embedder)``."""

    name = "stitch"
    FitParams = STITCHFit
    SearchParams = STITCHSearch
    needs = Needs(corpus=True, query_texts=True, embedder=True)
    ablations = {
        "published": STITCHSearch.published_values(),
        "spatial=False": {"spatial": False},
        "temporal=False": {"temporal": False},
        "ppr=False": {"ppr": False},
        "delta_mode=absolute": {"delta_mode": "absolute", "delta": 0.5},
        "prior_mix=0": {"prior_mix": 0.0},
        "relevance=dense": {"relevance": "dense"},
        "localise=False": {"localise": False},
        "balance=0": {"balance": 0.0},
        "no_graph": {"balance": 1.0, "bridge": 0.0},
        "no_bridge": {"bridge": 0.0},
        "text_pooling=separate": {"text_pooling": "separate"},
        "n_seeds=8": {"n_seeds": 8},
        "title_entities=False": {"title_entities": False},
        "numbers=False": {"numbers": False},
    }

    def __init__(self, params: dict[str, Any] | None = None, /, **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self._text_index: DenseIndex | None = None

    # ------------------------------------------------------------------ fit
    def _text_embeddings(self, ex: Extraction, progress: bool, old: np.ndarray | None = None,
                         first_row: int = 0) -> np.ndarray:
        comp = self.components
        corpus = comp.require_corpus(self.name)
        if old is None:
            return embed_texts(ex.texts, corpus, comp.X, comp.embedder, progress=progress,
                               late=self._late(ex, corpus, progress), work_dir=comp.work_dir)
        return extend_text_embeddings(old, ex.texts, corpus, comp.X, comp.embedder, progress,
                                      late=self._late(ex, corpus, progress, first_row), first_row=first_row)

    @classmethod
    def pooled_texts(cls, fit_params: dict[str, Any]) -> tuple[bool, bool] | None:
        """The extraction options whose texts a fit embeds by late chunking
        (``text_pooling="late"``), else None."""
        p = cls.saved_fit_params(fit_params) if fit_params else cls.FitParams()
        return None if p.text_pooling != "late" or p.extractions else (bool(p.title_entities), bool(p.numbers))

    def _late(self, ex: Extraction, corpus: Corpus, progress: bool, first_row: int = 0
              ) -> Callable[[int], LateTexts | None] | None:
        """The late-chunked embeddings of ``ex.texts[first:]`` as a function of ``first``
        (``text_pooling="late"``; those ``Index.build`` or ``Index.add`` pooled with the passages
        when it did), else None (texts embedded on their own). Those texts are first used by the
        passages from ``first_row`` on: the earlier passages are not read."""
        if self.fit_params.text_pooling != "late":
            return None
        key = None if self.fit_params.extractions else (bool(self.fit_params.title_entities), bool(self.fit_params.numbers))

        def provide(first: int = 0) -> LateTexts | None:
            made = self.components.take_late_texts(key, first) if key is not None else None
            return made if made is not None else \
                late_texts(ex, corpus.embedding_texts_from(first_row), self.components.embedder, first, progress)
        return provide

    def _reset_caches(self) -> None:
        super()._reset_caches()
        self._text_index = None

    def _save(self, directory: Path) -> None:
        """The hypergraph arrays, and the text index's IVF when it searches approximately (built now
        if not yet, so a loaded index answers its first question without training one)."""
        super()._save(directory)
        if len(self.hypergraph_.text_emb) and self.text_index.method == "ann":
            entry = self.text_index.save_ivf(directory / TEXT_IVF)
            (directory / f"{TEXT_IVF}.json").write_text(json.dumps(entry))

    def _load(self, directory: Path) -> None:
        super()._load(directory)
        entry_file = directory / f"{TEXT_IVF}.json"
        if entry_file.is_file():
            try:
                entry = json.loads(entry_file.read_text())
            except (OSError, ValueError) as e:
                raise IndexFormatError(f"{entry_file}: {e}") from None
            self._text_index = DenseIndex.load(directory / TEXT_IVF, entry, self.hypergraph_.text_emb,
                                               code_bits=TEXT_CODE_BITS)

    @classmethod
    def cost_reach(cls, params: STITCHSearch) -> int:
        """:meth:`ChunkGraphWalk.cost_reach`: the seeds and the ``description_depth`` chunks the
        description match adds."""
        return params.n_seeds + params.description_depth

    # ------------------------------------------------------------------ search
    def prior_rows(self, batch: QueryBatch, rel: LocalRows, params: STITCHSearch
                   ) -> tuple[LocalRows | DeviceRows, np.ndarray | torch.Tensor]:
        """The chunk prior (steps 1–5) on its support, and the rows whose Σ I is 0 (uniform); kept
        on the device (:class:`~.device_walk.DeviceRows`, the rows a bool tensor there) where the
        graph store holds the influence stage's arrays and the walk's there
        (:meth:`~.walk.ChunkGraphWalk.resident_prior`)."""
        I = self._influence(batch, params, resident=self.resident_prior())
        if isinstance(I, DeviceRows):
            return normalised(I)
        s = I.values.sum(1, keepdims=True)
        uniform = s[:, 0] <= 0
        return I.with_values(np.divide(I.values, s, out=np.zeros_like(I.values), where=s > 0)), uniform

    def resident_prior(self) -> bool:
        """:meth:`~.walk.ChunkGraphWalk.resident_prior`: and the influence stage's arrays held there."""
        return self._held_on_device() is not None and super().resident_prior()

    def influence(self, batch: QueryBatch, params: STITCHSearch | None = None) -> LocalRows:
        """``I(c) = Σ_{v∈c} a(v) ln(1 + N_v)`` (steps 1–5) on the chunks of the local hypergraph.

        Step 1 without ``Q @ text_embᵀ``: the ``description_depth`` description texts nearest each question
        (the text index: exact below the dense index's ANN threshold, IVF + exact rescoring above),
        of which those at or above δ_q activate their states; the spatial and temporal channels
        run on the sub-hypergraph those states reach (:func:`local_hypergraph`), the topic and
        chunk similarities they use are computed for its edges and nodes only."""
        I = self._influence(batch, params or self.search_defaults, resident=False)
        return I.host() if isinstance(I, DeviceRows) else I

    def _influence(self, batch: QueryBatch, params: STITCHSearch, resident: bool) -> LocalRows | DeviceRows:
        """:meth:`influence`, left on the device where it ran there when ``resident``."""
        H, dev, Q = self.hypergraph_, torch.device(self.device), batch.Q
        B, n = len(Q), self.hypergraph_.n_chunks
        if H.n_nodes == 0 or B == 0:
            return LocalRows.empty(B, n)
        held = self._held_on_device()
        act_q, act_v, act_val = self._activation(batch, params, held is not None)
        if not len(act_v):
            return LocalRows.empty(B, n)
        if held is not None:  # the graph store holds the hypergraph on the device: cut and scored there
            I = influence_tensors(held, H.n_nodes, batch.question_tensor(), act_q, act_v, act_val, params.spatial,
                                  params.temporal, self.device, n)
            return I if resident else I.host()
        L = local_hypergraph(H, act_v)
        A = np.zeros((B, len(L.nodes)), np.float32)
        A[act_q, np.searchsorted(L.nodes, act_v)] = act_val
        A = as_tensor(A, device=dev, name="activation")
        S = as_tensor(np.maximum(Q @ self._text_rows(np.asarray(H.edge_text[L.edges])).T, 0.0), device=dev,
                      name="topic similarity")
        as_t = lambda a, dt=torch.int64: as_tensor(a, dt, dev, "local hypergraph")  # noqa: E731
        channels = [A]
        if params.spatial:
            channels.append(kernels.call("hyperedge_max_propagate", A, S, as_t(L.edge_indptr),
                                         as_t(L.edge_nodes, torch.int32), as_t(L.node_indptr),
                                         as_t(L.node_incidence, torch.int32), device=self.device))
        node_chunk = np.asarray(H.node_chunk[L.nodes], np.int64)
        chunks, chunk_of = np.unique(node_chunk, return_inverse=True)
        if params.temporal:
            chunk_sim = np.maximum(Q @ np.asarray(self.components.dense.rows(chunks), np.float32).T, 0.0)
            best_edge = torch.zeros_like(A).scatter_reduce(
                1, as_t(L.inc_node).expand(B, -1), S[:, as_t(L.inc_edge)], "amax")
            w = best_edge * as_tensor(chunk_sim[:, chunk_of], device=dev, name="chunk similarity")
            channels.append(kernels.call("group_decay_propagate", A, w, as_t(L.node_group),
                                         as_t(node_chunk), as_t(L.group_indptr),
                                         as_t(L.group_nodes, torch.int32), as_t(L.alpha, torch.float32),
                                         device=self.device))
        a = torch.stack(channels).mean(0)
        log_group = np.log1p(np.asarray(H.group_size[np.asarray(H.node_group[L.nodes])])).astype(np.float32)
        I = torch.zeros((B, len(chunks)), dtype=torch.float64, device=dev)
        I.index_add_(1, as_t(chunk_of), (a * as_t(log_group, torch.float32)).to(torch.float64))
        return LocalRows(chunks.astype(np.int64), as_numpy(I), n)

    def _activation(self, batch: QueryBatch, params: STITCHSearch, on_device: bool
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | tuple[torch.Tensor, ...]:
        """Step 1's activated ``(row, state, A)`` triples (:mod:`.activation`): made on the device and
        left there when ``on_device`` (the influence stage runs there) and the index's graph store holds
        the text embeddings and the text → states CSR there (the questions go in, nothing comes back);
        else on the host, from the description lists (:meth:`_description_topk`)."""
        t = self._index_arrays()
        depth = min(params.description_depth, t["n_node_texts"])
        held = self._held_activation(batch, t) if on_device else None
        if held is not None:
            ids, sims = held["search"].topk_tensors(batch.question_tensor(), depth)
            return activated_tensors(ids, sims, held["text_indptr"], held["text_nodes"], params.delta,
                                     params.delta_mode)
        ids, sims = self._description_topk(batch, depth, t)
        return activated(ids, sims, t["text_indptr"], t["text_nodes"], params.delta, params.delta_mode)

    def _held_activation(self, batch: QueryBatch, t: dict[str, Any]) -> dict[str, Any] | None:
        """The description search over the held text embeddings and the text → states CSR as tensors
        where the index's graph store holds them all on the device (each copied once; placed together:
        :meth:`~hopgraph.engine.graphs.device_store.DeviceStore.place_together`), else None."""
        graphs = self.components.graphs
        if batch.device is None or not hasattr(graphs, "place_together"):
            return None
        if "held_texts" not in self._cache:
            self._cache["held_texts"] = [graphs.hold(t[key], f"{self.name} {key}")
                                         for key in ("text_indptr", "text_nodes")]
        got = graphs.place_together(lambda: [
            DeviceDenseSearch.held(graphs, self.hypergraph_.text_emb, f"{self.name} text_emb", t["node_text_mask"]),
            *(device_arrays(held) for held in self._cache["held_texts"])])
        return None if got is None else dict(zip(("search", "text_indptr", "text_nodes"), got))

    def _description_topk(self, batch: QueryBatch, depth: int, t: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        """The ``depth`` description texts nearest each question (ids, scores): searched exactly on the
        device where the index's graph store holds the text embeddings there
        (:class:`~hopgraph.engine.components.device_dense.DeviceDenseSearch`; the questions go in,
        the lists come back), else by the text index."""
        held = DeviceDenseSearch.held(self.components.graphs, self.hypergraph_.text_emb, f"{self.name} text_emb",
                                      t["node_text_mask"]) if batch.device is not None else None
        if held is None:
            return t["text_index"].topk(batch.Q, depth, t["node_text_mask"])
        ids, sims = held.topk_tensors(batch.question_tensor(), depth)
        return as_numpy(ids), as_numpy(sims)

    def _held_on_device(self) -> dict[str, Any] | None:
        """The arrays the influence stage reads as tensors where the index's graph store holds them
        on the device (:func:`~.device_influence.held_arrays`, each copied once), else None (one of
        them is not held there: the stage runs on the host)."""
        if "held" not in self._cache:
            self._cache["held"] = held_arrays(self.components.graphs, self.hypergraph_, self.components.X, self.name)
        tensors = {key: device_arrays(value) for key, value in self._cache["held"].items()}
        return None if any(t is None for t in tensors.values()) else tensors

    def _text_rows(self, rows: np.ndarray) -> np.ndarray:
        """Text embeddings ``rows`` as float32 (``H.text_emb`` may be float16 or memory-mapped)."""
        return np.asarray(gather_rows(self.hypergraph_.text_emb, rows), np.float32)

    @property
    def text_index(self) -> "DenseIndex | ReferencedTextIndex":
        """Cosine top-k over ``H.text_emb`` (step 1): exact, or IVF with exact rescoring from the
        dense index's ANN threshold up (:data:`TEXT_CODE_BITS`-bit codes); loaded with the index when
        saved, else built on first use. Over text embeddings read by rows (loaded by reference):
        exact, where their rows are held (:class:`~.row_layout.ReferencedTextIndex`); above the ANN
        threshold, the IVF index held whole, its candidates' rows gathered to rescore them."""
        if self._text_index is None:
            index = DenseIndex(self.hypergraph_.text_emb, code_bits=TEXT_CODE_BITS)
            exact_where_held = read_by_rows(self.hypergraph_.text_emb) and index.method == "exact"
            self._text_index = ReferencedTextIndex(self.hypergraph_) if exact_where_held else index
        return self._text_index

    def _index_arrays(self) -> dict[str, Any]:
        """Query-side views of the hypergraph, built once: the text index over ``H.text_emb`` (a
        :class:`~hopgraph.engine.components.dense.DenseIndex`, searched under the mask of the texts
        that are some state's description), text → states CSR."""
        if "arrays" not in self._cache:
            H = self.hypergraph_
            mask = H.node_text_mask()
            if H._row_graphs is not None:  # loaded by reference: the row pointer whole, the rows read by rows
                texts = H._row_graphs[TEXT_STATES]
                text_indptr, text_nodes = texts.indptr, texts.indices
            else:
                text_indptr, text_nodes = csr_from_keys(np.asarray(H.node_text, np.int64), len(H.text_emb))
            self._cache["arrays"] = {
                "text_index": self.text_index, "node_text_mask": None if mask.all() else mask,
                "n_node_texts": max(int(mask.sum()), 1),
                "text_indptr": text_indptr, "text_nodes": text_nodes,
            }
        return self._cache["arrays"]

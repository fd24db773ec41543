"""STITCH-RAG (SPEC §2): topic hypergraph, spatial/temporal influence, localised PPR.

Index (``fit``, SPEC §2 "Index"): the shared zero-token extraction
(:mod:`hopgraph.engine.components.extraction`, one per index and option pair, shared with
``ppr_binary`` and ``dmar``; or an ``extractions=`` JSON-lines file), the embeddings of
every distinct topic and description text, and the hypergraph arrays with the φ-induced
chunk graph (:mod:`hopgraph.engine.pipelines.stitch.hypergraph`). BM25 (hybrid relevance) is the shared
component. **Text embeddings** (``text_pooling``, fit-time): ``"late"`` (default, issue 14) pools
each topic/description from the last hidden states of its passage's own forward pass (late
chunking, :mod:`hopgraph.engine.pipelines.stitch.late_pooling`; in ``Index.build`` the same pass that embeds the
passages, so no token runs through the model twice and the STITCH build costs about what the dense
build does); ``"separate"`` embeds each text on its own (ψ(v) and text(e) as SPEC §2 writes them;
1.7× the passages' tokens on the shared sets). Recall@5 of the two is within noise on both shared
sets (README, *Defaults*). Embedders that give no token states (hashing, API, callables) embed
texts on their own either way.

Query (``search``), batched; every step is array code and the three heavy steps are
kernels dispatched through :func:`hopgraph.kernels.call`:

1. Activation ``A(v) = sim(q, ψ(v))`` if ``≥ δ_q`` else 0, for the states of the ``match_k``
   description texts nearest q (see "Sparse query"); ``S(e) = max(0, sim(q, text(e)))``
   (SPEC §2 query step 1). **δ** (``delta_mode``): the paper's absolute δ = 0.5 is
   calibrated for a much stronger embedder; the scale of a question's description
   similarities depends on the embedder and the corpus, so with a small embedder an
   absolute δ leaves some questions with no activated state and floods others. hopgraph
   therefore uses a **relative** threshold by default, ``δ_q = delta · max_v sim(q, ψ(v))``
   with ``delta = 0.8``: every question activates its best-matching states, whatever the
   embedder's scale. ``delta_mode="absolute"`` gives the paper's rule.
2. Spatial channel (step 2): ``hyperedge_max_propagate`` (a_space).
3. Temporal channel (step 3): ``group_decay_propagate`` with
   ``w(v) = S(e_v) · max(0, sim(q, c_v))`` (a_time).
4. ``a(v)`` = mean of A and the enabled channels (step 4; ``spatial`` / ``temporal``).
5. Chunk prior ``I(c) = Σ_{v∈c} a(v) ln(1 + N_v)``, ``p = I / ΣI`` (uniform if ΣI = 0)
   (step 5). **Prior mixing** (``prior_mix`` = μ = 0.5, issue 6): ``p ← (1 − μ) p + μ r``
   where ``r`` is the relevance distribution on the ``seed_k`` most relevant chunks
   (``relevance``: cosine ``"dense"`` or ``"hybrid"`` = dense+BM25 reciprocal-rank
   fusion, the default), so the walk always starts from the passages the question is
   about and PPR adds the passages linked to them by shared names (the second hop).
   ``seed_k`` plays the role of SPEC's k (not called ``k`` because
   ``Index.search(k=...)`` is the result count); its default is 2, not SPEC's 8 — one
   value for every corpus.
6. ``batched_ppr`` (step 6) on the chunk graph with damping ``d`` = 0.85, to tolerance
   ``tol``; ``localise=True`` restricts each query's walk to its activated region: the
   support of p and its ``region_hops``-hop neighbourhood (default 1); mass leaving the region
   is dropped. ``region_hops=0`` (the support alone: a median of 78 chunks on musique, where the
   one-hop region covers a median 72 % of the small corpus) was measured for issue 14 and lost
   Recall@5 on both shared sets (README, "Scale"), so the default stays one hop: it is local at
   scale anyway (the support's neighbours, at most ``max_group_chunks`` per name group). The
   support is numerical: the chunks with ``p ≥ SUPPORT_RTOL · max p`` (1e-6). Entries
   below it are float noise (a similarity that is 0 in exact arithmetic comes out as ±1e-8
   depending on how BLAS blocks the batch, and the temporal channel turns it into a 1e-12
   prior); letting them decide the region made a question's results depend on its batch
   (issue 11).
7. Ranking (step 7): ``score = (1 − λ) π/max π + λ rel/max rel`` with ``λ = balance`` = 0.3
   (SPEC: "a balance λ = 0.3 with dense similarity is allowed") and rel the ``relevance``
   score (cosine clipped at 0, or the hybrid RRF score); ``fusion="rrf"`` fuses the two
   rankings by reciprocal rank instead.

Title bridge (issue 15, after the ranking; not in the SPEC, a query-time addition in the spirit of
SPEC §2's second hop): the top ``bridge_depth`` (20) of the ranking are re-ranked by
:func:`hopgraph.engine.components.title_mentions.bridge_rerank` — + ``bridge`` (0.4) for the passages whose title
the ``bridge_seeds`` (1) best passage mentions; ``bridge=0`` (the ``no_bridge`` ablation; also in
``no_graph`` and the published parameters) switches it off.

Sparse query (issue 14): nothing of size ``[B, N]`` or ``[B, n_states]`` is made. Per-question
vectors are :class:`~hopgraph.engine.pipelines.stitch.local_rows.LocalRows` on the chunks where they can be
non-zero. Step 1 searches the text embeddings for the ``match_k`` (128) description texts
nearest each question (a :class:`~hopgraph.engine.components.dense.DenseIndex` over ``H.text_emb``:
exact below its ANN threshold, IVF with exact rescoring above) and applies δ to those: at
most ``match_k`` texts activate states (on musique at most 44 texts pass the relative δ, 65
the absolute 0.5). Steps 2–5 run the kernels on the sub-hypergraph the activated states reach
(:func:`~hopgraph.engine.pipelines.stitch.local_graph.local_hypergraph`), computing topic and chunk
similarities for its edges and nodes only. The relevance (step 7) is kept on the candidates:
the dense top ``max(100, top_k, seed_k)`` (a chunk outside it scores below every one of them,
so it can enter the top ``top_k`` only through π, and the ranking computes the cosine of every
chunk of π's support exactly) or the hybrid RRF top 100. The walk runs on the union of the batch's regions closed by a sink
(:func:`~hopgraph.engine.pipelines.stitch.local_graph.local_transition`), each row masked to its own region.
The ranking covers π's and the relevance's chunks; when fewer than ``top_k`` of them score
above 0, the lowest allowed ids follow with score 0 (as the dense ranking of zeros did).
A row whose prior is uniform (Σ I = 0, SPEC §2.5), or left without mass by a filter, needs
every chunk: such rows are computed apart on all N (one ``[b, N]`` block for those b rows), the
others stay local. ``localise=False`` is the global walk over all N (an ablation). With dense
relevance and no positive cosine among the candidates the mixing term is 0 (formerly uniform).

Threads: on the CPU, ``search`` runs torch with ``threads`` intra-op threads (default 1):
the arrays of one batch are small and OpenMP threads spinning on a busy machine cost more
than they save (the sparse product is single-threaded scipy anyway).

Live indexes (issue 13): ``Index.add`` calls ``add``, which keeps the embeddings of the old
topic and description texts, embeds the new ones and rebuilds the hypergraph arrays from the
extended extraction (:meth:`STITCH._add`); equal to a fresh fit except for the extraction's one
documented approximation, which ``Index.compact()`` removes.

Index options (fit-time: they need a refit): ``title_entities`` (passage titles as
entities, issue 6, default on), ``numbers`` (3+-digit numbers as entities, default on),
``max_group_chunks`` (64: larger name groups do not link chunks), ``extractions``.

Published behaviour: ``STITCHParams.published()`` (= ``STITCH(published=True)``, a
constructor shortcut; = ``STITCH.ablations["published"]``): absolute δ = 0.5, ``seed_k`` = 8,
no prior mixing, dense relevance; the ranking keeps λ = 0.3. Ablations (``hopgraph eval
--ablations``) switch each option above off, and the spatial, temporal and PPR steps
(``ppr=False`` ranks by the prior p); ``no_graph`` (λ = 1) ranks by the relevance alone, without
the hypergraph influence and the PPR (issue 15: what the graph adds); the Recall measured for the defaults and each
ablation is in the README ("Defaults and the measurements behind them").

:class:`PPRBinary` (``"ppr_binary"``) is SPEC §2's binary-seed baseline (HippoRAG/LinearRAG)
on the same graph: p = 1 on chunks holding a state whose canonical name occurs in the
question (word n-gram match of φ(question) against the name vocabulary), else 0; questions
that match no name fall back to the ``seed_k`` (8) most relevant chunks. Steps 6–7 are shared.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import scipy.sparse as sp
import torch

from .... import kernels
from ....kernels.dispatch import DEVICES
from ....kernels.tensors import as_tensor
from ....kernels.threads import torch_threads
from ...components.shared import QueryBatch
from ...errors import IndexFormatError, InputError
from ...components.dense import DenseIndex, gather_rows
from ....kernels.csr import CSR
from ...sparse import allowed_at, csr_from_keys, row_entries
from .local_rows import LocalRows
from ...ranking import topk_entries
from ...storage import release_pages
from ...components import title_mentions as title_bridge
from .local_graph import local_hypergraph, local_transition, neighbour_entries
from ...components.corpus import Corpus
from ...components.extraction import Extraction, load_extractions, query_names
from .late_pooling import LateTexts, late_texts
from .hypergraph import TopicHypergraph, build_hypergraph, embed_texts, extend_text_embeddings
from ...params import PipelineParams, choice, flag, integer, path, real
from ...ranking import PAD_SCORE, reciprocal_rank_fusion, topk_rows
from ..base import Pipeline
from ..hybrid import RRF_K, hybrid_ranking

DELTA_MODES = ("relative", "absolute")
RELEVANCES = ("dense", "hybrid")
FUSIONS = ("linear", "rrf")
#: how topic/description texts are embedded: "late" chunking of their passage's forward pass
#: (:mod:`hopgraph.engine.pipelines.stitch.late_pooling`), or "separate"ly, each text on its own
TEXT_POOLINGS = ("late", "separate")
HYBRID_DEPTH = 100
#: folder (and ``.json`` manifest entry) of the saved text IVF index in a STITCH pipeline directory
TEXT_IVF = "text-ivf"
#: bits a dimension of the text IVF's codes: 4 halves the largest structure STITCH holds at
#: 10⁶ passages (3.9 M texts: 0.75 GB instead of 1.5 GB) and, its candidates being rescored
#: exactly, kept the exact top-``match_k`` as 8 bits did (``bench/bench_dense_ann.py``: top-128
#: overlap 1.0; on the shared sets with ``HOPGRAPH_DENSE=ann``, STITCH's top-10 identical)
TEXT_CODE_BITS = 4
#: description texts matched per question before the activation threshold (step 1, ``match_k``)
MATCH_K = 128
#: chunks whose prior is below this fraction of the row's largest are not in the activated
#: region's support (float noise, see step 6 of the module docstring)
SUPPORT_RTOL = 1e-6


#: :func:`union_entries` marks a [B, n] bitmap instead of sorting keys once the entries are this share of its cells
DENSE_ENTRIES_SHARE = 1 / 8


def union_entries(qs: tuple[np.ndarray, ...], cs: tuple[np.ndarray, ...], B: int, n: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (row, column) pairs of the given entry lists, ordered by row then column (int64):
    the activated regions of SPEC §2 step 6 grown by a hop.
    Sorted keys ``row·n + column`` (``np.unique``) while the entries are few; a bool [B, n] bitmap
    once they are at least :data:`DENSE_ENTRIES_SHARE` of its cells (dense regions: on a generated
    20,000-passage corpus whose priors cover every chunk, 27·10⁶ one-hop entries for 64 questions
    took ``np.unique`` 1.8 s). Both give the same pairs in the same order."""
    total = sum(len(q) for q in qs)
    if total >= DENSE_ENTRIES_SHARE * B * n:
        mask = np.zeros((B, n), bool)
        for q, c in zip(qs, cs):
            mask[q, c] = True
        rows, cols = np.nonzero(mask)
        return rows.astype(np.int64), cols.astype(np.int64)
    key = np.unique(np.concatenate([np.asarray(q, np.int64) * np.int64(n) + c for q, c in zip(qs, cs)]))
    return key // max(n, 1), key % max(n, 1)


@dataclass(frozen=True)
class PPRBinaryParams(PipelineParams):
    """Parameters of the PPR walk on the STITCH chunk graph (SPEC §2 steps 6–7), shared by
    ``ppr_binary`` and ``stitch``. Fit-time: ``title_entities``, ``numbers``,
    ``max_group_chunks``, ``extractions``; the rest is query-time."""

    pipeline = "ppr_binary"
    title_entities: bool = flag(True)
    numbers: bool = flag(True)
    max_group_chunks: int = integer(64, low=1)
    extractions: str | None = path(None)
    d: float = real(0.85, low=0.0, high=1.0, low_open=True, high_open=True, query=True)
    seed_k: int = integer(8, low=1, query=True)
    balance: float = real(0.3, low=0.0, high=1.0, query=True)
    relevance: str = choice("dense", RELEVANCES, query=True)
    prior_mix: float = real(0.0, low=0.0, high=1.0, query=True)
    ppr: bool = flag(True, query=True)
    localise: bool = flag(True, query=True)
    region_hops: int = integer(1, low=0, query=True)
    tol: float = real(1e-6, low=0.0, low_open=True, query=True)
    max_iter: int = integer(100, low=1, query=True)
    batch_size: int = integer(64, low=1, query=True)
    fusion: str = choice("linear", FUSIONS, query=True)
    threads: int | None = integer(1, low=1, nullable=True, query=True)
    device: str = choice("auto", DEVICES, query=True)
    bridge: float = title_bridge.weight_field(0.0)
    bridge_seeds: int = title_bridge.seeds_field()
    bridge_depth: int = title_bridge.depth_field()


@dataclass(frozen=True)
class STITCHParams(PPRBinaryParams):
    """STITCH-RAG parameters (SPEC §2): the walk's, plus the influence prior's (``delta``,
    ``delta_mode``, ``spatial``, ``temporal``), with hopgraph's defaults for the prior
    (``seed_k`` 2, hybrid relevance, ``prior_mix`` 0.5)."""

    pipeline = "stitch"
    #: indexes saved before late chunking embedded their texts on their own
    saved_defaults = {"text_pooling": "separate"}
    seed_k: int = integer(2, low=1, query=True)
    relevance: str = choice("hybrid", RELEVANCES, query=True)
    prior_mix: float = real(0.5, low=0.0, high=1.0, query=True)
    delta: float = real(0.8, low=-1.0, high=1.0, query=True)
    delta_mode: str = choice("relative", DELTA_MODES, query=True)
    spatial: bool = flag(True, query=True)
    temporal: bool = flag(True, query=True)
    match_k: int = integer(MATCH_K, low=1, query=True)
    text_pooling: str = choice("late", TEXT_POOLINGS)
    bridge: float = title_bridge.weight_field()

    def check(self) -> None:
        if self.delta_mode == "relative" and not 0.0 < self.delta <= 1.0:
            raise self.invalid("delta", "must lie in (0, 1] when delta_mode is 'relative'")

    @classmethod
    def published_values(cls) -> dict[str, Any]:
        """SPEC §2 as published: absolute δ = 0.5, k = 8, the pure influence prior, dense relevance."""
        return {"delta_mode": "absolute", "delta": 0.5, "prior_mix": 0.0, "relevance": "dense", "seed_k": 8,
                "bridge": 0.0}


class STITCH(Pipeline):
    """STITCH-RAG retrieval (module docstring); ``hopgraph.STITCH(...).fit(X, corpus, embedder)``."""

    name = "stitch"
    Params = STITCHParams
    components_used = ("dense", "bm25", "extraction")
    needs_corpus = True
    needs_query_texts = True
    needs_embedder = True
    ablations = {
        "published": STITCHParams.published_values(),
        "spatial=False": {"spatial": False},
        "temporal=False": {"temporal": False},
        "ppr=False": {"ppr": False},
        "delta_mode=absolute": {"delta_mode": "absolute", "delta": 0.5},
        "prior_mix=0": {"prior_mix": 0.0},
        "relevance=dense": {"relevance": "dense"},
        "localise=False": {"localise": False},
        "balance=0": {"balance": 0.0},
        "no_graph": {"balance": 1.0, "bridge": 0.0},  # issue 15: the relevance alone (no prior, PPR, bridge)
        "no_bridge": {"bridge": 0.0},
        "text_pooling=separate": {"text_pooling": "separate"},  # refits (issue 14: texts embedded on their own)
        "seed_k=8": {"seed_k": 8},
        "title_entities=False": {"title_entities": False},  # refits
        "numbers=False": {"numbers": False},  # refits
    }

    def __init__(self, params: PipelineParams | dict[str, Any] | None = None, /, **overrides: Any) -> None:
        super().__init__(params, **overrides)
        self.H: TopicHypergraph | None = None
        self._cache: dict[str, Any] = {}
        #: the text index of step 1 (see :attr:`text_index`), None until built or loaded
        self._text_index: DenseIndex | None = None

    # ------------------------------------------------------------------ index
    def _fit(self, progress: bool) -> None:
        comp = self.components
        corpus = comp.require_corpus(self.name)
        ex = load_extractions(self.extractions, corpus) if self.extractions else \
            comp.extraction(self.title_entities, self.numbers, who=self.name)
        if self.needs_embedder:
            text_emb = embed_texts(ex.texts, corpus, self.X, comp.embedder, progress=progress,
                                   late=self._late(ex, corpus, progress), work_dir=comp.work_dir)
        else:  # the binary prior never looks at topic/description embeddings
            text_emb = np.zeros((len(ex.texts), 0), np.float16)
        self.H = build_hypergraph(ex, text_emb, self.max_group_chunks)
        comp.bm25(who=self.name)
        self._cache, self._text_index = {}, None

    @classmethod
    def late_text_key(cls, params: dict[str, Any]) -> tuple[bool, bool] | None:
        """The extraction options whose texts a fit with ``params`` late-chunks (None: it does
        not), so that ``Index.build`` can pool them in the passages' own embedding pass."""
        if not cls.needs_embedder:  # ppr_binary: no text embeddings
            return None
        p = cls.Params.create(params)
        return None if p.text_pooling != "late" or p.extractions else (bool(p.title_entities), bool(p.numbers))

    def _late(self, ex: Extraction, corpus: Corpus, progress: bool) -> Callable[[int], LateTexts | None] | None:
        """The late-chunked embeddings of ``ex.texts[first:]`` as a function of ``first``
        (``text_pooling="late"``; those ``Index.build`` pooled with the passages when it did),
        else None (texts embedded on their own)."""
        if getattr(self.params, "text_pooling", None) != "late":
            return None
        key = None if self.extractions else (bool(self.title_entities), bool(self.numbers))

        def provide(first: int = 0) -> LateTexts | None:
            made = self.components.take_late_texts(key) if key is not None and first == 0 else None
            return made if made is not None else \
                late_texts(ex, corpus.embedding_texts(), self.components.embedder, first, progress)
        return provide

    def _add(self, start: int, progress: bool) -> None:
        """Passages ``[start, N)`` were appended (issue 13; the SPEC §2 "Index" steps on the grown
        corpus): the shared extraction was extended by
        :func:`~hopgraph.engine.components.extraction.extend_extraction` (old text ids kept), so the old topic
        and description embeddings are kept and only the new texts are embedded
        (:func:`~hopgraph.engine.pipelines.stitch.hypergraph.extend_text_embeddings`); the hypergraph and its chunk
        graph are rebuilt from the extraction (:func:`build_hypergraph`, arithmetic only) and the
        query caches reset. The result is a fresh fit's whenever the extension equals a fresh
        extraction (its one approximation, a sentence-initial span of an old passage, lasts until
        ``Index.compact()``). With an ``extractions=`` file the file is read again and the pipeline
        refitted (its entries for the new passages, if any, come from the file)."""
        comp = self.components
        if self.extractions:
            self._fit(progress)
            return
        corpus = comp.require_corpus(self.name)
        ex = comp.extraction(self.title_entities, self.numbers, who=self.name)
        if ex.n_chunks != len(self.X) or len(ex.texts) < len(self.H.text_emb):
            raise InputError(f"{self.name}: the extraction covers {ex.n_chunks} passages and {len(ex.texts)} texts, "
                             f"the index {len(self.X)} passages and {len(self.H.text_emb)} embedded texts")
        text_emb = extend_text_embeddings(self.H.text_emb, ex.texts, corpus, self.X, comp.embedder, progress,
                                          late=self._late(ex, corpus, progress))
        self.H = build_hypergraph(ex, text_emb, self.max_group_chunks)
        comp.bm25(who=self.name)
        self._cache, self._text_index = {}, None

    def save(self, directory: Path) -> None:
        """The hypergraph arrays, and the text index's IVF when it searches approximately (from the
        dense index's ANN threshold of texts up: built now if not yet, so a loaded index answers
        its first question without training one; issue 14)."""
        self.H.save(directory / "hypergraph")
        if self.needs_embedder and len(self.H.text_emb) and self.text_index.method == "ann":
            entry = self.text_index.save_ivf(directory / TEXT_IVF)
            (directory / f"{TEXT_IVF}.json").write_text(json.dumps(entry))

    def _load(self, directory: Path) -> None:
        self.H = TopicHypergraph.load(directory / "hypergraph", mmap=True, n_chunks=len(self.X))
        if self.H.text_emb.shape[1] != (self.X.shape[1] if self.needs_embedder else 0):
            raise IndexFormatError(f"{directory / 'hypergraph' / 'text_emb.npy'}: dimension "
                                   f"{self.H.text_emb.shape[1]}, the index {self.X.shape[1]}")
        self._cache, self._text_index = {}, None
        entry_file = directory / f"{TEXT_IVF}.json"
        if self.needs_embedder and entry_file.is_file():
            try:
                entry = json.loads(entry_file.read_text())
            except (OSError, ValueError) as e:
                raise IndexFormatError(f"{entry_file}: {e}") from None
            self._text_index = DenseIndex.load(directory / TEXT_IVF, entry, self.H.text_emb, code_bits=TEXT_CODE_BITS)

    # ------------------------------------------------------------------ query
    def search(self, Q: np.ndarray, top_k: int = 5,
               query_texts: Sequence[str] | None = None, allowed: np.ndarray | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
        Q = self._check_queries(Q, top_k, query_texts)
        list_k = self._list_k(top_k)
        ids = np.full((len(Q), list_k), -1, np.int64)
        scores = np.full((len(Q), list_k), PAD_SCORE, np.float32)
        timer = self._timer()
        with torch_threads(self.threads if self._device() == "cpu" else None):
            for s in range(0, len(Q), self.batch_size):
                sl = slice(s, s + self.batch_size)
                batch = self.components.batch(Q[sl], list(query_texts[sl]), allowed)
                final = self.batch_scores(batch, timer, list_k)
                with timer("ranking"):
                    ids[sl], scores[sl] = rank_local(final, list_k, batch.allowed)
        return self._bridge(ids, scores, top_k, allowed, timer)

    def scores(self, Q: np.ndarray, texts: list[str], timer=None) -> np.ndarray:
        """Final chunk scores [B, N] (step 7) of a batch of normalised queries, as a dense array
        (for inspection and tests: ``search`` never makes it)."""
        return self.batch_scores(self.components.batch(Q, texts), timer).dense()

    def batch_scores(self, batch: QueryBatch, timer=None, top_k: int = 1) -> LocalRows:
        """Final scores of a :class:`QueryBatch` (step 7) on the chunks where they can be non-zero
        (module docstring, "Sparse query"): its filter zeroes the relevance and the prior of the
        passages it excludes; the walk may pass through them; the caller masks the ranking."""
        timer = timer or self._timer()
        with timer("relevance"):
            rel = self.relevance_rows(batch, top_k)
        with timer("prior"):
            p, uniform = self.prior_rows(batch, rel)
        # rows whose prior is uniform over the corpus (Σ I = 0, SPEC §2.5), or left without mass by
        # the filter, need every chunk: they are done apart, so the other rows stay local
        parts, out = [], None
        local = np.flatnonzero(~uniform)
        with timer("prior"):
            p_loc, empty = self.finish_prior(p.rows(local), rel.rows(local), batch.allowed)
        glob = np.union1d(np.flatnonzero(uniform), local[empty])
        keep = np.flatnonzero(~empty)
        if len(keep) or not len(glob):
            parts.append((local[keep], p_loc.rows(keep), rel.rows(local[keep])))
        if len(glob):
            with timer("prior"):
                full = p.rows(glob).on(np.arange(p.n, dtype=np.int64))
                values = full.values
                values[uniform[glob]] = 1.0 / max(p.n, 1)
                p_glob, _ = self.finish_prior(full, rel.rows(glob), batch.allowed)
            parts.append((glob, p_glob, rel.rows(glob)))
        for rows, pr, rl in parts:
            if self.ppr:
                with timer("ppr"):
                    pi = self.walk(pr)
            else:
                pi = pr
            with timer("ranking"):
                if self.params.relevance == "dense":  # the cosine of every chunk π reaches, exactly
                    rl = self.cosine_on(batch, rows, np.union1d(pi.cols, rl.cols))
                final = self.fuse(pi, rl)
            out = final if out is None else merge_rows(out, final)
            if len(parts) == 1:
                return final
        order = np.concatenate([r for r, _, _ in parts])
        return out.rows(np.argsort(order, kind="stable"))

    def finish_prior(self, p: LocalRows, rel: LocalRows, allowed: np.ndarray | None) -> tuple[LocalRows, np.ndarray]:
        """Prior mixing (step 5, ``prior_mix``) and the filter (:func:`masked_distribution`);
        returns the prior and which rows have no mass left (only possible on local columns)."""
        if self.prior_mix > 0:
            cols = np.union1d(p.cols, rel.cols)
            p, r = p.on(cols), rel.on(cols)
            p = p.with_values((1.0 - self.prior_mix) * p.values
                              + self.prior_mix * top_k_distribution(r.values, self.seed_k, p.n))
        return masked_distribution(p, allowed)

    def relevance_rows(self, batch: QueryBatch, top_k: int = 1) -> LocalRows:
        """Query relevance (step 7) ≥ 0 on the chunks where it matters: clipped cosine on the dense
        top ``max(HYBRID_DEPTH, top_k, seed_k)`` (every other chunk scores below all of them, so it
        can enter the top ``top_k`` only with π > 0, where it is scored exactly), or the hybrid RRF
        scores of the fused top ``HYBRID_DEPTH`` (0 elsewhere). Drawn under the batch's filter."""
        n = len(self.X)
        if self.params.relevance == "dense":
            ids, sc = batch.dense_topk(max(HYBRID_DEPTH, top_k, self.seed_k))
            return LocalRows.from_ids(ids, np.maximum(sc, 0.0), n, np.float32)
        ids, sc = hybrid_ranking(batch, HYBRID_DEPTH, depth=HYBRID_DEPTH)
        return LocalRows.from_ids(ids, sc, n, np.float32)

    def cosine_on(self, batch: QueryBatch, rows: np.ndarray, cols: np.ndarray) -> LocalRows:
        """Dense relevance ``max(0, cos)`` of the batch rows ``rows`` at chunks ``cols`` (0 at the
        passages the filter excludes): step 7's relevance term on π's support, where the dense
        top list alone would leave it 0."""
        sims = np.maximum(batch.Q[rows] @ np.asarray(self.components.dense.rows(cols), np.float32).T, 0.0)
        if batch.allowed is not None:
            sims[:, ~np.asarray(batch.allowed)[cols]] = 0.0
        return LocalRows(np.asarray(cols, np.int64), sims.astype(np.float32), len(self.X))

    def prior_rows(self, batch: QueryBatch, rel: LocalRows) -> tuple[LocalRows, np.ndarray]:
        """The chunk prior (steps 1–5) on its support, and the rows whose Σ I is 0 (uniform)."""
        I = self.influence(batch)
        s = I.values.sum(1, keepdims=True)
        uniform = s[:, 0] <= 0
        return I.with_values(np.divide(I.values, s, out=np.zeros_like(I.values), where=s > 0)), uniform

    def prior(self, batch: QueryBatch, rel: LocalRows | None = None) -> np.ndarray:
        """STITCH chunk prior p [B, N] (steps 1–5), float64 rows summing to 1, dense (tests)."""
        p, uniform = self.prior_rows(batch, rel if rel is not None else self.relevance_rows(batch))
        out = p.dense()
        out[uniform] = 1.0 / max(p.n, 1)
        return out

    def influence(self, batch: QueryBatch) -> LocalRows:
        """``I(c) = Σ_{v∈c} a(v) ln(1 + N_v)`` (steps 1–5) on the chunks of the local hypergraph.

        Step 1 without ``Q @ text_embᵀ``: the ``match_k`` description texts nearest each question
        (the text index: exact below the dense index's ANN threshold, IVF + exact rescoring above),
        of which those at or above δ_q activate their states; the spatial and temporal channels
        run on the sub-hypergraph those states reach (:func:`local_hypergraph`), the topic and
        chunk similarities they use are computed for its edges and nodes only."""
        H, dev, Q = self.H, self._device_t(), batch.Q
        B, n = len(Q), self.H.n_chunks
        if H.n_nodes == 0 or B == 0:
            return LocalRows.empty(B, n)
        t = self._index_arrays()
        ids, sims = t["text_index"].topk(Q, min(self.match_k, t["n_node_texts"]), t["node_text_mask"])
        if self.delta_mode == "relative":
            thr = self.delta * np.maximum(sims[:, :1], 1e-6)
        else:
            thr = np.float32(self.delta)
        hit = (ids >= 0) & (sims >= thr) & (sims > 0)
        qb, text_seg = np.nonzero(hit)
        seg, nodes = row_entries(t["text_indptr"], t["text_nodes"], ids[qb, text_seg])
        act_q, act_v, act_val = qb[seg], nodes, sims[qb, text_seg][seg]
        if not len(act_v):
            return LocalRows.empty(B, n)
        L = local_hypergraph(H, t["inc_edge"], t["alpha"], act_v)
        A = np.zeros((B, len(L.nodes)), np.float32)
        A[act_q, np.searchsorted(L.nodes, act_v)] = act_val
        A = as_tensor(A, device=dev)
        S = as_tensor(np.maximum(Q @ self._text_rows(np.asarray(H.edge_text)[L.edges]).T, 0.0), device=dev)
        as_t = lambda a, dt=torch.int64: as_tensor(a, dt, dev)  # noqa: E731
        channels = [A]
        if self.spatial:
            channels.append(kernels.call("hyperedge_max_propagate", A, S, as_t(L.edge_indptr),
                                         as_t(L.edge_nodes, torch.int32), as_t(L.node_indptr),
                                         as_t(L.node_incidence, torch.int32), device=self._device()))
        node_chunk = np.asarray(H.node_chunk, np.int64)[L.nodes]
        chunks, chunk_of = np.unique(node_chunk, return_inverse=True)
        if self.temporal:
            chunk_sim = np.maximum(Q @ np.asarray(self.components.dense.rows(chunks), np.float32).T, 0.0)
            best_edge = torch.zeros_like(A).scatter_reduce(
                1, as_t(L.inc_node).expand(B, -1), S[:, as_t(L.inc_edge)], "amax")
            w = best_edge * as_tensor(chunk_sim[:, chunk_of], device=dev)
            channels.append(kernels.call("group_decay_propagate", A, w, as_t(L.node_group),
                                         as_t(node_chunk), as_t(L.group_indptr),
                                         as_t(L.group_nodes, torch.int32), as_t(L.alpha, torch.float32),
                                         device=self._device()))
        a = torch.stack(channels).mean(0)
        log_group = np.log1p(np.asarray(H.group_size)[np.asarray(H.node_group)[L.nodes]]).astype(np.float32)
        I = torch.zeros((B, len(chunks)), dtype=torch.float64, device=dev)
        I.index_add_(1, as_t(chunk_of), (a * as_tensor(log_group, device=dev)).to(torch.float64))
        return LocalRows(chunks.astype(np.int64), I.cpu().numpy(), n)

    def _text_rows(self, rows: np.ndarray) -> np.ndarray:
        """Text embeddings ``rows`` as float32 (``H.text_emb`` may be float16 or memory-mapped)."""
        return np.asarray(gather_rows(self.H.text_emb, rows), np.float32)

    def region(self, p: LocalRows) -> LocalRows:
        """Activated region (bool LocalRows): the numerical support of p (``p ≥ SUPPORT_RTOL · max p``,
        per row, so a row's region depends on that row only) and its ``region_hops``-hop
        neighbourhood (SPEC §2 step 6, localised; default one hop)."""
        v = np.asarray(p.values)
        top = v.max(axis=1, keepdims=True) if v.shape[1] else np.zeros((len(v), 1))
        q, j = np.nonzero((v > 0) & (v >= SUPPORT_RTOL * top))
        cols = p.cols[j]
        if self.region_hops:
            adj = self._adjacency()
            for _ in range(self.region_hops):
                nq, nc = neighbour_entries(adj.indptr, adj.indices, q, cols)
                q, cols = union_entries((q, nq), (cols, nc), len(v), p.n)
        return LocalRows.from_entries(q, cols, True, len(v), p.n, bool)

    def walk(self, p: LocalRows) -> LocalRows:
        """π of each row (step 6): ``batched_ppr`` on the chunk graph restricted to the union of the
        batch's regions plus a sink (:func:`local_transition`), each row's walk confined to its own
        region; ``localise=False``: the global walk (every chunk, as the SPEC's unlocalised PPR)."""
        if not self.localise:
            full = p.on(np.arange(p.n, dtype=np.int64))
            pi, _ = kernels.call("batched_ppr", self.transition, full.values, d=self.d, tol=self.tol,
                                 max_iter=self.max_iter, device=self._device())
            return full.with_values(pi.cpu().numpy())
        reg = self.region(p)
        if not len(reg.cols):
            return LocalRows.empty(len(p), p.n)
        P = self.transition
        sub = local_transition(P, self._column_sums(), reg.cols)
        pr = np.zeros((len(p), len(reg.cols) + 1), np.float64)
        pr[:, :-1] = p.on(reg.cols).values
        region = np.zeros(pr.shape, bool)
        region[:, :-1] = reg.values
        pi, _ = kernels.call("batched_ppr", sub, pr, d=self.d, tol=self.tol, max_iter=self.max_iter,
                             region=region, device=self._device())
        return LocalRows(reg.cols, pi.cpu().numpy()[:, :-1], p.n)

    def fuse(self, pi: LocalRows, rel: LocalRows) -> LocalRows:
        """Step 7 on the union of π's and the relevance's columns (0 elsewhere):
        ``(1 − λ) π/max π + λ rel/max rel``, or the weighted RRF of the two top-``HYBRID_DEPTH``
        lists (``fusion="rrf"``; positive entries only are ranked)."""
        cols = np.union1d(pi.cols, rel.cols)
        pv, rv = pi.on(cols).values, rel.on(cols).values
        if self.fusion == "rrf":
            rr = []
            for m in (pv, rv):
                m = np.where(m > 0, m, -np.inf)
                top, _ = topk_rows(m, min(HYBRID_DEPTH, m.shape[1]))
                rr.append(reciprocal_rank_fusion([top], len(cols), k=RRF_K))
            return LocalRows(cols, ((1.0 - self.balance) * rr[0] + self.balance * rr[1]).astype(np.float32), pi.n)
        return LocalRows(cols, ((1.0 - self.balance) * normalise_max(pv) + self.balance * normalise_max(rv)
                                ).astype(np.float32), pi.n)

    # ------------------------------------------------------------------ cached views
    @property
    def transition(self) -> CSR:
        if "P" not in self._cache:
            self._cache["P"] = self.H.transition()
        return self._cache["P"]

    def _column_sums(self) -> np.ndarray:
        """Out-mass of every chunk in P (1, or 0 for a dangling chunk), float64 [N]."""
        return self.H.column_sums()

    def _adjacency(self) -> CSR:
        """The chunk graph's symmetric adjacency (for ``region_hops``): P's own pattern. Two chunks
        are linked when they share a name group (SPEC §2 step 6), a symmetric relation, so the
        pattern of P (``Bᵀ D B`` column-normalised, :func:`~hopgraph.engine.pipelines.stitch.hypergraph.chunk_links`)
        is that of ``P + Pᵀ`` (``tests/test_hypergraph.py`` checks it); forming the sum cost 3 s at
        10⁶ passages on the first query."""
        return self.transition

    @property
    def text_index(self) -> DenseIndex:
        """Cosine top-k over ``H.text_emb`` (step 1): exact, or IVF with exact rescoring from the
        dense index's ANN threshold up (:data:`TEXT_CODE_BITS`-bit codes); loaded with the index when
        saved, else built on first use."""
        if self._text_index is None:
            self._text_index = DenseIndex(self.H.text_emb, code_bits=TEXT_CODE_BITS)
        return self._text_index

    def _device(self) -> str:
        return kernels.resolve_device(self.device)

    def _device_t(self) -> torch.device:
        return torch.device(self._device())

    def _index_arrays(self) -> dict[str, Any]:
        """Query-side views of the hypergraph, built once: the text index over ``H.text_emb`` (a
        :class:`~hopgraph.engine.components.dense.DenseIndex`, searched under the mask of the texts
        that are some state's description), text → states CSR, the edge of each incidence,
        α per group."""
        if "arrays" not in self._cache:
            H = self.H
            node_text = np.asarray(H.node_text, np.int64)
            mask = np.zeros(len(H.text_emb), bool)
            mask[node_text] = True
            text_indptr, text_nodes = csr_from_keys(node_text, len(H.text_emb))
            self._cache["arrays"] = {
                "text_index": self.text_index, "node_text_mask": None if mask.all() else mask,
                "n_node_texts": max(int(mask.sum()), 1),
                "text_indptr": text_indptr, "text_nodes": text_nodes,
                "inc_edge": np.repeat(np.arange(H.n_edges), np.diff(np.asarray(H.edge_indptr))),
                "alpha": H.group_alpha(),
            }
        return self._cache["arrays"]


class PPRBinary(STITCH):
    """Binary entity-match prior + PPR on the STITCH chunk graph (HippoRAG/LinearRAG baseline;
    published behaviour: no prior mixing, dense relevance, seed_k = 8 for the fallback)."""

    name = "ppr_binary"
    Params = PPRBinaryParams
    needs_embedder = False
    ablations = {"ppr=False": {"ppr": False}, "localise=False": {"localise": False}, "balance=0": {"balance": 0.0}}

    def prior_rows(self, batch: QueryBatch, rel: LocalRows) -> tuple[LocalRows, np.ndarray]:
        """p = 1 on chunks holding a state of a name the question mentions (normalised);
        questions with no match fall back to the ``seed_k`` most relevant chunks."""
        H = self.H
        if "name_ids" not in self._cache:
            self._cache["name_ids"] = {n: i for i, n in enumerate(H.names())}
            M = sp.csr_matrix((np.ones(H.n_nodes, np.float32), (np.asarray(H.node_group), np.asarray(H.node_chunk))),
                              shape=(H.n_groups, H.n_chunks))
            self._cache["group_chunks"] = M
        texts = batch.texts
        matched = query_names(texts, self._cache["name_ids"])
        rows = np.repeat(np.arange(len(texts)), [len(m) for m in matched])
        cols = np.concatenate(matched) if matched else np.zeros(0, np.int32)
        hits = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(len(texts), H.n_groups))
        q, c = (hits @ self._cache["group_chunks"]).nonzero()
        p = LocalRows.from_entries(q, c, 1.0, len(texts), H.n_chunks).on(np.union1d(np.unique(c), rel.cols))
        values = p.values
        none = values.sum(1) == 0
        if none.any():
            values[none] = top_k_distribution(rel.on(p.cols).values[none], self.seed_k, p.n)
        s = values.sum(1, keepdims=True)
        return p.with_values(np.divide(values, s, out=np.zeros_like(values), where=s > 0)), s[:, 0] <= 0


# ---------------------------------------------------------------------- helpers
def normalise_rows(M: np.ndarray) -> np.ndarray:
    """Rows divided by their sum; all-zero rows become uniform (SPEC §2.5)."""
    M = np.asarray(M, np.float64)
    s = M.sum(1, keepdims=True)
    out = np.divide(M, s, out=np.zeros_like(M), where=s > 0)
    if M.shape[1]:
        out[(s[:, 0] <= 0)] = 1.0 / M.shape[1]
    return out


def masked_distribution(p: LocalRows, allowed: np.ndarray | None) -> tuple[LocalRows, np.ndarray]:
    """Rows of ``p`` restricted to the ``allowed`` columns and renormalised; returns them and the
    rows left with no mass. On every column (``p.is_full``) such a row becomes uniform over the
    allowed columns (and is not reported); on local columns the caller redoes it on every column."""
    if allowed is None:
        return p, np.zeros(len(p), bool)
    ok = np.asarray(allowed)[p.cols]
    v = np.where(ok[None, :], p.values, 0.0)
    s = v.sum(1, keepdims=True)
    out = np.divide(v, s, out=np.zeros_like(v), where=s > 0)
    empty = s[:, 0] <= 0
    if p.is_full and empty.any():
        out[empty] = np.where(ok, 1.0 / max(int(ok.sum()), 1), 0.0)[None, :]
        empty = np.zeros(len(p), bool)
    return p.with_values(out), empty


def normalise_max(M: np.ndarray) -> np.ndarray:
    """Rows divided by their maximum (rows with max ≤ 0 stay 0)."""
    m = M.max(1, keepdims=True) if M.shape[1] else np.zeros((len(M), 1))
    return np.divide(M, m, out=np.zeros(M.shape, np.float64), where=m > 0)


def top_k_distribution(rel: np.ndarray, k: int, n: int | None = None) -> np.ndarray:
    """Relevance restricted to each row's ``k`` best chunks (ties toward the lower column, as
    :func:`~hopgraph.engine.ranking.topk_rows`: on local columns, which are sorted, the lower id,
    so the choice does not depend on the other columns of the batch), normalised to sum 1. A row
    with no positive relevance is uniform over ``n`` chunks — the row's columns when ``n`` is None;
    on local columns (``n`` > their count) it is all zero, and the prior's other term decides."""
    rel = np.asarray(rel, np.float64)
    out = np.zeros_like(rel)
    if rel.size == 0:
        return out
    top, _ = topk_rows(rel, min(k, rel.shape[1]))
    rows = np.broadcast_to(np.arange(len(rel))[:, None], top.shape)
    ok = top >= 0
    out[rows[ok], top[ok]] = rel[rows[ok], top[ok]]
    out = np.maximum(out, 0.0)
    if n is None or n == rel.shape[1]:
        return normalise_rows(out)
    s = out.sum(1, keepdims=True)
    return np.divide(out, s, out=np.zeros_like(out), where=s > 0)


def merge_rows(a: LocalRows, b: LocalRows) -> LocalRows:
    """The rows of ``a`` then those of ``b``, over the union of their columns."""
    cols = np.union1d(a.cols, b.cols)
    return LocalRows(cols, np.concatenate([a.on(cols).values, b.on(cols).values]), a.n)


def rank_local(final: LocalRows, top_k: int, allowed: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Top-``top_k`` of the full score rows (0 outside ``final.cols``), filtered rows excluded:
    the positive local entries best first, then — as ``topk_rows`` on the dense rows ranks the
    zero scores, ties toward the lower id — the lowest allowed ids not already listed, score 0, so
    ``top_k`` results come back whenever that many passages pass the filter."""
    v = np.asarray(final.values, np.float32)
    q, j = np.nonzero(v > 0)
    col = final.cols[j]
    ok = allowed_at(allowed, col)
    ids, scores = topk_entries(q[ok], col[ok], v[q[ok], j[ok]], len(final), top_k)
    short = np.flatnonzero((ids >= 0).sum(1) < top_k)
    if len(short):
        pool = np.flatnonzero(allowed) if allowed is not None else np.arange(final.n)
        for b in short.tolist():
            have = int((ids[b] >= 0).sum())
            fill = pool[:top_k + have]
            fill = fill[~np.isin(fill, ids[b, :have])][:top_k - have]
            ids[b, have:have + len(fill)] = fill
            scores[b, have:have + len(fill)] = 0.0
    return ids, scores

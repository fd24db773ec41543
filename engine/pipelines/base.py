"""The interface every retrieval pipeline implements (G3RAG, STITCH, DMAR, baselines).

A pipeline is made from its parameters (one frozen dataclass per pipeline,
:mod:`hopgraph.engine.params`), fitted on the passage embeddings X (row i = passage i of
the corpus) through the index's shared :class:`~hopgraph.engine.components.shared.Components`
(corpus store, dense index, BM25, extraction: built once, shared by every pipeline that
declares it in ``components``), and answers batches of queries:
``search(Q, top_k, query_texts) -> (ids int64 [B, top_k], scores float32 [B, top_k])``
where ids are corpus rows, best first, padded with -1 / -inf when fewer exist.
``search(..., allowed=mask)`` (bool [N]) returns only allowed rows — and ``top_k`` of them
whenever that many pass and score — never deleted ones (``Components.deleted``): dense and
BM25 candidates are drawn under the mask (faiss ID selector, bm25s weight mask), the graph
pipelines mask their seeds / priors and their final ranking, while a walk or diffusion may
pass through filtered passages (issue 13).
"""
from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar, Sequence

import numpy as np

from ..components.shared import Components
from ..components.corpus import Corpus
from ..embedders.core import Embedder, validate_embeddings
from ..errors import InputError
from ..params import PipelineParams
from ..timing import StageTimer
from ..components.title_mentions import bridge_rerank


class RefitNeeded(InputError):
    """A variant changes fit-time parameters: fit a new pipeline instead (the message names them)."""


class Pipeline(ABC):
    """Base class of retrieval pipelines. Subclasses set ``name`` and ``Params`` and implement
    the abstract methods; ``components`` / ``needs_query_texts`` / ``needs_embedder`` declare
    their inputs. Parameters are read as attributes (``pipe.seed_k`` is ``pipe.params.seed_k``)."""

    name: ClassVar[str]
    Params: ClassVar[type[PipelineParams]] = PipelineParams
    #: the shared components the pipeline uses (:data:`hopgraph.engine.components.shared.KINDS`)
    components_used: ClassVar[tuple[str, ...]] = ()
    needs_corpus: ClassVar[bool] = False
    needs_query_texts: ClassVar[bool] = False
    needs_embedder: ClassVar[bool] = False
    #: named ablations for ``hopgraph eval --ablations``: variant name → parameter overrides
    ablations: ClassVar[dict[str, dict[str, Any]]] = {}

    X: np.ndarray | None = None

    def __init__(self, params: PipelineParams | dict[str, Any] | None = None, /, *, published: bool = False,
                 **overrides: Any) -> None:
        base = self.Params.published() if published else params
        self.params = self.Params.create(base, **overrides)
        self.X = None
        self.components: Components | None = None
        #: seconds per stage of the last ``search`` (:class:`~hopgraph.engine.timing.StageTimer`)
        self.timings: dict[str, float] = {}

    def __getattr__(self, name: str) -> Any:
        params = self.__dict__.get("params")
        if params is not None and name in type(params).names():
            return getattr(params, name)
        raise AttributeError(f"{type(self).__name__!s} has no attribute {name!r}")

    # ------------------------------------------------------------------ fit / save / load
    def fit(self, X: np.ndarray, corpus: Corpus | None = None, embedder: Embedder | None = None,
            progress: bool = False, components: Components | None = None) -> "Pipeline":
        """Build the pipeline's index structures over ``components`` (made here from X and the
        corpus when not given, i.e. for a pipeline used on its own); returns self."""
        if components is None:
            X = validate_embeddings(X, "passage embeddings")
            components = Components(X, corpus, embedder, progress=progress)
        if self.needs_corpus and components.corpus is None:
            raise InputError(f"pipeline {self.name!r} needs the corpus texts: fit(X, corpus)")
        if self.needs_embedder and components.embedder is None:
            raise InputError(f"pipeline {self.name!r} needs the embedder: fit(X, corpus, embedder)")
        self.components, self.X = components, components.X
        self._fit(progress)
        if self._bridge_on():
            components.title_mentions(self.name)  # built now, not on the first query
        return self

    @abstractmethod
    def _fit(self, progress: bool) -> None:
        """Build this pipeline's own structures from ``self.components``."""

    def add(self, start: int, progress: bool = False) -> None:
        """Update this pipeline's structures after its components grew (:meth:`Components.extend`):
        rows ``[start, N)`` of X and the corpus are new. Default: fit again over the grown
        components (exact; right for pipelines that only use the components). Graph pipelines
        override it with an incremental update and say where it is approximate until
        ``Index.compact()``."""
        self.X = self.components.X
        self._add(start, progress)

    def _add(self, start: int, progress: bool) -> None:
        self._fit(progress)

    def carry_state(self, old: "Pipeline") -> None:
        """Take over from ``old`` (the same pipeline before ``Index.compact()`` refitted it) what
        is not derived from the corpus, e.g. a trained gate. Default: nothing."""

    def save(self, directory: Path) -> None:
        """Write this pipeline's own fitted arrays into ``directory`` (created by the caller).
        Default: nothing (the pipeline only uses shared components)."""

    def _load(self, directory: Path) -> None:
        """Read what :meth:`save` wrote. Default: nothing to read (structures are the components')."""
        self._fit(progress=False)

    @classmethod
    def late_text_key(cls, params: dict[str, Any]) -> tuple[bool, bool] | None:
        """The extraction options (``title_entities``, ``numbers``) whose topic/description texts a
        fit with ``params`` embeds by late chunking (:mod:`hopgraph.engine.pipelines.stitch.late_pooling`), so that
        ``Index.build`` pools them in the passages' own embedding pass; None (the default): none."""
        return None

    @classmethod
    def load(cls, directory: Path, params: PipelineParams | dict[str, Any], components: Components) -> "Pipeline":
        """Rebuild a fitted pipeline from ``save``'s output over ``components`` (no refit)."""
        self = cls(params if isinstance(params, PipelineParams) else cls.Params.from_saved(params))
        self.components, self.X = components, components.X
        self._load(directory)
        return self

    # ------------------------------------------------------------------ parameters
    def get_params(self) -> dict[str, Any]:
        """JSON-serialisable parameters (stored in the index manifest)."""
        return self.params.to_dict()

    def variant(self, **overrides: Any) -> "Pipeline":
        """A copy of this fitted pipeline with query-time parameters changed (validated).

        Raises :class:`RefitNeeded` (a ValueError) when an override is fit-time.
        """
        new = self.params.replace(**overrides)
        return self.with_params(new)

    def with_params(self, params: PipelineParams) -> "Pipeline":
        """This fitted pipeline with ``params``, which may differ only in query-time fields."""
        needs_refit = self.params.changed(params) - self.Params.query_names()
        if needs_refit:
            raise RefitNeeded(f"{self.name}: parameters {sorted(needs_refit)} need a refit")
        other = copy.copy(self)
        other.params = params
        other.timings = {}
        return other

    # ------------------------------------------------------------------ shared checks
    def _require_fitted(self) -> None:
        if self.X is None:
            raise RuntimeError(f"{type(self).__name__} is not fitted: call fit(X) first")

    def _check_queries(self, Q: np.ndarray, top_k: int, query_texts: Sequence[str] | None) -> np.ndarray:
        """Validate a query batch against the fitted index; returns normalised float32 Q."""
        self._require_fitted()
        if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
            raise InputError(f"top_k must be a positive integer, got {top_k!r}")
        Q = np.asarray(Q)
        if Q.ndim == 1:
            Q = Q[None, :]
        Q = validate_embeddings(Q, "query embeddings", dim=self.X.shape[1]) if len(Q) else \
            np.zeros((0, self.X.shape[1]), np.float32)
        if self.needs_query_texts and query_texts is None:
            raise InputError(f"pipeline {self.name!r} needs the query texts (query_texts=...)")
        if query_texts is not None and len(query_texts) != len(Q):
            raise InputError(f"{len(query_texts)} query texts for {len(Q)} query embeddings")
        return Q

    # ------------------------------------------------------------------ title bridge (issue 15)
    def _bridge_on(self) -> bool:
        """Whether the title bridge re-ranks this pipeline's results: its parameters have a
        positive ``bridge`` and the corpus (titles and texts) is known."""
        return getattr(self.params, "bridge", 0.0) > 0 and self.components.corpus is not None

    def _list_k(self, top_k: int) -> int:
        """How many results the pipeline's own ranking produces: ``max(top_k, bridge_depth)`` when
        the title bridge re-ranks them, else ``top_k``."""
        return max(top_k, self.params.bridge_depth) if self._bridge_on() else top_k

    def _bridge(self, ids: np.ndarray, scores: np.ndarray, top_k: int, allowed: np.ndarray | None,
                timer: StageTimer) -> tuple[np.ndarray, np.ndarray]:
        """The pipeline's ranked lists re-ranked by the title bridge and cut to ``top_k``
        (:func:`~hopgraph.engine.components.title_mentions.bridge_rerank`; unchanged when it is off)."""
        if not self._bridge_on():
            return ids, scores
        with timer("title_bridge"):
            return bridge_rerank(self.components.title_mentions(self.name), ids, scores, top_k, self.params.bridge,
                                 self.params.bridge_seeds, self.components.allowed(allowed))

    def _timer(self) -> StageTimer:
        """A fresh stage timer whose totals become ``self.timings`` when the search ends."""
        self.timings = {}
        return StageTimer(self.timings)

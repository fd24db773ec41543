"""The contract every retrieval pipeline implements (G3RAG, STITCH, DMAR, ppr_binary, the baselines).

A pipeline is made from parameters of three kinds (:mod:`hopgraph.engine.params`): fit parameters
(``fit_params``: stored, a change refits), search-parameter defaults (``search_defaults``: a call may
override them, nothing is stored) and run settings (``settings``: device, threads, batch size).

``fit(X, corpus, embedder)`` builds the pipeline's own structures over the index's shared
:class:`~hopgraph.engine.components.shared.Components` (corpus store, dense index, BM25, extraction),
and marks the pipeline fitted. ``search`` is final and the same for every pipeline: it validates the
queries, splits them into batches, applies the filter, times the stages, asks the pipeline to rank
each batch (:meth:`Pipeline._search_batch`) and runs the reranking steps (the title bridge). A
question's results never depend on the other questions of its batch.
"""
from __future__ import annotations

import copy
import warnings
from abc import ABC, abstractmethod
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, ContextManager, Generic, Mapping, Protocol, Sequence, TypeVar

import numpy as np

from ...kernels.dispatch import resolve_device
from ...kernels.threads import torch_threads
from ..components.corpus import Corpus
from ..components.query_batch import QueryBatch
from ..components.shared import COMPONENT_KINDS, Components
from ..cost import Cost, IndexShape, dense_scan_cost, list_depth
from ..embedders import Embedder, validate_embeddings
from ..errors import IndexFormatError, InputError, NotFittedError
from ..params import (DeprecatedParameterWarning, FitParams, InvalidParameter, RunSettings, SearchParams,
                      split_params)
from ..cancel import checkpoint
from ..ranking import PAD_ID, PAD_SCORE, check_k
from ..timing import StageTimer

F = TypeVar("F", bound=FitParams)
S = TypeVar("S", bound=SearchParams)


def live_rows(components: Components) -> int:
    """Rows a search over ``components`` may return: all rows minus the deleted ones."""
    deleted = components.deleted
    return len(components.X) - (int(np.count_nonzero(deleted)) if deleted is not None else 0)


class RefitNeeded(InvalidParameter):
    """A fit parameter was given where only search parameters may change (the message names it)."""


@dataclass(frozen=True)
class Needs:
    """What a pipeline needs beyond the embeddings: the corpus texts at fit time, the question
    texts at search time, the embedder at fit time."""

    corpus: bool = False
    query_texts: bool = False
    embedder: bool = False


class RerankStep(Protocol):
    """A step run by :meth:`Pipeline.search` on a pipeline's ranked lists (e.g. the title bridge)."""

    name: str

    def active(self, params: Any, components: Components) -> bool:
        """Whether the step runs in a search with ``params`` over ``components``."""

    def depth(self, params: Any) -> int:
        """How many results the step needs from the pipeline's ranking (0 when ``params`` switch it
        off; :meth:`Pipeline.cost_depth` reads it without components)."""

    def prepare(self, components: Components, who: str) -> None:
        """Build what the step reads, at fit time (``who``: the pipeline, for the build records)."""

    def __call__(self, ids: np.ndarray, scores: np.ndarray, k: int, params: Any, components: Components,
                 allowed: np.ndarray | None, timer: StageTimer, texts: Sequence[str] | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
        """The re-ranked top ``k`` of ``ids`` / ``scores`` ([B, depth], best first), every row allowed;
        ``texts``: the questions, when the search was given them."""


class Pipeline(ABC, Generic[F, S]):
    """Base class of retrieval pipelines.

    Subclasses set ``name``, ``FitParams``, ``SearchParams`` and ``needs``, and implement
    :meth:`_fit` and :meth:`_search_batch` (and, when they hold arrays of their own, :meth:`_save` /
    :meth:`_load` and an incremental :meth:`_add`).
    """

    name: ClassVar[str]
    FitParams: ClassVar[type[FitParams]] = FitParams
    SearchParams: ClassVar[type[SearchParams]] = SearchParams
    needs: ClassVar[Needs] = Needs()
    #: the shared components the pipeline reads (kinds of
    #: :data:`~hopgraph.engine.components.shared.COMPONENT_KINDS`); ``fit`` refuses to build others
    components_used: ClassVar[tuple[str, ...]] = ()
    #: whether the pipeline runs kernels of :mod:`hopgraph.kernels` (the run setting ``device`` matters)
    runs_kernels: ClassVar[bool] = False
    #: reranking steps run after the pipeline's own ranking, in order
    rerank: ClassVar[tuple[RerankStep, ...]] = ()
    #: queries ranked per batch when the run settings give none (None: the whole call at once)
    default_batch_size: ClassVar[int | None] = None
    #: torch intra-op threads on the CPU when the run settings give none (None: torch's own)
    default_threads: ClassVar[int | None] = None
    #: stages reported in ``timings`` (0.0 when a search skips them)
    stages: ClassVar[tuple[str, ...]] = ()
    #: named ablations for ``hopgraph eval --ablations``: variant name -> parameter overrides
    ablations: ClassVar[dict[str, dict[str, Any]]] = {}

    def __init__(self, params: Mapping[str, Any] | None = None, /, *, published: bool = False,
                 settings: RunSettings | Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        """``params`` and ``kwargs``: fit parameters and search-parameter defaults, routed by name
        (old names warn); ``published=True``: the published algorithm's search defaults (SPEC);
        ``settings``: the run settings. Raises :class:`InvalidParameter` naming a bad name or value."""
        if params is not None and not isinstance(params, Mapping):
            raise InputError(f"{type(self).__name__}: params must be a mapping of parameter names to values, "
                             f"got {type(params).__name__}")
        fit, search, run = split_params(self.FitParams, self.SearchParams, {**(params or {}), **kwargs})
        self.fit_params: F = self.FitParams.create(fit)  # type: ignore[assignment]
        base = self.SearchParams.published() if published else None
        self.search_defaults: S = self.SearchParams.create(base, **search)  # type: ignore[assignment]
        self.settings = RunSettings.create(settings, **run)
        self.components: Components | None = None
        #: seconds per stage of the last ``search``
        self.timings: dict[str, float] = {}
        self._fitted = False
        #: a new object whenever the fitted state is replaced other than by :meth:`add` (a fit, a load,
        #: a retrained part): a segment stores a change against a snapshot of the same state only
        self._state_token: object = object()
        #: the rows of the stored state being read by :meth:`_load` (the index's rows, unless later
        #: segments add to it: :meth:`load_segments`)
        self._stored_rows: int | None = None

    # ------------------------------------------------------------------ state
    @property
    def is_fitted(self) -> bool:
        """Whether :meth:`fit` (or :meth:`load`) has run."""
        return self._fitted

    def _check_fitted(self) -> None:
        if not self._fitted:
            raise NotFittedError(f"{type(self).__name__} is not fitted: call fit(X) first")

    @property
    def X(self) -> np.ndarray:
        """The passage embeddings the pipeline was fitted on (row i = passage i)."""
        self._check_fitted()
        return self.components.X

    @property
    def device(self) -> str:
        """The device that runs this pipeline's kernels (the run setting, resolved)."""
        return resolve_device(self.settings.device)

    # ------------------------------------------------------------------ fit / update / persist
    def fit(self, X: np.ndarray, corpus: Corpus | None = None, embedder: Embedder | None = None,
            progress: bool = False, components: Components | None = None) -> "Pipeline[F, S]":
        """Build the pipeline's structures from the embeddings X (row i = passage i) and, when it
        needs them, the corpus and the embedder; over ``components`` when given (an index's shared
        ones), else over components made here. Returns self. Raises :class:`InputError` when X or
        a needed input is missing or invalid."""
        unknown = set(self.components_used) - set(COMPONENT_KINDS)
        if unknown:
            raise RuntimeError(f"pipeline {self.name!r} declares components_used {sorted(unknown)} that are no kind "
                               f"of shared component ({', '.join(COMPONENT_KINDS)})")
        if components is None:
            X = validate_embeddings(X, "passage embeddings")
            components = Components(X, corpus, embedder, progress=progress)
        if self.needs.corpus and components.corpus is None:
            raise InputError(f"pipeline {self.name!r} needs the corpus texts: fit(X, corpus)")
        if self.needs.embedder and components.embedder is None:
            raise InputError(f"pipeline {self.name!r} needs the embedder: fit(X, corpus, embedder)")
        self.components = components
        before = {kind: len(seconds) for kind, seconds in components.builds.items()}
        self._fit(progress)
        self._state_token = object()
        undeclared = {kind for kind, seconds in components.builds.items()
                      if len(seconds) > before.get(kind, 0)} - set(self.components_used) - {"corpus"}
        if undeclared:
            raise RuntimeError(f"pipeline {self.name!r} built shared components it does not declare in "
                               f"components_used: {sorted(undeclared)}")
        for step in self.rerank:
            if step.active(self.search_defaults, components):
                step.prepare(components, self.name)
        self._fitted = True
        return self

    @abstractmethod
    def _fit(self, progress: bool) -> None:
        """Build this pipeline's own structures from ``self.components``."""

    def add(self, start: int, progress: bool = False) -> None:
        """Update after the components grew (:meth:`Components.extend`): rows ``[start, N)`` of X and
        the corpus are new. Graph pipelines update incrementally and say where the result is
        approximate until ``Index.compact()``."""
        self._check_fitted()
        self._add(start, progress)

    def _add(self, start: int, progress: bool) -> None:
        """Default: fit again over the grown components (exact)."""
        self._fit(progress)

    def carry_state(self, old: "Pipeline[F, S]") -> None:
        """Take over from ``old`` (this pipeline before ``Index.compact()`` refitted it) what is not
        derived from the corpus, e.g. a trained gate. Default: nothing."""

    def save(self, directory: Path) -> None:
        """Write this pipeline's own fitted arrays into ``directory`` (created by the caller)."""
        self._check_fitted()
        self._save(directory)

    def _save(self, directory: Path) -> None:
        """Default: nothing (the pipeline only reads shared components)."""

    def _load(self, directory: Path) -> None:
        """Read what :meth:`_save` wrote (a state of :attr:`_stored_rows` passages). Default: nothing
        to read (structures are the components')."""
        self._fit(progress=False)

    def changed(self) -> None:
        """Mark the fitted state as replaced (e.g. a retrained part): the next segment stores it whole."""
        self._state_token = object()

    # ------------------------------------------------------------------ segments
    def snapshot(self) -> tuple[object, Any]:
        """The fitted state as it is now (references), for a later :meth:`save_segment`."""
        return self._state_token, self._snapshot()

    def _snapshot(self) -> Any:
        """What :meth:`_save_delta` compares with. Default: nothing."""
        return None

    def save_segment(self, directory: Path, since: tuple[object, Any] | None, start: int, stop: int
                     ) -> dict[str, Any] | None:
        """Write into ``directory`` what changed since ``since`` (a :meth:`snapshot`; None: the state
        whole), the rows ``[start, stop)`` having been appended since; returns the segment entry
        (``{"state": "full" | "delta"}``) or None when nothing is to be stored. A state replaced since
        the snapshot (:meth:`changed`) is stored whole."""
        self._check_fitted()
        if since is not None and since[0] is self._state_token:
            if type(self)._save is Pipeline._save or start == stop:  # only an add changes a kept state
                return None
            directory.mkdir(parents=True, exist_ok=True)
            state = self._save_delta(directory, since[1], start, stop)
            if state is not None:
                return {"state": state}
        directory.mkdir(parents=True, exist_ok=True)
        self._save(directory)
        return {"state": "full"}

    def _save_delta(self, directory: Path, since: Any, start: int, stop: int) -> str | None:
        """Write the change since the snapshot ``since`` (:meth:`_snapshot`); returns ``"delta"``, or None
        to store the state whole. Default: None."""
        return None

    def _load_deltas(self, parts: Sequence[tuple[Path, int]]) -> None:
        """Apply the deltas :meth:`_save_delta` wrote (``(directory, rows after it)`` in order) to the
        state :meth:`_load` read. Default: a pipeline without deltas never has any."""
        if parts:
            raise IndexFormatError(f"{parts[0][0]}: pipeline {self.name!r} stores no deltas")

    @classmethod
    def load(cls, directory: Path, fit_params: FitParams | Mapping[str, Any], components: Components,
             settings: RunSettings | None = None, n_rows: int | None = None) -> "Pipeline[F, S]":
        """A fitted pipeline from :meth:`save`'s output over ``components`` (no refit), a state of
        ``n_rows`` passages (default: all of ``components``). ``fit_params``: an instance, or the
        mapping stored with an index (old names and search parameters stored by earlier versions are
        accepted)."""
        if not isinstance(fit_params, FitParams):
            fit_params = cls.saved_fit_params(fit_params)
        self = cls(settings=settings)
        self.fit_params = fit_params
        self.components = components
        self._stored_rows = len(components.X) if n_rows is None else int(n_rows)
        self._load(directory)
        self._fitted = True
        return self

    @classmethod
    def load_segments(cls, parts: Sequence[tuple[Path, dict[str, Any], int]],
                      fit_params: FitParams | Mapping[str, Any], components: Components,
                      settings: RunSettings | None = None) -> "Pipeline[F, S]":
        """The pipeline stored in segments: ``parts`` are ``(directory, entry, rows after the segment)``
        of the segments holding its state, in order; read from the last one holding it whole, then
        the later deltas. IndexFormatError when none holds it whole."""
        full = max((i for i, (_, e, _) in enumerate(parts) if e.get("state", "full") == "full"), default=None)
        if full is None:
            raise IndexFormatError(f"pipeline {cls.name!r}: no segment holds its state")
        d, _, n = parts[full]
        self = cls.load(d, fit_params, components, settings, n_rows=n)
        deltas = [(d, n) for d, e, n in parts[full + 1:] if e.get("state") == "delta"]
        if deltas:
            self._load_deltas(deltas)
        return self

    @classmethod
    def saved_fit_params(cls, values: Mapping[str, Any]) -> FitParams:
        """The fit parameters of a stored parameter mapping (other names are ignored)."""
        fit = {k: v for k, v in values.items() if cls.FitParams.accepts(k)}
        return cls.FitParams.from_saved(fit)

    @classmethod
    def pooled_texts(cls, fit_params: Mapping[str, Any]) -> tuple[bool, bool] | None:
        """The extraction options (``title_entities``, ``numbers``) whose topic/description texts a
        fit with these parameters embeds by late chunking, so that an index build pools them in the
        passages' own embedding pass; None (the default): none."""
        return None

    # ------------------------------------------------------------------ parameters
    def get_params(self) -> dict[str, Any]:
        """Every constructor parameter: the fit parameters and the search defaults."""
        return {**self.fit_params.to_dict(), **self.search_defaults.to_dict()}

    def search_params(self, **overrides: Any) -> S:
        """The search parameters of one call: the defaults with ``overrides`` (validated; old
        names warn). Raises :class:`RefitNeeded` for a fit parameter and
        :class:`InvalidParameter` for a run setting or an unknown name."""
        fit = sorted(n for n in overrides if self.FitParams.accepts(n) and not self.SearchParams.accepts(n))
        if fit:
            raise RefitNeeded(f"{self.name}: {', '.join(map(repr, fit))} are fit parameters (a change needs a "
                              f"refit: a new pipeline, or Index.pipeline({self.name!r}, ...)); search parameters: "
                              f"{', '.join(self.SearchParams.names()) or 'none'}")
        return self.search_defaults.replace(**overrides)

    def with_search_defaults(self, **overrides: Any) -> "Pipeline[F, S]":
        """A shallow copy of this fitted pipeline whose search defaults have ``overrides``."""
        other = copy.copy(self)
        other.search_defaults = self.search_params(**overrides)
        other.timings = {}
        return other

    def clone(self) -> "Pipeline[F, S]":
        """A new, unfitted pipeline with the same parameters and run settings."""
        other = type(self)(settings=self.settings)
        other.fit_params, other.search_defaults = self.fit_params, self.search_defaults
        return other

    def with_settings(self, **overrides: Any) -> "Pipeline[F, S]":
        """A shallow copy of this pipeline with other run settings (nothing is refitted)."""
        other = copy.copy(self)
        other.settings = self.settings.replace(**overrides)
        other.timings = {}
        return other

    # ------------------------------------------------------------------ cost
    @classmethod
    def cost(cls, shape: IndexShape, params: S, batch: int, k: int, grouped: bool = False) -> Cost:
        """The modelled work and peak memory of one search call ranking ``batch`` questions for the
        top ``k`` with search parameters ``params`` over an index of ``shape`` (``grouped``: results
        grouped by document), :mod:`hopgraph.engine.cost`; a server refuses or routes a request by it
        before anything is allocated. Every figure grows with each parameter that grows the search.
        Default: the dense scan and the ranked lists (:func:`~hopgraph.engine.cost.dense_scan_cost`);
        a pipeline with structures of its own adds theirs. O(1)."""
        return dense_scan_cost(shape, batch, cls.cost_depth(shape, params, k, grouped))

    @classmethod
    def cost_depth(cls, shape: IndexShape, params: S, k: int, grouped: bool) -> int:
        """How deep a search's ranked lists are read (:func:`~hopgraph.engine.cost.list_depth`):
        ``k``, or deeper for the reranking steps ``params`` switch on."""
        return list_depth(shape, k, grouped, max([0] + [step.depth(params) for step in cls.rerank]))

    @classmethod
    def cost_fit(cls, shape: IndexShape) -> F:
        """The fit parameters of this pipeline in ``shape`` (an instance or a stored mapping; the
        defaults when ``shape`` has none), which its :meth:`cost` may read."""
        fit = shape.fit.get(cls.name)
        return fit if isinstance(fit, cls.FitParams) else cls.FitParams.create(fit)  # type: ignore[return-value]

    # ------------------------------------------------------------------ search
    def search(self, Q: np.ndarray, k: int = 5, query_texts: Sequence[str] | None = None, *,
               allowed: np.ndarray | None = None, **params: Any) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` passages of each query: ``(ids int64 [B, k'], scores float32 [B, k'])``, best first,
        padded with -1 / -inf when fewer exist, where ``k' = min(k, live passages)``: a ``k`` beyond
        the passages a search may return is clamped, never allocated.

        ``Q``: query embeddings [B, d] (or one row); ``query_texts``: the questions (pipelines whose
        ``needs.query_texts`` require them); ``allowed``: bool [N], the passages that may be
        returned (``k`` of them come back whenever that many pass; deleted passages never do);
        ``params``: this call's search parameters. Raises :class:`NotFittedError` before ``fit``,
        :class:`InputError` / :class:`InvalidParameter` naming a bad input. Final: pipelines
        implement :meth:`_search_batch`."""
        if "top_k" in params:
            warnings.warn("search: 'top_k' is now called 'k'", DeprecatedParameterWarning, stacklevel=2)
            k = params.pop("top_k")
        sp = self.search_params(**params)
        Q, texts = self._check_queries(Q, k, query_texts)
        n_live = live_rows(self.components)
        k = min(int(k), n_live)
        self.timings = dict.fromkeys(self.stages, 0.0)
        timer = StageTimer(self.timings)
        steps = [step for step in self.rerank if step.active(sp, self.components)]
        list_k = min(max([k] + [step.depth(sp) for step in steps]), n_live)
        B = len(Q)
        ids = np.full((B, list_k), PAD_ID, np.int64)
        scores = np.full((B, list_k), PAD_SCORE, np.float32)
        if k == 0:
            return ids, scores
        size = self.settings.batch_size or self.default_batch_size or max(B, 1)
        with self._threads():
            for s in range(0, B, size):
                checkpoint()
                batch = self.components.batch(Q[s:s + size], None if texts is None else texts[s:s + size], allowed)
                ids[s:s + size], scores[s:s + size] = self._search_batch(batch, list_k, sp, timer)
        for i, step in enumerate(steps):  # a step followed by another keeps the whole list
            ids, scores = step(ids, scores, k if i == len(steps) - 1 else list_k, sp, self.components, allowed,
                               timer, texts=texts)
        return ids[:, :k], scores[:, :k]

    @abstractmethod
    def _search_batch(self, batch: QueryBatch, k: int, params: S, timer: StageTimer
                      ) -> tuple[np.ndarray, np.ndarray]:
        """The pipeline's ranking of one batch: ``(ids int64 [b, k], scores float32 [b, k])``, best
        first, padded; every returned row allowed by ``batch.allowed``."""

    def _check_queries(self, Q: np.ndarray, k: int, query_texts: Sequence[str] | None
                       ) -> tuple[np.ndarray, list[str] | None]:
        """Validated, normalised float32 Q [B, d] and the texts as a list (or None)."""
        self._check_fitted()
        check_k(k)
        Q = np.asarray(Q)
        if Q.ndim == 1:
            Q = Q[None, :]
        dim = self.components.X.shape[1]
        Q = validate_embeddings(Q, "query embeddings", dim=dim) if len(Q) else np.zeros((0, dim), np.float32)
        if self.needs.query_texts and query_texts is None:
            raise InputError(f"pipeline {self.name!r} needs the query texts (query_texts=...)")
        if query_texts is None:
            return Q, None
        if isinstance(query_texts, str):
            raise InputError("query_texts must be a list of strings, one per query, not one string")
        texts = list(query_texts)
        if len(texts) != len(Q):
            raise InputError(f"{len(texts)} query texts for {len(Q)} query embeddings")
        return Q, texts

    def _threads(self) -> ContextManager[None]:
        """torch's intra-op threads for a search on the CPU (the run setting, else the default)."""
        n = self.settings.threads or self.default_threads
        return torch_threads(n) if n is not None and self.device == "cpu" else nullcontext()

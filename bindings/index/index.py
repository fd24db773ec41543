"""The public façade: an index of a corpus, its embeddings, the shared components and the fitted
pipelines. :class:`Index` is assembled from its parts: building (:mod:`.build`), searching
(:mod:`.search`), live updates (:mod:`.live`) and persistence (:mod:`.io`: over the engine's
:class:`~hopgraph.engine.index.IndexReader`, :class:`~hopgraph.engine.index.IndexWriter` and merge
policy); this module holds its state and the pipelines it has fitted."""
from __future__ import annotations

import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..engine.components.corpus import Corpus
from ..engine.components.shared import Components
from ..engine.embedders import Embedder, embedder_from_entry
from ..engine.filters import MetadataIndex
from ..engine.index import Committed, IndexReader
from ..engine.params import RunSettings, split_params
from ..engine.pipelines import Pipeline, pipeline_class
from .build import IndexBuild
from .io import IndexIO
from .live import IndexLive
from .params import validate_params, variant_key
from .search import IndexSearch

#: pipeline variants (fit-parameter overrides) kept in memory per index, least recently used dropped
MAX_VARIANTS = 16


class Index(IndexBuild, IndexSearch, IndexLive, IndexIO):
    """A corpus, its embeddings, the shared components and the fitted pipelines over them.

    Build with :meth:`build`, persist with :meth:`save` / :meth:`load`, query with :meth:`search`,
    update with :meth:`add` / :meth:`delete` / :meth:`compact`, merge stored segments with
    :meth:`merge`. Pipelines not fitted at build time
    are fitted on first use. Every pipeline uses the index's one set of components
    (:mod:`hopgraph.engine.components`): one corpus store, one dense index, one BM25 index (with
    ``params["bm25"]``), one extraction.
    """

    def __init__(self, corpus: Corpus, X: np.ndarray, embedder: Embedder | None, embedder_name: str,
                 device: str = "auto", params: Mapping[str, Mapping[str, Any]] | None = None,
                 progress: bool = True, components: Components | None = None, stored_params: bool = False) -> None:
        self.corpus = corpus
        self.X = X
        self._embedder = embedder
        self.embedder_name = embedder_name
        #: the manifest's ``embedder`` entry (name, dim, spec[, prompts]) when loaded, for lazy resolution
        self.embedder_entry: dict[str, Any] | None = None
        self.device = device
        #: the run settings every pipeline of this index gets (never stored)
        self.settings = RunSettings(device=device)
        #: ``{pipeline: {name: value}}``: fit parameters (stored) and search defaults (this object's only)
        self.params: dict[str, dict[str, Any]] = validate_params(params, stored=stored_params)
        self.progress = progress
        self.components = components if components is not None else \
            Components(X, corpus, embedder, self.params.get("bm25"), progress)
        self.pipelines: dict[str, Pipeline] = {}
        self._variants: OrderedDict[str, Pipeline] = OrderedDict()
        self.fit_seconds: dict[str, float] = {}
        self.embed_seconds = 0.0
        self.path: Path | None = None
        self._manifest: dict[str, Any] | None = None
        #: the engine's reader of the commit whose files this index reads (its lease; :mod:`.io`)
        self._reader: IndexReader | None = None
        #: the commit this index was loaded from or last saved to (:mod:`.io`)
        self._committed: Committed | None = None
        #: the adds and deletes since that commit, to apply again on a newer one (None: not possible)
        self._ops: list[tuple] | None = []
        self._metadata: MetadataIndex | None = None

    @property
    def embedder(self) -> Embedder:
        """The query embedder; re-created from the manifest's embedder spec on first use after
        :meth:`load` (an InputError naming ``embedder=`` when it cannot be, e.g. a callable)."""
        if self._embedder is None:
            entry = self.embedder_entry or {"name": self.embedder_name, "dim": int(self.X.shape[1])}
            self._embedder = embedder_from_entry(entry, f"index {self.path or ''}".rstrip())
            self.components.embedder = self._embedder
        return self._embedder

    # ------------------------------------------------------------------ pipelines
    def pipeline(self, name: str, **overrides: Any) -> Pipeline:
        """The fitted pipeline ``name`` (fitted now with ``self.params[name]`` if needed).

        ``overrides`` give a variant (e.g. an ablation), validated like every parameter (an invalid
        value raises ``InvalidParameter`` naming it): search parameters become the variant's search
        defaults over the fitted base pipeline, fit parameters fit a separate instance over the
        same components, run settings change how it runs. The last :data:`MAX_VARIANTS` variants
        are kept in memory; none is saved.
        """
        if not overrides:
            if name not in self.pipelines:
                t0 = time.perf_counter()
                self.pipelines[name] = self._fit(self._new_pipeline(name))
                self.fit_seconds[name] = time.perf_counter() - t0
            return self.pipelines[name]
        key = variant_key(name, overrides)
        if key in self._variants:
            self._variants.move_to_end(key)
            return self._variants[key]
        cls = pipeline_class(name)
        fit, search, run = split_params(cls.FitParams, cls.SearchParams, overrides)
        new = self._new_pipeline(name, {**fit, **search}, run)  # invalid values raise before any fit
        base = self.pipeline(name)
        if new.fit_params == base.fit_params:
            variant = base.with_search_defaults(**search).with_settings(**run)
        else:
            variant = self._fit(new)
        self._variants[key] = variant
        while len(self._variants) > MAX_VARIANTS:
            self._variants.popitem(last=False)
        return variant

    def _new_pipeline(self, name: str, overrides: Mapping[str, Any] | None = None,
                      run: Mapping[str, Any] | None = None) -> Pipeline:
        """An unfitted pipeline ``name`` with this index's parameters for it, ``overrides`` on top."""
        settings = self.settings.replace(**(run or {}))
        return pipeline_class(name)({**self.params.get(name, {}), **(overrides or {})}, settings=settings)

    def _fit(self, pipe: Pipeline) -> Pipeline:
        """``pipe`` fitted on this index's shared components."""
        if pipe.needs.embedder:
            self.components.embedder = self.embedder
        return pipe.fit(self.X, progress=self.progress, components=self.components)

    def set_params(self, params: Mapping[str, Mapping[str, Any]]) -> None:
        """Make ``params`` (``{pipeline: {name: value}}``, validated) the parameters that pipelines
        fitted from now on use; :meth:`sync_params` brings fitted ones to them. A changed ``"bm25"``
        entry applies to the BM25 component of every pipeline fitted from now on."""
        self.params = validate_params(params)
        self.components.bm25_params = self.components.bm25_params.create(self.params.get("bm25"))
        self._variants.clear()
        self._ops = None

    def sync_params(self, name: str) -> str:
        """Bring fitted pipeline ``name`` to the parameters a fresh fit would use now.

        Returns ``"current"`` (nothing to do), ``"updated"`` (only search defaults differed; applied
        without a refit) or ``"dropped"`` (fit parameters differed; the pipeline is removed and
        refitted on next use).
        """
        pipe = self.pipelines[name]
        expected = self._new_pipeline(name)
        if expected.fit_params != pipe.fit_params:
            del self.pipelines[name]
            return "dropped"
        if expected.search_defaults == pipe.search_defaults:
            return "current"
        updated = pipe.with_search_defaults()
        updated.search_defaults = expected.search_defaults
        self.pipelines[name] = updated
        return "updated"

"""The public façade: build, save, load and search a hopgraph index.

An :class:`Index` holds the corpus, X, the shared components (:mod:`hopgraph.engine.components.shared`)
and the fitted pipelines (SPEC §1-§3 and the baselines) with their parameters.
``Index.pipeline(name, **overrides)`` gives a validated variant: query-time overrides reuse the
fitted pipeline, fit-time ones fit a new instance over the same shared components. Storage:
:mod:`hopgraph.engine.storage` (format version 3: generations, a commit point, checksums).

Live updates (issue 13): :meth:`Index.add` embeds and appends passages and updates every
component and fitted pipeline; :meth:`Index.delete` tombstones passages (no search returns them
from then on); :meth:`Index.compact` rebuilds every structure exactly from the live passages
(no re-embedding); ``search(..., allowed_ids=, where=)`` filters (:mod:`hopgraph.engine.filters`).
:meth:`Index.save` writes the state as a new commit."""
from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from .engine import storage
from .engine.components.shared import Components
from .engine.components.corpus import Corpus
from .engine.embedders.core import (Embedder, embedder_entry, embedder_from_entry, encode_queries, resolve_embedder,
                                validate_embeddings)
from .engine.components.extraction import Extraction, extract
from .engine.pipelines.stitch.late_pooling import LateTexts, embed_with_texts
from .engine.errors import DuplicateIdError, IndexFormatError, InputError
from .engine.filters import MetadataIndex, filter_mask
from .engine.params import PipelineParams
from .engine.pipelines import Pipeline, pipeline_class

DEFAULT_PIPELINES = ("dense", "bm25", "g3rag")


@dataclass(frozen=True)
class AddReport:
    """What :meth:`Index.add` did: the ids appended, those of them that replaced a passage
    (``upsert=True``), and the seconds spent embedding and updating."""

    added: list[str]
    replaced: list[str]
    embed_seconds: float
    update_seconds: float


@dataclass(frozen=True)
class DeleteReport:
    """What :meth:`Index.delete` did: ids now deleted, and ids the index does not hold (never
    added, or already deleted)."""

    deleted: list[str]
    unknown: list[str]


@dataclass(frozen=True)
class Hit:
    """One retrieved passage: its corpus id, score, rank (from 1), title, text and metadata.

    ``text`` is the passage text, or None when the search was asked not to return it
    (``with_text=False``); ``metadata`` is the corpus record's metadata object (``{}`` for
    none; see :meth:`hopgraph.Corpus.meta`), always filled. Hits are frozen; ``metadata`` is a
    plain dict and takes no part in hashing.
    """

    id: str
    score: float
    rank: int
    title: str = ""
    text: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict, hash=False)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Index:
    """A corpus, its embeddings, the shared components and the fitted pipelines over them.

    Build with :meth:`build`, persist with :meth:`save` / :meth:`load`, query with
    :meth:`search`. Pipelines not fitted at build time are fitted on first use. Every
    pipeline uses the index's one set of components (:mod:`hopgraph.engine.components.shared`):
    one corpus store, one dense index, one BM25 index (with ``params["bm25"]``), one
    extraction.
    """

    def __init__(self, corpus: Corpus, X: np.ndarray, embedder: Embedder | None, embedder_name: str,
                 device: str = "auto", params: Mapping[str, Mapping[str, Any]] | None = None,
                 progress: bool = True, components: Components | None = None) -> None:
        self.corpus = corpus
        self.X = X
        self._embedder = embedder
        self.embedder_name = embedder_name
        #: the manifest's ``embedder`` entry (name, dim, spec[, prompts]) when loaded, for lazy resolution
        self.embedder_entry: dict[str, Any] | None = None
        self.device = device
        self.params: dict[str, dict[str, Any]] = validate_params(params)
        self.progress = progress
        self.components = components if components is not None else \
            Components(X, corpus, embedder, self.params.get("bm25"), progress)
        self.pipelines: dict[str, Pipeline] = {}
        self._variants: dict[str, Pipeline] = {}
        self.fit_seconds: dict[str, float] = {}
        self.embed_seconds = 0.0
        self.path: Path | None = None
        self._manifest: dict[str, Any] | None = None
        self._lease: storage.Lease | None = None
        self._metadata: MetadataIndex | None = None

    # ------------------------------------------------------------------ build
    @classmethod
    def build(cls, corpus: Corpus | str | Path | Sequence, embedder: Embedder | Callable | str | None = None,
              embeddings: np.ndarray | str | Path | None = None, device: str = "auto",
              pipelines: Sequence[str] = DEFAULT_PIPELINES,
              params: Mapping[str, Mapping[str, Any]] | None = None,
              progress: bool = True, batch_size: int = 64, work_dir: str | Path | None = None,
              resume: bool = False, ray_address: str | None = None, chunk_tokens: int | None = None,
              chunk_overlap: int = 0) -> "Index":
        """Embed ``corpus`` (or take precomputed ``embeddings``) and fit ``pipelines``.

        ``params`` maps a pipeline name to its constructor parameters. ``embeddings``
        may be an array, a ``.npy`` file or a folder of ``.npy`` shards (ids alongside,
        see :mod:`hopgraph.engine.ingest.precomputed`). With ``work_dir``, embeddings are written
        batch by batch to a memory-mapped file there and ``resume=True`` continues an
        interrupted build (:mod:`hopgraph.engine.ingest.streaming`). ``ray_address`` runs
        embedding and the gain-kNN row blocks on a Ray cluster
        (:mod:`hopgraph.engine.distributed`); the index is the same. ``chunk_tokens`` splits each
        document into passages of that many words, ``chunk_overlap`` shared
        (:func:`hopgraph.engine.ingest.chunking.chunk_corpus`: ids ``DOCID#k``, metadata ``{"document",
        "chunk"}``). Passages longer than the embedder's maximum input give a
        :class:`~hopgraph.engine.ingest.chunking.PassageLengthWarning`.
        """
        from .engine import distributed
        from .engine.ingest import chunking, streaming
        from .engine.ingest import precomputed as shards
        from .kernels.dispatch import DEVICES

        if isinstance(pipelines, str) or not all(isinstance(p, str) for p in pipelines):
            raise InputError(f"pipelines must be a list of pipeline names, got {pipelines!r}")
        for p in pipelines:  # unknown names fail now, not after the corpus is embedded
            pipeline_class(p)
        if device not in DEVICES:
            raise InputError(f"device must be one of {DEVICES}, got {device!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InputError(f"batch_size must be a positive integer, got {batch_size!r}")
        corpus = Corpus.coerce(corpus)
        if chunk_tokens is not None:
            if embeddings is not None:
                raise InputError("chunk_tokens and precomputed embeddings exclude each other: the embeddings' "
                                 "rows are the unchunked passages")
            corpus = chunking.chunk_corpus(corpus, chunk_tokens, chunk_overlap)
        if work_dir is not None:
            streaming.check_work_dir(work_dir)
        t0 = time.perf_counter()
        adopted = None
        if embeddings is not None:
            if isinstance(embeddings, (str, Path)):
                X = shards.open_embeddings(embeddings, corpus.ids, work_dir, progress=progress)
                name = f"precomputed:{Path(embeddings).name}"
            else:
                X = validate_embeddings(np.asarray(embeddings), "precomputed embeddings")
                name = "precomputed"
            if len(X) != len(corpus):
                raise InputError(f"embeddings have {len(X)} rows but the corpus has {len(corpus)} passages")
            emb = resolve_embedder(embedder) if embedder is not None else None
            if emb is not None and emb.dim != X.shape[1]:
                raise InputError(f"embedder {emb.name} has dimension {emb.dim}, embeddings have {X.shape[1]}")
            name = emb.name if emb is not None else name
        elif work_dir is not None or ray_address is not None:
            emb = resolve_embedder(embedder)
            chunking.warn_long_passages(corpus, emb)
            X = streaming.embed_corpus(corpus, emb, work_dir if work_dir is not None else _scratch_dir(),
                                       batch_size, resume=resume, progress=progress, ray_address=ray_address)
            name = emb.name
        else:
            emb = resolve_embedder(embedder)
            chunking.warn_long_passages(corpus, emb)
            X, adopted = _embed_passages(corpus, emb, pipelines, validate_params(params or {}), batch_size, progress)
            name = emb.name
        index = cls(corpus, X, emb, name, device=device, params=params, progress=progress)
        index.embed_seconds = time.perf_counter() - t0
        if adopted is not None:
            index.components.adopt_extraction(*adopted)
        if work_dir is not None:
            index.components.work_dir = Path(work_dir)
        with distributed.ray_cluster(ray_address):
            for p in pipelines:
                index.pipeline(p)
        return index

    # ------------------------------------------------------------------ pipelines
    @property
    def embedder(self) -> Embedder:
        """The query embedder; re-created from the manifest's embedder spec on first use after
        :meth:`load` (an InputError naming ``embedder=`` when it cannot be, e.g. a callable)."""
        if self._embedder is None:
            entry = self.embedder_entry or {"name": self.embedder_name, "dim": int(self.X.shape[1])}
            self._embedder = embedder_from_entry(entry, f"index {self.path or ''}".rstrip())
            self.components.embedder = self._embedder
        return self._embedder

    def pipeline(self, name: str, **overrides: Any) -> Pipeline:
        """The fitted pipeline ``name`` (fitted now with ``self.params[name]`` if needed).

        ``overrides`` give a variant (e.g. for ablations), validated like every parameter
        (an invalid value raises ``InvalidParameter`` naming it): query-time parameters reuse
        the fitted base pipeline, others fit a separate instance over the same components.
        Variants are cached in memory under ``variant_key(name, overrides)`` and are not saved.
        """
        if overrides:
            key = variant_key(name, overrides)
            if key not in self._variants:
                cls = pipeline_class(name)
                cls.Params.create(self._pipeline_params(cls)).replace(**overrides)  # invalid: raise before a fit
                base = self.pipeline(name)
                params = base.params.replace(**overrides)
                if base.params.changed(params) <= base.Params.query_names():
                    self._variants[key] = base.with_params(params)
                else:
                    self._variants[key] = self._fit(type(base), params)
            return self._variants[key]
        if name not in self.pipelines:
            cls = pipeline_class(name)
            t0 = time.perf_counter()
            self.pipelines[name] = self._fit(cls, self._pipeline_params(cls))
            self.fit_seconds[name] = time.perf_counter() - t0
        return self.pipelines[name]

    def _fit(self, cls: type[Pipeline], params: PipelineParams | dict[str, Any]) -> Pipeline:
        """A new ``cls(params)`` fitted on this index's shared components."""
        if cls.needs_embedder:
            self.components.embedder = self.embedder
        return cls(params).fit(self.X, progress=self.progress, components=self.components)

    def set_params(self, params: Mapping[str, Mapping[str, Any]]) -> None:
        """Make ``params`` (``{pipeline: {name: value}}``, validated) the parameters that pipelines
        fitted from now on use; :meth:`sync_params` brings fitted ones to them. A changed ``"bm25"``
        entry applies to the BM25 component of every pipeline fitted from now on."""
        self.params = validate_params(params)
        self.components.bm25_params = self.components.bm25_params.create(self.params.get("bm25"))
        self._variants.clear()

    def sync_params(self, name: str) -> str:
        """Bring fitted pipeline ``name`` to the parameters a fresh fit would use now.

        Returns ``"current"`` (nothing to do), ``"updated"`` (only query-time parameters
        differed; applied without a refit) or ``"dropped"`` (fit-time parameters differed;
        the pipeline is removed and refitted on next use).
        """
        pipe = self.pipelines[name]
        expected = pipe.Params.create(self._pipeline_params(type(pipe)))
        changed = pipe.params.changed(expected)
        if not changed:
            return "current"
        if changed <= pipe.Params.query_names():
            self.pipelines[name] = pipe.with_params(expected)
            return "updated"
        del self.pipelines[name]
        return "dropped"

    def _pipeline_params(self, cls: type[Pipeline]) -> dict[str, Any]:
        params = dict(self.params.get(cls.name, {}))
        if "device" in cls.Params.names() and "device" not in params:
            params["device"] = self.device
        return params

    # ------------------------------------------------------------------ search
    def embed_queries(self, questions: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Query embeddings ``[B, d]``; ``batch_size`` texts per embedder forward pass."""
        return encode_queries(self.embedder, list(questions), batch_size=batch_size, progress=False)

    def search_arrays(self, questions: str | Sequence[str | np.ndarray] | np.ndarray, pipeline: str = "g3rag",
                      k: int = 5, query_embeddings: np.ndarray | None = None, *,
                      embed: Callable[[list[str]], np.ndarray] | None = None, group_by_document: bool = False,
                      allowed_ids: Sequence[str] | None = None, where: Mapping[str, Any] | None = None,
                      **overrides: Any) -> tuple[np.ndarray, np.ndarray]:
        """Like :meth:`search` but returns the raw ``(rows int64 [B,k], scores float32 [B,k])``.

        ``questions`` may also mix question strings and 1-D embedding rows (the pipeline then
        gets no texts); ``embed`` (default :meth:`embed_queries`) embeds the strings, in one call.
        """
        allowed = self.filter_mask(allowed_ids, where)
        pipe = self.pipeline(pipeline, **overrides)
        texts, Q = self._queries(questions, query_embeddings, embed)
        if group_by_document:
            from .engine.ingest.chunking import group_by_document as group

            return group(lambda depth: pipe.search(Q, top_k=depth, query_texts=texts, allowed=allowed),
                         self.corpus, k)
        return pipe.search(Q, top_k=k, query_texts=texts, allowed=allowed)

    def filter_mask(self, allowed_ids: Sequence[str] | None = None,
                    where: Mapping[str, Any] | None = None) -> np.ndarray | None:
        """The rows a search with these filters may return (bool [N]; None: no filter), see
        :mod:`hopgraph.engine.filters`. Deleted passages are excluded by every search anyway."""
        if allowed_ids is None and where is None:
            return None
        if self._metadata is None:
            self._metadata = MetadataIndex(self.corpus)
        return filter_mask(self.corpus, self._metadata, allowed_ids, where, self.components.deleted)

    def search(self, questions: str | Sequence[str] | np.ndarray, pipeline: str = "g3rag", k: int = 5,
               query_embeddings: np.ndarray | None = None, *, with_text: bool = True,
               group_by_document: bool = False, allowed_ids: Sequence[str] | None = None,
               where: Mapping[str, Any] | None = None, **overrides: Any) -> list[list[Hit]]:
        """Top-``k`` passages for each question (texts, or a ``[B, d]`` embedding matrix).

        Filters (:mod:`hopgraph.engine.filters`): ``allowed_ids`` (passage ids) and ``where``
        (``{metadata field: value or list of values}``) restrict the passages returned, and ``k``
        of them come back whenever ``k`` pass: every pipeline draws its candidates and seeds
        under the filter and masks its final ranking (a graph walk may pass through filtered
        passages). Deleted passages (:meth:`delete`) are never returned.

        ``overrides`` select a variant of the pipeline (see :meth:`pipeline`). With
        ``group_by_document=True`` each document (a chunked corpus's ``"document"`` metadata, see
        :meth:`build`'s ``chunk_tokens``) appears once, as its best passage, and ``k`` documents come
        back when the corpus has them (the pipeline is searched deeper as needed).
        Returns one list of :class:`Hit` per question, best first, with each passage's text
        (``with_text=False``: ``Hit.text`` is None, the texts are not read) and metadata.
        """
        ids, scores = self.search_arrays(questions, pipeline, k, query_embeddings,
                                         group_by_document=group_by_document, allowed_ids=allowed_ids,
                                         where=where, **overrides)
        return self.hits(ids, scores, with_text=with_text)

    def hits(self, ids: np.ndarray, scores: np.ndarray, with_text: bool = True) -> list[list[Hit]]:
        """Turn a pipeline's ``(rows [B,k], scores [B,k])`` into :class:`Hit` lists (padding dropped).

        Only the hit rows are read from the corpus store (memory-mapped once saved): id, title,
        metadata and, with ``with_text``, the text.
        """
        corpus = self.corpus
        return [
            [Hit(corpus.ids[j], float(s), r + 1, corpus.titles[j], corpus.texts[j] if with_text else None,
                 corpus.meta(j))
             for r, (j, s) in enumerate(zip(row_ids.tolist(), row_scores.tolist())) if j >= 0]
            for row_ids, row_scores in zip(np.asarray(ids), np.asarray(scores))
        ]

    def passage(self, pid: str) -> dict[str, Any]:
        """``{"id", "title", "text", "metadata"}`` of passage ``pid`` (read from the corpus store);
        KeyError naming the id if the index has no such passage."""
        row = self.corpus.position(pid)
        if self.components.deleted is not None and self.components.deleted[row]:
            raise KeyError(f"passage id {pid!r} was deleted from index {self.path or '<memory>'}")
        return {"id": self.corpus.ids[row], "title": self.corpus.titles[row], "text": self.corpus.texts[row],
                "metadata": self.corpus.meta(row)}

    # ------------------------------------------------------------------ live updates
    @property
    def n_live(self) -> int:
        """Passages a search may return (all rows minus the deleted ones)."""
        deleted = self.components.deleted
        return len(self.X) - (int(deleted.sum()) if deleted is not None else 0)

    def add(self, records: Corpus | str | Path | Sequence, *, upsert: bool = False,
            embeddings: np.ndarray | None = None, batch_size: int = 64, chunk_tokens: int | None = None,
            chunk_overlap: int = 0) -> AddReport:
        """Append passages (what :meth:`build` accepts: records ``{"id", "title", "text",
        "metadata"}``, strings, a Corpus or a corpus path) without rebuilding the index.

        Only the new passages are embedded (with the index's embedder, or ``embeddings`` given
        for them). Every built component and fitted pipeline is updated: dense and BM25 exactly
        as a build from scratch of the grown corpus would be; the graph pipelines incrementally
        (each pipeline's ``add`` says what stays approximate until :meth:`compact`). An id the
        index already holds raises :class:`InputError` naming it, unless ``upsert=True``, which
        deletes the old passage and appends the new one. Everything is checked before anything
        changes. In memory only until :meth:`save`.
        """
        from .engine.ingest import chunking

        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InputError(f"batch_size must be a positive integer, got {batch_size!r}")
        new = Corpus.coerce(records)
        if chunk_tokens is not None:
            new = chunking.chunk_corpus(new, chunk_tokens, chunk_overlap)
        deleted = self.components.deleted
        existing = []
        for pid in new.ids:
            try:
                row = self.corpus.position(pid)
            except KeyError:
                continue
            if deleted is None or not deleted[row]:
                existing.append((pid, row))
        if existing and not upsert:
            more = f" (and {len(existing) - 5} more)" if len(existing) > 5 else ""
            raise DuplicateIdError(f"{new.source}: passage id(s) already in the index: "
                             f"{', '.join(repr(p) for p, _ in existing[:5])}{more} (upsert=True, or --upsert, replaces them)")
        dim = int(self.X.shape[1])
        t0 = time.perf_counter()
        if embeddings is not None:
            X_new = validate_embeddings(np.asarray(embeddings), "embeddings of the added passages", dim=dim)
            if len(X_new) != len(new):
                raise InputError(f"embeddings have {len(X_new)} rows for {len(new)} added passages")
        else:
            X_new = self.embedder.encode(new.embedding_texts(), batch_size=batch_size, progress=self.progress)
            X_new = validate_embeddings(np.asarray(X_new), f"embeddings of {new.source}", dim=dim)
        embed_seconds = time.perf_counter() - t0
        t0 = time.perf_counter()
        start = len(self.X)
        X = np.ascontiguousarray(np.concatenate([np.asarray(self.X, np.float32), X_new]))
        corpus = self.corpus.concat(new)
        self.components.extend(X, corpus, start)
        self.X, self.corpus, self._metadata = X, corpus, None
        if existing:
            self._tombstone([row for _, row in existing])
        for pipe in self.pipelines.values():
            pipe.add(start, progress=self.progress)
        self._variants.clear()
        return AddReport(list(new.ids), [p for p, _ in existing], embed_seconds, time.perf_counter() - t0)

    def delete(self, ids: Sequence[str] | str) -> DeleteReport:
        """Delete passages: from now on no search returns them (tombstones; the structures drop
        them at :meth:`compact`). Ids the index does not hold are reported, not raised."""
        if isinstance(ids, str):
            ids = [ids]
        deleted, unknown, rows = [], [], []
        current = self.components.deleted
        for pid in ids:
            if not isinstance(pid, str):
                raise InputError(f"passage ids are strings, got {type(pid).__name__} {pid!r}")
            try:
                row = self.corpus.position(pid)
            except KeyError:
                unknown.append(pid)
                continue
            if (current is not None and current[row]) or row in rows:
                unknown.append(pid)
                continue
            deleted.append(pid)
            rows.append(row)
        self._tombstone(rows)
        return DeleteReport(deleted, unknown)

    def _tombstone(self, rows: Sequence[int]) -> None:
        if not len(rows):
            return
        if self.components.deleted is None:
            self.components.deleted = np.zeros(len(self.X), bool)
        self.components.deleted[np.asarray(rows, np.int64)] = True

    def compact(self) -> "Index":
        """Drop the deleted passages and rebuild every component and fitted pipeline exactly from
        the live ones (their embeddings are kept, nothing is re-embedded): the result equals a build
        from scratch of the live corpus. In memory only until :meth:`save`; returns self."""
        deleted = self.components.deleted
        if deleted is not None and deleted.all():
            raise InputError("compact: every passage is deleted; an index needs at least one")
        if deleted is not None and deleted.any():
            live = np.flatnonzero(~deleted)
            self.corpus = self.corpus.take(live)
            self.X = np.ascontiguousarray(np.asarray(self.X)[live])
        self._metadata = None
        self.components = Components(self.X, self.corpus, self._embedder, self.params.get("bm25"), self.progress)
        old = self.pipelines
        self.pipelines, self._variants = {}, {}
        for name, pipe in old.items():
            t0 = time.perf_counter()
            self.pipelines[name] = self._fit(type(pipe), pipe.params)
            self.pipelines[name].carry_state(pipe)
            self.fit_seconds[name] = time.perf_counter() - t0
        return self

    def _queries(self, questions, query_embeddings, embed: Callable[[list[str]], np.ndarray] | None = None
                 ) -> tuple[list[str] | None, np.ndarray]:
        """(texts or None, validated Q [B, d]) of a batch of questions (see :meth:`search_arrays`)."""
        dim = self.X.shape[1]
        if isinstance(questions, str):
            questions = [questions]
        if questions is None or isinstance(questions, (bytes, Mapping)) or not hasattr(questions, "__iter__"):
            raise InputError("questions must be a string, a list of strings and 1-D embeddings, or a [B, d] "
                             f"float array, got {type(questions).__name__}")
        if isinstance(questions, np.ndarray) and questions.dtype.kind == "f":
            return None, validate_embeddings(questions if questions.ndim == 2 else questions[None, :],
                                             "query embeddings", dim=dim)
        items = list(questions)
        text_rows = []
        for i, t in enumerate(items):
            if isinstance(t, str):
                if not t.strip():
                    raise InputError(f"question {i} must be a non-empty string, got {t!r}")
                text_rows.append(i)
            elif not (isinstance(t, np.ndarray) and t.ndim == 1 and t.dtype.kind == "f"):
                raise InputError(f"question {i} must be a non-empty string or a 1-D float embedding, "
                                 f"got {type(t).__name__}")
        texts = [items[i] for i in text_rows]
        if query_embeddings is not None:
            if len(texts) != len(items):
                raise InputError("query_embeddings are given for question texts only, not embedding rows")
            Q = validate_embeddings(np.asarray(query_embeddings), "query embeddings", dim=dim)
            if len(Q) != len(texts):
                raise InputError(f"{len(Q)} query embeddings for {len(texts)} questions")
            return texts, Q
        embedded = (embed or self.embed_queries)(texts) if texts else np.zeros((0, dim), np.float32)
        if len(texts) == len(items):
            return texts, validate_embeddings(np.asarray(embedded), "query embeddings", dim=dim)
        Q = np.empty((len(items), dim), np.float32)
        Q[text_rows] = embedded
        for i, row in enumerate(items):
            if not isinstance(row, str):
                if len(row) != dim:
                    raise InputError(f"question {i}: embedding has dimension {len(row)}, the index has {dim}")
                Q[i] = row
        return None, validate_embeddings(Q, "query embeddings", dim=dim)

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | Path | None = None, overwrite: bool = False) -> Path:
        """Write the index to ``path`` as a new generation and commit it atomically (format version 3,
        :mod:`hopgraph.engine.storage`): the corpus store, X and the shared components once, then each
        pipeline's own arrays, every file checksummed in the manifest.

        ``path`` must not exist, be empty, or be a hopgraph index directory; an existing index is
        replaced only with ``overwrite=True`` (readers of the old one keep it until they close).
        Without ``path`` the index commits a new generation of itself to the path it was loaded
        from or last saved to, e.g. after :meth:`add` / :meth:`delete`.
        Another process writing to ``path`` gives an :class:`IndexLockedError`."""
        if path is None:
            if self.path is None:
                raise InputError("save: this index has no path yet; give one")
            path, overwrite = self.path, True
        path = Path(path)
        with storage.IndexWriter(path, overwrite) as w:
            tmp = w.dir
            self.corpus.save(tmp / "corpus")
            files = {"embeddings": storage.save_array(tmp, "embeddings", self.X)}
            deleted = self.components.deleted
            if deleted is not None and deleted.any():
                files["deleted_rows"] = storage.save_array(tmp, "deleted_rows", np.flatnonzero(deleted))
            components = self.components.save(tmp / "components")
            pipes = {}
            for name, pipe in self.pipelines.items():
                pdir = tmp / "pipelines" / name
                pdir.mkdir(parents=True)
                pipe.save(pdir)
                pipes[name] = {"params": pipe.get_params(), "fit_seconds": self.fit_seconds.get(name, 0.0)}
            w.manifest = storage.new_manifest(
                corpus={"n_passages": len(self.corpus), "checksum": self.corpus.checksum,
                        "source": self.corpus.source},
                embedder=embedder_entry(self._embedder, self.embedder_name, int(self.X.shape[1])),
                embed_seconds=self.embed_seconds,
                files=files,
                components=components,
                pipelines=pipes,
                params=self.params,
            )
        self.path = path
        self._manifest = None
        return path

    @classmethod
    def load(cls, path: str | Path, embedder: Embedder | Callable | str | None = None, device: str = "auto",
             progress: bool = True, verify: str = "full") -> "Index":
        """Open the live generation of a saved index (arrays memory-mapped).

        ``verify="full"`` (default) checks the size and checksum of every file; ``"fast"`` checks
        sizes only (for very large indexes; ``hopgraph verify`` does the full check). Either way
        every stored array is checked structurally (index ranges, CSR offsets, finite unit
        embeddings, ...), so a corrupt index raises :class:`IndexFormatError` naming the file —
        as do missing files or manifest keys and indexes of another format version (with the
        command that rebuilds them). An ``embedder`` other than the one the index was built with
        raises :class:`InputError`. The loaded index holds a lease on its generation, so a writer
        replacing the index does not remove the files it reads."""
        path = Path(path)
        if verify not in storage.VERIFY_LEVELS:
            raise InputError(f"verify must be one of {storage.VERIFY_LEVELS}, got {verify!r}")
        gen, manifest, lease = storage.open_index(path)
        try:
            index = cls._open(path, gen, manifest, embedder, device, progress, verify)
        except BaseException:
            lease.close()
            raise
        index._lease = lease
        return index

    @classmethod
    def _open(cls, path: Path, gen: Path, manifest: dict[str, Any], embedder: Embedder | Callable | str | None,
              device: str, progress: bool, verify: str) -> "Index":
        """:meth:`load` of the generation directory ``gen`` with its checked ``manifest``."""
        problems = storage.verify_files(gen, manifest, verify)
        if problems:
            more = f" (and {len(problems) - 1} more: hopgraph verify {path})" if len(problems) > 1 else ""
            raise IndexFormatError(f"index {path} is corrupt: {problems[0]}{more}")
        mpath = gen / storage.MANIFEST
        try:
            meta, emb_meta = manifest["corpus"], manifest["embedder"]
            n, checksum = int(meta["n_passages"]), str(meta["checksum"])
            emb_name, dim = str(emb_meta["name"]), int(emb_meta["dim"])
            x_entry, entries = manifest["files"]["embeddings"], manifest["pipelines"]
            params, comp_entry = manifest.get("params") or {}, manifest.get("components") or {}
            pipe_params = {name: dict(entry["params"]) for name, entry in entries.items()}
            fit_seconds = {name: float(entry.get("fit_seconds", 0.0)) for name, entry in entries.items()}
            params = validate_params(params)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise IndexFormatError(f"{mpath}: missing or invalid entry {e}") from None
        corpus = Corpus.load(gen / "corpus", n, str(path / "corpus"), checksum)
        X = storage.check_array(gen, x_entry)
        storage.check_unit_rows(X, str(gen / "embeddings.npy"), rows=n, dim=dim)
        for recorded in {emb_name, str(emb_meta.get("spec") or emb_name)}:
            _check_embedder_name(mpath, recorded, dim)
        emb = resolve_embedder(embedder) if embedder is not None else None
        if emb is not None and emb.dim != dim:
            raise IndexFormatError(f"index {path} has dimension {dim}; embedder {emb.name} has {emb.dim}")
        if emb is not None and emb.name != emb_name and not emb_name.startswith("precomputed"):
            raise InputError(f"index {path} was built with embedder {emb_name!r}; queries embedded with "
                             f"{emb.name!r} would not match its passages (give embedder={emb_name!r} or none)")
        components = Components.load(gen / "components", comp_entry, X, corpus, emb, params.get("bm25"), progress)
        if "deleted_rows" in manifest["files"]:
            rows = storage.check_ids(storage.check_array(gen, manifest["files"]["deleted_rows"]), n,
                                     str(gen / "deleted_rows.npy"))
            components.deleted = np.zeros(n, bool)
            components.deleted[rows] = True
        index = cls(corpus, X, emb, emb_name, device=device, params=params, progress=progress,
                    components=components)
        index.embed_seconds = float(manifest.get("embed_seconds", 0.0) or 0.0)
        index.embedder_entry = dict(emb_meta)
        for name, params_ in pipe_params.items():
            pdir = gen / "pipelines" / name
            if not pdir.is_dir():
                raise IndexFormatError(f"index {path}: pipeline directory {pdir} is missing")
            if "device" in params_:
                params_["device"] = device
            try:
                index.pipelines[name] = pipeline_class(name).load(pdir, params_, components)
            except IndexFormatError:
                raise
            except (InputError, KeyError, TypeError, ValueError, IndexError, OSError, RuntimeError) as e:
                raise IndexFormatError(f"index {path}: pipeline {name} ({pdir}) is corrupt or unreadable: "
                                       f"{type(e).__name__}: {e}") from None
            index.fit_seconds[name] = fit_seconds[name]
        index.path = path
        index._manifest = manifest
        return index

    @classmethod
    @contextlib.contextmanager
    def updating(cls, path: str | Path, **load_kwargs: Any) -> Iterator["Index"]:
        """Load the index at ``path`` under its write lock, yield it for :meth:`add` / :meth:`delete`
        / :meth:`compact`, and commit it as a new generation when the block ends without an
        exception (with one, nothing is written: the index stays as it was). A second writer
        meanwhile gets :class:`IndexLockedError` instead of losing one of the two updates.
        ``path`` must be a hopgraph index (nothing is created)."""
        path = Path(path)
        if not storage.has_index(path):
            raise InputError(f"{path} is not a hopgraph index" + ("" if path.exists() else " (it does not exist)"))
        with storage.TargetGuard(path, overwrite=True):
            index = cls.load(path, **load_kwargs)
            try:
                yield index
                index.save()
            finally:
                index.close()

    def close(self) -> None:
        """Release the lease on the loaded generation (its files may then be removed by a writer)."""
        if self._lease is not None:
            self._lease.close()
            self._lease = None

    @property
    def manifest(self) -> dict[str, Any]:
        """The manifest of the generation this index was loaded from or last saved to."""
        if self.path is None:
            raise RuntimeError("this index has not been saved")
        if self._manifest is None:
            self._manifest = storage.read_manifest(self.path)
        return self._manifest


def _check_embedder_name(manifest: Path, name: str, dim: int) -> None:
    """A built-in embedder named in a manifest must have the recorded dimension (checked without
    loading the model); other names (precomputed, callables) are taken as they are."""
    from .engine.embedders.core import DEFAULT_EMBEDDER, MiniLMEmbedder

    expected = None
    if name.lower() in ("minilm", DEFAULT_EMBEDDER.lower()):
        expected = MiniLMEmbedder.dim
    elif name.startswith("hashing"):
        try:
            expected = resolve_embedder(name).dim
        except InputError:
            raise IndexFormatError(f"{manifest}: unknown embedder {name!r}") from None
    if expected is not None and expected != dim:
        raise IndexFormatError(f"{manifest}: embedder {name!r} has dimension {expected}, the manifest says {dim}")


def _embed_passages(corpus: Corpus, emb: Embedder, pipelines: Sequence[str],
                    params: Mapping[str, Mapping[str, Any]], batch_size: int, progress: bool
                    ) -> tuple[np.ndarray, tuple[tuple[bool, bool], Extraction, LateTexts | None] | None]:
    """The passages' embeddings, and — when one of ``pipelines`` late-chunks its topic/description
    texts (``Pipeline.late_text_key``) — the extraction it uses with those texts pooled in the same
    forward pass (:func:`~hopgraph.engine.pipelines.stitch.late_pooling.embed_with_texts`: no passage runs through the
    model twice; ``None`` texts when the embedder is not a model that can give them)."""
    keys = [k for k in (pipeline_class(p).late_text_key(dict(params.get(p, {}))) for p in pipelines) if k]
    adopted = None
    if keys:
        ex = extract(corpus, *keys[0], progress=progress)
        both = embed_with_texts(ex, corpus.embedding_texts(), emb, progress=progress)
        if both is not None:
            return both[0], (keys[0], ex, both[1])
        adopted = (keys[0], ex, None)
    return emb.encode(corpus.embedding_texts(), batch_size=batch_size, progress=progress), adopted


def _scratch_dir() -> Path:
    """A fresh temporary work directory (for a Ray build without ``work_dir``)."""
    import tempfile

    return Path(tempfile.mkdtemp(prefix="hopgraph-work-")) / "work"


def validate_params(params: Mapping[str, Mapping[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """Index parameters ``{pipeline: {name: value}}`` checked against each pipeline's parameter
    dataclass (unknown pipelines, unknown names and bad values raise, naming them)."""
    out: dict[str, dict[str, Any]] = {}
    for name, values in (params or {}).items():
        if not isinstance(values, Mapping):
            raise InputError(f"params[{name!r}] must be a mapping of parameter names to values")
        pipeline_class(name).Params.create(values)
        out[name] = dict(values)
    return out


def variant_key(name: str, overrides: Mapping[str, Any]) -> str:
    """``name[key=value,...]`` with keys sorted: the label of a pipeline variant."""
    return f"{name}[{','.join(f'{k}={overrides[k]!r}' for k in sorted(overrides))}]"


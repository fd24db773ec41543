"""Live updates of an index in memory: add, delete, compact (committed by ``save``)."""
from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

from ..engine.components.corpus import Corpus
from ..engine.components.shared import Components
from ..engine.embedders import validate_embeddings
from ..engine.storage import stack_rows
from ..engine.errors import DuplicateIdError, InputError
from .reports import AddReport, DeleteReport

if TYPE_CHECKING:
    from .index import Index


class IndexLive:
    """The live updates of :class:`~hopgraph.index.Index`."""

    def __len__(self) -> int:
        """``len(index)``: the passages a search may return (:attr:`n_live`)."""
        return self.n_live

    @property
    def n_live(self) -> int:
        """Passages a search may return (all rows minus the deleted ones)."""
        deleted = self.components.deleted
        return len(self.X) - (int(deleted.sum()) if deleted is not None else 0)

    def add(self, records: Corpus | str | Path | Sequence, *, upsert: bool = False,
            embeddings: np.ndarray | None = None, batch_size: int = 64, chunk_tokens: int | None = None,
            chunk_overlap: int = 0) -> AddReport:
        """Append passages (what :meth:`~hopgraph.index.Index.build` accepts: records ``{"id", "title", "text",
        "metadata"}``, strings, a Corpus or a corpus path) without rebuilding the index.

        Only the new passages are embedded (with the index's embedder, or ``embeddings`` given
        for them); when a fitted pipeline late-chunks extraction texts (STITCH), the new texts are
        pooled in the new passages' own forward pass, as in ``Index.build`` (that pass runs the
        build's passages a pass; ``batch_size`` is the embedder's batch when it embeds the passages
        alone). Every built component and fitted pipeline is updated: dense and BM25 exactly
        as a build from scratch of the grown corpus would be; the graph pipelines incrementally
        (each pipeline's ``add`` says what stays approximate until :meth:`~hopgraph.index.Index.compact`). An id the
        index already holds raises :class:`InputError` naming it, unless ``upsert=True``, which
        deletes the old passage and appends the new one. Everything is checked before anything
        changes. In memory only until :meth:`~hopgraph.index.Index.save`.
        """
        from ..engine.ingest import chunking

        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InputError(f"batch_size must be a positive integer, got {batch_size!r}")
        new = Corpus.coerce(records)
        if chunk_tokens is not None:
            new = chunking.chunk_corpus(new, chunk_tokens, chunk_overlap, self.embedder)
        existing = self._existing(new, upsert)
        dim = int(self.X.shape[1])
        t0 = time.perf_counter()
        extended = None
        if embeddings is not None:
            X_new = validate_embeddings(np.asarray(embeddings), "embeddings of the added passages", dim=dim)
            if len(X_new) != len(new):
                raise InputError(f"embeddings have {len(X_new)} rows for {len(new)} added passages")
        else:
            X_new, extended = self._embed_pooled(new, batch_size)
        embed_seconds = time.perf_counter() - t0
        t0 = time.perf_counter()
        self._append(new, X_new, [row for _, row in existing], extended)
        if self._ops is not None:
            self._ops.append(("add", new, X_new, upsert))
        return AddReport(list(new.ids), [p for p, _ in existing], embed_seconds, time.perf_counter() - t0)

    def check_add(self, records: Corpus | str | Path | Sequence, *, upsert: bool = False) -> Corpus:
        """The checks of :meth:`add` that need no embedding, changing nothing: ``records`` as a Corpus
        (:class:`InputError` naming a bad record) holding an id of a live passage only with ``upsert``
        (:class:`DuplicateIdError` naming them). Reads only the id tables: a server refuses a write
        with it before the write enters its write path."""
        new = Corpus.coerce(records)
        if not upsert:
            self._existing(new, upsert)
        return new

    def live_rows(self, ids: Sequence[str]) -> list[tuple[str, int]]:
        """``(id, row)`` of each of ``ids`` that a live passage has (deleted and unknown ids left out)."""
        deleted = self.components.deleted
        found = []
        for pid in ids:
            try:
                row = self.corpus.position(pid)
            except KeyError:
                continue
            if deleted is None or not deleted[row]:
                found.append((pid, row))
        return found

    def _existing(self, new: Corpus, upsert: bool) -> list[tuple[str, int]]:
        """:meth:`live_rows` of ``new``'s ids; :class:`DuplicateIdError` naming them unless ``upsert``."""
        existing = self.live_rows(new.ids)
        if existing and not upsert:
            more = f" (and {len(existing) - 5} more)" if len(existing) > 5 else ""
            raise DuplicateIdError(f"{new.source}: passage id(s) already in the index: "
                                   f"{', '.join(repr(p) for p, _ in existing[:5])}{more} (upsert=True, or --upsert, "
                                   "replaces them)")
        return existing

    def _append(self, new: Corpus, X_new: np.ndarray, replaced: Sequence[int], extended=None) -> None:
        """Append the checked passages ``new`` with their embeddings, tombstone the ``replaced`` rows
        and update every component and pipeline (the update half of :meth:`add`); ``extended``: an
        extraction already extended to them, with its new texts' late-chunked embeddings
        (:meth:`_embed_pooled`)."""
        start = len(self.X)
        X = stack_rows([self.X, np.ascontiguousarray(X_new, np.float32)])
        corpus = self.corpus.concat(new)
        self.components.extend(X, corpus, start, extended)
        self.X, self.corpus, self._metadata = X, corpus, None
        self._tombstone(replaced)
        for pipe in self.pipelines.values():
            pipe.add(start, progress=self.progress)
        self._variants.clear()

    def embed_passages(self, records: Corpus | str | Path | Sequence, batch_size: int = 64) -> np.ndarray:
        """The embeddings :meth:`add` would compute for ``records`` (float32 [n, d], checked), without
        changing the index: ``add(records, embeddings=...)`` then only updates it (what a server does
        beside its searches). Raises :class:`InputError` for bad records or a bad ``batch_size``."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InputError(f"batch_size must be a positive integer, got {batch_size!r}")
        return self._embed_passages(Corpus.coerce(records), batch_size)

    def _embed_passages(self, new: Corpus, batch_size: int) -> np.ndarray:
        X_new = self.embedder.encode(new.embedding_texts(), batch_size=batch_size, progress=self.progress)
        return validate_embeddings(np.asarray(X_new), f"embeddings of {new.source}", dim=int(self.X.shape[1]))

    def _embed_pooled(self, new: Corpus, batch_size: int) -> tuple[np.ndarray, tuple | None]:
        """The new passages' embeddings and, when a fitted pipeline late-chunks the texts of a built
        extraction (:meth:`~hopgraph.engine.pipelines.base.Pipeline.pooled_texts`), that extraction
        extended to them (:func:`~hopgraph.engine.components.extraction.extend_extraction`) with its
        new texts pooled in the same forward pass
        (:func:`~hopgraph.engine.components.late_pooling.embed_with_texts`, as ``Index.build``):
        ``(X_new, (key, extraction, late texts or None) | None)``. Changes nothing."""
        from ..engine.components.extraction import extend_extraction
        from ..engine.components.late_pooling import embed_with_texts

        keys = [type(p).pooled_texts(p.fit_params.to_dict()) for p in self.pipelines.values()]
        built = [(k, self.components.built_extraction(k)) for k in keys if k is not None]
        built = [(k, ex) for k, ex in built if ex is not None]
        if not built:
            return self._embed_passages(new, batch_size), None
        key, old = built[0]
        start = len(self.X)
        grown = self.corpus.concat(new)
        ex = extend_extraction(old, grown, start, *key, progress=self.progress)
        both = embed_with_texts(ex, grown.embedding_texts_from(start), self.embedder, self.progress, start, len(old.texts))
        if both is None:  # not a model the packed encoder runs: the passages alone, texts on their own
            return self._embed_passages(new, batch_size), (key, ex, None)
        X_new = validate_embeddings(both[0], f"embeddings of {new.source}", dim=int(self.X.shape[1]))
        return X_new, (key, ex, both[1])

    def delete(self, ids: Sequence[str] | str) -> DeleteReport:
        """Delete passages: from now on no search returns them (tombstones; the structures drop
        them at :meth:`~hopgraph.index.Index.compact`). Ids the index does not hold are reported, not raised."""
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
        if self._ops is not None and deleted:
            self._ops.append(("delete", list(deleted)))
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
        from scratch of the live corpus. In memory only until :meth:`~hopgraph.index.Index.save`; returns self."""
        deleted = self.components.deleted
        if deleted is not None and deleted.all():
            raise InputError("compact: every passage is deleted; an index needs at least one")
        self._ops = None
        if self._committed is not None:
            self._committed.whole = True
        if deleted is not None and deleted.any():
            live = np.flatnonzero(~deleted)
            self.corpus = self.corpus.take(live)
            self.X = np.ascontiguousarray(np.asarray(self.X)[live])
        self._metadata = None
        self.components = Components(self.X, self.corpus, self._embedder, self.params.get("bm25"), self.progress)
        old = self.pipelines
        self.pipelines = {}
        self._variants.clear()
        for name, pipe in old.items():
            t0 = time.perf_counter()
            self.pipelines[name] = self._fit(pipe.clone())
            self.pipelines[name].carry_state(pipe)
            self.fit_seconds[name] = time.perf_counter() - t0
        return self

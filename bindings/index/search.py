"""Searching an index: questions to embeddings, filters, pipelines, hits."""
from __future__ import annotations

import json
import warnings
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..engine.embedders import validate_embeddings
from ..engine.embedders.queries import encode_queries
from ..engine.errors import InputError
from ..engine.filters import EmptyFilterWarning, MetadataIndex, filter_mask
from ..engine.params import split_params
from ..engine.pipelines import pipeline_class
from ..engine.ranking import check_k
from .reports import Hit


def empty_filter_message(allowed_ids: Sequence[str] | None, where: Mapping[str, Any] | None,
                         notes: Sequence[str] = ()) -> str:
    """The :class:`EmptyFilterWarning` text of a filter that passes no passage, with ``notes`` on why
    (:meth:`~hopgraph.engine.filters.MetadataIndex.diagnose`)."""
    parts = ([f"where={json.dumps(where, default=str)[:200]}"] if where is not None else []) + \
        ([f"allowed_ids ({len(allowed_ids)} ids)"] if allowed_ids is not None else [])
    why = "".join(f"; {note}" for note in notes)
    return f"the filter {' and '.join(parts)} passes no passage of the index: no results{why}"


class IndexSearch:
    """The search side of :class:`~hopgraph.index.Index`."""

    def embed_queries(self, questions: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Query embeddings ``[B, d]``; ``batch_size`` texts per embedder forward pass."""
        return encode_queries(self.embedder, list(questions), batch_size=batch_size, progress=False)

    def search_arrays(self, questions: str | Sequence[str | np.ndarray] | np.ndarray, pipeline: str = "g3rag",
                      k: int = 5, query_embeddings: np.ndarray | None = None, *,
                      embed: Callable[[list[str]], np.ndarray] | None = None, group_by_document: bool = False,
                      allowed_ids: Sequence[str] | None = None, where: Mapping[str, Any] | None = None,
                      warn_empty: bool = True, mask: np.ndarray | None = None,
                      **overrides: Any) -> tuple[np.ndarray, np.ndarray]:
        """Like :meth:`~hopgraph.index.Index.search` but returns the raw ``(rows int64 [B,k], scores float32 [B,k])``.
        ``overrides``: search parameters of this call; fit parameters select a variant (:meth:`~hopgraph.index.Index.pipeline`).
        ``warn_empty=False``: no :class:`~hopgraph.engine.filters.EmptyFilterWarning` (a caller that
        reports it otherwise, as the server does in its answer). ``mask``: the :meth:`filter_mask` of
        these filters computed before (a caller searching several chunks with one filter).

        ``questions`` may also mix question strings and 1-D embedding rows (the pipeline then
        gets no texts); ``embed`` (default :meth:`embed_queries`) embeds the strings, in one call.
        """
        allowed = mask if mask is not None else self.filter_mask(allowed_ids, where)
        if warn_empty and allowed is not None and not self.components.allowed(allowed).any():
            notes = self._metadata.diagnose(where) if where is not None and self._metadata is not None else []
            warnings.warn(empty_filter_message(allowed_ids, where, notes), EmptyFilterWarning, stacklevel=3)
        cls = pipeline_class(pipeline)
        fit, search, run = split_params(cls.FitParams, cls.SearchParams, overrides)
        pipe = self.pipeline(pipeline, **fit, **run)
        texts, Q = self._queries(questions, query_embeddings, embed)
        if group_by_document:
            from ..engine.ingest.chunking import group_by_document as group

            k = max(1, min(check_k(k), self.n_live))  # never more documents than live passages
            return group(lambda depth: pipe.search(Q, depth, texts, allowed=allowed, **search), self.corpus, k)
        return pipe.search(Q, k, texts, allowed=allowed, **search)

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
        (``{field: value}``, ``{field: {"$gte": 2000}}``, ``{"$or": [...]}`` ...) restrict the passages
        returned, and ``k`` of them come back whenever ``k`` pass (a filter that passes none warns with
        :class:`~hopgraph.engine.filters.EmptyFilterWarning`): every pipeline draws its candidates and seeds
        under the filter and masks its final ranking (a graph walk may pass through filtered
        passages). Deleted passages (:meth:`~hopgraph.index.Index.delete`) are never returned. A
        ``k`` beyond the live passages is clamped to their number (nothing of size ``k`` is allocated).

        ``overrides`` are this call's search parameters (fit parameters select a variant, see
        :meth:`~hopgraph.index.Index.pipeline`). With
        ``group_by_document=True`` each document (a chunked corpus's ``"document"`` metadata, see
        :meth:`~hopgraph.index.Index.build`'s ``chunk_tokens``) appears once, as its best passage, and ``k`` documents come
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

        Only the hit rows are read from the corpus store (memory-mapped once saved), each once: id,
        title, metadata and, with ``with_text``, the text.
        """
        ids = np.asarray(ids)
        texts, meta = self._hit_fields(sorted({int(j) for j in ids.ravel().tolist() if j >= 0}), with_text)
        corpus = self.corpus
        return [
            [Hit(corpus.ids[j], float(s), r + 1, corpus.titles[j], texts.get(j), meta[j])
             for r, (j, s) in enumerate(zip(row_ids.tolist(), row_scores.tolist())) if j >= 0]
            for row_ids, row_scores in zip(ids, np.asarray(scores))
        ]

    def _hit_fields(self, rows: list[int], with_text: bool) -> tuple[dict[int, str], dict[int, dict]]:
        """The texts (with ``with_text``; else none) and metadata of the hit ``rows``, by row."""
        corpus = self.corpus
        return ({j: corpus.texts[j] for j in rows} if with_text else {}), {j: corpus.meta(j) for j in rows}

    def passage(self, pid: str) -> dict[str, Any]:
        """``{"id", "title", "text", "metadata"}`` of passage ``pid`` (read from the corpus store);
        KeyError naming the id if the index has no such passage."""
        row = self.corpus.position(pid)
        if self.components.deleted is not None and self.components.deleted[row]:
            raise KeyError(f"passage id {pid!r} was deleted from index {self.path or '<memory>'}")
        return {"id": self.corpus.ids[row], "title": self.corpus.titles[row], "text": self.corpus.texts[row],
                "metadata": self.corpus.meta(row)}

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

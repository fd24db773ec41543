"""Building an index: embed the corpus (or take precomputed embeddings) and fit pipelines."""
from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from ..engine.components.corpus import Corpus
from ..engine.components.late_pooling import embed_corpus
from ..engine.embedders import Embedder, resolve_embedder, validate_embeddings
from ..engine.errors import InputError
from ..engine.pipelines import pipeline_class
from .params import validate_params

if TYPE_CHECKING:
    from .index import Index

DEFAULT_PIPELINES = ("dense", "bm25", "g3rag")


class IndexBuild:
    """:meth:`~hopgraph.index.Index.build` of :class:`~hopgraph.index.Index`."""

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
        document into passages of at most that many tokens of the embedder, ``chunk_overlap`` shared,
        cut at sentence ends where possible (:func:`hopgraph.engine.ingest.chunking.chunk_corpus`: ids
        ``DOCID#k``, metadata ``{"document", "chunk", "start_char", "end_char"}``). Passages longer than the embedder's maximum input give a
        :class:`~hopgraph.engine.ingest.chunking.PassageLengthWarning`.
        """
        from ..engine import distributed
        from ..engine.ingest import chunking, streaming
        from ..engine.ingest import precomputed as shards
        _check_build_arguments(pipelines, device, batch_size)
        corpus = Corpus.coerce(corpus)
        if chunk_tokens is not None:
            if embeddings is not None:
                raise InputError("chunk_tokens and precomputed embeddings exclude each other: the embeddings' "
                                 "rows are the unchunked passages")
            chunking.check_chunking(chunk_tokens, chunk_overlap)
            embedder = resolve_embedder(embedder)  # its tokenizer counts the chunks' tokens
            corpus = chunking.chunk_corpus(corpus, chunk_tokens, chunk_overlap, embedder)
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
        else:
            emb = resolve_embedder(embedder)
            chunking.warn_long_passages(corpus, emb, chunk_tokens)
            checked = validate_params(params or {})
            pooled = [key for key in (pipeline_class(p).pooled_texts(checked.get(p, {})) for p in pipelines) if key]
            if work_dir is None and ray_address is None:
                X, adopted = embed_corpus(corpus, emb, pooled, batch_size, progress)
            elif pooled and ray_address is None:  # streamed, the texts pooled in the same pass
                X, adopted = streaming.embed_corpus_pooled(corpus, emb, work_dir, pooled[0], batch_size,
                                                           resume=resume, progress=progress)
            else:  # on Ray the passages alone (a pipeline that pools texts runs its own pass over them)
                X = streaming.embed_corpus(corpus, emb, work_dir if work_dir is not None else _scratch_dir(),
                                           batch_size, resume=resume, progress=progress, ray_address=ray_address)
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


def _check_build_arguments(pipelines: Sequence[str], device: str, batch_size: int) -> None:
    """:class:`InputError` for a bad pipeline list (unknown names fail now, not after the corpus is
    embedded), device or batch size."""
    from ..kernels.dispatch import DEVICES

    if isinstance(pipelines, str) or not all(isinstance(p, str) for p in pipelines):
        raise InputError(f"pipelines must be a list of pipeline names, got {pipelines!r}")
    for p in pipelines:
        pipeline_class(p)
    if device not in DEVICES:
        raise InputError(f"device must be one of {DEVICES}, got {device!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InputError(f"batch_size must be a positive integer, got {batch_size!r}")


def _scratch_dir() -> Path:
    """A fresh temporary work directory (for a Ray build without ``work_dir``)."""
    import tempfile

    return Path(tempfile.mkdtemp(prefix="hopgraph-work-")) / "work"

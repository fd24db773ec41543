"""Streaming, resumable embedding of large corpora into a memory-mapped matrix.

``hopgraph index CORPUS --out DIR`` embeds passages in chunks of ``chunk_size``
(default 16 × ``batch_size``; the embedder sees ``batch_size``) and writes each chunk straight
into ``DIR.work/embeddings.npy`` (a ``.npy`` opened with :func:`numpy.lib.format.open_memmap`), so
the embedding matrix
(X in SPEC notation, 1.5 GB at 10⁶ × 384) never has to fit in memory next to
the model. After every finished chunk the rows are flushed and
``DIR.work/state.json`` records how many rows are done, together with what
defines the result (corpus checksum, embedder name and dimension, N, chunk
and batch size). ``--resume`` reopens that work directory and continues from the
last finished chunk; since chunks keep the same boundaries and every chunk is
embedded independently, the resumed matrix equals an uninterrupted run's
(``tests/engine/ingest/test_streaming.py``). A state written for a different
corpus or embedder is refused. A work directory holds only its own files (:data:`WORK_FILES`);
one holding anything else is refused and never deleted (:func:`check_work_dir`), and
``hopgraph index`` holds the output's write lock (:mod:`hopgraph.engine.storage`) for the whole
build, so two builds never share a work directory.

Chunks can also be computed by Ray workers (``ray_address``, see
:mod:`hopgraph.engine.distributed`); they are written in order, so the state
file and the result are the same.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from ..components.corpus import Corpus
from ..components.extraction import Extraction, extract
from ..components.late_pooling import LateTexts, pool_spans, text_spans
from ..embedders import Embedder, validate_embeddings
from ..embedders.packed_bert import PackedBertEncoder
from ..errors import InputError

STATE_FILE = "state.json"
EMBEDDINGS_FILE = "embeddings.npy"
STATE_VERSION = 1
#: default chunk (checkpoint unit) = CHUNK_BATCHES embedder batches
CHUNK_BATCHES = 16
#: STITCH's topic/description embeddings during a build with a work directory
#: (:func:`hopgraph.engine.pipelines.stitch.hypergraph.text_embedding_rows`)
TEXT_EMB_FILE = "stitch-text_emb.npy"
#: the late-chunked text embeddings pooled in the passages' pass (:func:`embed_corpus_pooled`)
LATE_TEXTS_FILE = "late-texts.npy"
#: the only files a work directory holds (anything else: not ours, never deleted)
WORK_FILES = (STATE_FILE, STATE_FILE + ".tmp", EMBEDDINGS_FILE, TEXT_EMB_FILE, LATE_TEXTS_FILE)
#: rows per block when reading :data:`LATE_TEXTS_FILE` back (bounds the temporaries)
OK_BLOCK_ROWS = 1 << 16


def work_dir_for(out: str | Path) -> Path:
    """The work directory beside an index directory: ``OUT.work``."""
    out = Path(out)
    return out.with_name(out.name + ".work")


def read_state(work_dir: Path) -> dict[str, Any] | None:
    """The resume state a work directory holds (:data:`STATE_FILE`), or None when it has none."""
    path = Path(work_dir) / STATE_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise InputError(f"resume state {path} is corrupt; delete {work_dir} and start again") from None


def write_state(work_dir: Path, state: dict[str, Any]) -> None:
    """Atomically replace the state file (write, fsync, rename)."""
    tmp = Path(work_dir) / (STATE_FILE + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(state, f, indent=2, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, Path(work_dir) / STATE_FILE)


def job_key(corpus: Corpus, embedder: Embedder) -> dict[str, Any]:
    """What determines the embedding matrix (the batch size is kept separately)."""
    return {"corpus_checksum": corpus.checksum, "n_passages": len(corpus),
            "embedder": embedder.name, "dim": int(embedder.dim)}


def embed_corpus(corpus: Corpus, embedder: Embedder, work_dir: str | Path, batch_size: int = 64,
                 resume: bool = False, progress: bool = True, ray_address: str | None = None,
                 chunk_size: int | None = None) -> np.ndarray:
    """Embed ``corpus`` into ``work_dir/embeddings.npy`` chunk by chunk; returns it memory-mapped.

    With ``resume=True`` and a matching state in ``work_dir``, rows already done are
    kept and embedding continues from the next chunk, with the chunk and batch sizes
    of the interrupted run. Without ``resume`` any previous work directory is discarded.
    """
    n, dim = len(corpus), int(embedder.dim)
    with _ChunkedJob(work_dir, job_key(corpus, embedder), {EMBEDDINGS_FILE: n}, dim, batch_size, chunk_size,
                     resume, progress, n) as job:
        for start, block in iter_embedded_chunks(corpus, embedder, job.done, job.chunk_size, job.batch_size,
                                                 ray_address):
            job.write(start + len(block), {EMBEDDINGS_FILE: (start, block)})
    return job.arrays[EMBEDDINGS_FILE]


def embed_corpus_pooled(corpus: Corpus, embedder: Embedder, work_dir: str | Path, options: tuple[bool, bool],
                        batch_size: int = 64, resume: bool = False, progress: bool = True,
                        chunk_size: int | None = None) -> tuple[np.ndarray, tuple[tuple[bool, bool], Extraction,
                                                                                  LateTexts | None]]:
    """:func:`embed_corpus` for a build whose pipeline late-chunks the texts of the extraction with
    ``options`` (``title_entities``, ``numbers``): each chunk's one forward pass gives both its
    passages' rows of X and the late-chunked embeddings of the texts first found in those passages
    (:func:`~hopgraph.engine.components.late_pooling.pool_spans`), written to :data:`LATE_TEXTS_FILE`
    beside X and resumed with it, so that no passage runs through the model twice. Returns
    ``(X, (options, extraction, texts))`` as
    :func:`~hopgraph.engine.components.late_pooling.embed_corpus` does (texts None, and X
    :func:`embed_corpus`'s, when the embedder is not a model the packed encoder runs)."""
    ex = extract(corpus, *options, progress=progress)
    encoder = PackedBertEncoder.for_embedder(embedder)
    if encoder is None:
        return embed_corpus(corpus, embedder, work_dir, batch_size, resume, progress, None, chunk_size), \
            (options, ex, None)
    texts = corpus.embedding_texts()
    spans = text_spans(ex, texts)
    key = {**job_key(corpus, embedder), "late_texts": {"options": list(options), "requests": len(spans)}}
    n = len(corpus)
    with _ChunkedJob(work_dir, key, {EMBEDDINGS_FILE: n, LATE_TEXTS_FILE: len(spans)}, encoder.dim, batch_size,
                     chunk_size, resume, progress, n) as job:
        for start in range(job.done, n, job.chunk_size):
            stop = min(start + job.chunk_size, n)
            X, emb, _ = pool_spans(encoder, texts, spans, np.arange(start, stop))
            job.write(stop, {EMBEDDINGS_FILE: (start, X),
                             LATE_TEXTS_FILE: (int(np.searchsorted(spans.chunk, start)), emb)})
    emb = job.arrays[LATE_TEXTS_FILE]
    ok = np.zeros(len(emb), bool)  # a request pooled no token: its row stayed zero (a pooled one is a unit vector)
    for a in range(0, len(emb), OK_BLOCK_ROWS):
        ok[a:a + OK_BLOCK_ROWS] = np.asarray(emb[a:a + OK_BLOCK_ROWS]).any(axis=1)
    return job.arrays[EMBEDDINGS_FILE], (options, ex, LateTexts(spans, emb, ok))


class _ChunkedJob:
    """The resumable state of a chunked embedding in a work directory: float32 arrays
    ``{file: rows}`` of width ``dim`` (memory-mapped), the state file and the progress bar. Entered,
    it opens (resume) or creates them; :meth:`write` stores a finished chunk's rows and records the
    passages done; on exit the arrays are reopened read-only in :attr:`arrays`."""

    def __init__(self, work_dir: str | Path, key: dict[str, Any], rows: dict[str, int], dim: int, batch_size: int,
                 chunk_size: int | None, resume: bool, progress: bool, total: int) -> None:
        for label, value in (("batch_size", batch_size), ("chunk_size", chunk_size)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise InputError(f"{label} must be a positive integer, got {value!r}")
        self.work_dir, self.key, self.rows, self.dim = Path(work_dir), key, rows, dim
        self.batch_size, self.chunk_size = batch_size, chunk_size or CHUNK_BATCHES * batch_size
        self.resume, self.progress, self.total = resume, progress, total
        self.done = 0
        self.arrays: dict[str, np.ndarray] = {}

    def __enter__(self) -> "_ChunkedJob":
        work_dir = self.work_dir
        state = read_state(work_dir) if self.resume else None
        paths = {name: work_dir / name for name in self.rows}
        if state is not None and all(p.is_file() for p in paths.values()):
            if state.get("version") != STATE_VERSION or state.get("key") != self.key:
                raise InputError(
                    f"cannot resume: {work_dir} holds embeddings of another build ({state.get('key')}); "
                    f"this build is {self.key}. Run without --resume to start over")
            self.batch_size, self.chunk_size = int(state["batch_size"]), int(state["chunk_size"])
            self.done = int(state["done"])
            for name, path in paths.items():
                self.arrays[name] = np.load(path, mmap_mode="r+")
                if self.arrays[name].shape != (self.rows[name], self.dim) or self.arrays[name].dtype != np.float32:
                    raise InputError(f"cannot resume: {path} has shape {self.arrays[name].shape} "
                                     f"{self.arrays[name].dtype}, expected ({self.rows[name]}, {self.dim})")
        else:
            remove_work_dir(work_dir)
            work_dir.mkdir(parents=True)
            for name, path in paths.items():
                self.arrays[name] = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32,
                                                              shape=(self.rows[name], self.dim))
            state = {"version": STATE_VERSION, "key": self.key, "batch_size": self.batch_size,
                     "chunk_size": self.chunk_size, "done": 0}
            write_state(work_dir, state)
        self.state = state
        self.bar = _bar(self.progress, self.total, self.done)
        return self

    def write(self, done: int, blocks: dict[str, tuple[int, np.ndarray]]) -> None:
        """Store each ``file: (first row, rows)`` of a finished chunk, then record ``done`` passages."""
        for name, (first, block) in blocks.items():
            self.arrays[name][first:first + len(block)] = block
            self.arrays[name].flush()
        if self.bar is not None:
            self.bar.update(done - self.state["done"])
        self.state["done"] = self.done = done
        write_state(self.work_dir, self.state)

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.close()
        names = list(self.arrays)
        self.arrays.clear()  # the writable maps closed before the files are reopened
        if exc[0] is None:
            self.arrays = {name: np.load(self.work_dir / name, mmap_mode="r") for name in names}


def iter_embedded_chunks(corpus: Corpus, embedder: Embedder, start: int, chunk_size: int, batch_size: int,
                         ray_address: str | None = None) -> Iterator[tuple[int, np.ndarray]]:
    """``(first row, validated float32 block)`` for the chunks from row ``start``, in order."""
    starts = range(start, len(corpus), chunk_size)
    if ray_address is not None:  # one Ray task per chunk, the same chunk boundaries, results in order
        from ..distributed import ray_ordered_map

        tasks = ((corpus.embedding_texts(a, min(a + chunk_size, len(corpus))), a, batch_size) for a in starts)
        yield from zip(starts, ray_ordered_map(encode_batch, embedder, tasks, ray_address))
        return
    for a in starts:
        yield a, embed_chunk(corpus, embedder, a, min(a + chunk_size, len(corpus)), batch_size)


def embed_chunk(corpus: Corpus, embedder: Embedder, start: int, stop: int, batch_size: int) -> np.ndarray:
    """Embed passages ``start:stop`` (one chunk) and validate the rows."""
    return encode_batch(embedder, corpus.embedding_texts(start, stop), start, batch_size)


def encode_batch(embedder: Embedder, texts: list[str], first: int, batch_size: int) -> np.ndarray:
    """``embedder.encode`` one chunk (passages from row ``first``); checks row count and values."""
    X = embedder.encode(texts, batch_size=batch_size, progress=False)
    if len(X) != len(texts):
        raise InputError(f"embedder {embedder.name!r} returned {len(X)} rows for {len(texts)} passages")
    return validate_embeddings(np.asarray(X), f"embedder {embedder.name!r} output (passages {first}.."
                               f"{first + len(texts) - 1})", embedder.dim)


def check_work_dir(work_dir: str | Path) -> Path:
    """``work_dir`` if it is absent or a hopgraph work directory (only :data:`WORK_FILES` in it);
    otherwise an InputError: a work directory's files are replaced and removed, never a user's."""
    work_dir = Path(work_dir)
    if work_dir.exists() or work_dir.is_symlink():
        if not work_dir.is_dir() or work_dir.is_symlink() or any(n not in WORK_FILES for n in os.listdir(work_dir)):
            raise InputError(f"{work_dir} exists and is not a hopgraph work directory (it holds other files); "
                             f"refusing to use or delete it: move it away or choose another --out")
    return work_dir


def remove_work_dir(work_dir: str | Path) -> None:
    """Remove a work directory, file by file (only its own files; :func:`check_work_dir` first)."""
    work_dir = check_work_dir(work_dir)
    if not work_dir.exists():
        return
    for name in os.listdir(work_dir):
        (work_dir / name).unlink()
    work_dir.rmdir()


def finish(work_dir: str | Path) -> None:
    """Remove the work directory after the index was saved (only if it is one; else left alone)."""
    try:
        remove_work_dir(work_dir)
    except (InputError, OSError):
        pass


def _bar(progress: bool, total: int, initial: int):
    if not progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc="embed", unit="passage", unit_scale=True, dynamic_ncols=True,
                smoothing=0.1)

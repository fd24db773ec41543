"""Opening an index directory: a commit's segments read back into an :class:`IndexContent` (corpus,
embeddings memory-mapped, components and fitted pipelines), the commit pinned by a reader's lease.

:class:`IndexReader` is what a reader holds for its lifetime: the commit it opened stays readable
(its files are not removed by a writer's cleanup) until :meth:`IndexReader.close`; commits made
after it was opened are not seen (open a new reader). Format 4 commits are read, and format 3
(one generation, read as one base segment).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from .. import storage
from ..components.corpus import Corpus
from ..components.shared import Components
from ..embedders import Embedder, resolve_embedder
from ..embedders.queries import encode_queries
from ..errors import IndexFormatError, InputError
from ..graphs.device_store import store_for_device
from ..graphs.store import GraphStore
from ..params import RunSettings
from ..pipelines import pipeline_class
from ..storage.segment_infos import SegmentInfos
from .content import Committed, IndexContent
from .params import validate_params


class IndexReader:
    """A pinned commit of an index directory, read (module docstring): :attr:`content` (what a
    search reads), :attr:`committed` (the commit as a writer starts from it), :attr:`infos` (its
    segment list; None for a format-3 index). Open with :meth:`open`; close to release the lease
    (also as a context manager)."""

    #: the index directory
    path: Path
    #: the commit file opened (``commit-CCCCCC.json``; a format-3 generation's name)
    name: str
    #: the commit's segment list (None for a format-3 index)
    infos: SegmentInfos | None
    #: what was read at open (the objects a search reads)
    content: IndexContent
    #: the snapshot a writer counts this content's later changes from
    committed: Committed

    def __init__(self, opened: storage.OpenedIndex, content: IndexContent, committed: Committed) -> None:
        self._opened: storage.OpenedIndex | None = opened
        self.path, self.name = opened.path, opened.name
        self.infos = opened.infos
        self.content, self.committed = content, committed

    @classmethod
    def open(cls, path: str | Path, embedder: Embedder | Callable | str | None = None, device: str = "auto",
             progress: bool = False, verify: str = "full", dense: str | None = None,
             graphs: GraphStore | None = None) -> "IndexReader":
        """Open the live commit of the index at ``path`` (arrays memory-mapped).

        ``verify="full"`` checks the size and checksum of every file of every segment, ``"fast"``
        sizes only; either way every stored array is checked structurally, so a corrupt index raises
        :class:`~hopgraph.engine.errors.IndexFormatError` naming the file (as do missing files or
        manifest keys, and an unreadable format version, with the command that rebuilds it).
        ``embedder`` (a name, an :class:`~hopgraph.engine.embedders.Embedder` or a callable) embeds
        queries; one other than the index was built with raises
        :class:`~hopgraph.engine.errors.InputError`. ``dense``: the dense search mode (``"auto"``,
        ``"exact"``, ``"ann"``; None: ``HOPGRAPH_DENSE``, else auto). ``graphs``: the graph store
        the pipelines load into (None: a :class:`~hopgraph.engine.graphs.device_store.DeviceStore`
        when ``device`` runs on CUDA, else the index's own files;
        :func:`~hopgraph.engine.graphs.device_store.store_for_device`)."""
        path = Path(path)
        if verify not in storage.VERIFY_LEVELS:
            raise InputError(f"verify must be one of {storage.VERIFY_LEVELS}, got {verify!r}")
        opened = storage.open_index(path)
        try:
            content, committed = read_commit(opened, embedder, RunSettings(device=device), progress, verify,
                                             dense=dense, graphs=graphs)
        except BaseException:
            opened.close()
            raise
        return cls(opened, content, committed)

    def search(self, questions: Sequence[str] | np.ndarray, k: int = 5, pipeline: str = "dense",
               query_texts: Sequence[str] | None = None, allowed: np.ndarray | None = None, **search: Any
               ) -> tuple[np.ndarray, np.ndarray]:
        """Search the stored pipeline ``pipeline``: ``(rows int64 [B, k], scores float32 [B, k])``, as
        :meth:`~hopgraph.engine.pipelines.Pipeline.search`. ``questions``: texts (embedded with the
        reader's embedder: open with ``embedder=``), or query embeddings float32 ``[B, d]`` with their
        ``query_texts`` for the pipelines that read the questions. A pipeline the commit does not
        hold, or texts without an embedder, raise :class:`~hopgraph.engine.errors.InputError`."""
        if pipeline not in self.content.pipelines:
            raise InputError(f"index {self.path} holds no fitted pipeline {pipeline!r} "
                             f"(it holds {', '.join(sorted(self.content.pipelines)) or 'none'})")
        if isinstance(questions, np.ndarray):
            Q = questions
        else:
            if self.content.embedder is None:
                raise InputError(f"index {self.path} was opened without an embedder: open it with embedder=... "
                                 f"to search texts, or give query embeddings")
            query_texts = [questions] if isinstance(questions, str) else list(questions)
            Q = encode_queries(self.content.embedder, query_texts, progress=False)
        texts = None if query_texts is None else list(query_texts)
        return self.content.pipelines[pipeline].search(Q, k, texts, allowed=allowed, **search)

    def repin(self, name: str) -> None:
        """Move the lease to the live commit ``name``, which its writer (holding the write lock) just
        committed from this reader's content and its changes: every file the reader reads is one of
        that commit's. :attr:`content` stays what was read at open;
        :class:`~hopgraph.engine.errors.IndexFormatError` when ``name`` is not live."""
        opened = storage.open_index(self.path)
        if opened.name != name:  # pragma: no cover - the write lock is held: nobody else committed
            opened.close()
            raise IndexFormatError(f"{self.path}: commit {name} is not live after it was written")
        old, self._opened = self._opened, opened
        self.name, self.infos = opened.name, opened.infos
        if old is not None:
            old.close()

    @property
    def closed(self) -> bool:
        """Whether the lease was released."""
        return self._opened is None

    def close(self) -> None:
        """Release the lease on the commit (a writer may then remove its files); idempotent."""
        if self._opened is not None:
            self._opened.close()
            self._opened = None

    def __enter__(self) -> "IndexReader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def read_commit(opened: storage.OpenedIndex, embedder: Embedder | Callable | str | None, settings: RunSettings,
                progress: bool, verify: str, upto: int | None = None, dense: str | None = None,
                graphs: GraphStore | None = None) -> tuple[IndexContent, Committed]:
    """The content and commit snapshot of the pinned commit ``opened``; with ``upto``, of its first
    ``upto`` segments only (the index as it was before the later ones: a merge's base state;
    pipelines not stored in them whole are left out); its graphs in ``graphs`` (None: the store
    :func:`~hopgraph.engine.graphs.device_store.store_for_device` gives for ``settings.device``).
    Raises as :meth:`IndexReader.open`."""
    path = opened.path
    segments = opened.segments if upto is None else opened.segments[:upto]
    _verify_segments(path, segments, verify)
    meta = _commit_meta(opened, segments)
    emb = _query_embedder(path, path / opened.name, meta, embedder)
    corpus, X, deleted = _read_rows(path, path / opened.name, segments, meta["segs"], meta["dim"])
    components = Components.load_segments(
        [(seg.dir / "components", f["components"], seg.first_row, seg.n_rows)
         for seg, f in zip(segments, meta["segs"])], X, corpus, emb, meta["params"].get("bm25"), progress, dense,
        graphs if graphs is not None else store_for_device(settings.device))
    if deleted.any():
        components.deleted = deleted
    content = IndexContent(corpus, X, components, {}, meta["params"], emb, meta["emb_name"], dict(meta["emb_meta"]),
                           embed_seconds=float(opened.manifest.get("embed_seconds", 0.0) or 0.0), settings=settings)
    _read_pipelines(path, content, segments, meta, whole_only=upto is not None)
    legacy = opened.version < storage.FORMAT_VERSION
    return content, Committed.of(opened.name, opened.manifest, content, legacy, None if legacy else opened.infos)


def _verify_segments(path: Path, segments: list[storage.SegmentRef], verify: str) -> None:
    for seg in segments:
        problems = storage.verify_files(seg.dir, seg.manifest, verify)
        if problems:
            more = f" (and {len(problems) - 1} more: hopgraph verify {path})" if len(problems) > 1 else ""
            raise IndexFormatError(f"index {path} is corrupt: {problems[0]}{more}")


def _commit_meta(opened: storage.OpenedIndex, segments: list[storage.SegmentRef]) -> dict[str, Any]:
    """The commit's entries a reader needs, checked: embedder, dimension, pipelines' parameters and
    fit times, the index parameters, each segment's fields (:func:`_segment_fields`)."""
    manifest, cfile = opened.manifest, opened.path / opened.name
    try:
        emb_meta = manifest["embedder"]
        n = int(manifest["corpus"]["n_passages"])
        entries = manifest["pipelines"]
        meta = {"emb_meta": emb_meta, "emb_name": str(emb_meta["name"]), "dim": int(emb_meta["dim"]),
                "pipe_params": {name: dict(entry["params"]) for name, entry in entries.items()},
                "fit_seconds": {name: float(entry.get("fit_seconds", 0.0)) for name, entry in entries.items()},
                "params": validate_params(manifest.get("params") or {}, stored=True),
                "segs": [_segment_fields(seg, opened.version) for seg in segments]}
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise IndexFormatError(f"{cfile}: missing or invalid entry {e}") from None
    held = sum(seg.n_rows for seg in opened.segments)
    if held != n:
        raise IndexFormatError(f"{cfile}: segments hold {held} passages, the commit says {n}")
    return meta


def _query_embedder(path: Path, cfile: Path, meta: dict[str, Any], embedder: Embedder | Callable | str | None
                    ) -> Embedder | None:
    """``embedder`` resolved and checked against the one the index was built with (None: none given)."""
    emb_name, dim = meta["emb_name"], meta["dim"]
    for recorded in {emb_name, str(meta["emb_meta"].get("spec") or emb_name)}:
        _check_embedder_name(cfile, recorded, dim)
    emb = resolve_embedder(embedder) if embedder is not None else None
    if emb is not None and emb.dim != dim:
        raise IndexFormatError(f"index {path} has dimension {dim}; embedder {emb.name} has {emb.dim}")
    if emb is not None and emb.name != emb_name and not emb_name.startswith("precomputed"):
        raise InputError(f"index {path} was built with embedder {emb_name!r}; queries embedded with "
                         f"{emb.name!r} would not match its passages (give embedder={emb_name!r} or none)")
    return emb


def _read_rows(path: Path, cfile: Path, segments: list[storage.SegmentRef], segs: list[dict[str, Any]], dim: int
               ) -> tuple[Corpus, np.ndarray, np.ndarray]:
    """The segments' corpus rows, embeddings (checked unit rows) and deleted-rows mask, concatenated."""
    corpus, parts, deleted = None, [], np.zeros(sum(seg.n_rows for seg in segments), bool)
    for seg, f in zip(segments, segs):
        if not seg.n_rows:
            continue
        part = Corpus.load(seg.dir / "corpus", seg.n_rows, str(path / "corpus"), f["corpus"].get("checksum"))
        corpus = part if corpus is None else corpus.concat(part)
        X = storage.check_array(seg.dir, f["embeddings"])
        storage.check_unit_rows(X, str(seg.dir / "embeddings.npy"), rows=seg.n_rows, dim=dim)
        parts.append(X)
        if f["deleted"] is not None:
            deleted[seg.first_row + f["deleted"]] = True
    if corpus is None:
        raise IndexFormatError(f"{cfile}: the index holds no passage")
    return corpus, storage.stack_rows(parts), deleted


def _read_pipelines(path: Path, content: IndexContent, segments: list[storage.SegmentRef], meta: dict[str, Any],
                    whole_only: bool) -> None:
    """Load every pipeline the commit stores into ``content.pipelines`` (with ``whole_only``, only
    those one of ``segments`` stores whole), their search defaults from ``content.params``."""
    for name, params in meta["pipe_params"].items():
        parts = [(seg.dir / "pipelines" / name, f["pipelines"][name], seg.first_row + seg.n_rows)
                 for seg, f in zip(segments, meta["segs"]) if name in f["pipelines"]]
        if whole_only and not any(e.get("state", "full") == "full" for _, e, _ in parts):
            continue
        for d, _, _ in parts:
            if not d.is_dir():
                raise IndexFormatError(f"index {path}: pipeline directory {d} is missing")
        try:
            pipe = pipeline_class(name).load_segments(parts, params, content.components, content.settings)
            search = {k: v for k, v in content.params.get(name, {}).items() if pipe.SearchParams.accepts(k)}
            content.pipelines[name] = pipe.with_search_defaults(**search) if search else pipe
        except IndexFormatError:
            raise
        except (InputError, KeyError, TypeError, ValueError, IndexError, OSError, RuntimeError) as e:
            raise IndexFormatError(f"index {path}: pipeline {name} is corrupt or unreadable: "
                                   f"{type(e).__name__}: {e}") from None
        content.fit_seconds[name] = meta["fit_seconds"][name]
    content.components.forget_stored_states()


def _segment_fields(seg: storage.SegmentRef, version: int) -> dict[str, Any]:
    """A segment's corpus, embeddings, components and pipelines entries and deleted local rows (None:
    none), from a format-4 segment manifest and its deletes file, or a format-3 manifest."""
    m = seg.manifest
    if version < 4:
        files = m["files"]
        deleted = None
        if "deleted_rows" in files:
            deleted = storage.check_ids(storage.check_array(seg.dir, files["deleted_rows"]), seg.n_rows,
                                        str(seg.dir / "deleted_rows.npy"))
        return {"corpus": m["corpus"], "embeddings": files["embeddings"], "components": m.get("components") or {},
                "pipelines": {name: {"state": "full"} for name in m["pipelines"]}, "deleted": deleted}
    deleted = None
    if seg.deletes is not None:
        rows = storage.load_array(seg.deletes.parent, seg.deletes.name[:-len(".npy")], mmap=False)
        deleted = np.asarray(storage.check_ids(rows, max(seg.n_rows, 1), str(seg.deletes)), np.int64)
    out = {"components": m.get("components") or {}, "pipelines": m.get("pipelines") or {}, "deleted": deleted}
    if seg.n_rows:
        out["corpus"], out["embeddings"] = m["corpus"], m["embeddings"]
    return out


def _check_embedder_name(manifest: Path, name: str, dim: int) -> None:
    """A built-in embedder named in a manifest must have the recorded dimension (checked without
    loading the model); other names (precomputed, callables) are taken as they are."""
    from ..embedders import DEFAULT_EMBEDDER, MiniLMEmbedder

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


__all__ = ["IndexReader", "read_commit"]

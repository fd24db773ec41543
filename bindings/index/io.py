"""Saving and loading an index (:mod:`hopgraph.engine.storage`: segments behind commits, checksums,
the write lock and reader leases).

An index saved whole is one *base* segment. A later :meth:`~IndexIO.save` of the same index commits
only what changed since it was loaded or last committed: a segment holding the appended passages'
rows of every component (corpus strings, embeddings, IVF codes, BM25 postings) and each component's
and pipeline's change (:meth:`Components.save_segment`, :meth:`Pipeline.save_segment`), plus a small
deletes file for each segment whose deleted rows changed; unchanged segments are referenced by the
new commit, never copied. A commit names its parent and the last commit that changed the index's
content: when another writer committed in between, appends and deletes are applied again on top of
its commit (*rebase*), anything else is refused (:class:`~hopgraph.engine.storage.StaleIndexError`).
"""
from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import numpy as np

from ..engine import storage
from ..engine.components.corpus import Corpus
from ..engine.components.shared import Components, ComponentsSnapshot
from ..engine.embedders import Embedder, embedder_entry, resolve_embedder
from ..engine.errors import IndexFormatError, InputError
from ..engine.pipelines import pipeline_class
from .params import fit_params_only, validate_params

if TYPE_CHECKING:
    from .index import Index


@dataclass
class Committed:
    """What an index was loaded from or last committed: the commit (``name``, its ``manifest``), the
    content id a later commit must find live (None: a format-3 index, saved whole next), the row
    count, the deleted rows and the components' and pipelines' snapshots."""

    name: str
    content: int | None
    manifest: dict[str, Any]
    n_rows: int
    deleted: np.ndarray | None
    components: ComponentsSnapshot
    pipelines: dict[str, Any]
    #: the rows were renumbered (a compaction): the next commit writes the index whole
    whole: bool = False

    @property
    def segments(self) -> list[dict[str, Any]]:
        return list(self.manifest.get("segments", []))


def _npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


class IndexIO:
    """Persistence of :class:`~hopgraph.index.Index`."""

    # ------------------------------------------------------------------ save
    def save(self, path: str | Path | None = None, overwrite: bool = False, *, rebase: bool = True) -> Path:
        """Commit the index to ``path`` (format version 4, :mod:`hopgraph.engine.storage`; module
        docstring).

        Without ``path`` (or with the path it was loaded from or last saved to) only the changes
        since then are written, as one new segment and deletes files (e.g. after
        :meth:`~hopgraph.index.Index.add` / :meth:`~hopgraph.index.Index.delete`). If another writer
        committed to the path in between, this index's adds and deletes are applied again on top of
        that commit and committed (``rebase=True``; the index then holds both writers' changes), and
        anything else — a compaction, a merge, a retrained part — raises
        :class:`~hopgraph.engine.storage.StaleIndexError`. An index of an older format is written
        whole.

        With another ``path``, or ``overwrite=True``, the whole index is written there as one base
        segment: ``path`` must not exist, be empty, or be a hopgraph index directory; an existing
        index is replaced only with ``overwrite=True`` (readers of the old one keep it until they
        close). Another process
        writing to ``path`` gives an :class:`IndexLockedError`."""
        if path is None:
            if self.path is None:
                raise InputError("save: this index has no path yet; give one")
            path = self.path
        path = Path(path)
        same = self.path is not None and _same_path(path, self.path) and self._committed is not None
        if same and not overwrite and self._committed.content is not None and not self._committed.whole:
            self._commit_changes(path, rebase)
        else:
            self._write_whole(path, overwrite or same, self._committed if same and not overwrite else None)
        return path

    def _write_whole(self, path: Path, overwrite: bool, base: Committed | None = None) -> None:
        """Write the whole index as one base segment and commit it; the index then reads its files.
        With ``base`` (the commit this index was loaded from), refused when another commit is live."""
        with storage.CommitWriter(path, overwrite) as w:
            if base is not None and (w.live_name or storage.read_current(path)[0]) != base.name and \
                    (w.live is None or w.live.get("content") != base.content):
                raise storage.StaleIndexError(
                    f"{path}: another writer committed {w.live_name or storage.read_current(path)[0]} after this "
                    f"index was loaded from {base.name}; a compacted index is written whole and cannot be "
                    f"applied on top of it: load the index again and repeat the change")
            number = w.next_commit_number()
            seg = w.new_segment()
            fields = self._write_segment(seg.dir, None, 0, len(self.X))
            entry = w.finish_segment(seg, 0, len(self.X), kind="base", **fields)
            entry["deletes"] = self._deletes_file(w, number, entry["name"], 0, len(self.X))
            name = w.commit(number, self._commit_fields([entry], w.live_name, number))
            if self._lease is not None:  # it reads files of another commit: read the new ones instead
                self._reopen(path)
            else:
                self.path, self._manifest = path, w.committed
                self._snapshot(name, w.committed)

    def _commit_changes(self, path: Path, rebase: bool) -> None:
        """Commit the changes since :attr:`_committed` (module docstring)."""
        with storage.CommitWriter(path, overwrite=True) as w:
            live = w.live
            if live is None:
                raise InputError(f"{path} holds a hopgraph index other than the one this index was loaded from "
                                 f"({'of an older format' if storage.has_index(path) else 'none'}); pass "
                                 f"overwrite=True to replace it")
            if live.get("content") != self._committed.content:
                theirs = w.live_name or storage.read_current(path)[0]
                why = self._not_replayable()
                if not rebase or why:
                    raise storage.StaleIndexError(
                        f"{path}: another writer committed {theirs} after this index was loaded from "
                        f"{self._committed.name}; {why or 'rebase=False'}: load the index again and repeat "
                        f"the change (Index.updating(path) holds the write lock from load to commit)")
                latest = type(self).load(path, embedder=self._embedder, device=self.device, progress=self.progress,
                                         verify="fast")
                latest._replay(self._ops, self.pipelines)
                latest._commit_into(w)
                self._adopt(latest)
                return
            self._commit_into(w)

    def _commit_into(self, w: storage.CommitWriter) -> None:
        """Write this index's changes since :attr:`_committed` into the writer ``w`` (holding the lock,
        its live commit being ours) and commit them."""
        c = self._committed
        number = w.next_commit_number()
        segments = [dict(s) for s in w.live["segments"]]
        start, stop = c.n_rows, len(self.X)
        seg = w.new_segment()
        fields = self._write_segment(seg.dir, c, start, stop)
        changed = stop > start or fields["pipelines"] or any(fields["components"].get(k) for k in fields["components"])
        if changed:
            segments.append(w.finish_segment(seg, start, stop - start, kind="add", **fields))
        for s in segments:
            first, n = int(s["first_row"]), int(s["n_rows"])
            now = self.components.deleted[first:first + n] if self.components.deleted is not None else None
            before = self._stored_deletes(w.path, s, n)
            now_any = now is not None and bool(now.any())
            if not now_any and before is None:
                continue
            if before is not None and now is not None and np.array_equal(before, now):
                continue
            s["deletes"] = self._deletes_file(w, number, s["name"], first, n)
        name = w.commit(number, self._commit_fields(segments, w.live_name, number))
        self._after_commit(w.path, name, w.committed)

    def _stored_deletes(self, path: Path, seg: dict[str, Any], n: int) -> np.ndarray | None:
        """The deleted-rows mask a commit's segment entry holds (None: none deleted)."""
        if not seg.get("deletes"):
            return None
        rows = np.load(path / seg["deletes"]["file"], allow_pickle=False)
        mask = np.zeros(n, bool)
        mask[rows] = True
        return mask

    def _deletes_file(self, w: storage.CommitWriter, number: int, segment: str, first: int, n: int
                      ) -> dict[str, Any] | None:
        """Write the deleted rows (local) of a segment's rows ``[first, first + n)``; None when none is."""
        deleted = self.components.deleted
        if deleted is None or not deleted[first:first + n].any():
            return None
        rows = np.flatnonzero(deleted[first:first + n]).astype(np.int64)
        return w.write_deletes(segment, number, _npy_bytes(rows), len(rows))

    def _write_segment(self, directory: Path, since: Committed | None, start: int, stop: int) -> dict[str, Any]:
        """Write rows ``[start, stop)`` and every change since ``since`` (None: everything) under
        ``directory``; returns the segment manifest's fields."""
        fields: dict[str, Any] = {}
        if stop > start:
            part = self.corpus if since is None and start == 0 and stop == len(self.corpus) \
                else self.corpus.rows(start, stop)
            fields["corpus"] = part.save(directory / "corpus")
            X = self.X if since is None and start == 0 and stop == len(self.X) else self.X[start:stop]
            fields["embeddings"] = storage.save_array(directory, "embeddings", X)
        fields["components"] = self.components.save_segment(directory / "components",
                                                            since.components if since else None, start, stop)
        pipes = {}
        for name, pipe in self.pipelines.items():
            entry = pipe.save_segment(directory / "pipelines" / name,
                                      since.pipelines.get(name) if since is not None else None, start, stop)
            if entry is not None:
                pipes[name] = entry
        fields["pipelines"] = pipes
        return fields

    def _commit_fields(self, segments: list[dict[str, Any]], parent: str | None, content: int) -> dict[str, Any]:
        deleted = self.components.deleted
        return {
            "parent": parent,
            "content": content,
            "corpus": {"n_passages": len(self.corpus), "n_live": self.n_live, "source": self.corpus.source},
            "embedder": embedder_entry(self._embedder, self.embedder_name, int(self.X.shape[1])),
            "embed_seconds": self.embed_seconds,
            "pipelines": {name: {"params": pipe.fit_params.to_dict(), "fit_seconds": self.fit_seconds.get(name, 0.0)}
                          for name, pipe in self.pipelines.items()},
            "params": fit_params_only(self.params),
            "segments": segments,
            "n_deleted": int(deleted.sum()) if deleted is not None else 0,
        }

    def _after_commit(self, path: Path, name: str, manifest: dict[str, Any]) -> None:
        """Snapshot the new commit; an index that reads stored files moves its lease to the new commit
        (which holds all of them)."""
        if self._lease is not None:
            opened = storage.open_index(path)
            if opened.name != name:  # pragma: no cover - the write lock is held: nobody else committed
                opened.close()
                raise IndexFormatError(f"{path}: commit {name} is not live after it was written")
            old, self._lease = self._lease, opened
            old.close()
            storage.cleanup(path)  # the commit this index held before, unless another reader holds it
        self.path = path
        self._manifest = manifest
        self._snapshot(name, manifest)

    def _snapshot(self, name: str, manifest: dict[str, Any], legacy: bool = False) -> None:
        deleted = self.components.deleted
        self._committed = Committed(
            name, None if legacy else int(manifest.get("content", 0)), manifest, len(self.X),
            None if deleted is None else deleted.copy(), self.components.snapshot(),
            {name: pipe.snapshot() for name, pipe in self.pipelines.items()})
        self._ops = []

    def _reopen(self, path: Path) -> None:
        """Read the index back from the commit just written whole at ``path`` (so that it reads those
        files, and the ones it read before may be removed), keeping this object's run-time state."""
        fresh = type(self).load(path, embedder=self._embedder, device=self.device, progress=self.progress,
                                verify="fast")
        variants, params = self._variants, self.params
        self._adopt(fresh)
        self._variants, self.params = variants, params

    def _adopt(self, other: "Index") -> None:
        """Become ``other`` (an index loaded or rebased from disk): its state, lease and commit."""
        old = self._lease
        embedder = self._embedder if self._embedder is not None else other._embedder
        self.__dict__.update(other.__dict__)
        self._embedder = embedder
        if self._embedder is not None:
            self.components.embedder = self._embedder
        other._lease = None
        if old is not None and old is not self._lease:
            old.close()
            if self.path is not None and storage.WriteLock(self.path).held():
                storage.cleanup(self.path)  # under our write lock: what this index held before

    # ------------------------------------------------------------------ rebase
    def _not_replayable(self) -> str:
        """Why this index's changes since its commit cannot be applied again on another commit ('' when
        they can: adds, deletes and fits of pipelines only)."""
        if self._ops is None:
            return "it was compacted, merged or its parameters changed"
        for name, pipe in self.pipelines.items():
            snap = self._committed.pipelines.get(name)
            if snap is not None and snap[0] is not pipe.snapshot()[0]:
                return f"pipeline {name!r} was refitted or retrained"
        return ""

    def _replay(self, ops: list[tuple], pipelines: dict[str, Any]) -> None:
        """Apply recorded adds and deletes (``ops``) again, then fit the pipelines ``pipelines`` names
        that this index lacks. A replayed add whose id another writer added meanwhile raises
        :class:`~hopgraph.engine.storage.StaleIndexError`."""
        from ..engine.errors import DuplicateIdError

        for op in ops:
            if op[0] == "add":
                try:
                    self.add(op[1], embeddings=op[2], upsert=op[3])
                except DuplicateIdError as e:
                    raise storage.StaleIndexError(f"another writer added the same passage meanwhile: {e}") from None
            else:
                self.delete(op[1])
        for name in pipelines:
            self.pipeline(name)

    # ------------------------------------------------------------------ load
    @classmethod
    def load(cls, path: str | Path, embedder: Embedder | Callable | str | None = None, device: str = "auto",
             progress: bool = True, verify: str = "full", dense: str | None = None) -> "Index":
        """Open the live commit of a saved index (arrays memory-mapped).

        ``verify="full"`` (default) checks the size and checksum of every file of every segment;
        ``"fast"`` checks sizes only (for very large indexes; ``hopgraph verify`` does the full
        check). Either way every stored array is checked structurally (index ranges, CSR offsets,
        finite unit embeddings, ...), so a corrupt index raises :class:`IndexFormatError` naming
        the file — as do missing files or manifest keys and indexes of an unreadable format
        version (with the command that rebuilds them). ``dense``: the dense search mode
        (``"auto" | "exact" | "ann"``; None: the ``HOPGRAPH_DENSE`` environment variable, else auto). An ``embedder`` other than the one the index
        was built with raises :class:`InputError`. The loaded index holds a lease on its commit, so
        a writer replacing or merging the index does not remove the files it reads."""
        path = Path(path)
        if verify not in storage.VERIFY_LEVELS:
            raise InputError(f"verify must be one of {storage.VERIFY_LEVELS}, got {verify!r}")
        opened = storage.open_index(path)
        try:
            index = cls._open(opened, embedder, device, progress, verify, dense=dense)
        except BaseException:
            opened.close()
            raise
        index._lease = opened
        return index

    @classmethod
    def _open(cls, opened: storage.OpenedIndex, embedder: Embedder | Callable | str | None,
              device: str, progress: bool, verify: str, upto: int | None = None, dense: str | None = None) -> "Index":
        """:meth:`~hopgraph.index.Index.load` of the pinned commit ``opened``; with ``upto``, of its first
        ``upto`` segments only (the index as it was before the later ones: a merge's base state;
        pipelines not stored in them are left out)."""
        path, manifest = opened.path, opened.manifest
        cfile = path / opened.name
        segments = opened.segments if upto is None else opened.segments[:upto]
        for seg in segments:
            problems = storage.verify_files(seg.dir, seg.manifest, verify)
            if problems:
                more = f" (and {len(problems) - 1} more: hopgraph verify {path})" if len(problems) > 1 else ""
                raise IndexFormatError(f"index {path} is corrupt: {problems[0]}{more}")
        try:
            emb_meta = manifest["embedder"]
            n = int(manifest["corpus"]["n_passages"])
            emb_name, dim = str(emb_meta["name"]), int(emb_meta["dim"])
            entries = manifest["pipelines"]
            pipe_params = {name: dict(entry["params"]) for name, entry in entries.items()}
            fit_seconds = {name: float(entry.get("fit_seconds", 0.0)) for name, entry in entries.items()}
            params = validate_params(manifest.get("params") or {}, stored=True)
            segs = [_segment_fields(seg, opened.version) for seg in segments]
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise IndexFormatError(f"{cfile}: missing or invalid entry {e}") from None
        if sum(seg.n_rows for seg in opened.segments) != n:
            raise IndexFormatError(f"{cfile}: segments hold {sum(s.n_rows for s in opened.segments)} passages, "
                                   f"the commit says {n}")
        n = sum(seg.n_rows for seg in segments)
        for recorded in {emb_name, str(emb_meta.get("spec") or emb_name)}:
            _check_embedder_name(cfile, recorded, dim)
        emb = resolve_embedder(embedder) if embedder is not None else None
        if emb is not None and emb.dim != dim:
            raise IndexFormatError(f"index {path} has dimension {dim}; embedder {emb.name} has {emb.dim}")
        if emb is not None and emb.name != emb_name and not emb_name.startswith("precomputed"):
            raise InputError(f"index {path} was built with embedder {emb_name!r}; queries embedded with "
                             f"{emb.name!r} would not match its passages (give embedder={emb_name!r} or none)")
        corpus, parts, deleted = None, [], np.zeros(n, bool)
        for seg, f in zip(segments, segs):
            if not seg.n_rows:
                continue
            part = Corpus.load(seg.dir / "corpus", seg.n_rows, str(path / "corpus"), f["corpus"].get("checksum"))
            corpus = part if corpus is None else corpus.concat(part)
            X = storage.check_array(seg.dir, f["embeddings"])
            storage.check_unit_rows(X, str(seg.dir / "embeddings.npy"), rows=seg.n_rows, dim=dim)
            parts.append(X)
            rows = f["deleted"]
            if rows is not None:
                deleted[seg.first_row + rows] = True
        if corpus is None:
            raise IndexFormatError(f"{cfile}: the index holds no passage")
        X = storage.stack_rows(parts)
        components = Components.load_segments(
            [(seg.dir / "components", f["components"], seg.first_row, seg.n_rows)
             for seg, f in zip(segments, segs)], X, corpus, emb, params.get("bm25"), progress, dense)
        if deleted.any():
            components.deleted = deleted
        index = cls(corpus, X, emb, emb_name, device=device, params=params, progress=progress,
                    components=components, stored_params=True)
        index.embed_seconds = float(manifest.get("embed_seconds", 0.0) or 0.0)
        index.embedder_entry = dict(emb_meta)
        for name, params_ in pipe_params.items():
            parts_ = [(seg.dir / "pipelines" / name, f["pipelines"][name], seg.first_row + seg.n_rows)
                      for seg, f in zip(segments, segs) if name in f["pipelines"]]
            if upto is not None and not any(e.get("state", "full") == "full" for _, e, _ in parts_):
                continue
            for d, _, _ in parts_:
                if not d.is_dir():
                    raise IndexFormatError(f"index {path}: pipeline directory {d} is missing")
            try:
                pipe = pipeline_class(name).load_segments(parts_, params_, components, index.settings)
                search = {k: v for k, v in index.params.get(name, {}).items() if pipe.SearchParams.accepts(k)}
                index.pipelines[name] = pipe.with_search_defaults(**search) if search else pipe
            except IndexFormatError:
                raise
            except (InputError, KeyError, TypeError, ValueError, IndexError, OSError, RuntimeError) as e:
                raise IndexFormatError(f"index {path}: pipeline {name} is corrupt or unreadable: "
                                       f"{type(e).__name__}: {e}") from None
            index.fit_seconds[name] = fit_seconds[name]
        index.path = path
        index._manifest = manifest
        index._snapshot(opened.name, manifest, legacy=opened.version < storage.FORMAT_VERSION)
        return index

    @classmethod
    @contextlib.contextmanager
    def updating(cls, path: str | Path, **load_kwargs: Any) -> Iterator["Index"]:
        """Load the index at ``path`` under its write lock, yield it for :meth:`~hopgraph.index.Index.add` / :meth:`~hopgraph.index.Index.delete`
        / :meth:`~hopgraph.index.Index.compact`, and commit it when the block ends without an
        exception (with one, nothing is written: the index stays as it was). The lock is held from
        the load to the commit, so no other writer commits in between; a second writer meanwhile
        gets :class:`IndexLockedError`. ``path`` must be a hopgraph index (nothing is created)."""
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
        """Release the lease on the loaded commit (its files may then be removed by a writer)."""
        if self._lease is not None:
            self._lease.close()
            self._lease = None

    @property
    def manifest(self) -> dict[str, Any]:
        """The commit this index was loaded from or last saved to."""
        if self.path is None:
            raise RuntimeError("this index has not been saved")
        if self._manifest is None:
            self._manifest = storage.read_manifest(self.path)
        return self._manifest

    @property
    def commit(self) -> dict[str, Any] | None:
        """``{"name", "segments", "created"}`` of the commit this index holds (None before a save)."""
        if self._committed is None:
            return None
        m = self._committed.manifest
        return {"name": self._committed.name, "segments": len(m.get("segments", [None])), "created": m.get("created")}


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


def _same_path(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def _check_embedder_name(manifest: Path, name: str, dim: int) -> None:
    """A built-in embedder named in a manifest must have the recorded dimension (checked without
    loading the model); other names (precomputed, callables) are taken as they are."""
    from ..engine.embedders import DEFAULT_EMBEDDER, MiniLMEmbedder

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

"""Saving, loading and merging an index: the façade over the engine's index reader, writer and merge
policy (:mod:`hopgraph.engine.index`; the format: :mod:`hopgraph.engine.storage`).

An index saved whole is one *base* segment. A later :meth:`~IndexIO.save` of the same index commits
only what changed since it was loaded or last committed (:class:`~hopgraph.engine.index.IndexWriter`).
When another writer committed in between, appends and deletes are applied again on top of its
commit (*rebase*), anything else is refused (:class:`~hopgraph.engine.storage.StaleIndexError`).
A loaded index holds an :class:`~hopgraph.engine.index.IndexReader`: the lease on the commit whose
files it reads. Merges (:meth:`~IndexIO.merge`) are the engine's
(:func:`~hopgraph.engine.index.merge_segments`), by a :class:`~hopgraph.engine.storage.MergePolicy`.
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from ..engine import storage
from ..engine.embedders import Embedder
from ..engine.errors import IndexLockedError, InputError
from ..engine.index import (Committed, IndexContent, IndexReader, IndexWriter, MergeReport, merge_segments)
from ..engine.storage import MERGE_FACTOR, MergePolicy, SegmentInfos, TieredMergePolicy

if TYPE_CHECKING:
    from .index import Index


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

    def _content(self) -> IndexContent:
        """This index's state as the engine's writer takes it (the same objects, not copies)."""
        return IndexContent(self.corpus, self.X, self.components, self.pipelines, self.params, self._embedder,
                            self.embedder_name, self.embedder_entry, self.fit_seconds, self.embed_seconds,
                            self.settings)

    def _write_whole(self, path: Path, overwrite: bool, base: Committed | None = None) -> None:
        """Write the whole index as one base segment and commit it; the index then reads its files.
        With ``base`` (the commit this index was loaded from), refused when another commit is live."""
        with IndexWriter(path, overwrite) as w:
            written = w.write_whole(self._content(), base)
            if self._reader is not None:  # it reads files of another commit: read the new ones instead
                self._reopen(path)
            else:
                self.path = path
                self._snapshot(written)

    def _commit_changes(self, path: Path, rebase: bool) -> None:
        """Commit the changes since :attr:`_committed`; on another writer's commit, rebase them (module
        docstring)."""
        with IndexWriter(path, overwrite=True) as w:
            if w.conflicts(self._committed):
                why = self._not_replayable()
                if not rebase or why:
                    raise w.stale(self._committed, why or "rebase=False")
                latest = type(self).load(path, embedder=self._embedder, device=self.device, progress=self.progress,
                                         verify="fast")
                latest._replay(self._ops, self.pipelines)
                latest._after_commit(path, w.commit_changes(latest._content(), latest._committed))
                self._adopt(latest)
                return
            self._after_commit(path, w.commit_changes(self._content(), self._committed))

    def _after_commit(self, path: Path, written: SegmentInfos) -> None:
        """Snapshot the new commit; an index that reads stored files moves its reader's lease to the new
        commit (which holds all of them)."""
        if self._reader is not None:
            self._reader.repin(written.name)
            storage.cleanup(path)  # the commit this index held before, unless another reader holds it
        self.path = path
        self._snapshot(written)

    def _snapshot(self, written: SegmentInfos) -> None:
        """Make the commit ``written`` the one this index's changes are counted from."""
        self._manifest = written.manifest()
        self._committed = Committed.of(written.name, self._manifest, self._content(), infos=written)
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
        """Become ``other`` (an index loaded or rebased from disk): its state, reader and commit."""
        old = self._reader
        embedder = self._embedder if self._embedder is not None else other._embedder
        self.__dict__.update(other.__dict__)
        self._embedder = embedder
        if self._embedder is not None:
            self.components.embedder = self._embedder
        other._reader = None
        if old is not None and old is not self._reader:
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
        """Open the live commit of a saved index (arrays memory-mapped) with the engine's
        :class:`~hopgraph.engine.index.IndexReader`, which this index then holds.

        ``verify="full"`` (default) checks the size and checksum of every file of every segment;
        ``"fast"`` checks sizes only (for very large indexes; ``hopgraph verify`` does the full
        check). Either way every stored array is checked structurally (index ranges, CSR offsets,
        finite unit embeddings, ...), so a corrupt index raises :class:`IndexFormatError` naming
        the file — as do missing files or manifest keys and indexes of an unreadable format
        version (with the command that rebuilds them). ``dense``: the dense search mode
        (``"auto" | "exact" | "ann"``; None: the ``HOPGRAPH_DENSE`` environment variable, else auto). An ``embedder`` other than the one the index
        was built with raises :class:`InputError`. The loaded index holds a lease on its commit, so
        a writer replacing or merging the index does not remove the files it reads."""
        reader = IndexReader.open(path, embedder, device, progress, verify, dense)
        try:
            c = reader.content
            index = cls(c.corpus, c.X, c.embedder, c.embedder_name, device=device, params=c.params, progress=progress,
                        components=c.components, stored_params=True)
        except BaseException:
            reader.close()
            raise
        index.embed_seconds, index.embedder_entry = c.embed_seconds, c.embedder_entry
        index.pipelines, index.fit_seconds = dict(c.pipelines), dict(c.fit_seconds)
        index.path, index._reader = Path(path), reader
        index._committed, index._manifest = reader.committed, reader.committed.manifest
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
        """Release the reader's lease on the loaded commit (its files may then be removed by a writer)."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    @property
    def reader(self) -> IndexReader | None:
        """The engine's reader of the commit whose files this index reads (None: an index built in
        memory, or saved whole from memory: it reads no stored file). It holds the lease on that
        commit until :meth:`close`."""
        return self._reader

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

    # ------------------------------------------------------------------ merge
    def merge(self, max_segments: int | None = None, factor: int = MERGE_FACTOR,
              policy: MergePolicy | None = None) -> MergeReport:
        """Merge the segments of the index's live commit at its ``path`` as ``policy`` decides (default
        :class:`~hopgraph.engine.storage.TieredMergePolicy` of ``factor``: ``factor`` adjacent
        segments of one size tier at a time; then, while more than ``max_segments`` remain, the
        smallest adjacent pair), committing each merge (:mod:`hopgraph.engine.index.merge`);
        ``max_segments=1`` compacts the index and commits it as one base segment. The index's own
        changes must be committed first (:meth:`~hopgraph.index.Index.save`). Afterwards the index
        reads the merged files. Returns a :class:`~hopgraph.engine.index.MergeReport`."""
        if self.path is None or self._committed is None:
            raise InputError("merge: the index has not been saved; save it first")
        if max_segments is not None and (isinstance(max_segments, bool) or not isinstance(max_segments, int)
                                         or max_segments < 1):
            raise InputError(f"max_segments must be a positive integer, got {max_segments!r}")
        policy = policy if policy is not None else TieredMergePolicy(factor)
        if self._pending():
            raise InputError("merge: the index has changes that are not committed; save() them first")
        before = len(storage.read_manifest(self.path)["segments"])
        if max_segments == 1:
            if before > 1 or self.n_live < len(self.X):
                self.compact()
                self.save()
            return MergeReport([(["*"], storage.segment_dirs(self.path)[0].name)] if before > 1 else [], before,
                               len(storage.read_manifest(self.path)["segments"]))
        merges = merge_segments(self.path, policy, max_segments, progress=self.progress)
        if merges:
            try:
                with storage.WriteLock(self.path):
                    self._reopen(self.path)  # then what only the replaced segments held goes
            except IndexLockedError:
                self._reopen(self.path)
        return MergeReport(merges, before, len(storage.read_manifest(self.path)["segments"]))

    def _pending(self) -> bool:
        """Whether the index holds changes since its commit (rows, deletes, recorded operations)."""
        return self._committed.pending(self._content()) or bool(self._ops)


def _same_path(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False

"""Merging the segments of a saved index: a tiered policy over adjacent segments, each merge written
beside the live commit and committed in place of the segments it replaces.

A merge of the adjacent segments ``S_i .. S_j`` (never the first, the base) writes one segment that
holds their rows and, for every component and pipeline, the change they make together to the index
as it is before ``S_i`` — computed as the segment a commit would write for the index of segments
``[0, j]`` against the index of segments ``[0, i)``. Rows keep their ids (deleted rows stay,
tombstoned, until a compaction), so a merge changes how the index is stored, never what it holds:
its commit keeps the content id of its parent, and another writer's later appends commit on top of
it without a conflict. The merged segment is written without the write lock (its directory survives
other writers' cleanups); the lock is taken to reserve it and again to commit, when the segments
are replaced in the live commit of that moment (their deletes carried over) — or the merge is
dropped when they are gone (a compaction happened meanwhile). Readers of older commits keep their
files; the cleanup after the commit removes what no commit a reader holds references.

``merge(max_segments=1)`` (= ``compact()`` and a commit) rebuilds everything as one base segment.
"""
from __future__ import annotations

import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ..engine import storage
from ..engine.errors import IndexLockedError, InputError
from .io import _npy_bytes

if TYPE_CHECKING:
    from .index import Index

#: segments merged at once by the tiered policy (and the size ratio between its tiers)
MERGE_FACTOR = 10


@dataclass(frozen=True)
class MergeReport:
    """What :meth:`~hopgraph.index.Index.merge` did: the merges committed (the names of the segments
    each replaced, and the merged segment's), and the segment count before and after."""

    merges: list[tuple[list[str], str]]
    segments_before: int
    segments_after: int


def tier(rows: int, factor: int = MERGE_FACTOR) -> int:
    """The tier of a segment of ``rows`` rows: ``⌊log_factor(rows)⌋`` (0 below ``factor`` rows)."""
    return 0 if rows < factor else int(math.log(rows, factor) + 1e-9)


def next_merge(sizes: Sequence[int], factor: int = MERGE_FACTOR, max_segments: int | None = None
               ) -> tuple[int, int] | None:
    """The next merge of the tiered policy over segments of ``sizes`` rows (the first, the base, is
    never merged): ``(i, j)``, the first ``factor`` adjacent segments of one tier; else, while more
    than ``max_segments`` remain, the adjacent pair with the fewest rows; else None."""
    tiers = [tier(n, factor) for n in sizes]
    run = 1
    for i in range(2, len(sizes)):
        run = run + 1 if tiers[i] == tiers[i - 1] else 1
        if run >= factor:
            return i - factor + 1, i
    if max_segments is not None and len(sizes) > max(max_segments, 2) and len(sizes) >= 3:
        i = min(range(1, len(sizes) - 1), key=lambda a: sizes[a] + sizes[a + 1])
        return i, i + 1
    return None


def merge_range(path: Path, first: int, last: int, index_class: type, progress: bool = False
                ) -> tuple[list[str], str] | None:
    """Merge the live commit's segments ``first .. last`` (module docstring; ``index_class``: the
    :class:`~hopgraph.index.Index` class that reads them); returns the names of the segments replaced
    and of the merged one, or None when they are no longer live when it commits."""
    Index = index_class
    with storage.CommitWriter(path, overwrite=True) as w:
        live = w.live
        if live is None:
            raise InputError(f"{path}: merging needs an index of format {storage.FORMAT_VERSION}; compact it")
        names = [s["name"] for s in live["segments"][first:last + 1]]
        seg = w.reserve_segment()
    try:
        opened = storage.open_index(path)
        try:
            at = [s.name for s in opened.segments]
            if at[first:last + 1] != names:
                return None
            before = Index._open(opened, None, "cpu", progress, "fast", upto=first)
            after = Index._open(opened, None, "cpu", progress, "fast", upto=last + 1)
            start, stop = len(before.X), len(after.X)
            since = before._committed  # the two are loaded apart: the states are of one lineage
            since.pipelines = {name: (after.pipelines[name].snapshot()[0], snap[1])
                               for name, snap in since.pipelines.items() if name in after.pipelines}
            fields = after._write_segment(seg.dir, since, start, stop)
        finally:
            opened.close()
        with storage.CommitWriter(path, overwrite=True) as w:
            live = w.live
            segments = [dict(s) for s in live["segments"]]
            at = [s["name"] for s in segments]
            i = next((k for k in range(len(at)) if at[k:k + len(names)] == names), None)
            if i is None:
                return None
            number = w.next_commit_number()
            entry = w.finish_segment(seg, start, stop - start, kind="merged", merged=names, **fields)
            rows = [np.load(path / s["deletes"]["file"], allow_pickle=False) + (int(s["first_row"]) - start)
                    for s in segments[i:i + len(names)] if s.get("deletes")]
            if rows:
                deleted = np.unique(np.concatenate(rows)).astype(np.int64)
                entry["deletes"] = w.write_deletes(entry["name"], number, _npy_bytes(deleted), len(deleted))
            fields_ = {k: v for k, v in live.items()
                       if k not in ("format", "format_version", "commit", "created", "checksum_algorithm")}
            fields_.update(parent=w.live_name, segments=segments[:i] + [entry] + segments[i + len(names):],
                           merged=names)
            w.commit(number, fields_)
            return names, entry["name"]
    finally:
        if seg.dir.exists() and ".merge-" in seg.dir.name:
            storage.commit.ACTIVE_MERGES.discard(seg.dir.name)
            shutil.rmtree(seg.dir, ignore_errors=True)


class IndexMerge:
    """Segment merges of :class:`~hopgraph.index.Index`."""

    def merge(self, max_segments: int | None = None, factor: int = MERGE_FACTOR) -> MergeReport:
        """Merge the segments of the index's live commit at :attr:`path` by the tiered policy
        (:func:`next_merge`: ``factor`` adjacent segments of one size tier at a time; then, while
        more than ``max_segments`` remain, the smallest adjacent pair), committing each merge (module
        docstring); ``max_segments=1`` compacts the index and commits it as one base segment. The
        index's own changes must be committed first (:meth:`~hopgraph.index.Index.save`). Afterwards the index reads the
        merged files. Returns a :class:`MergeReport`."""
        if self.path is None or self._committed is None:
            raise InputError("merge: the index has not been saved; save it first")
        if max_segments is not None and (isinstance(max_segments, bool) or not isinstance(max_segments, int)
                                         or max_segments < 1):
            raise InputError(f"max_segments must be a positive integer, got {max_segments!r}")
        if isinstance(factor, bool) or not isinstance(factor, int) or factor < 2:
            raise InputError(f"factor must be an integer >= 2, got {factor!r}")
        if self._pending():
            raise InputError("merge: the index has changes that are not committed; save() them first")
        before = len(storage.read_manifest(self.path)["segments"])
        if max_segments == 1:
            if before > 1 or self.n_live < len(self.X):
                self.compact()
                self.save()
            return MergeReport([(["*"], storage.segment_dirs(self.path)[0].name)] if before > 1 else [], before,
                               len(storage.read_manifest(self.path)["segments"]))
        merges = []
        while True:
            sizes = [int(s["n_rows"]) for s in storage.read_manifest(self.path)["segments"]]
            step = next_merge(sizes, factor, max_segments)
            if step is None:
                break
            done = merge_range(self.path, *step, type(self), progress=self.progress)
            if done is None:
                break
            merges.append(done)
        if merges:
            try:
                with storage.WriteLock(self.path):
                    self._reopen(self.path)  # then what only the replaced segments held goes
            except IndexLockedError:
                self._reopen(self.path)
        return MergeReport(merges, before, len(storage.read_manifest(self.path)["segments"]))

    def _pending(self) -> bool:
        """Whether the index holds changes since its commit (rows, deletes, recorded operations)."""
        c = self._committed
        deleted = self.components.deleted
        same_deletes = (deleted is None or not deleted.any()) if c.deleted is None else \
            (deleted is not None and np.array_equal(deleted, c.deleted))
        return c.content is None or c.whole or len(self.X) != c.n_rows or not same_deletes or bool(self._ops)

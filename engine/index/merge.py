"""Merging the segments of an index directory: a :class:`~hopgraph.engine.storage.MergePolicy` names
adjacent segments, each merge is written beside the live commit and committed in place of the
segments it replaces.

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
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import storage
from ..errors import InputError
from ..params import RunSettings
from ..storage.merge_policy import MergePolicy, TieredMergePolicy
from ..storage.segment_infos import SegmentInfos
from .reader import read_commit
from .writer import npy_bytes, write_segment


@dataclass(frozen=True)
class MergeReport:
    """What a merge did: the merges committed (the names of the segments each replaced, and the
    merged segment's), and the segment count before and after."""

    merges: list[tuple[list[str], str]]
    segments_before: int
    segments_after: int


def merge_range(path: str | Path, first: int, last: int, progress: bool = False) -> tuple[list[str], str] | None:
    """Merge the live commit's segments ``first .. last`` of the index at ``path`` (module docstring);
    returns the names of the segments replaced and of the merged one, or None when they are no longer
    live when it commits. :class:`~hopgraph.engine.errors.InputError` for an index of format 3."""
    path = Path(path)
    with storage.CommitWriter(path, overwrite=True) as w:
        if w.live is None:
            raise InputError(f"{path}: merging needs an index of format {storage.FORMAT_VERSION}; compact it")
        names = w.live.names()[first:last + 1]
        seg = w.reserve_segment()
    try:
        opened = storage.open_index(path)
        try:
            if [s.name for s in opened.segments][first:last + 1] != names:
                return None
            settings = RunSettings(device="cpu")
            before, since = read_commit(opened, None, settings, progress, "fast", upto=first)
            after, _ = read_commit(opened, None, settings, progress, "fast", upto=last + 1)
            start, stop = len(before.X), len(after.X)
            # the two are read apart: the states are of one lineage
            since.pipelines = {name: (after.pipelines[name].snapshot()[0], snap[1])
                               for name, snap in since.pipelines.items() if name in after.pipelines}
            fields = write_segment(seg.dir, after, since, start, stop)
        finally:
            opened.close()
        with storage.CommitWriter(path, overwrite=True) as w:
            live = w.live
            i = live.find(names)
            if i is None:
                return None
            number = w.next_commit_number()
            entry = w.finish_segment(seg, start, stop - start, kind="merged", merged=names, **fields)
            replaced = live.segments[i:i + len(names)]
            rows = [np.load(path / s.deletes_file, allow_pickle=False) + (s.first_row - start)
                    for s in replaced if s.deletes is not None]
            if rows:
                deleted = np.unique(np.concatenate(rows)).astype(np.int64)
                entry = entry.with_deletes(w.write_deletes(entry.name, number, npy_bytes(deleted), len(deleted)))
            w.commit(number, live.next(live.segments[:i] + (entry,) + live.segments[i + len(names):], merged=names))
            return names, entry.name
    finally:
        if seg.dir.exists() and ".merge-" in seg.dir.name:
            storage.commit.ACTIVE_MERGES.discard(seg.dir.name)
            shutil.rmtree(seg.dir, ignore_errors=True)


def merge_segments(path: str | Path, policy: MergePolicy | None = None, max_segments: int | None = None,
                   progress: bool = False) -> list[tuple[list[str], str]]:
    """Merge the segments of the index at ``path`` as ``policy`` decides (default
    :class:`~hopgraph.engine.storage.TieredMergePolicy`), one :func:`merge_range` and commit at a
    time, until it decides nothing more (or a merge's segments are gone); returns the merges. The
    caller's own index is not reread: readers keep the commit they opened."""
    policy = policy if policy is not None else TieredMergePolicy()
    merges = []
    while True:
        step = policy.find_merge(SegmentInfos.read(path).sizes, max_segments)
        if step is None:
            break
        done = merge_range(path, *step, progress=progress)
        if done is None:
            break
        merges.append(done)
    return merges


__all__ = ["MergeReport", "merge_range", "merge_segments"]

"""Writing an index directory: an :class:`IndexContent` committed whole (one base segment) or as the
changes since the commit it was read from (one segment and deletes files), under the write lock.

An index written whole is one *base* segment. A commit of changes writes a segment holding the
appended rows of every component (corpus strings, embeddings, IVF codes, BM25 postings) and each
component's and pipeline's change since the :class:`Committed` snapshot
(:meth:`~hopgraph.engine.components.shared.Components.save_segment`,
:meth:`~hopgraph.engine.pipelines.Pipeline.save_segment`), plus a small deletes file for each
segment whose deleted rows changed; unchanged segments are referenced by the new commit, never
copied. A commit names its parent and the last commit that changed the index's content: a writer
whose snapshot is of another content than the live commit's (:meth:`IndexWriter.conflicts`) must
not commit its changes over it — the caller applies them again on the live commit (a rebase) or
refuses (:meth:`IndexWriter.stale`).
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np

from .. import storage
from ..embedders import embedder_entry
from ..errors import InputError
from ..storage.segment_infos import SegmentInfo, SegmentInfos
from .content import Committed, IndexContent
from .params import fit_params_only


def npy_bytes(array: np.ndarray) -> bytes:
    """The bytes of ``array`` as a ``.npy`` file (no pickle)."""
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def write_segment(directory: Path, content: IndexContent, since: Committed | None, start: int, stop: int
                  ) -> dict[str, Any]:
    """Write rows ``[start, stop)`` of ``content`` and every change of its components and pipelines
    since ``since`` (None: everything) under ``directory``; returns the segment manifest's fields
    (``corpus``, ``embeddings``: only with rows; ``components``; ``pipelines``: those that wrote)."""
    fields: dict[str, Any] = {}
    content.components.begin_segment_write()
    if stop > start:
        whole = since is None and start == 0 and stop == len(content.X)
        part = content.corpus if whole and stop == len(content.corpus) else content.corpus.rows(start, stop)
        fields["corpus"] = part.save(directory / "corpus")
        fields["embeddings"] = storage.save_array(directory, "embeddings", content.X if whole else content.X[start:stop])
    fields["components"] = content.components.save_segment(directory / "components",
                                                           since.components if since else None, start, stop)
    pipes = {}
    for name, pipe in content.pipelines.items():
        entry = pipe.save_segment(directory / "pipelines" / name,
                                  since.pipelines.get(name) if since is not None else None, start, stop)
        if entry is not None:
            pipes[name] = entry
    fields["pipelines"] = pipes
    return fields


class IndexWriter:
    """The writer of the index directory ``path`` (module docstring), holding its write lock from
    ``with IndexWriter(path, overwrite) as w:`` to the end of the block (a second writer meanwhile
    gets :class:`~hopgraph.engine.errors.IndexLockedError`). :attr:`live` is the live commit when
    the block was entered. Each :meth:`write_whole` / :meth:`commit_changes` is one atomic commit;
    leaving the block with an exception leaves the index as its last commit left it. ``path`` must
    not exist, be empty or be an index directory; an existing index is replaced only with
    ``overwrite`` (``flag``: how the caller's user says so, for the error)."""

    def __init__(self, path: str | Path, overwrite: bool = False, flag: str = "overwrite=True") -> None:
        self.path = Path(path)
        self._commits = storage.CommitWriter(self.path, overwrite, flag)

    def __enter__(self) -> "IndexWriter":
        self._commits.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._commits.__exit__(*exc)

    @property
    def live(self) -> SegmentInfos | None:
        """The live commit's segment list (None: a new index, or one of format 3)."""
        return self._commits.live

    @property
    def live_name(self) -> str:
        """The name ``CURRENT`` points at (a format-3 generation included)."""
        return self._commits.live_name or self._commits.current or storage.read_current(self.path)[0]

    # ------------------------------------------------------------------ conflicts
    def conflicts(self, since: Committed) -> bool:
        """Whether another writer changed the index's content after the commit ``since`` was read
        (:class:`~hopgraph.engine.errors.InputError` when the directory holds no format-4 commit)."""
        if self.live is None:
            raise InputError(f"{self.path} holds a hopgraph index other than the one this index was loaded from "
                             f"({'of an older format' if storage.has_index(self.path) else 'none'}); pass "
                             f"overwrite=True to replace it")
        return self.live.content != since.content

    def stale(self, since: Committed, why: str) -> storage.StaleIndexError:
        """The error refusing a commit of changes read from ``since`` over the live commit (``why``)."""
        return storage.StaleIndexError(
            f"{self.path}: another writer committed {self.live_name} after this index was loaded from "
            f"{since.name}; {why}: load the index again and repeat the change (Index.updating(path) holds "
            f"the write lock from load to commit)")

    # ------------------------------------------------------------------ commits
    def write_whole(self, content: IndexContent, base: Committed | None = None) -> SegmentInfos:
        """Commit ``content`` whole as one base segment; returns the commit written. With ``base``
        (the commit the content was read from), refused with
        :class:`~hopgraph.engine.storage.StaleIndexError` when another commit of other content is
        live (a compacted index cannot be applied on top of it)."""
        w = self._commits
        if base is not None and self.live_name != base.name and (self.live is None or self.live.content != base.content):
            raise storage.StaleIndexError(
                f"{self.path}: another writer committed {self.live_name} after this index was loaded from "
                f"{base.name}; a compacted index is written whole and cannot be applied on top of it: load the "
                f"index again and repeat the change")
        number = w.next_commit_number()
        seg = w.new_segment()
        n = len(content.X)
        entry = w.finish_segment(seg, 0, n, kind="base", **write_segment(seg.dir, content, None, 0, n))
        entry = entry.with_deletes(self._deletes_file(content, number, entry.name, 0, n))
        return w.commit(number, _commit_infos(content, [entry], self._commits.live_name, number))

    def commit_changes(self, content: IndexContent, since: Committed) -> SegmentInfos:
        """Commit the changes of ``content`` since the snapshot ``since`` (module docstring) on top of
        the live commit, whose content must be ``since``'s (:meth:`conflicts`); returns the commit."""
        w = self._commits
        number = w.next_commit_number()
        segments = list(self.live.segments)
        start, stop = since.n_rows, len(content.X)
        seg = w.new_segment()
        fields = write_segment(seg.dir, content, since, start, stop)
        if stop > start or fields["pipelines"] or any(fields["components"].values()):
            segments.append(w.finish_segment(seg, start, stop - start, kind="add", **fields))
        deleted = content.components.deleted
        for i, s in enumerate(segments):
            now = deleted[s.first_row:s.first_row + s.n_rows] if deleted is not None else None
            before = self._stored_deletes(s)
            if (now is None or not now.any()) and before is None:
                continue
            if before is not None and now is not None and np.array_equal(before, now):
                continue
            segments[i] = s.with_deletes(self._deletes_file(content, number, s.name, s.first_row, s.n_rows))
        return w.commit(number, _commit_infos(content, segments, self._commits.live_name, number))

    def _stored_deletes(self, seg: SegmentInfo) -> np.ndarray | None:
        """The deleted-rows mask the live commit holds for ``seg`` (None: none deleted)."""
        if seg.deletes is None:
            return None
        rows = np.load(self.path / seg.deletes_file, allow_pickle=False)
        mask = np.zeros(seg.n_rows, bool)
        mask[rows] = True
        return mask

    def _deletes_file(self, content: IndexContent, number: int, segment: str, first: int, n: int
                      ) -> dict[str, Any] | None:
        """Write the deleted rows (local) of a segment's rows ``[first, first + n)``; None when none is."""
        deleted = content.components.deleted
        if deleted is None or not deleted[first:first + n].any():
            return None
        rows = np.flatnonzero(deleted[first:first + n]).astype(np.int64)
        return self._commits.write_deletes(segment, number, npy_bytes(rows), len(rows))


def _commit_infos(content: IndexContent, segments: list[SegmentInfo], parent: str | None, content_id: int
                  ) -> SegmentInfos:
    """A new commit of ``segments`` with ``content``'s metadata."""
    deleted = content.components.deleted
    return SegmentInfos(None, tuple(segments), {
        "parent": parent,
        "content": content_id,
        "corpus": {"n_passages": len(content.corpus), "n_live": content.n_live, "source": content.corpus.source},
        "embedder": embedder_entry(content.embedder, content.embedder_name, int(content.X.shape[1])),
        "embed_seconds": content.embed_seconds,
        "pipelines": {name: {"params": pipe.fit_params.to_dict(), "fit_seconds": content.fit_seconds.get(name, 0.0)}
                      for name, pipe in content.pipelines.items()},
        "params": fit_params_only(content.params),
        "n_deleted": int(deleted.sum()) if deleted is not None else 0,
    })


__all__ = ["IndexWriter", "npy_bytes", "write_segment"]

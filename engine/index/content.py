"""What an index holds in memory (:class:`IndexContent`) and what it was last committed as
(:class:`Committed`): the values the index reader produces and the index writer consumes."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..components.corpus import Corpus
from ..components.shared import Components, ComponentsSnapshot
from ..embedders import Embedder
from ..params import RunSettings
from ..pipelines import Pipeline
from ..storage.segment_infos import SegmentInfos


@dataclass
class IndexContent:
    """An index's passages and what is fitted over them: the ``corpus``, its embeddings ``X`` (float32
    ``[N, d]``, unit rows), the shared ``components`` (deleted rows in ``components.deleted``), the
    fitted ``pipelines`` by name, the validated ``params`` (``{pipeline: {name: value}}``), the query
    ``embedder`` (None: not resolved, e.g. an index opened without one), its name and stored entry,
    the fit and embed times, and the run ``settings`` the pipelines got."""

    corpus: Corpus
    X: np.ndarray
    components: Components
    pipelines: dict[str, Pipeline]
    params: dict[str, dict[str, Any]]
    embedder: Embedder | None
    embedder_name: str
    embedder_entry: dict[str, Any] | None = None
    fit_seconds: dict[str, float] = field(default_factory=dict)
    embed_seconds: float = 0.0
    settings: RunSettings = field(default_factory=RunSettings)

    @property
    def n_live(self) -> int:
        """Rows a search may return (all rows minus the deleted ones)."""
        deleted = self.components.deleted
        return len(self.X) - (int(deleted.sum()) if deleted is not None else 0)


@dataclass
class Committed:
    """What an index was opened from or last committed: the commit (``name``, its ``manifest``, its
    segment list ``infos``: None for a format-3 index), the content id a later commit must find live
    (None: a format-3 index, written whole next), the row count, the deleted rows and the
    components' and pipelines' snapshots (what the next commit writes the changes against)."""

    name: str
    content: int | None
    manifest: dict[str, Any]
    n_rows: int
    deleted: np.ndarray | None
    components: ComponentsSnapshot
    pipelines: dict[str, Any]
    infos: SegmentInfos | None = None
    #: the rows were renumbered (a compaction): the next commit writes the index whole
    whole: bool = False

    @classmethod
    def of(cls, name: str, manifest: dict[str, Any], content: IndexContent, legacy: bool = False,
           infos: SegmentInfos | None = None) -> "Committed":
        """The snapshot of ``content`` as committed in ``name`` (``manifest``; ``legacy``: of format 3)."""
        deleted = content.components.deleted
        if infos is None and not legacy:
            infos = SegmentInfos.from_manifest(name, manifest, name)
        return cls(name, None if legacy else int(manifest.get("content", 0)), manifest, len(content.X),
                   None if deleted is None else deleted.copy(), content.components.snapshot(),
                   {n: pipe.snapshot() for n, pipe in content.pipelines.items()}, infos)

    @property
    def segments(self) -> list[dict[str, Any]]:
        """The commit's segment entries (as its file holds them)."""
        return list(self.manifest.get("segments", []))

    def pending(self, content: IndexContent) -> bool:
        """Whether ``content`` holds rows or deletes beyond this commit (or must be written whole)."""
        deleted = content.components.deleted
        same_deletes = (deleted is None or not deleted.any()) if self.deleted is None else \
            (deleted is not None and np.array_equal(deleted, self.deleted))
        return self.content is None or self.whole or len(content.X) != self.n_rows or not same_deletes


__all__ = ["Committed", "IndexContent"]

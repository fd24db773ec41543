"""What the index façade returns: search hits and the reports of live updates."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class AddReport:
    """What :meth:`Index.add` did: the ids appended, those of them that replaced a passage
    (``upsert=True``), and the seconds spent embedding and updating."""

    added: list[str]
    replaced: list[str]
    embed_seconds: float
    update_seconds: float


@dataclass(frozen=True)
class DeleteReport:
    """What :meth:`Index.delete` did: ids now deleted, and ids the index does not hold (never
    added, or already deleted)."""

    deleted: list[str]
    unknown: list[str]


@dataclass(frozen=True)
class Hit:
    """One retrieved passage: its corpus id, score, rank (from 1), title, text and metadata.

    ``text`` is the passage text, or None when the search was asked not to return it
    (``with_text=False``); ``metadata`` is the corpus record's metadata object (``{}`` for
    none; see :meth:`hopgraph.Corpus.meta`), always filled. Hits are frozen; ``metadata`` is a
    plain dict and takes no part in hashing.
    """

    id: str
    score: float
    rank: int
    title: str = ""
    text: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict, hash=False)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

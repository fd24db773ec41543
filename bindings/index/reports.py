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
    none; see :meth:`hopgraph.Corpus.meta`), always filled. A passage of a chunked document
    also gives its :attr:`document_id`, :attr:`start_char` and :attr:`end_char`. Hits are frozen; ``metadata`` is a
    plain dict and takes no part in hashing.
    """

    id: str
    score: float
    rank: int
    title: str = ""
    text: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict, hash=False)

    def to_dict(self) -> dict[str, Any]:
        """The hit as a plain dict (``id``, ``score``, ``rank``, ``title``, ``text``, ``metadata``): what
        ``--json`` prints and the server answers."""
        return asdict(self)

    @property
    def document_id(self) -> str:
        """The document this passage was cut from (a chunked index's ``"document"`` metadata), else
        the passage's own id."""
        doc = self.metadata.get("document")
        return str(doc) if isinstance(doc, (str, int)) and not isinstance(doc, bool) else self.id

    @property
    def start_char(self) -> int | None:
        """Where the passage starts in its document's text (a chunked index's ``"start_char"``), else
        None: ``document_text[hit.start_char:hit.end_char] == hit.text``."""
        value = self.metadata.get("start_char")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def end_char(self) -> int | None:
        """Where the passage ends in its document's text (``"end_char"``), else None."""
        value = self.metadata.get("end_char")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

"""Passage corpora: loading, validation and checksums.

A corpus is three aligned lists (ids, titles, texts). Row ``i`` of every embedding
matrix and graph in an index is passage ``i`` of its corpus (SPEC notation: chunk c
with preprocessing index t(c) = i).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Mapping, Sequence

from .errors import InputError


@dataclass(frozen=True)
class Corpus:
    """An ordered, validated list of passages."""

    ids: tuple[str, ...]
    titles: tuple[str, ...]
    texts: tuple[str, ...]
    source: str = "<memory>"
    _positions: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not (len(self.ids) == len(self.titles) == len(self.texts)):
            raise InputError(f"{self.source}: ids, titles and texts have different lengths")
        positions = self._positions
        positions.clear()
        for i, pid in enumerate(self.ids):
            if pid in positions:
                raise InputError(
                    f"{self.source}: duplicate passage id {pid!r} (passages {positions[pid]} and {i})"
                )
            positions[pid] = i
            if not self.texts[i] or not self.texts[i].strip():
                raise InputError(f"{self.source}: passage {pid!r} (number {i}) has empty text")

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_strings(cls, texts: Sequence[str], source: str = "<list>") -> "Corpus":
        """Passages from plain strings; ids are their positions as strings ("0", "1", ...)."""
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise InputError(f"{source}: item {i} is {type(t).__name__}, expected str")
        return cls(tuple(str(i) for i in range(len(texts))), ("",) * len(texts), tuple(texts), source)

    @classmethod
    def from_records(cls, records: Iterable[Mapping], source: str = "<records>") -> "Corpus":
        """Passages from dicts with keys ``id``, ``text`` and optional ``title``."""
        ids, titles, texts = [], [], []
        for n, rec in enumerate(records, start=1):
            pid, title, text = _validate_record(rec, f"{source} record {n}")
            ids.append(pid), titles.append(title), texts.append(text)
        return cls(tuple(ids), tuple(titles), tuple(texts), source)

    @classmethod
    def from_jsonl(cls, path: str | Path) -> "Corpus":
        """Load JSON lines ``{"id", "title", "text"}`` (title optional).

        Errors name the file and the line: invalid JSON, missing or empty fields,
        duplicate ids (with the line of the first occurrence).
        """
        path = Path(path)
        if not path.is_file():
            raise InputError(f"corpus file {path} does not exist")
        ids, titles, texts = [], [], []
        first_line: dict[str, int] = {}
        for lineno, rec in iter_jsonl(path):
            pid, title, text = _validate_record(rec, f"{path} line {lineno}")
            if pid in first_line:
                raise InputError(
                    f"{path} line {lineno}: duplicate id {pid!r} (first seen on line {first_line[pid]})"
                )
            first_line[pid] = lineno
            ids.append(pid), titles.append(title), texts.append(text)
        if not ids:
            raise InputError(f"corpus file {path} holds no passages")
        return cls(tuple(ids), tuple(titles), tuple(texts), str(path))

    @classmethod
    def coerce(cls, corpus: "Corpus | str | Path | Sequence[str] | Sequence[Mapping]") -> "Corpus":
        """Accept a Corpus, a JSON-lines path, a list of strings or a list of records."""
        if isinstance(corpus, Corpus):
            return corpus
        if isinstance(corpus, (str, Path)):
            return cls.from_jsonl(corpus)
        items = list(corpus)
        if items and all(isinstance(x, Mapping) for x in items):
            return cls.from_records(items)
        return cls.from_strings(items)

    # ------------------------------------------------------------------ access
    def __len__(self) -> int:
        return len(self.ids)

    def position(self, pid: str) -> int:
        """Row of passage ``pid``; KeyError naming the id if absent."""
        try:
            return self._positions[pid]
        except KeyError:
            raise KeyError(f"passage id {pid!r} is not in corpus {self.source}") from None

    def embedding_texts(self, start: int = 0, stop: int | None = None) -> list[str]:
        """Texts as embedded: ``"title: text"`` when a title exists, else the text
        (passages ``start:stop``, all by default, so large corpora are embedded in batches)."""
        return [f"{t}: {x}" if t else x for t, x in zip(self.titles[start:stop], self.texts[start:stop])]

    @property
    def checksum(self) -> str:
        """sha256 over ids, titles and texts (order-sensitive)."""
        h = hashlib.sha256()
        for pid, title, text in zip(self.ids, self.titles, self.texts):
            for part in (pid, title, text):
                b = part.encode("utf-8")
                h.update(len(b).to_bytes(8, "little"))
                h.update(b)
        return h.hexdigest()

    def write_jsonl(self, path: str | Path) -> None:
        """Write the corpus as JSON lines (the format ``from_jsonl`` reads)."""
        with open(path, "w", encoding="utf-8") as f:
            for pid, title, text in zip(self.ids, self.titles, self.texts):
                f.write(json.dumps({"id": pid, "title": title, "text": text}, ensure_ascii=False) + "\n")


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    """Yield (line number, object) for each non-blank line; InputError names file and line."""
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(f"{path} line {lineno}: invalid JSON ({e.msg} at column {e.colno})") from None
            if not isinstance(obj, dict):
                raise InputError(f"{path} line {lineno}: expected a JSON object, got {type(obj).__name__}")
            yield lineno, obj


def _validate_record(rec: Mapping, where: str) -> tuple[str, str, str]:
    if not isinstance(rec, Mapping):
        raise InputError(f"{where}: expected an object with 'id' and 'text'")
    if "id" not in rec:
        raise InputError(f"{where}: missing field 'id'")
    if "text" not in rec:
        raise InputError(f"{where}: missing field 'text'")
    pid, text, title = rec["id"], rec["text"], rec.get("title") or ""
    if not isinstance(pid, (str, int)) or isinstance(pid, bool) or str(pid) == "":
        raise InputError(f"{where}: 'id' must be a non-empty string or integer")
    if not isinstance(text, str):
        raise InputError(f"{where}: 'text' must be a string")
    if not text.strip():
        raise InputError(f"{where}: empty text for id {pid!r}")
    if not isinstance(title, str):
        raise InputError(f"{where}: 'title' must be a string")
    return str(pid), title, text

"""The segment list of a commit (as Lucene's ``SegmentInfos``): the one place that reads and writes
the commit point ``CURRENT`` and a commit file ``commit-CCCCCC.json`` of format 4.

A commit file holds the index's metadata (content id, parent commit, corpus, embedder, pipelines
and their fit parameters, deleted-row count, ...) and its segments in row order; each segment entry
names the segment directory, its global rows, the size and digest of its ``segment.json`` and, when
rows of it are deleted, its deletes file (name, size, digest, count). ``CURRENT`` names the live
commit with the commit file's size and digest. :class:`SegmentInfos` is that content as a value:
read from a directory (checked against ``CURRENT``), changed by building a new value, written as a
new commit (the commit file durably, then ``CURRENT`` replaced atomically).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..errors import IndexFormatError
from .checksum import HASH, file_digest
from .durable import write_file_durably
from .layout import CURRENT, DELETES_PATTERN, FORMAT_NAME, FORMAT_VERSION, commit_name, commit_number, \
    generation_number, segment_number

#: the fields a commit file gets when it is written (never carried from one commit to the next)
FORMAT_FIELDS = ("format", "format_version", "commit", "created", "checksum_algorithm")


def read_current(path: Path) -> tuple[str, dict[str, Any]]:
    """The name ``CURRENT`` points at (a commit file, or a format-3 generation) and its manifest entry
    (size, digest, algorithm); :class:`IndexFormatError` when ``CURRENT`` is unreadable."""
    cur = Path(path) / CURRENT
    try:
        obj = json.loads(cur.read_text(encoding="utf-8"))
        name = obj.get("commit", obj.get("generation"))
        entry = obj["manifest"]
        if obj.get("format") != FORMAT_NAME or not isinstance(name, str) or not isinstance(entry, dict) or \
                (commit_number(name) is None and generation_number(name) is None):
            raise ValueError("not a commit point")
        int(entry["size"]), str(entry["digest"]), str(entry["algorithm"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise IndexFormatError(f"{cur} is corrupt ({e}); the index cannot be opened") from None
    return name, entry


def check_digest(file: Path, entry: dict[str, Any], whose: str) -> None:
    """Raise :class:`IndexFormatError` unless ``file`` exists with the size and digest ``entry``
    (``{"size", "digest"[, "algorithm"]}``, recorded by ``whose``) gives."""
    try:
        size, digest, algorithm = int(entry["size"]), str(entry["digest"]), str(entry.get("algorithm", HASH))
    except (KeyError, TypeError, ValueError):
        raise IndexFormatError(f"{whose}: bad entry for {file.name}") from None
    if not file.is_file():
        raise IndexFormatError(f"{file} is missing")
    if file.stat().st_size != size or file_digest(file, algorithm) != digest:
        raise IndexFormatError(f"{file} is corrupt (size or checksum differs from {whose})")


def read_json(file: Path) -> dict[str, Any]:
    """The JSON object in ``file``; :class:`IndexFormatError` when it is unreadable or not an object."""
    try:
        obj = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise IndexFormatError(f"{file} is corrupt: {e}") from None
    if not isinstance(obj, dict):
        raise IndexFormatError(f"{file} is not a JSON object")
    return obj


def file_entry(file: Path, **more: Any) -> dict[str, Any]:
    """``{"size", "digest", "algorithm", **more}`` of ``file``: how a commit records a file it names."""
    return {"size": file.stat().st_size, "digest": file_digest(file), "algorithm": HASH, **more}


@dataclass(frozen=True)
class SegmentInfo:
    """One segment of a commit: its name (``seg-NNNNNN``, also its directory), its global rows
    ``[first_row, first_row + n_rows)``, the recorded size and digest of its ``segment.json``
    (``manifest``) and its deletes file entry (``{"file", "size", "digest", "algorithm", "count"}``;
    None: no row deleted)."""

    name: str
    first_row: int
    n_rows: int
    manifest: dict[str, Any]
    deletes: dict[str, Any] | None = None
    #: keys of the commit's entry that this version does not interpret (written back unchanged)
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_entry(cls, entry: Any, where: str | Path, i: int) -> "SegmentInfo":
        """The segment a commit's entry (number ``i`` of the commit file ``where``) describes;
        :class:`IndexFormatError` naming both when it is malformed (a bad segment or deletes file name
        included)."""
        try:
            name, first, n = str(entry["name"]), int(entry["first_row"]), int(entry["n_rows"])
            if segment_number(name) is None:
                raise ValueError(f"bad segment name {name!r}")
            manifest = dict(entry["manifest"])
            deletes = entry.get("deletes")
        except (KeyError, TypeError, ValueError) as e:
            raise IndexFormatError(f"{where}: segment {i}: missing or invalid entry {e}") from None
        if deletes is not None:
            try:
                file = str(deletes["file"])
                if Path(file).name != file or not DELETES_PATTERN.fullmatch(file):
                    raise ValueError("bad deletes file name")
                deletes = dict(deletes)
            except (KeyError, TypeError, ValueError) as e:
                raise IndexFormatError(f"{where}: segment {name}: bad deletes entry ({e})") from None
        extra = {k: v for k, v in entry.items() if k not in ("name", "first_row", "n_rows", "manifest", "deletes")}
        return cls(name, first, n, manifest, deletes, extra)

    def entry(self) -> dict[str, Any]:
        """The commit file's entry for this segment (what :meth:`from_entry` reads)."""
        return {**self.extra, "name": self.name, "first_row": self.first_row, "n_rows": self.n_rows,
                "manifest": dict(self.manifest), "deletes": None if self.deletes is None else dict(self.deletes)}

    @property
    def deletes_file(self) -> str | None:
        """The name of the deletes file (in the index directory), None when no row is deleted."""
        return None if self.deletes is None else str(self.deletes["file"])

    @property
    def deleted_count(self) -> int:
        """How many of the segment's rows are deleted (as its deletes entry records)."""
        return 0 if self.deletes is None else int(self.deletes.get("count", 0))

    def with_deletes(self, deletes: dict[str, Any] | None) -> "SegmentInfo":
        """This segment with another deletes entry."""
        return SegmentInfo(self.name, self.first_row, self.n_rows, self.manifest, deletes, self.extra)


@dataclass(frozen=True)
class SegmentInfos:
    """The content of one commit (module docstring): its ``name`` (``commit-CCCCCC.json``; None for one
    not written yet), its ``segments`` in row order and every other field of the commit file
    (``fields``: the index's metadata, the format fields of a commit that was read included)."""

    name: str | None
    segments: tuple[SegmentInfo, ...]
    fields: dict[str, Any]

    # ------------------------------------------------------------------ reading
    @classmethod
    def from_manifest(cls, name: str | None, manifest: dict[str, Any], where: str | Path = "commit"
                      ) -> "SegmentInfos":
        """The segment list of a commit file's parsed JSON ``manifest``; :class:`IndexFormatError`
        naming ``where`` when its segment list is missing or malformed."""
        segments = manifest.get("segments")
        if not isinstance(segments, list):
            raise IndexFormatError(f"{where}: missing or invalid entry 'segments'")
        infos = tuple(SegmentInfo.from_entry(s, where, i) for i, s in enumerate(segments))
        return cls(name, infos, {k: v for k, v in manifest.items() if k != "segments"})

    @classmethod
    def read(cls, path: str | Path) -> "SegmentInfos":
        """The live commit of the index directory ``path``, its file checked against ``CURRENT``
        (:class:`IndexFormatError` when ``CURRENT`` names a format-3 generation, or anything is
        missing or corrupt). Nothing is pinned: a reader that keeps reading leases the commit
        (:func:`~hopgraph.engine.storage.open_index`)."""
        path = Path(path)
        name, entry = read_current(path)
        if commit_number(name) is None:
            raise IndexFormatError(f"{path}: {name} is an index of format 3, which has no segment list")
        return cls.read_commit(path, name, entry)

    @classmethod
    def read_commit(cls, path: Path, name: str, entry: dict[str, Any]) -> "SegmentInfos":
        """The commit file ``name`` of ``path``, checked against its ``CURRENT`` entry ``entry``."""
        cfile = Path(path) / name
        check_digest(cfile, entry, str(Path(path) / CURRENT))
        return cls.from_manifest(name, read_json(cfile), cfile)

    # ------------------------------------------------------------------ the commit's values
    @property
    def generation(self) -> int:
        """The commit number (0 for a commit not written yet)."""
        return commit_number(self.name or "") or 0

    @property
    def content(self) -> int | None:
        """The number of the last commit that changed the index's content (a merge keeps its parent's)."""
        value = self.fields.get("content")
        return None if value is None else int(value)

    @property
    def parent(self) -> str | None:
        """The commit this one was written on top of (None: the first of its index)."""
        return self.fields.get("parent")

    @property
    def sizes(self) -> list[int]:
        """Each segment's row count, in row order (what a merge policy decides on)."""
        return [s.n_rows for s in self.segments]

    @property
    def n_rows(self) -> int:
        """The rows of all segments."""
        return sum(self.sizes)

    @property
    def n_deleted(self) -> int:
        """The deleted rows of all segments, as their deletes entries record."""
        return sum(s.deleted_count for s in self.segments)

    def names(self) -> list[str]:
        """The segments' names, in row order."""
        return [s.name for s in self.segments]

    def referenced(self) -> set[str]:
        """The names of the segment directories and deletes files this commit holds."""
        return {s.name for s in self.segments} | {s.deletes_file for s in self.segments if s.deletes is not None}

    def manifest(self) -> dict[str, Any]:
        """The commit file's JSON object (what :meth:`from_manifest` reads)."""
        return {**self.fields, "segments": [s.entry() for s in self.segments]}

    # ------------------------------------------------------------------ new commits
    def next(self, segments: Sequence[SegmentInfo], **fields: Any) -> "SegmentInfos":
        """A commit not written yet on top of this one: ``segments``, this commit's fields (the format
        fields left out) updated by ``fields``, and ``parent`` this commit."""
        kept = {k: v for k, v in self.fields.items() if k not in FORMAT_FIELDS}
        return SegmentInfos(None, tuple(segments), {**kept, "parent": self.name, **fields})

    def find(self, names: Sequence[str]) -> int | None:
        """Where the adjacent segments ``names`` start in this commit (None: they are not all here)."""
        at = self.names()
        return next((i for i in range(len(at)) if at[i:i + len(names)] == list(names)), None)

    def write(self, path: str | Path, number: int, created: float) -> "SegmentInfos":
        """Write this content as commit ``number`` of the index directory ``path`` (the commit file
        durably, then ``CURRENT`` replaced atomically: a kill at any moment leaves the previous or the
        new commit live) and return it as written (named, with its format fields)."""
        path = Path(path)
        name = commit_name(number)
        kept = {k: v for k, v in self.fields.items() if k not in FORMAT_FIELDS}
        fields = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, "commit": number, "created": created,
                  **kept, "checksum_algorithm": HASH}
        written = SegmentInfos(name, self.segments, fields)
        cfile = path / name
        write_file_durably(cfile, (json.dumps(written.manifest(), sort_keys=True, separators=(",", ":")) + "\n").encode())
        current = {"format": FORMAT_NAME, "commit": name, "manifest": file_entry(cfile)}
        write_file_durably(path / CURRENT, (json.dumps(current, indent=2, sort_keys=True) + "\n").encode())
        return written


__all__ = ["FORMAT_FIELDS", "SegmentInfo", "SegmentInfos", "check_digest", "file_entry", "read_current", "read_json"]

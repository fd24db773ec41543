"""Passage corpora and the corpus store: loading, validation, checksums, persistence.

A corpus is four aligned lists (ids, titles, texts, metadata). Row ``i`` of every embedding
matrix and graph in an index is passage ``i`` of its corpus (SPEC notation: chunk c with
preprocessing index t(c) = i). Loaded from JSON lines it lives in memory; saved in an index
(:meth:`Corpus.save`) each list is packed UTF-8 bytes plus offsets, memory-mapped on load
(:class:`PackedStrings`), so an index over millions of passages opens without reading them.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Iterable, Iterator, Mapping, Sequence

import numpy as np

from ..errors import InputError


class PackedStrings(Sequence[str]):
    """A read-only list of strings stored as UTF-8 bytes (uint8) and int64 offsets ``[n + 1]``
    (memory-mapped when loaded from an index): only the strings read are decoded."""

    def __init__(self, data: np.ndarray, offsets: np.ndarray) -> None:
        self.data, self.offsets = data, offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"string {i} out of range [0, {len(self)})")
        lo, hi = int(self.offsets[i]), int(self.offsets[i + 1])
        return bytes(self.data[lo:hi]).decode("utf-8")

    def __iter__(self) -> Iterator[str]:
        for lo in range(0, len(self), 4096):  # decode in blocks: one read of the bytes per block
            hi = min(lo + 4096, len(self))
            o = np.asarray(self.offsets[lo:hi + 1], np.int64)
            raw = bytes(self.data[o[0]:o[-1]])
            o = (o - o[0]).tolist()
            for j in range(hi - lo):
                yield raw[o[j]:o[j + 1]].decode("utf-8")


class Corpus:
    """An ordered, validated list of passages: ids, titles, texts and per-passage metadata
    (a JSON object string, ``""`` for none). In memory after loading a file; memory-mapped
    packed strings (:class:`PackedStrings`) once saved in an index (:meth:`save` / :meth:`load`)."""

    def __init__(self, ids: Sequence[str], titles: Sequence[str], texts: Sequence[str], source: str = "<memory>",
                 metadata: Sequence[str] | None = None, _validate: bool = True) -> None:
        self.ids, self.titles, self.texts, self.source = ids, titles, texts, source
        self.metadata = metadata if metadata is not None else ("",) * len(ids)
        self._positions: dict[str, int] | None = None
        self._checksum: str | None = None
        if not (len(self.ids) == len(self.titles) == len(self.texts) == len(self.metadata)):
            raise InputError(f"{self.source}: ids, titles, texts and metadata have different lengths")
        if _validate:
            if not len(self.ids):
                raise InputError(f"{self.source}: the corpus holds no passages")
            positions: dict[str, int] = {}
            for i, pid in enumerate(self.ids):
                if pid in positions:
                    raise InputError(
                        f"{self.source}: duplicate passage id {pid!r} (passages {positions[pid]} and {i})"
                    )
                positions[pid] = i
                if not self.texts[i] or not self.texts[i].strip():
                    raise InputError(f"{self.source}: passage {pid!r} (number {i}) has empty text")
            self._positions = positions

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_strings(cls, texts: Sequence[str], source: str = "<list>") -> "Corpus":
        """Passages from plain strings; ids are their positions as strings ("0", "1", ...)."""
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise InputError(f"{source}: item {i} is {type(t).__name__}, expected str")
            _check_unicode(t, f"{source}: item {i}")
        return cls(tuple(str(i) for i in range(len(texts))), ("",) * len(texts), tuple(texts), source)

    @classmethod
    def from_records(cls, records: Iterable[Mapping], source: str = "<records>") -> "Corpus":
        """Passages from dicts with keys ``id``, ``text`` and optional ``title``; errors name the
        record by its index in ``records`` (from 0)."""
        ids, titles, texts, meta = [], [], [], []
        for n, rec in enumerate(records):
            pid, title, text = _validate_record(rec, f"{source} record {n}")
            ids.append(pid), titles.append(title), texts.append(text), meta.append(_metadata(rec))
        return cls(tuple(ids), tuple(titles), tuple(texts), source, tuple(meta))

    @classmethod
    def from_jsonl(cls, path: str | Path) -> "Corpus":
        """Load JSON lines ``{"id", "title", "text"}`` (title optional).

        Errors name the file and the line: invalid JSON, missing or empty fields,
        duplicate ids (with the line of the first occurrence).
        """
        path = Path(path)
        if not path.is_file():
            raise InputError(f"corpus file {path} " + ("is not a file" if path.exists() else "does not exist"))
        ids, titles, texts, meta = [], [], [], []
        first_line: dict[str, int] = {}
        for lineno, rec in iter_jsonl(path):
            pid, title, text = _validate_record(rec, f"{path} line {lineno}")
            if pid in first_line:
                raise InputError(
                    f"{path} line {lineno}: duplicate id {pid!r} (first seen on line {first_line[pid]})"
                )
            first_line[pid] = lineno
            ids.append(pid), titles.append(title), texts.append(text), meta.append(_metadata(rec))
        if not ids:
            raise InputError(f"corpus file {path} holds no passages")
        return cls(tuple(ids), tuple(titles), tuple(texts), str(path), tuple(meta))

    @classmethod
    def coerce(cls, corpus: "Corpus | str | Path | Sequence[str] | Sequence[Mapping]") -> "Corpus":
        """Accept a Corpus, a corpus path (any format :func:`read_corpus`
        reads: JSON lines, JSON, CSV/TSV, Parquet, a folder of text files), a list of strings or a
        list of records."""
        if isinstance(corpus, Corpus):
            return corpus
        if isinstance(corpus, (str, Path)):
            return read_corpus(corpus)
        if isinstance(corpus, (bytes, Mapping)) or not isinstance(corpus, Iterable):
            raise InputError("corpus must be a Corpus, a JSON-lines path, a list of strings or a list of "
                             f"records, got {type(corpus).__name__}")
        items = list(corpus)
        if any(isinstance(x, Mapping) for x in items):
            return cls.from_records(items)
        return cls.from_strings(items)

    def concat(self, other: "Corpus") -> "Corpus":
        """This corpus followed by ``other`` (in memory). An id of ``other`` may repeat one of this
        corpus (a replaced or re-added passage whose old row is deleted): :meth:`position` gives
        the later row."""
        fields = [tuple(getattr(self, f)) + tuple(getattr(other, f)) for f in self.FIELDS]
        return Corpus(*fields[:3], self.source, fields[3], _validate=False)

    def take(self, rows: np.ndarray) -> "Corpus":
        """The passages ``rows`` (increasing), in memory (e.g. the live rows at compaction)."""
        rows = np.asarray(rows, np.int64).tolist()
        fields = [tuple(getattr(self, f)[r] for r in rows) for f in self.FIELDS]
        return Corpus(*fields[:3], self.source, fields[3], _validate=False)

    # ------------------------------------------------------------------ access
    def __len__(self) -> int:
        return len(self.ids)

    def position(self, pid: str) -> int:
        """Row of passage ``pid`` (the last row holding it); KeyError naming the id if absent (the id
        table is built on first use)."""
        if self._positions is None:
            self._positions = {p: i for i, p in enumerate(self.ids)}
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
        """sha256 over ids, titles, texts and metadata (order-sensitive; computed once)."""
        if self._checksum is None:
            h = hashlib.sha256()
            for pid, title, text, meta in zip(self.ids, self.titles, self.texts, self.metadata):
                for part in (pid, title, text) + ((meta,) if meta else ()):
                    b = part.encode("utf-8")
                    h.update(len(b).to_bytes(8, "little"))
                    h.update(b)
            self._checksum = h.hexdigest()
        return self._checksum

    def meta(self, row: int) -> dict:
        """The metadata of passage ``row``: its record's ``metadata`` object merged with the record's
        other fields beyond id, title and text (see :func:`_metadata`); ``{}`` for none."""
        raw = self.metadata[row]
        return json.loads(raw) if raw else {}

    # ------------------------------------------------------------------ persistence
    FIELDS = ("ids", "titles", "texts", "metadata")

    def save(self, directory: Path) -> dict[str, int]:
        """Write the four fields as packed strings (``FIELD_data.npy``, ``FIELD_offsets.npy``)."""
        from ..storage import pack_strings, save_arrays

        arrays = {}
        for name in self.FIELDS:
            arrays[f"{name}_data"], arrays[f"{name}_offsets"] = pack_strings(list(getattr(self, name)))
        save_arrays(directory, arrays)
        return {"n_passages": len(self)}

    @classmethod
    def load(cls, directory: Path, n_passages: int, source: str, checksum: str | None = None) -> "Corpus":
        """Open a saved corpus memory-mapped. Not validated again as text (it was when it was built),
        but every field's packed-string structure is checked (IndexFormatError naming the file)."""
        from ..storage import check_packed, load_array

        fields = {}
        for name in cls.FIELDS:
            data, offsets = load_array(directory, f"{name}_data"), load_array(directory, f"{name}_offsets")
            check_packed(data, offsets, f"index corpus {directory / name}_data.npy, _offsets.npy "
                                        f"(must hold {n_passages} strings)", n_passages)
            fields[name] = PackedStrings(data, offsets)
        corpus = cls(fields["ids"], fields["titles"], fields["texts"], source, fields["metadata"], _validate=False)
        corpus._checksum = checksum
        return corpus

    def write_jsonl(self, path: str | Path) -> None:
        """Write the corpus as JSON lines (the format ``from_jsonl`` reads)."""
        with open(path, "w", encoding="utf-8") as f:
            for pid, title, text, meta in zip(self.ids, self.titles, self.texts, self.metadata):
                rec = {"id": pid, "title": title, "text": text, **({"metadata": json.loads(meta)} if meta else {})}
                f.write(json.dumps(rec, ensure_ascii=False) + "\n")


def read_corpus(path: str | Path, id_field: str | None = None, title_field: str | None = None,
                text_field: str | None = None, metadata_fields: Sequence[str] | None = None,
                metadata_types: Mapping[str, str] | None = None) -> Corpus:
    """Read a corpus file or folder in any format :mod:`hopgraph.engine.ingest.readers` knows (JSON lines
    — hopgraph, BEIR, Pyserini —, a JSON array, CSV/TSV, Parquet, a folder of ``.txt``/``.md``),
    fields detected or named, metadata typed (``metadata_types``: ``{field: "int" | "float" | "bool" |
    "str"}``; CSV/TSV columns inferred); InputError naming the file and line or row of a problem."""
    from ..ingest import readers

    columns = readers.read_columns(path, id_field, title_field, text_field, metadata_fields, metadata_types)
    if columns is None:  # hopgraph's own JSON lines
        return Corpus.from_jsonl(path)
    return Corpus(columns.ids, columns.titles, columns.texts, columns.source, columns.metadata)


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    """Yield (line number, object) for each non-blank line; InputError names file and line
    (invalid UTF-8, invalid JSON, not an object). A UTF-8 byte-order mark is skipped."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise InputError(f"{path} line {lineno}: not valid UTF-8 text (byte 0x{raw[e.start]:02x} at "
                                 f"byte {e.start + 1} of the line); save the file as UTF-8") from None
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(f"{path} line {lineno}: invalid JSON ({e.msg} at column {e.colno})") from None
            if not isinstance(obj, dict):
                raise InputError(f"{path} line {lineno}: expected a JSON object, got {type(obj).__name__}")
            yield lineno, obj


def _check_unicode(value: str, where: str) -> None:
    """``value`` must be encodable as UTF-8 (JSON escapes such as ``"\\ud800"`` give lone
    surrogates, which the corpus store and the checksum cannot write)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InputError(f"{where}: not valid Unicode text (lone surrogate U+{ord(value[e.start]):04X} at "
                         f"character {e.start})") from None


def _validate_record(rec: Mapping, where: str) -> tuple[str, str, str]:
    if not isinstance(rec, Mapping):
        raise InputError(f"{where}: expected an object with 'id' and 'text'")
    if "id" not in rec:
        raise InputError(f"{where}: missing field 'id'")
    if "text" not in rec:
        raise InputError(f"{where}: missing field 'text'")
    pid, text, title = rec["id"], rec["text"], rec.get("title")
    if not isinstance(pid, (str, int)) or isinstance(pid, bool) or str(pid) == "":
        raise InputError(f"{where}: 'id' must be a non-empty string or integer, got {pid!r}")
    if not isinstance(text, str):
        raise InputError(f"{where}: 'text' must be a string, got {type(text).__name__}")
    if not text.strip():
        raise InputError(f"{where}: empty text for id {pid!r}")
    if title is None:
        title = ""
    elif not isinstance(title, str):
        raise InputError(f"{where}: 'title' must be a string (or absent/null), got {type(title).__name__} "
                         f"{title!r}")
    for name, value in (("id", pid), ("title", title), ("text", text)):
        if isinstance(value, str):
            _check_unicode(value, f"{where}: '{name}'")
    meta = rec.get("metadata")
    if meta is not None and not isinstance(meta, Mapping):
        raise InputError(f"{where}: 'metadata' must be a JSON object (or absent/null), got "
                         f"{type(meta).__name__} {meta!r:.80}")
    return str(pid), title, text


def _metadata(rec: Mapping) -> str:
    """The record's metadata as a JSON object string ("" if none): the keys of its ``metadata``
    object (checked by :func:`_validate_record`) merged with its other fields beyond id, title and
    text; on a name in both, the ``metadata`` object's value wins."""
    extra = {k: v for k, v in rec.items() if k not in ("id", "title", "text", "metadata")}
    extra.update(rec.get("metadata") or {})
    return json.dumps(extra, ensure_ascii=False, sort_keys=True) if extra else ""

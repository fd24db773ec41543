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
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

from ..errors import InputError
from .records import RecordFields, check_passages, check_unicode, collect, input_path, iter_jsonl

if TYPE_CHECKING:
    from ..storage import HashTable

#: file-name prefix of the passage ids' hash table in a saved corpus
ID_TABLE = "id_"
#: a saved corpus (or other string list) of fewer strings than this has no hash table of them
SMALL_PART = 4096


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
        return _decode(bytes(self.data[lo:hi]), i)

    def __iter__(self) -> Iterator[str]:
        for lo in range(0, len(self), 4096):  # decode in blocks: one read of the bytes per block
            hi = min(lo + 4096, len(self))
            o = np.asarray(self.offsets[lo:hi + 1], np.int64)
            raw = bytes(self.data[o[0]:o[-1]])
            o = (o - o[0]).tolist()
            for j in range(hi - lo):
                yield _decode(raw[o[j]:o[j + 1]], lo + j)


def _decode(raw: bytes, i: int) -> str:
    """A stored string; IndexFormatError when its bytes are not UTF-8 (a damaged index read without
    its checksums)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        from ..errors import IndexFormatError

        raise IndexFormatError(f"stored string {i} is not valid UTF-8 ({e.reason}): the index is damaged "
                               f"(hopgraph verify names the file)") from None


class ChainedStrings(Sequence[str]):
    """Read-only strings made of consecutive parts (packed strings of saved segments, in-memory tuples
    of added passages), read as one list without copying them into one."""

    def __init__(self, parts: Sequence[Sequence[str]]) -> None:
        self.parts: list[Sequence[str]] = []
        for p in parts:
            self.parts.extend(p.parts if isinstance(p, ChainedStrings) else [p])
        self.offsets = np.zeros(len(self.parts) + 1, np.int64)
        np.cumsum([len(p) for p in self.parts], out=self.offsets[1:])

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def _locate(self, i: int) -> tuple[int, int]:
        p = int(np.searchsorted(self.offsets, i, side="right") - 1)
        return p, i - int(self.offsets[p])

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self))
            if step != 1:
                return [self[j] for j in range(start, stop, step)]
            out: list[str] = []
            for p, part in enumerate(self.parts):
                lo, hi = int(self.offsets[p]), int(self.offsets[p + 1])
                a, b = max(start, lo), min(stop, hi)
                if a < b:
                    out.extend(part[a - lo:b - lo])
            return out
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"string {i} out of range [0, {len(self)})")
        p, j = self._locate(i)
        return self.parts[p][j]

    def __iter__(self) -> Iterator[str]:
        for part in self.parts:
            yield from part


def chain(a: Sequence[str], b: Sequence[str]) -> Sequence[str]:
    """``a`` followed by ``b`` as one sequence: a tuple when both are in-memory tuples or lists, else
    :class:`ChainedStrings` (nothing of ``a`` is copied, decoded or read from where it lives)."""
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return tuple(a) + tuple(b)
    return ChainedStrings([a, b])


class RowTexts(Sequence[str]):
    """Texts indexed by corpus row, of the rows ``[start, n)`` only (``texts[i - start]`` is row
    ``i``): what a caller that reads only the appended passages of a grown corpus is given, so that
    the earlier passages are never decoded. Reading an earlier row raises IndexError."""

    def __init__(self, start: int, texts: Sequence[str], n: int) -> None:
        if len(texts) != n - start:
            raise ValueError(f"RowTexts: {len(texts)} texts for rows [{start}, {n})")
        self.start, self.texts, self.n = start, texts, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: Any) -> str:
        if not isinstance(i, (int, np.integer)) or not self.start <= i < self.n:
            raise IndexError(f"row {i!r} is not held: these texts are of rows [{self.start}, {self.n})")
        return self.texts[int(i) - self.start]


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
        #: per part ``(first row, stored hash table or None, ids)`` for :meth:`position` (None: one part)
        self._id_parts: list[tuple[int, HashTable | None, Sequence[str]]] | None = None
        self._dicts: dict[int, dict[str, int]] = {}
        if not (len(self.ids) == len(self.titles) == len(self.texts) == len(self.metadata)):
            raise InputError(f"{self.source}: ids, titles, texts and metadata have different lengths")
        if _validate:
            self._positions = check_passages(self.ids, self.texts, self.source, self.metadata)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_strings(cls, texts: Sequence[str], source: str = "<list>") -> "Corpus":
        """Passages from plain strings; ids are their positions as strings ("0", "1", ...)."""
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise InputError(f"{source}: item {i} is {type(t).__name__}, expected str")
            check_unicode(t, f"{source}: item {i}")
        return cls(tuple(str(i) for i in range(len(texts))), ("",) * len(texts), tuple(texts), source)

    @classmethod
    def from_records(cls, records: Iterable[Mapping], source: str = "<records>") -> "Corpus":
        """Passages from dicts with keys ``id``, ``text`` and optional ``title`` and ``metadata``
        (:mod:`~hopgraph.engine.components.records`' rules); errors name the record by its index in
        ``records`` (from 0)."""
        located = ((f"record {n}", rec) for n, rec in enumerate(records))
        return cls(*collect(located, RecordFields(), source), _validate=False)

    @classmethod
    def from_jsonl(cls, path: str | Path) -> "Corpus":
        """Load JSON lines ``{"id", "title", "text", "metadata"}`` (title and metadata optional; the
        rules of :mod:`~hopgraph.engine.components.records`).

        Errors name the file and the line: invalid JSON, missing or empty fields,
        duplicate ids (with the line of the first occurrence).
        """
        path = input_path(path, "corpus file")
        located = ((f"line {n}", rec) for n, rec in iter_jsonl(path))
        return cls(*collect(located, RecordFields(), str(path)), _validate=False)

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
        """This corpus followed by ``other``; a saved (memory-mapped) corpus is not copied or
        decoded (:func:`chain`). An id of ``other`` may repeat one of this corpus (a replaced or
        re-added passage whose old row is deleted): :meth:`position` gives the later row."""
        fields = [chain(getattr(self, f), getattr(other, f)) for f in self.FIELDS]
        out = Corpus(*fields[:3], self.source, fields[3], _validate=False)
        out._id_parts = self._id_parts_or_self() + other._id_parts_or_self(len(self))
        return out

    def rows(self, start: int, stop: int) -> "Corpus":
        """The passages ``[start, stop)`` as an in-memory corpus (only they are read)."""
        fields = [tuple(getattr(self, f)[start:stop]) for f in self.FIELDS]
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
        """Row of passage ``pid`` (the last row holding it); KeyError naming the id if absent. A saved
        corpus looks the id up in the hash tables stored with its segments (a few entries read);
        in-memory passages in an id table built on first use."""
        for offset, table, ids in reversed(self._id_parts_or_self()):
            if table is not None:
                row = int(table.find([pid], ids.__getitem__)[0])
                if row >= 0:
                    return offset + row
                continue
            positions = self._dicts.get(id(ids))
            if positions is None:
                positions = self._dicts[id(ids)] = {p: i for i, p in enumerate(ids)}
            if pid in positions:
                return offset + positions[pid]
        raise KeyError(f"passage id {pid!r} is not in corpus {self.source}")

    def holds(self, pid: str) -> bool:
        """Whether a passage has the id ``pid`` (:meth:`position` without the KeyError)."""
        try:
            self.position(pid)
        except KeyError:
            return False
        return True

    def _id_parts_or_self(self, offset: int = 0) -> list[tuple[int, "HashTable | None", Sequence[str]]]:
        """``(first row, stored id hash table or None, ids)`` of each part of this corpus, rows shifted
        by ``offset``."""
        parts = self._id_parts if self._id_parts is not None else [(0, None, self.ids)]
        if self._id_parts is None and self._positions is not None:
            self._dicts[id(self.ids)] = self._positions
        return [(o + offset, t, ids) for o, t, ids in parts]

    def embedding_texts(self, start: int = 0, stop: int | None = None) -> list[str]:
        """Texts as embedded: ``"title: text"`` when a title exists, else the text
        (passages ``start:stop``, all by default, so large corpora are embedded in batches)."""
        return [f"{t}: {x}" if t else x for t, x in zip(self.titles[start:stop], self.texts[start:stop])]

    def embedding_texts_from(self, start: int) -> RowTexts:
        """:meth:`embedding_texts` of the passages ``start:``, indexed by row (:class:`RowTexts`):
        the earlier passages are not decoded."""
        return RowTexts(start, self.embedding_texts(start), len(self))

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
        other fields beyond id, title and text (:meth:`RecordFields.metadata_of
        <hopgraph.engine.components.records.RecordFields.metadata_of>`); ``{}`` for none."""
        raw = self.metadata[row]
        return json.loads(raw) if raw else {}

    # ------------------------------------------------------------------ persistence
    FIELDS = ("ids", "titles", "texts", "metadata")

    def save(self, directory: Path) -> dict[str, Any]:
        """Write the four fields as packed strings (``FIELD_data.npy``, ``FIELD_offsets.npy``) and, from
        :data:`SMALL_PART` passages up, the ids' hash table (``id_hashes.npy``, ``id_positions.npy``;
        fewer are looked up in a dict made when first needed); returns the manifest entry (passage
        count and checksum)."""
        from ..storage import HashTable, pack_strings, save_arrays

        arrays = {}
        for name in self.FIELDS:
            arrays[f"{name}_data"], arrays[f"{name}_offsets"] = pack_strings(list(getattr(self, name)))
        if len(self) >= SMALL_PART:
            arrays.update(HashTable.build(list(self.ids)).arrays(ID_TABLE))
        save_arrays(directory, arrays)
        return {"n_passages": len(self), "checksum": self.checksum}

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
        if (directory / f"{ID_TABLE}hashes.npy").is_file():  # older indexes: an id dict built on first use
            from ..storage import HashTable, load_arrays

            table = HashTable.from_arrays(load_arrays(directory, [f"{ID_TABLE}hashes", f"{ID_TABLE}positions"]),
                                          ID_TABLE, n_passages, f"index corpus {directory}")
            corpus._id_parts = [(0, table, corpus.ids)]
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

    return Corpus(*readers.read_columns(path, id_field, title_field, text_field, metadata_fields, metadata_types),
                  _validate=False)

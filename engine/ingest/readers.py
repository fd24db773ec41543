"""Corpus readers: the formats people already have, read as a corpus's columns.

:func:`read_columns` (behind :func:`hopgraph.engine.components.corpus.read_corpus` / ``hopgraph.read_corpus``
and :meth:`Corpus.coerce <hopgraph.engine.components.corpus.Corpus.coerce>`; this module imports nothing of
:mod:`~hopgraph.engine.components.corpus`, which imports it) detects the format from the path (and, for an unknown extension, the content):

* ``.jsonl`` / ``.ndjson`` — JSON lines: hopgraph's ``{"id", "title", "text"}`` (the fields of
  :meth:`Corpus.from_jsonl`), BEIR's ``{"_id", "title", "text"}``, Pyserini's ``{"id", "contents"}``;
* ``.json`` — a JSON array of such records (a ``.json`` file that starts with ``{`` is read as JSON lines);
* ``.csv`` / ``.tsv`` — a header row, then one passage per row (the :mod:`csv` module; quoted
  fields may span lines);
* ``.parquet`` — needs ``pyarrow`` (``pip install hopgraph[parquet]``);
* a folder — every ``.txt`` and ``.md`` file below it (hidden files and folders skipped), sorted by
  path: id = the path relative to the folder with forward slashes, title = the first ATX Markdown
  heading (``# Title``) of a ``.md`` file, else the file name without its extension, text = the content.

Fields are detected from the first record: id ``id``, ``_id``, ``docid`` or ``doc_id``; text
``text``, ``contents``, ``content`` or ``body``; title ``title`` (optional in every record). ``id_field``,
``title_field`` and ``text_field`` override the detection. ``metadata_fields`` chooses which other
fields become the passage's metadata (default: all other fields; a ``"metadata"`` field holding an
object contributes its keys).

Metadata keeps its types: JSON's numbers, booleans, strings and lists as they are; Parquet's
columns as Python values (dates and times as ISO 8601 text, decimals as floats); CSV/TSV cells,
which are all text, by the type inferred for their column (:func:`infer_metadata_type`: int,
float, bool, else str; an empty cell is a missing value). ``metadata_types`` (``{"year": "int",
"zip": "str"}``) sets a field's type in any format, overriding the inference; a value that does
not convert is an error naming its line and field.

Every record follows the rules of
:mod:`hopgraph.engine.components.records`, the one set every corpus input follows. Every error is an
:class:`InputError` naming the file and the line (JSON, CSV) or row (Parquet): malformed JSON, a
missing or empty id or text, a duplicate id (with the line of the first one), a CSV row with the
wrong number of fields or a quote that is not closed (the line the row starts on), text that is not
UTF-8.
"""
from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

from ..components.records import (Columns, RecordFields, check_id, check_text, check_unicode, collect, decode_lines,
                                  input_path, iter_jsonl, metadata_json, read_text)
from ..errors import InputError

ID_FIELDS = ("id", "_id", "docid", "doc_id")
TEXT_FIELDS = ("text", "contents", "content", "body")
TITLE_FIELDS = ("title",)
FOLDER_SUFFIXES = (".txt", ".md")
FORMATS = ("jsonl", "json", "csv", "tsv", "parquet", "folder")
_SUFFIX_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".csv": "csv", ".tsv": "tsv",
                   ".parquet": "parquet"}


def read_columns(path: str | Path, id_field: str | None = None, title_field: str | None = None,
                 text_field: str | None = None, metadata_fields: Sequence[str] | None = None,
                 metadata_types: Mapping[str, str] | None = None) -> Columns:
    """Read the corpus at ``path`` (a file or a folder of ``.txt``/``.md`` files; format detected,
    see the module docstring). ``id_field``/``title_field``/``text_field`` name the fields to use;
    ``metadata_fields`` the fields kept as metadata (default all others; ``[]`` for none);
    ``metadata_types`` the types of metadata fields (:func:`check_metadata_types`).
    Raises :class:`InputError` naming the file and the line or row of the first problem."""
    path = input_path(path, "corpus", folder=True)
    if metadata_fields is not None:
        if isinstance(metadata_fields, str) or not all(isinstance(f, str) for f in metadata_fields):
            raise InputError(f"metadata_fields must be a list of field names, got {metadata_fields!r}")
        metadata_fields = list(metadata_fields)
    for name, value in (("id_field", id_field), ("title_field", title_field), ("text_field", text_field)):
        if value is not None and (not isinstance(value, str) or not value):
            raise InputError(f"{name} must be a non-empty field name, got {value!r}")
    fmt = detect_format(path)
    if fmt == "folder":
        if any(v is not None for v in (id_field, title_field, text_field, metadata_fields)):
            raise InputError(f"corpus {path} is a folder of text files: id, title and text come from each "
                             "file (field options apply to JSON, CSV and Parquet corpora)")
        return read_folder(path)
    types = check_metadata_types(metadata_types)
    fields = FieldMap(id_field, title_field, text_field, metadata_fields)
    if fmt == "jsonl":
        return _build(path, _iter_jsonl(path), fields, types)
    if fmt == "json":
        return _build(path, _iter_json_array(path), fields, types)
    if fmt in ("csv", "tsv"):
        return _build(path, _iter_csv(path, "\t" if fmt == "tsv" else ","), fields, types, infer=True)
    return _build(path, _iter_parquet(path), fields, types)


def detect_format(path: Path) -> str:
    """One of :data:`FORMATS` for ``path``: a folder, the extension, else the first non-blank
    character (``[`` a JSON array, ``{`` JSON lines); InputError for anything else."""
    if path.is_dir():
        return "folder"
    if not path.is_file():
        raise InputError(f"corpus {path} is not a file or a folder")
    fmt = _SUFFIX_FORMATS.get(path.suffix.lower())
    if fmt not in (None, "json"):
        return fmt
    with open(path, "rb") as f:
        head = f.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    if head.startswith(b"["):
        return "json"
    if head.startswith(b"{"):
        return "jsonl"
    raise InputError(f"corpus {path}: unknown format (expected .jsonl, .json, .csv, .tsv or .parquet, or a "
                     "folder of .txt/.md files)" if fmt is None else
                     f"{path}: expected a JSON array of records or JSON lines")


class FieldMap(RecordFields):
    """The field names chosen for a corpus file: given ones, the rest detected from the first record."""

    def __init__(self, id_field: str | None, title_field: str | None, text_field: str | None,
                 metadata_fields: list[str] | None) -> None:
        super().__init__(id_field, title_field, text_field, metadata_fields)
        self.seen_metadata: set[str] = set()

    def resolve(self, record: Mapping[str, Any], where: str) -> None:
        """Detect the fields not given from the first record's keys (InputError if none fits)."""
        if self.id is not None and self.text is not None and self.title is not None:
            return
        keys = list(record)
        for role, names in (("id", ID_FIELDS), ("text", TEXT_FIELDS)):
            if getattr(self, role) is None:
                found = next((k for k in names if k in keys), None)
                if found is None:
                    raise InputError(f"{where}: no {role} field (looked for {', '.join(names)}; found "
                                     f"{', '.join(map(str, keys)) or 'none'}); name it with {role}_field / "
                                     f"--{role}-field")
                setattr(self, role, found)
        if self.title is None:  # a record without it has no title
            self.title = next((k for k in TITLE_FIELDS if k not in (self.id, self.text)), "")
        if self.id == self.text:
            raise InputError(f"{where}: the id field and the text field are both {self.id!r}")

    def metadata_of(self, record: Mapping[str, Any], where: str) -> str:
        """:meth:`RecordFields.metadata_of`, noting which chosen metadata fields occur."""
        if self.metadata is not None:
            self.seen_metadata.update(k for k in self.metadata if k in record)
        return super().metadata_of(record, where)


def _build(path: Path, records: Iterator[tuple[str, Mapping[str, Any]]], fields: FieldMap,
           types: Mapping[str, str] | None = None, infer: bool = False) -> Columns:
    """A corpus from ``(location, record)`` pairs (:func:`~hopgraph.engine.components.records.collect`),
    every chosen metadata field found in some record, metadata typed by ``types`` and, with ``infer``
    (text formats), the other fields by their inferred types (:func:`infer_metadata_type`)."""
    locations: list[str] = []

    def noted() -> Iterator[tuple[str, Mapping[str, Any]]]:
        for location, record in records:
            locations.append(location)
            yield location, record

    columns = collect(noted() if types or infer else records, fields, str(path))
    if types or infer:
        columns = columns._replace(metadata=_typed_metadata(columns.metadata, [f"{path} {at}" for at in locations],
                                                           dict(types or {}), infer))
    if fields.metadata is not None:
        missing = [f for f in fields.metadata if f not in fields.seen_metadata and
                   f not in (fields.id, fields.title, fields.text)]
        if missing:
            raise InputError(f"{path}: metadata field(s) {', '.join(map(repr, missing))} appear in no record")
    return columns


# ------------------------------------------------------------------------------------------ typed metadata
#: the metadata types ``metadata_types`` may name
METADATA_TYPES = ("int", "float", "bool", "str")
_INT = re.compile(r"^[+-]?(0|[1-9][0-9]*)$")
_FLOAT = re.compile(r"^[+-]?((0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?|\.[0-9]+)$")
_BOOL = {"true": True, "false": False}


def check_metadata_types(types: Mapping[str, str] | None) -> dict[str, str]:
    """``{field: type}`` with each type one of :data:`METADATA_TYPES`; InputError naming a bad entry."""
    if types is None:
        return {}
    if not isinstance(types, Mapping):
        raise InputError(f"metadata_types must map field names to types, got {type(types).__name__}")
    for name, kind in types.items():
        if not isinstance(name, str) or not name or kind not in METADATA_TYPES:
            raise InputError(f"metadata_types: {name!r}: {kind!r} is not a type; types: {', '.join(METADATA_TYPES)}")
    return dict(types)


def infer_metadata_type(values: Iterable[str]) -> str:
    """The type of a text column (CSV/TSV) from its non-empty cells: ``int`` when every cell is an
    integer without a leading zero (``"02134"`` stays text), else ``float`` when every cell is a
    decimal number, else ``bool`` when every cell is ``true`` or ``false`` (any case), else ``str``."""
    cells = [v.strip() for v in values]
    if not cells:
        return "str"
    if all(_INT.match(c) for c in cells):
        return "int"
    if all(_FLOAT.match(c) for c in cells):
        return "float"
    if all(c.lower() in _BOOL for c in cells):
        return "bool"
    return "str"


def convert_metadata(value: Any, kind: str, where: str) -> Any:
    """``value`` as ``kind`` (:data:`METADATA_TYPES`): text is parsed (numbers, ``true``/``false``),
    a number becomes an int only when it is whole; InputError naming ``where`` otherwise. A list
    converts element by element."""
    if isinstance(value, list):
        return [convert_metadata(v, kind, where) for v in value]
    if kind == "str":
        return value if isinstance(value, str) else json.dumps(value) if isinstance(value, bool) else str(value)
    text = value.strip() if isinstance(value, str) else None
    try:
        if kind == "bool":
            if isinstance(value, bool):
                return value
            return _BOOL[text.lower()]  # type: ignore[union-attr]
        if isinstance(value, bool):
            raise ValueError
        number = float(text) if text is not None else float(value)
        if kind == "int":
            if not number.is_integer():
                raise ValueError
            return int(text) if text is not None and _INT.match(text) else int(number)
        return number
    except (KeyError, ValueError, TypeError, AttributeError):
        raise InputError(f"{where}: {value!r} is not a{'n' if kind == 'int' else ''} {kind}") from None


def _jsonable(value: Any) -> Any:
    """A metadata value as JSON holds it: dates and times as ISO 8601 text, decimals as floats,
    numpy scalars as Python numbers (Parquet columns)."""
    import datetime
    import decimal

    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if hasattr(value, "item") and not isinstance(value, (list, dict, str)):
        return value.item()
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


def _typed_metadata(metadata: Sequence[str], where_of: list[str], types: dict[str, str], infer: bool
                    ) -> tuple[str, ...]:
    """The records' metadata (JSON object strings, ``""`` for none) typed: the fields of ``types``
    converted (InputError naming the record and field of a bad value), and with ``infer`` every
    other text field by its column's inferred type (an empty cell is a missing value)."""
    meta = [json.loads(m) if m else {} for m in metadata]
    if infer:
        columns: dict[str, list[str]] = {}
        for m in meta:
            for k, v in m.items():
                if isinstance(v, str) and k not in types:
                    columns.setdefault(k, []).append(v)
        for m in meta:
            for k in [k for k, v in m.items() if isinstance(v, str) and not v.strip() and k not in types]:
                del m[k]
        inferred = {k: infer_metadata_type(v for v in vals if v.strip()) for k, vals in columns.items()}
        types = {**{k: t for k, t in inferred.items() if t != "str"}, **types}
    out = []
    for m, where in zip(meta, where_of):
        for k, kind in types.items():
            if k in m and m[k] is not None and not (isinstance(m[k], str) and not m[k].strip() and infer):
                m[k] = convert_metadata(m[k], kind, f"{where}: metadata field {k!r}")
            elif k in m and infer:
                del m[k]
        out.append(metadata_json(m, where))
    return tuple(out)


def _iter_jsonl(path: Path) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """``("line N", object)`` for each non-blank line of a JSON-lines file
    (:func:`~hopgraph.engine.components.records.iter_jsonl`)."""
    for lineno, obj in iter_jsonl(path):
        yield f"line {lineno}", obj


def _iter_json_array(path: Path) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """``("line N", record)`` for each element of a JSON array (N: the line the element starts on)."""
    text = read_text(path)
    decoder = json.JSONDecoder()
    ws = re.compile(r"\s*")

    def line_of(pos: int) -> int:
        return text.count("\n", 0, pos) + 1

    def fail(pos: int, what: str) -> InputError:
        return InputError(f"{path} line {line_of(pos)}: invalid JSON ({what})")

    pos = ws.match(text, 0).end()
    if not text.startswith("[", pos):
        raise fail(pos, "expected a JSON array of records")
    pos = ws.match(text, pos + 1).end()
    if text.startswith("]", pos):
        return
    line, line_pos = 1, 0
    while True:
        try:
            obj, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            raise InputError(f"{path} line {e.lineno}: invalid JSON ({e.msg} at column {e.colno})") from None
        line += text.count("\n", line_pos, pos)
        line_pos = pos
        if not isinstance(obj, dict):
            raise InputError(f"{path} line {line}: expected a JSON object, got {type(obj).__name__}")
        yield f"line {line}", obj
        pos = ws.match(text, end).end()
        if text.startswith(",", pos):
            pos = ws.match(text, pos + 1).end()
        elif text.startswith("]", pos):
            if ws.match(text, pos + 1).end() != len(text):
                raise fail(ws.match(text, pos + 1).end(), "extra data after the array")
            return
        else:
            raise fail(pos, "expected ',' or ']' after a record")


def _iter_csv(path: Path, delimiter: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """``("line N", {column: value})`` for each data row of a CSV/TSV file with a header row
    (N: the line the row starts on; blank lines skipped). Rows with another number of fields
    than the header raise InputError."""
    old_limit = csv.field_size_limit()
    csv.field_size_limit(2**31 - 1)  # long documents (to be chunked) exceed the default 128 KiB per field
    try:
        # strict: a quote that opens a field must close it before the next delimiter or line end, so a
        # stray quote is an error naming its line instead of a field that swallows the following rows
        reader = csv.reader(decode_lines(path), delimiter=delimiter, strict=True)
        start = 1
        try:
            header = next(reader, None)
            if header is None:
                raise InputError(f"corpus file {path} is empty (expected a header row)")
            if len(set(header)) != len(header) or any(not h.strip() for h in header):
                raise InputError(f"{path} line 1: the header row must name every column once, got {header}")
            start = reader.line_num + 1
            for row in reader:
                where = f"line {start}"
                start = reader.line_num + 1
                if not row:
                    continue
                if len(row) != len(header):
                    raise InputError(f"{path} {where}: {len(row)} field(s), the header has {len(header)}")
                yield where, dict(zip(header, row))
        except csv.Error as e:
            raise InputError(f"{path} line {start}: malformed {'TSV' if delimiter == chr(9) else 'CSV'} "
                             f"row ({e}); a field that starts with a quote must end with one, and a quote "
                             "inside it is doubled (\"\")") from None
    finally:
        csv.field_size_limit(old_limit)


def _iter_parquet(path: Path) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """``("row N", record)`` for each row of a Parquet file (N from 1), read in batches."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError(f"corpus {path}: reading Parquet needs pyarrow (pip install 'hopgraph[parquet]')") from None
    try:
        pf = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises its own ArrowInvalid / OSError types
        raise InputError(f"{path}: not a readable Parquet file ({e})") from None
    row = 0
    for batch in pf.iter_batches(batch_size=8192):
        for rec in batch.to_pylist():
            row += 1
            yield f"row {row}", _jsonable(rec)


_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")


def markdown_title(text: str) -> str | None:
    """The first ATX heading (``# Title``) of Markdown ``text`` outside fenced code, or None."""
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            m = _HEADING.match(line)
            if m:
                return m.group(1).strip()
    return None


def read_folder(folder: str | Path) -> Columns:
    """Every ``.txt``/``.md`` file below ``folder`` (hidden files and folders skipped), sorted by
    relative path: id = that path with forward slashes, title = a ``.md`` file's first heading or
    the file name without extension, text = the content (InputError naming the file if empty or
    not UTF-8)."""
    folder = Path(folder)
    files = sorted(
        (p.relative_to(folder).as_posix(), p) for p in folder.rglob("*")
        if p.suffix.lower() in FOLDER_SUFFIXES and p.is_file()
        and not any(part.startswith(".") for part in p.relative_to(folder).parts)
    )
    if not files:
        raise InputError(f"corpus folder {folder} holds no .txt or .md files")
    ids, titles, texts = [], [], []
    for rel, p in files:
        text = read_text(p)
        check_id(rel, str(p))
        check_text(text, str(p), rel)
        check_unicode(text, str(p))
        title = markdown_title(text) if p.suffix.lower() == ".md" else None
        ids.append(rel), titles.append(title or p.stem), texts.append(text)
    return Columns(tuple(ids), tuple(titles), tuple(texts), str(folder), ("",) * len(ids))

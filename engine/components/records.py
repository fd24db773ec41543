"""Passage records: the one set of rules every corpus input follows, and the JSON-lines reader.

A record is a mapping whose fields hold a passage's id, text, title and metadata
(:class:`RecordFields` names them: ``id``, ``title``, ``text`` in hopgraph's own format).
Rules of a record (:func:`passage_fields`, :meth:`RecordFields.metadata_of`):

* the id: present, not null, a non-empty string or an integer (not a boolean), at most
  :data:`MAX_ID_BYTES` bytes of UTF-8 (:func:`check_id`);
* the text: present, not null, a string holding a non-blank character;
* the title: a string, or absent / null (no title);
* every string valid Unicode (no lone surrogates, which UTF-8 cannot write);
* the metadata: the record's other fields (or the chosen ones), a field ``metadata`` holding a
  JSON object (or null) contributing its keys, which win over fields of the same name; every value,
  at any depth of its lists and objects, one JSON can hold (no NaN, Infinity or -Infinity:
  :func:`metadata_json`).

Rules of a corpus (:func:`collect`, and :func:`check_passages` for one built from lists): at least
one passage, no id twice. Every error is an :class:`~hopgraph.engine.errors.InputError` naming
where the record came from (file and line, row, record number) and the field.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, NamedTuple, Sequence

from ..errors import InputError

__all__ = ["MAX_ID_BYTES", "Columns", "RecordFields", "check_id", "check_passages", "check_text", "check_unicode",
           "collect", "decode_lines", "input_path", "iter_jsonl", "metadata_json", "passage_fields", "read_text"]


#: the longest passage id, in bytes of UTF-8: every id fits in a URL path (``GET`` / ``DELETE
#: /passages/{id}``), percent-encoded in at most three times as many characters
MAX_ID_BYTES = 1024


class Columns(NamedTuple):
    """A corpus read and checked, as the arguments of ``Corpus(ids, titles, texts, source, metadata)``."""

    ids: tuple[str, ...]
    titles: tuple[str, ...]
    texts: tuple[str, ...]
    source: str
    metadata: tuple[str, ...]


def input_path(path: str | Path, what: str, folder: bool = False) -> Path:
    """``path`` as an input ``what`` (``"qrels file"``, ``"embeddings"``, ...) may be read from: a
    regular file, or a directory when ``folder``. InputError naming it for a path that does not
    exist, a directory where a file is wanted, and anything else that is not a regular file (a
    device such as ``/dev/zero``, a FIFO, a socket: reading one may never end)."""
    path = Path(path)
    if path.is_file() or (folder and path.is_dir()):
        return path
    if not path.exists():
        raise InputError(f"{what} {path} does not exist")
    if path.is_dir():
        raise InputError(f"{what} {path} is a directory, not a file")
    raise InputError(f"{what} {path} is not a regular file (a device, FIFO or socket); give a file")


def decode_lines(path: Path) -> Iterator[str]:
    """The lines of a text file decoded as UTF-8 one at a time (a byte-order mark skipped);
    InputError naming the file and line for bytes that are not UTF-8."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                yield raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise _not_utf8(path, lineno, raw[e.start], f" at byte {e.start + 1} of the line") from None


def read_text(path: Path) -> str:
    """A whole UTF-8 text file (a byte-order mark skipped); InputError naming the file and line of
    the first byte that is not UTF-8."""
    raw = Path(path).read_bytes()
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise _not_utf8(path, raw.count(b"\n", 0, e.start) + 1, raw[e.start]) from None


def _not_utf8(path: Path, lineno: int, byte: int, at: str = "") -> InputError:
    return InputError(f"{path} line {lineno}: not valid UTF-8 text (byte 0x{byte:02x}{at}); save the file as UTF-8")


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    """``(line number, object)`` for each non-blank line of a JSON-lines file; InputError naming the
    file and line for invalid UTF-8, invalid JSON or a line that is not an object."""
    for lineno, line in enumerate(decode_lines(path), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(f"{path} line {lineno}: invalid JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(obj, dict):
            raise InputError(f"{path} line {lineno}: expected a JSON object, got {type(obj).__name__}")
        yield lineno, obj


def check_unicode(value: str, where: str) -> None:
    """``value`` must be encodable as UTF-8 (a JSON escape such as ``"\\ud800"`` gives a lone surrogate)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InputError(f"{where}: not valid Unicode text (lone surrogate U+{ord(value[e.start]):04X} at "
                         f"character {e.start})") from None


def check_id(pid: str, where: str) -> None:
    """A passage id must be valid Unicode (:func:`check_unicode`) of at most :data:`MAX_ID_BYTES` bytes
    of UTF-8."""
    check_unicode(pid, where)
    size = len(pid.encode("utf-8"))
    if size > MAX_ID_BYTES:
        raise InputError(f"{where}: the id {pid[:40]!r}... has {size} bytes of UTF-8; the limit is {MAX_ID_BYTES}")


def check_text(text: str, where: str, pid: object) -> None:
    """A passage text must hold a non-blank character."""
    if not text or not text.strip():
        raise InputError(f"{where}: empty text for id {pid!r}")


def metadata_json(meta: Mapping[str, Any], where: str) -> str:
    """``meta`` as the JSON object string a corpus stores (keys sorted; ``""`` for none). A value JSON
    cannot hold — a float NaN, Infinity or -Infinity, at any depth of lists and objects — raises
    :class:`InputError` naming ``where`` and the field (``'scores[2]'``, ``'a.b'``): stored, it could
    never be answered as JSON."""
    if not meta:
        return ""
    try:
        return json.dumps(meta, ensure_ascii=False, sort_keys=True, default=str, allow_nan=False)
    except ValueError:
        field = _non_finite(meta)
        if field is None:
            raise
        name, value = field
        raise InputError(f"{where}: metadata field {name!r} is {_JSON_NAMES[value]}, which JSON cannot hold "
                         "(give a finite number, null or text)") from None


def check_metadata_json(raw: str, where: str) -> None:
    """A metadata string given as stored (``""`` or a JSON object): InputError naming ``where`` and the
    field when it holds NaN, Infinity or -Infinity (:func:`metadata_json`). Only a string holding
    one of those words is parsed."""
    if "NaN" not in raw and "Infinity" not in raw:
        return
    try:
        meta = json.loads(raw)
    except ValueError as e:
        raise InputError(f"{where}: metadata is not valid JSON ({e})") from None
    if isinstance(meta, dict):
        metadata_json(meta, where)


_JSON_NAMES = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def _non_finite(value: Any, name: str = "") -> tuple[str, str] | None:
    """``(field path, "nan" | "inf" | "-inf")`` of the first non-finite float in ``value``; None if none."""
    if isinstance(value, float):
        return None if math.isfinite(value) else (name, str(float(value)))
    if isinstance(value, Mapping):
        items = ((f"{name}.{k}" if name else str(k), v) for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        items = ((f"{name}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    return next((found for found in (_non_finite(v, n) for n, v in items) if found is not None), None)


class RecordFields:
    """The fields of a record holding the id, title (``""``: none) and text, and the fields kept as
    metadata (``metadata``: their names; None: every other field)."""

    def __init__(self, id: str = "id", title: str = "title", text: str = "text",
                 metadata: Sequence[str] | None = None) -> None:
        self.id, self.title, self.text = id, title, text
        self.metadata = None if metadata is None else list(metadata)

    def resolve(self, record: Mapping[str, Any], where: str) -> None:
        """Choose the fields not given from the first record (here: all are given)."""

    def metadata_of(self, record: Mapping[str, Any], where: str) -> str:
        """The record's metadata as a JSON object string (``""`` for none), keys sorted
        (:func:`metadata_json`: an error names ``where`` and the record's id)."""
        core = (self.id, self.title, self.text)
        names = self.metadata if self.metadata is not None else [k for k in record if k not in core]
        meta: dict[str, Any] = {}
        nested = None
        for k in names:
            if k in core or k not in record:
                continue
            if k == "metadata":
                nested = record[k]
                if nested is not None and not isinstance(nested, Mapping):
                    raise InputError(f"{where}: 'metadata' must be a JSON object (or absent/null), got "
                                     f"{type(nested).__name__} {nested!r:.80}")
            else:
                meta[k] = record[k]
        meta.update(nested or {})
        return metadata_json(meta, f"{where} ({str(record.get(self.id))!r})")


def passage_fields(record: Any, fields: RecordFields, where: str) -> tuple[str, str, str]:
    """``(id, title, text)`` of one record, checked by the rules of the module docstring."""
    if not isinstance(record, Mapping):
        raise InputError(f"{where}: expected an object with {fields.id!r} and {fields.text!r}")
    for role, name in (("id", fields.id), ("text", fields.text)):
        if record.get(name) is None:
            raise InputError(f"{where}: missing field {name!r} (the passage {role})")
    pid, text = record[fields.id], record[fields.text]
    title = record.get(fields.title) if fields.title else None
    if not isinstance(pid, (str, int)) or isinstance(pid, bool) or str(pid) == "":
        raise InputError(f"{where}: {fields.id!r} must be a non-empty string or integer (the passage id), "
                         f"got {pid!r}")
    if not isinstance(text, str):
        raise InputError(f"{where}: {fields.text!r} must be a string (the passage text), got {type(text).__name__}")
    check_text(text, where, pid)
    if title is None:
        title = ""
    elif not isinstance(title, str):
        raise InputError(f"{where}: {fields.title!r} must be a string (or absent/null: the title), got "
                         f"{type(title).__name__} {title!r}")
    check_id(str(pid), f"{where}: {fields.id!r}")
    for name, value in ((fields.title, title), (fields.text, text)):
        check_unicode(value, f"{where}: {name!r}")
    return str(pid), title, text


def collect(records: Iterable[tuple[str, Any]], fields: RecordFields, source: str) -> Columns:
    """A corpus from ``(location, record)`` pairs (``"line 3"``, ``"row 2"``, ``"record 0"``), each
    checked (:func:`passage_fields`, :meth:`RecordFields.metadata_of`) and named ``"SOURCE
    LOCATION"`` in errors; no id twice (the error names the first location), at least one record."""
    ids, titles, texts, meta = [], [], [], []
    first: dict[str, str] = {}
    for location, record in records:
        where = f"{source} {location}"
        if isinstance(record, Mapping):
            fields.resolve(record, where)
        pid, title, text = passage_fields(record, fields, where)
        if pid in first:
            raise InputError(f"{where}: duplicate id {pid!r} (first seen on {first[pid]})")
        first[pid] = location
        ids.append(pid), titles.append(title), texts.append(text), meta.append(fields.metadata_of(record, where))
    if not ids:
        raise InputError(f"corpus {source} holds no passages")
    return Columns(tuple(ids), tuple(titles), tuple(texts), source, tuple(meta))


def check_passages(ids: Sequence[str], texts: Sequence[str], source: str,
                   metadata: Sequence[str] = ()) -> dict[str, int]:
    """The corpus rules for passages given as lists: at least one, ids of at most :data:`MAX_ID_BYTES`
    (:func:`check_id`), no id twice, no empty text, no metadata JSON cannot hold
    (:func:`check_metadata_json`). Returns ``{id: position}``."""
    if not len(ids):
        raise InputError(f"{source}: the corpus holds no passages")
    positions: dict[str, int] = {}
    for i, pid in enumerate(ids):
        if pid in positions:
            raise InputError(f"{source} passage {i}: duplicate id {pid!r} (first seen on passage {positions[pid]})")
        positions[pid] = i
        check_id(str(pid), f"{source} passage {i}")
        check_text(texts[i], f"{source} passage {i}", pid)
    for i, raw in enumerate(metadata):
        check_metadata_json(raw, f"{source} passage {i} ({ids[i]!r})")
    return positions

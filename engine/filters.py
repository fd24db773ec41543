"""Query-time filters: the passages a search may return, as a boolean row mask.

* ``allowed_ids`` — passage ids (every one must be in the index);
* ``where`` — a condition on the passages' metadata (:meth:`Corpus.meta
  <hopgraph.engine.components.corpus.Corpus.meta>`), in the operator language of Qdrant / Chroma /
  MongoDB:

  - ``{field: value}`` — the field equals the value; ``{field: [v1, v2]}`` — equals one of them;
  - ``{field: {"$eq" | "$ne" | "$gt" | "$gte" | "$lt" | "$lte": value}}``,
    ``{field: {"$in" | "$nin": [values]}}``, ``{field: {"$exists": true | false}}``; several operators
    in one object must all hold;
  - ``{"$and": [where, ...]}``, ``{"$or": [where, ...]}``, ``{"$not": where}``; several keys in one
    object must all hold.

Values are compared by type: numbers by value (``1 == 1.0``; booleans are not numbers), strings
exactly and, for ``$gt``..``$lte``, in code-point order (ISO 8601 dates order correctly), booleans
only for (in)equality; a value of another type never matches (``{"year": {"$gt": 2000}}`` skips a
passage whose year is the string ``"2001"``). A metadata value that is a list matches when one of
its elements does. ``None`` / ``null`` as a value means "missing": ``{field: None}`` passes a
passage without the field (or with ``null``). ``$ne`` and ``$nin`` are the negations of ``$eq`` and
``$in``: a passage without the field passes them; ``$exists: true`` passes a field that is present
and not null. Every malformed filter is an :class:`InputError` naming the path of the bad part
(``where['year']['$gt']``).

Both ``allowed_ids`` and ``where`` given: a passage must pass both. The metadata of the corpus is
parsed once and indexed per field on first use (:class:`MetadataIndex`): equality costs one
look-up, a range two binary searches, then one mask of the passing rows. The indexes of the
:data:`MAX_FIELDS` most recently filtered fields are kept; a field no passage has costs nothing (it
matches ``None`` only) and is never kept.

**Size bounds.** Before any evaluation every ``where`` passes :func:`check_where`, whichever way it
came (Python API, CLI, HTTP): the whole filter tree, ``$and`` / ``$or`` / ``$not`` included, holds at
most :data:`MAX_WHERE_CLAUSES` clauses (each field comparison, each logical operator and each empty
filter object ``{}`` is one),
nests at most :data:`MAX_WHERE_DEPTH` filter objects deep and lists at most :data:`MAX_WHERE_VALUES`
values in its ``$in`` / ``$nin`` / ``[...]`` lists; a filter over a bound is an :class:`InputError`
naming the bound. The check stops at the first bound passed, so its own cost is bounded too. The
evaluation reaches a cancellation :func:`~hopgraph.engine.cancel.checkpoint` at every clause, so a
search's deadline (:class:`~hopgraph.engine.cancel.CancelToken`) stops an expensive filter as it
stops a pipeline.
"""
from __future__ import annotations

import json
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

import numpy as np

from .cancel import checkpoint
from .components.corpus import Corpus
from .errors import InputError
from .lru import LRUCache

#: how many offending ids / values an error message quotes
QUOTE = 5
#: metadata fields whose value → rows index :class:`MetadataIndex` keeps (least recently used dropped)
MAX_FIELDS = 64
#: clauses in one ``where`` filter, over its whole tree (a field comparison or a logical operator is one)
MAX_WHERE_CLAUSES = 1024
#: filter objects nested in one ``where`` filter (``{"$and": [{"a": 1}]}`` is 2 deep)
MAX_WHERE_DEPTH = 16
#: values listed in one ``where`` filter's ``$in`` / ``$nin`` / ``[...]`` lists, over its whole tree
MAX_WHERE_VALUES = 10_000

#: the comparison operators (field level) and the logical ones (filter level)
FIELD_OPERATORS = ("$eq", "$ne", "$in", "$nin", "$gt", "$gte", "$lt", "$lte", "$exists")
LOGICAL_OPERATORS = ("$and", "$or", "$not")
_RANGE = ("$gt", "$gte", "$lt", "$lte")


class EmptyFilterWarning(UserWarning):
    """A search's filters pass no passage of the index: every result list is empty."""


def _kind(value: Any) -> str:
    """The kind of a metadata value, as a filter's diagnosis names it."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float, np.integer, np.floating)):
        return "number"
    return {str: "text", list: "list", dict: "object"}.get(type(value), "null")


def _conditions(where: Any) -> list[tuple[str, Any]]:
    """``(field, condition)`` of every field a (valid) filter names, through ``$and`` / ``$or`` /
    ``$not`` at any depth."""
    out: list[tuple[str, Any]] = []
    if not isinstance(where, Mapping):
        return out
    for name, cond in where.items():
        if name in ("$and", "$or"):
            for part in cond if isinstance(cond, list) else []:
                out += _conditions(part)
        elif name == "$not":
            out += _conditions(cond)
        else:
            out.append((name, cond))
    return out


def value_key(value: Any, where: str) -> tuple:
    """A hashable key under which equal filter / metadata values meet (module docstring)."""
    if value is None:
        return ("null",)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (int, float, np.integer, np.floating)):
        return ("number", float(value))
    if isinstance(value, str):
        return ("str", value)
    raise InputError(f"{where}: filter values must be strings, numbers, booleans or null, "
                     f"got {type(value).__name__}")


class WhereSize(NamedTuple):
    """The size of a ``where`` filter (:func:`check_where`): clauses, listed values, nesting depth and
    distinct metadata fields named."""

    clauses: int
    values: int
    depth: int
    fields: int


def check_where(where: Any, max_values: int = MAX_WHERE_VALUES, max_fields: int | None = None) -> WhereSize:
    """The size of ``where``, or an :class:`InputError` naming the first bound it passes (module
    docstring): :data:`MAX_WHERE_CLAUSES`, :data:`MAX_WHERE_DEPTH`, ``max_values`` (at most
    :data:`MAX_WHERE_VALUES`) and, when given, ``max_fields`` distinct fields. Walks the tree without
    recursion and stops at the first bound passed; malformed parts are left to :meth:`MetadataIndex.mask`,
    which names them."""
    max_values = min(max_values, MAX_WHERE_VALUES)
    clauses = values = depth = 0
    names: set[str] = set()
    stack: list[tuple[Any, int, str]] = [(where, 1, "where")]
    while stack:
        node, level, path = stack.pop()
        if not isinstance(node, Mapping):
            continue
        if level > MAX_WHERE_DEPTH:
            raise InputError(f"where nests filters more than {MAX_WHERE_DEPTH} deep (at {path}); the bound on "
                             f"nesting depth through $and / $or / $not is {MAX_WHERE_DEPTH}")
        depth = max(depth, level)
        clauses += not node  # an empty filter object passes everything but is still evaluated
        for name, cond in node.items():
            at = f"{path}[{name!r}]"
            if name in ("$and", "$or"):
                clauses += 1
                if isinstance(cond, (list, tuple)):
                    stack.extend((c, level + 1, f"{at}[{i}]")  # each filter adds a clause: enough to refuse
                                 for i, c in enumerate(cond[:MAX_WHERE_CLAUSES + 1]))
            elif name == "$not":
                clauses += 1
                stack.append((cond, level + 1, at))
            else:
                names.add(name)
                ops = cond if isinstance(cond, Mapping) and any(
                    isinstance(k, str) and k.startswith("$") for k in cond) else {"$in": cond}
                clauses += len(ops)
                values += sum(len(v) for v in ops.values() if isinstance(v, (list, tuple)))
            _check_size(clauses, values, len(names), max_values, max_fields)
        _check_size(clauses, values, len(names), max_values, max_fields)
    return WhereSize(clauses, values, depth, len(names))


def _check_size(clauses: int, values: int, fields: int, max_values: int, max_fields: int | None) -> None:
    """The bounds of :func:`check_where` on the counts so far."""
    if clauses > MAX_WHERE_CLAUSES:
        raise InputError(f"where holds more than {MAX_WHERE_CLAUSES} clauses (counted through $and / $or / $not); "
                         f"the bound on clauses in one filter is {MAX_WHERE_CLAUSES}")
    if values > max_values:
        raise InputError(f"where lists more than {max_values} values in its $in / $nin / [...] lists (counted "
                         f"through $and / $or / $not); the bound on listed values is {max_values}")
    if max_fields is not None and fields > max_fields:
        raise InputError(f"where names more than {max_fields} metadata fields (counted through $and / $or / $not); "
                         f"the bound on fields in one filter is {max_fields}")


class _Field:
    """One metadata field indexed: rows per value, rows holding any value, and the sorted
    (value, row) pairs of its numbers and of its strings for range queries."""

    def __init__(self, values: Iterable[tuple[int, Any]]) -> None:
        rows: dict[tuple, list[int]] = {}
        present: list[int] = []
        num_v, num_r, str_v, str_r = [], [], [], []
        for i, value in values:
            for v in (value if isinstance(value, list) else [value]):
                try:
                    key = value_key(v, "")
                except InputError:
                    continue  # objects inside metadata are never matched
                rows.setdefault(key, []).append(i)
                if key[0] == "number":
                    num_v.append(key[1]), num_r.append(i)
                elif key[0] == "str":
                    str_v.append(v), str_r.append(i)
                if key[0] != "null":
                    present.append(i)
        self.rows = {k: np.unique(np.asarray(v, np.int64)) for k, v in rows.items()}
        self.present = np.unique(np.asarray(present, np.int64))
        order = np.argsort(np.asarray(num_v, np.float64), kind="stable")
        self.numbers = (np.asarray(num_v, np.float64)[order], np.asarray(num_r, np.int64)[order])
        order = sorted(range(len(str_v)), key=str_v.__getitem__)
        self.strings = ([str_v[j] for j in order], np.asarray([str_r[j] for j in order], np.int64))

    def equal(self, key: tuple, n: int) -> np.ndarray:
        """Rows equal to ``key`` (:meth:`any_of` of one key)."""
        return self.any_of([key], n)

    def any_of(self, keys: Sequence[tuple], n: int) -> np.ndarray:
        """Rows equal to one of ``keys`` (one mask, however many keys); ``("null",)``: the rows
        holding no value."""
        out = np.zeros(n, bool)
        if ("null",) in keys:
            out[:] = True
            out[self.present] = False
        for key in keys:
            hit = self.rows.get(key)
            if hit is not None:
                out[hit] = True
        return out

    def compare(self, op: str, key: tuple, n: int) -> np.ndarray:
        """Rows with a value ``op`` (``$gt``..``$lte``) the number or string ``key``."""
        import bisect

        out = np.zeros(n, bool)
        if key[0] == "number":
            values, rows = self.numbers
            lo, hi = _bounds(op, np.searchsorted(values, key[1], "left"), np.searchsorted(values, key[1], "right"),
                             len(values))
        elif key[0] == "str":
            values, rows = self.strings
            lo, hi = _bounds(op, bisect.bisect_left(values, key[1]), bisect.bisect_right(values, key[1]), len(values))
        else:
            return out
        out[rows[lo:hi]] = True
        return out


def _bounds(op: str, left: int, right: int, n: int) -> tuple[int, int]:
    """The slice of a sorted array holding the values ``op`` v, given v's ``left`` / ``right`` insertion points."""
    return {"$gt": (right, n), "$gte": (left, n), "$lt": (0, left), "$lte": (0, right)}[op]


class MetadataIndex:
    """The corpus metadata, parsed once, with each field indexed on first use (:class:`_Field`);
    the indexes of the ``max_fields`` most recently used fields are kept."""

    def __init__(self, corpus: Corpus, max_fields: int = MAX_FIELDS) -> None:
        self.corpus = corpus
        self._parsed: list[dict] | None = None
        self._names: frozenset[str] = frozenset()
        self._fields: LRUCache[str, _Field] = LRUCache(max_fields)

    def _records(self) -> list[dict]:
        if self._parsed is None:
            self._parsed = [json.loads(m) if m else {} for m in self.corpus.metadata]
            self._names = frozenset(name for rec in self._parsed for name in rec)
        return self._parsed

    def field(self, name: str) -> _Field:
        """The index of metadata field ``name`` (built on first use; a field no passage has is an
        empty index, never kept)."""
        self._records()
        if name not in self._names:
            return _Field(())
        return self._fields.get_or_make(
            name, lambda: _Field((i, rec.get(name)) for i, rec in enumerate(self._records())))

    def diagnose(self, where: Mapping[str, Any]) -> list[str]:
        """Why a valid filter ``where`` may pass no passage, in words: each field it names that no
        passage has, and each range comparison (``$gt`` ...) of a field with a value of a kind
        (number, text, boolean, list, object) none of the field's values has."""
        self._records()
        notes = []
        for name, cond in _conditions(where):
            if name not in self._names:
                known = ", ".join(sorted(self._names)[:10]) or "none"
                notes.append(f"no passage has the metadata field {name!r} (fields: {known})")
                continue
            if not isinstance(cond, Mapping):
                continue
            kinds = {_kind(rec[name]) for rec in self._records() if name in rec}
            for op, value in cond.items():
                if op in _RANGE and _kind(value) not in kinds:
                    notes.append(f"field {name!r} holds {' and '.join(sorted(kinds))}, compared ({op}) with the "
                                 f"{_kind(value)} {json.dumps(value, default=str)[:60]}")
        return notes

    def mask(self, where: Mapping[str, Any]) -> np.ndarray:
        """Rows passing the filter ``where`` (bool [N]; module docstring); InputError naming the
        bound a filter passes (:func:`check_where`, before any evaluation) or the path of a malformed
        part; :class:`~hopgraph.engine.cancel.SearchCancelled` when the calling thread's search
        expires during the evaluation."""
        check_where(where)
        return self._mask(where, "where")

    def _mask(self, where: Mapping[str, Any], path: str) -> np.ndarray:
        n = len(self.corpus)
        if not isinstance(where, Mapping):
            raise InputError(f"{path} must map metadata fields to conditions, got {type(where).__name__}")
        out = np.ones(n, bool)
        for name, cond in where.items():
            checkpoint()
            at = f"{path}[{name!r}]"
            if not isinstance(name, str) or not name:
                raise InputError(f"{path}: field names must be non-empty strings, got {name!r}")
            if name in ("$and", "$or"):
                if not isinstance(cond, (list, tuple)) or not cond:
                    raise InputError(f"{at} must be a non-empty list of filters")
                out &= self._combine(name, cond, at)
            elif name == "$not":
                out &= ~self._mask(cond, at)
            elif name.startswith("$"):
                raise InputError(f"{path}: unknown operator {name!r}; filter level: {', '.join(LOGICAL_OPERATORS)}; "
                                 f"field level ({{field: {{op: value}}}}): {', '.join(FIELD_OPERATORS)}")
            else:
                out &= self._field_mask(name, cond, at)
        return out

    def _combine(self, op: str, parts: Sequence[Any], at: str) -> np.ndarray:
        """The ``$and`` / ``$or`` of the filters ``parts``, one mask held at a time."""
        out = self._mask(parts[0], f"{at}[0]")
        for i, part in enumerate(parts[1:], start=1):
            if op == "$and":
                out &= self._mask(part, f"{at}[{i}]")
            else:
                out |= self._mask(part, f"{at}[{i}]")
        return out

    def _field_mask(self, name: str, cond: Any, at: str) -> np.ndarray:
        n = len(self.corpus)
        if isinstance(cond, Mapping) and any(isinstance(k, str) and k.startswith("$") for k in cond):
            out = np.ones(n, bool)
            for op, operand in cond.items():
                checkpoint()
                out &= self._operator(name, op, operand, f"{at}[{op!r}]")
            return out
        if isinstance(cond, (list, tuple)):
            return self._operator(name, "$in", cond, at)
        return self._operator(name, "$eq", cond, at)

    def _operator(self, name: str, op: str, operand: Any, at: str) -> np.ndarray:
        n = len(self.corpus)
        if op in ("$eq", "$ne"):
            hit = self.field(name).equal(value_key(operand, at), n)
            return hit if op == "$eq" else ~hit
        if op in ("$in", "$nin"):
            if not isinstance(operand, (list, tuple)):
                raise InputError(f"{at} must be a list of values, got {type(operand).__name__}")
            if not operand:
                raise InputError(f"{at}: an empty list of values passes nothing; give at least one")
            keys = [value_key(v, f"{at}[{i}]") for i, v in enumerate(operand)]
            hit = self.field(name).any_of(keys, n)
            return hit if op == "$in" else ~hit
        if op in _RANGE:
            key = value_key(operand, at)
            if key[0] not in ("number", "str"):
                raise InputError(f"{at}: {op} compares numbers or strings, got {operand!r}")
            return self.field(name).compare(op, key, n)
        if op == "$exists":
            if not isinstance(operand, bool):
                raise InputError(f"{at} must be true or false, got {operand!r}")
            hit = np.zeros(n, bool)
            hit[self.field(name).present] = True
            return hit if operand else ~hit
        raise InputError(f"{at}: unknown operator {op!r}; field operators: {', '.join(FIELD_OPERATORS)}")


def ids_mask(corpus: Corpus, ids: Iterable[str], deleted: np.ndarray | None = None) -> np.ndarray:
    """Rows of the passages ``ids`` (bool [N]); InputError quoting the ids the index does not hold
    (absent or deleted)."""
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
        raise InputError(f"allowed_ids must be a list of passage ids, got {type(ids).__name__}")
    out = np.zeros(len(corpus), bool)
    unknown = []
    for pid in ids:
        if not isinstance(pid, str):
            raise InputError(f"allowed_ids: passage ids are strings, got {type(pid).__name__} {pid!r}")
        try:
            row = corpus.position(pid)
        except KeyError:
            unknown.append(pid)
            continue
        if deleted is not None and deleted[row]:
            unknown.append(pid)
            continue
        out[row] = True
    if unknown:
        more = f" (and {len(unknown) - QUOTE} more)" if len(unknown) > QUOTE else ""
        raise InputError(f"allowed_ids: {len(unknown)} id(s) not in the index: "
                         f"{', '.join(map(repr, unknown[:QUOTE]))}{more}")
    return out


def filter_mask(corpus: Corpus, metadata: MetadataIndex, allowed_ids: Sequence[str] | None = None,
                where: Mapping[str, Any] | None = None, deleted: np.ndarray | None = None) -> np.ndarray | None:
    """The mask of a search's filters (None: no filter given)."""
    mask = None
    if allowed_ids is not None:
        mask = ids_mask(corpus, allowed_ids, deleted)
    if where is not None:
        m = metadata.mask(where)
        mask = m if mask is None else mask & m
    return mask

"""Query-time filters: the passages a search may return, as a boolean row mask.

* ``allowed_ids`` — passage ids (every one must be in the index);
* ``where`` — ``{field: value}`` or ``{field: [value, ...]}`` on the passages' metadata
  (:meth:`hopgraph.engine.components.corpus.Corpus.meta`): a passage passes when, for every field, its
  value equals the value (or one of the list). A metadata value that is itself a list passes
  when any of its elements does. Numbers compare by value (``1 == 1.0``), booleans only equal
  booleans, strings compare exactly; ``None`` matches a missing field or JSON ``null``.

Both given: a passage must pass both. The metadata of the whole corpus is parsed once and, per
field, the rows of each value are kept for the :data:`MAX_FIELDS` most recently filtered fields
(:class:`MetadataIndex`), so a filter costs one mask per search; a field no passage has costs
nothing (it matches ``None`` only) and is never kept.
"""
from __future__ import annotations

import json
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from .components.corpus import Corpus
from .errors import InputError
from .lru import LRUCache

#: how many offending ids / values an error message quotes
QUOTE = 5
#: metadata fields whose value → rows index :class:`MetadataIndex` keeps (least recently used dropped)
MAX_FIELDS = 64


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


class MetadataIndex:
    """Per metadata field, the rows holding each value (built on first use of the field; the
    :data:`MAX_FIELDS` most recently used fields are kept)."""

    def __init__(self, corpus: Corpus, max_fields: int = MAX_FIELDS) -> None:
        self.corpus = corpus
        self._parsed: list[dict] | None = None
        self._names: frozenset[str] = frozenset()
        self._fields: LRUCache[str, dict[tuple, np.ndarray]] = LRUCache(max_fields)

    def _records(self) -> list[dict]:
        if self._parsed is None:
            self._parsed = [json.loads(m) if m else {} for m in self.corpus.metadata]
            self._names = frozenset(name for rec in self._parsed for name in rec)
        return self._parsed

    def field(self, name: str) -> dict[tuple, np.ndarray | slice]:
        """value key → sorted rows whose metadata field ``name`` holds that value (a field no
        passage has: every row, as ``slice(None)``, holds None)."""
        self._records()
        if name not in self._names:
            return {("null",): slice(None)}
        return self._fields.get_or_make(name, lambda: self._build(name))

    def _build(self, name: str) -> dict[tuple, np.ndarray]:
        rows: dict[tuple, list[int]] = {}
        for i, rec in enumerate(self._records()):
            value = rec.get(name)
            values = value if isinstance(value, list) else [value]
            for v in values:
                try:
                    key = value_key(v, f"metadata field {name!r}")
                except InputError:
                    continue  # objects inside metadata are never matched
                rows.setdefault(key, []).append(i)
        return {k: np.unique(np.asarray(v, np.int64)) for k, v in rows.items()}

    def mask(self, where: Mapping[str, Any]) -> np.ndarray:
        """Rows passing every ``field: value(s)`` condition (bool [N])."""
        if not isinstance(where, Mapping):
            raise InputError(f"where must map metadata fields to a value or a list of values, "
                             f"got {type(where).__name__}")
        out = np.ones(len(self.corpus), bool)
        for name, wanted in where.items():
            if not isinstance(name, str) or not name:
                raise InputError(f"where: field names must be non-empty strings, got {name!r}")
            values = wanted if isinstance(wanted, (list, tuple)) else [wanted]
            if not values:
                raise InputError(f"where[{name!r}]: an empty list of values passes nothing; give at least one")
            keys = [value_key(v, f"where[{name!r}]") for v in values]
            index = self.field(name)
            hit = np.zeros(len(self.corpus), bool)
            for key in keys:
                rows = index.get(key)
                if rows is not None:
                    hit[rows] = True
            out &= hit
        return out


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

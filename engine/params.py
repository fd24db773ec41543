"""Pipeline parameters as data: one frozen dataclass per pipeline, validated in one place.

Each pipeline declares a :class:`PipelineParams` subclass whose fields are made with the
helpers below (:func:`choice`, :func:`integer`, :func:`real`, :func:`flag`, :func:`path`,
:func:`anything`). A field's metadata says its domain and whether it is **query-time**
(``query=True``: it only changes ``search``, so a variant that differs only in such fields
reuses the fitted structures) or **fit-time** (a change needs a refit). Every way of making
parameters — a pipeline constructor, ``Index.pipeline(name, **overrides)``, ``Index.load``,
the CLI's ``--param`` and the HTTP server's ``params`` — goes through
:meth:`PipelineParams.create` / :meth:`PipelineParams.replace`, which check every value and
raise :class:`InvalidParameter` (an ``InputError``, so a ``ValueError``) naming the pipeline,
the parameter, the allowed values and the value given.

The published algorithm and hopgraph's improved defaults are named constructors:
``G3RAGParams.published()`` and ``G3RAGParams.improved()`` (= the defaults), both taking
overrides. ``G3RAG(published=True)`` is a constructor shortcut for
``G3RAG(G3RAGParams.published())``, not a parameter (it is not stored). Where the SPEC
leaves a detail open, the choice is a parameter (SPEC preamble: "keep it configurable"),
documented in the pipeline's module docstring.
"""
from __future__ import annotations

import dataclasses
import json
import math
import numbers
from dataclasses import dataclass, field, fields
from typing import Any, Callable, ClassVar, Mapping, Sequence, TypeVar

from .errors import InputError

P = TypeVar("P", bound="PipelineParams")


class InvalidParameter(InputError):
    """A pipeline parameter is unknown or outside its domain; the message names both."""


@dataclass(frozen=True)
class Domain:
    """What a field accepts: a kind (``int``/``float``/``bool``/``str``/``path``/``any``), optional
    choices or bounds, ``None`` allowed or not, and whether it is query-time."""

    kind: str
    query: bool = False
    choices: tuple[Any, ...] | None = None
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    nullable: bool = False
    check: Callable[[Any], bool] | None = None
    describe: str = ""

    def text(self) -> str:
        """The allowed values in words (used in error messages)."""
        if self.choices is not None:
            text = "one of " + ", ".join(repr(c) for c in self.choices)
        elif self.describe:
            text = self.describe
        else:
            text = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string",
                    "path": "a file path"}.get(self.kind, "a value")
            if self.low is not None and self.high is not None:
                text += f" in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}{')' if self.high_open else ']'}"
            elif self.low is not None:
                text += f" {'>' if self.low_open else '>='} {self.low:g}"
            elif self.high is not None:
                text += f" {'<' if self.high_open else '<='} {self.high:g}"
        return text + (" or null" if self.nullable else "")

    def coerce(self, value: Any) -> Any:
        """The value in its canonical type, or ``ValueError`` when it is outside the domain."""
        if value is None:
            if self.nullable:
                return None
            raise ValueError
        if self.kind == "bool":
            if isinstance(value, (bool,)) or (hasattr(value, "dtype") and value.dtype == bool):
                return bool(value)
            raise ValueError
        if self.kind == "int":
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                if not (isinstance(value, float) and value.is_integer()):
                    raise ValueError
            value = int(value)
        elif self.kind == "float":
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
                raise ValueError
            value = float(value)
        elif self.kind in ("str", "path"):
            if not isinstance(value, str) or (self.kind == "path" and not value):
                raise ValueError
        if self.choices is not None and value not in self.choices:
            raise ValueError
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            raise ValueError
        if self.high is not None and (value > self.high or (self.high_open and value == self.high)):
            raise ValueError
        if self.check is not None and not self.check(value):
            raise ValueError
        return value


def _field(default: Any, domain: Domain) -> Any:
    return field(default=default, metadata={"domain": domain})


def choice(default: Any, options: Sequence[Any], *, query: bool = False, nullable: bool = False) -> Any:
    """A field taking one of ``options``."""
    return _field(default, Domain("any", query=query, choices=tuple(options), nullable=nullable))


def integer(default: int | None, *, low: int | None = None, high: int | None = None, query: bool = False,
            nullable: bool = False) -> Any:
    """An integer field with optional inclusive bounds."""
    return _field(default, Domain("int", query=query, low=low, high=high, nullable=nullable))


def real(default: float, *, low: float | None = None, high: float | None = None, low_open: bool = False,
         high_open: bool = False, query: bool = False) -> Any:
    """A finite number with optional bounds (``low_open``/``high_open``: the bound itself is excluded)."""
    return _field(default, Domain("float", query=query, low=low, high=high, low_open=low_open,
                                  high_open=high_open))


def flag(default: bool, *, query: bool = False) -> Any:
    """A boolean field."""
    return _field(default, Domain("bool", query=query))


def path(default: str | None = None, *, query: bool = False) -> Any:
    """An optional file path (a non-empty string, or None)."""
    return _field(default, Domain("path", query=query, nullable=True))


def anything(default: Any, check: Callable[[Any], bool], describe: str, *, query: bool = False) -> Any:
    """A field checked by a predicate (e.g. a name or a callable); ``describe`` words the domain."""
    return _field(default, Domain("any", query=query, check=check, describe=describe, nullable=True))


@dataclass(frozen=True)
class PipelineParams:
    """Base of every pipeline's parameters (frozen; checked on construction)."""

    #: the pipeline these parameters belong to (for error messages)
    pipeline: ClassVar[str] = "pipeline"
    #: fit-time fields added after indexes were saved without them: the value such an index was
    #: fitted with (:meth:`from_saved`), so that it is refitted, not mislabelled, under a new default
    saved_defaults: ClassVar[Mapping[str, Any]] = {}

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            try:
                object.__setattr__(self, f.name, f.metadata["domain"].coerce(value))
            except ValueError:
                raise InvalidParameter(f"{self.pipeline}: parameter {f.name!r} must be "
                                       f"{f.metadata['domain'].text()}, got {value!r}") from None
        self.check()

    def check(self) -> None:
        """Cross-field rules; subclasses raise :meth:`invalid` when two fields disagree."""

    def invalid(self, name: str, message: str) -> InvalidParameter:
        """An :class:`InvalidParameter` naming this pipeline and parameter ``name``."""
        return InvalidParameter(f"{self.pipeline}: parameter {name!r} {message}, got {getattr(self, name)!r}")

    # ------------------------------------------------------------------ constructors
    @classmethod
    def create(cls: type[P], base: "P | Mapping[str, Any] | None" = None, **overrides: Any) -> P:
        """Parameters from a base (an instance or a mapping, e.g. a manifest entry) and overrides;
        unknown names raise :class:`InvalidParameter` listing the known ones."""
        if isinstance(base, cls):
            return base.replace(**overrides) if overrides else base
        values = {**dict(base or {}), **overrides}
        cls.check_names(values)
        return cls(**values)

    @classmethod
    def from_saved(cls: type[P], values: Mapping[str, Any]) -> P:
        """Parameters of a saved pipeline (a manifest entry): fields it lacks take their
        :attr:`saved_defaults` value (what it was fitted with), the others their default."""
        return cls.create({**{k: v for k, v in cls.saved_defaults.items() if k not in values}, **values})

    @classmethod
    def published(cls: type[P], **overrides: Any) -> P:
        """The published algorithm's parameters (SPEC); default: the same as :meth:`improved`."""
        return cls.create(cls.published_values(), **overrides)

    @classmethod
    def improved(cls: type[P], **overrides: Any) -> P:
        """hopgraph's defaults (one set for every corpus)."""
        return cls.create(None, **overrides)

    @classmethod
    def published_values(cls) -> dict[str, Any]:
        """The fields whose published value differs from the default."""
        return {}

    @classmethod
    def check_names(cls, names: Mapping[str, Any] | Sequence[str]) -> None:
        unknown = sorted(set(names) - set(cls.names()))
        if unknown:
            raise InvalidParameter(f"{cls.pipeline}: unknown parameter(s) {', '.join(map(repr, unknown))}; "
                                   f"known: {', '.join(cls.names()) or 'none'}")

    def replace(self: P, **overrides: Any) -> P:
        """A validated copy with ``overrides`` applied."""
        self.check_names(overrides)
        return dataclasses.replace(self, **overrides)

    # ------------------------------------------------------------------ introspection
    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def query_names(cls) -> frozenset[str]:
        """The query-time fields (a change needs no refit)."""
        return frozenset(f.name for f in fields(cls) if f.metadata["domain"].query)

    @classmethod
    def domain(cls, name: str) -> Domain:
        cls.check_names([name])
        return next(f.metadata["domain"] for f in fields(cls) if f.name == name)

    def changed(self, other: "PipelineParams") -> set[str]:
        """Names of the fields whose values differ between ``self`` and ``other``."""
        return {f.name for f in fields(self) if getattr(self, f.name) != getattr(other, f.name)}

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable values (a callable, which cannot be stored, becomes None)."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = None if callable(value) else value
        return json.loads(json.dumps(out))


def parse_assignments(items: Sequence[str], default_pipeline: str | None = None) -> dict[str, dict[str, Any]]:
    """Parse CLI ``--param`` items ``[PIPELINE.]NAME=VALUE`` into ``{pipeline: {name: value}}``.

    VALUE is read as JSON when it parses (``0.5``, ``true``, ``null``, ``"x"``), else as a plain
    string; a missing pipeline prefix takes ``default_pipeline``.
    """
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise InputError(f"--param {item!r}: expected [PIPELINE.]NAME=VALUE")
        pipe, dot, name = key.rpartition(".")
        if not dot:
            if default_pipeline is None:
                raise InputError(f"--param {item!r}: say which pipeline, as PIPELINE.{key}=VALUE")
            pipe = default_pipeline
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        out.setdefault(pipe, {})[name] = value
    return out

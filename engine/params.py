"""Parameters as data, in three kinds, validated once.

* **Fit parameters** (:class:`FitParams`): what a pipeline's fitted structures depend on. Stored
  with an index; a change needs a refit.
* **Search parameters** (:class:`SearchParams`): what one search call may change. A pipeline keeps
  defaults (``Pipeline.search_defaults``); a call's overrides are validated and never stored.
* **Run settings** (:class:`RunSettings`): device, threads, batch size. Never stored, never a refit,
  never a change of results.

Each pipeline declares one :class:`FitParams` and one :class:`SearchParams` subclass whose fields are
made with :func:`choice`, :func:`integer`, :func:`real`, :func:`flag`, :func:`path` or
:func:`anything`. Construction coerces and checks every field and raises :class:`InvalidParameter`
(an ``InputError``, hence a ``ValueError``) naming the pipeline, the parameter, the allowed values
and the value given. A renamed parameter (:attr:`Params.renamed`) is accepted under its old name
with a :class:`DeprecatedParameterWarning` naming the new one.
"""
from __future__ import annotations

import dataclasses
import json
import math
import numbers
import warnings
from dataclasses import dataclass, field, fields
from typing import Any, Callable, ClassVar, Mapping, Sequence, TypeVar

from .errors import InputError

P = TypeVar("P", bound="Params")

#: the run settings, which are not pipeline parameters (:class:`RunSettings`)
RUN_SETTINGS = ("device", "threads", "batch_size")


class InvalidParameter(InputError):
    """A pipeline parameter is unknown or outside its domain; the message names both."""


class DeprecatedParameterWarning(FutureWarning):
    """A parameter was given under a name that will be removed; the message names the new one."""


@dataclass(frozen=True)
class Domain:
    """What a field accepts: a kind (``int``/``float``/``bool``/``str``/``path``/``any``), optional
    choices or bounds, and whether ``None`` is allowed."""

    kind: str
    choices: tuple[Any, ...] | None = None
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    nullable: bool = False
    check: Callable[[Any], bool] | None = None
    describe: str = ""
    #: the largest value a served request may give an integer search parameter (a server's
    #: default bound, which its operator may change; None: no serving bound)
    serving_bound: int | None = None

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


def choice(default: Any, options: Sequence[Any], *, nullable: bool = False) -> Any:
    """A field taking one of ``options``."""
    return _field(default, Domain("any", choices=tuple(options), nullable=nullable))


def integer(default: int | None, *, low: int | None = None, high: int | None = None,
            nullable: bool = False, serving_bound: int | None = None) -> Any:
    """An integer field with optional inclusive bounds; ``serving_bound``: the largest value a
    request to a server may give it by default (every integer search parameter declares one: it
    caps what one served search can cost)."""
    return _field(default, Domain("int", low=low, high=high, nullable=nullable, serving_bound=serving_bound))


def real(default: float, *, low: float | None = None, high: float | None = None, low_open: bool = False,
         high_open: bool = False) -> Any:
    """A finite number with optional bounds (``low_open``/``high_open``: the bound itself is excluded)."""
    return _field(default, Domain("float", low=low, high=high, low_open=low_open,
                                  high_open=high_open))


def flag(default: bool) -> Any:
    """A boolean field."""
    return _field(default, Domain("bool"))


def path(default: str | None = None) -> Any:
    """An optional file path (a non-empty string, or None)."""
    return _field(default, Domain("path", nullable=True))


def anything(default: Any, check: Callable[[Any], bool], describe: str) -> Any:
    """A field checked by a predicate (e.g. a name or a callable); ``describe`` words the domain."""
    return _field(default, Domain("any", check=check, describe=describe, nullable=True))


@dataclass(frozen=True)
class Params:
    """Base of every parameter set (frozen; every field checked on construction)."""

    #: the pipeline (or component) these parameters belong to, for error messages
    pipeline: ClassVar[str] = "pipeline"
    #: the kind, for error messages: "fit" or "search"
    kind: ClassVar[str] = "fit"
    #: old name -> new name of renamed fields, accepted with a DeprecatedParameterWarning
    renamed: ClassVar[Mapping[str, str]] = {}
    #: fields added after indexes were saved without them: the value such an index was fitted with
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
        """Parameters from a base (an instance or a mapping) and overrides. Old names are renamed
        with a warning; unknown names raise :class:`InvalidParameter` listing the known ones."""
        if isinstance(base, cls):
            return base.replace(**overrides) if overrides else base
        values = cls.rename({**dict(base or {}), **overrides})
        cls.check_names(values)
        return cls(**values)

    @classmethod
    def from_saved(cls: type[P], values: Mapping[str, Any]) -> P:
        """Parameters stored with an index: old names renamed silently, fields the index lacks
        take their :attr:`saved_defaults` value (what it was fitted with), others their default."""
        values = cls.rename(values, warn=False)
        return cls.create({**{k: v for k, v in cls.saved_defaults.items() if k not in values}, **values})

    @classmethod
    def published(cls: type[P], **overrides: Any) -> P:
        """The published algorithm's values (SPEC); default: the same as the defaults."""
        return cls.create(cls.published_values(), **overrides)

    @classmethod
    def published_values(cls) -> dict[str, Any]:
        """The fields whose published value differs from the default."""
        return {}

    @classmethod
    def rename(cls, values: Mapping[str, Any], warn: bool = True) -> dict[str, Any]:
        """``values`` with renamed fields under their new names (a :class:`DeprecatedParameterWarning`
        per old name with ``warn``); both names at once raise :class:`InvalidParameter`."""
        out = dict(values)
        for old, new in cls.renamed.items():
            if old not in out:
                continue
            if new in out:
                raise InvalidParameter(f"{cls.pipeline}: {old!r} and {new!r} name the same parameter; give {new!r}")
            if warn:
                warnings.warn(f"{cls.pipeline}: parameter {old!r} is now called {new!r}; the old name will be "
                              "removed in the next release", DeprecatedParameterWarning, stacklevel=4)
            out[new] = out.pop(old)
        return out

    @classmethod
    def check_names(cls, names: Mapping[str, Any] | Sequence[str]) -> None:
        """Raise :class:`InvalidParameter` listing the known names when a name of ``names`` is not a field."""
        unknown = sorted(set(names) - set(cls.names()))
        if unknown:
            raise InvalidParameter(f"{cls.pipeline}: unknown {cls.kind} parameter(s) "
                                   f"{', '.join(map(repr, unknown))}; known: {', '.join(cls.names()) or 'none'}")

    def replace(self: P, **overrides: Any) -> P:
        """A validated copy with ``overrides`` applied (old names renamed with a warning)."""
        overrides = self.rename(overrides)
        self.check_names(overrides)
        return dataclasses.replace(self, **overrides) if overrides else self

    # ------------------------------------------------------------------ introspection
    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The field names, in declaration order."""
        return tuple(f.name for f in fields(cls))

    @classmethod
    def accepts(cls, name: str) -> bool:
        """Whether ``name`` is a field of this set, under its current or its old name."""
        return name in cls.names() or name in cls.renamed

    @classmethod
    def domain(cls, name: str) -> Domain:
        """The :class:`Domain` of field ``name`` (an old name is accepted); unknown names raise."""
        name = cls.renamed.get(name, name)
        cls.check_names([name])
        return next(f.metadata["domain"] for f in fields(cls) if f.name == name)

    @classmethod
    def integer_names(cls) -> tuple[str, ...]:
        """The names of the integer fields, in declaration order."""
        return tuple(f.name for f in fields(cls) if f.metadata["domain"].kind == "int")

    @classmethod
    def serving_bounds(cls) -> dict[str, int]:
        """``{name: serving bound}`` of the integer fields that declare one (:func:`integer`)."""
        return {name: bound for name in cls.integer_names()
                if (bound := cls.domain(name).serving_bound) is not None}

    def changed(self, other: "Params") -> set[str]:
        """Names of the fields whose values differ between ``self`` and ``other``."""
        return {f.name for f in fields(self) if getattr(self, f.name) != getattr(other, f.name)}

    @classmethod
    def none_for(cls: type[P], pipeline: str, name: str, module: str) -> type[P]:
        """The empty parameter set of this kind for ``pipeline``, as class ``name`` of ``module``."""
        doc = f"``{pipeline}`` has no {cls.kind} parameters."
        return dataclass(frozen=True)(type(name, (cls,), {"pipeline": pipeline, "__doc__": doc, "__module__": module}))

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable values (a callable, which cannot be stored, becomes None)."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = None if callable(value) else value
        return json.loads(json.dumps(out))


@dataclass(frozen=True)
class FitParams(Params):
    """Fit parameters: stored with the index; a change needs a refit."""

    kind = "fit"


@dataclass(frozen=True)
class SearchParams(Params):
    """Search parameters: defaults kept by a pipeline, overridden per call, never stored."""

    kind = "search"


@dataclass(frozen=True)
class RunSettings:
    """How a pipeline runs, never what it returns: the ``device`` (``"auto"``: CUDA when torch sees
    a GPU), torch intra-op ``threads`` (None: the pipeline's default) and the queries searched per
    batch (``batch_size``; None: the pipeline's default). Never stored, never a refit."""

    device: str = "auto"
    threads: int | None = None
    batch_size: int | None = None

    def __post_init__(self) -> None:
        from ..kernels.dispatch import DEVICES

        if self.device not in DEVICES:
            raise InvalidParameter(f"run setting 'device' must be one of {', '.join(map(repr, DEVICES))}, "
                                   f"got {self.device!r}")
        for name in ("threads", "batch_size"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral)
                                      or value < 1):
                raise InvalidParameter(f"run setting {name!r} must be a positive integer or None, got {value!r}")

    @classmethod
    def create(cls, base: "RunSettings | Mapping[str, Any] | None" = None, **overrides: Any) -> "RunSettings":
        """Settings from a base (an instance or a mapping) and overrides; unknown names raise."""
        values = {**(dataclasses.asdict(base) if isinstance(base, RunSettings) else dict(base or {})), **overrides}
        unknown = sorted(set(values) - set(RUN_SETTINGS))
        if unknown:
            raise InvalidParameter(f"unknown run setting(s) {', '.join(map(repr, unknown))}; known: "
                                   f"{', '.join(RUN_SETTINGS)}")
        return cls(**values)

    def replace(self, **overrides: Any) -> "RunSettings":
        """A validated copy with ``overrides`` applied."""
        return self.create(self, **overrides)


def split_params(fit: type[FitParams], search: type[SearchParams], values: Mapping[str, Any]
                 ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """``values`` (names of any kind, old names included) split into fit parameters, search
    parameters and run settings; a run setting given as a parameter warns
    (:class:`DeprecatedParameterWarning`); unknown names raise :class:`InvalidParameter`."""
    out: tuple[dict[str, Any], dict[str, Any], dict[str, Any]] = ({}, {}, {})
    for name, value in values.items():
        if fit.accepts(name):
            out[0][name] = value
        elif search.accepts(name):
            out[1][name] = value
        elif name in RUN_SETTINGS:
            warnings.warn(f"{fit.pipeline}: {name!r} is a run setting, not a parameter: give "
                          f"settings=RunSettings({name}=...)", DeprecatedParameterWarning, stacklevel=3)
            out[2][name] = value
        else:
            raise InvalidParameter(f"{fit.pipeline}: unknown parameter {name!r}; fit parameters: "
                                   f"{', '.join(fit.names()) or 'none'}; search parameters: "
                                   f"{', '.join(search.names()) or 'none'}")
    return out


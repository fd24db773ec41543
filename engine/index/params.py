"""An index's pipeline parameters: ``{pipeline: {name: value}}``, checked against each pipeline's
fit and search parameter sets. Only fit parameters are stored with an index."""
from __future__ import annotations

from typing import Any, Mapping

from ..errors import InputError
from ..params import RUN_SETTINGS, split_params
from ..pipelines import pipeline_class


def validate_params(params: Mapping[str, Mapping[str, Any]] | None, stored: bool = False
                    ) -> dict[str, dict[str, Any]]:
    """``params`` checked: unknown pipelines, unknown names and bad values raise
    :class:`~hopgraph.engine.params.InvalidParameter` naming them; old names are renamed (with a
    warning unless ``stored``: read from an index). Run settings stored by earlier versions are dropped."""
    out: dict[str, dict[str, Any]] = {}
    for name, values in (params or {}).items():
        if not isinstance(values, Mapping):
            raise InputError(f"params[{name!r}] must be a mapping of parameter names to values")
        cls = pipeline_class(name)
        if stored:
            values = {k: v for k, v in values.items() if k not in RUN_SETTINGS}
        fit, search, _ = split_params(cls.FitParams, cls.SearchParams, values)
        fit = cls.FitParams.rename(fit, warn=not stored)
        search = cls.SearchParams.rename(search, warn=not stored)
        cls.FitParams.create(fit)
        cls.SearchParams.create(search)
        out[name] = {**fit, **search}
    return out


def fit_params_only(params: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The fit parameters of validated ``params`` (what an index stores)."""
    out = {}
    for name, values in params.items():
        cls = pipeline_class(name)
        fit = {k: v for k, v in values.items() if cls.FitParams.accepts(k)}
        if fit:
            out[name] = fit
    return out

"""Pipeline registry: name → class, imported on first use. The built-in pipelines are registered by
module path; :func:`register_pipeline` adds one defined elsewhere, which every part of hopgraph
(index build, save and load, search, a split index's router, the server's bounds and cost checks)
then treats as it treats the built-in ones.

Importing this package imports nothing else (the command line lists the pipeline names without
loading any pipeline); :class:`~hopgraph.engine.pipelines.base.Pipeline` is imported on first access.
"""
from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .base import Pipeline

_BUILT_IN: dict[str, str] = {
    "dense": "hopgraph.engine.pipelines.dense:Dense",
    "bm25": "hopgraph.engine.pipelines.bm25:BM25",
    "hybrid": "hopgraph.engine.pipelines.hybrid:Hybrid",
    "g3rag": "hopgraph.engine.pipelines.g3rag:G3RAG",
    "stitch": "hopgraph.engine.pipelines.stitch:STITCH",
    "ppr_binary": "hopgraph.engine.pipelines.stitch:PPRBinary",
    "dmar": "hopgraph.engine.pipelines.dmar:DMAR",
    "hop": "hopgraph.engine.pipelines.hop:Hop",
}
#: name → "module:Class" of a built-in pipeline, or the class registered by :func:`register_pipeline`
_REGISTRY: dict[str, str | type[Pipeline]] = dict(_BUILT_IN)


def _present(target: str | type[Pipeline]) -> bool:
    return not isinstance(target, str) or importlib.util.find_spec(target.partition(":")[0]) is not None


def pipeline_names() -> list[str]:
    """Names of the pipelines present in this installation (the built-in ones whose modules are
    installed, then the registered ones, in registration order)."""
    return [n for n, target in _REGISTRY.items() if _present(target)]


def pipeline_class(name: str) -> type[Pipeline]:
    """The class registered under ``name``; :class:`InputError` (a ValueError) lists the known names."""
    if not isinstance(name, str) or name not in _REGISTRY:
        from ..errors import InputError

        raise InputError(f"unknown pipeline {name!r}; known: {', '.join(_REGISTRY)}")
    target = _REGISTRY[name]
    if not isinstance(target, str):
        return target
    module, _, cls = target.partition(":")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name == module:
            raise NotImplementedError(f"pipeline {name!r} is not implemented in this version") from None
        raise
    return getattr(mod, cls)


def register_pipeline(cls: type[Pipeline]) -> type[Pipeline]:
    """Register the :class:`Pipeline` subclass ``cls`` under its ``name`` (usable as a class
    decorator; returns ``cls``). Registering the same class again does nothing. InputError when
    ``cls`` is not a Pipeline subclass with a ``name``, or its name is taken by another class."""
    from ..errors import InputError
    from .base import Pipeline

    if not (isinstance(cls, type) and issubclass(cls, Pipeline)) or not isinstance(getattr(cls, "name", None), str):
        raise InputError(f"register_pipeline: expected a Pipeline subclass with a name, got {cls!r}")
    taken = _REGISTRY.get(cls.name)
    if taken is not None and taken is not cls:
        raise InputError(f"register_pipeline: the name {cls.name!r} is taken by {taken!r}")
    _REGISTRY[cls.name] = cls
    return cls


def unregister_pipeline(name: str) -> None:
    """Remove the pipeline :func:`register_pipeline` registered under ``name``; InputError for a
    built-in or an unknown name."""
    from ..errors import InputError

    if name in _BUILT_IN or name not in _REGISTRY:
        raise InputError(f"unregister_pipeline: {name!r} is not a registered pipeline"
                         f"{' (it is built in)' if name in _BUILT_IN else ''}")
    del _REGISTRY[name]


def make_pipeline(name: str, **params) -> Pipeline:
    """A new, unfitted pipeline ``name`` made from ``params`` (fit and search parameters)."""
    return pipeline_class(name)(**params)


def __getattr__(name: str) -> Any:
    """``Pipeline`` (the contract, :mod:`~hopgraph.engine.pipelines.base`), imported on first access."""
    if name == "Pipeline":
        from .base import Pipeline

        return Pipeline
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Pipeline", "make_pipeline", "pipeline_class", "pipeline_names", "register_pipeline",
           "unregister_pipeline"]

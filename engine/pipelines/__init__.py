"""Pipeline registry: name → class, imported on first use.

Importing this package imports nothing else (the command line lists the pipeline names without
loading any pipeline); :class:`~hopgraph.engine.pipelines.base.Pipeline` is imported on first access.
"""
from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .base import Pipeline

_REGISTRY: dict[str, str] = {
    "dense": "hopgraph.engine.pipelines.dense:Dense",
    "bm25": "hopgraph.engine.pipelines.bm25:BM25",
    "hybrid": "hopgraph.engine.pipelines.hybrid:Hybrid",
    "g3rag": "hopgraph.engine.pipelines.g3rag:G3RAG",
    "stitch": "hopgraph.engine.pipelines.stitch:STITCH",
    "ppr_binary": "hopgraph.engine.pipelines.stitch:PPRBinary",
    "dmar": "hopgraph.engine.pipelines.dmar:DMAR",
}


def pipeline_names() -> list[str]:
    """Names of the pipelines whose modules are present in this installation."""
    return [n for n in _REGISTRY if importlib.util.find_spec(_REGISTRY[n].partition(":")[0]) is not None]


def pipeline_class(name: str) -> type[Pipeline]:
    """The class registered under ``name``; :class:`InputError` (a ValueError) lists the known names."""
    if not isinstance(name, str) or name not in _REGISTRY:
        from ..errors import InputError

        raise InputError(f"unknown pipeline {name!r}; known: {', '.join(_REGISTRY)}")
    module, _, cls = _REGISTRY[name].partition(":")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name == module:
            raise NotImplementedError(f"pipeline {name!r} is not implemented in this version") from None
        raise
    return getattr(mod, cls)


def make_pipeline(name: str, **params) -> Pipeline:
    """A new, unfitted pipeline ``name`` made from ``params`` (fit and search parameters)."""
    return pipeline_class(name)(**params)


def __getattr__(name: str) -> Any:
    """``Pipeline`` (the contract, :mod:`~hopgraph.engine.pipelines.base`), imported on first access."""
    if name == "Pipeline":
        from .base import Pipeline

        return Pipeline
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Pipeline", "pipeline_class", "pipeline_names", "make_pipeline"]

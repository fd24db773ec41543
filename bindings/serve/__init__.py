"""``hopgraph serve``: hopgraph as an HTTP retrieval backend.

Needs the ``[serve]`` extra (FastAPI, uvicorn). :func:`create_app` builds the app over
a loaded :class:`hopgraph.Index`; :func:`serve` runs it (the CLI); :class:`BackgroundServer`
runs it in a thread. Limits are in :class:`ServeLimits`, the serving bounds of search parameters
in :class:`ParamLimits`. The client is :class:`hopgraph.Client`.
"""
from __future__ import annotations

from .limits import ServeLimits

__all__ = ["ServeLimits", "ParamLimits", "create_app", "serve", "BackgroundServer"]


def __getattr__(name: str):
    """FastAPI/uvicorn are imported only when the service itself is used."""
    if name == "ParamLimits":
        from .budget import ParamLimits

        return ParamLimits
    if name == "create_app":
        from .app import create_app

        return create_app
    if name in ("serve", "BackgroundServer"):
        from . import runner

        return getattr(runner, name)
    raise AttributeError(f"module 'hopgraph.serve' has no attribute {name!r}")

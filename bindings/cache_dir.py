"""Where hopgraph caches what it builds (``hopgraph eval``'s indexes): :func:`default_cache_dir`.

Imports nothing of hopgraph, so the command line can show the directory in its help cheaply.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

#: environment variable naming hopgraph's cache directory (overridden by ``--cache-dir``)
CACHE_DIR_ENV = "HOPGRAPH_CACHE_DIR"


def platform_cache_dir() -> Path:
    """The per-user cache directory of hopgraph on this platform (``platformdirs.user_cache_dir``:
    ``$XDG_CACHE_HOME/hopgraph`` or ``~/.cache/hopgraph`` on Linux, ``~/Library/Caches/hopgraph``
    on macOS, ``%LOCALAPPDATA%\\hopgraph\\Cache`` on Windows)."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("hopgraph", appauthor=False))


def default_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where ``hopgraph eval`` caches built indexes: ``$HOPGRAPH_CACHE_DIR`` when set, else
    :func:`platform_cache_dir`."""
    environ = os.environ if environ is None else environ
    override = environ.get(CACHE_DIR_ENV, "")
    return Path(override).expanduser() if override else platform_cache_dir()

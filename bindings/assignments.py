"""The ``[PIPELINE.]NAME=VALUE`` syntax of the command line's ``--param`` and ``hopgraph serve``'s
``--param-limit`` items."""
from __future__ import annotations

import json
from typing import Any, Sequence

from .engine.errors import InputError


def parse_assignments(items: Sequence[str], default_pipeline: str | None = None) -> dict[str, dict[str, Any]]:
    """Parse command-line ``--param`` items ``[PIPELINE.]NAME=VALUE`` into ``{pipeline: {name: value}}``.

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

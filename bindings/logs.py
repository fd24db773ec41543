"""hopgraph's logging: every module logs to a child of the ``hopgraph`` logger (``hopgraph.evaluate``,
``hopgraph.engine.ingest.chunking``, ``hopgraph.serve``, ...), which, as a library's should, has
only a ``NullHandler`` until an application configures logging.

The command line calls :func:`configure` once: records of level ``--log-level`` and above go to
standard error as one line each, ``hopgraph COMMAND: LEVEL: message``, and every Python warning
raised while the command runs (hopgraph's own, torch's, transformers' ...) becomes such a
one-line record of the ``hopgraph.warnings`` logger instead of the interpreter's two-line
report.
"""
from __future__ import annotations

import logging
import sys
import warnings
from typing import IO, Any

#: the root of hopgraph's loggers
LOGGER = "hopgraph"
#: the ``--log-level`` names, lowest first
LEVELS = ("debug", "info", "warning", "error", "critical")

logging.getLogger(LOGGER).addHandler(logging.NullHandler())


class OneLineFormatter(logging.Formatter):
    """``PREFIX: level: message`` on one line (line breaks in the message become spaces; an
    exception's traceback, when the record carries one, follows on its own lines)."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line, ``PREFIX: LEVEL: message`` (white space collapsed), followed by its
        traceback when it carries one."""
        message = " ".join(record.getMessage().split())
        line = f"{self.prefix}: {record.levelname.lower()}: {message}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def parse_level(name: str | int) -> int:
    """The :mod:`logging` level of a ``--log-level`` name (or a level number); ValueError naming
    :data:`LEVELS` otherwise."""
    if isinstance(name, int) and not isinstance(name, bool):
        return name
    if not isinstance(name, str) or name.lower() not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}, got {name!r}")
    return getattr(logging, name.upper())


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: IO[str] | None = None, line: str | None = None) -> None:
    """``warnings.showwarning`` replacement: one record of ``hopgraph.warnings`` per warning; a
    warning of hopgraph's own shows its message, any other its category and origin too."""
    own = category.__module__.startswith(LOGGER + ".") or category.__module__ == LOGGER
    text = str(message) if own else f"{category.__name__}: {message} ({filename}:{lineno})"
    logging.getLogger(f"{LOGGER}.warnings").warning("%s", text)


_handler: logging.Handler | None = None


def configure(level: str | int = "warning", prefix: str = "hopgraph", stream: IO[str] | None = None) -> None:
    """Send hopgraph's records of ``level`` and above to ``stream`` (default: standard error) as one
    line each (:class:`OneLineFormatter` with ``prefix``), and Python warnings to the
    ``hopgraph.warnings`` logger. Calling it again replaces the previous configuration."""
    global _handler
    logger = logging.getLogger(LOGGER)
    if _handler is not None:
        logger.removeHandler(_handler)
    _handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    _handler.setFormatter(OneLineFormatter(prefix))
    logger.addHandler(_handler)
    logger.setLevel(parse_level(level))
    logger.propagate = False
    warnings.showwarning = _show_warning


def reset() -> None:
    """Undo :func:`configure` (the handler removed, warnings shown by Python again)."""
    global _handler
    logger = logging.getLogger(LOGGER)
    if _handler is not None:
        logger.removeHandler(_handler)
        _handler = None
    logger.setLevel(logging.NOTSET)
    logger.propagate = True
    warnings.showwarning = _ORIGINAL_SHOWWARNING


_ORIGINAL_SHOWWARNING: Any = warnings.showwarning

"""Exceptions raised by hopgraph for bad input and corrupt indexes.

:class:`HopgraphError` and :class:`InputError` live in :mod:`hopgraph.kernels.errors` (the
kernels raise them and import nothing above themselves); they are re-exported here, so
``hopgraph.engine.errors.InputError`` is the same class.
"""
from ..kernels.errors import DeviceUnavailable, HopgraphError, InputError

__all__ = ["DeviceUnavailable", "DuplicateIdError", "HopgraphError", "InputError", "IndexFormatError", "NotFittedError",
           "IndexLockedError", "ShardUnavailableError"]


class IndexFormatError(HopgraphError):
    """An index directory is missing, corrupt, or does not match what is asked of it."""


class IndexLockedError(HopgraphError):
    """Another process holds the write lock of an index path (the message names it and its pid)."""


class DuplicateIdError(InputError):
    """``Index.add`` got passage ids the index already holds (the message names them; ``upsert=True``
    replaces them)."""


class NotFittedError(HopgraphError, RuntimeError):
    """A pipeline was searched, saved or updated before ``fit`` (the message names it)."""


class ShardUnavailableError(HopgraphError):
    """A shard of a sharded index has no replica that answers (the message names the shard)."""

    def __init__(self, shard: int, reason: str) -> None:
        super().__init__(f"shard {shard} is unavailable: {reason}")
        self.shard = shard

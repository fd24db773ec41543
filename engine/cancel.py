"""Cooperative cancellation of a search: a :class:`CancelToken` made current for the calling thread
(:func:`cancellable`), checked at every :func:`checkpoint`.

A search reaches a checkpoint before each of its stages (:class:`~hopgraph.engine.timing.StageTimer`)
and before each of its query batches (:meth:`Pipeline.search
<hopgraph.engine.pipelines.base.Pipeline.search>`); at a checkpoint a cancelled or expired token raises
:class:`SearchCancelled`, so the work stops within one stage of the cancellation and the thread is free
again. Without a current token a checkpoint does nothing. Tokens are per thread: cancelling one search
never touches another thread's.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator


class SearchCancelled(Exception):
    """A search was stopped at a checkpoint: its token was cancelled or its deadline passed (the
    message says which)."""


class CancelToken:
    """A cancellation flag with an optional deadline (``time.monotonic()`` seconds; None: none).

    :meth:`cancel` may be called from any thread; the searching thread notices it at its next
    checkpoint."""

    def __init__(self, deadline: float | None = None, what: str = "search") -> None:
        self.deadline = deadline
        self.what = what
        self._cancelled = threading.Event()
        self._reason = ""

    @classmethod
    def after(cls, seconds: float, what: str = "search") -> "CancelToken":
        """A token whose deadline is ``seconds`` from now."""
        return cls(time.monotonic() + seconds, what)

    def cancel(self, reason: str = "cancelled") -> None:
        """Ask the search holding this token to stop at its next checkpoint."""
        self._reason = reason
        self._cancelled.set()

    @property
    def expired(self) -> bool:
        """Cancelled, or past the deadline."""
        return self._cancelled.is_set() or (self.deadline is not None and time.monotonic() >= self.deadline)

    def check(self) -> None:
        """Raise :class:`SearchCancelled` when :attr:`expired`."""
        if self._cancelled.is_set():
            raise SearchCancelled(f"{self.what} {self._reason}")
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise SearchCancelled(f"{self.what} ran past its deadline")


_local = threading.local()


@contextmanager
def cancellable(token: CancelToken | None) -> Iterator[CancelToken | None]:
    """Make ``token`` the calling thread's current token inside the block (None: no token); the
    previous one is restored on exit. Raises :class:`SearchCancelled` at once when it is expired."""
    previous = getattr(_local, "token", None)
    _local.token = token
    try:
        if token is not None:
            token.check()
        yield token
    finally:
        _local.token = previous


def checkpoint() -> None:
    """Raise :class:`SearchCancelled` when the calling thread's current token is expired; O(1)."""
    token = getattr(_local, "token", None)
    if token is not None:
        token.check()

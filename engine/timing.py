"""Stage timing for every pipeline's ``search``: ``pipe.timings`` holds the seconds spent in
each named stage of the last search (``bench/bench_dmar.py`` prints DMAR's)."""
from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

from .cancel import checkpoint


class StageTimer:
    """Adds up wall seconds per stage into ``totals``: ``with timer("recall"): ...``.

    Stages may nest; a stage's figure excludes the stages nested in it, so the figures add up
    to the time spent inside the outermost stages. Entering a stage is a cancellation
    :func:`~hopgraph.engine.cancel.checkpoint`.
    """

    def __init__(self, totals: dict[str, float] | None = None) -> None:
        self.totals = {} if totals is None else totals
        self._nested: list[float] = []

    @contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        checkpoint()
        t0 = time.perf_counter()
        self._nested.append(0.0)
        try:
            yield
        finally:
            elapsed = time.perf_counter() - t0
            inner = self._nested.pop()
            self.totals[stage] = self.totals.get(stage, 0.0) + elapsed - inner
            if self._nested:
                self._nested[-1] += elapsed

"""Timing and table printing shared by the bench/ scripts (run as ``python bench/NAME.py``,
so this folder is on ``sys.path``)."""
from __future__ import annotations

import resource
import time
from typing import Any, Callable


def best_of(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """The fastest of ``repeats`` calls of ``fn`` in seconds, and the last call's result."""
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def peak_rss_gb() -> float:
    """Peak resident memory of this process so far in GiB (``ru_maxrss`` is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2


def table(head: list[str], rows: list[list[Any]]) -> str:
    """A plain-text table: the first column left-aligned, the others right-aligned."""
    cells = [[str(c) for c in r] for r in [head] + rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(head))]

    def line(r: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))

    return "\n".join([line(cells[0]), line(["-" * w for w in widths])] + [line(r) for r in cells[1:]])

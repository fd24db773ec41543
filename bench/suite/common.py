"""Timing, tables and generated data shared by ``hopgraph bench`` (the benchmarks a user runs to
size a deployment) and the ``bench/`` scripts.

Every table is printed with the date and ``os.getloadavg()`` (the machine may be shared; take
ratios from rows of one table, measured within seconds of each other)."""
from __future__ import annotations

import math
import os
import resource
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np


def best_of(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """The fastest of ``repeats`` calls of ``fn`` in seconds, and the last call's result."""
    best, out = float("inf"), None
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def median_interleaved(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median seconds of each callable over ``repeats`` rounds, the callables interleaved."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(max(1, repeats)):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def peak_rss_gb() -> float:
    """Peak resident memory of this process so far in GiB (``ru_maxrss`` is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2


def loadavg() -> list[float]:
    """``os.getloadavg()`` rounded (1, 5, 15 minutes)."""
    return [round(x, 2) for x in os.getloadavg()]


def stamp() -> str:
    """``date (UTC) · load average`` line printed with every table."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()) + \
        " · load average (1, 5, 15 min): " + ", ".join(f"{x:.2f}" for x in loadavg())


def table(head: list[str], rows: list[list[Any]]) -> str:
    """A plain-text table: the first column left-aligned, the others right-aligned."""
    cells = [[str(c) for c in r] for r in [head] + rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(head))]

    def line(r: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))

    return "\n".join([line(cells[0]), line(["-" * w for w in widths])] + [line(r) for r in cells[1:]])


def fmt(v: Any) -> str:
    """A table cell: floats with 3 significant digits below 1, 2 decimals below 100, else none."""
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        return f"{v:.3g}" if abs(v) < 1 else f"{v:.2f}" if abs(v) < 100 else f"{v:.0f}"
    return str(v)


@dataclass
class Table:
    """One side-by-side table of ``hopgraph bench``: rows of named values (JSON-ready)."""

    name: str
    title: str
    columns: list[str]
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    date: str = ""
    loadavg: list[float] = field(default_factory=list)

    def add(self, **values: Any) -> None:
        self.rows.append(values)

    def finish(self) -> "Table":
        """Record the date and load average at the end of the measurement."""
        self.date = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.loadavg = loadavg()
        return self

    def render(self) -> str:
        body = table(self.columns, [[fmt(r.get(c, "")) for c in self.columns] for r in self.rows])
        lines = [f"== {self.title} ==", f"{self.date} · load average (1, 5, 15 min): "
                 + ", ".join(f"{x:.2f}" for x in self.loadavg), body] + self.notes
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        return {"title": self.title, "date": self.date, "loadavg": self.loadavg, "columns": self.columns,
                "rows": self.rows, "notes": self.notes}


def clustered(n: int, d: int, n_clusters: int, seed: int = 0) -> np.ndarray:
    """Normalised float32 points around random cluster centres (as embeddings cluster by topic)."""
    g = np.random.default_rng(seed)
    centres = g.standard_normal((n_clusters, d)).astype(np.float32)
    X = centres[g.integers(0, n_clusters, n)] + 1.0 * g.standard_normal((n, d)).astype(np.float32)
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def faiss_knn(X: np.ndarray, k: int) -> np.ndarray:
    """The anchor of gain_knn: faiss ``IndexFlatIP`` build + exact search of every row (k + 1
    neighbours, the self-match included)."""
    import faiss

    index = faiss.IndexFlatIP(X.shape[1])
    index.add(X)
    return index.search(X, k + 1)[1]

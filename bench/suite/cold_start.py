"""The cold-start tax of a build: ``G3RAG(n_neighbors=32).fit(X)`` in a fresh process
with an empty torch.compile cache vs faiss flat k-NN (k + 1) in a fresh process, side by side.

Every side runs in its own subprocess (``sys.executable``), with ``TORCHINDUCTOR_CACHE_DIR`` a
new empty folder, on the same generated X (:func:`suite.common.clustered`, made
before the clock starts). A subprocess reports its import seconds, its first call (what a
user's first build pays) and a second call in the same process (warm). Sides:

* ``faiss``: ``IndexFlatIP`` build + search of every row (k + 1), the anchor;
* ``g3rag`` with ``HOPGRAPH_COMPILE`` = ``auto`` (the default) and, with ``compiled=True``,
  ``1`` (torch.compile forced: the compile is paid in the first call).

Rounds interleave the sides; the table gives each side's median and its ratio to faiss.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from .common import Table

_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
side, n, k = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if side == "faiss":
    import faiss
else:
    from hopgraph import G3RAG
t_import = time.perf_counter() - t0  # what the side itself imports; the data generation follows
from suite.common import clustered, faiss_knn
fn = (lambda X: faiss_knn(X, k)) if side == "faiss" else (lambda X: G3RAG(n_neighbors=k).fit(X))
X = clustered(n, 384, max(2, n // 100))
t1 = time.perf_counter(); fn(X); t2 = time.perf_counter(); fn(X); t3 = time.perf_counter()
print(json.dumps({"import": t_import, "first": t2 - t1, "warm": t3 - t2}))
"""


def run_side(side: str, n: int, k: int, compile_setting: str = "auto") -> dict[str, float]:
    """One fresh subprocess: ``{"import", "first", "warm"}`` seconds of one side."""
    with tempfile.TemporaryDirectory(prefix="hopgraph-inductor-") as cache:
        bench_dir = str(Path(__file__).resolve().parents[1])  # the child imports suite.common
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache, HOPGRAPH_COMPILE=compile_setting,
                   PYTHONPATH=os.pathsep.join(filter(None, [bench_dir, os.environ.get("PYTHONPATH")])))
        out = subprocess.run([sys.executable, "-c", _CHILD, side, str(n), str(k)], env=env,
                             capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"cold-start subprocess ({side}) failed: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_cold_start(n: int, k: int = 32, rounds: int = 1, compiled: bool = False) -> Table:
    """The side-by-side table of fresh-process and warm fit seconds (see module docstring)."""
    sides: list[tuple[str, str, str]] = [("faiss IndexFlatIP k-NN (k + 1)", "faiss", "auto"),
                                         ("G3RAG(k).fit, HOPGRAPH_COMPILE=auto (default)", "g3rag", "auto")]
    if compiled:
        sides.append(("G3RAG(k).fit, HOPGRAPH_COMPILE=1 (torch.compile)", "g3rag", "1"))
    runs: dict[str, list[dict[str, float]]] = {label: [] for label, _, _ in sides}
    for _ in range(max(1, rounds)):
        for label, side, setting in sides:
            runs[label].append(run_side(side, n, k, setting))
    med: dict[str, dict[str, Any]] = {label: {key: statistics.median(r[key] for r in rs) for key in
                                              ("import", "first", "warm")} for label, rs in runs.items()}
    ref = med[sides[0][0]]
    t = Table("cold_start", f"first build in a fresh process (empty torch.compile cache) vs warm, N = {n:,}, "
              f"d = 384, k = {k}, CPU", ["side", "import s", "fresh s", "fresh x faiss", "warm s", "warm x faiss"])
    for label, _, _ in sides:
        m = med[label]
        t.add(side=label, **{"import s": m["import"], "fresh s": m["first"], "fresh x faiss": m["first"] / ref["first"],
              "warm s": m["warm"], "warm x faiss": m["warm"] / ref["warm"]})
    t.notes.append(f"median of {max(1, rounds)} interleaved round(s), each side in its own fresh process; "
                   "'fresh': the first call (what a user's first build pays), 'warm': the second")
    return t.finish()

"""G3RAG query throughput against faiss's exact dense search, with its dense and graph parts.

One run, side by side, on the same generated corpus (``bench_scale.generate``: N clustered
embeddings, d = 384, and its 256 questions ``Q.npy``), the questions given as embeddings
(no question embedding, no query texts, so no lexical term):

- ``faiss IndexFlatIP top-10``: the exact dense search, the anchor;
- ``dense top-100 (G3RAG's candidates)``: the shared dense index's top list that G3RAG's default
  (fused) search reads (``fusion_depth`` = 100) before its graph part;
- ``G3RAG``: ``G3RAG.search`` with default parameters, top ``--k``: nothing of size N is made
  (``docs/decisions/query-cost-independent-of-n.md``).

X is held in memory, so the shared dense index is exact below its ANN threshold and IVF with exact
rescoring above it. The table gives the seconds G3RAG spent in the dense top-k (the shared dense
index's ``topk``, timed inside the same call) and the rest, the graph part (with, in parentheses,
its best over all rounds), then the stages of the fastest call and NumPy's peak allocation per
search. Each time is the best of ``--repeats`` rounds; the rounds interleave the methods so that a
load change hits all of them. The graph (mode "auto": IVF candidates at this size) is fitted once
and cached under ``--workdir``. The 1-minute load average is printed before and after.

Usage::

    .venv/bin/python bench/bench_g3rag_query.py [--n 200000] [--repeats 3]
"""
from __future__ import annotations

import argparse
import os
import time
import tracemalloc
from pathlib import Path
from typing import Callable

import faiss
import numpy as np

from _common import best_of, peak_rss_gb, table
from bench_scale import generate

from hopgraph import G3RAG, RunSettings
from hopgraph.engine.components.shared import Components

CPU = RunSettings(device="cpu")


def fitted_graph(data: Path, X: np.ndarray) -> tuple[Path, float | None]:
    """The default G3RAG graph over X saved under ``data/g3rag-graph`` (fitted now if absent);
    returns the folder and the fit seconds (None when it was cached)."""
    folder = data / "g3rag-graph"
    if (folder / "indptr.npy").is_file():
        return folder, None
    t0 = time.perf_counter()
    pipe = G3RAG(settings=CPU).fit(X)
    fit_s = time.perf_counter() - t0
    tmp = data / "g3rag-graph.tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    pipe.save(tmp)
    tmp.rename(folder)
    return folder, fit_s


def numpy_peak_mb(fn: Callable[[], object]) -> float:
    """Peak of the memory traced by ``tracemalloc`` (NumPy's arrays included) during ``fn()``, MB."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--queries", type=int, default=256)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workdir", default="/tmp/hopgraph-bench-g3rag-query")
    args = ap.parse_args()
    load_start = os.getloadavg()

    data = Path(args.workdir) / f"n{args.n}"
    t0 = time.perf_counter()
    generate(args.n, data)
    X = np.load(data / "X.npy")  # in memory
    Q = np.load(data / "Q.npy")[: args.queries]
    graph_dir, fit_s = fitted_graph(data, X)
    components = Components(X)
    pipe = G3RAG.load(graph_dir, {}, components, settings=CPU)
    flat = faiss.IndexFlatIP(X.shape[1])
    flat.add(X)
    depth = pipe.search_defaults.fusion_depth  # the dense top list the fused search reads
    print(f"N = {args.n:,}, d = {X.shape[1]}, {len(Q)} questions (given as embeddings), k = {args.k}, "
          f"graph {pipe.graph_.nnz:,} edges ({'fitted in %.0f s' % fit_s if fit_s else 'cached'}), "
          f"setup {time.perf_counter() - t0:.0f} s; faiss threads {faiss.omp_get_max_threads()}")

    # time the dense top-k inside every call (G3RAG's search included): the shared dense index
    dense_s = [0.0]
    dense_topk = components.dense.topk

    def timed_topk(*a, **kw):
        t = time.perf_counter()
        try:
            return dense_topk(*a, **kw)
        finally:
            dense_s[0] += time.perf_counter() - t

    components.dense.topk = timed_topk
    name_g3rag = "G3RAG"
    methods: dict[str, Callable[[], object]] = {
        "faiss IndexFlatIP top-10": lambda: flat.search(Q, 10),
        f"dense top-{depth} (G3RAG's candidates)": lambda: components.dense.topk(Q, depth),
        name_g3rag: lambda: pipe.search(Q, args.k),
    }
    for fn in methods.values():  # warm-up (faiss index of the components)
        fn()
    best: dict[str, tuple[float, float]] = {name: (float("inf"), 0.0) for name in methods}  # (total, dense)
    graph_min = float("inf")
    stages: dict[str, float] = {}
    for _ in range(args.repeats):
        for name, fn in methods.items():
            dense_s[0] = 0.0
            t, _ = best_of(fn, 1)
            if name == name_g3rag:
                graph_min = min(graph_min, t - dense_s[0])
            if t < best[name][0]:
                best[name] = (t, dense_s[0])
                if name == name_g3rag:
                    stages = dict(pipe.timings)
    load_end = os.getloadavg()

    t_faiss = best["faiss IndexFlatIP top-10"][0]
    rows = []
    for name, (t, t_dense) in best.items():
        g3 = name == name_g3rag
        rows.append([name, f"{t:.3f}", f"{len(Q) / t:,.0f}", f"{t_faiss / t:.2f}x",
                     f"{t_dense:.3f} ({100 * t_dense / t:.0f} %)" if g3 else "",
                     f"{t - t_dense:.3f} ({graph_min:.3f})" if g3 else ""])
    print(table(["method", "seconds", "queries/s", "throughput / faiss", "of which dense top-k s",
                 "graph part s (best)"], rows))
    print(f"{name_g3rag} stages of the fastest call (s): " + ", ".join(f"{k} {v:.3f}" for k, v in stages.items()))
    print(f"NumPy peak allocation per G3RAG search: {numpy_peak_mb(methods[name_g3rag]):.1f} MB; "
          f"process peak RSS {peak_rss_gb():.2f} GB")
    print(f"1-min load average: {load_start[0]:.2f} at the start, {load_end[0]:.2f} after the timings "
          f"(ratios are from this one run)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""G3RAG query throughput before and after the sparse query path, against faiss.

One run, side by side, on the same generated corpus (``bench_scale.generate``: N clustered
embeddings, d = 384, and its 256 questions ``Q.npy``), the questions given as embeddings
(no question embedding, no query texts, so no lexical term):

- ``faiss IndexFlatIP top-10``: the exact dense search of the issue's target (≥ 2× its
  throughput);
- ``dense top-100 (G3RAG's candidates)``: the shared dense index's exact top-100, which G3RAG's
  default (fused) search asks for (``hybrid_depth`` = 100) before its graph part;
- ``G3RAG before``: ``G3RAG.search`` of git revision ``--before`` (default d495543, before
  the sparse query paths: dense ``[chunk, N]`` diffusion and score arrays, 2²⁴ entries per chunk), loaded from
  ``git show REV:engine/pipelines/g3rag.py`` into a temporary module of the installed package
  and run over the same fitted graph and the same shared components as
- ``G3RAG after``: this checkout's search (no array of size N).

All G3RAG rows use default parameters and top_k = 10. X is held in memory, so the shared dense
index is a faiss ``IndexFlatIP`` (exact; the ANN above a size threshold is separate work) — the
dense top-k is a flat scan: the table gives the seconds G3RAG spent in it (the shared dense
index's ``topk``, timed inside the same call) and the rest, the graph part (with, in
parentheses, the graph part's best over all rounds). Each time is the
best of ``--repeats`` rounds; the rounds interleave the methods so that a load change hits all
of them. The graph (mode "auto": IVF candidates at this size) is fitted once and cached under
``--workdir``. The 1-minute load average is printed before and after (the machine is shared).

Usage::

    .venv/bin/python bench/bench_g3rag_query.py [--n 200000] [--repeats 3] [--before d495543]
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from types import ModuleType
from typing import Callable

import faiss
import numpy as np

from _common import best_of, peak_rss_gb, table
from bench_scale import generate

from hopgraph import G3RAG
from hopgraph.engine.components.shared import Components

ROOT = Path(__file__).resolve().parents[1]


def g3rag_module_at(rev: str) -> ModuleType:
    """``engine/pipelines/g3rag.py`` as of git revision ``rev``, imported as a module of the
    installed package (``hopgraph.engine.pipelines._g3rag_REV``) so its relative imports resolve
    to this checkout's engine (the other modules are unchanged by the sparse query work)."""
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:engine/pipelines/g3rag.py"],
                            check=True, capture_output=True, text=True).stdout
    name = f"hopgraph.engine.pipelines._g3rag_{rev[:12]}"
    folder = Path(tempfile.mkdtemp(prefix="g3rag-before-"))
    path = folder / "g3rag_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def fitted_graph(data: Path, X: np.ndarray) -> tuple[Path, float | None]:
    """The default G3RAG graph over X saved under ``data/g3rag-graph`` (fitted now if absent);
    returns the folder and the fit seconds (None when it was cached)."""
    folder = data / "g3rag-graph"
    if (folder / "indptr.npy").is_file():
        return folder, None
    t0 = time.perf_counter()
    pipe = G3RAG(device="cpu").fit(X)
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
    ap.add_argument("--before", default="d495543", help="git revision of the 'before' G3RAG search")
    ap.add_argument("--workdir", default="/tmp/hopgraph-bench-g3rag-query")
    args = ap.parse_args()
    load_start = os.getloadavg()

    data = Path(args.workdir) / f"n{args.n}"
    t0 = time.perf_counter()
    generate(args.n, data)
    X = np.load(data / "X.npy")  # in memory: the dense index is a faiss IndexFlatIP
    Q = np.load(data / "Q.npy")[: args.queries]
    graph_dir, fit_s = fitted_graph(data, X)
    components = Components(X)
    after = G3RAG.load(graph_dir, {"device": "cpu"}, components)
    before = g3rag_module_at(args.before).G3RAG.load(graph_dir, {"device": "cpu"}, components)
    flat = faiss.IndexFlatIP(X.shape[1])
    flat.add(X)
    depth = after.hybrid_depth  # the dense top list the fused search reads
    print(f"N = {args.n:,}, d = {X.shape[1]}, {len(Q)} questions (given as embeddings), top_k = {args.k}, "
          f"graph {after.graph_.nnz:,} edges ({'fitted in %.0f s' % fit_s if fit_s else 'cached'}), "
          f"setup {time.perf_counter() - t0:.0f} s; faiss threads {faiss.omp_get_max_threads()}")

    # time the dense top-k inside every call (G3RAG's searches included): the shared dense index
    dense_s = [0.0]
    dense_topk = components.dense.topk

    def timed_topk(*a, **kw):
        t = time.perf_counter()
        try:
            return dense_topk(*a, **kw)
        finally:
            dense_s[0] += time.perf_counter() - t

    components.dense.topk = timed_topk
    name_before, name_after = f"G3RAG before ({args.before})", "G3RAG after"
    methods: dict[str, Callable[[], object]] = {
        "faiss IndexFlatIP top-10": lambda: flat.search(Q, 10),
        f"dense top-{depth} (G3RAG's candidates)": lambda: components.dense.topk(Q, depth),
        name_before: lambda: before.search(Q, args.k),
        name_after: lambda: after.search(Q, args.k),
    }
    results = {name: fn() for name, fn in methods.items()}  # warm-up (faiss index of the components)
    best: dict[str, tuple[float, float]] = {name: (float("inf"), 0.0) for name in methods}  # (total, dense)
    graph_min = {name_before: float("inf"), name_after: float("inf")}
    stages: dict[str, dict[str, float]] = {}
    for _ in range(args.repeats):
        for name, fn in methods.items():
            dense_s[0] = 0.0
            t, _ = best_of(fn, 1)
            if name in graph_min:
                graph_min[name] = min(graph_min[name], t - dense_s[0])
            if t < best[name][0]:
                best[name] = (t, dense_s[0])
                if name in graph_min:
                    stages[name] = dict((before if name == name_before else after).timings)
    load_end = os.getloadavg()

    t_faiss = best["faiss IndexFlatIP top-10"][0]
    rows = []
    for name, (t, t_dense) in best.items():
        g3 = name in graph_min
        rows.append([name, f"{t:.3f}", f"{len(Q) / t:,.0f}", f"{t_faiss / t:.2f}x",
                     f"{t_dense:.3f} ({100 * t_dense / t:.0f} %)" if g3 else "",
                     f"{t - t_dense:.3f} ({graph_min[name]:.3f})" if g3 else ""])
    print(table(["method", "seconds", "queries/s", "throughput / faiss", "of which dense top-k s",
                 "graph part s (best)"], rows))
    t_before, t_after = best[name_before][0], best[name_after][0]
    print(f"after / before throughput: {t_before / t_after:.2f}x; graph part (search minus its dense top-k, "
          f"best of {args.repeats}): {graph_min[name_before]:.3f} s -> {graph_min[name_after]:.3f} s "
          f"({graph_min[name_before] / max(graph_min[name_after], 1e-9):.0f}x less)")
    for name, st in stages.items():
        print(f"{name} stages of the fastest call (s): " + ", ".join(f"{k} {v:.3f}" for k, v in st.items()))
    ids_b, sc_b = results[name_before]
    ids_a, sc_a = results[name_after]
    print(f"results: ids identical {np.mean(ids_a == ids_b) * 100:.2f} % of {ids_a.size}, "
          f"max |score difference| {np.max(np.abs(sc_a - sc_b)):.2e}")
    print(f"NumPy peak allocation per search: before {numpy_peak_mb(methods[name_before]):.0f} MB, "
          f"after {numpy_peak_mb(methods[name_after]):.1f} MB; process peak RSS {peak_rss_gb():.2f} GB")
    print(f"1-min load average: {load_start[0]:.2f} at the start, {load_end[0]:.2f} after the timings "
          f"(2 shared cores; ratios are from this one run)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

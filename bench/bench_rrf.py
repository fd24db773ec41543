"""Reciprocal rank fusion: hopgraph's ``rrf_topk`` (what ``hybrid`` and the graph pipelines' hybrid seeds
run per query batch) side by side with ``ranx.fuse(method="rrf")``.

    .venv/bin/python bench/bench_rrf.py [--queries 100] [--depth 100] [--n 100000]
    PYTHONPATH=/path/to/ranx-target .venv/bin/python bench/bench_rrf.py   # ranx is not a dependency

Two ranked lists per query (random ids of an N-passage corpus, ``depth`` deep), fused, top-``depth``
kept. ``rrf_topk`` takes the id matrices as the pipelines hold them; ranx takes ``Run`` objects, so its
side is timed twice: with the conversion from the matrices (what a pipeline would pay) and fusion
alone. Both give the same scores (checked). Median of ``--repeat`` runs after one warm-up (ranx
compiles with numba on first use); the load average is printed with the table.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from hopgraph.engine.ranking import rrf_topk


def median_seconds(fn, repeat: int) -> float:
    fn()
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--depth", type=int, default=100)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    g = np.random.default_rng(0)
    lists = [np.stack([g.choice(args.n, args.depth, replace=False) for _ in range(args.queries)]) for _ in range(2)]
    rows = {"hopgraph rrf_topk (id matrices)": median_seconds(lambda: rrf_topk(lists, args.depth, k=60), args.repeat)}
    try:
        from ranx import Run, fuse
    except ImportError:
        Run = fuse = None
        print("ranx is not installed here: only hopgraph's side is timed")
    if Run is not None:
        def runs():
            return [Run({str(q): {str(int(d)): float(args.depth - r) for r, d in enumerate(m[q])}
                         for q in range(args.queries)}) for m in lists]

        ready = runs()
        rows["ranx fuse rrf, from the id matrices"] = median_seconds(lambda: fuse(runs(), method="rrf"), args.repeat)
        rows["ranx fuse rrf, Runs given"] = median_seconds(lambda: fuse(ready, method="rrf"), args.repeat)
        fused = fuse(ready, method="rrf").to_dict()
        ids, scores = rrf_topk(lists, args.depth, k=60)
        for q in range(min(args.queries, 10)):
            want = sorted(fused[str(q)].items(), key=lambda kv: (-kv[1], int(kv[0])))[:args.depth]
            np.testing.assert_allclose(scores[q], [v for _, v in want], rtol=1e-5)
    base = rows["hopgraph rrf_topk (id matrices)"]
    print(f"\nRRF of 2 lists x {args.depth} deep, {args.queries} queries, N = {args.n:,}; median of {args.repeat}")
    width = max(map(len, rows))
    print(f"{'side'.ljust(width)}  ms        x rrf_topk")
    for label, s in rows.items():
        print(f"{label.ljust(width)}  {s * 1000:8.2f}  {s / base:8.1f}")
    print(f"load average: {', '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()

"""Benchmark: batched sparse PPR (SPEC §2 step 6; hopgraph.kernels ``batched_ppr``, CPU path)
against the bare torch CSR power iteration and igraph, per graph family, side by side.

Graph families (100,000 chunks, ~1,000,000 directed edges by default; no chunk is
dangling in either, so that all three methods define the same walk):

* ``ring+random``: a directed ring plus uniform random directed edges;
* ``symmetric random``: uniform random undirected edges, each stored in both
  directions, over a random perfect pairing that gives every chunk degree >= 1.

Per family one table, every row timed in the same process within seconds of the others:

* **igraph** ``personalized_pagerank`` (PRPACK, how HippoRAG and LinearRAG run it),
  once per prior (``--igraph-priors`` of them; PRPACK solves to ~1e-10, it has no
  tolerance argument);
* **bare torch CSR loop**: ``x = c + d·(P @ x)`` with ``P`` a torch sparse CSR tensor
  and ``x`` the float32 [N, B] block, run for exactly the iteration count hopgraph needed
  (its maximum over the priors) — the loop alone, warm (P converted and the loop run once
  before timing), no convergence test, no dangling handling, no localisation;
* **hopgraph** ``batched_ppr``: the whole op (input validation, preparation of the
  iteration matrix, per-column convergence test and compaction), float32 priors.

Both torch-based methods run with 1 thread (the op's default, ``threads=1``) and with
torch's default thread count. Ratios: queries/s over igraph's,
and seconds over the bare loop's at the same thread count (< 1: faster than the bare
loop). Fast rows are the median of ``--repeats`` interleaved runs. The L1 difference to
igraph (max over the priors run through igraph) is printed with every table, and so is
``os.getloadavg()`` (the machine is shared; a load above the core count inflates
everything, unequally).

Then STITCH end-to-end query throughput on ../shared/data/musique (cached index of
``hopgraph eval``; question embedding excluded).

Run: ``.venv/bin/python bench/bench_ppr.py`` (``--families ring`` for one family,
``--igraph-priors 16`` for a quicker igraph row).
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Callable

import numpy as np
import scipy.sparse as sp
import torch

from suite.common import median_interleaved
from suite.kernels import bare_loop, random_priors, symmetric_graph
from suite.kernels import ring_graph as generated_graph
from hopgraph.engine.pipelines.stitch.hypergraph import column_stochastic
from hopgraph.kernels import call

from _common import table

FAMILIES = ("ring", "symmetric")
LABELS = {"ring": "ring+random", "symmetric": "symmetric random"}
#: the largest L1 difference to igraph's PageRank accepted
L1_TARGET = 1e-5
#: hopgraph's throughput target over igraph per family
IGRAPH_TARGET = 20.0
#: hopgraph's target against the bare loop: at most this many times its seconds
BARE_TARGET = 1.25


def with_threads(threads: int, fn: Callable[[], object]) -> Callable[[], object]:
    def run() -> object:
        old = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            return fn()
        finally:
            torch.set_num_threads(old)
    return run


def loadavg() -> str:
    return "load average (1, 5, 15 min): " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def bench_family(family: str, n: int, m: int, B: int, d: float, tol: float, igraph_priors: int,
                 repeats: int) -> dict[str, float]:
    import igraph as ig

    src, dst = (generated_graph if family == "ring" else symmetric_graph)(n, m, 0)
    priors = random_priors(B, n, 10, 1)
    P = column_stochastic(sp.csr_matrix((np.ones(len(src)), (dst, src)), shape=(n, n)))
    assert np.diff(sp.csc_matrix(P).indptr).min() > 0, "a dangling chunk: igraph would define another walk"
    g = ig.Graph(n=n, edges=np.c_[src, dst], directed=True)
    pri32 = priors.astype(np.float32)
    T = torch.get_num_threads()
    thread_counts = sorted({1, T})

    def hop(threads: int) -> Callable[[], tuple[torch.Tensor, torch.Tensor]]:
        return lambda: call("batched_ppr", P, pri32, d=d, tol=tol, max_iter=1000, threads=threads, device="cpu")

    print(f"\n== {LABELS[family]}: {n:,} chunks, {P.nnz:,} edges (distinct), {B} priors, d={d}, tol={tol}, "
          f"float32 ==")
    print(loadavg())
    pi, iters = hop(1)()  # warm-up (imports, first-call set-up), and the result checked below
    iterations = int(iters.max())
    bare = bare_loop(P, priors, d)
    bare(2)  # warm
    fns: dict[str, Callable[[], object]] = {}
    for t in thread_counts:
        fns[f"hop{t}"] = hop(t)
        fns[f"bare{t}"] = with_threads(t, lambda: bare(iterations))
    sec = median_interleaved(fns, repeats)

    nb = min(igraph_priors, B)
    ref = np.zeros((nb, n))
    t0, c0 = time.perf_counter(), time.process_time()
    for b in range(nb):
        ref[b] = g.personalized_pagerank(directed=True, damping=d, reset=priors[b], implementation="prpack")
    t_ig, cpu_ig = time.perf_counter() - t0, time.process_time() - c0
    qps_ig = nb / t_ig
    l1 = np.abs(pi.numpy()[:nb].astype(np.float64) - ref).sum(1).max()
    l1_bare = np.abs(bare(iterations).numpy().T[:nb].astype(np.float64) - ref).sum(1).max()

    rows = [["igraph personalized_pagerank, once per prior", "1", f"{t_ig:.3f}", f"{qps_ig:.2f}", "1.0", ""]]
    for t in thread_counts:
        rows.append([f"bare torch CSR loop ({iterations} iterations, loop alone, warm)", str(t), f"{sec[f'bare{t}']:.3f}",
                     f"{B / sec[f'bare{t}']:.2f}", f"{B / sec[f'bare{t}'] / qps_ig:.1f}", "1.00"])
        rows.append(["hopgraph batched_ppr (CPU, one batch, whole op)", str(t), f"{sec[f'hop{t}']:.3f}",
                     f"{B / sec[f'hop{t}']:.2f}", f"{B / sec[f'hop{t}'] / qps_ig:.1f}",
                     f"{sec[f'hop{t}'] / sec[f'bare{t}']:.2f}"])
    print(table(["method", "threads", "seconds", "queries/s", "x igraph", "time / bare loop"], rows))
    print(f"igraph: {nb} priors in {t_ig:.2f} s ({1e3 * t_ig / nb:.0f} ms per prior; CPU time {1e3 * cpu_ig / nb:.0f} ms: "
          f"igraph's time per prior moves several-fold with the machine's load); torch rows: median of "
          f"{repeats} interleaved runs; 'time / bare loop' = seconds over the bare loop's at the same threads "
          f"(< 1: faster than the bare loop)")
    print(f"iterations per prior: min {int(iters.min())}, max {iterations}; max L1 difference to igraph over {nb} "
          f"priors: hopgraph {l1:.2e} ({'OK' if l1 <= L1_TARGET else 'FAIL'}, <= {L1_TARGET:.0e}), "
          f"bare loop {l1_bare:.2e}")
    best = min(thread_counts, key=lambda t: sec[f"hop{t}"])
    x_ig, x_bare = B / sec[f"hop{best}"] / qps_ig, sec[f"hop{best}"] / sec[f"bare{best}"]
    print(f"targets ({LABELS[family]}, hopgraph at {best} thread(s)): >= {IGRAPH_TARGET:.0f}x igraph: "
          f"{x_ig:.1f}x {'met' if x_ig >= IGRAPH_TARGET else 'NOT met'}; <= {BARE_TARGET}x the bare loop's time: "
          f"{x_bare:.2f}x {'met' if x_bare <= BARE_TARGET else 'NOT met'}")
    print(loadavg())
    return {"x_igraph": x_ig, "x_bare": x_bare, "l1": float(l1)}


def bench_stitch(data: Path, cache: Path) -> None:
    from hopgraph.engine.evaluation import load_questions
    from hopgraph.evaluate import cached_index

    if not (data / "corpus.jsonl").is_file():
        print(f"STITCH throughput: {data} not found, skipped")
        return
    index, _ = cached_index(data, "minilm", cache, "cpu", ["stitch"], progress=False)
    texts = [q.text for q in load_questions(data / "questions.jsonl", index.corpus)]
    Q = index.embed_queries(texts)
    pipe = index.pipeline("stitch")
    pipe.search(Q[:2], 5, texts[:2])  # warm caches (tensor views of the index)
    print(loadavg())
    t0 = time.perf_counter()
    pipe.search(Q, 5, texts)
    seconds = time.perf_counter() - t0
    print(f"STITCH on {data.name}: {len(index.corpus)} passages, {len(texts)} questions in {seconds:.2f} s "
          f"-> {len(texts) / seconds:.1f} queries/s (CPU, question embedding excluded)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--edges", type=int, default=1_000_000)
    ap.add_argument("--priors", type=int, default=64)
    ap.add_argument("--igraph-priors", type=int, default=64, help="priors run through igraph (all by default)")
    ap.add_argument("--d", type=float, default=0.85)
    ap.add_argument("--tol", type=float, default=1e-7)
    ap.add_argument("--repeats", type=int, default=3, help="interleaved runs of the torch-based rows (median)")
    ap.add_argument("--families", default=",".join(FAMILIES), help=f"comma-separated, of {', '.join(FAMILIES)}")
    root = Path(__file__).resolve().parents[1]
    ap.add_argument("--data", type=Path, default=root.parent / "shared" / "data" / "musique")
    ap.add_argument("--cache", type=Path, default=root / ".hopgraph-cache")
    args = ap.parse_args()
    families = [f.strip() for f in args.families.split(",") if f.strip()]
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown:
        ap.error(f"unknown families {unknown}; choose from {', '.join(FAMILIES)}")
    for family in families:
        bench_family(family, args.n, args.edges, args.priors, args.d, args.tol, args.igraph_priors, args.repeats)
    bench_stitch(args.data, args.cache)


if __name__ == "__main__":
    main()

"""DMAR query throughput with its stage breakdown, and the batched Shapley op.

1. Queries/second of DMAR on a benchmark folder (default ``../shared/data/hotpotqa``),
   all its questions searched in batches of ``--batch`` (question embedding excluded, as in
   ``hopgraph eval``), with the per-stage seconds and shares (BM25/hybrid recall, linking,
   subgraph node sets, GNN structsim cosines, Shapley, fusion, second stage, rerank), next to
   the dense, BM25 and hybrid baselines on the same queries (ratio = baseline q/s ÷ DMAR q/s).
   The index comes from the ``hopgraph eval`` cache (built if missing).
2. The Shapley op alone: 64 queries × 100 candidates, T = 50, |G_Q| = 8 subgraphs over
   128 local nodes (random memberships), CPU path, best of ``--repeats``; target < 1 s.
   Also timed on the real stage-1 inputs of the first 64 questions.

Timings are noisy when other processes share the CPU (run once, near idle).

Usage::

    .venv/bin/python bench/bench_dmar.py [--data ../shared/data/hotpotqa] [--batch 64] [--repeats 3]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch

from hopgraph.evaluate import cached_index
from hopgraph.engine.evaluation import load_questions
from hopgraph.engine.pipelines.dmar.pipeline import STAGES
from hopgraph.engine.pipelines.dmar.structural import structural_scores
from hopgraph.engine.timing import StageTimer
from hopgraph.kernels import call

from _common import best_of, stamp, table

ROOT = Path(__file__).resolve().parents[1]


def synthetic_shapley(B: int = 64, C: int = 100, G: int = 8, U: int = 128, seed: int = 0):
    g = np.random.default_rng(seed)
    sets = (g.random((B, G, U)) < 16 / U).astype(np.float32)
    sets[:, np.arange(G), np.arange(G)] = 1
    cand = (g.random((B, C, U)) < 0.2).astype(np.float32)
    best = g.random((B, C, G)).astype(np.float32)
    return [torch.from_numpy(a) for a in (sets, np.full(B, G), cand, best)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "hotpotqa"))
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cache-dir", default=str(ROOT / ".hopgraph-cache"))
    args = ap.parse_args()

    data = Path(args.data)
    index, _ = cached_index(data, "minilm", Path(args.cache_dir), "cpu", ["dense", "bm25", "hybrid", "dmar"],
                            progress=False)
    questions = load_questions(data / "questions.jsonl", index.corpus)
    texts = [q.text for q in questions]
    Q = index.embed_queries(texts)
    dmar = index.pipeline("dmar")

    def run(name: str) -> dict[str, float]:
        pipe = index.pipeline(name)
        stages = {k: 0.0 for k in STAGES}
        t0 = time.perf_counter()
        for s in range(0, len(texts), args.batch):
            pipe.search(Q[s:s + args.batch], 5, texts[s:s + args.batch])
            if name == "dmar":
                for k, v in pipe.timings.items():
                    stages[k] += v
        stages["total"] = time.perf_counter() - t0
        return stages

    run("dmar")  # warm-up (imports, caches)
    results = {name: min((run(name) for _ in range(args.repeats)), key=lambda r: r["total"])
               for name in ("dmar", "dense", "bm25", "hybrid")}
    dm = results["dmar"]
    n = len(texts)
    print(f"DMAR on {data.name}: {len(index.corpus)} passages, {n} questions, batches of {args.batch}, "
          f"best of {args.repeats}, torch threads {torch.get_num_threads()}")
    print(stamp())
    rows = [[stage, f"{dm[stage]:.3f}", f"{1000 * dm[stage] / n:.2f}", f"{100 * dm[stage] / dm['total']:.0f}%"]
            for stage in STAGES]
    other = dm["total"] - sum(dm[s] for s in STAGES)
    rows.append(["(other)", f"{other:.3f}", f"{1000 * other / n:.2f}", f"{100 * other / dm['total']:.0f}%"])
    rows.append(["total", f"{dm['total']:.3f}", f"{1000 * dm['total'] / n:.2f}", "100%"])
    print(table(["stage", "seconds", "ms/query", "share"], rows))
    print()
    qps = {name: n / r["total"] for name, r in results.items()}
    print(table(["pipeline", "queries/s", "× DMAR q/s"],
                [[name, f"{v:.1f}", f"{v / qps['dmar']:.1f}×"] for name, v in qps.items()]))

    print("\nShapley op (CPU path), T = 50:")
    sets, n_sub, cand, best = synthetic_shapley()
    syn, _ = best_of(lambda: call("shapley_mc", sets, n_sub, cand, best, T=50, device="cpu"), args.repeats)
    # real stage-1 inputs of the first 64 questions: time the whole structural path and the kernel
    sp = dmar.search_defaults
    cand_real = dmar._recall(dmar.components.batch(Q[:64], texts[:64]), sp)
    linked = dmar._link(texts[:64], sp)
    timing: dict[str, float] = {}
    real_total, _ = best_of(lambda: structural_scores(dmar.knowledge_graph_, dmar.subgraph_emb_, cand_real, linked,
                                                      sp.shapley_lambda, sp.shapley_samples, sp.random_state,
                                                      sp.shapley_mode, "cpu", StageTimer(timing)), 1)
    G_real = max(len(x) for x in linked)
    print(table(["input", "queries × candidates", "|G_Q| max", "seconds", "vs 1 s target"],
                [["synthetic", "64 × 100", "8", f"{syn:.3f}", f"{syn:.2f}×"],
                 [f"{data.name} (kernel only)", f"64 × {cand_real.shape[1]}", str(G_real), f"{timing['shapley']:.3f}",
                  f"{timing['shapley']:.2f}×"],
                 [f"{data.name} (structural path)", f"64 × {cand_real.shape[1]}", str(G_real), f"{real_total:.3f}",
                  f"{real_total:.2f}×"]]))


if __name__ == "__main__":
    main()

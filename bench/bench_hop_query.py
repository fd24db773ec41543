"""``hop`` against DMAR at scale: queries/s of the two pipelines on one index of generated passages,
searched in interleaved rounds, with the seconds of each stage (the coverage step's among them).

    .venv/bin/python bench/bench_hop_query.py [--size 100000] [--rounds 4] [--workdir /tmp/hopgraph-bench-hop]

The passages, their embeddings and the 256 questions are :mod:`bench_scale`'s generator (d = 384,
passages naming entities, hashing text embedder); the index (DMAR and hop) is built once in the
work directory and loaded memory-mapped. Each round searches the 256 questions (given as
embeddings with their texts, top 5) with DMAR, then with hop; the table gives every round (the
machine may be shared: compare the two pipelines within a round) and the load average.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from _common import stamp, table

import bench_scale

PIPELINES = ("dmar", "hop")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--workdir", default="/tmp/hopgraph-bench-hop")
    args = ap.parse_args()
    from hopgraph.index import Index

    data = Path(args.workdir) / str(args.size)
    embedder = f"hashing-{bench_scale.D}"
    if not (data / "X.npy").exists():
        bench_scale.generate(args.size, data)
    if not (data / "index").exists():
        Index.build(data / "corpus.jsonl", embeddings=data / "X.npy", embedder=embedder, pipelines=list(PIPELINES),
                    work_dir=data / "index.work", progress=False).save(data / "index", overwrite=True)
    Q = np.load(data / "Q.npy")
    questions = json.loads((data / "questions.json").read_text())
    index = Index.load(data / "index", embedder=embedder, progress=False)
    for name in PIPELINES:  # the first search builds the query-side caches
        index.search_arrays(questions, pipeline=name, k=5, query_embeddings=Q)
    rows = []
    for r in range(args.rounds):
        for name in PIPELINES:
            t0 = time.perf_counter()
            index.search_arrays(questions, pipeline=name, k=5, query_embeddings=Q)
            seconds = time.perf_counter() - t0
            stages = index.pipeline(name).timings
            rows.append([f"round {r + 1}", name, f"{len(Q) / seconds:.1f}",
                         ", ".join(f"{k} {v:.2f}" for k, v in stages.items() if v >= 0.005)])
    print(f"N = {args.size:,}, {len(Q)} questions, top 5")
    print(table(["round", "pipeline", "queries/s", "stages (s)"], rows))
    print(stamp())


if __name__ == "__main__":
    main()

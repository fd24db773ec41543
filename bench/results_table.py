"""Recall table on the shared multi-hop benchmarks, as Markdown (the README's results table).

    .venv/bin/python bench/results_table.py [--data ../shared/data] [--pipelines ...] [--ablations]

Runs ``hopgraph eval`` (same code path, same index cache) on every dataset folder
and prints one Markdown table: Recall@2/5/8 and nDCG@10 (of the search 100 deep) as
mean ± standard error, with the non-graph baselines in the same table. One set of defaults for every dataset.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from suite.common import stamp

from hopgraph.engine.pipelines import pipeline_names
from hopgraph.evaluate import evaluate

BASELINES = ("dense", "bm25", "hybrid")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    ap.add_argument("--datasets", default="hotpotqa,musique")
    ap.add_argument("--pipelines", default=",".join(pipeline_names()))
    ap.add_argument("--k", default="2,5,8")
    ap.add_argument("--ablations", action="store_true")
    ap.add_argument("--cache-dir", default=".hopgraph-cache")
    args = ap.parse_args()
    ks = [int(k) for k in args.k.split(",")]
    pipelines = [p for p in args.pipelines.split(",") if p]
    print("| dataset | pipeline | " + " | ".join(f"R@{k}" for k in ks) + " | nDCG@10 | queries/s |")
    print("|---|---|" + "---|" * len(ks) + "---|---|")
    for ds in args.datasets.split(","):
        report = evaluate(Path(args.data) / ds, pipelines, ks, cache_dir=args.cache_dir, progress=False,
                          ablations=args.ablations)
        best = max((report["results"][b]["recall@5"] for b in BASELINES if b in report["results"]),
                   default=float("inf"))  # no baseline in the run: nothing in bold
        for name, r in report["results"].items():
            cells = []
            for k in ks:
                cell = f"{r[f'recall@{k}']:.3f} ± {r[f'recall@{k}_stderr']:.3f}"
                cells.append(f"**{cell}**" if k == 5 and r["recall@5"] >= best and name not in BASELINES else cell)
            cells.append(f"{r['ndcg@10']:.3f} ± {r['ndcg@10_stderr']:.3f}")
            print(f"| {ds} | {name} | " + " | ".join(cells) + f" | {r['queries_per_second']:.0f} |")
    print(f"\n{stamp()} (queries/s only; Recall does not depend on the load)")


if __name__ == "__main__":
    main()

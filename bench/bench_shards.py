"""A sharded index against the single index on the shared sets: equality of every pipeline, the bytes
the router gathers per question, and the router's overhead per question.

    .venv/bin/python bench/bench_shards.py --data ../shared/data [--sets hotpotqa,musique] [--shards 2]
        [--replicas 2] [--embedder hashing-384] [--ray]

For each set: builds the single index (all seven pipelines), shards it (``hopgraph shard``), and
answers every question one at a time (k = 10) three ways — the single index in-process; the router
over shards in this process (``LocalShards``: the router's own work, no network); with ``--ray``,
the router and ``--shards`` × ``--replicas`` shard replicas on a local Ray cluster (a head and a
worker node), over HTTP, against the single index served over HTTP by ``create_app`` on this
process. Prints, per pipeline: whether ids are equal and the largest score difference; the bytes
gathered from the shards per question (the pickled results of every shard call; what crosses the
network; the router keeps the embeddings and graph rows it read, unless ``--no-row-cache``); median ms
per question and the ratio to the single index. Query embedding is
included in every column (same embedder). Prints the load average.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pickle
import socket
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from hopgraph import Client, Index
from hopgraph.shards import LocalShards, open_router, shard_index

PIPELINES = ["dense", "bm25", "hybrid", "g3rag", "stitch", "ppr_binary", "dmar"]


class CountingShards(LocalShards):
    """LocalShards that add up the pickled size of what each call sends and returns."""

    def __init__(self, services) -> None:
        super().__init__(services)
        self.sent = self.received = 0

    def map(self, method, calls):
        self.sent += len(pickle.dumps((method, dict(calls)), protocol=5))
        out = super().map(method, calls)
        self.received += len(pickle.dumps(out, protocol=5))
        return out


def tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def disk_table(single: Path, sharded: Path) -> None:
    """Bytes on disk: the single index, and the sharded index's router state (by part), the shards'
    graph rows and the shard indexes."""
    meta = json.loads((sharded / "shards.json").read_text())
    router = sharded / meta["router"]
    held = sorted((sharded / "parts").iterdir())  # the router's parts: ids, titles, components
    parts = {"ids, titles, shard map": [router / "map"] + [p / "corpus" for p in held]}
    for sub in sorted({c.name for p in held for c in (p / "components").iterdir() if c.is_dir()}):
        parts[f"components/{sub}"] = [p / "components" / sub for p in held]
    for sub in sorted((router / "pipelines").iterdir()):
        parts[f"pipelines/{sub.name}"] = [sub]
    router_bytes = tree_bytes(router) + tree_bytes(sharded / "parts")
    print(f"\nbytes on disk: single index {tree_bytes(single):,}; sharded: router {router_bytes:,}, "
          f"graph rows in the shards {sum(tree_bytes(sharded / s['graph']) for s in meta['shards'] if s.get('graph')):,}, "
          f"shard indexes {sum(tree_bytes(sharded / s['dir']) for s in meta['shards']):,}")
    print("| router part | bytes |\n|---|---:|")
    for part, paths in parts.items():
        print(f"| {part} | {sum(tree_bytes(p) if p.is_dir() else 0 for p in paths):,} |")
    print()


def questions_of(path: Path) -> list[str]:
    return [json.loads(line)["question"] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def timed(fn, questions) -> tuple[list, list[float]]:
    out, times = [], []
    for q in questions:
        t0 = time.perf_counter()
        out.append(fn(q))
        times.append((time.perf_counter() - t0) * 1000)
    return out, times


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--sets", default="hotpotqa,musique")
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--embedder", default="hashing-384")
    ap.add_argument("--ray", action="store_true")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--no-row-cache", action="store_true", help="the in-process router forgets the embeddings and graph rows it read before each question")
    args = ap.parse_args()
    print(f"# bench_shards {datetime.date.today()} load average {os.getloadavg()} "
          f"shards {args.shards} embedder {args.embedder} k {args.k}", flush=True)
    for name in args.sets.split(","):
        data = Path(args.data) / name
        work = Path(tempfile.mkdtemp(prefix=f"shards-{name}-"))
        single = Index.build(data / "corpus.jsonl", embedder=args.embedder, pipelines=PIPELINES,
                             params={"dmar": {"gnn_steps": 20}}, progress=False)
        single.save(work / "index")
        single = Index.load(work / "index", progress=False)
        out = shard_index(single, args.shards, work / "shards")
        calls = CountingShards(LocalShards.open(out).services)
        router = open_router(out, calls)
        questions = questions_of(data / "questions.jsonl")
        print(f"\n## {name}: {len(single.X)} passages, {len(questions)} questions")
        disk_table(work / "index", out)
        print("| pipeline | ids equal | max score diff | bytes gathered / question | bytes sent / question | "
              "single ms (median) | router ms (median) | router / single |")
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        for p in PIPELINES:
            single.search_arrays(questions[:2], p, k=args.k)
            router.search_arrays(questions[:2], p, k=args.k)
            a, ta = timed(lambda q: single.search_arrays([q], p, k=args.k), questions)
            calls.sent = calls.received = 0

            def ask(q):
                if args.no_row_cache:  # each question reads what it needs afresh
                    router.shards.forget_rows()
                return router.search_arrays([q], p, k=args.k)
            b, tb = timed(ask, questions)
            equal = all(np.array_equal(x[0], y[0]) for x, y in zip(a, b))
            diff = max(float(np.max(np.abs(np.where(np.isfinite(x[1]), x[1] - y[1], 0)))) for x, y in zip(a, b))
            print(f"| {p} | {'yes' if equal else 'NO'} | {diff:.1e} | {calls.received / len(questions):,.0f} | "
                  f"{calls.sent / len(questions):,.0f} | {np.median(ta):.2f} | {np.median(tb):.2f} | "
                  f"{np.median(tb) / np.median(ta):.2f} |", flush=True)
        if args.ray:
            ray_table(single, out, questions, args)
    print(f"\nload average at the end {os.getloadavg()}")
    return 0


def ray_table(single: Index, out: Path, questions: list[str], args: argparse.Namespace) -> None:
    import ray
    from ray import serve
    from ray.cluster_utils import Cluster

    from hopgraph.serve import create_app
    from hopgraph.serve.runner import BackgroundServer
    from hopgraph.shards.ray_serve import serve_sharded

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    c.add_node(num_cpus=1)
    ray.init(address=c.address, log_to_driver=False)
    port = free_port()
    try:
        serve_sharded(c.address, out, replicas=args.replicas, port=port, blocking=False, embedder=args.embedder)
        with BackgroundServer(create_app(single, pipelines=PIPELINES)) as srv, \
                Client(srv.url) as one, Client(f"http://127.0.0.1:{port}") as many:
            print(f"\nover HTTP, one question a request: `hopgraph serve` of the single index (this process) vs "
                  f"the Ray Serve router with {args.shards} shards x {args.replicas} replicas "
                  f"(load average {os.getloadavg()})")
            print("| pipeline | ids equal | single HTTP ms (median) | Ray router ms (median) | overhead ms / question |")
            print("|---|---|---:|---:|---:|")
            for p in PIPELINES:
                one.search(questions[:2], p, k=args.k)
                many.search(questions[:2], p, k=args.k)
                a, ta = timed(lambda q: [h.id for h in one.search([q], p, k=args.k)[0]], questions)
                b, tb = timed(lambda q: [h.id for h in many.search([q], p, k=args.k)[0]], questions)
                print(f"| {p} | {'yes' if a == b else 'NO'} | {np.median(ta):.1f} | {np.median(tb):.1f} | "
                      f"{np.median(tb) - np.median(ta):.1f} |", flush=True)
    finally:
        serve.shutdown()
        ray.shutdown()
        c.shutdown()


if __name__ == "__main__":
    sys.exit(main())

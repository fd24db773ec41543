"""A large saved index sharded (``hopgraph shard``) and searched through its router, against the index
itself: equality, bytes the router gathers per question, where the bytes on disk are.

    .venv/bin/python bench/bench_shards_scale.py --data DIR/1000000 [--shards 4] [--questions 200]
        [--pipelines dense,bm25,hybrid,g3rag] [--workdir DIR]

``DIR/1000000`` is what ``bench_scale.py --sizes 1000000 --stages g3rag --workdir DIR`` leaves: a saved
index (``index/``), its questions (``questions.json``) and their embeddings (``Q.npy``). Prints the time
``shard_index`` takes (load of the single index excluded), the bytes on disk (the single index; the
router by part; the shards' graph rows; the shard indexes), then per pipeline: ids equal for every
question, the largest score difference, and the bytes the router gathers per question (each question
alone, the router's row caches emptied before each: what a question reads afresh). The shards run in
this process (``LocalShards``), so no time is a network's. Prints the load average.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from bench_shards import CountingShards, disk_table
from hopgraph import Index
from hopgraph.shards import LocalShards, open_router, shard_index


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="a bench_scale.py size directory (index/, questions.json, Q.npy)")
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--questions", type=int, default=200)
    ap.add_argument("--pipelines", default="dense,bm25,hybrid,g3rag")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--embedder", default=None, help="the index's embedder, when an add needs one (STITCH's texts)")
    ap.add_argument("--workdir", default=None, help="where the sharded index goes (default: a temporary directory)")
    ap.add_argument("--add", default="", help="comma-separated passage counts added through the router (and to the "
                    "single index, in memory) after the searches, e.g. 1,100: time, bytes written, equality after")
    args = ap.parse_args()
    data = Path(args.data)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="shards-scale-"))
    out = work / "shards"
    print(f"# bench_shards_scale {datetime.date.today()} load average {os.getloadavg()} shards {args.shards} "
          f"k {args.k}", flush=True)
    single = Index.load(data / "index", embedder=args.embedder, progress=False, verify="fast")
    n = len(single.X)
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    shard_index(single, args.shards, out)
    print(f"\nshard_index of {n:,} passages into {args.shards} shards: {time.perf_counter() - t0:.1f} s "
          f"(dense {single.components.dense.method})", flush=True)
    disk_table(data / "index", out)
    calls = CountingShards(LocalShards.open(out, verify="fast").services)
    router = open_router(out, calls, embedder=args.embedder, verify="fast")
    questions = json.loads((data / "questions.json").read_text())[:args.questions]
    Q = np.load(data / "Q.npy")[:len(questions)]
    print("| pipeline | ids equal | max score diff | bytes gathered / question | bytes sent / question | "
          "graph entries fetched / question |")
    print("|---|---|---:|---:|---:|---:|")
    for p in args.pipelines.split(","):
        equal, diff = True, 0.0
        calls.sent = calls.received = 0
        fetched = 0
        for i, q in enumerate(questions):
            a_ids, a_scores = single.search_arrays([q], p, k=args.k, query_embeddings=Q[i:i + 1])
            router.shards.forget_rows()
            before = _fetched(router)
            b_ids, b_scores = router.search_arrays([q], p, k=args.k, query_embeddings=Q[i:i + 1])
            fetched += _fetched(router) - before
            equal &= bool(np.array_equal(a_ids, b_ids))
            finite = np.isfinite(a_scores)
            diff = max(diff, float(np.max(np.abs(np.where(finite, a_scores - b_scores, 0)), initial=0)))
        m = len(questions)
        print(f"| {p} | {'yes' if equal else 'NO'} | {diff:.1e} | {calls.received / m:,.0f} | {calls.sent / m:,.0f} | "
              f"{fetched / m:,.0f} |", flush=True)
    if args.add:
        add_table(single, router, out, questions, Q, args)
    print(f"\nload average at the end {os.getloadavg()}")
    if args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def add_table(single: Index, router, out: Path, questions: list[str], Q: np.ndarray, args) -> None:
    """Adds through the router (each a router commit: the owner shards' segments, a new router
    directory) and the same adds to the single index in memory; then every pipeline's results compared."""
    rng = np.random.default_rng(0)
    dim = single.X.shape[1]
    print("\n| passages added | router add (s) | single add, in memory (s) | router commit written (bytes) | "
          "shard indexes grew (bytes) |")
    print("|---:|---:|---:|---:|---:|")
    for n in (int(x) for x in args.add.split(",")):
        x = rng.standard_normal((n, dim)).astype(np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        recs = [{"id": f"added-{n}-{i}", "title": f"Added {n} {i}", "text": f"{questions[i % len(questions)]} "
                 f"An added passage, number {i}."} for i in range(n)]
        meta = json.loads((out / "shards.json").read_text())
        shards_before = sum(tree_bytes(out / s["dir"]) for s in meta["shards"])
        t0 = time.perf_counter()
        router.add(recs, embeddings=x)
        t_router = time.perf_counter() - t0
        t0 = time.perf_counter()
        single.add(recs, embeddings=x)
        t_single = time.perf_counter() - t0
        meta = json.loads((out / "shards.json").read_text())
        grew = sum(tree_bytes(out / s["dir"]) for s in meta["shards"]) - shards_before
        written = tree_bytes(out / meta["router"]) + tree_bytes(out / router.parts[-1]["dir"])
        print(f"| {n} | {t_router:.2f} | {t_single:.2f} | {written:,} | {grew:,} |", flush=True)
    for p in args.pipelines.split(","):
        a = single.search_arrays(questions, p, k=args.k, query_embeddings=Q)
        b = router.search_arrays(questions, p, k=args.k, query_embeddings=Q)
        finite = np.isfinite(a[1])
        diff = float(np.max(np.abs(np.where(finite, a[1] - b[1], 0)), initial=0))
        print(f"after the adds, {p}: ids {'equal' if np.array_equal(a[0], b[0]) else 'DIFFERENT'}, "
              f"largest score difference {diff:.1e}", flush=True)


def _fetched(router) -> int:
    """Graph entries the router's sharded graphs fetched so far."""
    from hopgraph.engine.graphs.remote import ShardedCSR, remote_base
    from hopgraph.engine.graphs.views import OverlayCSR

    return sum(remote_base(value).fetched for pipe in router.pipelines.values() for value in vars(pipe).values()
               if isinstance(value, (ShardedCSR, OverlayCSR)) and remote_base(value) is not None)


if __name__ == "__main__":
    raise SystemExit(main())

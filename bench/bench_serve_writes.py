"""Search latency of ``hopgraph serve`` while passages are added over HTTP, against its idle latency.

    .venv/bin/python bench/bench_serve_writes.py --corpus DIR/corpus.jsonl [--base 5000] [--add 3000]
        [--embedder minilm] [--pipelines dense,bm25,hybrid,g3rag] [--clients 2] [--rate 4] [--rounds 3]
        [--idle-seconds 20] [--index DIR]

Builds an index of the corpus's first ``--base`` passages (or serves ``--index`` when it exists),
starts the real server (``python -m hopgraph serve``, a subprocess on 127.0.0.1, ``--threads 1``)
and runs ``--clients`` honest clients, each sending one question a request at ``--rate`` requests/s
(open loop, cycling through the served pipelines; the questions are the corpus's titles). Each of
``--rounds`` rounds first measures an idle window of ``--idle-seconds``, then sends one
``POST /passages`` of ``--add`` new passages (the corpus's next ones, fresh ids) and measures the
searches sent while that request is in flight: the server's writer process embeds the passages,
applies them to a copy of the index and commits it; the server then loads that commit, searches it
once with each pipeline and swaps it in between two micro-batches; the searches go on meanwhile.
Prints p50 / p99 / max latency of both phases, their ratio (the target: during ≤ 2 × idle), the
add's duration and the load average.
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import numpy as np

from bench_abuse import Honest, connection, honest_client, percentile, send, warmed_search_bodies
from bench_serve import load_average, start_server
from hopgraph.engine.components.corpus import Corpus
from hopgraph.engine.ingest.chunking import PassageLengthWarning
from hopgraph.index import Index


def build(corpus_path: Path, n: int, embedder: str, pipelines: list[str], out: Path) -> None:
    corpus = Corpus.from_jsonl(corpus_path)
    corpus = corpus.take(np.arange(min(n, len(corpus))))
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PassageLengthWarning)
        Index.build(corpus, embedder=embedder, pipelines=pipelines, progress=False).save(out)
    print(f"  built {len(corpus):,} passages ({', '.join(pipelines)}, {embedder}) in {time.perf_counter() - t0:.0f} s",
          flush=True)


def during_add(url: str, bodies: list[tuple[str, bytes]], args: argparse.Namespace, payload: bytes,
               out: Honest) -> tuple[float, int]:
    """Send one ``POST /passages`` and run the honest clients until it is answered; returns its
    seconds and status. Only the searches sent while it was in flight are counted."""
    done = threading.Event()
    answer: dict = {}

    def writer() -> None:
        conn = connection(url)
        conn.sock.settimeout(3600)
        t0 = time.perf_counter()
        answer["status"], answer["body"] = send(conn, "POST", "/passages", payload)
        answer["seconds"] = time.perf_counter() - t0
        conn.close()
        done.set()

    w = threading.Thread(target=writer)
    window = Honest()
    w.start()
    while not done.is_set():  # short windows until the add is answered
        threads = [threading.Thread(target=honest_client, args=(url, bodies, args.rate, time.perf_counter() + 1.0,
                                                                window, i / (args.rate * args.clients)))
                   for i in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    w.join()
    out.latencies_ms.extend(window.latencies_ms)
    out.errors.update(window.errors)
    return answer["seconds"], answer["status"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", required=True, help="a corpus JSONL with at least base + rounds x add passages")
    p.add_argument("--index", help="serve this index (built there first when it does not exist)")
    p.add_argument("--base", type=int, default=5000)
    p.add_argument("--add", type=int, default=3000)
    p.add_argument("--embedder", default="minilm")
    p.add_argument("--pipelines", default="dense,bm25,hybrid,g3rag")
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--rate", type=float, default=4.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--idle-seconds", type=float, default=20.0)
    args = p.parse_args()
    pipelines = [x for x in args.pipelines.split(",") if x]
    records = [json.loads(line) for line in open(args.corpus, encoding="utf-8")]
    if len(records) < args.base + args.rounds * args.add:
        raise SystemExit(f"{args.corpus} has {len(records)} passages; {args.base} + {args.rounds} x {args.add} needed")
    print(f"bench_serve_writes {datetime.datetime.now():%Y-%m-%d %H:%M}, load average {load_average()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="hopgraph-serve-writes-") as tmp:
        index_dir = Path(args.index) if args.index else Path(tmp) / "index"
        if not index_dir.exists():
            build(Path(args.corpus), args.base, args.embedder, pipelines, index_dir)
        proc, url = start_server(index_dir, ["--pipelines", ",".join(pipelines), "--threads", "1"])
        try:
            questions = [r.get("title") or r["text"][:80] for r in records[:2000]]
            bodies = warmed_search_bodies(url, pipelines, questions, per_pipeline=4)
            idle, busy, adds = Honest(), Honest(), []
            for r in range(args.rounds):
                until = time.perf_counter() + args.idle_seconds
                threads = [threading.Thread(target=honest_client, args=(url, bodies, args.rate, until, idle,
                                                                        i / (args.rate * args.clients)))
                           for i in range(args.clients)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                a = args.base + r * args.add
                new = [{**rec, "id": f"added-{r}-{rec['id']}"} for rec in records[a:a + args.add]]
                adds.append(during_add(url, bodies, args, json.dumps({"passages": new}).encode(), busy))
                print(f"  round {r + 1}: add of {args.add} passages answered {adds[-1][1]} in {adds[-1][0]:.1f} s",
                      flush=True)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except Exception:
                proc.kill()
    rows = []
    for name, h in (("idle", idle), (f"during a POST /passages of {args.add:,}", busy)):
        lat = h.latencies_ms
        rows.append((name, len(lat), percentile(lat, 50), percentile(lat, 99), max(lat) if lat else float("nan"),
                     sum(h.errors.values())))
    print(f"\nsearch latency over HTTP, {args.clients} clients x {args.rate:g} requests/s, pipelines "
          f"{','.join(pipelines)}, {args.embedder}, {args.base:,}-passage index; load average {load_average()}")
    print("| phase | searches | p50 ms | p99 ms | max ms | errors |\n|---|---:|---:|---:|---:|---:|")
    for name, n, p50, p99, mx, err in rows:
        print(f"| {name} | {n} | {p50:.0f} | {p99:.0f} | {mx:.0f} | {err} |")
    print(f"ratio during / idle: p50 {rows[1][2] / rows[0][2]:.2f} x, p99 {rows[1][3] / rows[0][3]:.2f} x "
          f"(target ≤ 2 x); adds: {', '.join(f'{s:.1f} s ({st})' for s, st in adds)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

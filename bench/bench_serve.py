"""Load test of ``hopgraph serve`` on loopback.

    .venv/bin/python bench/bench_serve.py [--data ../shared/data/hotpotqa | --index DIR]
        [--embedder minilm] [--pipeline dense] [--clients 32] [--seconds 8] [--max-requests 3000]

Starts the real server (``python -m hopgraph serve``, a subprocess on 127.0.0.1) and
sends one question per request, cycling through the benchmark's questions:
first ONE client sending them one by one, then N concurrent clients, then (unless
``--no-unbatched``) N clients against a server whose micro-batching is off
(``--batch-max-queries 1``), to show what batching contributes. Each phase is
bounded by ``--seconds`` and ``--max-requests``. Prints requests/s, p50/p99
latency, errors (must be 0), the mean micro-batch size the server reported, and
the speed-up over the single client (target: >= 3x with 32 clients). Answers of
the concurrent phases are compared with the single-client answers. The date and the
1-minute load average (before the run and at the end of each phase) are printed, since
the figures depend on what else runs on the machine.
"""
from __future__ import annotations

import argparse
import datetime
import http.client
import itertools
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np

from hopgraph.demo import DEMO_QUESTIONS, demo_corpus
from hopgraph.engine.evaluation import load_questions
from hopgraph.evaluate import cached_index
from hopgraph.index import Index

SHARED_HOTPOTQA = Path(__file__).resolve().parents[2] / "shared" / "data" / "hotpotqa"


@dataclass
class Phase:
    name: str
    clients: int
    latencies_ms: list[float] = field(default_factory=list)
    batch_requests: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    answers: dict[str, list[str]] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def rps(self) -> float:
        return len(self.latencies_ms) / self.seconds if self.seconds else 0.0


def load_average() -> str:
    """The 1-, 5- and 15-minute load averages, as ``uptime`` prints them."""
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def start_server(index_dir: Path, extra: list[str], timeout: float = 300.0) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "hopgraph", "serve", str(index_dir), "--port", "0", "-q",
           "--log-level", "warning", *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    line = proc.stdout.readline()
    m = re.search(r"listening on (http://\S+)", line)
    if not m:
        proc.kill()
        raise RuntimeError(f"server did not start: {line!r} {proc.stderr.read()[-2000:]}")
    print(f"  server up in {time.monotonic() - t0:.1f} s: {line.strip()}", flush=True)
    return proc, m.group(1)


def run_phase(phase: Phase, url: str, questions: list[str], pipeline: str, k: int, seconds: float,
              max_requests: int) -> Phase:
    """``phase.clients`` threads, each a keep-alive HTTP/1.1 connection sending one question per
    request until ``seconds`` pass or ``max_requests`` are sent in all.

    The load generator is deliberately thin (http.client, no pooling layer; request bodies encoded
    before the clock starts, answers decoded after it stops) so that the server, not the client,
    is what is measured: the clients share the server's cores.
    """
    parsed = urlsplit(url)
    counter = itertools.count()
    lock = threading.Lock()

    def connection() -> http.client.HTTPConnection:
        conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=120)
        conn.connect()
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    bodies = [json.dumps({"queries": [q], "pipeline": pipeline, "k": k}).encode() for q in questions]
    headers = {"Content-Type": "application/json"}
    answered: list[tuple[int, bytes]] = []  # (question number, raw answer), decoded after the phase

    def post(conn: http.client.HTTPConnection, i: int) -> tuple[int, bytes]:
        conn.request("POST", "/search", body=bodies[i], headers=headers)
        response = conn.getresponse()
        return response.status, response.read()

    warm = connection()
    for i in range(min(2, len(questions))):  # warm-up: embedder, pipeline
        post(warm, i)
    warm.close()
    deadline = time.perf_counter() + seconds

    def client() -> None:
        conn = connection()
        try:
            while time.perf_counter() < deadline:
                i = next(counter)
                if i >= max_requests:
                    return
                t0 = time.perf_counter()
                try:
                    status, raw = post(conn, i % len(questions))
                except (OSError, http.client.HTTPException) as e:
                    with lock:
                        phase.errors.append(f"{type(e).__name__}: {e}")
                    conn.close()
                    conn = connection()
                    continue
                ms = (time.perf_counter() - t0) * 1000
                if status != 200:
                    with lock:
                        phase.errors.append(f"HTTP {status}: {raw[:200]!r}")
                    continue
                with lock:
                    phase.latencies_ms.append(ms)
                    answered.append((i % len(questions), raw))
        finally:
            conn.close()

    threads = [threading.Thread(target=client) for _ in range(phase.clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    phase.seconds = time.perf_counter() - t0
    for i, raw in answered:
        body = json.loads(raw)
        phase.batch_requests.append(body["timing"]["batch_requests"])
        phase.answers.setdefault(questions[i], [h["id"] for h in body["results"][0]["hits"]])
    return phase


def resolve_index(args: argparse.Namespace, tmp: Path) -> tuple[Path, list[str]]:
    """(index directory, questions) from --index / --data / the bundled demo corpus."""
    data = Path(args.data) if args.data else (SHARED_HOTPOTQA if (SHARED_HOTPOTQA / "corpus.jsonl").is_file() else None)
    if args.index:
        index_dir = Path(args.index)
    elif data is not None and args.embedder == "minilm":  # the MiniLM index of `hopgraph eval` (warm cache)
        _, index_dir = cached_index(data, args.embedder, Path(args.cache_dir), "auto", [args.pipeline], progress=True)
    elif data is not None:
        index_dir = tmp / "index"
        Index.build(data / "corpus.jsonl", embedder=args.embedder, pipelines=[args.pipeline], progress=True
                    ).save(index_dir)
    else:
        index_dir = tmp / "demo-index"
        Index.build(demo_corpus(), embedder=args.embedder, pipelines=[args.pipeline], progress=True).save(index_dir)
    questions = [q.text for q in load_questions(data / "questions.jsonl")] if data is not None else list(DEMO_QUESTIONS)
    return index_dir, questions


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", help="benchmark folder (corpus.jsonl + questions.jsonl); default: shared hotpotqa "
                    "if present, else the bundled demo corpus")
    ap.add_argument("--index", help="serve this index directory instead (questions still from --data)")
    ap.add_argument("--embedder", default="minilm")
    ap.add_argument("--cache-dir", default=".hopgraph-cache")
    ap.add_argument("--pipeline", default="dense")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=8.0, help="time bound of each phase")
    ap.add_argument("--max-requests", type=int, default=3000, help="request bound of each phase")
    ap.add_argument("--threads", type=int, help="pass --threads to the server (CPU threads of torch/faiss)")
    ap.add_argument("--no-unbatched", action="store_true", help="skip the batching-off phase")
    args = ap.parse_args()
    print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; {os.cpu_count()} CPUs; "
          f"load average {load_average()} (before the index is built or loaded)", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        index_dir, questions = resolve_index(args, Path(tmp))
        print(f"index {index_dir}; {len(questions)} distinct questions; pipeline {args.pipeline}, k={args.k}")
        runs = [("micro-batching", [], [1, args.clients])]
        if not args.no_unbatched:
            runs.append(("batching off", ["--batch-max-queries", "1"], [args.clients]))
        phases: list[Phase] = []
        for label, extra, client_counts in runs:
            threads = ["--threads", str(args.threads)] if args.threads else []
            proc, url = start_server(index_dir, ["--pipelines", args.pipeline, *threads, *extra])
            try:
                for n in client_counts:
                    phase = Phase(f"{label}, {n} client{'s' if n > 1 else ''}", n)
                    run_phase(phase, url, questions, args.pipeline, args.k, args.seconds, args.max_requests)
                    phases.append(phase)
                    print(f"  {phase.name}: {len(phase.latencies_ms)} requests in {phase.seconds:.1f} s; "
                          f"load average {load_average()}", flush=True)
            finally:
                proc.terminate()
                proc.wait(timeout=30)

    base = phases[0]
    print()
    print("| server | clients | requests | errors | requests/s | p50 ms | p99 ms | mean batch (requests) "
          "| speed-up vs 1 client | answers != 1-client |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for p in phases:
        lat = np.asarray(p.latencies_ms) if p.latencies_ms else np.asarray([np.nan])
        differ = sum(1 for q, ids in p.answers.items() if q in base.answers and base.answers[q] != ids)
        print(f"| {p.name.split(',')[0]} | {p.clients} | {len(p.latencies_ms)} | {len(p.errors)} | {p.rps:.1f} "
              f"| {np.percentile(lat, 50):.2f} | {np.percentile(lat, 99):.2f} "
              f"| {np.mean(p.batch_requests) if p.batch_requests else float('nan'):.1f} "
              f"| {p.rps / base.rps if base.rps else float('nan'):.2f}x | {differ} |")
    errors = sum(len(p.errors) for p in phases)
    for p in phases:
        for e in p.errors[:3]:
            print(f"error ({p.name}): {e}")
    speedup = phases[1].rps / base.rps if base.rps else 0.0
    print(f"\n{args.clients} concurrent clients vs 1 client sending one by one: {speedup:.2f}x "
          f"(target >= 3x: {'met' if speedup >= 3 else 'NOT met'}); errors: {errors}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

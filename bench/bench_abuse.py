"""Load-and-abuse harness of ``hopgraph serve`` on loopback: honest clients at a steady rate, first
alone, then beside one abusive client.

    .venv/bin/python bench/bench_abuse.py [--data ../shared/data/hotpotqa] [--index DIR]
        [--passages 10000] [--embedder minilm] [--pipelines dense,hybrid,stitch,dmar]
        [--clients 4] [--rate 1] [--seconds 60] [--rounds 3] [--request-timeout 2] [--max-request-mb 64] [--threads 1]

Starts the real server (``python -m hopgraph serve``, a subprocess on 127.0.0.1). Each honest
client sends one question per request at ``--rate`` requests/s (open loop: a late answer does not
delay the next send), cycling through the benchmark's questions and the served pipelines, with the
default parameters. The idle phase runs them alone for ``--seconds``; the abuse phase runs them as
long again while one abusive client sends, one after the other, the requests a hostile user would
(the phases alternate in ``--rounds`` windows, so the machine's other load weighs on both alike):
parameters far above their bounds (DMAR ``T`` = 10⁶ and 10⁸, ``candidate_depth`` / ``second_stage_depth``
/ hybrid ``depth`` = 10⁹, STITCH ``region_hops`` = 10⁶), ``k`` = 10⁹, a ``where`` naming 5,000 new
fields and one naming 16 (allowed: answered), a request whose memory estimate is above the budget,
a valid request slow enough to pass the deadline, a 5 MB passage, a DNS-rebinding ``Host`` and a
browser's cross-origin write. Every count and duration is bounded (``--seconds``, ``--rate``,
``--clients``).

Prints, per phase, the honest clients' requests, p50 / p99 / max latency and errors (anything but
200); per abusive request kind, the statuses and the slowest answer (targets: 4xx or 503/504, within
the request timeout); the server's resident memory (VmRSS after start, peak VmHWM per phase); and
the load average (the figures depend on what else runs on the machine).
"""
from __future__ import annotations

import argparse
import datetime
import http.client
import itertools
import json
import socket
import sys
import tempfile
import threading
import time
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np

from bench_serve import SHARED_HOTPOTQA, load_average, start_server
from hopgraph.demo import DEMO_QUESTIONS, demo_corpus
from hopgraph.engine.components.corpus import Corpus
from hopgraph.engine.evaluation import load_questions
from hopgraph.engine.ingest.chunking import PassageLengthWarning
from hopgraph.index import Index

MAX_CLIENTS = 64
MAX_SECONDS = 300.0
MAX_RATE = 50.0


@dataclass
class Honest:
    latencies_ms: list[float] = field(default_factory=list)
    by_pipeline: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: Counter = field(default_factory=Counter)


@dataclass
class Abusive:
    statuses: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    slowest_ms: dict[str, float] = field(default_factory=lambda: defaultdict(float))


def connection(url: str) -> http.client.HTTPConnection:
    parsed = urlsplit(url)
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=120)
    conn.connect()
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return conn


def warmed_search_bodies(url: str, pipelines: list[str], questions: list[str],
                         per_pipeline: int) -> list[tuple[str, bytes]]:
    """``(pipeline, /search body)`` of one question each, the pipelines in turn; the first
    ``per_pipeline`` of each pipeline are sent once to warm the server up."""
    bodies = [(pipelines[i % len(pipelines)],
               json.dumps({"queries": [q], "pipeline": pipelines[i % len(pipelines)], "k": 5}).encode())
              for i, q in enumerate(questions)]
    warm = connection(url)
    for _, body in bodies[:per_pipeline * len(pipelines)]:
        send(warm, "POST", "/search", body)
    warm.close()
    return bodies


def send(conn: http.client.HTTPConnection, method: str, path: str, body: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    conn.request(method, path, body=body, headers={"Content-Type": "application/json", **(headers or {})})
    response = conn.getresponse()
    return response.status, response.read()


def honest_client(url: str, bodies: list[tuple[str, bytes]], rate: float, until: float, out: Honest,
                  offset: float) -> None:
    """One request every 1/rate s (open loop) until ``until``; latency of each answer."""
    conn = connection(url)
    interval = 1.0 / rate
    next_send = time.perf_counter() + offset
    for i in itertools.count():
        if next_send >= until:
            break
        pause = next_send - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        pipeline, body = bodies[i % len(bodies)]
        t0 = time.perf_counter()
        try:
            status, _ = send(conn, "POST", "/search", body)
        except (OSError, http.client.HTTPException) as e:
            out.errors[type(e).__name__] += 1
            conn.close()
            conn = connection(url)
            next_send += interval
            continue
        ms = (time.perf_counter() - t0) * 1000
        out.latencies_ms.append(ms)
        out.by_pipeline[pipeline].append(ms)
        if status != 200:
            out.errors[str(status)] += 1
        next_send += interval
    conn.close()


def abuse_requests(pipelines: list[str], question: str, own_host: str) -> list[tuple[str, str, str, bytes, dict]]:
    """(kind, method, path, body, headers) of every abusive request, for the served pipelines."""
    def search(pipeline: str, **extra) -> bytes:
        return json.dumps({"queries": [question], "pipeline": pipeline, **extra}).encode()

    first = pipelines[0]
    out = [("k=1e9", "POST", "/search", search(first, k=10**9), {}),
           ("where: 5,000 new fields", "POST", "/search",
            search(first, where={f"f{i}-{time.time_ns()}": "x" for i in range(5000)}), {}),
           ("where: 16 new fields (allowed)", "POST", "/search",
            search(first, where={f"g{i}-{time.time_ns()}": "x" for i in range(16)}), {}),
           ("passage of 5 MB", "POST", "/passages",
            json.dumps({"passages": [{"id": "huge", "text": "word " * (1 << 20)}]}).encode(), {}),
           ("DNS rebinding Host", "POST", "/passages",
            json.dumps({"passages": [{"id": "rebound", "text": "x"}]}).encode(), {"Host": "attacker.example"}),
           ("cross-origin DELETE", "DELETE", "/passages/some-id", None, {"Origin": "http://attacker.example"})]
    if "dmar" in pipelines:
        out += [("dmar T=1e6", "POST", "/search", search("dmar", params={"T": 10**6}), {}),
                ("dmar T=1e8", "POST", "/search", search("dmar", params={"T": 10**8}), {}),
                ("dmar candidate_depth=1e9", "POST", "/search", search("dmar", params={"candidate_depth": 10**9}), {}),
                ("dmar second_stage_depth=1e9", "POST", "/search",
                 search("dmar", params={"second_stage_depth": 10**9}), {}),
                ("dmar over the memory budget", "POST", "/search",
                 json.dumps({"queries": [question] * 256, "pipeline": "dmar", "k": 100,
                             "params": {"shapley_samples": 500, "candidate_depth": 500, "union_depth": 500}}).encode(),
                 {})]
    if "hybrid" in pipelines:
        out.append(("hybrid depth=1e9", "POST", "/search", search("hybrid", params={"depth": 10**9}), {}))
    if "stitch" in pipelines:
        out += [("stitch region_hops=1e6", "POST", "/search", search("stitch", params={"region_hops": 10**6}), {}),
                ("stitch past the deadline", "POST", "/search",
                 json.dumps({"queries": [f"{question} {i}" for i in range(256)], "pipeline": "stitch", "k": 100,
                             "params": {"region_hops": 3, "localise": False, "max_iter": 1000, "tol": 1e-12,
                                        "description_depth": 1024}}).encode(), {})]
    return out


def abusive_client(url: str, requests: list[tuple[str, str, str, bytes, dict]], until: float, out: Abusive) -> None:
    conn = connection(url)
    for kind, method, path, body, headers in itertools.cycle(requests):
        if time.perf_counter() >= until:
            break
        t0 = time.perf_counter()
        try:
            status, _ = send(conn, method, path, body, headers)
            label = str(status)
        except (OSError, http.client.HTTPException) as e:
            label = type(e).__name__
            conn.close()
            conn = connection(url)
        out.statuses[kind][label] += 1
        out.slowest_ms[kind] = max(out.slowest_ms[kind], (time.perf_counter() - t0) * 1000)
    conn.close()


class RssWatch:
    """Samples the server's VmRSS every 0.1 s; ``peak()`` is the highest since the last ``reset()``."""

    def __init__(self, pid: int) -> None:
        self.pid, self._peak, self._stop = pid, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def rss_mb(self) -> float:
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._peak = max(self._peak, self.rss_mb())
            except OSError:
                return
            time.sleep(0.1)

    def reset(self) -> None:
        self._peak = self.rss_mb()

    def peak(self) -> float:
        return self._peak

    def stop(self) -> None:
        self._stop.set()


def run_window(url: str, bodies: list[tuple[str, bytes]], args: argparse.Namespace, seconds: float,
               honest: Honest, abuse: list | None = None, abusive: Abusive | None = None) -> float:
    """One window of ``seconds``: the honest clients (and the abusive one when ``abuse`` is given),
    their answers added to ``honest`` / ``abusive``; returns the wall seconds."""
    until = time.perf_counter() + seconds
    threads = [threading.Thread(target=honest_client, args=(url, bodies, args.rate, until, honest,
                                                            i / (args.rate * args.clients)))
               for i in range(args.clients)]
    if abuse is not None:
        threads.append(threading.Thread(target=abusive_client, args=(url, abuse, until, abusive)))
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def build_index(args: argparse.Namespace, work: Path) -> tuple[Path, list[str]]:
    """The served index (``--index``, else built from ``--data``'s first ``--passages``) and questions."""
    data = Path(args.data) if args.data else SHARED_HOTPOTQA
    if (data / "corpus.jsonl").is_file():
        questions = [q.text for q in load_questions(data / "questions.jsonl")][:2000]
    else:
        questions = list(DEMO_QUESTIONS)
    if args.index and Path(args.index).exists():
        return Path(args.index), questions
    if (data / "corpus.jsonl").is_file():
        corpus = Corpus.from_jsonl(data / "corpus.jsonl")
        corpus = corpus.take(np.arange(min(args.passages, len(corpus))))
    else:
        print(f"  {data} not found: the bundled demo corpus instead")
        corpus = demo_corpus()
    path = Path(args.index) if args.index else work / "index"
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PassageLengthWarning)  # long passages: the embedder reads their start
        Index.build(corpus, embedder=args.embedder, pipelines=args.pipelines, progress=False).save(path)
    print(f"  built {len(corpus):,} passages ({', '.join(args.pipelines)}, {args.embedder}) in "
          f"{time.perf_counter() - t0:.0f} s")
    return path, questions


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def print_report(phases: list[tuple[str, Honest, float, float]], abusive: Abusive, rss: dict[str, float],
                 timeout: float) -> None:
    print(f"\nhonest clients (load average {load_average()}):")
    print("| phase: pipeline | requests | p50 ms | p99 ms | max ms | errors | server peak RSS MB |")
    print("|---|---|---|---|---|---|---|")
    for name, h, seconds, peak in phases:
        errors = sum(h.errors.values())
        detail = f" ({dict(h.errors)})" if errors else ""
        rows = [("all", h.latencies_ms)] + sorted(h.by_pipeline.items())
        for pipeline, lat in rows:
            print(f"| {name}: {pipeline} | {len(lat)} in {seconds:.0f} s | {percentile(lat, 50):.1f} | "
                  f"{percentile(lat, 99):.1f} | {max(lat, default=float('nan')):.1f} | "
                  + (f"{errors}{detail} | {peak:.0f} |" if pipeline == "all" else " | |"))
    idle, during = phases[0][1], phases[1][1]
    ratio = percentile(during.latencies_ms, 99) / percentile(idle.latencies_ms, 99)
    print(f"\nhonest p99 during abuse / idle: {ratio:.2f} (target <= 3); honest errors: "
          f"{sum(during.errors.values())} (target 0)")
    print(f"server RSS: {rss['start']:.0f} MB after start, peak {rss['idle']:.0f} MB in the idle windows, "
          f"{rss['abuse']:.0f} MB in the abuse windows (+{rss['abuse'] - rss['start']:.0f} MB over the start), "
          f"{rss['end']:.0f} MB at the end")
    print(f"\nabusive requests (request timeout {timeout:g} s):")
    print("| request | answers | slowest ms | within the deadline |")
    print("|---|---|---|---|")
    for kind, statuses in abusive.statuses.items():
        slowest = abusive.slowest_ms[kind]
        ok = "yes" if slowest <= timeout * 1000 + 250 else "NO"
        print(f"| {kind} | {', '.join(f'{s} x{n}' for s, n in sorted(statuses.items()))} | {slowest:.0f} | {ok} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help=f"benchmark folder (default: {SHARED_HOTPOTQA})")
    parser.add_argument("--index", help="serve this index (built there first when it does not exist)")
    parser.add_argument("--passages", type=int, default=10_000, help="passages of --data to index")
    parser.add_argument("--embedder", default="minilm")
    parser.add_argument("--pipelines", type=lambda s: [x for x in s.split(",") if x],
                        default=["dense", "hybrid", "stitch", "dmar"])
    parser.add_argument("--clients", type=int, default=4, help=f"honest clients (at most {MAX_CLIENTS})")
    parser.add_argument("--rate", type=float, default=1.0, help=f"requests/s per honest client (at most {MAX_RATE:g})")
    parser.add_argument("--seconds", type=float, default=60.0, help=f"per phase (at most {MAX_SECONDS:g})")
    parser.add_argument("--rounds", type=int, default=3, help="idle and abuse windows alternate this many times")
    parser.add_argument("--request-timeout", type=float, default=2.0, help="the server's --request-timeout")
    parser.add_argument("--max-request-mb", type=float, default=64.0, help="the server's --max-request-mb")
    parser.add_argument("--threads", type=int, default=1, help="the server's --threads (1 suits a busy machine)")
    parser.add_argument("--skip", action="append", default=[], metavar="WORDS",
                        help="leave out the abusive requests whose name contains WORDS (repeatable)")
    parser.add_argument("--server-arg", action="append", default=[], help="another option for hopgraph serve")
    args = parser.parse_args()
    args.clients = max(1, min(args.clients, MAX_CLIENTS))
    args.rate = max(0.1, min(args.rate, MAX_RATE))
    args.seconds = max(1.0, min(args.seconds, MAX_SECONDS))
    args.rounds = max(1, min(args.rounds, 20))
    print(f"bench_abuse {datetime.datetime.now():%Y-%m-%d %H:%M}, load average {load_average()}; server: "
          f"--threads {args.threads} --request-timeout {args.request_timeout:g} --max-request-mb {args.max_request_mb:g} "
          f"{' '.join(args.server_arg)}")
    with tempfile.TemporaryDirectory(prefix="hopgraph-abuse-") as tmp:
        index_dir, questions = build_index(args, Path(tmp))
        served = args.pipelines
        proc, url = start_server(index_dir, ["--pipelines", ",".join(served), "--threads", str(args.threads),
                                             "--request-timeout",
                                             str(args.request_timeout), "--max-request-mb", str(args.max_request_mb),
                                             *args.server_arg])
        watch = RssWatch(proc.pid)
        try:
            bodies = warmed_search_bodies(url, served, questions, per_pipeline=2)
            rss = {"start": watch.rss_mb(), "idle": 0.0, "abuse": 0.0}
            abuse = [a for a in abuse_requests(served, questions[0], urlsplit(url).netloc)
                     if not args.skip or not any(word in a[0] for word in args.skip)]
            window = args.seconds / args.rounds
            print(f"  {args.rounds} rounds of {window:g} s idle, then {window:g} s beside one abusive client "
                  f"({len(abuse)} kinds of request); {args.clients} honest clients x {args.rate:g} requests/s",
                  flush=True)
            idle, during, abusive = Honest(), Honest(), Abusive()
            idle_s = abuse_s = 0.0
            for _ in range(args.rounds):  # interleaved: the machine's other load weighs on both phases alike
                watch.reset()
                idle_s += run_window(url, bodies, args, window, idle)
                rss["idle"] = max(rss["idle"], watch.peak())
                watch.reset()
                abuse_s += run_window(url, bodies, args, window, during, abuse, abusive)
                rss["abuse"] = max(rss["abuse"], watch.peak())
                time.sleep(args.request_timeout)  # what the abuse left running stops at its deadline
            rss["end"] = watch.rss_mb()
            print_report([("idle", idle, idle_s, rss["idle"]), ("during abuse", during, abuse_s, rss["abuse"])],
                         abusive, rss, args.request_timeout)
        finally:
            watch.stop()
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except Exception:
                proc.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())

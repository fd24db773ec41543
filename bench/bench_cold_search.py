"""Cold start of ``hopgraph search``: a fresh process answering one question, side by side with what it
is made of (the interpreter, ``import torch``, ``import hopgraph.cli``).

    .venv/bin/python bench/bench_cold_search.py [--rounds 5] [--pipeline dense]

Builds the demo corpus's index with the default embedder (all-MiniLM-L6-v2) once, in a temporary
folder (not timed); then, in interleaved rounds, runs each side in a fresh subprocess and times it
from spawn to exit (wall clock) and by its CPU time (user + system). The table gives each side's
medians, the wall spread over the rounds and its share of the full command; the load average is
printed before and after: on a shared machine it stretches the wall figures (CPU time much less).
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

QUESTION = "Who designed the bridge in Peter Harlow's home city?"


def load_average() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def hopgraph_command() -> list[str]:
    exe = Path(sys.executable).with_name("hopgraph")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "hopgraph"]


def sides(index: Path, pipeline: str) -> list[tuple[str, list[str]]]:
    py = sys.executable
    return [
        ("python -c pass", [py, "-c", "pass"]),
        ("python -c 'import torch'", [py, "-c", "import torch"]),
        ("python -c 'import hopgraph.cli'", [py, "-c", "import hopgraph.cli"]),
        (f"hopgraph search INDEX QUESTION --pipeline {pipeline} --k 5 -q",
         [*hopgraph_command(), "search", str(index), QUESTION, "--pipeline", pipeline, "--k", "5", "-q"]),
    ]


def timed(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system of the child) of one fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {r.stderr[-2000:]}")
    return seconds, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pipeline", default="dense")
    args = ap.parse_args()
    root = Path(__file__).resolve().parents[1]
    work = Path(tempfile.mkdtemp(prefix="hopgraph-cold-"))
    try:
        index = work / "index"
        subprocess.run([*hopgraph_command(), "index", str(root / "bindings" / "data" / "demo_corpus.jsonl"),
                        "--out", str(index), "--pipelines", "dense,bm25", "-q"], check=True, capture_output=True)
        print(f"load average before: {load_average()}")
        runs: dict[str, list[tuple[float, float]]] = {label: [] for label, _ in sides(index, args.pipeline)}
        for _ in range(args.rounds):
            for label, cmd in sides(index, args.pipeline):
                runs[label].append(timed(cmd))
        full = statistics.median(w for w, _ in runs[list(runs)[-1]])
        width = max(len(label) for label in runs)
        print(f"\ncold process seconds, median of {args.rounds} interleaved rounds, CPU, all-MiniLM-L6-v2, "
              "demo index (30 passages); wall = spawn to exit, CPU = user + system time of the process")
        print(f"{'side'.ljust(width)}  wall s  (min-max)    CPU s   wall x full command")
        for label, xs in runs.items():
            wall = [w for w, _ in xs]
            med = statistics.median(wall)
            cpu = statistics.median(c for _, c in xs)
            spread = f"({min(wall):.2f}-{max(wall):.2f})"
            print(f"{label.ljust(width)}  {med:6.2f}  {spread}  {cpu:6.2f}   {med / full:5.2f}")
        print(f"\nload average after: {load_average()} ({os.cpu_count()} CPUs)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

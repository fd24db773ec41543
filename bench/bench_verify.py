"""Load-time cost of index verification on a generated 10⁵-passage index.

    .venv/bin/python bench/bench_verify.py [--n 100000] [--pipelines dense,bm25,g3rag] [--repeats 3]

Builds (once, cached under ``--data``) an index of ``bench_scale``'s generated corpus with
precomputed embeddings, then times ``Index.load`` with ``verify="fast"`` (sizes, manifest
checksum, structural validation of every stored array) and ``verify="full"`` (the default: also
the XXH3 checksum of every file), each in a fresh process so the figure is what a user's
process pays, warm page cache (best of ``--repeats``), and ``hopgraph verify`` (full). The
share is the checksum's part of a full load. A cold-cache load additionally reads every file
from disk once.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from _common import table

LOAD = r"""
import sys, time
t0 = time.perf_counter()
from hopgraph import Index
t1 = time.perf_counter()
Index.load(sys.argv[1], progress=False, verify=sys.argv[2])
print(time.perf_counter() - t1)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--pipelines", default="dense,bm25,g3rag")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--data", type=Path, default=Path(".hopgraph-cache") / "bench-verify")
    args = ap.parse_args()
    from bench_scale import generate

    data = args.data / f"n{args.n}"
    generate(args.n, data)
    index_dir = data / f"index-{args.pipelines.replace(',', '-')}"
    if not (index_dir / "CURRENT").is_file():
        from hopgraph import Index

        t0 = time.perf_counter()
        Index.build(data / "corpus.jsonl", embeddings=data / "X.npy", pipelines=args.pipelines.split(","),
                    progress=False).save(index_dir, overwrite=True)
        print(f"built {index_dir} in {time.perf_counter() - t0:.1f} s")
    files = [p for p in index_dir.rglob("*") if p.is_file()]
    size_mb = sum(p.stat().st_size for p in files) / 1e6
    load_before = os.getloadavg()[0]
    seconds = {}
    for verify in ("fast", "full"):
        runs = [float(subprocess.run([sys.executable, "-c", LOAD, str(index_dir), verify], capture_output=True,
                                     text=True, check=True).stdout.split()[-1]) for _ in range(args.repeats)]
        seconds[verify] = min(runs)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "hopgraph", "verify", str(index_dir)], check=True, capture_output=True)
    verify_cmd = time.perf_counter() - t0
    share = (seconds["full"] - seconds["fast"]) / seconds["full"]
    load = os.getloadavg()
    print(f"# {args.n} passages, pipelines {args.pipelines}: {len(files)} files, {size_mb:.0f} MB; 1-min load "
          f"average {load_before:.2f} at the start, {load[0]:.2f} at the end; {os.cpu_count()} CPUs")
    print(table(["what", "seconds"], [
        ["Index.load, verify='fast' (structure, sizes)", f"{seconds['fast']:.3f}"],
        ["Index.load, verify='full' (default: + checksum of every file)", f"{seconds['full']:.3f}"],
        ["checksums: full − fast", f"{seconds['full'] - seconds['fast']:.3f} ({100 * share:.0f} % of a full load)"],
        ["hopgraph verify INDEX (fresh process, imports included)", f"{verify_cmd:.2f}"],
    ]))
    print(json.dumps({"n": args.n, "files": len(files), "mb": round(size_mb, 1), **seconds}))


if __name__ == "__main__":
    main()

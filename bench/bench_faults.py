"""Fault harness, long run: kills during build/save/replace, and every file of an index
of every pipeline corrupted in four ways, loaded with full verification (the default) and with
``verify="fast"`` (checksums off: sizes and structural validation only).

    .venv/bin/python bench/bench_faults.py [--kills 20] [--seed 0]

Prints, per kind of fault, the cases tried and their outcomes: refused (``IndexFormatError``),
identical results, crashes (the process died) and errors (any other exception), and silently
different results (valid, but not the same). Crashes and errors must be 0 in every mode; silently
different must be 0 with full verification. With checksums off a changed *value* (an embedding,
a weight, a text byte) can only change results — no structure constrains it; the table says so.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import table
import fault_harness as fh

ALL = ["dense", "bm25", "hybrid", "g3rag", "stitch", "ppr_binary", "dmar"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=20, help="SIGKILL trials during hopgraph index --overwrite")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    from hopgraph import Index
    from hopgraph.demo import DEMO_QUESTIONS, demo_corpus

    load_before = os.getloadavg()[0]
    rows, bad = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        # ---- kills
        t0 = time.perf_counter()
        corpora = [fh.synthetic_corpus(tmp / f"c{i}.jsonl", 3000, seed=args.seed + i) for i in range(2)]
        outcomes, _ = fh.kill_trials(corpora, tmp / "killed", args.kills, args.seed,
                                     ["Entity3 met Person21", "w17 w301 Title 5"])
        broken = [o for o in outcomes if o not in ("old", "new")]
        bad += len(broken)
        rows.append(["SIGKILL during index/save/replace", len(outcomes), "-",
                     f"{outcomes.count('old')} old + {outcomes.count('new')} new", 0, len(broken), 0,
                     f"{time.perf_counter() - t0:.0f}"])
        # ---- corruption
        index = Index.build(demo_corpus(), embedder="hashing-64", pipelines=ALL, params={"dmar": {"gnn_steps": 2}},
                            progress=False)
        base = index.save(tmp / "base")
        rng = np.random.default_rng(args.seed)
        for fault in fh.FAULTS:
            cases = fh.corruption_cases(base, tmp / fault, [fault], rng)
            for verify in ("full", "fast"):
                t0 = time.perf_counter()
                res = fh.load_outcomes(base, cases, ALL, list(DEMO_QUESTIONS), verify=verify)
                kinds = [fh.outcome_kind(o) for o in res.values()]
                n = {k: kinds.count(k) for k in ("refused", "same", "changed", "crash", "error")}
                bad += n["crash"] + n["error"] + (n["changed"] if verify == "full" else 0)
                changed = sorted({cases[c][0].split("/", 1)[-1] for c, o in res.items()
                                  if fh.outcome_kind(o) == "changed"})
                for c, o in res.items():
                    if fh.outcome_kind(o) in ("crash", "error"):
                        print(f"  {verify} {fault} {cases[c]}: {o}", file=sys.stderr)
                rows.append([f"{fault} in every file ({len(cases)} files), verify={verify}", len(cases),
                             n["refused"], n["same"], n["crash"], n["error"], n["changed"],
                             f"{time.perf_counter() - t0:.0f}"])
                if changed and verify == "fast":
                    print(f"  verify=fast, {fault}: valid but different results from {', '.join(changed)}")
            for case in cases:
                shutil.rmtree(case, ignore_errors=True)
    load = os.getloadavg()
    print(f"# fault harness: seed {args.seed}; 1-min load average {load_before:.2f} at the start, "
          f"{load[0]:.2f} at the end; {os.cpu_count()} CPUs")
    print(table(["fault", "cases", "refused", "identical", "crashes", "errors", "silently different", "s"], rows))
    print("ok: no crash, no error, nothing silently different with full verification" if bad == 0 else
          f"FAIL: {bad} case(s) crashed, raised another error, or changed results under full verification")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

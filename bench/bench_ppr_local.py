"""Benchmark: localised batched PPR (SPEC §2 step 6; hopgraph.kernels ``batched_ppr`` with
``region``, CPU path), its two strategies side by side on the same inputs:

* **segmented**: one block-diagonal walk, block b = the iteration matrix on region_b only,
  one iterate vector of Σ_b |R_b| entries (``segmented_ppr``);
* **union block**: the whole batch on the union of the regions as one dense block [U, B],
  each column masked to its region after every product (``CpuStep`` / ``power_iterate``).

The op chooses the segmented walk when Σ_b |R_b| ≤ ``SEGMENT_SHARE`` · U·B; here each
strategy is forced (``SEGMENT_SHARE`` set to 1 or −1) and timed interleaved, median of
``--repeats``, with the max abs difference between their π and their iteration counts.

1. A random graph: ``--n`` chunks, a directed ring plus random edges (~``--edges``, no
   dangling chunk), column-stochastic; ``--priors`` queries, each a random seed set of
   ``--seeds`` chunks plus their one-hop out-neighbours as its region (~200 chunks), its
   prior uniform on the seeds; float32 and float64 priors.
2. The crossover (``--sweep``): the same queries with their regions merged in groups of k
   (query b's region := the union of its group's), so Σ|R_b| / (U·B) grows from ~1/B to 1 —
   on the random graph, and on STITCH's first batch when the index below exists.
3. STITCH end to end on the prepared 100,000-passage index (``--scale``, skipped when
   absent; read only): all its questions, once per strategy (interleaved, median of
   ``--stitch-repeats``), per-stage seconds (``pipe.timings``), and whether the two give the
   same ids (scores within 1e-9).

Every table is printed with the date and ``os.getloadavg()`` (the machine may be shared).

Run: ``.venv/bin/python bench/bench_ppr_local.py`` (``--no-stitch`` to skip part 3).
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import time
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import scipy.sparse as sp
import torch

from suite.common import stamp
from suite.kernels import local_regions, ring_graph
from hopgraph.engine.pipelines.stitch.hypergraph import column_stochastic
from hopgraph.kernels import call

from _common import median_interleaved, table

BP = importlib.import_module("hopgraph.kernels.batched_ppr")
STRATEGIES = {"segmented": 1.0, "union block": -1.0}
SCALE = Path("/tmp/hopgraph-bench-scale/100000")


@contextlib.contextmanager
def strategy(name: str) -> Iterator[None]:
    """Force one strategy of the localised CPU path (the chooser's share: 1 = always segmented,
    −1 = never, but for an all-empty batch)."""
    old = BP.SEGMENT_SHARE
    BP.SEGMENT_SHARE = STRATEGIES[name]
    try:
        yield
    finally:
        BP.SEGMENT_SHARE = old


def forced(name: str, fn: Callable[[], object]) -> Callable[[], object]:
    def run() -> object:
        with strategy(name):
            return fn()
    return run


def shape_line(P: sp.csr_matrix, region: np.ndarray) -> str:
    """Σ|R_b|, U, their share of U·B and the entries of the union sub-matrix."""
    B = len(region)
    union = np.flatnonzero(region.any(0))
    T = int(region.sum())
    sub = P[union][:, union].nnz
    return (f"B = {B}, mean |R_b| = {T / B:.0f}, Σ|R_b| = {T:,}, union U = {len(union):,} "
            f"(Σ|R_b| / U·B = 1/{len(union) * B / max(T, 1):.1f}), {sub:,} entries in the union sub-matrix")


def compare(P, pri: np.ndarray, region: np.ndarray, kw: dict, repeats: int) -> dict[str, object]:
    """Both strategies on one input: seconds (median, interleaved), π, iterations."""
    runs = {name: forced(name, lambda: call("batched_ppr", P, pri, region=region, device="cpu", **kw))
            for name in STRATEGIES}
    out = {name: fn() for name, fn in runs.items()}  # warm, and the results compared
    sec = median_interleaved(runs, repeats)
    (seg, it_s), (blk, it_b) = out["segmented"], out["union block"]
    return {"seg": sec["segmented"], "blk": sec["union block"], "diff": float((seg - blk).abs().max()),
            "scale": float(blk.abs().max()), "it_s": it_s, "it_b": it_b}


def op_table(P, pri: np.ndarray, region: np.ndarray, d: float, tol: float, max_iter: int, repeats: int) -> None:
    print(f"\n== batched_ppr, localised: {P.shape[0]:,} chunks, {P.nnz:,} edges; d = {d}, tol = {tol}, "
          f"max_iter = {max_iter} ==")
    print(shape_line(P, region))
    print(stamp())
    rows = []
    for dtype in (np.float32, np.float64):
        r = compare(P, pri.astype(dtype), region, dict(d=d, tol=tol, max_iter=max_iter), repeats)
        same = "same" if torch.equal(r["it_s"], r["it_b"]) else "DIFFER"
        it = r["it_s"].double()
        for name, key in (("segmented", "seg"), ("union block", "blk")):
            rows.append([f"{name} ({np.dtype(dtype).name})", f"{r[key]:.4f}", f"{r[key] / r['blk']:.3f}",
                         f"{r['diff']:.1e}" if key == "seg" else "",
                         f"{int(it.max())} max, {it.mean():.1f} mean ({same})" if key == "seg" else ""])
    print(table(["strategy", "seconds", "/ union block", "max |Δπ|", "iterations"], rows))
    print(f"median of {repeats} interleaved runs of the whole op (validation included); "
          f"max |Δπ| between the two strategies' π (max π ≈ {r['scale']:.2g})")
    print(stamp())


def merged(region: np.ndarray, k: int) -> np.ndarray:
    """Each query's region replaced by the union of its group of k consecutive queries."""
    out = np.zeros_like(region)
    for s in range(0, len(region), k):
        out[s:s + k] = region[s:s + k].any(0)
    return out


def sweep_table(title: str, P, pri: np.ndarray, region: np.ndarray, kw: dict, repeats: int) -> None:
    print(f"\n== crossover: {title}; regions merged in groups of k ==")
    print(stamp())
    rows = []
    for k in (1, 2, 4, 8, 16, len(region)):
        r_k = merged(region, k)
        union = int(r_k.any(0).sum())
        share = r_k.sum() / max(union * len(r_k), 1)
        r = compare(P, pri, r_k, kw, repeats)
        rows.append([str(k), f"1/{1 / share:.1f}", f"{r['seg']:.3f}", f"{r['blk']:.3f}", f"{r['seg'] / r['blk']:.2f}",
                     f"{r['diff']:.1e}", str(int(r["it_s"].max())),
                     "segmented" if share <= BP.SEGMENT_SHARE else "union block"])
    print(table(["k", "Σ|R_b| / U·B", "segmented s", "union block s", "ratio", "max |Δπ|", "iterations",
                 f"chosen (share {BP.SEGMENT_SHARE:.3g})"], rows))
    print(f"median of {repeats} interleaved runs")
    print(stamp())


class Capture:
    """The inputs of the first localised ``batched_ppr`` call made through ``hopgraph.kernels.call``."""

    def __init__(self) -> None:
        self.args: tuple | None = None

    @contextlib.contextmanager
    def on(self) -> Iterator[None]:
        kernels = importlib.import_module("hopgraph.kernels")
        orig = kernels.call

        def spy(op, *a, **k):
            if op == "batched_ppr" and k.get("region") is not None and self.args is None:
                self.args = (a[0], np.asarray(a[1]), np.asarray(k["region"]),
                             {key: k[key] for key in ("d", "tol", "max_iter")})
            return orig(op, *a, **k)
        kernels.call = spy
        try:
            yield
        finally:
            kernels.call = orig


def stitch(scale: Path, repeats: int) -> Capture | None:
    from hopgraph.index import Index

    if not (scale / "graph_index").exists():
        print(f"\nSTITCH end to end: {scale / 'graph_index'} not found, skipped")
        return None
    index = Index.load(scale / "graph_index", embedder="hashing-384", progress=False)
    Q = np.load(scale / "Q.npy")
    questions = json.loads((scale / "questions.json").read_text())
    pipe = index.pipeline("stitch")
    cap = Capture()
    with cap.on():
        pipe.search(Q[:2], 5, questions[:2])  # warm caches
    cap.args = None
    with cap.on():
        pipe.search(Q[:64], 5, questions[:64])
    print(f"\n== STITCH end to end: {len(index.corpus):,} passages, {len(questions)} questions "
          f"(batches of {pipe.settings.batch_size or pipe.default_batch_size}, top 5, CPU; question embedding excluded) ==")
    print(stamp())
    timings: dict[str, list[dict[str, float]]] = {name: [] for name in STRATEGIES}
    results = {}
    for _ in range(max(1, repeats)):
        for name in STRATEGIES:
            with strategy(name):
                t0 = time.perf_counter()
                results[name] = pipe.search(Q, 5, questions)
                total = time.perf_counter() - t0
            timings[name].append({**pipe.timings, "total": total})
    stages = list(timings["segmented"][0])
    rows = [[name] + [f"{np.median([t[s] for t in timings[name]]):.3f}" for s in stages] for name in STRATEGIES]
    print(table(["strategy"] + [f"{s} s" for s in stages], rows))
    (ids_s, sc_s), (ids_b, sc_b) = results["segmented"], results["union block"]
    print(f"median of {repeats} interleaved searches per strategy; same ids: {np.array_equal(ids_s, ids_b)}, "
          f"max |Δscore| {np.abs(np.asarray(sc_s, np.float64) - np.asarray(sc_b, np.float64)).max():.1e}")
    print(stamp())
    return cap


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--edges", type=int, default=1_000_000)
    ap.add_argument("--priors", type=int, default=64)
    ap.add_argument("--seeds", type=int, default=20, help="seed chunks per query (its region: + one hop)")
    ap.add_argument("--d", type=float, default=0.85)
    ap.add_argument("--tol", type=float, default=1e-6)
    ap.add_argument("--max-iter", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sweep", action="store_true", help="the crossover tables (part 2)")
    ap.add_argument("--scale", type=Path, default=SCALE, help="the prepared STITCH scale folder (read only)")
    ap.add_argument("--stitch-repeats", type=int, default=3)
    ap.add_argument("--no-stitch", action="store_true")
    args = ap.parse_args()
    src, dst = ring_graph(args.n, args.edges, 0)
    P = column_stochastic(sp.csr_matrix((np.ones(len(src)), (dst, src)), shape=(args.n, args.n)))
    pri, region = local_regions(P, args.priors, args.seeds, np.random.default_rng(1))
    op_table(P, pri, region, args.d, args.tol, args.max_iter, args.repeats)
    kw = dict(d=args.d, tol=args.tol, max_iter=args.max_iter)
    if args.sweep:
        sweep_table(f"random graph, {args.seeds} seeds + one hop, float64", P, pri, region, kw, args.repeats)
    cap = None if args.no_stitch else stitch(args.scale, args.stitch_repeats)
    if cap is not None and cap.args is not None:
        sub, p, r, kw_s = cap.args
        print(f"\n== batched_ppr on STITCH's first batch ({p.dtype}, d = {kw_s['d']}, tol = {kw_s['tol']}, "
              f"max_iter = {kw_s['max_iter']}) ==")
        print(shape_line(sp.csr_matrix(sub), r))
        r_op = compare(sub, p, r, kw_s, args.repeats)
        print(table(["strategy", "seconds", "/ union block"],
                    [["segmented", f"{r_op['seg']:.4f}", f"{r_op['seg'] / r_op['blk']:.3f}"],
                     ["union block", f"{r_op['blk']:.4f}", "1.000"]]))
        print(f"max |Δπ| {r_op['diff']:.1e}; iterations {int(r_op['it_s'].max())} max, "
              f"{r_op['it_s'].double().mean():.1f} mean, same in both: {torch.equal(r_op['it_s'], r_op['it_b'])}")
        if args.sweep:
            sweep_table("STITCH's first batch", sub, p, r, kw_s, args.repeats)


if __name__ == "__main__":
    main()

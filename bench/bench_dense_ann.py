"""Dense retrieval, exact vs IVF candidates rescored exactly: build seconds, queries/s,
top-10 overlap with the exact search and peak RSS, side by side.

Data: ``bench_scale.generate`` (clustered embeddings, d = 384, 256 queries near passages),
cached under ``--workdir`` (the layout of ``bench/bench_scale.py``, so both share it), plus a
random 50,000-row sample of the largest size (the overlap sample). Each method runs in
a fresh process, on the memory-mapped ``X.npy`` as a loaded index holds it:

- ``exact``: ``DenseIndex(X, "exact")`` — faiss ``IndexFlatIP`` copy of X below ``SCAN_MIN_N``
  rows, the blocked file scan from there; its top-10 is the reference;
- ``ivf-sq8`` (one row per ``--nprobe``): ``DenseIndex(X, "ann")`` — build = IVF training and
  adding every row; then the same search with a filter passing 25 % of the rows (overlap
  against the exact filtered top-10);
- ``ivf-sq4``: the same with 4-bit codes (``code_bits=4``, STITCH's text index), more
  candidates rescored for a small k; ``detail`` gives each IVF row's top-128 overlap (STITCH's ``description_depth``);
- ``ivf-sq8 loaded``: ``DenseIndex.load`` of the IVF index the previous process saved (the
  cold start of a loaded index: validation and reading the codes into faiss) and a search;
- with ``--alternatives``: faiss ``IndexHNSWFlat`` (M 32, efConstruction 40, efSearch 64 / 128)
  and ``IndexIVFFlat`` (the same cells, float32 rows), the measured alternatives.

RSS: the process's resident set at its end (its structures held) and its peak.

With ``--shared DIR`` (the shared hotpotqa / musique sets) it also gives dense Recall@5 exact vs
``mode="ann"`` per set, the corpus optionally followed by ``--distractors`` rows (a ``.npy`` of
all-MiniLM-L6-v2 passage embeddings), so that the IVF index has many cells to miss in.

q/s: the best of 3 searches of the dataset's queries (256 generated ones), k = 10. The load
average is printed at the start and the end (the machine is shared; take ratios from one run).

    .venv/bin/python bench/bench_dense_ann.py --sizes 200000,1000000 --workdir /tmp/hopgraph-bench-scale
    .venv/bin/python bench/bench_dense_ann.py --sizes 200000 --nprobe 4,8,16,32 --alternatives
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from _common import best_of, table

K = 10
#: the wider top-k whose overlap is also reported (STITCH's ``description_depth`` description texts)
K_WIDE = 128
FILTER_FRACTION = 0.25
SAMPLE = 50_000
REPEATS = 3


def overlap(ids: np.ndarray, ref: np.ndarray) -> float:
    """Mean fraction of each reference top-k row found in the same row of ``ids``."""
    return float(np.mean([len(set(a[a >= 0]) & set(b[b >= 0])) / max(1, (b >= 0).sum()) for a, b in zip(ids, ref)]))


def filter_mask(n: int) -> np.ndarray:
    return np.random.default_rng(0).random(n) < FILTER_FRACTION


# ---------------------------------------------------------------------- children (fresh processes)
def child_exact(data: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    from hopgraph.engine.components.dense import DenseIndex

    X, Q = np.load(data / "X.npy", mmap_mode="r"), np.load(data / "Q.npy")
    dense = DenseIndex(X, "exact")
    t0 = time.perf_counter()
    kind = type(dense.index).__name__
    build = time.perf_counter() - t0
    seconds, (ids, _) = best_of(lambda: dense.topk(Q, K), REPEATS)
    np.save(data / "exact_top10.npy", ids)
    np.save(data / f"exact_top{K_WIDE}.npy", dense.topk(Q, K_WIDE)[0])
    allowed = filter_mask(len(X))
    f_seconds, (f_ids, _) = best_of(lambda: dense.topk(Q, K, allowed), REPEATS)
    np.save(data / "exact_top10_filter.npy", f_ids)
    return held([{"method": f"exact ({kind})", "build_s": build, "qps": len(Q) / seconds, "overlap": 1.0},
            {"method": f"exact, filter {FILTER_FRACTION:.0%}", "build_s": None, "qps": len(Q) / f_seconds,
             "overlap": 1.0}])


def child_ivf(data: Path, args: argparse.Namespace, bits: int = 8) -> list[dict[str, Any]]:
    """``DenseIndex(X, "ann")`` with ``bits``-bit codes: build, search per nprobe (top-10 overlap,
    and in ``detail`` the top-``K_WIDE`` overlap, STITCH's ``description_depth``), a filtered search, save."""
    from hopgraph.engine.components.dense import DenseIndex

    X, Q = np.load(data / "X.npy", mmap_mode="r"), np.load(data / "Q.npy")
    ref, f_ref = np.load(data / "exact_top10.npy"), np.load(data / "exact_top10_filter.npy")
    dense = DenseIndex(X, "ann", code_bits=bits)
    t0 = time.perf_counter()
    ivf = dense.ivf
    build = time.perf_counter() - t0
    rows = []
    for nprobe in args.nprobe:
        dense.nprobe = nprobe
        seconds, (ids, _) = best_of(lambda: dense.topk(Q, K), REPEATS)
        wide = overlap(dense.topk(Q, K_WIDE)[0], np.load(data / f"exact_top{K_WIDE}.npy"))
        rows.append({"method": f"ivf-sq{bits} nlist {ivf.nlist} nprobe {nprobe}", "build_s": build,
                     "qps": len(Q) / seconds, "overlap": overlap(ids, ref), "detail": f"top-{K_WIDE} overlap {wide:.3f}"})
    dense.nprobe = args.nprobe[0]
    allowed = filter_mask(len(X))
    seconds, (ids, _) = best_of(lambda: dense.topk(Q, K, allowed), REPEATS)
    assert allowed[ids].all() and (ids >= 0).all()
    rows.append({"method": f"ivf-sq{bits} nprobe {args.nprobe[0]}, filter {FILTER_FRACTION:.0%}", "build_s": None,
                 "qps": len(Q) / seconds, "overlap": overlap(ids, f_ref)})
    if bits == 8:   # the loaded-index row reads this one
        t0 = time.perf_counter()
        entry = dense.save_ivf(data / "ivf")
        (data / "ivf" / "entry.json").write_text(json.dumps(entry))
        rows[0]["detail"] += f", save {time.perf_counter() - t0:.1f} s"
    return held(rows)


def child_ivf_sq4(data: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The 4-bit codes STITCH's text index uses (``stitch.TEXT_CODE_BITS``)."""
    return child_ivf(data, args, bits=4)


def child_ivf_loaded(data: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    from hopgraph.engine.components.dense import DenseIndex

    X, Q = np.load(data / "X.npy", mmap_mode="r"), np.load(data / "Q.npy")
    entry = json.loads((data / "ivf" / "entry.json").read_text())
    t0 = time.perf_counter()
    dense = DenseIndex.load(data / "ivf", entry, X, "ann")
    dense.nprobe = args.nprobe[0]
    load = time.perf_counter() - t0
    seconds, (ids, _) = best_of(lambda: dense.topk(Q, K), REPEATS)
    return held([{"method": f"ivf-sq8 loaded, nprobe {args.nprobe[0]}", "build_s": load, "qps": len(Q) / seconds,
                  "overlap": overlap(ids, np.load(data / "exact_top10.npy")), "detail": "build s = load + validate"}])


def child_hnsw(data: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """faiss HNSW over the float32 rows (the graph alternative)."""
    import faiss

    from hopgraph.engine.components.exact_search import row_blocks

    X, Q = np.load(data / "X.npy", mmap_mode="r"), np.load(data / "Q.npy")
    ref = np.load(data / "exact_top10.npy")
    hnsw = faiss.IndexHNSWFlat(X.shape[1], 32, faiss.METRIC_INNER_PRODUCT)
    hnsw.hnsw.efConstruction = 40
    t0 = time.perf_counter()
    for _, block in row_blocks(X):
        hnsw.add(block)
    build = time.perf_counter() - t0
    rows = []
    for ef in (64, 128):
        params = faiss.SearchParametersHNSW()
        params.efSearch = ef
        seconds, (_, ids) = best_of(lambda: hnsw.search(Q, K, params=params), REPEATS)
        rows.append({"method": f"hnsw M 32 efSearch {ef}", "build_s": build, "qps": len(Q) / seconds,
                     "overlap": overlap(ids, ref)})
    return held(rows)


def child_ivf_flat(data: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The float IVF: the cells of ``IVFIndex`` (same training), float32 rows instead of 8-bit codes."""
    import faiss

    from hopgraph.engine.components.ivf import ivf_nlist, train_and_fill

    X, Q = np.load(data / "X.npy", mmap_mode="r"), np.load(data / "Q.npy")
    flat = faiss.IndexIVFFlat(faiss.IndexFlatIP(X.shape[1]), X.shape[1], ivf_nlist(len(X)), faiss.METRIC_INNER_PRODUCT)
    t0 = time.perf_counter()
    train_and_fill(flat, X)
    build = time.perf_counter() - t0
    params = faiss.SearchParametersIVF()
    params.nprobe = args.nprobe[0]
    seconds, (_, ids) = best_of(lambda: flat.search(Q, K, params=params), REPEATS)
    return held([{"method": f"ivf-flat nlist {flat.nlist} nprobe {args.nprobe[0]}", "build_s": build,
                  "qps": len(Q) / seconds, "overlap": overlap(ids, np.load(data / "exact_top10.npy"))}])


def held(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` with this process's resident set now and its peak (GiB; call it while the
    structures are alive). The peak is ``VmHWM``, this process image's own high-water mark:
    ``ru_maxrss`` survives ``exec`` on Linux and would report the parent's peak."""
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    for r in rows:
        r["rss_gb"] = int(status["VmRSS"].split()[0]) / 1024 ** 2
        r["peak_rss_gb"] = int(status["VmHWM"].split()[0]) / 1024 ** 2
    return rows


CHILDREN = {"exact": child_exact, "ivf": child_ivf, "ivf-sq4": child_ivf_sq4, "ivf-loaded": child_ivf_loaded,
            "hnsw": child_hnsw,
            "ivf-flat": child_ivf_flat}


def run_child(name: str, data: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """One method in a fresh interpreter; its rows (each with the process's RSS at the end, its
    structures held, and its peak RSS: :func:`held`)."""
    cmd = [sys.executable, __file__, "--child", name, "--data", str(data), "--nprobe", ",".join(map(str, args.nprobe))]
    if args.nlist_per_sqrt_n is not None:
        cmd += ["--nlist-per-sqrt-n", str(args.nlist_per_sqrt_n)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("[")]
    if proc.returncode != 0 or not lines:
        return [{"method": name, "error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}]
    return json.loads(lines[-1])


def make_sample(source: Path, out: Path, n: int) -> None:
    """``n`` random rows of ``source/X.npy`` (sorted, seed 0) and the same queries, under ``out``."""
    if (out / "done").is_file():
        return
    out.mkdir(parents=True, exist_ok=True)
    X = np.load(source / "X.npy", mmap_mode="r")
    rows = np.sort(np.random.default_rng(0).choice(len(X), n, replace=False))
    np.save(out / "X.npy", np.asarray(X[rows]))
    np.save(out / "Q.npy", np.load(source / "Q.npy"))
    (out / "done").write_text("ok")


def shared_recall(shared: Path, workdir: Path, distractors: Path | None, nprobe: int) -> list[dict[str, Any]]:
    """Dense Recall@5 of the shared sets' questions (all-MiniLM-L6-v2, embeddings cached under
    ``workdir``), exact vs IVF candidates rescored exactly (``mode="ann"``), over each set's
    corpus followed by the ``distractors`` rows (a ``.npy`` of the same embedder), if any."""
    from hopgraph.engine.components.corpus import Corpus
    from hopgraph.engine.components.dense import DenseIndex
    from hopgraph.engine.embedders import resolve_embedder
    from hopgraph.engine.evaluation import load_questions, recall_at_k

    embedder = None
    extra = np.zeros((0, 384), np.float32) if distractors is None else np.load(distractors, mmap_mode="r")
    rows = []
    for name in ("hotpotqa", "musique"):
        corpus = Corpus.from_jsonl(shared / name / "corpus.jsonl")
        questions = load_questions(shared / name / "questions.jsonl", corpus)
        cache = workdir / f"shared-{name}-minilm.npz"
        if not cache.is_file():
            embedder = embedder or resolve_embedder("minilm")
            np.savez(cache, X=embedder.encode(corpus.embedding_texts()), Q=embedder.encode([q.text for q in questions]))
        with np.load(cache) as z:
            X, Q = (z[key] / np.linalg.norm(z[key], axis=1, keepdims=True) for key in ("X", "Q"))
        X = np.concatenate([X.astype(np.float32), np.asarray(extra, np.float32)])
        Q = Q.astype(np.float32)
        gold = [[corpus.position(g) for g in q.gold_ids] for q in questions]
        exact_ids, _ = DenseIndex(X, "exact").topk(Q, 10)
        ann = DenseIndex(X, "ann", nprobe=nprobe)
        ann_ids, _ = ann.topk(Q, 10)
        rows.append({"set": name, "rows": len(X), "nlist": ann.ivf.nlist, "nprobe": min(nprobe, ann.ivf.nlist),
                     "exact": float(recall_at_k(exact_ids, gold, 5).mean()),
                     "ann": float(recall_at_k(ann_ids, gold, 5).mean()), "overlap": overlap(ann_ids, exact_ids)})
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="200000,1000000", help="comma-separated corpus sizes")
    p.add_argument("--workdir", default="/tmp/hopgraph-bench-scale", help="data cache (bench_scale's layout)")
    p.add_argument("--nprobe", default=None, help="comma-separated nprobe values (default: DEFAULT_NPROBE)")
    p.add_argument("--nlist-per-sqrt-n", type=float, default=None,
                   help="IVF cells per √N (default: ivf.NLIST_PER_SQRT_N)")
    p.add_argument("--sample", type=int, default=SAMPLE,
                   help="rows of the overlap sample of the largest size (0: none)")
    p.add_argument("--alternatives", action="store_true", help="also HNSW and the float IVF")
    p.add_argument("--extra", default="", help="comma-separated further data folders holding X.npy and Q.npy")
    p.add_argument("--shared", default="", help="shared data folder (hotpotqa/, musique/): also dense Recall@5, "
                   "exact vs IVF")
    p.add_argument("--distractors", default=None, help="a .npy of embeddings (same embedder) appended to each "
                   "shared corpus for the Recall@5 rows")
    p.add_argument("--json", help="write the rows as JSON here")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--data", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.nprobe is None:
        from hopgraph.engine.components.ivf import DEFAULT_NPROBE
        args.nprobe = [DEFAULT_NPROBE]
    else:
        args.nprobe = [int(x) for x in str(args.nprobe).split(",")]
    if args.child:
        if args.nlist_per_sqrt_n is not None:
            from hopgraph.engine.components import ivf
            ivf.NLIST_PER_SQRT_N = args.nlist_per_sqrt_n
        print(json.dumps(CHILDREN[args.child](Path(args.data), args)))
        return 0

    sys.path.insert(0, str(Path(__file__).parent))
    from bench_scale import generate

    load_start = os.getloadavg()
    sizes = [int(x) for x in args.sizes.split(",") if x]
    datasets = []
    for n in sizes:
        data = Path(args.workdir) / str(n)
        generate(n, data)
        datasets.append((f"{n:,}", data))
    if args.sample and sizes:
        sample = Path(args.workdir) / f"sample{args.sample}-of-{max(sizes)}"
        make_sample(Path(args.workdir) / str(max(sizes)), sample, args.sample)
        datasets.append((f"{args.sample:,} of {max(sizes):,}", sample))
    for extra in filter(None, args.extra.split(",")):
        datasets.append((Path(extra).name, Path(extra)))
    results: list[dict[str, Any]] = []
    for label, data in datasets:
        names = ["exact", "ivf", "ivf-sq4", "ivf-loaded"] + (["hnsw", "ivf-flat"] if args.alternatives else [])
        for name in names:
            for r in run_child(name, data, args):
                r["N"] = label
                results.append(r)
                print(json.dumps(r), flush=True)
    recall = shared_recall(Path(args.shared), Path(args.workdir), args.distractors and Path(args.distractors),
                           args.nprobe[0]) if args.shared else []
    load_end = os.getloadavg()
    print()
    print(f"bench_dense_ann: d=384, 256 queries, k={K}, {os.cpu_count()} CPU cores, each method in a fresh process; "
          f"load average at start {load_start[0]:.2f} / {load_start[1]:.2f} / {load_start[2]:.2f}, "
          f"at end {load_end[0]:.2f} / {load_end[1]:.2f} / {load_end[2]:.2f}")
    exact_qps = {r["N"]: r["qps"] for r in results if r.get("method", "").startswith("exact (")}
    rows = []
    for r in results:
        if "error" in r:
            rows.append([r["N"], r["method"], "error: " + r["error"][:80], "", "", "", "", "", ""])
            continue
        rows.append([r["N"], r["method"], "" if r["build_s"] is None else f"{r['build_s']:.1f}", f"{r['qps']:,.0f}",
                     f"{r['qps'] / exact_qps[r['N']]:.1f}x" if r["N"] in exact_qps else "",
                     f"{r['overlap']:.4f}", f"{r['rss_gb']:.2f}", f"{r['peak_rss_gb']:.2f}", r.get("detail", "")])
    print(table(["N", "method", "build s", "q/s", "vs exact", "top-10 overlap", "RSS GB", "peak RSS GB", "note"], rows))
    if recall:
        print()
        print(table(["set", "corpus rows", "nlist", "nprobe", "Recall@5 exact", "Recall@5 ivf", "top-10 overlap"],
                    [[r["set"], f"{r['rows']:,}", r["nlist"], r["nprobe"], f"{r['exact']:.3f}", f"{r['ann']:.3f}",
                      f"{r['overlap']:.4f}"] for r in recall]))
    if args.json:
        Path(args.json).write_text(json.dumps({"load_start": load_start, "load_end": load_end, "rows": results,
                                               "recall": recall}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

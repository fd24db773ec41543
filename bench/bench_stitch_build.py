"""STITCH index build vs dense index build of the same corpus, each build in a
fresh process, the two alternating, with the STITCH build's time split by step.

    .venv/bin/python bench/bench_stitch_build.py --data /work/shared/data/hotpotqa [--runs 2]

What each side includes (both: ``Index.build(corpus, embedder="minilm", pipelines=[one])`` in a
fresh interpreter, model loading excluded, the embedder created before the clock starts):

- **dense**: embedding every passage (``embedder.encode``, what ``Index.build`` does) + the dense
  pipeline's fit (the exact faiss index).
- **stitch**: the same passage embedding (STITCH ranks with the cosine to the passages and reuses
  a passage's row for its title state's description, so a STITCH-only index pays it too) + the
  ``stitch`` fit: the zero-token extraction, the embedding of the distinct topic/description texts
  (``embed_texts``), the hypergraph arrays (``build_hypergraph``) and the BM25 index (hybrid
  relevance; "other" below). With the default ``text_pooling="late"`` the extraction runs before
  the passages are embedded and the texts are pooled in the passages' own forward pass
  (``engine/components/late_pooling.py``), so "passages s" holds the text embedding and "texts" in the steps
  column is only the texts embedded on their own (past the model's window).
- **stitch-separate**: the same with ``text_pooling="separate"`` (every text embedded on its own),
  built in the same run for the side-by-side (``docs/decisions/stitch-late-pooling.md``).

The ratio ``stitch / dense`` is the STITCH build's cost in dense builds;
``(stitch - passages) / dense`` is STITCH's own extra cost after the passage pass.

``--order-sample M`` adds a side-by-side of the packed text embedding
(``packed_bert.encode_bulk``) of M of the corpus's topic/description texts in chunks taken in input
order vs in length order (what ``encode_bulk`` does), alternating, best of 2, in one process.

Step times come from wrapping the functions the pipeline calls (no change to the code measured).
Every row prints the 1-minute load average at its start and end (on a shared machine compare
ratios from one run, never figures across runs).
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


def child(side: str, data: Path) -> dict:
    """One build in this (fresh) process; returns its times in seconds."""
    import hopgraph
    import hopgraph.engine.components.shared as components
    import hopgraph.engine.pipelines.stitch.pipeline as stitch
    from hopgraph.engine.components.corpus import Corpus
    from hopgraph.engine.embedders import resolve_embedder

    steps: dict[str, float] = {}

    def timed(module, name: str, label: str) -> None:
        fn = getattr(module, name)

        def wrapper(*a, **kw):
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                steps[label] = steps.get(label, 0.0) + time.perf_counter() - t0

        setattr(module, name, wrapper)

    import hopgraph.index as index_module

    timed(components, "extract", "extraction")
    timed(index_module, "extract", "extraction")
    timed(stitch, "embed_texts", "text embedding")
    timed(stitch, "build_hypergraph", "hypergraph")
    corpus = Corpus.from_jsonl(data / "corpus.jsonl")
    emb = resolve_embedder("minilm")
    emb.encode(["warm up"], progress=False)
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    pipeline = side.split("-")[0]
    params = {"stitch": {"text_pooling": "separate"}} if side == "stitch-separate" else None
    index = hopgraph.Index.build(corpus, embedder=emb, pipelines=[pipeline], params=params, progress=False)
    total = time.perf_counter() - t0
    fit = index.fit_seconds.get(pipeline, 0.0)
    out = {"total": total, "passages": index.embed_seconds, "fit": fit, "load": [load0, os.getloadavg()[0]],
           "passages_n": len(corpus)}
    if pipeline == "stitch":
        H = index.pipelines["stitch"].H
        out.update({k: steps.get(k, 0.0) for k in ("extraction", "text embedding", "hypergraph")})
        in_passage_pass = steps.get("extraction", 0.0) if side == "stitch" else 0.0  # late: before embedding
        out["other"] = fit - sum(steps.values()) + in_passage_pass
        out["texts"] = len(H.text_emb)
    return out


def order_check(data: Path, sample: int) -> list[list]:
    """encode_bulk in input order vs length order on ``sample`` texts of the corpus's extraction."""
    import numpy as np

    import hopgraph.engine.embedders.packed_bert as pb
    from hopgraph.engine.components.corpus import Corpus
    from hopgraph.engine.embedders import resolve_embedder
    from hopgraph.engine.components.extraction import extract

    corpus = Corpus.from_jsonl(data / "corpus.jsonl")
    passages = set(corpus.embedding_texts())
    texts = [t for t in extract(corpus).texts if t not in passages][:sample]
    emb = resolve_embedder("minilm")
    packed = pb.PackedBertEncoder.for_embedder(emb)

    def input_order() -> np.ndarray:
        return np.concatenate([packed.encode(texts[a:a + pb.BULK_CHUNK]) for a in range(0, len(texts), pb.BULK_CHUNK)])

    best = {"input order": float("inf"), "length order": float("inf")}
    out = {}
    load0 = os.getloadavg()[0]
    for _ in range(2):
        for name, fn in (("input order", input_order), ("length order", lambda: pb.encode_bulk(emb, texts))):
            t0 = time.perf_counter()
            out[name] = fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    diff = float(np.abs(out["input order"] - out["length order"]).max())
    return [[data.name, len(texts), f"{best['input order']:.1f}", f"{best['length order']:.1f}",
             f"{best['length order'] / best['input order']:.2f}x", f"{diff:.1e}",
             f"{load0:.2f}->{os.getloadavg()[0]:.2f}"]]


def run_child(side: str, data: Path) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", side, "--data", str(data)],
                          capture_output=True, text=True)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"{side} build failed: {proc.stderr.strip()[-2000:]}")
    return json.loads(lines[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", action="append", required=True, help="folder with corpus.jsonl (repeatable)")
    ap.add_argument("--runs", type=int, default=1, help="dense/stitch pairs per corpus")
    ap.add_argument("--order-sample", type=int, default=0,
                    help="also time input-order vs length-order packed embedding of this many texts")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, Path(args.data[0]))))
        return 0
    if args.order_sample:
        rows = [r for folder in args.data for r in order_check(Path(folder), args.order_sample)]
        print(table(["corpus", "texts", "input order s", "length order s", "length / input", "max |diff|",
                     "1-min load"], rows), flush=True)
    rows = []
    for folder in args.data:
        data = Path(folder)
        for run in range(1, args.runs + 1):
            d = run_child("dense", data)
            for side in ("stitch", "stitch-separate"):
                s = run_child(side, data)
                steps = " / ".join(f"{s[k]:.1f}" for k in ("extraction", "text embedding", "hypergraph", "other"))
                rows.append([f"{data.name} #{run}", side, d["passages_n"], s["texts"], f"{d['total']:.1f}",
                             f"{s['total']:.1f}", f"{s['passages']:.1f}", steps, f"{s['total'] / d['total']:.2f}x",
                             f"{(s['total'] - s['passages']) / d['total']:.2f}x",
                             f"{d['load'][0]:.2f}->{d['load'][1]:.2f}, {s['load'][0]:.2f}->{s['load'][1]:.2f}"])
                print(f"# {rows[-1]}", flush=True)
    print(f"bench_stitch_build: MiniLM, fresh process per build, {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')}")
    print(table(["corpus / run", "stitch side", "passages", "texts", "dense s", "stitch s", "stitch: passages s",
                 "extract / texts / hypergraph / other s", "stitch / dense", "(stitch - passages) / dense",
                 "1-min load (dense, stitch)"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

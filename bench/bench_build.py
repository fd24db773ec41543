"""Build of every pipeline over one corpus: time, what is stored, how often extraction runs,
and Recall@5 of each pipeline (the shared components: ``docs/decisions/shared-components-build.md``).

    .venv/bin/python bench/bench_build.py --data ../shared/data/hotpotqa [--embeddings X.npy]

The passage embeddings are computed once (MiniLM) and cached in ``--embeddings`` so the
timed part is the build itself: ``Index.build(corpus, embeddings=X, pipelines=all seven)``
(every pipeline fitted, embedding of the passages excluded; the STITCH topic/description
embeddings are included) and ``Index.save``. Search throughput is over the loaded index, question embedding excluded:
the first search (caches built) and the best of ``--repeats`` warm ones. Extraction runs are counted by wrapping
``hopgraph.engine.components.extraction.extract`` in every hopgraph module that imported it by name
(pipeline modules imported later see the wrapper too). The saved
index is walked for BM25 stores (``params.index.json`` of bm25s) and faiss files.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import best_of, table

PIPELINES = ("dense", "bm25", "hybrid", "g3rag", "stitch", "ppr_binary", "dmar")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="folder with corpus.jsonl and questions.jsonl")
    ap.add_argument("--embeddings", help="cache of the MiniLM passage embeddings (.npy; written if absent)")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3, help="warm searches per pipeline (the best is shown)")
    args = ap.parse_args()
    load_before = os.getloadavg()[0]

    import hopgraph.engine.components.extraction as extraction

    calls = {"extract": 0}
    original = extraction.extract

    def counted(*a, **kw):
        calls["extract"] += 1
        return original(*a, **kw)

    import hopgraph

    for module in list(sys.modules.values()):  # every module that imported extract by name
        if getattr(module, "__name__", "").startswith("hopgraph") and getattr(module, "extract", None) is original:
            module.extract = counted
    from hopgraph.engine.components.corpus import Corpus
    from hopgraph.engine.evaluation import load_questions, recall_at_k

    data = Path(args.data)
    corpus = Corpus.from_jsonl(data / "corpus.jsonl")
    cache = Path(args.embeddings) if args.embeddings else \
        Path(tempfile.gettempdir()) / f"hopgraph-bench-{corpus.checksum[:12]}-minilm.npy"
    from hopgraph.engine.embedders import resolve_embedder

    emb = resolve_embedder("minilm")
    if not cache.is_file():
        np.save(cache, emb.encode(corpus.embedding_texts(), progress=False))
    X = np.load(cache)

    t0 = time.perf_counter()
    index = hopgraph.Index.build(corpus, embedder=emb, embeddings=X, pipelines=PIPELINES, progress=False)
    build_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        index.save(Path(tmp) / "idx")
        save_s = time.perf_counter() - t0
        files = [p for p in (Path(tmp) / "idx").rglob("*") if p.is_file()]
        bm25_stores = sum(1 for p in files if p.name == "params.index.json")
        faiss_files = sum(1 for p in files if p.suffix == ".faiss")
        size_mb = sum(p.stat().st_size for p in files) / 1e6
        t0 = time.perf_counter()
        loaded = hopgraph.Index.load(Path(tmp) / "idx", embedder=emb, progress=False)
        load_s = time.perf_counter() - t0

        questions = load_questions(data / "questions.jsonl", corpus)
        texts = [q.text for q in questions]
        gold = [[corpus.position(g) for g in q.gold_ids] for q in questions]
        Q = emb.encode(texts, progress=False)
        rows = []
        for name in PIPELINES:
            t0 = time.perf_counter()
            ids, _ = loaded.search_arrays(texts, pipeline=name, k=args.k, query_embeddings=Q)
            first = len(texts) / (time.perf_counter() - t0)
            warm, _ = best_of(lambda: loaded.search_arrays(texts, pipeline=name, k=args.k, query_embeddings=Q),
                              args.repeats)
            rows.append([name, f"{index.fit_seconds.get(name, 0.0):.2f}",
                         f"{recall_at_k(ids, gold, args.k).mean():.3f}", f"{first:.0f}",
                         f"{len(texts) / warm:.0f}"])

    load = os.getloadavg()
    print(f"# {data.name}: {len(corpus)} passages, {len(texts)} questions; 1-min load average "
          f"{load_before:.2f} at the start, {load[0]:.2f} at the end; {os.cpu_count()} CPUs")
    print(table(["pipeline", "fit s", f"R@{args.k}", "q/s first search", f"q/s warm (best of {args.repeats})"],
                rows))
    print(table(["what", "value"], [
        ["build, all seven (s)", f"{build_s:.2f}"], ["save (s)", f"{save_s:.2f}"], ["load (s)", f"{load_s:.2f}"],
        ["extraction runs", calls["extract"]], ["BM25 stores saved", bm25_stores],
        ["faiss files saved", faiss_files], ["index size (MB)", f"{size_mb:.1f}"]]))
    sys.stdout.flush()


if __name__ == "__main__":
    main()

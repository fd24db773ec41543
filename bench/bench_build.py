"""Build of every pipeline over one corpus: time, what is stored, how often extraction runs,
and Recall@5 of each pipeline (the shared components: ``docs/decisions/shared-components-build.md``).

    .venv/bin/python bench/bench_build.py --data ../shared/data/hotpotqa [--embeddings X.npy] [--pipelines dense,dmar,hop]

    .venv/bin/python bench/bench_build.py --data ../shared/data/hotpotqa --cli-rounds 2

``--cli-rounds R`` instead times ``hopgraph index CORPUS --out DIR -q`` (MiniLM, the CLI's default
embedder, streamed through its work directory) with the dense pipeline alone and with six
(``dense,bm25,hybrid,g3rag,stitch,dmar``), each build a fresh interpreter running the CLI's ``main``,
the two alternating R rounds each, and prints every run's stages (the passage embedding pass, which
holds STITCH's extraction and late-pooled texts when STITCH is built; each pipeline's fit; the
save), the texts and tokens that went through the transformer, wall and CPU seconds (the
process's, imports included), the 1-minute load at each run's start, and the ratio of the medians
six / dense.

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
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import best_of, stamp, table

PIPELINES = ("dense", "bm25", "hybrid", "g3rag", "stitch", "ppr_binary", "dmar")
#: the two sides of ``--cli-rounds``
CLI_SIDES = {"dense": "dense", "six": "dense,bm25,hybrid,g3rag,stitch,dmar"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="folder with corpus.jsonl and questions.jsonl")
    ap.add_argument("--embeddings", help="cache of the MiniLM passage embeddings (.npy; written if absent)")
    ap.add_argument("--pipelines", default=",".join(PIPELINES), help="comma-separated pipelines to build")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3, help="warm searches per pipeline (the best is shown)")
    ap.add_argument("--cli-rounds", type=int, default=0,
                    help="time `hopgraph index` dense-only vs six pipelines instead, this many rounds each")
    ap.add_argument("--cli-child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.cli_child:
        print(json.dumps(cli_child(CLI_SIDES[args.cli_child], Path(args.data))))
        return
    if args.cli_rounds:
        cli_ratio(Path(args.data), args.cli_rounds)
        return
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
    pipelines = [p for p in args.pipelines.split(",") if p]
    index = hopgraph.Index.build(corpus, embedder=emb, embeddings=X, pipelines=pipelines, progress=False)
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
        for name in pipelines:
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
        [f"build, {', '.join(pipelines)} (s)", f"{build_s:.2f}"], ["save (s)", f"{save_s:.2f}"], ["load (s)", f"{load_s:.2f}"],
        ["extraction runs", calls["extract"]], ["BM25 stores saved", bm25_stores],
        ["faiss files saved", faiss_files], ["index size (MB)", f"{size_mb:.1f}"]]))
    sys.stdout.flush()


def cli_child(pipelines: str, data: Path) -> dict:
    """One ``hopgraph index`` (the CLI's ``main``) in this fresh process, with its stages timed by
    wrapping the functions the build calls (the code measured is unchanged)."""
    t_start = time.perf_counter()
    from hopgraph import cli
    from hopgraph.engine.embedders.packed_bert import PackedBertEncoder
    from hopgraph.index import Index

    stages: dict = {"texts": 0, "tokens": 0, "model s": 0.0}
    hidden, build, save = PackedBertEncoder._hidden, Index.build.__func__, Index.save

    def counted_hidden(self, texts, *rest):
        t0 = time.perf_counter()
        out = hidden(self, texts, *rest)
        stages["model s"] += time.perf_counter() - t0
        stages["texts"] += len(texts)
        stages["tokens"] += int(out[0].shape[0])
        return out

    def kept_build(cls, *a, **kw):
        index = build(cls, *a, **kw)
        stages["embedding pass s"] = index.embed_seconds
        stages.update({f"fit {p} s": t for p, t in index.fit_seconds.items()})
        return index

    def timed_save(self, *a, **kw):
        t0 = time.perf_counter()
        out = save(self, *a, **kw)
        stages["save s"] = time.perf_counter() - t0
        return out

    PackedBertEncoder._hidden, Index.build, Index.save = counted_hidden, classmethod(kept_build), timed_save
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        status = cli.main(["index", str(data / "corpus.jsonl"), "--out", str(Path(tmp) / "idx"),
                           "--pipelines", pipelines, "-q"])
        stages["cli main s"] = time.perf_counter() - t0
    if status != 0:
        raise SystemExit(f"hopgraph index exited with {status}")
    stages["in process s"] = time.perf_counter() - t_start
    return stages


def cli_ratio(data: Path, rounds: int) -> None:
    """``--cli-rounds``: the dense-only and six-pipeline builds alternating, a table of their runs
    and the ratio of the median wall (and CPU) seconds."""
    rows, wall, cpu = [], {k: [] for k in CLI_SIDES}, {k: [] for k in CLI_SIDES}
    keys = ["embedding pass s", "fit dense s", "fit bm25 s", "fit hybrid s", "fit g3rag s", "fit stitch s",
            "fit dmar s", "save s"]
    for r in range(1, rounds + 1):
        for side in CLI_SIDES:
            load = os.getloadavg()[0]
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, __file__, "--data", str(data), "--cli-child", side],
                                  capture_output=True, text=True)
            seconds = time.perf_counter() - t0
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
            if proc.returncode != 0 or not lines:
                raise SystemExit(f"{side} build failed: {proc.stderr.strip()[-2000:]}")
            st = json.loads(lines[-1])
            used = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
            wall[side].append(seconds)
            cpu[side].append(used)
            rows.append([f"{side}, round {r}", f"{load:.2f}", f"{seconds:.1f}", f"{used:.1f}"]
                        + [f"{st[k]:.2f}" if k in st else "" for k in keys]
                        + [f"{st['model s']:.1f}", st["texts"], st["tokens"]])
            print("# " + " | ".join(str(c) for c in rows[-1]), flush=True)
    med = {k: (statistics.median(wall[k]), statistics.median(cpu[k])) for k in CLI_SIDES}
    print(f"# {data.name}: hopgraph index, MiniLM, fresh process per build, {os.cpu_count()} CPUs")
    print(table(["run", "1-min load", "wall s", "CPU s", "embedding pass", "fit dense", "fit bm25", "fit hybrid",
                 "fit g3rag", "fit stitch", "fit dmar", "save", "in the model", "texts run", "tokens run"], rows))
    print(f"median wall: dense {med['dense'][0]:.1f} s, six {med['six'][0]:.1f} s, six / dense "
          f"{med['six'][0] / med['dense'][0]:.3f}; median CPU: dense {med['dense'][1]:.1f} s, six "
          f"{med['six'][1]:.1f} s, six / dense {med['six'][1] / med['dense'][1]:.3f}")
    print(stamp())


if __name__ == "__main__":
    main()

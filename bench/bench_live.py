"""Live-index benchmark: the cost of ``Index.add`` against a rebuild, the search
overhead of filters, and what an incremental add changes before ``Index.compact()``.

Two parts, each printing a table with the load average:

* ``cost`` (generated data, ``bench_scale.generate``: N clustered d = 384 embeddings and
  passages naming entities): per pipeline, the rebuild — ``Index.build`` of the whole corpus
  from its precomputed embeddings with that pipeline only (its shared components included,
  embedding excluded) — against ``Index.add`` of the last 1 % / 10 % to an index built on the
  rest (the update only: the added passages come with their embeddings; ``update_seconds``).
  The embedding a real add or rebuild also pays is one extra row: MiniLM measured on 1,000
  passages and scaled to the added / whole corpus. Then the search cost (questions/s, 256
  questions, k = 10, given their embeddings) without a filter and with ``where`` filters passing
  1 % and 50 % of the corpus, and the top-10 overlap of add-without-compact with the rebuild.
* ``recall`` (real data: ``$DATA/musique``, ``$DATA/hotpotqa``; the cached MiniLM index of
  ``hopgraph eval``): Recall@5 ± standard error of a full build, of a build of a random 80 %
  plus ``add`` of the other 20 % (before ``compact()``), and after ``compact()``. Every text is
  embedded by MiniLM at most once (:class:`MemoEmbedder`: what the cached index holds is looked
  up), so the three builds see identical vectors.

Usage::

    .venv/bin/python bench/bench_live.py cost --n 100000 [--pipelines dense,bm25,...] [--json out.json]
    .venv/bin/python bench/bench_live.py recall --data ${DATA:-../shared/data}
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _common import table

ALL = ("dense", "bm25", "hybrid", "g3rag", "stitch", "ppr_binary", "dmar")


def load_average() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


# ---------------------------------------------------------------------- cost
def _corpus_rows(path: Path):
    from hopgraph.engine.components.corpus import Corpus

    recs = [json.loads(line) for line in open(path, encoding="utf-8")]
    for i, r in enumerate(recs):
        r["metadata"] = {"bucket": i % 100}
    return recs, Corpus


def _build(recs, X, pipeline: str):
    from hopgraph import Index

    return Index.build(recs, embedder="hashing-384", embeddings=X, pipelines=[pipeline], progress=False)


def _qps(index, pipeline: str, Q: np.ndarray, questions: list[str], **filters) -> float:
    index.search_arrays(questions[:8], pipeline=pipeline, k=10, query_embeddings=Q[:8], **filters)  # warm
    t0 = time.perf_counter()
    index.search_arrays(questions, pipeline=pipeline, k=10, query_embeddings=Q, **filters)
    return len(questions) / (time.perf_counter() - t0)


def minilm_seconds_per_passage(texts: list[str]) -> float:
    """MiniLM encoding time per passage on (up to) 1,000 of ``texts`` (after a warm-up batch)."""
    from hopgraph.engine.embedders import resolve_embedder

    emb = resolve_embedder("minilm")
    emb.encode(texts[:64], batch_size=64, progress=False)
    sample = texts[:1000]
    t0 = time.perf_counter()
    emb.encode(sample, batch_size=64, progress=False)
    return (time.perf_counter() - t0) / len(sample)


def run_cost(n: int, pipelines: list[str], fractions: list[float], work: Path) -> dict:
    import bench_scale

    data = work / f"gen-{n}"
    bench_scale.generate(n, data)
    X = np.load(data / "X.npy")
    Q = np.load(data / "Q.npy")
    questions = json.loads((data / "questions.json").read_text())
    recs, _ = _corpus_rows(data / "corpus.jsonl")
    texts = [f"{r['title']}: {r['text']}" for r in recs[:1000]]
    per_passage = minilm_seconds_per_passage(texts)
    out = {"n": n, "minilm_seconds_per_passage": per_passage, "pipelines": {}}
    for p in pipelines:
        t0 = time.perf_counter()
        full = _build(recs, X, p)
        rebuild = time.perf_counter() - t0
        row = {"rebuild_s": rebuild, "add": {}}
        ref = full.search_arrays(questions, pipeline=p, k=10, query_embeddings=Q)[0]
        row["qps"] = {"none": _qps(full, p, Q, questions),
                      "where 1%": _qps(full, p, Q, questions, where={"bucket": 0}),
                      "where 50%": _qps(full, p, Q, questions, where={"bucket": list(range(50))})}
        del full
        for f in fractions:
            m = max(1, int(round(f * n)))
            base = _build(recs[:n - m], X[:n - m], p)
            report = base.add(recs[n - m:], embeddings=X[n - m:])
            got = base.search_arrays(questions, pipeline=p, k=10, query_embeddings=Q)[0]
            overlap = np.mean([len(set(a[a >= 0]) & set(b[b >= 0])) / max(1, len(b[b >= 0]))
                               for a, b in zip(got, ref)])
            row["add"][f] = {"update_s": report.update_seconds, "top10_overlap": float(overlap)}
            del base
        out["pipelines"][p] = row
        print(f"[bench_live] {p}: rebuild {rebuild:.1f} s, "
              + ", ".join(f"add {f:.0%} {v['update_s']:.2f} s" for f, v in row["add"].items()), flush=True)
    return out


def print_cost(res: dict, fractions: list[float]) -> None:
    n, spp = res["n"], res["minilm_seconds_per_passage"]
    head = ["pipeline", "rebuild (s)"] + [x for f in fractions for x in (f"add {f:.0%} (s)", "ratio", "top-10 same")]
    rows = []
    for p, r in res["pipelines"].items():
        cells = [p, f"{r['rebuild_s']:.1f}"]
        for f in fractions:
            a = r["add"][f]
            cells += [f"{a['update_s']:.2f}", f"{a['update_s'] / r['rebuild_s']:.3f}", f"{a['top10_overlap']:.3f}"]
        rows.append(cells)
    emb = ["MiniLM embedding (sampled)", f"{spp * n:.0f}"]
    for f in fractions:
        emb += [f"{spp * f * n:.1f}", f"{f:.3f}", ""]
    rows.append(emb)
    print(f"\nadd vs rebuild, N = {n:,} generated passages (d = 384; update only, embeddings given; {load_average()})")
    print(table(head, rows))
    head = ["pipeline", "q/s no filter", "q/s where 1%", "ratio", "q/s where 50%", "ratio"]
    rows = []
    for p, r in res["pipelines"].items():
        q = r["qps"]
        rows.append([p, f"{q['none']:.0f}", f"{q['where 1%']:.0f}", f"{q['where 1%'] / q['none']:.2f}",
                     f"{q['where 50%']:.0f}", f"{q['where 50%'] / q['none']:.2f}"])
    print(f"\nfiltered search, N = {n:,}, 256 questions, k = 10, embeddings given ({load_average()})")
    print(table(head, rows))


# ---------------------------------------------------------------------- recall
class MemoEmbedder:
    """The index's embedder, each distinct text embedded once: texts an earlier build embedded (the
    cached full index's passages and STITCH topic/description texts, then whatever this run
    embedded) are looked up, so the three builds of :func:`run_recall` embed each text at most once
    and get the same vectors."""

    def __init__(self, base, table: dict[str, np.ndarray]) -> None:
        self.base, self.table = base, table
        self.name, self.dim = base.name, base.dim

    def encode(self, texts, batch_size: int = 64, progress: bool = False) -> np.ndarray:
        texts = list(texts)
        missing = list(dict.fromkeys(t for t in texts if t not in self.table))
        if missing:
            for t, v in zip(missing, self.base.encode(missing, batch_size=batch_size, progress=progress)):
                self.table[t] = v
        return np.stack([self.table[t] for t in texts]) if texts else np.zeros((0, self.dim), np.float32)


def embedding_table(index) -> dict[str, np.ndarray]:
    """text → embedding of what ``index`` embedded: its passages and, when it has STITCH, the topic
    and description texts."""
    X = np.asarray(index.X)
    table = dict(zip(index.corpus.embedding_texts(), X))
    if "stitch" in index.pipelines:
        pipe = index.pipelines["stitch"]
        ex = index.components.extraction(pipe.title_entities, pipe.numbers)
        table.update(zip(ex.texts, np.asarray(pipe.hypergraph_.text_emb)))
    return table


def run_recall(data_dirs: list[Path], pipelines: list[str], share: float, seed: int) -> dict:
    from hopgraph import Index
    from hopgraph.evaluate import cached_index, default_cache_dir
    from hopgraph.engine.evaluation import load_questions, mean_and_stderr, recall_at_k

    out = {}
    for data in data_dirs:
        cached, _ = cached_index(data, "minilm", default_cache_dir(), "auto", (), progress=False)
        corpus, X = cached.corpus, np.asarray(cached.X)
        questions = load_questions(data / "questions.jsonl", corpus)
        texts = [q.text for q in questions]
        Q = cached.embed_queries(texts)
        emb = MemoEmbedder(cached.embedder, embedding_table(cached))
        recs = [{"id": corpus.ids[i], "title": corpus.titles[i], "text": corpus.texts[i]} for i in range(len(corpus))]
        rng = np.random.default_rng(seed)
        late = np.zeros(len(recs), bool)
        late[rng.choice(len(recs), int(round(share * len(recs))), replace=False)] = True
        early_rows, late_rows = np.flatnonzero(~late), np.flatnonzero(late)
        order = np.concatenate([early_rows, late_rows])  # row r of the grown index is passage order[r]
        full = Index.build(recs, embedder=emb, embeddings=X, pipelines=pipelines, progress=False)
        grown = Index.build([recs[i] for i in early_rows], embedder=emb, embeddings=X[early_rows],
                            pipelines=pipelines, progress=False)
        grown.add([recs[i] for i in late_rows], embeddings=X[late_rows])
        res = {}
        for p in pipelines:
            gold = [[corpus.position(g) for g in q.gold_ids] for q in questions]
            r_full = recall_at_k(full.search_arrays(texts, pipeline=p, k=5, query_embeddings=Q)[0], gold, 5)
            ids = grown.search_arrays(texts, pipeline=p, k=5, query_embeddings=Q)[0]
            r_add = recall_at_k(np.where(ids >= 0, order[np.maximum(ids, 0)], -1), gold, 5)
            res[p] = {"full": mean_and_stderr(r_full), "add": mean_and_stderr(r_add),
                      "paired_diff": mean_and_stderr(r_add - r_full)}
        grown.compact()
        for p in pipelines:
            ids = grown.search_arrays(texts, pipeline=p, k=5, query_embeddings=Q)[0]
            gold = [[corpus.position(g) for g in q.gold_ids] for q in questions]
            r = recall_at_k(np.where(ids >= 0, order[np.maximum(ids, 0)], -1), gold, 5)
            res[p]["compact"] = mean_and_stderr(r)
        out[data.name] = res
    return out


def print_recall(res: dict, share: float) -> None:
    head = ["dataset", "pipeline", "full build", f"{1 - share:.0%} + add {share:.0%}", "add - full (paired)",
            "after compact()"]
    rows = []
    for name, per in res.items():
        for p, r in per.items():
            f = lambda m: f"{m[0]:.3f} ± {m[1]:.3f}"  # noqa: E731
            rows.append([name, p, f(r["full"]), f(r["add"]), f"{r['paired_diff'][0]:+.3f} ± {r['paired_diff'][1]:.3f}",
                         f(r["compact"])])
    print(f"\nRecall@5 before and after compact() (MiniLM; {load_average()})")
    print(table(head, rows))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="part", required=True)
    c = sub.add_parser("cost")
    c.add_argument("--n", type=int, default=100_000)
    c.add_argument("--fractions", default="0.01,0.1")
    c.add_argument("--pipelines", default=",".join(ALL))
    c.add_argument("--work", default=None, help="where generated data is kept (default: a temporary folder)")
    c.add_argument("--json")
    r = sub.add_parser("recall")
    r.add_argument("--data", default=os.environ.get("DATA", "../shared/data"))
    r.add_argument("--datasets", default="musique,hotpotqa")
    r.add_argument("--pipelines", default=",".join(ALL))
    r.add_argument("--share", type=float, default=0.2, help="share of the corpus added after the build")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--json")
    args = ap.parse_args()
    pipelines = [p for p in args.pipelines.split(",") if p]
    if args.part == "cost":
        fractions = [float(x) for x in args.fractions.split(",")]
        work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="bench-live-"))
        res = run_cost(args.n, pipelines, fractions, work)
        print_cost(res, fractions)
    else:
        res = run_recall([Path(args.data) / d for d in args.datasets.split(",")], pipelines, args.share, args.seed)
        print_recall(res, args.share)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

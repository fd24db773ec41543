"""Live-index benchmark: the cost of ``Index.add`` against a rebuild, the search overhead of
filters, what an incremental add changes before ``Index.compact()``, and the writes of a segmented
index at scale.

Three parts, each printing a table with the load average:

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
  saved, then the other 20 % added in ``--segments`` commits (one segment each) and the index
  loaded back from its segments (before ``compact()``), and after ``compact()``; and whether the
  segmented index's top-5 are the full build's (every question, ids). Every text is embedded by
  MiniLM at most once (:class:`MemoEmbedder`: what the cached index holds is looked up), so the
  builds see identical vectors.
* ``segments`` (a saved index, e.g. ``bench_scale.py --sizes 1000000 --stages g3rag``'s, with its
  generated data): each write in a fresh process (``Index.load`` not timed), as the issue's targets
  name them — add 1 passage and commit (``Index.add`` + ``save``; then it is found), add 1,000,
  delete 1; the bytes each writes (new files; and the process's ``write_bytes``) against the data
  added; the writer's peak RSS; then 100 single adds committed one by one (the disk before and
  after, no merge), the query throughput of every pipeline over those 101 segments against the
  index with them merged into one segment (``merge(max_segments=2)``), and the disk after the
  merge. The added passages are generated like the index's and come with their embeddings.

Usage::

    .venv/bin/python bench/bench_live.py cost --n 100000 [--pipelines dense,bm25,...] [--json out.json]
    .venv/bin/python bench/bench_live.py recall --data ${DATA:-../shared/data} [--segments 20]
    .venv/bin/python bench/bench_live.py segments --index DIR/index --data DIR [--copy]
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


def run_recall(data_dirs: list[Path], pipelines: list[str], share: float, seed: int, segments: int = 20) -> dict:
    from hopgraph import Index
    from hopgraph.cache_dir import default_cache_dir
    from hopgraph.evaluate import cached_index
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
        path = Path(tempfile.mkdtemp(prefix="bench-live-recall-")) / "index"
        grown.save(path)
        for part in np.array_split(late_rows, segments):
            grown.add([recs[i] for i in part], embeddings=X[part])
            grown.save()
        grown = Index.load(path, embedder=emb, progress=False)
        n_segments = len(grown.manifest["segments"])
        res = {}
        gold = [[corpus.position(g) for g in q.gold_ids] for q in questions]
        for p in pipelines:
            want = full.search_arrays(texts, pipeline=p, k=5, query_embeddings=Q)[0]
            r_full = recall_at_k(want, gold, 5)
            ids = grown.search_arrays(texts, pipeline=p, k=5, query_embeddings=Q)[0]
            ids = np.where(ids >= 0, order[np.maximum(ids, 0)], -1)
            r_add = recall_at_k(ids, gold, 5)
            res[p] = {"full": mean_and_stderr(r_full), "add": mean_and_stderr(r_add),
                      "paired_diff": mean_and_stderr(r_add - r_full), "same_top5": float((ids == want).all(1).mean()),
                      "segments": n_segments}
        grown.compact()
        grown.save()
        grown = Index.load(path, embedder=emb, progress=False)
        # compact() rebuilds from the passages in the grown index's order: compared with a full build in
        # that order (a build's graph depends on the passages' order, e.g. ties go to the lower row)
        ordered = Index.build([recs[i] for i in order], embedder=emb, embeddings=X[order], pipelines=pipelines,
                              progress=False)
        for p in pipelines:
            want = ordered.search_arrays(texts, pipeline=p, k=5, query_embeddings=Q)
            got = grown.search_arrays(texts, pipeline=p, k=5, query_embeddings=Q)
            ids = np.where(got[0] >= 0, order[np.maximum(got[0], 0)], -1)
            res[p]["compact"] = mean_and_stderr(recall_at_k(ids, gold, 5))
            res[p]["compact_same"] = bool(np.array_equal(got[0], want[0]) and np.allclose(got[1], want[1], atol=1e-6))
        out[data.name] = res
    return out


def print_recall(res: dict, share: float) -> None:
    head = ["dataset", "pipeline", "full build", f"{1 - share:.0%} + {share:.0%} in segments", "segmented - full",
            "same top-5", "after compact()", "compact = full build in its order"]
    rows = []
    segments = 0
    for name, per in res.items():
        for p, r in per.items():
            f = lambda m: f"{m[0]:.3f} ± {m[1]:.3f}"  # noqa: E731
            segments = r["segments"]
            rows.append([name, p, f(r["full"]), f(r["add"]), f"{r['paired_diff'][0]:+.3f} ± {r['paired_diff'][1]:.3f}",
                         f"{r['same_top5']:.2f}", f(r["compact"]), "yes" if r["compact_same"] else "NO"])
    print(f"\nRecall@5 of a full build, of {1 - share:.0%} built + {share:.0%} added in {segments - 1} segments "
          f"(loaded back), and after compact() (MiniLM; {load_average()})")
    print(table(head, rows))


# ---------------------------------------------------------------------- segments at scale
WRITER = r"""
import json, os, resource, sys, time
import numpy as np
from hopgraph import Index

op = json.loads(sys.argv[1])
def io_written():
    for line in open("/proc/self/io"):
        if line.startswith("write_bytes:"):
            return int(line.split()[1])
    return 0

def files(path):
    return {p: p.stat().st_size for p in __import__("pathlib").Path(path).rglob("*") if p.is_file()}

t0 = time.perf_counter()
index = Index.load(op["index"], embedder=op.get("embedder"), progress=False, verify="fast")
load_s = time.perf_counter() - t0
out = {"load_s": load_s, "times": []}
recs = [json.loads(line) for line in open(op["records"])] if op.get("records") else []
X = np.load(op["embeddings"]) if op.get("embeddings") else None
before = files(op["index"])
io0 = io_written()
for step in range(op.get("repeat", 1)):
    t0 = time.perf_counter()
    if op["kind"] == "add":
        a, b = step * op["n"], (step + 1) * op["n"]
        index.add(recs[a:b], embeddings=X[a:b])
    else:
        index.delete(op["ids"])
    index.save()
    out["times"].append(time.perf_counter() - t0)
out["io_write_bytes"] = io_written() - io0
after = files(op["index"])
commit = max(p for p in after if p.name.startswith("commit-") and p.suffix == ".json")
out["new_bytes"] = sum(v for p, v in after.items() if p not in before)
out["commit_bytes"] = after[commit]
out["segments"] = len(index.manifest["segments"])
if op["kind"] == "add":
    t0 = time.perf_counter()
    last = recs[op["repeat"] * op["n"] - 1]
    ids, _ = index.search_arrays([last["text"]], pipeline="dense", k=1, query_embeddings=X[op["repeat"] * op["n"] - 1][None])
    out["search_s"] = time.perf_counter() - t0
    out["found"] = index.corpus.ids[int(ids[0, 0])] == last["id"]
else:
    out["found"] = all(index.components.deleted[index.corpus.position(i)] for i in op["ids"])
out["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20
print(json.dumps(out))
"""

QPS = r"""
import json, sys, time
import numpy as np
from hopgraph import Index
op = json.loads(sys.argv[1])
index = Index.load(op["index"], embedder=op.get("embedder"), progress=False, verify="fast")
Q = np.load(op["Q"])
questions = json.loads(open(op["questions"]).read())
out = {"segments": len(index.manifest["segments"])}
for p in op["pipelines"]:
    index.search_arrays(questions[:8], pipeline=p, k=10, query_embeddings=Q[:8])
    best = 1e9
    for _ in range(2):
        t0 = time.perf_counter()
        index.search_arrays(questions, pipeline=p, k=10, query_embeddings=Q)
        best = min(best, time.perf_counter() - t0)
    out[p] = len(questions) / best
print(json.dumps(out))
"""


def _disk(path: Path) -> tuple[int, int]:
    """(bytes of the files, bytes allocated on disk) under ``path``."""
    files = [p.stat() for p in path.rglob("*") if p.is_file()]
    return sum(st.st_size for st in files), sum(st.st_blocks * 512 for st in files)


def _run(script: str, op: dict) -> dict:
    import subprocess

    proc = subprocess.run([sys.executable, "-c", script, json.dumps(op)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _new_passages(data: Path, n: int, seed: int, work: Path) -> tuple[Path, Path, int]:
    """``n`` passages generated like the index's (``bench_scale``), with their embeddings: the files
    and the bytes of the data they are (JSON records + float32 rows)."""
    import bench_scale

    gen = work / f"new-{n}-{seed}"
    bench_scale.generate(max(n, bench_scale.N_QUERIES + 1), gen, seed=seed)
    recs = [json.loads(line) for line in open(gen / "corpus.jsonl", encoding="utf-8")][:n]
    for r in recs:
        r["id"] = f"new{seed}-{r['id']}"
    X = np.load(gen / "X.npy")[:n]
    rec_path, x_path = work / f"new-{n}-{seed}.jsonl", work / f"new-{n}-{seed}.npy"
    rec_path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    np.save(x_path, X)
    return rec_path, x_path, sum(len(json.dumps(r)) for r in recs) + X.nbytes


def run_segments(index: Path, data: Path, work: Path, pipelines: list[str], singles: int = 100,
                 embedder: str | None = None) -> dict:
    res: dict = {"n": None, "ops": {}, "load_avg": []}
    work.mkdir(parents=True, exist_ok=True)
    from hopgraph.engine import storage

    res["n"] = storage.read_manifest(index)["corpus"]["n_passages"]
    qps_op = {"index": str(index), "Q": str(data / "Q.npy"), "questions": str(data / "questions.json"),
              "pipelines": pipelines, "embedder": embedder}
    res["qps_built"] = _run(QPS, qps_op)
    res["disk_built"] = _disk(index)
    for name, n, kind in (("add 1 passage", 1, "add"), ("add 1,000 passages", 1000, "add"),
                          ("delete 1 passage", 1, "delete")):
        op = {"index": str(index), "kind": kind, "n": n, "repeat": 1, "embedder": embedder}
        data_bytes = 0
        if kind == "add":
            rec, x, data_bytes = _new_passages(data, n, seed=len(res["ops"]) + 1, work=work)
            op.update(records=str(rec), embeddings=str(x))
        else:
            op["ids"] = ["p17"]
        r = _run(WRITER, op)
        r["data_bytes"] = data_bytes
        res["ops"][name] = r
        res["load_avg"].append(os.getloadavg())
        print(f"[bench_live] {name}: {r['times'][0]:.3f} s, {r['new_bytes']} bytes new, peak RSS "
              f"{r['peak_rss_gb']:.2f} GB, found {r['found']}", flush=True)
    before = _disk(index)
    rec, x, data_bytes = _new_passages(data, singles, seed=99, work=work)
    r = _run(WRITER, {"index": str(index), "kind": "add", "n": 1, "repeat": singles, "records": str(rec),
                      "embeddings": str(x), "embedder": embedder})
    r["data_bytes"] = data_bytes
    res["singles"] = {**r, "disk_before": before, "disk_after": _disk(index)}
    res["qps_segments"] = _run(QPS, qps_op)
    t0 = time.perf_counter()
    from hopgraph import Index

    merged = Index.load(index, embedder=embedder, progress=False, verify="fast")
    report = merged.merge(max_segments=2)
    merged.close()
    res["merge"] = {"seconds": time.perf_counter() - t0, "segments": [report.segments_before, report.segments_after],
                    "disk_after": _disk(index)}
    res["qps_merged"] = _run(QPS, qps_op)
    res["load_avg"].append(os.getloadavg())
    return res


def print_segments(res: dict) -> None:
    n = res["n"]
    ops = res["ops"]
    rows = []
    for name, target in (("add 1 passage", "≤ 1 s"), ("add 1,000 passages", "≤ 5 s"), ("delete 1 passage", "≤ 0.5 s")):
        r = ops[name]
        rows.append([f"{name}, committed (Index.{'add' if 'add' in name else 'delete'} + save)", target,
                     f"{r['times'][0]:.3f} s" + (f" (then found by a search in {r['search_s'] * 1000:.0f} ms)"
                                                 if "search_s" in r else "")])
    for name in ("add 1 passage", "add 1,000 passages"):
        r = ops[name]
        rows.append([f"bytes written by an {name.split(' ', 1)[1]} add", "≤ 10 × added data + commit file",
                     f"{r['new_bytes'] - r['commit_bytes']:,} B + commit {r['commit_bytes']:,} B "
                     f"= {(r['new_bytes'] - r['commit_bytes']) / max(r['data_bytes'], 1):.1f} × the {r['data_bytes']:,} B "
                     f"added (write_bytes {r['io_write_bytes']:,})"])
    rows.append(["writer's peak RSS, 1-passage add (load + add + commit)", "≤ 1.5 GB",
                 f"{ops['add 1 passage']['peak_rss_gb']:.2f} GB"])
    s = res["singles"]
    rows.append([f"disk after {len(s['times'])} single adds, before any merge", "≤ 1.1 × the index",
                 f"{s['disk_after'][1] / s['disk_before'][1]:.4f} × ({s['disk_before'][1] / 1e9:.2f} → "
                 f"{s['disk_after'][1] / 1e9:.2f} GB allocated); median add + commit {np.median(s['times']):.3f} s"])
    qs, qm = res["qps_segments"], res["qps_merged"]
    for p in [k for k in qs if k != "segments"]:
        rows.append([f"q/s, {p}: {qs['segments']} segments vs merged ({qm['segments']})", "≥ 0.8 ×",
                     f"{qs[p]:.0f} vs {qm[p]:.0f} = {qs[p] / qm[p]:.2f} × (as built: {res['qps_built'][p]:.0f})"])
    m = res["merge"]
    rows.append(["merge of the small segments (merge(max_segments=2))", "",
                 f"{m['seconds']:.1f} s, {m['segments'][0]} → {m['segments'][1]} segments, disk "
                 f"{m['disk_after'][1] / 1e9:.2f} GB"])
    print(f"\nsegmented writes on the {n:,}-passage index (fresh process per write, load not timed; "
          f"load averages {', '.join(' '.join(f'{x:.2f}' for x in la) for la in res['load_avg'])})")
    print(table(["operation", "target", "measured"], rows))


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
    r.add_argument("--segments", type=int, default=20, help="commits the added share is split into")
    r.add_argument("--json")
    g = sub.add_parser("segments")
    g.add_argument("--index", required=True, help="a saved index (it is written to; see --copy)")
    g.add_argument("--data", required=True, help="its bench_scale data folder (Q.npy, questions.json)")
    g.add_argument("--copy", action="store_true", help="work on a copy of the index")
    g.add_argument("--pipelines", default="dense,bm25,hybrid,g3rag")
    g.add_argument("--singles", type=int, default=100)
    g.add_argument("--embedder", default=None, help="the embedder the index is loaded with (one whose STITCH or "
                                                    "DMAR embeds the added passages' texts: e.g. hashing-384)")
    g.add_argument("--work", default=None)
    g.add_argument("--json")
    args = ap.parse_args()
    pipelines = [p for p in args.pipelines.split(",") if p]
    if args.part == "cost":
        fractions = [float(x) for x in args.fractions.split(",")]
        work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="bench-live-"))
        res = run_cost(args.n, pipelines, fractions, work)
        print_cost(res, fractions)
    elif args.part == "segments":
        work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="bench-live-segments-"))
        index = Path(args.index)
        if args.copy:
            import shutil

            shutil.copytree(index, work / "index")
            os.sync()  # the copy's writeback would otherwise compete with the first write's fsyncs
            index = work / "index"
        res = run_segments(index, Path(args.data), work, pipelines, args.singles, args.embedder)
        print_segments(res)
    else:
        res = run_recall([Path(args.data) / d for d in args.datasets.split(",")], pipelines, args.share, args.seed,
                         args.segments)
        print_recall(res, args.share)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

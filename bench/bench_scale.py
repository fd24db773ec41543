"""Million-passage indexing benchmark.

Generates N clustered embeddings (d = 384) with synthetic passage texts that name
entities, then builds, each stage in a fresh subprocess (so peak RSS is per stage):

- ``g3rag``   the G3RAG index from the precomputed embeddings (``Index.build`` with
              ``embeddings=X.npy`` and a work directory, then ``save``): density
              (sampled above ``SAMPLED_DENSITY_MIN_N``), IVF-candidate gain-kNN graph;
- ``stitch``  the STITCH topic hypergraph (zero-token extraction + hypergraph arrays; the text
              embeddings memory-mapped in a work directory, as ``Index.build(work_dir=)`` does);
- ``dmar``    the DMAR knowledge graph (extraction + co-occurrence graph);
- ``query``   ``Index.load`` of the saved index (memory-mapped) and one batch of 256
              G3RAG questions, searched twice (the second search is the figure; the first,
              with the caches built on first use, is reported beside it);
- ``graph_index``  a saved index with the STITCH and DMAR pipelines (``Index.build`` from
              ``X.npy``; topic/description texts embedded by the hashing embedder, d = 384: a
              stand-in whose cost is negligible — the structures and the query work are real);
- ``stitch_query`` / ``dmar_query``  ``Index.load`` of that index (memory-mapped) and one batch of
              256 questions, searched twice like ``query`` (the sparse query paths; peak
              RSS and q/s, with the seconds of each search stage);
- ``recall``  the ANN gain-kNN graph against the exact ``gain_knn`` graph on a
              50,000-passage random sample of the embeddings.

It prints wall time, peak RSS and throughput per stage and size, and the 10⁶ / 10⁵
cost ratio. Usage::

    .venv/bin/python bench/bench_scale.py                 # N = 100,000 and 1,000,000
    .venv/bin/python bench/bench_scale.py --sizes 100000  # development run
    .venv/bin/python bench/bench_scale.py --json out.json

Timings are noisy when other processes run: every table prints the load average (the figures
and how they were taken: ``docs/benchmarks.md``).
Stand-in for the sentence embedder in the STITCH stage: a topic or description text
gets the embedding of the passage it comes from (embedding millions of sentences is
the embedder's cost, not the index structure's, and is measured by ``hopgraph index``).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from _common import peak_rss_gb

D = 384
N_QUERIES = 256
RECALL_SAMPLE = 50_000
#: rows per subcluster / cluster / topic of the generator, and their variance shares
SUB, CLUSTER, TOPIC = 25, 250, 5_000
SHARES = {"topic": 0.25, "cluster": 0.20, "sub": 0.20, "noise": 0.35}
SYLLABLES = ("ka ro mi ta ne lo vi sa du re po li an be ko mu ra te si no ga hu el or "
             "ve da ni su ya ze bo fi lu ma ri to wa ke").split()
VERBS = ("met", "studied with", "wrote about", "founded a school with", "succeeded", "married", "painted",
         "corresponded with")


# ---------------------------------------------------------------------- data
def entity_name(i: int) -> str:
    """A deterministic two-word capitalised name for entity id ``i``."""
    s = len(SYLLABLES)
    parts = []
    for _ in range(4):
        parts.append(SYLLABLES[i % s])
        i //= s
    return f"{(parts[0] + parts[2]).capitalize()} {(parts[1] + parts[3]).capitalize()}{'' if i == 0 else i}"


def generate(n: int, out: Path, seed: int = 0) -> None:
    """Write ``X.npy`` (normalised float32 [n, D]), ``corpus.jsonl``, ``Q.npy`` and ``questions.json``."""
    out.mkdir(parents=True, exist_ok=True)
    if (out / "done").is_file():
        return
    rng = np.random.default_rng(seed)
    sub = rng.permutation(n) // SUB
    cluster, topic = sub // (CLUSTER // SUB), sub // (TOPIC // SUB)
    centres = {name: rng.standard_normal((int(labels.max()) + 1, D)).astype(np.float32) / np.sqrt(D)
               for name, labels in (("topic", topic), ("cluster", cluster), ("sub", sub))}
    X = np.lib.format.open_memmap(out / "X.npy", mode="w+", dtype=np.float32, shape=(n, D))
    for a in range(0, n, 100_000):
        b = min(a + 100_000, n)
        block = np.sqrt(SHARES["noise"]) * rng.standard_normal((b - a, D)).astype(np.float32) / np.sqrt(D)
        for name, labels in (("topic", topic), ("cluster", cluster), ("sub", sub)):
            block += np.sqrt(SHARES[name]) * centres[name][labels[a:b]]
        X[a:b] = block / np.linalg.norm(block, axis=1, keepdims=True)
    X.flush()
    # entities: 8 names per cluster, 20 per topic; a passage names 2 of its cluster, 1 of its topic
    n_cluster_names = 8 * (int(cluster.max()) + 1)
    pick = rng.integers(0, 8, (n, 2))
    pick[:, 1] = (pick[:, 0] + 1 + rng.integers(0, 7, n)) % 8          # two different names
    pick_t = rng.integers(0, 20, n)
    years = rng.integers(1500, 2000, n)
    verbs = rng.integers(0, len(VERBS), (n, 2))
    with open(out / "corpus.jsonl", "w", encoding="utf-8") as f:
        for i in range(n):
            a = entity_name(8 * int(cluster[i]) + int(pick[i, 0]))
            b = entity_name(8 * int(cluster[i]) + int(pick[i, 1]))
            c = entity_name(n_cluster_names + 20 * int(topic[i]) + int(pick_t[i]))
            text = (f"{a} {VERBS[verbs[i, 0]]} {b} in {years[i]}. {b} later {VERBS[verbs[i, 1]]} {c}, "
                    f"and the record was kept in {c}.")
            f.write(json.dumps({"id": f"p{i}", "title": a, "text": text}) + "\n")
    rows = rng.choice(n, N_QUERIES, replace=False)
    Q = np.asarray(X[rows]) + 0.5 * rng.standard_normal((N_QUERIES, D)).astype(np.float32) / np.sqrt(D)
    np.save(out / "Q.npy", (Q / np.linalg.norm(Q, axis=1, keepdims=True)).astype(np.float32))
    questions = [f"Whom did {entity_name(8 * int(cluster[r]) + int(pick[r, 0]))} meet?" for r in rows]
    (out / "questions.json").write_text(json.dumps(questions))
    (out / "done").write_text("ok")


# ---------------------------------------------------------------------- stages (child processes)
def stage_g3rag(data: Path) -> dict:
    from hopgraph.index import Index

    out = data / "index"
    t0 = time.perf_counter()
    index = Index.build(data / "corpus.jsonl", embeddings=data / "X.npy", pipelines=["g3rag"],
                        work_dir=data / "index.work", progress=False)
    t1 = time.perf_counter()
    index.save(out, overwrite=True)
    t2 = time.perf_counter()
    g = index.pipelines["g3rag"]
    return {"seconds": t2 - t0, "items": len(index.corpus),
            "detail": {"load+validate s": round(index.embed_seconds, 1), "fit s": round(t1 - t0 - index.embed_seconds, 1),
                       "save s": round(t2 - t1, 1), "params": g.get_params()}}


def stage_stitch(data: Path) -> dict:
    from hopgraph.engine.components.corpus import Corpus
    from hopgraph.engine.components.extraction import extract
    from hopgraph.engine.pipelines.stitch.hypergraph import build_hypergraph

    t0 = time.perf_counter()
    corpus = Corpus.from_jsonl(data / "corpus.jsonl")
    t1 = time.perf_counter()
    ex = extract(corpus)
    t2 = time.perf_counter()
    text_emb = stand_in_text_embeddings(data / "X.npy", text_chunks(ex), data / "stitch.work")
    t3 = time.perf_counter()
    H = build_hypergraph(ex, text_emb)
    t4 = time.perf_counter()
    return {"seconds": t4 - t0, "items": len(corpus),
            "detail": {"load s": round(t1 - t0, 1), "extract s": round(t2 - t1, 1), "text rows s": round(t3 - t2, 1),
                       "hypergraph s": round(t4 - t3, 1), "states": H.n_nodes, "hyperedges": H.n_edges,
                       "groups": H.n_groups, "texts": len(ex.texts),
                       "text_emb GB": round(H.text_emb.nbytes / 1e9, 2), "text_emb dtype": str(H.text_emb.dtype),
                       "links": len(H.graph_indices)}}


def text_chunks(ex) -> np.ndarray:
    """The passage each extraction text comes from (the bench's stand-in text embedding)."""
    chunk = np.zeros(len(ex.texts), np.int64)
    chunk[ex.node_text] = ex.node_chunk
    chunk[ex.topic_text] = ex.topic_chunk
    return chunk


def stand_in_text_embeddings(x_path: Path, chunk: np.ndarray, work_dir: Path, block: int = 1 << 16) -> np.ndarray:
    """Text i gets row ``chunk[i]`` of X, in the stored text-embedding type, built block by block
    from plain file reads: the rows an embedder would produce, without mapping X (the dense
    index's array, counted by the ``g3rag`` stage) into this stage's RSS. Texts are numbered by
    first passage, so a block of texts reads a short contiguous range of X. The rows go where a
    build with a work directory puts them (``hypergraph.text_embedding_rows``: a memory-mapped file
    in ``work_dir`` whose filled pages leave the resident set block by block, as ``embed_texts``
    does)."""
    from hopgraph.engine.pipelines.stitch.hypergraph import text_embedding_rows
    from hopgraph.engine.storage import release_pages

    X = np.load(x_path, mmap_mode="r")
    offset, d = X.offset, X.shape[1]
    del X
    out = text_embedding_rows(len(chunk), d, work_dir)
    for a in range(0, len(chunk), block):
        rows = chunk[a:a + block]
        lo, hi = int(rows.min()), int(rows.max()) + 1
        part = np.fromfile(x_path, np.float32, (hi - lo) * d, offset=offset + lo * d * 4).reshape(hi - lo, d)
        out[a:a + block] = part[rows - lo]
        release_pages(out)
    return out


def stage_dmar(data: Path) -> dict:
    from hopgraph.engine.components.corpus import Corpus
    from hopgraph.engine.components.extraction import extract
    from hopgraph.engine.pipelines.dmar.knowledge_graph import build_knowledge_graph

    t0 = time.perf_counter()
    corpus = Corpus.from_jsonl(data / "corpus.jsonl")
    t1 = time.perf_counter()
    ex = extract(corpus)
    t2 = time.perf_counter()
    kg = build_knowledge_graph(ex, len(corpus))
    t3 = time.perf_counter()
    return {"seconds": t3 - t0, "items": len(corpus),
            "detail": {"load s": round(t1 - t0, 1), "extract s": round(t2 - t1, 1), "graph s": round(t3 - t2, 1),
                       "entities": kg.n_entities}}


def stage_query(data: Path) -> dict:
    return timed_search(data, data / "index", "g3rag")


def stage_graph_index(data: Path) -> dict:
    from hopgraph.index import Index

    t0 = time.perf_counter()
    index = Index.build(data / "corpus.jsonl", embeddings=data / "X.npy", embedder=f"hashing-{D}",
                        pipelines=["stitch", "dmar"], work_dir=data / "graph_index.work", progress=False)
    t1 = time.perf_counter()
    index.save(data / "graph_index", overwrite=True)
    t2 = time.perf_counter()
    H = index.pipelines["stitch"].H
    return {"seconds": t2 - t0, "items": len(index.corpus),
            "detail": {"fit s": round(t1 - t0, 1), "save s": round(t2 - t1, 1), "texts": len(H.text_emb),
                       "states": H.n_nodes}}


def timed_search(data: Path, index_dir: Path, pipeline: str, embedder: str | None = None) -> dict:
    """``Index.load`` of ``index_dir`` and one batch of :data:`N_QUERIES` questions of ``pipeline``,
    timed twice: the first search includes the query-side caches built on first use, the second
    (the figure) is the steady state."""
    from hopgraph.index import Index

    Q = np.load(data / "Q.npy")
    questions = json.loads((data / "questions.json").read_text())
    t0 = time.perf_counter()
    index = Index.load(index_dir, embedder=embedder, progress=False)
    t1 = time.perf_counter()
    ids, _ = index.search_arrays(questions, pipeline=pipeline, k=5, query_embeddings=Q)
    t2 = time.perf_counter()
    ids2, _ = index.search_arrays(questions, pipeline=pipeline, k=5, query_embeddings=Q)
    t3 = time.perf_counter()
    assert ids.shape == (len(Q), 5) and (ids[:, 0] >= 0).all() and np.array_equal(ids, ids2)
    return {"seconds": t3 - t2, "items": len(Q),
            "detail": {"load s": round(t1 - t0, 1), "first search s": round(t2 - t1, 2),
                       "search s": round(t3 - t2, 2), "queries/s": round(len(Q) / (t3 - t2), 1),
                       "stages s": {k: round(v, 3) for k, v in index.pipeline(pipeline).timings.items()}}}


def graph_query(data: Path, pipeline: str) -> dict:
    """:func:`timed_search` of the graph index (STITCH and DMAR, hashing text embedder)."""
    return timed_search(data, data / "graph_index", pipeline, f"hashing-{D}")


def stage_stitch_query(data: Path) -> dict:
    return graph_query(data, "stitch")


def stage_dmar_query(data: Path) -> dict:
    return graph_query(data, "dmar")


def stage_recall(data: Path) -> dict:
    from hopgraph.engine.pipelines.g3rag.ann_graph import ann_gain_knn, density_mode, graph_recall
    from hopgraph.engine.pipelines.g3rag.penalty import hub_penalty
    from hopgraph.engine.pipelines.g3rag import G3RAGFit
    from hopgraph.kernels import call

    X = np.load(data / "X.npy", mmap_mode="r")
    rows = np.sort(np.random.default_rng(1).choice(len(X), min(RECALL_SAMPLE, len(X)), replace=False))
    S = np.ascontiguousarray(X[rows])
    g = G3RAGFit()  # default parameters; penalty as in G3RAG.fit
    dens = call("density", S, mode=density_mode(g.density, len(S)), n_samples=g.density_samples, device="cpu")
    pen = hub_penalty(dens, g.beta)
    t0 = time.perf_counter()
    approx = ann_gain_knn(S, g.n_neighbors, g.sim_min, g.sim_max, pen)
    t1 = time.perf_counter()
    exact = call("gain_knn", S, g.n_neighbors, g.sim_min, g.sim_max, pen, device="cpu")
    t2 = time.perf_counter()
    recall = graph_recall(approx, exact)
    return {"seconds": t2 - t0, "items": len(S),
            "detail": {"ann s": round(t1 - t0, 1), "exact s": round(t2 - t1, 1), "recall": round(recall, 4),
                       "ann edges": approx.nnz, "exact edges": exact.nnz}}


STAGES = {"g3rag": stage_g3rag, "stitch": stage_stitch, "dmar": stage_dmar, "query": stage_query,
          "graph_index": stage_graph_index, "stitch_query": stage_stitch_query, "dmar_query": stage_dmar_query,
          "recall": stage_recall}


def run_stage(stage: str, data: Path) -> dict:
    """Run one stage in a fresh interpreter; returns its JSON report (or the error)."""
    proc = subprocess.run([sys.executable, __file__, "--stage", stage, "--data", str(data)],
                          capture_output=True, text=True)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(lines[-1])


# ---------------------------------------------------------------------- report
def table(results: dict[int, dict[str, dict]], sizes: list[int]) -> str:
    lines = ["| stage | N | wall s | peak RSS GB | items/s | detail |", "|---|---:|---:|---:|---:|---|"]
    for stage in STAGES:
        for n in sizes:
            r = results.get(n, {}).get(stage)
            if r is None:
                continue
            if "error" in r:
                lines.append(f"| {stage} | {n:,} | – | – | – | error: {r['error'][:120]} |")
                continue
            detail = ", ".join(f"{k} {v}" for k, v in r["detail"].items() if k != "params")
            lines.append(f"| {stage} | {n:,} | {r['seconds']:.1f} | {r['peak_rss_gb']:.2f} | "
                         f"{r['items'] / r['seconds']:,.0f} | {detail} |")
    if len(sizes) >= 2:
        lo, hi = sizes[0], sizes[-1]
        lines.append("")
        lines.append(f"| stage | wall ratio {hi:,} / {lo:,} | size ratio |")
        lines.append("|---|---:|---:|")
        for stage in ("g3rag", "stitch", "dmar", "query", "stitch_query", "dmar_query"):
            a, b = results.get(lo, {}).get(stage), results.get(hi, {}).get(stage)
            if a and b and "error" not in a and "error" not in b:
                lines.append(f"| {stage} | {b['seconds'] / a['seconds']:.1f}× | {hi / lo:.0f}× |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="100000,1000000", help="comma-separated corpus sizes")
    p.add_argument("--stages", default=",".join(STAGES), help="stages to run")
    p.add_argument("--recall-at", type=int, default=None, help="size whose sample gives the recall (default: largest)")
    p.add_argument("--workdir", default="/tmp/hopgraph-bench-scale")
    p.add_argument("--json", help="write all results as JSON here")
    p.add_argument("--stage", help=argparse.SUPPRESS)
    p.add_argument("--data", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.stage:
        t0 = time.perf_counter()
        report = STAGES[args.stage](Path(args.data))
        report["peak_rss_gb"] = peak_rss_gb()
        report["total_s"] = time.perf_counter() - t0
        print(json.dumps(report, default=str))
        return 0
    sizes = [int(x) for x in args.sizes.split(",")]
    stages = [s for s in args.stages.split(",") if s]
    recall_at = args.recall_at or max(sizes)
    results: dict[int, dict[str, dict]] = {}
    for n in sizes:
        data = Path(args.workdir) / str(n)
        t0 = time.perf_counter()
        generate(n, data)
        print(f"N={n:,}: data ready in {time.perf_counter() - t0:.0f} s ({data})", flush=True)
        for stage in stages:
            if stage == "recall" and n != recall_at:
                continue
            results.setdefault(n, {})[stage] = r = run_stage(stage, data)
            r["load_avg"] = [round(x, 2) for x in os.getloadavg()]
            print(f"  {stage}: {json.dumps(r, default=str)}", flush=True)
    print()
    print(f"bench_scale: d={D}, {os.cpu_count()} CPU cores, stages in fresh processes, "
          f"load average {tuple(round(x, 2) for x in os.getloadavg())}")
    print(table(results, sizes))
    if args.json:
        Path(args.json).write_text(json.dumps({str(k): v for k, v in results.items()}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

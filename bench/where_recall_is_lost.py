"""Where the recall is lost: candidate recall against Recall@5, the graph pipelines' misses, and the
gold passages every graph pipeline misses, by kind. Markdown tables (docs/decisions/where-recall-is-lost.md).

    .venv/bin/python bench/where_recall_is_lost.py [--data ../shared/data] [--datasets hotpotqa,musique]

Same index cache and code path as ``hopgraph eval``. Per pipeline and dataset: Recall@2 and @5 of
the search for the top 5 (what a user gets) and the recall of its top-d list for d = 20, 50, 100,
200 (a search d deep: the candidates before the cut to 5). The misses are gold passages outside a
pipeline's top 5; those every graph pipeline misses are counted by kind, each by a measurable rule
(a passage may be of several kinds): ``not named`` — its title (or the title without a trailing
parenthesis) is no word n-gram of the question; ``comparison`` — the question's type says so;
``long chain`` — the question has 3 or more gold passages; ``near-duplicate`` — another passage of
the corpus has cosine ≥ 0.9 with it (the index's embeddings); ``title ambiguity`` — another
passage has the same title.
"""
from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import numpy as np
from suite.common import stamp

from hopgraph.engine.components.title_mentions import mentioned, title_vocabulary
from hopgraph.engine.evaluation import load_questions
from hopgraph.evaluate import cached_index

PIPELINES = ("dense", "bm25", "hybrid", "g3rag", "stitch", "dmar", "hop")
GRAPH = ("g3rag", "stitch", "dmar")
DEPTHS = (20, 50, 100, 200)
NEAR_DUPLICATE = 0.9
KINDS = ("not named", "comparison", "long chain", "near-duplicate", "title ambiguity")


def recall(ids: np.ndarray, gold: list[list[int]], k: int) -> float:
    """Mean over questions of the share of gold rows in the first ``k`` of each row of ``ids``."""
    return float(np.mean([len(set(ids[i, :k].tolist()) & set(g)) / len(g) for i, g in enumerate(gold)]))


def kinds(q, row: int, vocab, X: np.ndarray, titles: list[str]) -> set[str]:
    """The kinds (module docstring) of the gold passage ``row`` of question ``q``."""
    out = set()
    if row not in mentioned(q.text, vocab):
        out.add("not named")
    if q.type == "comparison":
        out.add("comparison")
    if len(q.gold_ids) >= 3:
        out.add("long chain")
    sims = X @ X[row]
    sims[row] = -1
    if sims.max() >= NEAR_DUPLICATE:
        out.add("near-duplicate")
    if titles.count(titles[row]) > 1:
        out.add("title ambiguity")
    return out


def analyse(data: Path, pipelines: list[str]) -> None:
    index, _ = cached_index(data, "minilm", Path(".hopgraph-cache"), "auto", pipelines, False)
    questions = load_questions(data / "questions.jsonl", index.corpus)
    texts = [q.text for q in questions]
    gold = [[index.corpus.position(g) for g in q.gold_ids] for q in questions]
    Q = index.embed_queries(texts)
    top5, deep = {}, {}
    print(f"\n### {data.name} ({len(questions)} questions, {len(index.corpus)} passages)\n")
    print("| pipeline | R@2 | R@5 | " + " | ".join(f"recall of the top {d}" for d in DEPTHS) + " |")
    print("|---|---|---|" + "---|" * len(DEPTHS))
    for p in pipelines:
        top5[p] = index.search_arrays(texts, pipeline=p, k=5, query_embeddings=Q)[0]
        deep[p] = index.search_arrays(texts, pipeline=p, k=max(DEPTHS), query_embeddings=Q)[0]
        cells = [recall(top5[p], gold, 2), recall(top5[p], gold, 5)] + [recall(deep[p], gold, d) for d in DEPTHS]
        print(f"| {p} | " + " | ".join(f"{c:.3f}" for c in cells) + " |")
    graph = [p for p in GRAPH if p in top5]
    pairs = [(i, g) for i, gs in enumerate(gold) for g in gs]
    missed = {p: {(i, g) for i, g in pairs if g not in top5[p][i]} for p in graph}
    print(f"\nGold passages: {len(pairs)}. Missed at 5 (of them):\n")
    print("| pipeline | missed | " + " | ".join(f"also missed by {o}" for o in graph) + " |")
    print("|---|---|" + "---|" * len(graph))
    for p in graph:
        print(f"| {p} | {len(missed[p])} | " + " | ".join(f"{len(missed[p] & missed[o])}" for o in graph) + " |")
    for r in (2, 5):
        union = [set(itertools.chain(*(top5[p][i, :r].tolist() for p in graph))) for i in range(len(gold))]
        got = np.mean([len(union[i] & set(g)) / len(g) for i, g in enumerate(gold)])
        print(f"\nUnion of the graph pipelines' top {r} ({len(graph) * r} passages): recall {got:.3f}")
    every = set.intersection(*missed.values()) if missed else set()
    failing = sorted({i for i, _ in every})
    print(f"\nMissed at 5 by every graph pipeline: {len(every)} gold passages of {len(failing)} questions.\n")
    X = np.asarray(index.components.X, np.float32)
    titles = list(index.corpus.titles)
    vocab = title_vocabulary(titles)
    of = {(i, g): kinds(questions[i], g, vocab, X, titles) for i, g in pairs}
    print("| kind | missed by every graph pipeline | share of those | share among all gold passages |")
    print("|---|---|---|---|")
    for kind in KINDS:
        n = sum(kind in of[m] for m in every)
        print(f"| {kind} | {n} | {n / max(len(every), 1):.2f} | {sum(kind in k for k in of.values()) / len(pairs):.2f} |")
    if "hop" in top5:
        found = sum(g in top5["hop"][i] for i, g in every)
        print(f"\nOf those, hop's top 5 holds {found}.")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    ap.add_argument("--datasets", default="hotpotqa,musique")
    ap.add_argument("--pipelines", default=",".join(PIPELINES))
    args = ap.parse_args()
    for ds in args.datasets.split(","):
        analyse(Path(args.data) / ds, [p for p in args.pipelines.split(",") if p])
    print(f"\n{stamp()}")


if __name__ == "__main__":
    main()

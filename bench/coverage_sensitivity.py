"""Sensitivity of ``hop``'s question coverage step: Recall@2 / Recall@5 on each shared set with one
search parameter moved from its default at a time (the others at their defaults), as Markdown.

    .venv/bin/python bench/coverage_sensitivity.py [--data ../shared/data] [--datasets hotpotqa,musique]

Same index cache and code path as ``hopgraph eval`` (``--pipelines hop``); the defaults are one set
for every corpus, these rows show how much each value matters.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from suite.common import stamp

from hopgraph.engine.evaluation import load_questions
from hopgraph.evaluate import cached_index

#: each row: (label, search-parameter overrides of hop)
ROWS = [("defaults", {}),
        *((f"coverage={v}", {"coverage": v}) for v in (0.0, 0.5, 1.5, 2.0)),
        *((f"coverage_link={v}", {"coverage_link": v}) for v in (0.0, 0.1, 0.3, 0.4)),
        *((f"coverage_names={v}", {"coverage_names": v}) for v in (0.0, 0.1, 0.3, 0.4)),
        *((f"coverage_pairs={v}", {"coverage_pairs": v}) for v in (0, 5, 20)),
        *((f"coverage_depth={v}", {"coverage_depth": v}) for v in (10, 20, 50)),
        ("bridge=0", {"bridge": 0.0}),
        ("no step (coverage=coverage_link=coverage_names=0)",
         {"coverage": 0.0, "coverage_link": 0.0, "coverage_names": 0.0})]


def recall(ids, gold, k: int) -> float:
    return sum(len(set(ids[i, :k].tolist()) & set(g)) / len(g) for i, g in enumerate(gold)) / len(gold)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    ap.add_argument("--datasets", default="hotpotqa,musique")
    args = ap.parse_args()
    sets = args.datasets.split(",")
    cells: dict[str, list[str]] = {label: [] for label, _ in ROWS}
    for ds in sets:
        data = Path(args.data) / ds
        index, _ = cached_index(data, "minilm", Path(".hopgraph-cache"), "auto", ["hop"], False)
        questions = load_questions(data / "questions.jsonl", index.corpus)
        texts = [q.text for q in questions]
        gold = [[index.corpus.position(g) for g in q.gold_ids] for q in questions]
        Q = index.embed_queries(texts)
        for label, overrides in ROWS:
            ids, _ = index.search_arrays(texts, pipeline="hop", k=5, query_embeddings=Q, **overrides)
            cells[label].append(f"{recall(ids, gold, 2):.3f} / {recall(ids, gold, 5):.3f}")
    print("| hop | " + " | ".join(f"{ds} R@2 / R@5" for ds in sets) + " |")
    print("|---|" + "---|" * len(sets))
    for label, row in cells.items():
        print(f"| {label} | " + " | ".join(row) + " |")
    print(f"\n{stamp()}")


if __name__ == "__main__":
    main()

"""BM25 top-k: hopgraph's posting-list top-k (``BM25Index.topk``) against bm25s's ``retrieve``,
side by side on the same bm25s index.

Both read bm25s's precomputed score matrix. bm25s's ``retrieve`` (numpy backend, the one a core
install has) builds an ``[N]`` score row per query and ``np.argpartition``-s it; hopgraph's
``topk`` scores only the passages that hold a query token (their posting lists) and sorts those.
Rows: the whole top-k call for every question (tokenization excluded, same tokens for both),
median of ``--repeats`` interleaved runs, one thread each. The table also says whether the two
agree: the same scores bit for bit at every rank, and the same passages (up to the order of
equal scores, which bm25s leaves to ``argpartition``; hopgraph breaks ties toward the lower id).

Corpora: ``--data DIR`` (a benchmark folder with ``corpus.jsonl`` and ``questions.jsonl``, e.g.
``$DATA/musique``; repeatable) and/or ``--scale N`` (the generated corpus of
``bench/bench_scale.py``, N passages, with its 256 questions; generated under ``--workdir``).

Run: ``.venv/bin/python bench/bench_bm25_topk.py --data $DATA/hotpotqa --data $DATA/musique --scale 100000``
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from hopgraph.engine.components.bm25 import BM25Index, BM25Params
from hopgraph.engine.components.corpus import Corpus

from _common import median_interleaved, table


def bm25s_topk(index: BM25Index, tokens: list[list[str]], k: int) -> tuple[np.ndarray, np.ndarray]:
    """bm25s's own ``retrieve`` (the path ``BM25Index.topk`` replaced), zero scores as padding."""
    docs, scores = index.retriever.retrieve(tokens, k=min(k, index.n_docs), show_progress=False, n_threads=1)
    docs, scores = np.asarray(docs, np.int64), np.asarray(scores, np.float32)
    return np.where(scores > 0, docs, -1), np.where(scores > 0, scores, -np.inf).astype(np.float32)


def agreement(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> tuple[bool, bool]:
    """(scores equal bit for bit at every rank, same passages per question above the k-th score —
    of the passages tied at the k-th score each side may keep any)."""
    same_scores = bool(np.array_equal(a[1], b[1]))
    same_sets = all(set(x[s > s[-1]].tolist()) == set(y[t > t[-1]].tolist())
                    for x, s, y, t in zip(a[0], a[1], b[0], b[1]))
    return same_scores, same_sets


def questions_of(folder: Path) -> list[str]:
    with open(folder / "questions.jsonl", encoding="utf-8") as f:
        return [json.loads(line)["question"] for line in f if line.strip()]


def scale_corpus(n: int, workdir: Path) -> tuple[Path, list[str]]:
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_scale import generate

    data = workdir / str(n)
    generate(n, data)
    return data / "corpus.jsonl", json.loads((data / "questions.json").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, action="append", default=[], help="benchmark folder (repeatable)")
    ap.add_argument("--scale", type=int, action="append", default=[], help="generated corpus size (repeatable)")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/hopgraph-bench-scale"))
    ap.add_argument("--k", type=int, default=100, help="top-k (100: the hybrid and DMAR recall depth)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    cases: list[tuple[str, Path, list[str]]] = []
    for folder in args.data:
        cases.append((folder.name, folder / "corpus.jsonl", questions_of(folder)))
    for n in args.scale:
        path, qs = scale_corpus(n, args.workdir)
        cases.append((f"generated {n:,}", path, qs))
    if not cases:
        ap.error("give --data DIR and/or --scale N")
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} · load average (1, 5, 15 min): "
          + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    rows = []
    for name, path, qs in cases:
        corpus = Corpus.from_jsonl(path)
        index = BM25Index.build(corpus.embedding_texts(), BM25Params())
        tokens = index.tokenize(qs)
        fns = {"bm25s": lambda: bm25s_topk(index, tokens, args.k), "hopgraph": lambda: index.topk(tokens, args.k)}
        sec = median_interleaved(fns, args.repeats)
        same_scores, same_sets = agreement(fns["bm25s"](), fns["hopgraph"]())
        for side in fns:
            rows.append([name, f"{len(corpus):,}", side, f"{len(qs)}", f"{sec[side]:.3f}",
                         f"{len(qs) / sec[side]:,.0f}", f"{sec['bm25s'] / sec[side]:.1f}x",
                         "" if side == "bm25s" else f"{'yes' if same_scores else 'NO'} / {'yes' if same_sets else 'NO'}"])
    print(table(["corpus", "passages", "top-k", "questions", "seconds", "queries/s", "speed-up",
                 "same scores / same passages"], rows))
    print(f"k = {args.k}; median of {args.repeats} interleaved runs, one thread; tokenization excluded (same "
          f"tokens); load average after: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()

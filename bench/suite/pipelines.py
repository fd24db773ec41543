"""Pipelines' build costs and queries/s, with and without question embedding.

The corpus is generated (:func:`generated_corpus`: topic words, titles as entities, two-hop
questions that name one passage's title and another's topic words) or read from ``--data DIR``
(``corpus.jsonl`` + ``questions.jsonl``, the layout of ``hopgraph eval``). One
:meth:`hopgraph.Index.build` embeds the passages and fits every pipeline (its
``embed_seconds`` and per-pipeline ``fit_seconds`` are the build costs); each pipeline then
answers the same question batch twice: from the texts (question embedding included) and from
precomputed embeddings (excluded).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Sequence

import numpy as np

from .common import Table, best_of

#: pipelines benchmarked by default (ppr_binary is a baseline of the STITCH paper)
PIPELINES = ("dense", "bm25", "hybrid", "g3rag", "stitch", "dmar")


def generated_corpus(n: int, n_questions: int, seed: int = 0):
    """(Corpus, questions): ``n`` passages over ``max(4, n // 25)`` topics and ``n_questions``
    two-hop questions (a passage's title plus words of a passage of a related topic)."""
    from hopgraph.engine.components.corpus import Corpus

    rng = np.random.default_rng(seed)
    n_topics = max(4, n // 25)
    topic_words = [[f"t{t}w{j}" for j in range(12)] for t in range(n_topics)]
    common = [f"c{j}" for j in range(200)]
    titles = [f"Entity {i} of topic {i % n_topics}" for i in range(n)]
    texts = []
    for i in range(n):
        t = i % n_topics
        link = titles[(i + n_topics) % n]  # a bridge to another passage of the same topic
        words = list(rng.choice(topic_words[t], 10)) + list(rng.choice(common, 14))
        rng.shuffle(words)
        texts.append(f"{' '.join(words)}. It is linked to {link}.")
    corpus = Corpus([f"p{i}" for i in range(n)], titles, texts, source="<generated>")
    qs = []
    for _ in range(n_questions):
        i = int(rng.integers(n))
        t2 = (i + 1) % n_topics
        qs.append(f"Which {' '.join(rng.choice(topic_words[t2], 3))} is related to {titles[i]}?")
    return corpus, qs


def read_data(data: Path, n_questions: int):
    """(Corpus, questions) of a benchmark folder (``corpus.jsonl`` + ``questions.jsonl``)."""
    from hopgraph.engine.components.corpus import Corpus
    from hopgraph.engine.evaluation import load_questions

    corpus = Corpus.from_jsonl(data / "corpus.jsonl")
    questions = [q.text for q in load_questions(data / "questions.jsonl", corpus)]
    return corpus, questions[:n_questions]


def bench_pipelines(corpus, questions: Sequence[str], embedder: str, pipelines: Sequence[str] = PIPELINES,
                    repeats: int = 2, k: int = 5, progress: bool = False) -> tuple[Table, Table]:
    """(build-cost table, queries/s table) of ``pipelines`` on one corpus and question batch."""
    from hopgraph.index import Index

    t0 = time.perf_counter()
    index = Index.build(corpus, embedder=embedder, device="cpu", pipelines=list(pipelines), progress=progress)
    total = time.perf_counter() - t0
    build = Table("build", f"index build ({len(corpus):,} passages, embedder {index.embedder_name}, CPU)",
                  ["step", "seconds", "passages/s", "x embedding"])
    emb = max(index.embed_seconds, 1e-9)
    build.add(step="embedding the passages", seconds=index.embed_seconds, **{"passages/s": len(corpus) / emb,
              "x embedding": 1.0})
    for name, s in index.fit_seconds.items():
        build.add(step=f"fit {name}", seconds=s, **{"passages/s": len(corpus) / max(s, 1e-9),
                  "x embedding": s / emb})
    build.add(step="whole build", seconds=total, **{"passages/s": len(corpus) / total, "x embedding": total / emb})
    build.finish()

    qs = list(questions)
    t_embed, Q = best_of(lambda: index.embed_queries(qs), repeats)
    query = Table("queries", f"queries/s ({len(qs)} questions in one batch, k = {k}, {len(corpus):,} passages, CPU)",
                  ["pipeline", "q/s with embedding", "q/s without embedding", "ms per batch without"])
    query.add(pipeline="(question embedding alone)", **{"q/s with embedding": len(qs) / t_embed})
    for name in pipelines:
        index.search(qs[:2], pipeline=name, k=k, query_embeddings=Q[:2])  # warm the pipeline's caches
        t_with, _ = best_of(lambda: index.search(qs, pipeline=name, k=k), repeats)
        t_without, _ = best_of(lambda: index.search(qs, pipeline=name, k=k, query_embeddings=Q), repeats)
        query.add(pipeline=name, **{"q/s with embedding": len(qs) / t_with,
                  "q/s without embedding": len(qs) / t_without, "ms per batch without": 1e3 * t_without})
    query.notes.append(f"best of {repeats} runs each; 'without': the questions' embeddings given")
    return build, query.finish()

"""``hopgraph train-gnn`` and ``hopgraph train-gate``: train DMAR's parts inside a saved index (SPEC §3).

Both load the index, train, and write the whole index back with :meth:`Index.save`, which
replaces the directory atomically (an interrupted run leaves the old index intact). The
``dmar`` pipeline is fitted first if the index does not hold it yet.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .engine.errors import InputError
from .engine.evaluation import load_questions, recall_at_k
from .index import Index

GNN_TRAIN_STEPS = 600


def _load(index_path: str | Path, embedder: str | None, progress: bool) -> tuple[Index, Any]:
    index = Index.load(index_path, embedder=embedder, progress=progress)
    return index, index.pipeline("dmar")


def train_gnn_index(index_path: str | Path, steps: int = GNN_TRAIN_STEPS, seed: int = 0, embedder: str | None = None,
                    progress: bool = True, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Pre-train the Siamese GraphSAGE encoder from scratch for ``steps`` triplet steps (seeded),
    re-encode every ego subgraph, save the index atomically. Returns a small report."""
    if steps < 1:
        raise InputError(f"steps must be >= 1, got {steps}")
    index, dmar = _load(index_path, embedder, progress)
    t0 = time.perf_counter()
    losses = dmar.train_gnn(steps, seed=seed, progress=progress, log=log)
    seconds = time.perf_counter() - t0
    index.save(index_path, overwrite=True)
    return {"steps": steps, "seconds": seconds, "first_loss": float(np.mean(losses[:10])),
            "last_loss": float(np.mean(losses[-10:])), "n_subgraphs": int(dmar.knowledge_graph_.n_entities)}


def train_gate_index(index_path: str | Path, questions_path: str | Path, holdout: float = 0.2, seed: int = 0,
                     epochs: int = 200, k: int = 5, embedder: str | None = None, progress: bool = True,
                     always_save: bool = False, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Train the fusion gate on questions with gold passages (``questions.jsonl`` format).

    A seeded ``holdout`` fraction of the questions is kept out of training; the report gives
    DMAR's Recall@k on it with the untrained (equal-weight) gate and with the trained gate.
    The trained gate is saved in the index atomically when its held-out recall is not lower
    than the untrained gate's (or always with ``always_save``); otherwise the index keeps an
    untrained gate and the report says so (``saved``).
    """
    if not 0.0 < holdout < 1.0:
        raise InputError(f"holdout must be in (0, 1), got {holdout}")
    index, dmar = _load(index_path, embedder, progress)
    questions = load_questions(questions_path, index.corpus)
    if len(questions) < 5:
        raise InputError(f"{questions_path}: need at least 5 questions to train and hold out, got {len(questions)}")
    order = np.random.default_rng(seed).permutation(len(questions))
    n_test = max(1, int(round(holdout * len(questions))))
    test, train = order[:n_test], order[n_test:]
    texts = [q.text for q in questions]
    gold = [[index.corpus.position(g) for g in q.gold_ids] for q in questions]
    Q = index.embed_queries(texts)

    def held_out_recall() -> float:
        ids, _ = dmar.search(Q[test], k, [texts[i] for i in test])
        return float(recall_at_k(ids, [gold[i] for i in test], k).mean())

    dmar.reset_gate()
    before = held_out_recall()
    losses = dmar.train_gate(Q[train], [texts[i] for i in train], [gold[i] for i in train], epochs=epochs,
                             seed=seed, log=log)
    after = held_out_recall()
    saved = always_save or after >= before
    if not saved:
        dmar.reset_gate()
    index.save(index_path, overwrite=True)
    return {"n_train": len(train), "n_held_out": len(test), f"held_out_recall@{k}_untrained": before,
            f"held_out_recall@{k}_trained": after, "first_loss": losses[0], "last_loss": losses[-1],
            "saved": saved}

"""Evaluation on multi-hop benchmarks: passage Recall@k (see ../shared/data/README.md).

Recall@k of one question = |gold ∩ top-k| / |gold|, averaged over questions.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from .components.corpus import Corpus
from .components.records import iter_jsonl
from .errors import InputError


@dataclass(frozen=True)
class Question:
    id: str
    text: str
    gold_ids: tuple[str, ...]
    answer: str = ""
    type: str = ""


def load_questions(path: str | Path, corpus: Corpus | None = None) -> list[Question]:
    """Read ``questions.jsonl`` (``id, question, answer, type, gold_ids``); errors name file and line.

    With ``corpus``, every gold id must be a passage of it.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"questions file {path} does not exist")
    out = []
    for lineno, rec in iter_jsonl(path):
        where = f"{path} line {lineno}"
        text = rec.get("question")
        if not isinstance(text, str) or not text.strip():
            raise InputError(f"{where}: missing or empty 'question'")
        gold = rec.get("gold_ids")
        if not isinstance(gold, list) or not gold or not all(isinstance(g, (str, int)) for g in gold):
            raise InputError(f"{where}: 'gold_ids' must be a non-empty list of passage ids")
        gold = tuple(dict.fromkeys(str(g) for g in gold))
        if corpus is not None:
            for g in gold:
                try:
                    corpus.position(g)
                except KeyError:
                    raise InputError(f"{where}: gold id {g!r} is not in the corpus {corpus.source}") from None
        out.append(Question(str(rec.get("id", lineno)), text, gold, str(rec.get("answer", "")),
                            str(rec.get("type", ""))))
    if not out:
        raise InputError(f"questions file {path} holds no questions")
    return out


def recall_at_k(retrieved_rows: np.ndarray, gold_rows: Sequence[Sequence[int]], k: int) -> np.ndarray:
    """Per-question recall@k: ``retrieved_rows`` is ``[B, >=k]`` corpus rows (-1 = none)."""
    if retrieved_rows.shape[1] < k:
        raise InputError(f"recall@{k} needs at least {k} results per question, got {retrieved_rows.shape[1]}")
    out = np.empty(len(gold_rows), dtype=np.float64)
    for i, gold in enumerate(gold_rows):
        top = set(int(j) for j in retrieved_rows[i, :k] if j >= 0)
        out[i] = len(top.intersection(gold)) / len(gold)
    return out


def mean_and_stderr(values: np.ndarray) -> tuple[float, float]:
    """Mean and standard error of the mean (0 for fewer than two values)."""
    values = np.asarray(values, dtype=np.float64)
    if len(values) < 2:
        return float(values.mean()) if len(values) else 0.0, 0.0
    return float(values.mean()), float(values.std(ddof=1) / np.sqrt(len(values)))

"""Anchor-guided query reformulation Q′ for DMAR (SPEC §3 step 4).

Default rule (no generator, no language model):

- vector: ``q′ = normalise(q + shift · mean_{a ∈ anchors} x_a)`` — the query moved toward
  its anchors (``shift = 1``: halfway between q and the anchors' centroid direction);
- text: ``Q′ = Q + " " + the titles of the anchors`` (their main entity names), used
  when a lexical second stage or a generator needs text.

Pluggable generators produce the text Q′ from Q and short anchor snippets
(``"title: first 200 characters"``); Q′ is then embedded by the index's embedder:

- any callable ``generator(question: str, snippets: list[str]) -> str``;
- a local seq2seq model folder (e.g. a T5 fine-tuned for reformulation), run with
  ``transformers`` (:class:`Seq2SeqGenerator`; imported only when used), input
  ``"question: Q context: snippet1 | snippet2 ..."``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ...components.corpus import Corpus
from ...errors import InputError

Generator = Callable[[str, list[str]], str]
SNIPPET_CHARS = 200
#: the extra that installs what :class:`Seq2SeqGenerator` needs
EXTRA = "hopgraph[reformulation]"


def anchor_snippets(corpus: Corpus, anchor_ids: np.ndarray, chars: int = SNIPPET_CHARS) -> list[list[str]]:
    """Short snippets of each query's anchors: the first ``chars`` characters of their
    embedding text ``"title: text"`` (:meth:`Corpus.embedding_texts`; ids -1 skipped)."""
    out = []
    for row in np.asarray(anchor_ids):
        snips = []
        for j in row:
            if j < 0:
                continue
            snips.append(corpus.embedding_texts(j, j + 1)[0][:chars])
        out.append(snips)
    return out


def rule_vectors(Q: np.ndarray, rows: Callable[[np.ndarray], np.ndarray], anchor_ids: np.ndarray,
                 shift: float = 1.0) -> np.ndarray:
    """Default rule, vector part: ``normalise(q + shift · mean anchor embedding)`` (float32 [B, d]);
    ``rows(ids)`` reads the passages' embeddings (``X[ids]``)."""
    anchor_ids = np.asarray(anchor_ids)
    valid = anchor_ids >= 0
    A = rows(np.where(valid, anchor_ids, 0)) * valid[..., None]
    mean = A.sum(1) / np.maximum(valid.sum(1, keepdims=True), 1)
    out = Q + shift * mean
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return np.where(norms > 0, out / np.maximum(norms, 1e-12), Q).astype(np.float32)


def rule_texts(query_texts: Sequence[str], corpus: Corpus, anchor_ids: np.ndarray) -> list[str]:
    """Default rule, text part: the question followed by its anchors' titles (deduplicated)."""
    out = []
    for q, row in zip(query_texts, np.asarray(anchor_ids)):
        titles = [corpus.titles[j] for j in row if j >= 0 and corpus.titles[j]]
        out.append(" ".join([q, *dict.fromkeys(titles)]))
    return out


class Seq2SeqGenerator:
    """A local seq2seq model (folder readable by ``transformers``) as a reformulation generator.

    :class:`InputError` when the folder is missing, when ``transformers`` is not installed (naming
    the extra :data:`EXTRA`), or when the folder holds no seq2seq model and tokenizer it can load."""

    def __init__(self, path: str | Path, max_new_tokens: int = 64, device: str = "cpu") -> None:
        path = Path(path)
        if not path.is_dir():
            raise InputError(f"reformulation model folder {path} does not exist")
        try:
            from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
        except ImportError:
            raise InputError(f"a seq2seq reformulation model ({path}) needs transformers: "
                             f"pip install '{EXTRA}'") from None
        self.path = str(path)
        try:
            self.model = AutoModelForSeq2SeqLM.from_pretrained(self.path).to(device).eval()
            self.tokenizer = AutoTokenizer.from_pretrained(self.path)
        except (OSError, ValueError) as e:
            reason = " ".join(str(e).split())[:300] or type(e).__name__
            raise InputError(f"reformulation model folder {path} holds no seq2seq model and tokenizer that "
                             f"transformers can load: {reason}") from None
        self.max_new_tokens, self.device = max_new_tokens, device

    def __call__(self, question: str, snippets: list[str]) -> str:
        import torch

        prompt = f"question: {question} context: {' | '.join(snippets)}"
        enc = self.tokenizer(prompt, return_tensors="pt", truncation=True, max_length=512).to(self.device)
        with torch.no_grad():
            out = self.model.generate(**enc, max_new_tokens=self.max_new_tokens)
        return self.tokenizer.decode(out[0], skip_special_tokens=True)


def resolve_generator(generator: Generator | str | Path | None) -> Generator | None:
    """None (default rule), a callable, or a local seq2seq model path."""
    if generator is None or callable(generator):
        return generator
    if isinstance(generator, (str, Path)):
        return Seq2SeqGenerator(generator)
    raise InputError(f"generator must be None, a callable or a model folder path, got {type(generator).__name__}")


def generate_texts(generator: Generator, query_texts: Sequence[str], snippets: list[list[str]]) -> list[str]:
    """Run a generator on every query; an empty or non-string answer falls back to the question."""
    out = []
    for q, s in zip(query_texts, snippets):
        text = generator(q, s)
        out.append(text if isinstance(text, str) and text.strip() else q)
    return out

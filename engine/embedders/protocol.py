"""The embedder contract: the :class:`Embedder` protocol, the check every embedder's output passes
(:func:`validate_embeddings`), and the helpers all embedders share.

An embedder maps texts to L2-normalised float32 rows (SPEC notation X for passages, q for
questions). ``encode`` embeds passages; an embedder with a query side (prompts) also has
``encode_queries``, which :func:`~hopgraph.engine.embedders.queries.encode_queries` prefers.
"""
from __future__ import annotations

from typing import Any, Iterable, Protocol, Sequence, runtime_checkable

import numpy as np

from .validation import VALIDATE_BLOCK_ROWS, validate_embeddings  # noqa: F401 - re-exported


@runtime_checkable
class Embedder(Protocol):
    """Anything with a ``name``, a ``dim`` and ``encode(texts) -> float32 [n, dim]`` (passages).

    Optional: ``encode_queries(texts, batch_size, progress)`` for queries (used by
    :func:`encode_queries` when present) and ``spec``
    (:func:`~hopgraph.engine.embedders.resolve.embedder_spec`)."""

    name: str
    dim: int

    def encode(self, texts: Sequence[str], batch_size: int = 64, progress: bool = False) -> np.ndarray:
        """The embeddings of ``texts``: float32 ``[len(texts), dim]``, in order, ``batch_size`` texts a
        forward pass, a tqdm bar when ``progress``."""


def batches(n: int, size: int, progress: bool, desc: str) -> Iterable[Any]:
    """The start of each batch of ``size`` of ``n`` texts, under a tqdm bar when ``progress``."""
    starts = range(0, n, size)
    if not progress:
        return starts
    from tqdm.auto import tqdm

    return tqdm(starts, desc=desc, total=-(-n // size), unit="batch")

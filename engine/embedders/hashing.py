"""A model-free embedder for tests and quick experiments: hashed bag of words and word bigrams."""
from __future__ import annotations

import hashlib
import re
from typing import Sequence

import numpy as np

from ..lru import LRUCache
from .protocol import validate_embeddings


class HashingEmbedder:
    """Deterministic bag-of-words embedder: each lower-cased word token (and word bigram)
    adds a fixed pseudo-random ±1 vector (seeded by the token's sha1).

    Needs no model and no download. Texts with no word token get a fixed "empty" vector so that
    no output row is zero. O(total tokens · dim).
    """

    #: bytes of token vectors kept (least recently used tokens dropped; a dropped one is recomputed)
    CACHE_BYTES = 32 << 20

    def __init__(self, dim: int = 64) -> None:
        self.dim = int(dim)
        self.name = self.spec = f"hashing-{self.dim}"
        self._cache: LRUCache[str, np.ndarray] = LRUCache(max(1, self.CACHE_BYTES // (4 * max(self.dim, 1))))

    def _token_vector(self, token: str) -> np.ndarray:
        return self._cache.get_or_make(token, lambda: self._draw(token))

    def _draw(self, token: str) -> np.ndarray:
        seed = int.from_bytes(hashlib.sha1(token.encode("utf-8")).digest()[:8], "little")
        return np.random.default_rng(seed).choice(np.array([-1.0, 1.0], dtype=np.float32), self.dim)

    def encode(self, texts: Sequence[str], batch_size: int = 64, progress: bool = False) -> np.ndarray:
        """L2-normalised float32 ``[len(texts), dim]``; ``batch_size`` and ``progress`` are ignored."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            words = re.findall(r"\w+", text.lower())
            tokens = words + [a + " " + b for a, b in zip(words, words[1:])] or ["<empty>"]
            for tok in tokens:
                out[i] += self._token_vector(tok)
            if not out[i].any():
                out[i] = self._token_vector("<empty>")
        return validate_embeddings(out, f"{self.name} output", self.dim)

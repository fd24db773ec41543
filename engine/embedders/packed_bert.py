"""Padding-free ("packed") embedding for BERT-type sentence-transformers models.

A micro-batch of questions of different lengths, run through the model the usual way, is
padded to its longest question, so much of the batch's compute goes to padding. Here the
questions' tokens are concatenated into ONE ``[tokens, hidden]`` matrix, so every linear
layer (the bulk of the compute) is one large matrix product with no padding; only attention
runs per group of equally long questions. The result is the model's own embedding (mean
pooling, L2-normalised) up to float rounding; :meth:`PackedBertEncoder.for_embedder` checks
this on a probe batch and declines (returns ``None``) for any model it does not reproduce,
so callers fall back to the embedder's ``encode``. :meth:`PackedBertEncoder.from_folder` runs the
same computation from a model folder with torch, safetensors and tokenizers only (the default
MiniLM embedder's path: no transformers / sentence-transformers import).

A matrix product's rounding depends on its shape (the BLAS picks its kernels by the row count), so
a text's packed embedding may move by ~1e-7 with the other texts of its batch. The
**row-independent** mode (:func:`query_encoder`: how questions are embedded) runs every linear
layer per text instead, so each text's embedding is a function of that text alone, bit for bit, in
any batch; attention, layer norms and activations are already per text or per row. Why questions
are packed: ``docs/decisions/packed-query-embedding.md``.
"""
from __future__ import annotations

import copy
import itertools
import sys
import threading
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ..errors import InputError
from .validation import validate_embeddings

if TYPE_CHECKING:
    from .protocol import Embedder

#: largest |difference| from the embedder's own output accepted by the probe check
PROBE_TOLERANCE = 1e-4
_PROBE_TEXTS = ["who wrote the book?", "a", "which city hosted the 1936 Summer Olympics, and who won the "
                "most gold medals there?", "x y z"]


class PackedBertEncoder:
    """Embed texts with a BERT encoder, mean pooling and L2 normalisation (a sentence-transformers
    ``[Transformer(BertModel), Pooling(mean), Normalize]`` model) without padding. Built from a
    sentence-transformers embedder (:meth:`for_embedder`) or from a model folder's
    ``config.json``, ``model.safetensors`` and ``tokenizer.json`` (:meth:`from_folder`: torch,
    safetensors and tokenizers only, no transformers)."""

    def __init__(self, name: str, dim: int, bert: Any, preprocess: Any, tokenize: Any) -> None:
        """``bert``: a module with a BertModel's ``embeddings`` and ``encoder.layer``; ``preprocess(texts)``:
        padded ``input_ids`` / ``attention_mask`` / ``token_type_ids`` tensors as the model tokenises;
        ``tokenize(texts)``: ``(preprocess(texts), offsets)``, ``offsets`` each text's token character
        offsets (special tokens ``(0, 0)``)."""
        self.name, self.dim = name, int(dim)
        self._bert, self._preprocess, self._tokenize = bert, preprocess, tokenize
        #: linear layers per text: each text's embedding does not depend on the rest of its batch
        self.row_independent = False
        cfg = bert.config
        self._heads = int(cfg.num_attention_heads)
        self._head_dim = int(cfg.hidden_size) // self._heads

    @classmethod
    def for_embedder(cls, embedder: Embedder) -> "PackedBertEncoder | None":
        """A packed encoder equivalent to ``embedder.encode``: the embedder's own when it has one
        (``packed_encoder()``, e.g. :class:`~hopgraph.engine.embedders.minilm.MiniLMEmbedder`), else
        one over its sentence-transformers model; ``None`` when the embedder is not a supported
        model or the packed output differs from its own on a probe batch."""
        own = getattr(embedder, "packed_encoder", None)
        if callable(own):
            return own()
        if not _supported(embedder):
            return None
        try:
            st = embedder.model  # type: ignore[attr-defined]

            def tokenize(texts: list[str]) -> tuple[dict[str, Any], list]:
                offsets = st.tokenizer(texts, truncation=True, max_length=st.max_seq_length,
                                       return_offsets_mapping=True)["offset_mapping"]
                return st.preprocess(texts), offsets

            enc = cls(embedder.name, embedder.dim, st[0].auto_model, st.preprocess, tokenize)
            ref = embedder.encode(_PROBE_TEXTS, progress=False)
            if float(np.abs(enc.encode(_PROBE_TEXTS) - ref).max()) > PROBE_TOLERANCE:
                return None
        except Exception:  # an unexpected model layout: use the embedder's own path
            return None
        return enc

    @classmethod
    def from_folder(cls, folder: str | Path, name: str, max_seq_length: int) -> "PackedBertEncoder":
        """The encoder of a BERT sentence-transformers model folder (absolute positions, mean pooling,
        normalisation), tokenised by its ``tokenizer.json`` truncated at ``max_seq_length`` tokens.
        Raises InputError for another architecture."""
        from tokenizers import Tokenizer

        folder = Path(folder)
        bert = _bert_from_folder(folder)
        tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        tok.no_padding()
        tok.enable_truncation(max_length=int(max_seq_length))

        def preprocess(texts: list[str]) -> dict[str, Any]:
            return features(tok.encode_batch(texts))

        def features(encs: list) -> dict[str, Any]:
            import torch

            n = max((len(e.ids) for e in encs), default=0)
            ids = torch.zeros((len(encs), n), dtype=torch.int64)
            types = torch.zeros((len(encs), n), dtype=torch.int64)
            mask = torch.zeros((len(encs), n), dtype=torch.int64)
            for i, e in enumerate(encs):
                ids[i, :len(e.ids)] = torch.tensor(e.ids)
                types[i, :len(e.ids)] = torch.tensor(e.type_ids)
                mask[i, :len(e.ids)] = 1
            return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}

        def tokenize(texts: list[str]) -> tuple[dict[str, Any], list]:
            encs = tok.encode_batch(texts)
            return features(encs), [e.offsets for e in encs]

        return cls(name, int(bert.config.hidden_size), bert, preprocess, tokenize)

    def row_independent_copy(self) -> "PackedBertEncoder":
        """This encoder in the row-independent mode (the same weights, shared)."""
        enc = copy.copy(self)
        enc.row_independent = True
        return enc

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalised embeddings ``[len(texts), dim]`` float32 (same as the embedder's ``encode``)."""
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        import torch

        with torch.inference_mode():
            X = self._forward(list(texts)).numpy()
        return validate_embeddings(np.asarray(X, dtype=np.float32), f"{self.name} output", self.dim)

    def encode_spans(self, texts: Sequence[str], spans: Sequence[tuple[int, np.ndarray]]
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``texts``' embeddings (as :meth:`encode`) and, from the same forward pass, late chunking:
        for each request ``(t, ranges)`` of ``spans`` (``ranges`` an int array
        ``[r, 2]`` of character ranges ``[a, b)`` of ``texts[t]``), the L2-normalised mean of the
        model's last hidden states over the tokens of ``texts[t]`` that lie inside the ranges (one
        forward pass of the whole text: each token's state carries its context).

        Returns ``(texts' embeddings [len(texts), dim], span embeddings [len(spans), dim] float32,
        ok [len(spans)] bool)``; a request none of whose tokens survives the model's truncation (or
        whose ranges hold no token) is not ok and its row is zero: embed it on its own."""
        import torch

        out = np.zeros((len(spans), self.dim), np.float32)
        ok = np.zeros(len(spans), bool)
        if not len(texts):
            return np.zeros((0, self.dim), np.float32), out, ok
        texts = list(texts)
        features, offsets = self._tokenize(texts)
        with torch.inference_mode():
            h, lengths, order = self._hidden(texts, features)
            X = validate_embeddings(self._pool(h, lengths, order).numpy(), f"{self.name} output", self.dim)
        start = np.zeros(len(texts), np.int64)  # first token of each text in h (packed in length order)
        length = np.zeros(len(texts), np.int64)
        start[order.numpy()] = np.concatenate([[0], np.cumsum(lengths.numpy())[:-1]])
        length[order.numpy()] = lengths.numpy()
        rows, members = [], []
        for r, (t, ranges) in enumerate(spans):
            off = np.asarray(offsets[t], np.int64).reshape(-1, 2)
            if len(off) != length[t]:
                raise RuntimeError("tokenizer offsets do not match the model's tokenisation")
            real = off[:, 1] > off[:, 0]  # special tokens have empty offsets
            ranges = np.asarray(ranges, np.int64).reshape(-1, 2)
            inside = ((off[:, None, 0] >= ranges[None, :, 0]) & (off[:, None, 1] <= ranges[None, :, 1])).any(1)
            tok = np.flatnonzero(real & inside)
            if len(tok):
                ok[r] = True
                rows.append(np.full(len(tok), r, np.int64))
                members.append(start[t] + tok)
        if rows:
            row = torch.from_numpy(np.concatenate(rows))
            tok = torch.from_numpy(np.concatenate(members))
            with torch.inference_mode():
                pooled = torch.zeros(len(spans), h.shape[1], dtype=h.dtype).index_add_(0, row, h[tok])
                pooled = torch.nn.functional.normalize(pooled[torch.from_numpy(np.flatnonzero(ok))], dim=1)
            out[ok] = pooled.numpy()
        return X, out, ok

    def _forward(self, texts: list[str]) -> Any:
        return self._pool(*self._hidden(texts))

    @staticmethod
    def _pool(h: Any, lengths: Any, order: Any) -> Any:
        """Mean pooling of each text's tokens, L2-normalised, rows back in input order."""
        import torch
        import torch.nn.functional as F

        seq = torch.repeat_interleave(torch.arange(len(lengths)), lengths)
        pooled = torch.zeros(len(lengths), h.shape[1], dtype=h.dtype).index_add_(0, seq, h)
        pooled = F.normalize(pooled / lengths.to(h.dtype)[:, None], dim=1)
        out = torch.empty_like(pooled)
        out[order] = pooled
        return out

    def _hidden(self, texts: list[str], features: dict[str, Any] | None = None) -> tuple[Any, Any, Any]:
        """The last hidden states of ``texts``' tokens packed as ``[tokens, hidden]`` with the texts
        in ``order`` (by token count) and their ``lengths`` in that order; ``features``: the texts
        already tokenised by ``preprocess`` (default: tokenised here)."""
        import torch
        import torch.nn.functional as F

        if features is None:
            features = self._preprocess(texts)  # the model's own tokenisation (truncation, special tokens)
        mask = features["attention_mask"].bool()
        lengths = mask.sum(dim=1)
        order = torch.argsort(lengths, stable=True)  # equal lengths contiguous: attention per group
        mask, lengths = mask[order], lengths[order]
        ids = features["input_ids"][order][mask]
        types = features["token_type_ids"][order][mask] if "token_type_ids" in features \
            else torch.zeros_like(ids)
        positions = torch.arange(mask.shape[1]).expand_as(mask)[mask]
        emb = self._bert.embeddings
        h = emb.word_embeddings(ids) + emb.position_embeddings(positions) + emb.token_type_embeddings(types)
        h = emb.LayerNorm(h)
        groups = _length_groups(lengths.tolist())
        linear = _per_text(lengths.tolist()) if self.row_independent else (lambda layer, x: layer(x))
        for layer in self._bert.encoder.layer:
            att = layer.attention
            q, k, v = linear(att.self.query, h), linear(att.self.key, h), linear(att.self.value, h)
            ctx = torch.empty_like(h)
            for start, stop, n in groups:
                b = (stop - start) // n
                heads = [x[start:stop].view(b, n, self._heads, self._head_dim).transpose(1, 2) for x in (q, k, v)]
                ctx[start:stop] = F.scaled_dot_product_attention(*heads).transpose(1, 2).reshape(stop - start, -1)
            h = att.output.LayerNorm(linear(att.output.dense, ctx) + h)
            h = layer.output.LayerNorm(linear(layer.output.dense, layer.intermediate.intermediate_act_fn(
                linear(layer.intermediate.dense, h))) + h)
        return h, lengths, order


def _per_text(lengths: list[int]) -> Any:
    """``linear(layer, h)``: the linear ``layer`` applied to each text's rows of ``h`` by its own
    matrix product (the same shape for a text alone or in any batch, hence the same rounding)."""
    import torch

    bounds = list(itertools.accumulate(lengths, initial=0))

    def linear(layer: Any, h: Any) -> Any:
        return torch.cat([layer(h[a:b]) for a, b in zip(bounds[:-1], bounds[1:])])

    return linear


_QUERY_ENCODERS: "weakref.WeakKeyDictionary[Any, PackedBertEncoder | None]" = weakref.WeakKeyDictionary()
_QUERY_ENCODERS_LOCK = threading.Lock()


def query_encoder(embedder: Embedder) -> PackedBertEncoder | None:
    """The row-independent packed encoder of ``embedder`` (built and probed once per embedder
    object, then reused), or None when :meth:`PackedBertEncoder.for_embedder` declines it."""
    def build() -> PackedBertEncoder | None:
        enc = PackedBertEncoder.for_embedder(embedder)
        return None if enc is None else enc.row_independent_copy()

    try:
        with _QUERY_ENCODERS_LOCK:
            if embedder in _QUERY_ENCODERS:
                return _QUERY_ENCODERS[embedder]
    except TypeError:  # not weak-referenceable or not hashable: not cached
        return build()
    enc = build()
    with _QUERY_ENCODERS_LOCK:
        _QUERY_ENCODERS[embedder] = enc
    return enc


def _length_groups(lengths: list[int]) -> list[tuple[int, int, int]]:
    """``(first token, end token, length)`` of each run of equally long sequences (lengths sorted)."""
    groups, start = [], 0
    for n, run in itertools.groupby(lengths):
        stop = start + n * len(list(run))
        groups.append((start, stop, n))
        start = stop
    return groups


def _bert_from_folder(folder: Path) -> Any:
    """The weights of ``folder/model.safetensors`` in a BertModel's ``embeddings`` / ``encoder.layer``
    structure, each part a callable doing what the torch module does (``F.embedding``, ``F.linear``,
    ``F.layer_norm``, ``F.gelu``) — no module construction, whose weight initialisation alone costs
    more than the forward pass of a question. InputError for a config that is not a BERT with
    absolute positions and GELU."""
    import json
    from functools import partial
    from types import SimpleNamespace as Node

    import torch.nn.functional as F
    from safetensors.torch import load_file

    cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    if cfg.get("model_type") != "bert" or cfg.get("position_embedding_type", "absolute") != "absolute" \
            or cfg.get("hidden_act", "gelu") != "gelu":
        raise InputError(f"{folder}: not a BERT model with absolute positions and GELU (config.json)")
    w = {k[len("bert."):] if k.startswith("bert.") else k: v
         for k, v in load_file(str(folder / "model.safetensors")).items()}
    eps = float(cfg.get("layer_norm_eps", 1e-12))

    def linear(name: str) -> Any:
        return partial(F.linear, weight=w[f"{name}.weight"], bias=w[f"{name}.bias"])

    def norm(name: str) -> Any:
        weight, bias = w[f"{name}.weight"], w[f"{name}.bias"]
        return lambda x: F.layer_norm(x, weight.shape, weight, bias, eps)

    def embedding(name: str) -> Any:
        return partial(F.embedding, weight=w[f"{name}.weight"])

    def layer(i: int) -> Any:
        at = f"encoder.layer.{i}"
        return Node(attention=Node(self=Node(query=linear(f"{at}.attention.self.query"),
                                             key=linear(f"{at}.attention.self.key"),
                                             value=linear(f"{at}.attention.self.value")),
                                   output=Node(dense=linear(f"{at}.attention.output.dense"),
                                               LayerNorm=norm(f"{at}.attention.output.LayerNorm"))),
                    intermediate=Node(dense=linear(f"{at}.intermediate.dense"), intermediate_act_fn=F.gelu),
                    output=Node(dense=linear(f"{at}.output.dense"), LayerNorm=norm(f"{at}.output.LayerNorm")))

    return Node(embeddings=Node(word_embeddings=embedding("embeddings.word_embeddings"),
                                position_embeddings=embedding("embeddings.position_embeddings"),
                                token_type_embeddings=embedding("embeddings.token_type_embeddings"),
                                LayerNorm=norm("embeddings.LayerNorm")),
                encoder=Node(layer=[layer(i) for i in range(int(cfg["num_hidden_layers"]))]),
                config=Node(num_attention_heads=int(cfg["num_attention_heads"]), hidden_size=int(cfg["hidden_size"])))


def _supported(embedder: Embedder) -> bool:
    """A sentence-transformers model of exactly Transformer(BertModel) → mean Pooling → Normalize on the CPU."""
    st = getattr(embedder, "model", None)
    if st is None or "sentence_transformers" not in sys.modules:
        # no model, or not a sentence-transformers one (its package was never imported): importing
        # sentence-transformers here would pull in transformers, torch._dynamo and triton for nothing
        return False
    prompts = getattr(embedder, "prompts", None)
    if isinstance(prompts, dict) and any(prompts.values()):  # the packed path prepends no prompt
        return False
    try:
        from sentence_transformers import SentenceTransformer
        from transformers import BertModel
    except ImportError:
        return False
    if not isinstance(st, SentenceTransformer) or len(st) != 3:
        return False
    bert = getattr(st[0], "auto_model", None)
    if not isinstance(bert, BertModel) or str(bert.device) != "cpu":
        return False
    cfg = bert.config
    if getattr(cfg, "position_embedding_type", "absolute") != "absolute" or cfg.is_decoder:
        return False
    pooling = st[1].get_config_dict() if hasattr(st[1], "get_config_dict") else {}
    return (type(st[1]).__name__ == "Pooling" and pooling.get("pooling_mode") == "mean"
            and pooling.get("include_prompt", True) and type(st[2]).__name__ == "Normalize")


#: texts per packed forward pass in :func:`encode_bulk` (bounds the [tokens, hidden] activations)
BULK_CHUNK = 256


def encode_bulk(embedder: Embedder, texts: Sequence[str], batch_size: int = 64, progress: bool = False,
                desc: str = "embed texts") -> np.ndarray:
    """Embed many texts: padding-free in chunks of :data:`BULK_CHUNK` when the embedder is a
    model :class:`PackedBertEncoder` reproduces, else ``embedder.encode``. The chunks are taken in
    order of text length (characters, a free proxy of word pieces), so a chunk holds few
    distinct token lengths and its attention runs as a few large groups instead of one small
    group per length; each text's embedding does not depend on its chunk (up to float rounding).
    Returns float32 ``[len(texts), dim]`` in input order. The build-time effect on STITCH:
    ``docs/decisions/shared-components-build.md`` (``bench/bench_build.py``)."""
    packed = PackedBertEncoder.for_embedder(embedder)
    if packed is None or len(texts) == 0:
        return embedder.encode(list(texts), batch_size=batch_size, progress=progress)
    if len(texts) <= BULK_CHUNK and not progress:  # one pass (a batch of questions)
        return packed.encode(list(texts))
    from tqdm.auto import tqdm

    order = np.argsort(np.fromiter((len(t) for t in texts), np.int64, len(texts)), kind="stable")
    out = np.empty((len(texts), packed.dim), np.float32)
    for lo in tqdm(range(0, len(texts), BULK_CHUNK), desc=desc, disable=not progress, unit="chunk"):
        rows = order[lo:lo + BULK_CHUNK]
        out[rows] = packed.encode([texts[i] for i in rows])
    return out

"""Padding-free ("packed") query embedding for BERT-type sentence-transformers models.

A micro-batch of questions of different lengths, run through the model the usual way, is
padded to its longest question, so much of the batch's compute goes to padding. Here the
questions' tokens are concatenated into ONE ``[tokens, hidden]`` matrix, so every linear
layer (the bulk of the compute) is one large matrix product with no padding; only attention
runs per group of equally long questions. The result is the model's own embedding (mean
pooling, L2-normalised) up to float rounding; :meth:`PackedBertEncoder.for_embedder` checks
this on a probe batch and declines (returns ``None``) for any model it does not reproduce,
so callers fall back to the embedder's ``encode``. Why questions are packed:
``docs/decisions/packed-query-embedding.md``.
"""
from __future__ import annotations

import itertools
import sys
from typing import Any, Sequence

import numpy as np

from .protocol import Embedder, validate_embeddings

#: largest |difference| from the embedder's own output accepted by the probe check
PROBE_TOLERANCE = 1e-4
_PROBE_TEXTS = ["who wrote the book?", "a", "which city hosted the 1936 Summer Olympics, and who won the "
                "most gold medals there?", "x y z"]


class PackedBertEncoder:
    """Embed texts with a sentence-transformers ``[Transformer(BertModel), Pooling(mean), Normalize]``
    model without padding. Build it with :meth:`for_embedder`."""

    def __init__(self, embedder: Embedder) -> None:
        st = embedder.model  # type: ignore[attr-defined]
        self.name, self.dim = embedder.name, int(embedder.dim)
        self._st = st
        self._bert = st[0].auto_model
        cfg = self._bert.config
        self._heads = int(cfg.num_attention_heads)
        self._head_dim = int(cfg.hidden_size) // self._heads

    @classmethod
    def for_embedder(cls, embedder: Embedder) -> "PackedBertEncoder | None":
        """A packed encoder equivalent to ``embedder.encode``, or ``None`` when the embedder is not a
        supported model or the packed output differs from its own on a probe batch."""
        if not _supported(embedder):
            return None
        try:
            enc = cls(embedder)
            ref = embedder.encode(_PROBE_TEXTS, progress=False)
            if float(np.abs(enc.encode(_PROBE_TEXTS) - ref).max()) > PROBE_TOLERANCE:
                return None
        except Exception:  # an unexpected model layout: use the embedder's own path
            return None
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
        offsets = self._st.tokenizer(texts, truncation=True, max_length=self._st.max_seq_length,
                                     return_offsets_mapping=True)["offset_mapping"]
        with torch.inference_mode():
            h, lengths, order = self._hidden(texts)
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

    def _hidden(self, texts: list[str]) -> tuple[Any, Any, Any]:
        """The last hidden states of ``texts``' tokens packed as ``[tokens, hidden]`` with the texts
        in ``order`` (by token count) and their ``lengths`` in that order."""
        import torch
        import torch.nn.functional as F

        features = self._st.preprocess(texts)  # the model's own tokenisation (truncation, special tokens)
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
        for layer in self._bert.encoder.layer:
            att = layer.attention
            q, k, v = att.self.query(h), att.self.key(h), att.self.value(h)
            ctx = torch.empty_like(h)
            for start, stop, n in groups:
                b = (stop - start) // n
                heads = [x[start:stop].view(b, n, self._heads, self._head_dim).transpose(1, 2) for x in (q, k, v)]
                ctx[start:stop] = F.scaled_dot_product_attention(*heads).transpose(1, 2).reshape(stop - start, -1)
            h = att.output.LayerNorm(att.output.dense(ctx) + h)
            h = layer.output.LayerNorm(layer.output.dense(layer.intermediate.intermediate_act_fn(
                layer.intermediate.dense(h))) + h)
        return h, lengths, order


def _length_groups(lengths: list[int]) -> list[tuple[int, int, int]]:
    """``(first token, end token, length)`` of each run of equally long sequences (lengths sorted)."""
    groups, start = [], 0
    for n, run in itertools.groupby(lengths):
        stop = start + n * len(list(run))
        groups.append((start, stop, n))
        start = stop
    return groups


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
    from tqdm.auto import tqdm

    order = np.argsort(np.fromiter((len(t) for t in texts), np.int64, len(texts)), kind="stable")
    out = np.empty((len(texts), packed.dim), np.float32)
    for lo in tqdm(range(0, len(texts), BULK_CHUNK), desc=desc, disable=not progress, unit="chunk"):
        rows = order[lo:lo + BULK_CHUNK]
        out[rows] = packed.encode([texts[i] for i in rows])
    return out

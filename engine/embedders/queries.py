"""Question embeddings: each question's row a function of its own text, whatever its batch."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .packed_bert import query_encoder
from .protocol import Embedder
from .sentence_transformer import is_sentence_transformer


def encode_queries(embedder: Embedder, texts: Sequence[str], batch_size: int = 64,
                   progress: bool = False) -> np.ndarray:
    """Query embeddings: ``embedder.encode_queries`` when the embedder has a query side
    (query prompts), else ``embedder.encode``.

    A question's row depends on its own text only, never on the other texts of the call: a BERT
    sentence-transformers model (whose padded batches round differently with the batch) runs in
    the row-independent packed mode (:func:`~hopgraph.engine.embedders.packed_bert.query_encoder`)
    when that reproduces it, else one text per forward pass. Other embedders are called as they
    are (the hashing embedder is per text by construction; a remote one is its server's)."""
    texts = list(texts)
    fn = getattr(embedder, "encode_queries", None)
    encode = fn if callable(fn) else embedder.encode
    if not texts or not _batch_dependent(embedder):
        return encode(texts, batch_size=batch_size, progress=progress)
    packed = query_encoder(embedder)
    if packed is not None:
        return packed.encode(texts)
    from tqdm.auto import tqdm

    return np.concatenate([encode([t], batch_size=1, progress=False)
                           for t in tqdm(texts, desc="embed queries", disable=not progress, unit="query")])


def _batch_dependent(embedder: Embedder) -> bool:
    """Whether ``embedder``'s rows may move with their batch: a transformer run on padded or packed
    batches (the default MiniLM embedder, any sentence-transformers model)."""
    if callable(getattr(embedder, "packed_encoder", None)):
        return True
    return is_sentence_transformer(getattr(embedder, "model", None))

"""Embedders: text to L2-normalised float32 rows (SPEC notation X and q).

The default all-MiniLM-L6-v2 (offline, :mod:`.minilm`), any sentence-transformers model
(:mod:`.sentence_transformer`), an OpenAI-compatible HTTP endpoint (:mod:`.openai_http`), a hashing
embedder for tests (:mod:`.hashing`) and any callable (:mod:`.callables`); precomputed files are
:mod:`hopgraph.engine.ingest.precomputed`. Every embedder's output passes
:func:`validate_embeddings` (:mod:`.protocol`); :func:`resolve_embedder` turns a name or an object
into an embedder and :func:`embedder_from_entry` re-creates one from an index manifest
(:mod:`.resolve`). The padding-free MiniLM path is :mod:`.packed_bert` (imported on its own: it needs torch).
"""
from .callables import CallableEmbedder
from .hashing import HashingEmbedder
from .minilm import DEFAULT_EMBEDDER, MiniLMEmbedder, minilm_model_dir
from .openai_http import OpenAIEmbedder
from .protocol import Embedder, validate_embeddings
from .queries import encode_queries
from .resolve import embedder_entry, embedder_from_entry, embedder_spec, is_resolvable, resolve_embedder
from .sentence_transformer import SentenceTransformerEmbedder

__all__ = ["Embedder", "validate_embeddings", "encode_queries", "DEFAULT_EMBEDDER", "MiniLMEmbedder",
           "minilm_model_dir", "HashingEmbedder", "CallableEmbedder", "SentenceTransformerEmbedder",
           "OpenAIEmbedder", "resolve_embedder", "embedder_spec", "embedder_entry", "embedder_from_entry",
           "is_resolvable"]

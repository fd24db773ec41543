"""Padding-free MiniLM embedding (engine/embedders/packed_bert.py): equal to the model's own encode, and in the
row-independent mode (how questions are embedded) bit for bit the same in any batch."""
from __future__ import annotations

import numpy as np

from hopgraph.engine.embedders.core import HashingEmbedder
from hopgraph.engine.embedders.packed_bert import PackedBertEncoder, _length_groups


def test_length_groups_are_runs_of_equal_lengths():
    assert _length_groups([2, 2, 3, 5, 5, 5]) == [(0, 4, 2), (4, 7, 3), (7, 22, 5)]
    assert _length_groups([4]) == [(0, 4, 4)]
    assert _length_groups([]) == []


def test_unsupported_embedder_is_declined():
    assert PackedBertEncoder.for_embedder(HashingEmbedder(16)) is None


def test_packed_equals_encode(minilm):
    packed = PackedBertEncoder.for_embedder(minilm)
    assert packed is not None
    texts = ["Who directed the film that won the 1998 Palme d'Or?", "a", "x " * 400,  # truncated at 256 tokens
             "  spaces around  ", "émigré café naïve 東京", "Which band released Abbey Road?",
             "Which band released Abbey Road?", "short one", "?"]
    for batch in (texts, texts[:1], texts[2:3], list(reversed(texts))):
        got = packed.encode(batch)
        assert got.shape == (len(batch), minilm.dim) and got.dtype == np.float32
        np.testing.assert_allclose(got, minilm.encode(batch), atol=1e-5)
    assert packed.encode([]).shape == (0, minilm.dim)


def test_encode_bulk_length_order_keeps_input_order(minilm, monkeypatch):
    """encode_bulk takes its chunks in length order (issue 14) and returns rows in input order."""
    import hopgraph.engine.embedders.packed_bert as pb

    monkeypatch.setattr(pb, "BULK_CHUNK", 3)  # several chunks, each of similar lengths
    texts = ["a much longer sentence about the 1936 Summer Olympics in Berlin", "b", "Abbey Road",
             "who?", "the band that released Abbey Road in 1969", "x y", "Bern is a city."]
    got = pb.encode_bulk(minilm, texts)
    np.testing.assert_allclose(got, minilm.encode(texts), atol=1e-5)
    np.testing.assert_array_equal(pb.encode_bulk(HashingEmbedder(16), texts), HashingEmbedder(16).encode(texts))


QUESTIONS = ["Paris", "x", "who is he", "Who directed the film that won the 1998 Palme d'Or?", "a b c d",
             "Which band released Abbey Road in 1969, and who produced it?", "émigré café naïve 東京", "?"]


def test_row_independent_mode_is_bit_exact_in_any_batch(minilm):
    """Each text's embedding alone, in the whole batch, reversed, and in chunks: identical bits
    (the fast mode rounds matrix products by the batch's shape, ~1e-7)."""
    packed = PackedBertEncoder.for_embedder(minilm, row_independent=True)
    assert packed is not None and packed.row_independent
    alone = np.concatenate([packed.encode([q]) for q in QUESTIONS])
    np.testing.assert_allclose(alone, minilm.encode(QUESTIONS), atol=1e-5)
    np.testing.assert_array_equal(packed.encode(QUESTIONS), alone)
    np.testing.assert_array_equal(packed.encode(QUESTIONS[::-1])[::-1], alone)
    chunks = np.concatenate([packed.encode(QUESTIONS[i:i + 3]) for i in range(0, len(QUESTIONS), 3)])
    np.testing.assert_array_equal(chunks, alone)


def test_encode_queries_rows_depend_on_their_own_text_only(minilm):
    from hopgraph.engine.embedders.core import SentenceTransformerEmbedder
    from hopgraph.engine.embedders.queries import encode_queries
    from hopgraph.engine.embedders.packed_bert import query_encoder

    assert query_encoder(minilm) is query_encoder(minilm)  # built and probed once per embedder
    prompted = SentenceTransformerEmbedder(minilm.model, prompts={"query": "query: ", "passage": ""})
    assert query_encoder(prompted) is None  # a prompt: one text per forward pass instead
    for embedder in (minilm, prompted):
        alone = np.concatenate([encode_queries(embedder, [q]) for q in QUESTIONS])
        np.testing.assert_array_equal(encode_queries(embedder, QUESTIONS), alone)
        np.testing.assert_array_equal(encode_queries(embedder, QUESTIONS[::-1])[::-1], alone)
    assert encode_queries(minilm, []).shape == (0, minilm.dim)

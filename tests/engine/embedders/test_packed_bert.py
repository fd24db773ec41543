"""Padding-free MiniLM query embedding (engine/embedders/packed_bert.py): equal to the model's own encode."""
from __future__ import annotations

import numpy as np
import pytest

from hopgraph.engine.embedders import HashingEmbedder
from hopgraph.engine.embedders.packed_bert import PackedBertEncoder, _length_groups


def test_length_groups_are_runs_of_equal_lengths():
    assert _length_groups([2, 2, 3, 5, 5, 5]) == [(0, 4, 2), (4, 7, 3), (7, 22, 5)]
    assert _length_groups([4]) == [(0, 4, 4)]
    assert _length_groups([]) == []


def test_unsupported_embedder_is_declined():
    assert PackedBertEncoder.for_embedder(HashingEmbedder(16)) is None


@pytest.mark.slow
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


@pytest.mark.slow
def test_encode_bulk_length_order_keeps_input_order(minilm, monkeypatch):
    """encode_bulk takes its chunks in length order and returns rows in input order."""
    import hopgraph.engine.embedders.packed_bert as pb

    monkeypatch.setattr(pb, "BULK_CHUNK", 3)  # several chunks, each of similar lengths
    texts = ["a much longer sentence about the 1936 Summer Olympics in Berlin", "b", "Abbey Road",
             "who?", "the band that released Abbey Road in 1969", "x y", "Bern is a city."]
    got = pb.encode_bulk(minilm, texts)
    np.testing.assert_allclose(got, minilm.encode(texts), atol=1e-5)
    np.testing.assert_array_equal(pb.encode_bulk(HashingEmbedder(16), texts), HashingEmbedder(16).encode(texts))

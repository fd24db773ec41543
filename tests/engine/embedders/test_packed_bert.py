"""Padding-free MiniLM embedding (engine/embedders/packed_bert.py): equal to sentence-transformers' encode,
from the sentence-transformers model or from the model folder alone."""
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


TEXTS = ["Who directed the film that won the 1998 Palme d'Or?", "a", "x " * 400,  # truncated at 256 tokens
         "  spaces around  ", "émigré café naïve 東京", "Which band released Abbey Road?",
         "Which band released Abbey Road?", "short one", "?", "\tTabs\nand lines "]


def sentence_transformers_encode(minilm, texts):
    return minilm.model.encode(list(texts), convert_to_numpy=True, normalize_embeddings=True)


@pytest.mark.slow
def test_packed_equals_sentence_transformers(minilm):
    class STOnly:  # the sentence-transformers model without MiniLMEmbedder's own packed encoder
        name, dim, model, prompts = minilm.name, minilm.dim, minilm.model, None

        def encode(self, texts, batch_size=64, progress=False):
            return sentence_transformers_encode(minilm, texts)

    for packed in (PackedBertEncoder.for_embedder(STOnly()), minilm.packed_encoder()):
        assert packed is not None
        for batch in (TEXTS, TEXTS[:1], TEXTS[2:3], list(reversed(TEXTS))):
            got = packed.encode(batch)
            assert got.shape == (len(batch), minilm.dim) and got.dtype == np.float32
            np.testing.assert_allclose(got, sentence_transformers_encode(minilm, batch), atol=1e-5)
        assert packed.encode([]).shape == (0, minilm.dim)
    np.testing.assert_allclose(minilm.encode(TEXTS), sentence_transformers_encode(minilm, TEXTS), atol=1e-5)


@pytest.mark.slow
def test_the_default_embedder_answers_without_transformers():
    import subprocess
    import sys

    code = ("import sys, hopgraph\n"
            "from hopgraph.engine.embedders import resolve_embedder\n"
            "X = resolve_embedder('minilm').encode(['Who designed the bridge?'])\n"
            "print(X.shape, sorted(m for m in ('transformers', 'sentence_transformers', 'sklearn') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "(1, 384) []"


@pytest.mark.slow
def test_encode_bulk_length_order_keeps_input_order(minilm, monkeypatch):
    """encode_bulk takes its chunks in length order and returns rows in input order."""
    import hopgraph.engine.embedders.packed_bert as pb

    monkeypatch.setattr(pb, "BULK_CHUNK", 3)  # several chunks, each of similar lengths
    texts = ["a much longer sentence about the 1936 Summer Olympics in Berlin", "b", "Abbey Road",
             "who?", "the band that released Abbey Road in 1969", "x y", "Bern is a city."]
    got = pb.encode_bulk(minilm, texts)
    np.testing.assert_allclose(got, sentence_transformers_encode(minilm, texts), atol=1e-5)
    np.testing.assert_array_equal(pb.encode_bulk(HashingEmbedder(16), texts), HashingEmbedder(16).encode(texts))

"""Padding-free MiniLM embedding (engine/embedders/packed_bert.py): equal to sentence-transformers' encode,
from the sentence-transformers model or from the model folder alone, and in the row-independent mode (how
questions are embedded) bit for bit the same in any batch."""
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


QUESTIONS = ["Paris", "x", "who is he", "Who directed the film that won the 1998 Palme d'Or?", "a b c d",
             "Which band released Abbey Road in 1969, and who produced it?", "émigré café naïve 東京", "?"]


@pytest.mark.slow
def test_row_independent_mode_is_bit_exact_in_any_batch(minilm):
    """Each text's embedding alone, in the whole batch, reversed, and in chunks: identical bits
    (the fast mode rounds matrix products by the batch's shape, ~1e-7)."""
    from hopgraph.engine.embedders.packed_bert import query_encoder

    for packed in (query_encoder(minilm), PackedBertEncoder.for_embedder(minilm).row_independent_copy()):
        assert packed is not None and packed.row_independent
        check_row_independent(packed, minilm)
    assert not minilm.packed_encoder().row_independent  # the bulk encoder keeps its fast mode


def check_row_independent(packed, minilm):
    alone = np.concatenate([packed.encode([q]) for q in QUESTIONS])
    np.testing.assert_allclose(alone, minilm.encode(QUESTIONS), atol=1e-5)
    np.testing.assert_array_equal(packed.encode(QUESTIONS), alone)
    np.testing.assert_array_equal(packed.encode(QUESTIONS[::-1])[::-1], alone)
    chunks = np.concatenate([packed.encode(QUESTIONS[i:i + 3]) for i in range(0, len(QUESTIONS), 3)])
    np.testing.assert_array_equal(chunks, alone)


@pytest.mark.slow
def test_encode_queries_rows_depend_on_their_own_text_only(minilm):
    from hopgraph.engine.embedders import SentenceTransformerEmbedder
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

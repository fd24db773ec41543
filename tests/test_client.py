"""hopgraph.Client (issue 7): request encoding and error mapping without a server;
the end-to-end behaviour is tested against the real server in test_server.py."""
from __future__ import annotations

import numpy as np
import pytest

import hopgraph
from hopgraph.client import RequestRejected, ServiceError, encode_queries


def test_client_is_exported():
    assert hopgraph.Client is hopgraph.client.Client
    assert "Client" in hopgraph.__all__


def test_encode_texts_and_dicts():
    assert encode_queries("one question") == ["one question"]
    assert encode_queries(["a", {"text": "b"}, {"embedding": [1.0, 2.0]}]) == \
        ["a", {"text": "b"}, {"embedding": [1.0, 2.0]}]


def test_encode_embeddings_exactly():
    Q = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    encoded = encode_queries(Q)
    assert len(encoded) == 3
    assert np.array_equal(np.asarray([e["embedding"] for e in encoded], dtype=np.float32), Q)  # lossless
    assert encode_queries(Q[0]) == [encoded[0]]  # a vector is one query
    assert encode_queries([Q[1]]) == [encoded[1]]
    assert encode_queries(np.array([[1, 2]])) == [{"embedding": [1.0, 2.0]}]


@pytest.mark.parametrize("bad", [[3], [None], np.array(["a", "b"])])
def test_encode_rejects_other_types(bad):
    with pytest.raises(hopgraph.InputError):
        encode_queries(bad)


def test_error_classes():
    e = RequestRejected(422, "k must be between 1 and 100, got 0")
    assert isinstance(e, hopgraph.InputError) and isinstance(e, ServiceError) and isinstance(e, hopgraph.HopgraphError)
    assert e.status == 422 and "HTTP 422" in str(e) and e.detail.startswith("k must")
    assert not isinstance(ServiceError(401, "no key"), hopgraph.InputError)


def test_connection_refused_is_reported():
    pytest.importorskip("httpx")
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with hopgraph.Client(f"http://127.0.0.1:{port}", timeout=2) as c, pytest.raises(ServiceError) as e:
        c.health()
    assert e.value.status is None and f"127.0.0.1:{port}" in str(e.value) and "Connect" in str(e.value)

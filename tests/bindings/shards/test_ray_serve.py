"""``hopgraph serve --ray``: a local Ray cluster (a head and one worker node on this machine), two shards
of two replicas each and the router. Through HTTP and the Python client: every pipeline returns the
single index's ids and scores; a replica killed mid-traffic costs no request; adds and deletes reach
the owning shards."""
from __future__ import annotations

import json
import socket
import threading
import time

import numpy as np
import pytest

from hopgraph import Client, Index
from hopgraph.shards import shard_index

from conftest import SHARED_DATA
from shard_corpus import ALL, PARAMS, QUESTIONS

ray = pytest.importorskip("ray")
pytest.importorskip("ray.serve")
pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def source_index(saved_index, tmp_path_factory) -> tuple[Index, list[str]]:
    """The shared HotpotQA set's seven-pipeline index and questions when ``../shared`` is there, else
    the demo corpus's."""
    data = SHARED_DATA / "hotpotqa"
    if not (data / "corpus.jsonl").is_file():
        return Index.load(saved_index, progress=False), QUESTIONS
    path = tmp_path_factory.mktemp("hotpotqa") / "index"
    Index.build(data / "corpus.jsonl", embedder="hashing-64", pipelines=ALL, params=PARAMS, progress=False).save(path)
    questions = [json.loads(line)["question"] for line in (data / "questions.jsonl").read_text().splitlines()]
    return Index.load(path, progress=False), questions


@pytest.fixture(scope="module")
def cluster(saved_index, tmp_path_factory):
    """(single index, router URL, sharded directory, questions) on a head + worker Ray cluster,
    S = 2, R = 2, over the shared HotpotQA set (the demo corpus without it)."""
    from ray import serve
    from ray.cluster_utils import Cluster

    from hopgraph.shards.ray_serve import serve_sharded

    single, questions = source_index(saved_index, tmp_path_factory)
    out = shard_index(single, 2, tmp_path_factory.mktemp("ray") / "shards")
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    c.add_node(num_cpus=1)
    ray.init(address=c.address, log_to_driver=False)
    port = free_port()
    try:
        serve_sharded(c.address, out, replicas=2, port=port, blocking=False, embedder="hashing-64")
        yield single, f"http://127.0.0.1:{port}", out, questions
    finally:
        serve.shutdown()
        ray.shutdown()
        c.shutdown()


def expected(single: Index, pipeline: str, questions=QUESTIONS, k: int = 8):
    ids, scores = single.search_arrays(questions, pipeline, k=k)
    return [[single.corpus.ids[j] for j in row if j >= 0] for row in ids], \
        [[float(s) for j, s in zip(row, srow) if j >= 0] for row, srow in zip(ids, scores)]


def check_equal(single: Index, client: Client, pipeline: str, questions=QUESTIONS) -> None:
    hits = [row for at in range(0, len(questions), 10)  # requests well within the server's deadline
            for row in client.search(questions[at:at + 10], pipeline, k=8)]
    ids, scores = expected(single, pipeline, questions)
    assert [[h.id for h in row] for row in hits] == ids, pipeline
    for got, want in zip(hits, scores):
        np.testing.assert_allclose([h.score for h in got], want, rtol=0, atol=1e-6, err_msg=pipeline)


def test_every_pipeline_equals_the_single_index(cluster):
    single, url, _, questions = cluster
    with Client(url) as client:
        assert client.health()["passages"] == single.n_live
        for name in ALL:
            check_equal(single, client, name, questions)
        allowed = [single.corpus.ids[i] for i in range(0, len(single.X), 2)]
        hits = client.search(questions[:5], "g3rag", k=8, allowed_ids=allowed)
        ids, _ = single.search_arrays(questions[:5], "g3rag", k=8, allowed_ids=allowed)
        assert [[h.id for h in row] for row in hits] == [[single.corpus.ids[j] for j in row if j >= 0] for row in ids]


def test_clients_and_retrievers_work_unchanged(cluster):
    from hopgraph import AsyncClient
    from hopgraph.client import run_sync
    from hopgraph.integrations import langchain as hg_langchain
    from hopgraph.integrations import llamaindex as hg_llamaindex

    single, url, _, questions = cluster
    want, _ = expected(single, "hybrid", questions[:3], k=4)
    with Client(url) as client:
        assert [[d.id for d in hg_langchain.HopgraphRetriever(client=client, pipeline="hybrid", k=4).invoke(q)]
                for q in questions[:3]] == want
        assert [[n.node.id_ for n in hg_llamaindex.HopgraphRetriever(client, pipeline="hybrid", k=4).retrieve(q)]
                for q in questions[:3]] == want
    ac = AsyncClient(url)
    assert [[h.id for h in row] for row in run_sync(ac.search(questions[:3], "hybrid", k=4))] == want


def test_a_replica_killed_mid_traffic_costs_no_request(cluster):
    from ray import serve

    single, url, _, _ = cluster
    ids, _ = expected(single, "hybrid")
    errors, answers = [], []
    stop = threading.Event()

    def traffic() -> None:
        with Client(url) as client:
            while not stop.is_set():
                try:
                    answers.append([[h.id for h in row] for row in client.search(QUESTIONS, "hybrid", k=8)])
                except Exception as e:  # noqa: BLE001 - every failure is counted
                    errors.append(repr(e))

    thread = threading.Thread(target=traffic)
    thread.start()
    time.sleep(1.0)
    replicas = [a for a in ray.util.list_named_actors(all_namespaces=True)
                if "shard-000" in a["name"] and "REPLICA" in a["name"]]
    assert len(replicas) == 2
    ray.kill(ray.get_actor(replicas[0]["name"], namespace=replicas[0]["namespace"]), no_restart=True)
    time.sleep(4.0)
    stop.set()
    thread.join()
    assert not errors and len(answers) > 5 and all(a == ids for a in answers)
    deadline = time.monotonic() + 60  # Ray Serve starts a replacement, which rejoins
    while serve.status().applications["hopgraph"].deployments["shard-000"].status != "HEALTHY" or \
            len([a for a in ray.util.list_named_actors(all_namespaces=True)
                 if "shard-000" in a["name"] and "REPLICA" in a["name"]]) < 2:
        assert time.monotonic() < deadline, "the killed replica was not replaced"
        time.sleep(1.0)


def test_add_and_delete_through_the_router(cluster):
    single, url, out, _ = cluster
    new = [{"id": f"ray-{i}", "title": f"Harbor Bridge {i}", "text": f"The Harbor Bridge {i} was designed by "
            f"Marisol Venn in {2000 + i}."} for i in range(3)]
    with Client(url) as client:
        answer = client.add(new)
        assert answer["added"] == [r["id"] for r in new] and answer["committed"] is True
        client.delete("ray-1")
        client.delete(single.corpus.ids[2])
        single.add(new)
        single.delete(["ray-1", single.corpus.ids[2]])
        for name in ALL:
            check_equal(single, client, name)
        assert client.passage("ray-2")["text"] == new[2]["text"]
    held = [Index.load(out / f"shard-00{s}", progress=False).corpus.ids for s in range(2)]
    assert sum(("ray-0" in list(h)) for h in held) == 1

"""Distributed build on a local Ray cluster started by the test: the same index
as a single-process build."""
from __future__ import annotations

import os

import numpy as np
import pytest
from conftest import clustered_embeddings

ray = pytest.importorskip("ray", reason="Ray is the optional extra hopgraph[distributed]")

from hopgraph.engine import distributed  # noqa: E402
from hopgraph.engine.pipelines.g3rag.ann_graph import ann_gain_knn  # noqa: E402
from hopgraph.index import Index  # noqa: E402

pytestmark = pytest.mark.slow  # a local Ray cluster


@pytest.fixture(scope="module")
def local_cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_ray_gain_knn_row_blocks_equal_single_process(local_cluster):
    X = clustered_embeddings(1000, 16, 10, seed=7)
    pen = np.random.default_rng(0).uniform(0.5, 1.0, len(X)).astype(np.float32)
    single = ann_gain_knn(X, k=8, target_penalty=pen, nlist=10, nprobe=3)
    with distributed.ray_cluster("auto") as task_map:
        assert task_map is distributed.ray_map
        spread = ann_gain_knn(X, k=8, target_penalty=pen, nlist=10, nprobe=3, rows_per_task=300)
    assert distributed.current_task_map() is None
    for a, b in zip(single, spread):
        np.testing.assert_array_equal(a, b)


def test_ray_index_build_equals_single_process(local_cluster, tmp_path, demo_corpus):
    kwargs = dict(embedder="hashing-32", pipelines=["dense", "bm25", "g3rag"], batch_size=2, progress=False,
                  params={"g3rag": {"mode": "ann"}})
    single = Index.build(demo_corpus, work_dir=tmp_path / "a.work", **kwargs)
    spread = Index.build(demo_corpus, work_dir=tmp_path / "b.work", ray_address="auto", **kwargs)
    np.testing.assert_array_equal(np.asarray(single.X), np.asarray(spread.X))
    single.save(tmp_path / "a")
    spread.save(tmp_path / "b")
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*.npy"))
    assert files == sorted(p.relative_to(tmp_path / "b") for p in (tmp_path / "b").rglob("*.npy"))
    for f in files:
        np.testing.assert_array_equal(np.load(tmp_path / "a" / f), np.load(tmp_path / "b" / f), err_msg=str(f))


def test_loopback_node_switches_clusters_off_for_its_block_only(monkeypatch):
    from ray._private import ray_constants, services, worker

    name = ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR
    monkeypatch.setenv(name, "1")
    monkeypatch.setattr(worker, "_global_node", None)  # as before ray.init, even if a test's cluster runs
    before = ray_constants.ENABLE_RAY_CLUSTER
    with distributed.loopback_node():
        assert os.environ[name] == "0" and ray_constants.ENABLE_RAY_CLUSTER is False
        assert services.resolve_ip_for_localhost("127.0.0.1") == "127.0.0.1"  # what ray.init does with it
    assert os.environ[name] == "1" and ray_constants.ENABLE_RAY_CLUSTER is before
    monkeypatch.delenv(name)
    with distributed.loopback_node():
        pass
    assert name not in os.environ

"""bench/gpu_e2e.py cannot rot: its interpreter smoke mode (TRITON_INTERPRET=1 on CPU tensors, tiny
sizes) runs every part here, as on a bare device machine, and the JSON it leaves holds every figure
the GPU run reports; its budget, stage timing and transfer-count hooks behave."""
from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from bare_run import run_bare
from hopgraph.engine.pipelines import pipeline_names

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu_e2e.py"
#: every built-in pipeline
EVERY = set(pipeline_names())


@pytest.fixture(scope="module")
def e2e():
    import gpu_e2e  # bench/ is on the test path (pyproject.toml)

    return gpu_e2e


@pytest.mark.slow
def test_interpret_quick_run_end_to_end_without_hopgraph_installed(tmp_path, e2e):
    env = {**os.environ, "OUT": str(tmp_path / "out"), "PYTHONUNBUFFERED": "1"}
    proc = run_bare(SCRIPT, "--interpret", "--quick", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert proc.stdout.startswith("hopgraph is not importable from site-packages")
    summary = json.loads((tmp_path / "out" / "gpu_e2e.json").read_text())
    assert summary["ok"] and summary["env"]["mode"] == "interpret"
    assert {p: r["status"] for p, r in summary["parts"].items()} == dict.fromkeys(e2e.PLAN, "DONE")

    builds = {tuple(b["pipelines"]): b for b in summary["builds"]}
    large, graph = builds[e2e.LARGE_PIPELINES], builds[e2e.GRAPH_PIPELINES]
    assert list(large["stages_s"]["cuda"]) == ["embeddings", "dense index", "BM25", "extraction", "density", "graph",
                                               "save"]
    assert set(large["kernel_ops_s"]["cuda"]["g3rag"]) >= {"density", "gain_knn"}
    assert list(large["stages_s"]["cpu"]) == ["density", "graph"]  # the device-dependent stages, built again
    assert set(large["shared_stages"]) == set(e2e.SHARED_STAGES)
    assert {"hypergraph", "hypergraph (ppr_binary)", "knowledge graph", "extraction", "save"} <= \
        set(graph["stages_s"]["cuda"])
    # a fit that dispatched no kernel op is the same CPU code on both devices: not built again
    assert set(graph["stages_s"]["cpu"]) == {s for p, ops in graph["kernel_ops_s"]["cuda"].items() if ops
                                             for s in (e2e.FIT_STAGE[p],)}

    assert {q["pipeline"] for q in summary["queries"]} == EVERY
    for q in summary["queries"]:
        assert q["cuda"]["queries_per_s"] > 0 and q["cpu"]["queries_per_s"] > 0, q
        assert q["ids"]["ok"] and q["ids"]["queries"] == summary["env"]["sizes"]["batch"], q
        assert q["cuda"]["rss_gb"] > 0 and "transfers_text" in q["cuda"]
    assert [(a["side"], a["first_added_found"]) for a in summary["adds"]] == [("cuda", True), ("cpu", True)]
    assert [(ld["side"], ld["n"]) for ld in summary["loads"]] == [
        (side, n) for n in (summary["env"]["sizes"]["large"], summary["env"]["sizes"]["graph"]) for side in ("cuda", "cpu")]
    assert all(a["added"] == summary["env"]["sizes"]["add"] for a in summary["adds"])
    for heading in ("(a) build of", "(b, d, e) queries", "(c) add", "load average", "gpu_e2e: ok"):
        assert heading in proc.stdout, heading


def test_timed_ops_times_both_paths_and_restores_the_registry(e2e):
    from hopgraph.kernels import call, dispatch

    X = np.random.default_rng(0).standard_normal((12, 8)).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    op = dispatch.get_op("density")
    totals: dict[str, float] = {}
    synced = []
    with e2e.timed_ops(("density", "gain_knn"), totals, lambda: synced.append(1)):
        out = call("density", X, device="cpu", backend="cpu")
        t_cpu = totals["density"]
        same = call("density", X, device="cpu", backend="triton")  # interpreter (conftest)
    assert set(totals) == {"density"} and totals["density"] > t_cpu > 0 and len(synced) == 2
    assert np.allclose(out, same, rtol=1e-5, atol=1e-6)
    assert dispatch.get_op("density") is op


def test_parts_skip_over_budget_and_failures_are_reported(e2e):
    run = e2e.E2ERun(e2e.parse_args(["--interpret", "--budget", "1"]))
    called = []
    assert not e2e.part(run, "data", 5.0, lambda: called.append(1))
    assert not called and run.parts["data"]["status"] == "SKIP" and "budget" in run.parts["data"]["detail"]
    assert run.summary()["ok"]  # a skipped part is no failure

    def broken() -> None:
        raise RuntimeError("no such thing")

    assert not e2e.part(run, "build N, CUDA", 0.0, broken)
    assert run.parts["build N, CUDA"]["status"] == "FAIL" and "no such thing" in run.parts["build N, CUDA"]["detail"]
    assert not run.summary()["ok"]


def test_sizes_follow_the_mode_and_the_flags(e2e):
    assert e2e.E2ERun(e2e.parse_args(["--interpret"])).sizes == e2e.SIZES["tiny"]
    with pytest.raises(SystemExit):
        e2e.parse_args(["--batch", "300"])
    run = e2e.E2ERun(e2e.parse_args(["--interpret", "--n-large", "50", "--add", "3"]))
    assert (run.sizes.large, run.sizes.add, run.sizes.graph) == (50, 3, e2e.SIZES["tiny"].graph)
    assert e2e.SIZES["full"] == e2e.Sizes(1_000_000, 100_000, 1_000, 256, 384)


def test_transfer_column_reads_bench_transfers_or_says_n_a(e2e, monkeypatch):
    monkeypatch.setitem(sys.modules, "transfers", None)  # not in this checkout
    assert e2e.transfers_per_batch(lambda: None, "cpu") == (None, "n/a")
    calls = []

    def count_transfers(fn, device="cpu"):
        calls.append((fn(), device))
        return {"htod": 2, "dtoh": 1, "htod_bytes": 64, "dtoh_bytes": 8, "method": "m", "result": "ids"}

    monkeypatch.setitem(sys.modules, "transfers", types.SimpleNamespace(count_transfers=count_transfers))
    counts, text = e2e.transfers_per_batch(lambda: "searched", "cuda")
    assert text == "htod 2, dtoh 1" and calls == [("searched", "cuda")]
    assert counts == {"htod": 2, "dtoh": 1, "htod_bytes": 64, "dtoh_bytes": 8, "method": "m"}  # JSON-ready

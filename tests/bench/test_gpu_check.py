"""bench/gpu_check.py cannot rot: its interpreter smoke mode (TRITON_INTERPRET=1 on CPU
tensors, tiny sizes) runs every section here, and its comparison helpers catch real
mismatches while accepting float near-ties."""
from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from bare_run import run_bare

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu_check.py"


def load_gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being created
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_interpret_quick_run_passes_without_hopgraph_installed(tmp_path):
    """The whole script, as on a bare device machine: it imports hopgraph from this checkout's
    folders (the layout of setup.py), not from an installed package."""
    env = {**os.environ, "OUT": str(tmp_path), "PYTHONUNBUFFERED": "1"}
    proc = run_bare(SCRIPT, "--interpret", "--quick", cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert proc.stdout.startswith("hopgraph is not importable from site-packages")
    summary = json.loads((tmp_path / "gpu_check.json").read_text())
    assert summary["ok"] and summary["counts"]["FAIL"] == 0 and summary["env"]["mode"] == "interpret"
    results = summary["results"]
    from hopgraph.kernels import dispatch

    checked = {r["name"] for r in results if r["section"] == "parity" and r["status"] == "PASS"}
    ops = load_gpu_check().triton_ops()
    assert set(ops) <= checked and len(ops) >= 7, (ops, checked)
    assert all(dispatch.get_op(op).triton_path for op in ops)
    passed = {(r["name"], r["case"]) for r in results if r["section"] == "pipelines" and r["status"] == "PASS"}
    for name in ("g3rag", "stitch", "ppr_binary", "dmar"):
        assert (name, "demo") in passed and any(p == name and c.startswith("generated") for p, c in passed), name
    timed = {r["name"] for r in results if r["section"] == "timing" and r["status"] == "PASS"}
    assert set(ops) <= timed
    assert "cpu/triton" in proc.stdout


def test_comparisons_catch_mismatches_and_accept_near_ties():
    gc = load_gpu_check()
    ids = np.array([[3, 1, 2, 0]])
    sc = np.array([[0.9, 0.5, 0.5, 0.1]], np.float32)
    assert gc.rankings_agree(ids, sc, ids, sc, 4)[0]
    assert gc.rankings_agree(np.array([[3, 2, 1, 0]]), sc, ids, sc, 4)[0]  # swap inside a tie
    assert not gc.rankings_agree(np.array([[1, 3, 2, 0]]), sc, ids, sc, 4)[0]  # swap of distinct scores
    assert not gc.rankings_agree(ids, sc + np.float32(0.01), ids, sc, 4)[0]

    from hopgraph.kernels.csr import CSR

    X = gc.random_unit(6, 4, 0)
    pen = np.ones(6, np.float32)
    cpu = gc.Run.cpu("gain_knn", X, k=2, sim_min=-1.0, sim_max=1.0, penalty=pen)
    assert gc.gain_rows_agree(X, pen, -1.0, 1.0, cpu, cpu)[0]
    wrong = CSR(cpu.indptr, cpu.indices[::-1].copy(), cpu.data, cpu.n_cols)
    assert not gc.gain_rows_agree(X, pen, -1.0, 1.0, wrong, cpu)[0]


def test_source_roots_are_setup_pys():
    """The script's map of hopgraph to source folders is setup.py's own (read without setuptools)."""
    import setuptools  # noqa: F401  (setup.py imports it; the script does not need it)

    spec = importlib.util.spec_from_file_location("hopgraph_setup", SCRIPT.parents[1] / "setup.py")
    setup_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(setup_module)
    assert load_gpu_check().source_roots() == setup_module.ROOTS


@pytest.mark.slow
def test_the_kernels_ncu_profiles_run_without_hopgraph_installed(tmp_path):
    """bench/ncu_kernels.py (what docs/gpu.md's Nsight Compute command runs) in its interpreter mode."""
    script = SCRIPT.with_name("ncu_kernels.py")
    proc = run_bare(script, "--interpret", "--quick", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert [line.split()[1:3] for line in proc.stdout.splitlines()[1:]] == [
        ["gain_knn", "tune"], ["gain_knn", "profile"], ["batched_ppr", "tune"], ["batched_ppr", "profile"]]

"""``hopgraph bench --gpu-compile`` / ``--gpu-model``: every Triton kernel compiled ahead of time for
sm_80 and sm_90 at the configurations its wrapper launches (no GPU needed), and checked: it
compiles, it does not spill, it keeps its occupancy within 128 registers, gain_knn and density run
on tensor cores — under this environment's Triton and under the GPU machines' (installed aside);
the performance model built on the SASS meets its targets."""
from __future__ import annotations

import importlib
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from suite import gpu_compile, gpu_model, sass

from hopgraph.cli import main
from hopgraph.kernels import TRITON_OPS

ROOT = Path(__file__).resolve().parents[2]
TARGETS = ("sm_80", "sm_90")
KEYS = {"kernel", "config", "target", "compiled", "registers", "spill_bytes", "shared_bytes", "num_warps",
        "tensor_core"}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpu_compile")
    out, keep = folder / "builds.json", folder / "cubins"
    rc = main(["bench", "--gpu-compile", "--json", str(out), "--keep", str(keep)])
    return rc, json.loads(out.read_text()), keep


def test_every_shipped_build_compiles_for_sm80_and_sm90_and_passes(compiled):
    rc, records, keep = compiled
    builds = gpu_compile.all_builds()
    assert {(r["kernel"], r["config"], r["target"]) for r in records} == \
        {(b.kernel, b.config, t) for b in builds for t in TARGETS}
    assert {b.kernel for b in builds} == set(TRITON_OPS)
    for r in records:
        assert KEYS <= set(r), r
        assert (keep / f"{r['kernel']}-{r['config']}-{r['target']}.cubin").stat().st_size > 0
    problems = [v for r in records for v in gpu_compile.violations(gpu_compile.Record(**r))]
    assert not problems and rc == 0, problems
    assert all(r["tensor_core"] for r in records if r["kernel"] in gpu_compile.TENSOR_CORE_KERNELS)


def test_every_triton_kernel_has_a_shipped_build():
    """A @triton.jit kernel (a module-level ``_..._kernel``) that no launch_builds lists would escape the check."""
    built = {b.fn for b in gpu_compile.all_builds()}
    kernels = [f"{name}:{attr}" for name in gpu_compile.KERNEL_MODULES
               for attr, value in vars(importlib.import_module(f"hopgraph.kernels.{name}")).items()
               if type(value).__name__ in ("JITFunction", "InterpretedFunction") and attr.endswith("_kernel")]
    assert len(kernels) >= 10
    assert set(kernels) <= built, set(kernels) - built


def test_violations_name_each_broken_rule():
    ok = gpu_compile.Record("gain_knn", "c", "sm_90", True, registers=128, spill_bytes=0, shared_bytes=16384,
                            num_warps=8, tensor_core=True, occupancy_warps=16)
    assert gpu_compile.violations(ok) == []
    spill = gpu_compile.Record(**{**ok.__dict__, "spill_bytes": 8})
    assert "spills 8 bytes" in gpu_compile.violations(spill)[0]
    regs = gpu_compile.Record(**{**ok.__dict__, "registers": 168,
                                 "occupancy_warps": gpu_compile.occupancy(168, 16384, 8, "sm_90")})
    assert "168 registers" in gpu_compile.violations(regs)[0]
    four = gpu_compile.Record(**{**regs.__dict__, "num_warps": 4,
                                 "occupancy_warps": gpu_compile.occupancy(168, 16384, 4, "sm_90")})
    assert gpu_compile.violations(four) == []  # 3 CTAs of 4 warps: 12 of 16 warps, not halved
    fp32 = gpu_compile.Record(**{**ok.__dict__, "tensor_core": False})
    assert "no tensor-core" in gpu_compile.violations(fp32)[0]
    broken = gpu_compile.Record("density", "c", "sm_80", False, error="CompilationError: at 3:4")
    assert "does not compile" in gpu_compile.violations(broken)[0]


LISTING = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   HMMA.1688.F32.TF32 R4, R8, R12, R4 ;
        /*0020*/                   FFMA R2, R3, R4, R5 ;
        /*0030*/                   HGMMA.64x64x16.F32 R24, gdesc[UR4], R24 ;
        /*0040*/               @P0 BRA 0x20 ;
        /*0050*/                   IADD3 R6, R6, 0x1, RZ ;
        /*0060*/               @!P1 BRA 0x10 ;
        /*0070*/                   EXIT ;
        /*0080*/                   BRA 0x80;
"""


def test_sass_loops_and_mma_shapes():
    listing = sass.parse(LISTING)
    assert [(l.start, l.end, l.depth) for l in listing.loops] == [(0x10, 0x60, 1), (0x20, 0x40, 2)]
    outer, inner = listing.loops
    assert inner.ops == {"FFMA": 1, "HGMMA": 1, "BRA": 1} and outer.ops == {"HMMA": 1, "IADD3": 1, "BRA": 1}
    assert listing.top == {"MOV": 1, "EXIT": 1, "BRA": 1}  # the closing self-branch is no loop
    assert sass.mma_macs("HMMA.1688.F32.TF32") == 16 * 8 * 8
    assert sass.mma_macs("HGMMA.64x64x16.F32") == 64 * 64 * 16 // 4
    assert not listing.half_mma


def test_gpu_model_records_and_targets(tmp_path):
    out = tmp_path / "model.json"
    assert main(["bench", "--gpu-model", "--json", str(out)]) == 0
    records = {r["kernel"]: r for r in json.loads(out.read_text())}
    assert set(records) == set(TRITON_OPS)
    for r in records.values():
        assert {"kernel", "shape", "bytes", "flops", "roofline_s", "estimate_s"} <= set(r)
        for field in ("roofline_s", "estimate_s"):
            assert set(r[field]) == {"h100", "h200"} and all(math.isfinite(v) and v > 0 for v in r[field].values())
        assert r["estimate_s"]["h100"] >= r["estimate_s"]["h200"]  # HBM 3.35 against 4.8 TB/s
    knn, ppr = records["gain_knn"], records["batched_ppr"]
    assert knn["shape"] == {"N": 10 ** 6, "d": 384, "k": 32}
    assert knn["config"] == [gpu_model.TUNED_ON_H200["gain_knn"]]  # the autotuner's choice on the H200
    assert set(knn["alu_per_entry"]) == {c for c, _ in _gain_knn_builds()} and all(
        0 < v < 1000 for v in knn["alu_per_entry"].values())
    assert ppr["shape"]["n"] == 10 ** 6 and ppr["shape"]["nnz"] == 10 ** 7 and ppr["shape"]["B"] == 256
    assert ppr["estimate_s"]["h200"] <= 2 * ppr["roofline_s"]["h200"]
    for r in (knn, ppr):  # the H200 timing beside the estimate, with where it came from
        m = r["measured_s"]
        assert 0 < m["low"] <= m["high"] and m["gpu"] == "h200" and "bench/gpu_check.py" in m["command"]
    assert all(records[k]["measured_s"] is None for k in set(records) - set(gpu_model.MEASURED))


def _gain_knn_builds() -> list[tuple[str, object]]:
    """(config, build) of gain_knn's register top-k at G3RAG's k (the model's workloads)."""
    return [(b.config, b) for b in gpu_compile.all_builds() if b.kernel == "gain_knn" and b.config.startswith("k32-")]


def test_keep_needs_gpu_compile(tmp_path, capsys):
    assert main(["bench", "--keep", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--keep" in err and "Traceback" not in err


def test_model_constants_are_the_published_peaks():
    h100, h200 = gpu_model.GPUS["h100"], gpu_model.GPUS["h200"]
    assert (h100.hbm, h200.hbm) == (3.35e12, 4.8e12)
    assert h100.fp32 == h200.fp32 == 67e12 and h100.tf32 == h200.tf32 == 495e12


#: the Triton of the GPU machines hopgraph is run on (torch 2.11's CUDA 13 wheels pin it); the pinned
#: one of this environment is checked above
DEVICE_TRITON = "3.6.0"
DEVICE_TRITON_DIR = ROOT / ".hopgraph-cache" / f"triton-{DEVICE_TRITON}"


@pytest.fixture(scope="module")
def device_triton() -> Path:
    """A folder holding Triton DEVICE_TRITON (installed once into .hopgraph-cache/ with pip, no
    dependencies; skipped, saying why, where pip cannot get it)."""
    if not (DEVICE_TRITON_DIR / "triton" / "__init__.py").is_file():
        staging = DEVICE_TRITON_DIR.with_name(DEVICE_TRITON_DIR.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                               "--target", str(staging), f"triton=={DEVICE_TRITON}"],
                              capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            pytest.skip(f"triton=={DEVICE_TRITON} cannot be installed here: {proc.stderr.strip()[-300:]}")
        staging.rename(DEVICE_TRITON_DIR)
    return DEVICE_TRITON_DIR


@pytest.mark.slow
def test_every_build_compiles_clean_under_the_device_machines_triton(device_triton, tmp_path):
    """The same check under the Triton a GPU machine has (a separate process, that Triton first on
    its path): every build compiles for sm_80 and sm_90 without spills or halved occupancy."""
    out = tmp_path / "builds.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(device_triton), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "hopgraph", "bench", "--gpu-compile", "--json", str(out)], env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.stdout.startswith(f"Triton {DEVICE_TRITON} kernels compiled"), proc.stdout[:300] + proc.stderr[-2000:]
    records = json.loads(out.read_text())
    assert {(r["kernel"], r["config"], r["target"]) for r in records} == \
        {(b.kernel, b.config, t) for b in gpu_compile.all_builds() for t in TARGETS}
    problems = [v for r in records for v in gpu_compile.violations(gpu_compile.Record(**r))]
    assert not problems and proc.returncode == 0, problems

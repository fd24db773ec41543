"""``hopgraph bench --gpu-compile``: every Triton kernel of :mod:`hopgraph.kernels` compiled ahead of
time for sm_80 and sm_90 (no GPU needed) at the configurations its wrapper launches for the
pipelines' shapes, with the resources a GPU would meet: registers, spills, shared memory, warps and
whether the SASS holds tensor-core MMA instructions.

A build is ``triton.compile(ASTSource(kernel, signature, constexprs), target=GPUTarget("cuda", cc, 32))``;
registers and the stack frame come from ``cuobjdump -res-usage`` on the cubin, spill bytes from
``ptxas -v`` (run again on the PTX only when the stack frame is not empty), tensor-core use from
the SASS (``HMMA`` on sm_80, ``HGMMA``/``HMMA`` on sm_90). Builds run in worker processes without
``TRITON_INTERPRET`` (the interpreter replaces the kernels the compiler needs); Triton caches each
build and this module its resources next to it (by the build's hash), so a second run is quick.

The shipped configurations come from the kernels' own modules (``launch_builds()`` of each
``*_triton`` module), evaluated at :data:`SHAPES`: the compile check covers what the wrappers launch.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from .common import stamp, table

#: the compile targets: name -> compute capability
TARGETS = {"sm_80": 80, "sm_90": 90}
#: the kernel modules whose ``launch_builds(shapes)`` list their shipped builds
KERNEL_MODULES = ("density_triton", "gain_knn_triton", "gain_knn_rows_triton", "sparse_diffusion_triton",
                  "hyperedge_max_propagate_triton", "group_decay_propagate_triton", "batched_ppr_triton",
                  "shapley_mc_triton")
#: kernels that must run their similarity tiles on tensor cores
TENSOR_CORE_KERNELS = ("gain_knn", "gain_knn_rows", "density")
#: registers per SM and the most resident warps / CTAs per SM (sm_80 and sm_90 alike)
REGISTER_FILE = 65536
MAX_WARPS_PER_SM = 64
MAX_CTAS_PER_SM = 32
#: shared memory per SM a kernel may use (bytes)
SHARED_PER_SM = {"sm_80": 164 * 1024, "sm_90": 228 * 1024}
#: the register count above which a kernel must not lose half its occupancy
REGISTER_LIMIT = 128


@dataclass(frozen=True)
class Build:
    """One compilation: kernel ``fn`` (``"module:attribute"`` under ``hopgraph.kernels``) with its
    argument types (``signature``: name -> Triton type, ``"constexpr"`` for compile-time values),
    the constexpr values, warps, pipeline stages and register cap; ``aligned`` names the pointer / integer
    arguments a launch sees 16-divisible (Triton specialises on them)."""

    kernel: str
    config: str
    fn: str
    signature: dict[str, str]
    constexprs: dict[str, Any]
    num_warps: int = 4
    num_stages: int = 3
    maxnreg: int | None = None
    aligned: tuple[str, ...] = ()


@dataclass
class Record:
    """The resources of one build on one target (the ``--json`` record)."""

    kernel: str
    config: str
    target: str
    compiled: bool
    registers: int | None = None
    spill_bytes: int | None = None
    shared_bytes: int | None = None
    num_warps: int | None = None
    tensor_core: bool | None = None
    stack_bytes: int | None = None
    occupancy_warps: int | None = None
    error: str | None = None
    sass_ops: dict[str, int] = field(default_factory=dict)
    listing: str = ""

    def public(self) -> dict[str, Any]:
        """The ``--json`` record: without the SASS histogram and listing (kept for :mod:`.gpu_model`)."""
        out = asdict(self)
        out.pop("sass_ops")
        out.pop("listing")
        return out


# ---------------------------------------------------------------------- the builds
def shapes() -> dict[str, Any]:
    """The pipelines' shapes the wrappers choose their configurations for (see each kernel's
    ``launch_builds``): MiniLM's d = 384 and G3RAG's k = 32, STITCH's batches of 64 questions and
    the 256-prior PPR block, DMAR's subgraph sets up to G = 32 over U = 128 local nodes."""
    return {"d": 384, "k": 32, "exact_n": 4096, "density_samples": 4096, "diffusion_seeds": 8,
            "stitch_batch": 64, "ppr_priors": (64, 256), "shapley": ((8, 128), (16, 128), (32, 128))}


def all_builds() -> list[Build]:
    """Every shipped build of every kernel module, in :data:`KERNEL_MODULES` order."""
    import importlib

    out: list[Build] = []
    for name in KERNEL_MODULES:
        module = importlib.import_module(f"hopgraph.kernels.{name}")
        out.extend(Build(**b) for b in module.launch_builds(shapes()))
    return out


# ---------------------------------------------------------------------- compiling (worker side)
def _tool(name: str, arch: int) -> str:
    from triton.backends.nvidia.compiler import get_ptxas
    from triton import knobs

    if name == "ptxas":
        return get_ptxas(arch).path
    return getattr(knobs.nvidia, name).path


def _run_tool(args: list[str]) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def _res_usage(cubin: Path, arch: int) -> dict[str, int]:
    text = _run_tool([_tool("cuobjdump", arch), "-res-usage", str(cubin)])
    line = next(l for l in text.splitlines() if "REG:" in l)
    return {k: int(v) for k, v in re.findall(r"(\w+):(\d+)", line)}


def sass_histogram(sass: str) -> dict[str, int]:
    """Opcode (without modifiers) -> count of a ``cuobjdump -sass`` listing."""
    ops: dict[str, int] = {}
    for m in re.finditer(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", sass):
        ops[m.group(1)] = ops.get(m.group(1), 0) + 1
    return ops


def _spill_bytes(ptx: str, arch: int) -> int:
    """Spill stores (bytes) that ptxas reports for this PTX."""
    sm = f"sm_{arch}a" if arch >= 90 else f"sm_{arch}"
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "k.ptx")
        src.write_text(ptx)
        log = subprocess.run([_tool("ptxas", arch), "-v", f"--gpu-name={sm}", str(src), "-o", str(Path(tmp, "k.o"))],
                             check=True, capture_output=True, text=True).stderr
    m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    return max(int(m.group(1)), int(m.group(2))) if m else 0


def occupancy(registers: int, shared: int, warps: int, target: str) -> int:
    """Resident warps per SM of a kernel (registers allocated per warp in units of 256)."""
    per_warp = -(-max(registers, 1) * 32 // 256) * 256
    ctas = min(MAX_CTAS_PER_SM, MAX_WARPS_PER_SM // warps, REGISTER_FILE // (per_warp * warps))
    if shared:
        ctas = min(ctas, SHARED_PER_SM[target] // shared)
    return ctas * warps


def compile_build(build: Build, target: str, keep: str | None = None, sass: bool = False) -> Record:
    """Compile ``build`` for ``target`` and read its resources (runs in a worker process)."""
    import importlib

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction

    arch = TARGETS[target]
    rec = Record(build.kernel, build.config, target, compiled=False, num_warps=build.num_warps)
    try:
        module, _, attr = build.fn.partition(":")
        fn = getattr(importlib.import_module(f"hopgraph.kernels.{module}"), attr)
        while not isinstance(fn, JITFunction):  # an Autotuner (or Heuristics) wraps the JITFunction
            fn = fn.fn
        names = list(build.signature)
        attrs = {(names.index(a),): [["tt.divisibility", 16]] for a in build.aligned}
        src = ASTSource(fn, dict(build.signature), constexprs=dict(build.constexprs), attrs=attrs)
        options = {"num_warps": build.num_warps, "num_stages": build.num_stages}
        if build.maxnreg:
            options["maxnreg"] = build.maxnreg
        k = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)
    except Exception as e:  # a compile error is a result of the check, reported per build
        rec.error = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"[:500]
        return rec
    if keep:
        Path(keep, f"{build.kernel}-{build.config}-{target}.cubin").write_bytes(k.asm["cubin"])
    found = _read_resources(k)
    if found is None:
        found = _resources(k, arch)
        _write_resources(k, found)
    usage, listing = found
    ops = sass_histogram(listing)
    rec.compiled = True
    rec.registers = usage["REG"]
    rec.stack_bytes = usage["STACK"]
    rec.spill_bytes = usage["SPILL"]
    rec.shared_bytes = int(k.metadata.shared)
    rec.tensor_core = any(op in ops for op in ("HMMA", "HGMMA", "IMMA", "IGMMA"))
    rec.occupancy_warps = occupancy(rec.registers, rec.shared_bytes, build.num_warps, target)
    rec.sass_ops = ops
    rec.listing = listing if sass else ""
    return rec


def _resources(k: Any, arch: int) -> tuple[dict[str, int], str]:
    """``({"REG", "STACK", "SPILL"}, SASS listing)`` of a compiled kernel (cuobjdump; ptxas -v for spills)."""
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp, "k.cubin")
        cubin.write_bytes(k.asm["cubin"])
        usage = _res_usage(cubin, arch)
        listing = _run_tool([_tool("cuobjdump", arch), "-sass", str(cubin)])
    stack = usage.get("STACK", 0)
    return {"REG": usage.get("REG", 0), "STACK": stack, "SPILL": _spill_bytes(k.asm["ptx"], arch) if stack else 0}, listing


def _resources_path(k: Any) -> Path:
    """Where the resources of a build are kept: next to Triton's cache of it, by its hash."""
    from triton import knobs

    return Path(knobs.cache.dir) / "hopgraph-resources" / f"{k.metadata.hash}.json"


def _read_resources(k: Any) -> tuple[dict[str, int], str] | None:
    try:
        found = json.loads(_resources_path(k).read_text())
        return found["usage"], found["listing"]
    except (OSError, ValueError, KeyError):
        return None


def _write_resources(k: Any, found: tuple[dict[str, int], str]) -> None:
    path = _resources_path(k)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"usage": found[0], "listing": found[1]}))
        tmp.replace(path)
    except OSError:  # a read-only cache: the next run measures again
        pass


def serve() -> None:
    """Worker entry point: compile the JSON tasks of stdin (one a line), one JSON record a line out."""
    import sys

    for line in sys.stdin:
        task = json.loads(line)
        build = Build(**{**task["build"], "aligned": tuple(task["build"]["aligned"])})
        rec = compile_build(build, task["target"], task["keep"], task["sass"])
        sys.stdout.write(json.dumps(asdict(rec)) + "\n")
        sys.stdout.flush()


def _run_worker(tasks: list[dict[str, Any]]) -> list[Record]:
    """Compile ``tasks`` in a worker process (without ``TRITON_INTERPRET``: the interpreter has no compiler)."""
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    bench = str(Path(__file__).resolve().parents[1])
    proc = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {bench!r}); "
                           "from suite.gpu_compile import serve; serve()"],
                          input="".join(json.dumps(t) + "\n" for t in tasks), capture_output=True, text=True,
                          env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"a compile worker failed: {proc.stderr.strip()[-2000:]}")
    return [Record(**json.loads(line)) for line in proc.stdout.splitlines()]


# ---------------------------------------------------------------------- the check
def violations(rec: Record) -> list[str]:
    """Why a shipped build fails the check (empty: it passes): a compile error, any spill, more
    than :data:`REGISTER_LIMIT` registers where that halves the occupancy it would have at the
    limit, no tensor-core MMA in a :data:`TENSOR_CORE_KERNELS` kernel."""
    where = f"{rec.kernel} {rec.config} {rec.target}"
    if not rec.compiled:
        return [f"{where}: does not compile ({rec.error})"]
    out = []
    if rec.spill_bytes:
        out.append(f"{where}: spills {rec.spill_bytes} bytes per thread")
    if rec.registers > REGISTER_LIMIT:
        at_limit = occupancy(REGISTER_LIMIT, rec.shared_bytes, rec.num_warps, rec.target)
        if 2 * rec.occupancy_warps <= at_limit:
            out.append(f"{where}: {rec.registers} registers: {rec.occupancy_warps} resident warps per SM "
                       f"against {at_limit} at {REGISTER_LIMIT}")
    if rec.kernel in TENSOR_CORE_KERNELS and not rec.tensor_core:
        out.append(f"{where}: no tensor-core MMA instruction in the SASS")
    return out


def compile_all(builds: Iterable[Build] | None = None, targets: Iterable[str] = tuple(TARGETS),
                keep: str | Path | None = None, jobs: int | None = None, sass: bool = False,
                progress: Callable[[Record], None] | None = None) -> list[Record]:
    """Compile every build for every target in ``jobs`` worker processes (default: the CPUs,
    at most 4), cubins kept in ``keep`` when given. Records in (build, target) order."""
    builds = list(all_builds() if builds is None else builds)
    tasks = [{"build": asdict(b), "target": t, "keep": str(keep) if keep else None, "sass": sass}
             for b in builds for t in targets]
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
    jobs = max(1, min(jobs or min(4, os.cpu_count() or 1), len(tasks)))
    with ThreadPoolExecutor(jobs) as pool:
        parts = list(pool.map(_run_worker, [tasks[i::jobs] for i in range(jobs)]))
    records: list[Record] = [None] * len(tasks)  # type: ignore[list-item]
    for i, part in enumerate(parts):
        records[i::jobs] = part
    if progress:
        for rec in records:
            progress(rec)
    return records


def render(records: list[Record]) -> str:
    """The resource table, one row per kernel, configuration and target."""
    head = ["kernel", "config", "target", "regs", "spill B", "smem B", "warps", "occ warps", "tensor core", "ok"]
    rows = []
    for r in records:
        bad = violations(r)
        if not r.compiled:
            rows.append([r.kernel, r.config, r.target, "-", "-", "-", r.num_warps, "-", "-", "COMPILE ERROR"])
            continue
        rows.append([r.kernel, r.config, r.target, r.registers, r.spill_bytes, r.shared_bytes, r.num_warps,
                     r.occupancy_warps, "yes" if r.tensor_core else "no", "ok" if not bad else "FAIL"])
    return table(head, rows)


def run(json_path: str | Path | None = None, keep: str | Path | None = None,
        emit: Callable[[str], None] = print, jobs: int | None = None) -> list[dict[str, Any]]:
    """``hopgraph bench --gpu-compile``: compile, print the table and each violation, write the
    ``--json`` records. Returns the records (dicts)."""
    import triton

    records = compile_all(keep=keep, jobs=jobs)
    emit(f"Triton {triton.__version__} kernels compiled ahead of time for {', '.join(TARGETS)} · {stamp()}")
    emit(render(records))
    problems = [v for r in records for v in violations(r)]
    emit("\n".join(["violations:", *problems]) if problems else "no violations: every build compiles without "
         f"spills, within {REGISTER_LIMIT} registers or without halving occupancy, with tensor cores in "
         f"{' and '.join(TENSOR_CORE_KERNELS)}")
    out = [r.public() for r in records]
    if json_path is not None:
        Path(json_path).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
        emit(f"wrote {json_path}")
    return out

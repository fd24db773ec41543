"""``hopgraph bench --gpu-model``: a performance model of the Triton kernels that needs no GPU.

Per kernel at the 10⁶ shapes (:func:`workloads`): the bytes the op must move and its FLOPs, the
H100 / H200 roofline time ``max(bytes / HBM, FLOPs / peak)`` and an **estimate** built from the
SASS of its sm_90 build (:mod:`.gpu_compile`, :mod:`.sass`):

* dynamic instruction counts: each loop body's static count times its executions per CTA (the
  kernel's trip counts at the shape: :class:`Launch`'s ``execs``), times warps and CTAs;
* the time of each resource at its peak, per launch — instruction issue (4 warp-instructions per
  SM and clock), tensor cores (MMA shapes from the SASS, TF32 peak), FP32 / FP64 pipes, MUFU,
  HBM traffic of the implementation (its re-reads and sector waste included), L2 → SM traffic —
  of which the largest counts (they overlap), plus CTA scheduling, launches, host round trips
  and host copies.

Issue and HBM run at the rates Nsight Compute measured on an H200 (:data:`ISSUE_ACHIEVED`,
:data:`HBM_ACHIEVED`), the other resources at their peaks; an autotuned op is estimated at the
configuration its autotuner chose on the H200 where that is known (:data:`TUNED_ON_H200`), else at
its best estimate. Where an op was timed on an H200 (:data:`MEASURED`) the table prints the
measurement beside the estimate: the estimate is the figure to compare designs by, the measurement
the one to report. Constants: :data:`GPUS`.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from .common import stamp, table
from .sass import MMA_OPS, Listing, Loop, mma_macs, parse


@dataclass(frozen=True)
class GPU:
    """Peak figures of one GPU (dense, per second)."""

    hbm: float                # HBM bytes/s
    fp32: float = 67e12       # FP32 FLOP/s
    tf32: float = 495e12      # TF32 tensor-core FLOP/s (dense)
    fp16: float = 989e12      # FP16 tensor-core FLOP/s (dense, float32 accumulation)
    fp64: float = 34e12       # FP64 FLOP/s (non-tensor)
    sms: int = 132
    clock: float = 1.98e9     # boost clock, Hz (67 TF/s FP32 = 132 SMs · 128 lanes · 2 · 1.98 GHz)
    l2: float = 12e12         # L2 → SM bytes/s (third-party measurements of H100 SXM; NVIDIA publishes none)
    host: float = 50e9        # device ↔ host bytes/s (PCIe Gen5 x16, effective)


GPUS = {"h100": GPU(hbm=3.35e12), "h200": GPU(hbm=4.8e12)}
#: SM cycles a CTA slot is busy launching and retiring a CTA (an assumption)
CTA_CYCLES = 400
#: seconds per kernel launch on a stream (launches of a loop queue behind each other)
LAUNCH_S = 4e-6
#: seconds of one host round trip (a device sync read by the host)
SYNC_S = 15e-6
#: warp-instructions issued per SM and clock by an issue-bound kernel: four schedulers' peak is 4; Nsight
#: Compute measured 2.05 for gain_knn on an H200 (8-warp CTAs, 25 % occupancy)
ISSUE_ACHIEVED = 2.05
#: the share of HBM bandwidth a streaming kernel reaches: Nsight Compute measured 3.33 of 4.8 TB/s for
#: batched_ppr's step on an H200
HBM_ACHIEVED = 0.69
#: integer / logic opcodes of the SASS (the ALU pipe: compares, selects, shifts, bit logic, integer adds)
ALU_OPS = ("IADD3", "LOP3", "ISETP", "FSETP", "DSETP", "IMNMX", "FMNMX", "SEL", "FSEL", "SHF", "PRMT", "LEA",
           "IABS", "POPC", "FLO", "BREV", "PLOP3", "P2R", "R2P", "VIMNMX", "ISCADD")


@dataclass(frozen=True)
class Measurement:
    """An op timed on a GPU: seconds (a range over runs), the commit measured, that commit's date (the
    run came after it; its own date was not recorded) and the command."""

    low: float
    high: float
    gpu: str
    commit: str
    commit_date: str
    command: str


#: the H200 timings of the 10⁶ shapes (bench/gpu_check.py's timing section: torch 2.11 + cu130, Triton 3.6)
MEASURED = {
    "gain_knn": Measurement(13.8, 13.8, "h200", "158308e", "2026-12-03",
                            "python3 bench/gpu_check.py  # timing: gain_knn N=1,000,000 d=384 k=32 (peers)"),
    "batched_ppr": Measurement(0.375, 0.43, "h200", "158308e", "2026-12-03",
                               "python3 bench/gpu_check.py  # timing: batched_ppr N=1,000,000 edges=10,000,000 "
                               "priors=256 30 iterations (peers)"),
}
#: the configuration the autotuner chose on the H200 (Nsight Compute: 256-thread CTAs)
TUNED_ON_H200 = {"gain_knn": "k32-m64n64d32w8"}
#: lanes per SM and clock of the FP32, FP64 and MUFU pipes
FP32_LANES, FP64_LANES, MUFU_LANES = 128, 64, 16
FP32_OPS, FP64_OPS = ("FFMA", "FADD", "FMUL"), ("DFMA", "DADD", "DMUL")


@dataclass
class Launch:
    """One kernel launch pattern of an op: the build it runs (``kernel``, ``config`` of
    :mod:`.gpu_compile`), its CTAs, ``execs(loop, address, listing)`` the executions per CTA of the
    instruction at ``address`` whose innermost loop is ``loop`` (None: outside every loop, run once
    unless ``execs`` says otherwise), the bytes it moves to/from HBM and through L2, and how often
    it is launched."""

    kernel: str
    config: str
    ctas: float
    execs: Callable[[Loop | None, int, Listing], float]
    hbm_bytes: float
    l2_bytes: float = 0.0
    count: int = 1


@dataclass
class Workload:
    """An op at a shape: the bytes it must move and FLOPs it must do (roofline), the precision
    of those FLOPs (``"fp32"``, ``"tf32"`` / ``"fp16"`` tensor cores with ``passes`` products per MAC,
    ``"fp64"``), the
    launches that implement it and its host round trips / host copies."""

    kernel: str
    shape: dict[str, Any]
    bytes: float
    flops: float
    precision: str
    launches: list[Launch]
    passes: int = 1
    syncs: int = 0
    host_bytes: float = 0.0
    notes: list[str] = field(default_factory=list)

    def roofline(self, gpu: GPU) -> float:
        peak = {"fp32": gpu.fp32, "tf32": gpu.tf32 / self.passes, "fp16": gpu.fp16 / self.passes,
                "fp64": gpu.fp64}[self.precision]
        return max(self.bytes / gpu.hbm, self.flops / peak)


def dynamic_counts(listing: Listing, execs: Callable[[Loop | None, int, Listing], float]
                   ) -> tuple[dict[str, float], float]:
    """(opcode -> warp-instructions per warp of one CTA, MMA multiply-accumulates per warp)."""
    counts: dict[str, float] = {}
    macs = 0.0
    for ins in listing.instructions:
        around = [l for l in listing.loops if l.start <= ins.address <= l.end]
        loop = max(around, key=lambda l: l.depth) if around else None
        n = execs(loop, ins.address, listing)
        counts[ins.op] = counts.get(ins.op, 0.0) + n
        if ins.op in MMA_OPS:
            macs += n * mma_macs(ins.full)
    return counts, macs


def launch_time(launch: Launch, listing: Listing, warps: int, occupancy_warps: int, gpu: GPU
                ) -> dict[str, float]:
    """Seconds of each resource for one launch (``estimate``: the largest plus CTA scheduling and the launch)."""
    counts, macs = dynamic_counts(listing, launch.execs)
    warp_instr = sum(counts.values()) * warps * launch.ctas
    lanes = 32 * warps * launch.ctas
    resident = max(1, occupancy_warps // warps) * gpu.sms
    parts = {
        "issue": warp_instr / (gpu.sms * ISSUE_ACHIEVED * gpu.clock),
        "tensor": 2 * macs * warps * launch.ctas / (gpu.fp16 if listing.half_mma else gpu.tf32),
        "fp32": sum(counts.get(o, 0) for o in FP32_OPS) * lanes / (gpu.sms * FP32_LANES * gpu.clock),
        "fp64": sum(counts.get(o, 0) for o in FP64_OPS) * lanes / (gpu.sms * FP64_LANES * gpu.clock),
        "mufu": counts.get("MUFU", 0) * lanes / (gpu.sms * MUFU_LANES * gpu.clock),
        "hbm": launch.hbm_bytes / (gpu.hbm * HBM_ACHIEVED),
        "l2": launch.l2_bytes / gpu.l2,
    }
    parts["cta"] = launch.ctas * CTA_CYCLES / (resident * gpu.clock)
    parts["estimate"] = max(v for k, v in parts.items() if k != "cta") + parts["cta"] + LAUNCH_S
    return parts


def alu_per_entry(w: Workload, listings: dict[tuple[str, str], tuple[Listing, int, int]], entries: float) -> float:
    """Integer / logic instructions (:data:`ALU_OPS`, per thread) that ``w``'s launches execute per
    similarity entry (``entries``: the entries of the op's similarity matrix): a proxy, read from the
    SASS without a GPU, of what the selection costs beside the tensor-core product."""
    total = 0.0
    for launch in w.launches:
        listing, warps, _ = listings[(launch.kernel, launch.config)]
        counts, _ = dynamic_counts(listing, launch.execs)
        total += sum(counts.get(o, 0.0) for o in ALU_OPS) * 32 * warps * launch.ctas * launch.count
    return total / entries


def estimate(w: Workload, listings: dict[tuple[str, str], tuple[Listing, int, int]], gpu: GPU) -> tuple[float, str]:
    """Seconds the model estimates for ``w`` on ``gpu`` and the resource that bounds its largest launch."""
    total, bound, worst = 0.0, "", -1.0
    for launch in w.launches:
        listing, warps, occ = listings[(launch.kernel, launch.config)]
        parts = launch_time(launch, listing, warps, occ, gpu)
        t = parts["estimate"] * launch.count
        total += t
        if t > worst:
            worst, bound = t, max((k for k in parts if k not in ("estimate", "cta")), key=parts.get)
    total += w.syncs * SYNC_S + w.host_bytes / gpu.host
    return total, bound


# ---------------------------------------------------------------------- the workloads
def workloads(builds: dict[tuple[str, str], Any]) -> list[Workload]:
    """The ops at the 10⁶ shapes, as their wrappers launch them (:mod:`.gpu_workloads`)."""
    from . import gpu_workloads

    return gpu_workloads.workloads(builds)


def run(json_path: str | Path | None = None, emit: Callable[[str], None] = print,
        jobs: int | None = None) -> list[dict[str, Any]]:
    """``hopgraph bench --gpu-model``: compile the builds the workloads launch (sm_90), print the
    table, write the ``--json`` records ``{kernel, shape, bytes, flops, roofline_s, estimate_s}``."""
    from .gpu_compile import all_builds, compile_all

    builds = {(b.kernel, b.config): b for b in all_builds()}
    loads = workloads(builds)
    wanted = {(l.kernel, l.config) for w in loads for l in w.launches}
    records = compile_all([builds[k] for k in builds if k in wanted], targets=("sm_90",), jobs=jobs, sass=True)
    listings = {(r.kernel, r.config): (parse(r.listing), r.num_warps, r.occupancy_warps)
                for r in records if r.compiled}
    missing = sorted(wanted - set(listings))
    if missing:
        raise RuntimeError(f"builds of the model that do not compile: {missing}")
    best: dict[str, tuple[Workload, dict[str, tuple[float, str]]]] = {}
    for w in loads:  # an autotuned op: the configuration its autotuner chose on the H200, else the best estimate
        est = {name: estimate(w, listings, g) for name, g in GPUS.items()}
        tuned = TUNED_ON_H200.get(w.kernel)
        if tuned is not None:
            if any(l.config == tuned for l in w.launches):
                best[w.kernel] = (w, est)
        elif w.kernel not in best or est["h200"][0] < best[w.kernel][1]["h200"][0]:
            best[w.kernel] = (w, est)
    alu = {w.launches[0].config: alu_per_entry(w, listings, w.shape["N"] ** 2) for w in loads
           if w.kernel == "gain_knn"}
    out, rows = [], []
    for w, est in best.values():
        roof = {name: w.roofline(g) for name, g in GPUS.items()}
        configs = sorted({l.config for l in w.launches if l.ctas})
        measured = MEASURED.get(w.kernel)
        out.append({"kernel": w.kernel, "shape": w.shape, "bytes": w.bytes, "flops": w.flops,
                    "roofline_s": roof, "estimate_s": {k: v[0] for k, v in est.items()},
                    "bound": {k: v[1] for k, v in est.items()}, "config": configs, "notes": w.notes,
                    "measured_s": asdict(measured) if measured else None,
                    **({"alu_per_entry": alu} if w.kernel == "gain_knn" else {})})
        seen = "" if measured is None else (f"{measured.low:.3g}" if measured.low == measured.high
                                            else f"{measured.low:.3g}–{measured.high:.3g}")
        ratio = "" if measured is None else f"{est['h200'][0] / ((measured.low + measured.high) / 2):.2g}"
        rows.append([w.kernel, ", ".join(f"{k}={v}" for k, v in w.shape.items()), ", ".join(configs),
                     f"{w.bytes / 1e9:.3g}", f"{w.flops / 1e12:.3g}", f"{roof['h100']:.3g}", f"{roof['h200']:.3g}",
                     f"{est['h100'][0]:.3g}", f"{est['h200'][0]:.3g}", est["h200"][1],
                     f"{est['h200'][0] / roof['h200']:.2g}", seen, ratio])
    emit(f"GPU performance model (no GPU: SASS of the sm_90 builds) · {stamp()}")
    emit(table(["kernel", "shape", "config", "GB", "TFLOP", "roofline H100 s", "roofline H200 s",
                "estimate H100 s", "estimate H200 s", "bound (H200)", "est/roof", "measured H200 s",
                "est/measured"], rows))
    for record in out:
        for note in record["notes"]:
            emit(f"{record['kernel']}: {note}")
    emit("gain_knn integer/logic SASS instructions per similarity entry (the selection's cost, sm_90): "
         + ", ".join(f"{config} {v:.3g}" for config, v in sorted(alu.items())))
    for name, m in MEASURED.items():
        emit(f"measured {name} on an {m.gpu.upper()} at {m.commit} (committed {m.commit_date}): {m.command}")
    emit("roofline = max(bytes / HBM, FLOPs / peak) with HBM 3.35 / 4.8 TB/s, FP32 67 TF/s, TF32 495 TF/s, "
         "FP16 989 TF/s dense (÷ passes for split precision); estimate = per launch the largest of issue (at "
         f"{ISSUE_ACHIEVED} warp-instructions per SM and clock), tensor, FP32, FP64, MUFU, HBM (at {HBM_ACHIEVED:.0%} "
         "of its peak) and L2 time from the SASS instruction counts, plus CTA scheduling, launches, host "
         "round trips and copies (bench/suite/gpu_model.py)")
    if json_path is not None:
        Path(json_path).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
        emit(f"wrote {json_path}")
    return out

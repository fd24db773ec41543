#!/usr/bin/env python3
"""The two kernels to profile with Nsight Compute on a GPU machine: gain_knn's register top-k
(``_gain_knn_kernel``) at N = 5·10⁴, d = 384, k = 32 on clustered rows with hub penalties, and
batched_ppr's step (``_ppr_step_kernel``) at 10⁶ nodes, 10⁷ edges, 256 priors, its inputs already
on the device. Each runs once to tune and compile, then once to be profiled (an NVTX range
``profile``, which the command in docs/gpu.md selects). ``--interpret --quick``: tiny sizes under TRITON_INTERPRET=1 on CPU
tensors (a smoke test without a GPU, tests/bench/test_gpu_check.py).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--interpret", action="store_true", help="TRITON_INTERPRET=1 on CPU tensors, tiny sizes")
    ap.add_argument("--quick", action="store_true", help="the smallest sizes")
    args = ap.parse_args(argv)
    if args.interpret:
        os.environ["TRITON_INTERPRET"] = "1"
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # gpu_check beside this script
    import gpu_check as gc

    gc.ensure_hopgraph_importable()
    import numpy as np
    import torch

    from hopgraph.engine.pipelines.g3rag.penalty import hub_penalty
    from hopgraph.kernels import call

    dev = "cpu" if args.interpret else "cuda"
    tiny = args.interpret or args.quick
    n_knn, d = (120, 16) if tiny else (50_000, 384)
    n_ppr, m_ppr, B = (200, 1_000, 8) if tiny else (10 ** 6, 10 ** 7, 256)
    X = gc.clustered(n_knn, d, max(n_knn // 250, 2), seed=24)
    pen = hub_penalty(call("density", X, mode="sampled", n_samples=min(4096, n_knn), device="cpu"))
    P = gc.column_stochastic_graph(n_ppr, m_ppr, seed=26)
    triple = gc.device_csr(gc.Run(argparse.Namespace(interpret=args.interpret, quick=tiny)), P)
    priors = torch.from_numpy(gc.sparse_priors(B, n_ppr, 10, seed=27)).to(dev)
    for what, run in (("gain_knn", lambda: call("gain_knn", X, k=32, sim_min=0.3, sim_max=0.9, penalty=pen,
                                                device=dev, backend="triton")),
                      ("batched_ppr", lambda: call("batched_ppr", triple, priors, d=0.85, tol=None, max_iter=5,
                                                   device=dev, backend="triton"))):
        for attempt in ("tune", "profile"):
            t0 = time.perf_counter()
            with torch.cuda.nvtx.range(attempt) if dev == "cuda" else contextlib.nullcontext():
                run()
                if dev == "cuda":
                    torch.cuda.synchronize()
            print(f"ncu_kernels: {what} {attempt} {time.perf_counter() - t0:.3f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""BM25 on the device against the host: ``BM25Index.topk`` and ``scores_at_batch`` (NumPy, one
thread) side by side with :class:`hopgraph.engine.components.device_bm25.DeviceBM25` (torch, the
postings held by a ``DeviceStore``), on the generated corpus of ``bench/bench_scale.py``.

Rows: a batch's top-k and its scores at ``--candidates`` rows per question (the lists' own ids
with some other rows), for every question, the query side (vocabulary lookup, idf, one array in)
and the ids and scores out included; median of ``--repeats`` interleaved runs after one warm-up
(the postings move on the first; one torch thread on the CPU unless ``--threads``). The last column says whether the device's ids equal the
host's and its scores are the host's bits (the exit status is 1 when they are not).

    .venv/bin/python bench/bench_bm25_device.py --scale 100000              # CPU tensors
    python3 bench/bench_bm25_device.py --scale 1000000 --device cuda        # on a GPU
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from _common import median_interleaved, stamp, table


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=int, default=100_000, help="generated corpus size")
    ap.add_argument("--device", default="cpu", help="torch device of the store (cpu, cuda)")
    ap.add_argument("--batch", type=int, default=256, help="questions per batch (the generated set has 256)")
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--candidates", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads on the CPU (the host side runs one)")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/hopgraph-bench-scale"))
    args = ap.parse_args(argv)
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        return run(args)
    finally:
        torch.set_num_threads(threads)


def run(args: argparse.Namespace) -> int:
    """The table of :func:`main` (module docstring); 1 when the device disagrees with the host."""
    import torch

    sys.path.insert(0, str(Path(__file__).parent))
    from bench_scale import generate

    from hopgraph.engine.components.bm25 import BM25Index, BM25Params
    from hopgraph.engine.components.corpus import Corpus
    from hopgraph.engine.components.device_bm25 import DeviceBM25
    from hopgraph.engine.graphs.device_store import DeviceStore
    from hopgraph.kernels.tensors import as_numpy, as_tensor

    data = args.workdir / str(args.scale)
    generate(args.scale, data)
    index = BM25Index.build(Corpus.from_jsonl(data / "corpus.jsonl").embedding_texts(), BM25Params())
    questions = json.loads((data / "questions.json").read_text())
    tokens = index.tokenize((questions * (args.batch // len(questions) + 1))[:args.batch])
    rng = np.random.default_rng(0)
    ids, _ = index.topk(tokens, args.candidates)
    cand = np.where(rng.random(ids.shape) < 0.3, rng.integers(-1, index.n_docs, ids.shape), ids)
    resident = DeviceBM25.of(index, DeviceStore(args.device))

    def sync() -> None:
        if resident.device.type == "cuda":
            torch.cuda.synchronize()

    def device_topk() -> tuple[np.ndarray, np.ndarray]:
        got = resident.topk(resident.query(tokens), args.k)
        return as_numpy(got[0]), as_numpy(got[1])

    def device_scores_at() -> np.ndarray:
        got = as_numpy(resident.scores_at(resident.query(tokens), as_tensor(cand, device=resident.device)))
        sync()
        return got

    cases = {"top-k": {"host": lambda: index.topk(tokens, args.k), "device": device_topk},
             "scores at candidates": {"host": lambda: index.scores_at_batch(tokens, cand), "device": device_scores_at}}
    rows, disagree = [], 0
    for name, fns in cases.items():
        want, got = fns["host"](), fns["device"]()  # the warm-up: the postings move here
        if name == "top-k":
            same = np.array_equal(want[0], got[0]) and np.array_equal(want[1].view(np.int32), got[1].view(np.int32))
        else:
            same = np.array_equal(want.view(np.int32), got.view(np.int32))
        disagree += not same
        sec = median_interleaved(fns, args.repeats)
        for side in fns:
            rows.append([name, f"{index.n_docs:,}", side, f"{len(tokens)}", f"{sec[side]:.3f}",
                         f"{len(tokens) / sec[side]:,.0f}", f"{sec['host'] / sec[side]:.1f}x",
                         "" if side == "host" else ("yes" if same else "NO")])
    print(f"# BM25 on the device ({args.device}, {torch.get_num_threads()} torch threads) against the host — {stamp()}")
    print(table(["search", "passages", "side", "questions", "seconds", "queries/s", "speed-up", "same ids and bits"],
                rows))
    print(f"k = {args.k}, {args.candidates} candidates per question; median of {args.repeats} interleaved runs")
    return 1 if disagree else 0


if __name__ == "__main__":
    raise SystemExit(main())

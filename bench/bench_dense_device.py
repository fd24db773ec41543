"""The exact dense search on a device (the ``inner_product_topk`` op) against the host's faiss exact
search, and the op's per-block selection against the two other exact-order selections it could use.

Rows of the first table, on random unit vectors (``--n`` rows × ``--dim``, ``--batch`` questions,
top ``--k``): faiss ``IndexFlatIP`` + the tie re-sort (``faiss_topk``: the host path below the ANN
threshold), and ``inner_product_topk`` on CPU tensors and, when torch sees a GPU, on CUDA (X copied
there once, outside the timing; the questions in and the lists out inside it). Each says how many
list positions hold another id than faiss's and the largest score difference.

The second table times the selection of one block (``--batch`` × ``--block`` scores): the op's
(``torch.topk`` of the floats, then of the positions tied at the k-th score), ``torch.topk`` of an
int64 key of every score (score bits, then the lower row), a stable descending sort of the block,
and — for scale — ``torch.topk`` of the floats with faiss_topk's margin, which is exact only while
fewer than the margin rows tie at the k-th place.

Run: ``.venv/bin/python bench/bench_dense_device.py --n 200000`` (``--device cuda`` on a GPU machine)
"""
from __future__ import annotations

import argparse
import time
from typing import Any, Callable

import numpy as np
import torch

from hopgraph.engine.components.exact_search import TIE_MARGIN, exact_inner_product_index, faiss_topk
from hopgraph.kernels.inner_product_topk import block_topk, inner_product_topk, score_keys

from _common import best_of, table


def synced(fn: Callable[[], Any], device: str) -> Callable[[], Any]:
    """``fn`` followed by a CUDA synchronisation on ``device`` "cuda" (so the timing holds the work)."""
    def run() -> Any:
        out = fn()
        if device == "cuda":
            torch.cuda.synchronize()
        return out
    return run


def unit(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    X = rng.standard_normal((n, d)).astype(np.float32)
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--block", type=int, default=16_384, help="rows of the selection block timed")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    X, Q = unit(rng, args.n, args.dim), unit(rng, args.batch, args.dim)
    import os

    print(f"# dense exact search, {args.n:,} × {args.dim}, {args.batch} questions, top {args.k} — "
          f"{time.strftime('%Y-%m-%d %H:%M:%S')} · load average (1, 5, 15 min): "
          + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    index = exact_inner_product_index(X)
    sec, (f_ids, f_scores) = best_of(lambda: faiss_topk(index, Q, args.k), args.repeats)
    rows = [["faiss IndexFlatIP + tie re-sort (host)", f"{sec:.3f}", f"{args.batch / sec:,.0f}", "-", "-"]]
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for dev in devices:
        Xt = torch.from_numpy(X).to(dev)

        def search() -> tuple[np.ndarray, np.ndarray]:
            ids, scores = inner_product_topk(torch.from_numpy(Q).to(dev), Xt, args.k)
            return ids.cpu().numpy(), scores.cpu().numpy()
        sec, (ids, scores) = best_of(synced(search, dev), args.repeats)
        rows.append([f"inner_product_topk on {dev}", f"{sec:.3f}", f"{args.batch / sec:,.0f}",
                     int((ids != f_ids).sum()), f"{np.abs(scores - f_scores).max():.1e}"])
    print(table(["search", "seconds", "q/s", "ids ≠ faiss", "max |Δscore|"], rows))

    print(f"\n# one block's selection, {args.batch} × {args.block:,} scores, top {args.k}")
    sel_rows = []
    for dev in devices:
        S = torch.from_numpy(Q).to(dev) @ torch.from_numpy(X[:args.block]).to(dev).T
        rows_t = torch.arange(args.block, device=dev)
        choices = {
            "topk of the floats + topk of the tied positions (the op's)": lambda: block_topk(S, 0, args.k),
            "int64 keys of every score + topk": lambda: torch.topk(score_keys(S, rows_t), args.k, dim=1),
            "stable descending sort": lambda: torch.sort(S, dim=1, descending=True, stable=True),
            f"topk of the floats, k + {TIE_MARGIN} (inexact past the margin)": lambda: torch.topk(
                S, args.k + TIE_MARGIN, dim=1),
        }
        for name, fn in choices.items():
            sec, _ = best_of(synced(fn, dev), args.repeats)
            sel_rows.append([dev, name, f"{sec * 1e3:.2f}"])
    print(table(["device", "selection", "ms"], sel_rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

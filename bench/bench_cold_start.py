"""The cold-start tax of a G3RAG build side by side in fresh processes.

``G3RAG(n_neighbors=k).fit(X)`` (density + gain-kNN graph, SPEC §1 index steps 1-5) and faiss ``IndexFlatIP``
exact k-NN (k + 1) of the same generated X (N = 20,000, d = 384 by default), each in its own
fresh subprocess with an empty torch.compile cache (``TORCHINDUCTOR_CACHE_DIR`` a new temporary
folder): the first call (what a user's first build pays) and a second call in the same process
(warm), the sides interleaved over ``--rounds``, medians and ratios to faiss. The
``HOPGRAPH_COMPILE=1`` side forces torch.compile of the tile arithmetic (the default, ``auto``,
compiles only above ``COMPILE_MIN_ENTRIES`` weighed entries); ``--no-compiled`` drops it. The
measurement itself is :func:`suite.cold_start.bench_cold_start`, which
``hopgraph bench`` runs too. Load average with the table.

    .venv/bin/python bench/bench_cold_start.py [--n 20000] [--k 32] [--rounds 2] [--no-compiled]
"""
from __future__ import annotations

import argparse

from suite.cold_start import bench_cold_start
from suite.common import stamp


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--k", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-compiled", action="store_true", help="skip the HOPGRAPH_COMPILE=1 side")
    args = ap.parse_args()
    print(f"start: {stamp()}")
    print(bench_cold_start(args.n, args.k, args.rounds, compiled=not args.no_compiled).render())


if __name__ == "__main__":
    main()

"""Scaling of DMAR's index structures knowledge graph + ego-subgraph GNN embeddings.

Generates a synthetic extraction (``--n`` passages, 3 sentences each, 3 entity mentions per
sentence drawn from a heavy-tailed distribution over n/2 names) and times, at n and n/10:
``build_knowledge_graph`` (co-occurrence CSR, passage→entity CSR, capped ego subgraphs) and
``entity_features`` + ``encode_all`` (an untrained 3-layer GraphSAGE over every ego subgraph,
d = 32 features). The zero-token text extractor itself is timed by bench/bench_scale.py.
Prints wall time, peak RSS and the 10× scaling ratio (linear = 10×), with the load average.
``--gnn-threads`` sets the GNN's torch threads (``docs/decisions/dmar-gnn-single-thread.md``).

Usage::

    .venv/bin/python bench/bench_dmar_graph_scale.py [--n 1000000] [--gnn-threads 1]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from hopgraph.engine.pipelines.dmar import gnn
from hopgraph.engine.components.extraction import Extraction
from hopgraph.engine.pipelines.dmar.knowledge_graph import build_knowledge_graph

from _common import peak_rss_gb, stamp, table


def synthetic_extraction(n: int, seed: int = 0) -> Extraction:
    g = np.random.default_rng(seed)
    n_names, per = max(n // 2, 1), 3
    topic_chunk = np.repeat(np.arange(n), per).astype(np.int32)
    m_topic = np.repeat(np.arange(n * per), 3)
    m_name = np.minimum((g.pareto(1.0, len(m_topic)) * 100).astype(np.int64), n_names - 1)
    keys, inv = np.unique(topic_chunk[m_topic].astype(np.int64) * n_names + m_name, return_inverse=True)
    inc = np.unique(m_topic.astype(np.int64) * len(keys) + inv.ravel())
    return Extraction(n_chunks=n, topic_chunk=topic_chunk, topic_text=np.zeros(n * per, np.int32),
                      node_chunk=(keys // n_names).astype(np.int32), node_name=(keys % n_names).astype(np.int32),
                      node_text=np.zeros(len(keys), np.int32), mention_node=(inc % len(keys)).astype(np.int32),
                      mention_topic=(inc // len(keys)).astype(np.int32), names=[f"e{i}" for i in range(n_names)],
                      texts=["x"])


def run(n: int) -> dict[str, float]:
    ex = synthetic_extraction(n)
    t0 = time.perf_counter()
    kg = build_knowledge_graph(ex, n)
    t1 = time.perf_counter()
    X = np.random.default_rng(1).standard_normal((n, 32)).astype(np.float32)
    t2 = time.perf_counter()
    Z = gnn.encode_all(gnn.SubgraphEncoder(32), kg.ego, kg.adj, gnn.entity_features(kg.passage_entities, X))
    t3 = time.perf_counter()
    assert Z.shape == (kg.n_entities, 64)
    return {"passages": n, "states": ex.n_nodes, "incidences": len(ex.mention_node), "entities": kg.n_entities,
            "kg s": t1 - t0, "gnn s": t3 - t2, "peak GiB": peak_rss_gb()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--gnn-threads", type=int, default=gnn.GNN_THREADS,
                    help=f"torch threads of the GNN encoding (default {gnn.GNN_THREADS}, the library's)")
    args = ap.parse_args()
    gnn.GNN_THREADS = args.gnn_threads
    print(stamp())
    rows = [run(max(args.n // 10, 10)), run(args.n)]
    head = list(rows[0])
    fmt = lambda v: f"{v:,.2f}" if isinstance(v, float) else f"{v:,}"  # noqa: E731
    cells = [[fmt(r[h]) for h in head] for r in rows]
    cells.append(["ratio"] + [f"{rows[1][h] / max(rows[0][h], 1e-9):.1f}×" for h in head[1:]])
    print(table(head, cells))
    print("(peak GiB is the process maximum so far, so the second row includes the first)")
    print(stamp())


if __name__ == "__main__":
    main()

"""Host↔device transfers per search batch, for every pipeline: an index opened on its own files
(the graphs copied to the device by each kernel call) against one opened with a device-resident
graph store (:class:`hopgraph.engine.graphs.device_store.DeviceStore`).

What is counted (:func:`count_transfers`):

* on CUDA, the torch profiler's memcpy events of the batch (``Memcpy HtoD`` / ``Memcpy DtoH``);
* on CPU tensors (``--device cpu``: no copy happens), the same crossings at the kernel boundary
  (:mod:`hopgraph.kernels.transfers`): each host array made a tensor for a kernel, or handed to
  one, and each tensor result brought back as NumPy — what a GPU run copies.

Each pipeline is searched once to warm up (a resident structure moves on its first device use),
then one batch is counted. ``graph bytes`` is how much of the counted host→device bytes were the
index's stored graph structures (the walk's chunk graph P when the walk is not localised).

    python bench/transfers.py                   # CPU tensors, the demo corpus
    python bench/transfers.py --device cuda     # profiler memcpy counts on a GPU
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

from suite.common import stamp, table

#: every pipeline's search, with the variants that walk the whole chunk graph
SEARCHES = [("dense", {}), ("bm25", {}), ("hybrid", {}), ("g3rag", {}), ("stitch", {}),
            ("stitch", {"localise": False}), ("ppr_binary", {}), ("ppr_binary", {"localise": False}),
            ("dmar", {}), ("hop", {})]


def count_transfers(fn: Callable[[], Any], device: str = "cpu") -> dict[str, Any]:
    """Run ``fn`` and count its host↔device transfers: on ``"cuda"`` the torch profiler's memcpy
    events (``htod``, ``dtoh``, and their bytes where the profiler reports them); on ``"cpu"``
    the crossings at the kernel boundary (:mod:`hopgraph.kernels.transfers`, module docstring).
    Returns the counts, ``method`` saying which, and ``result`` (what ``fn`` returned)."""
    if device == "cuda":
        import torch
        from torch.profiler import ProfilerActivity, profile

        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            result = fn()
            torch.cuda.synchronize()
        names = [event.name for event in prof.events() if "Memcpy" in event.name]
        return {"htod": sum("HtoD" in n for n in names), "dtoh": sum("DtoH" in n for n in names),
                "htod_bytes": None, "dtoh_bytes": None, "method": "torch.profiler memcpy events", "result": result}
    from hopgraph.kernels.transfers import counting_transfers

    with counting_transfers() as count:
        result = fn()
    return {"htod": count.htod, "dtoh": count.dtoh, "htod_bytes": count.htod_bytes, "dtoh_bytes": count.dtoh_bytes,
            "crossings": count, "method": "kernel-boundary crossings", "result": result}


def graph_bytes(count: dict[str, Any], structures: list[Any]) -> int | None:
    """Bytes of the counted host→device crossings that were stored graph arrays (None on CUDA)."""
    crossings = count.get("crossings")
    if crossings is None:
        return None
    spans = [(a.__array_interface__["data"][0], a.nbytes) for a in structures if getattr(a, "nbytes", 0)]
    return sum(c.nbytes for c in crossings.to_device if any(s <= c.address < s + n for s, n in spans))


def crossing_names(count: dict[str, Any]) -> list[str] | None:
    """The names of the host arrays counted crossing to the device, in order (None on CUDA: the
    profiler's events do not say which array each copy was)."""
    crossings = count.get("crossings")
    return None if crossings is None else [c.name for c in crossings.to_device]


def stored_structures(pipeline: Any) -> list[Any]:
    """The host arrays of the graph structures a pipeline's search reads (W, P and the hypergraph's
    arrays, the knowledge graph's)."""
    import numpy as np

    out: list[Any] = []
    for name in ("graph_", "hypergraph_", "knowledge_graph_"):
        item = getattr(pipeline, name, None)
        if item is None:
            continue
        values = list(item) if isinstance(item, tuple) else list(vars(item).values())
        for v in values:
            if isinstance(v, np.ndarray):
                out.append(v)
            elif isinstance(v, tuple):
                out.extend(a for a in v if isinstance(a, np.ndarray))
    cache = getattr(pipeline, "_cache", {})
    if "P" in cache:
        out.extend(a for a in cache["P"][:3] if isinstance(a, np.ndarray))
    return out


def build_demo(directory: Path) -> tuple[Path, Any]:
    """The demo corpus indexed with every pipeline (hashing embedder), saved in ``directory``."""
    from hopgraph import HashingEmbedder, Index
    from hopgraph.demo import demo_corpus
    from hopgraph.engine.pipelines import pipeline_names

    embedder = HashingEmbedder(64)
    index = Index.build(demo_corpus(), embedder=embedder, pipelines=pipeline_names(), progress=False)
    index.save(directory / "index")
    return directory / "index", embedder


def measure(path: Path, embedder: Any, device: str, batch: int) -> list[dict[str, Any]]:
    """Per search of :data:`SEARCHES`: the transfers of one batch with the index's own files and
    with a device store on ``device`` (after one warm-up batch each), and whether ids agree."""
    import numpy as np

    from hopgraph.demo import DEMO_QUESTIONS
    from hopgraph.engine.graphs.device_store import DeviceStore
    from hopgraph.engine.graphs.store import LocalStore
    from hopgraph.engine.index import IndexReader

    questions = (DEMO_QUESTIONS * (batch // len(DEMO_QUESTIONS) + 1))[:batch]
    readers = {"files": IndexReader.open(path, embedder, device=device, graphs=LocalStore()),
               "resident": IndexReader.open(path, embedder, device=device, graphs=DeviceStore(device))}
    rows = []
    for name, params in SEARCHES:
        row: dict[str, Any] = {"pipeline": name + "".join(f" {k}={v}" for k, v in params.items())}
        out = {}
        for label, reader in readers.items():
            def search() -> Any:
                return reader.search(questions, 10, name, **params)
            search()
            count = count_transfers(search, device)
            out[label] = count["result"]
            row[label] = {k: count[k] for k in ("htod", "dtoh", "htod_bytes", "dtoh_bytes")}
            row[label]["graph_bytes"] = graph_bytes(count, stored_structures(reader.content.pipelines[name]))
            row[label]["names_in"] = crossing_names(count)
            row["method"] = count["method"]
        row["ids_equal"] = bool(np.array_equal(out["files"][0], out["resident"][0]))
        row["max_score_diff"] = float(np.max(np.abs(out["files"][1] - out["resident"][1]), initial=0.0))
        rows.append(row)
    for reader in readers.values():
        reader.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--batch", type=int, default=8, help="questions per batch")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path, embedder = build_demo(Path(tmp))
        rows = measure(path, embedder, args.device, args.batch)
    print(f"# transfers per search batch ({args.batch} questions, demo corpus, device {args.device}; "
          f"{rows[0]['method']}) — {stamp()}")

    def cell(c: dict[str, Any]) -> str:
        if c["htod_bytes"] is None:
            return f"{c['htod']} in / {c['dtoh']} out"
        return f"{c['htod']} in ({c['htod_bytes']:,} B, graph {c['graph_bytes']:,} B) / {c['dtoh']} out"
    print(table(["search", "own files", "device store", "ids equal", "max |Δscore|"],
                [[r["pipeline"], cell(r["files"]), cell(r["resident"]), r["ids_equal"], f"{r['max_score_diff']:.1e}"]
                 for r in rows]))
    if rows[0]["resident"]["names_in"] is not None:
        print("\n# what crosses to the device per batch with the device store")
        print(table(["search", "arrays in"], [[r["pipeline"], ", ".join(r["resident"]["names_in"]) or "-"]
                                              for r in rows]))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

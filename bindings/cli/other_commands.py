"""``hopgraph serve | train-gnn | train-gate | demo | bench``: serving, DMAR training and the tools."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable

from .options import common


def cmd_serve(args: argparse.Namespace) -> int:
    """``hopgraph serve``: serve an index over HTTP (:func:`hopgraph.serve.runner.cmd_serve`)."""
    from ..serve.runner import cmd_serve as run

    return run(args)


def cmd_train_gnn(args: argparse.Namespace) -> int:
    """``hopgraph train-gnn``: train the DMAR subgraph GNN of an index (SPEC §3) and save it there;
    prints the loss before and after. Returns the exit status."""
    from ..dmar_training import train_gnn_index

    r = train_gnn_index(args.index, steps=args.steps, seed=args.seed, embedder=args.embedder,
                        progress=not args.quiet)
    print(f"trained the DMAR GNN ({r['steps']} steps, {r['n_subgraphs']} subgraphs) in {r['seconds']:.1f} s: "
          f"triplet loss {r['first_loss']:.4f} -> {r['last_loss']:.4f}; saved in {args.index}")
    return 0


def cmd_train_gate(args: argparse.Namespace) -> int:
    """``hopgraph train-gate``: train the DMAR gate of an index on judged questions (SPEC §3); it is
    saved only when it beats the untrained gate on the held-out split (or with ``--always-save``).
    Prints both held-out recalls. Returns the exit status."""
    from ..dmar_training import train_gate_index

    r = train_gate_index(args.index, args.questions, holdout=args.holdout, seed=args.seed, k=args.k,
                         embedder=args.embedder, progress=not args.quiet, always_save=args.always_save)
    k = args.k
    outcome = (f"saved in {args.index}" if r["saved"] else
               f"not better on the held-out split: {args.index} keeps the untrained (equal-weight) gate")
    print(f"trained the DMAR gate on {r['n_train']} questions; held-out split ({r['n_held_out']} questions) "
          f"Recall@{k}: untrained {r[f'held_out_recall@{k}_untrained']:.3f}, "
          f"trained {r[f'held_out_recall@{k}_trained']:.3f}; {outcome}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """``hopgraph demo``: index the bundled demo corpus and answer its questions with every pipeline."""
    from ..demo import run_demo

    return run_demo(embedder=args.embedder, device=args.device, progress=not args.quiet)


#: the benchmarks of a source checkout (``bench/`` beside ``bindings/``); an installed wheel has none
BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"


def _bench_suite() -> tuple[Callable[..., Any], Callable[..., Any]]:
    """``parse_groups`` and ``run`` of the benchmark suite, which lives in the source checkout's
    ``bench/`` folder (:data:`BENCH_DIR`; benchmarks are not installed with the package): InputError
    saying so where it is absent."""
    from ..engine.errors import InputError

    bench_dir = BENCH_DIR
    if not (bench_dir / "suite" / "__init__.py").is_file():
        raise InputError(f"hopgraph bench runs from a source checkout: {bench_dir / 'suite'} not found "
                         "(clone the repository and install it with `pip install -e .`)")
    if str(bench_dir) not in sys.path:
        sys.path.insert(0, str(bench_dir))
    import suite

    return suite.parse_groups, suite.run


def cmd_bench(args: argparse.Namespace) -> int:
    """``hopgraph bench``: side-by-side benchmark tables (``bench/suite`` of a source checkout);
    ``--gpu-compile`` / ``--gpu-model``: the Triton kernels compiled for sm_80/sm_90 / their performance
    model instead (exit status 1 when a build violates the compile check)."""
    from ..engine.errors import InputError

    parse_groups, run = _bench_suite()

    if args.json is not None and not Path(args.json).resolve().parent.is_dir():
        raise InputError(f"--json {args.json}: its folder does not exist")
    if args.keep is not None and not args.gpu_compile:
        raise InputError("--keep DIR goes with --gpu-compile")
    if args.gpu_compile or args.gpu_model:
        from suite import gpu_compile, gpu_model

        emit = lambda text: print(text, flush=True)  # noqa: E731
        if args.gpu_model:
            gpu_model.run(json_path=args.json, emit=emit)
            return 0
        records = gpu_compile.run(json_path=args.json, keep=args.keep, emit=emit)
        return 1 if any(gpu_compile.violations(gpu_compile.Record(**r)) for r in records) else 0
    groups = parse_groups(args.only)
    report = run(full=args.full, scale=args.scale, groups=groups, data=args.data, embedder=args.embedder,
                 progress=not args.quiet, emit=lambda text: print(text, flush=True))
    if args.json is not None:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


def register(sub: argparse._SubParsersAction, known: str) -> None:
    """Add the serving and tool commands to ``sub`` (``known``: the pipeline names, for help texts)."""
    p = sub.add_parser("train-gnn", help="pre-train DMAR's Siamese GNN (triplet loss) inside an index")
    p.add_argument("index", help="index directory (dmar is fitted first if missing)")
    p.add_argument("--steps", type=int, default=600, help="training steps")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    common(p, embedder_default=None)
    p.set_defaults(func=cmd_train_gnn)

    p = sub.add_parser("train-gate", help="train DMAR's fusion gate on questions with gold passages")
    p.add_argument("index", help="index directory (dmar is fitted first if missing)")
    p.add_argument("questions", help="questions.jsonl with gold_ids")
    p.add_argument("--holdout", type=float, default=0.2, help="held-out fraction reported")
    p.add_argument("--always-save", action="store_true",
                   help="save the trained gate even when it is worse on the held-out split")
    p.add_argument("--k", type=int, default=5, help="k of the held-out Recall@k that decides the save")
    p.add_argument("--seed", type=int, default=0, help="random seed of the split and the training")
    common(p, embedder_default=None)
    p.set_defaults(func=cmd_train_gate)

    p = sub.add_parser("demo", help="index the bundled demo corpus and query every pipeline")
    common(p)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("bench", help="benchmark tables to size a deployment: kernels vs their anchors, the "
                       "fresh-process build, build costs, queries/s with and without question embedding")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="small sizes, a few minutes on 2 cores (the default)")
    size.add_argument("--full", action="store_true", help="the README's sizes (N = 20,000 gain-kNN, 10⁵-chunk "
                      "PPR graphs with 10⁶ edges, 20,000 passages; tens of minutes)")
    p.add_argument("--scale", type=float, default=1.0, help="multiply every size by this factor")
    p.add_argument("--only", metavar="GROUPS", help="comma-separated subset of kernels,cold_start,pipelines")
    p.add_argument("--data", type=Path, metavar="DIR", help="pipelines on a benchmark folder (corpus.jsonl + "
                   "questions.jsonl) instead of a generated corpus")
    p.add_argument("--json", metavar="FILE", help="also write every table as JSON")
    gpu = p.add_mutually_exclusive_group()
    gpu.add_argument("--gpu-compile", action="store_true", help="instead of the tables: compile every Triton kernel "
                     "for sm_80 and sm_90 (no GPU needed) and print registers, spills, shared memory, warps and "
                     "tensor-core use; exit status 1 when a build fails the check")
    gpu.add_argument("--gpu-model", action="store_true", help="instead of the tables: bytes, FLOPs, H100/H200 "
                     "roofline and estimated seconds of each kernel at the 10^6 shapes, from its compiled SASS")
    p.add_argument("--keep", metavar="DIR", help="with --gpu-compile: keep each build's cubin as "
                   "DIR/{kernel}-{config}-{target}.cubin")
    p.add_argument("--embedder", default="minilm", help="the pipelines' embedder: 'minilm', 'hashing-DIM', ...")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_bench)

    from ..serve.limits import add_serve_arguments

    p = sub.add_parser("serve", help="serve an index over HTTP (POST /search; needs the [serve] extra)")
    add_serve_arguments(p)
    common(p, embedder_default=None)
    p.set_defaults(func=cmd_serve)

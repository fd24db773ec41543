"""Install cost of the package: the wheel built from this checkout installed into a fresh venv, as a user
would (pip's defaults, bytecode compiled), timed from ``python -m venv`` to the end of the last
``pip install``, and the venv's size on disk.

    .venv/bin/python bench/bench_install.py                              # PyPI alone: pip install hopgraph
    .venv/bin/python bench/bench_install.py --torch-first torch==2.13.0  # a CPU torch first, then hopgraph

``--torch-first SPEC`` installs ``SPEC`` before the wheel (add ``--torch-index URL`` for PyTorch's CPU
index: ``https://download.pytorch.org/whl/cpu``; without it, pip's own configuration decides where the
torch comes from). The wheel's requirements come from pip's configured index. Each route needs a few
GB of free disk (PyPI's Linux torch brings CUDA); the venv is removed afterwards unless ``--keep``.
The table gives the seconds, the size, the largest packages and whether triton was installed; the load
average is printed before and after (on a shared machine it stretches the seconds).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_average() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def run(cmd: list[str]) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")


def size_mb(path: Path) -> float:
    """Bytes of the regular files below ``path`` (links not followed), in MB (10^6)."""
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink()) / 1e6


def build_wheel(out: Path) -> Path:
    run([sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(ROOT)])
    return next(out.glob("hopgraph-*.whl"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--torch-first", default="", help="a torch requirement installed before hopgraph")
    ap.add_argument("--torch-index", default="", help="the only index torch is taken from (--index-url)")
    ap.add_argument("--keep", action="store_true", help="keep the venv (its path is printed)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="hopgraph-install-"))
    try:
        wheel = build_wheel(work / "dist")
        venv = work / "venv"
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        print(f"load average before: {load_average()}")
        t0 = time.perf_counter()
        run([sys.executable, "-m", "venv", str(venv)])
        if args.torch_first:
            run([*pip, args.torch_first, *(["--index-url", args.torch_index] if args.torch_index else [])])
        run([*pip, str(wheel)])
        seconds = time.perf_counter() - t0
        print(f"load average after:  {load_average()}")
        site = next((venv / "lib").glob("python3*/site-packages"))
        packages = sorted(((size_mb(p), p.name) for p in site.iterdir() if p.is_dir()), reverse=True)
        route = f"{args.torch_first} first, then the wheel" if args.torch_first else "the wheel alone"
        print(f"\n| route | seconds | venv MB | triton installed | largest (MB) |\n|---|---|---|---|---|")
        print(f"| {route} | {seconds:.0f} | {size_mb(venv):.0f} | {(site / 'triton').is_dir()} | "
              + ", ".join(f"{name} {mb:.0f}" for mb, name in packages[:5]) + " |")
        if args.keep:
            print(f"\nvenv kept: {venv}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

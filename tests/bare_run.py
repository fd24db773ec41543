"""Run a bench/ script as a bare device machine would (``bench/gpu_check.py``, ``bench/gpu_e2e.py``):
hopgraph not installed (this environment's editable install's finder removed), everything else
importable, so the script must map the package from the checkout's folders."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

#: the child's program: drop the editable finder, check hopgraph is gone, run the script as __main__
BARE = """
import runpy, sys
sys.meta_path[:] = [f for f in sys.meta_path if not str(getattr(f, "__module__", "")).startswith("__editable__")]
try:
    import hopgraph
except ImportError:
    print("hopgraph is not importable from site-packages")
else:
    raise SystemExit("hopgraph is importable: not a bare run")
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run_bare(script: Path, *args: str, cwd: Path, env: dict[str, str] | None = None,
             timeout: float = 300) -> subprocess.CompletedProcess:
    """``script args`` in a fresh interpreter without hopgraph installed (stdout, stderr captured)."""
    return subprocess.run([sys.executable, "-c", BARE, str(script), *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)

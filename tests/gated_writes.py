"""A server write that waits for a file before it is applied (importable by ``hopgraph serve``'s
writer process, which runs it: the serve tests use it to hold a write half-way)."""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Sequence

from hopgraph.serve.writer import apply_add


def gated_add(index: Any, records: Sequence[dict[str, Any]], upsert: bool, gate: str) -> dict[str, Any]:
    """Write this process's id to ``gate/entered``, wait (up to 60 s) for ``gate/release``, then add."""
    gate_dir = Path(gate)
    (gate_dir / "entered.tmp").write_text(str(os.getpid()))
    os.replace(gate_dir / "entered.tmp", gate_dir / "entered")  # never seen empty
    deadline = time.monotonic() + 60
    while not (gate_dir / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return apply_add(index, records, upsert)

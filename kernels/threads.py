"""Scoped control of torch's intra-op thread count (CPU paths of the kernels and pipelines)."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run the block with ``n`` torch intra-op threads (None: unchanged), then restore.

    The CPU paths work on arrays of 10⁵–10⁷ elements where OpenMP threads spinning on
    a busy machine cost more than they save (see ``bench/bench_ppr.py``)."""
    if n is None or n == torch.get_num_threads():
        yield
        return
    old = torch.get_num_threads()
    torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(old)

"""Which segments of a commit to merge next (as Lucene's ``MergePolicy``): a policy looks only at the
segments' row counts, in row order, and names one run of adjacent segments to merge, or none.

The first segment (the base) is never merged by a policy: it is rewritten only by a compaction.
:class:`TieredMergePolicy` is the default: ``factor`` adjacent segments of one size tier at a time
(the tier of ``n`` rows is ``⌊log_factor(n)⌋``), so a run of small commits is merged into one segment
of the next tier, and each row is rewritten O(log_factor(N)) times; with a ``max_segments`` bound,
the adjacent pair with the fewest rows is merged while more segments remain.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Sequence

from ..errors import InputError

#: segments merged at once by the tiered policy (and the size ratio between its tiers)
MERGE_FACTOR = 10


class MergePolicy(ABC):
    """Decides the next merge of a commit's segments (module docstring). Implementations are pure
    functions of the sizes: the same sizes give the same decision."""

    @abstractmethod
    def find_merge(self, sizes: Sequence[int], max_segments: int | None = None) -> tuple[int, int] | None:
        """The next merge over segments of ``sizes`` rows (row order): ``(i, j)``, merge segments
        ``i .. j`` (``1 <= i < j < len(sizes)``: adjacent, never the base), or None when nothing is to
        be merged. ``max_segments``: the caller asks for at most that many segments (a policy merges
        until it is reached, or says None when it cannot)."""


class TieredMergePolicy(MergePolicy):
    """The default policy (module docstring): ``factor`` (>= 2) adjacent segments of one tier."""

    def __init__(self, factor: int = MERGE_FACTOR) -> None:
        if isinstance(factor, bool) or not isinstance(factor, int) or factor < 2:
            raise InputError(f"factor must be an integer >= 2, got {factor!r}")
        self.factor = factor

    def __repr__(self) -> str:
        return f"TieredMergePolicy(factor={self.factor})"

    def tier(self, rows: int) -> int:
        """The tier of a segment of ``rows`` rows: ``⌊log_factor(rows)⌋`` (0 below ``factor`` rows)."""
        return 0 if rows < self.factor else int(math.log(rows, self.factor) + 1e-9)

    def find_merge(self, sizes: Sequence[int], max_segments: int | None = None) -> tuple[int, int] | None:
        """The first ``factor`` adjacent segments of one tier after the base; else, while more than
        ``max_segments`` remain (and at least three), the adjacent pair with the fewest rows (the
        first such pair on a tie); else None."""
        factor = self.factor
        tiers = [self.tier(n) for n in sizes]
        run = 1
        for i in range(2, len(sizes)):
            run = run + 1 if tiers[i] == tiers[i - 1] else 1
            if run >= factor:
                return i - factor + 1, i
        if max_segments is not None and len(sizes) > max(max_segments, 2) and len(sizes) >= 3:
            i = min(range(1, len(sizes) - 1), key=lambda a: sizes[a] + sizes[a + 1])
            return i, i + 1
        return None


__all__ = ["MERGE_FACTOR", "MergePolicy", "TieredMergePolicy"]

"""When a column of the batched power iteration stops (SPEC §2 step 6, per-query convergence).

Every path of ``batched_ppr`` (CPU block, CPU segmented, Triton) stops column b at the first
iteration k where either

* its L1 change ``‖x_k − x_{k−1}‖₁`` is at most its tolerance ``tol_b = max(tol, ε·‖p_b‖₁)``
  (ε: the unit roundoff of the priors' float type, ``p_b``: the column's own prior), or
* its change has not fallen below its smallest value so far for :data:`STALL_ITERS` iterations
  in a row.

In exact arithmetic the change shrinks by at least the factor d every iteration (the iteration
matrix is non-negative with column sums ≤ d), so the second rule fires only once the change is at
the level of the float rounding, where further iterations cycle instead of converging. The
floor ε·‖p_b‖₁ is one rounding unit of the column's mass: a change below it is not resolvable (a
column could cycle to ``max_iter`` without ever meeting it, and where it does meet it depends on
how the product rounds, which differs between CPUs and block widths). A ``tol`` below the floor of
some column warns (:class:`~.errors.ToleranceWarning`) and that column uses the floor.

Both rules read the column's own prior and iterates only, so a column's stop does not depend on
the rest of its batch. ``tol=None`` runs every column ``max_iter`` iterations (a tolerance of
-inf: neither rule fires), as a benchmark of a fixed number of steps needs.
"""
from __future__ import annotations

import math
import sys
import warnings
from pathlib import Path

import torch

from .errors import ToleranceWarning

#: a column stops when its change has not reached a new minimum for this many iterations in a row
STALL_ITERS = 4


def column_tolerances(priors: torch.Tensor, tol: float | None, op: str) -> torch.Tensor:
    """float64 [B] on the priors' device: ``max(tol, ε·‖p_b‖₁)`` per row of ``priors`` [B, N]
    (non-negative; float32 or float64), or -inf everywhere for ``tol=None``. Warns
    (:class:`~.errors.ToleranceWarning`, naming ``op``) when the floor exceeds ``tol`` for some row."""
    if tol is None:
        return torch.full((priors.shape[0],), -math.inf, dtype=torch.float64, device=priors.device)
    floor = priors.sum(1).to(torch.float64) * torch.finfo(priors.dtype).eps  # (a float64 accumulation is a slow cast)
    if len(floor) and float(floor.max()) > tol:
        warnings.warn(f"{op}: tol={tol:g} is below what {priors.dtype} resolves for some priors (one rounding "
                      f"unit of a prior's mass, up to {float(floor.max()):.3g}); those columns stop at that floor",
                      ToleranceWarning, stacklevel=caller_level())
    return floor.clamp(min=tol)


def caller_level() -> int:
    """The ``stacklevel`` of a warning raised in this package that names the first caller outside it."""
    here, level = Path(__file__).parent, 1
    frame = sys._getframe(1)
    while frame is not None and Path(frame.f_code.co_filename).parent == here:
        frame, level = frame.f_back, level + 1
    return level


class StopRule:
    """The stop test of the live columns of one walk (module docstring): ``done(change)`` per
    iteration, ``keep(idx)`` when the block drops stopped columns. Tensors stay on the device
    of ``tols`` (no host synchronisation)."""

    def __init__(self, tols: torch.Tensor):
        self.tols = tols
        self.best = torch.full_like(tols, math.inf)
        self.since = torch.zeros(tols.shape, dtype=torch.int64, device=tols.device)

    def done(self, change: torch.Tensor) -> torch.Tensor:
        """bool [B]: the columns whose ``change`` (float64 [B], this iteration's L1 change) meets
        their tolerance, or that have stalled (never a column of tolerance -inf)."""
        improved = change < self.best
        self.best = torch.minimum(self.best, change)
        self.since = torch.where(improved, torch.zeros_like(self.since), self.since + 1)
        return (change <= self.tols) | ((self.since >= STALL_ITERS) & (self.tols > -math.inf))

    def keep(self, idx: torch.Tensor) -> None:
        """Keep only the columns ``idx`` (in that order)."""
        self.tols, self.best, self.since = self.tols[idx], self.best[idx], self.since[idx]

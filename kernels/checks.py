"""The one set of vectorised array checks: ids in range, CSR offsets, integer dtypes, finite values.

Every op validates its inputs once, in the preparation step that both its CPU and its
Triton path run, so a Triton kernel is never launched on ids outside the arrays it
indexes (an out-of-bounds read on a GPU) and NaN never flows silently through an op; the
engine's checks of stored index arrays (:mod:`hopgraph.engine.storage.validate`) are these
checks raising another error.
Each check is one or two reductions over the array (``aminmax`` in torch, ``min``/``max``
in NumPy; NaN propagates through both, so "min and max finite" means "all finite"),
so validation stays a small share of the op; only when a check fails is the array
scanned again to name the first offending entry.

The helpers take a torch tensor or a NumPy array and raise ``error``
(:class:`~hopgraph.kernels.errors.InputError` unless given) as ``"OP: ARGUMENT problem"``.
"""
from __future__ import annotations

import math
from typing import Union

import numpy as np
import torch

from .errors import InputError
from .tensors import as_numpy

Array = Union[np.ndarray, torch.Tensor]

__all__ = ["Array", "check_band", "check_ids", "check_indptr", "check_values", "check_int_dtype", "check_positive_int",
           "first_where", "min_max"]


def min_max(a: Array) -> tuple[float, float]:
    """``(min, max)`` of a non-empty array as Python numbers (NaN if the array holds NaN)."""
    if isinstance(a, torch.Tensor):
        if a.dtype == torch.bool:
            a = a.to(torch.uint8)
        lo, hi = torch.aminmax(a)
        return lo.item(), hi.item()
    return np.min(a).item(), np.max(a).item()


def first_where(mask: Array) -> tuple[int, ...]:
    """Index (a tuple, one entry per dimension) of the first True entry of ``mask``."""
    mask = as_numpy(mask)
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(mask)), mask.shape))


def _at(name: str, index: tuple[int, ...]) -> str:
    return f"{name}[{', '.join(map(str, index))}]"


def _value(a: Array, index: tuple[int, ...]) -> object:
    v = a[index]
    return v.item() if hasattr(v, "item") else v


def _is_integer(a: Array) -> bool:
    if isinstance(a, torch.Tensor):
        return not (a.dtype.is_floating_point or a.dtype.is_complex or a.dtype == torch.bool)
    return a.dtype.kind in "iu"


def _is_real(a: Array) -> bool:
    if isinstance(a, torch.Tensor):
        return not a.dtype.is_complex
    return a.dtype.kind in "biuf"


def check_int_dtype(a: Array, name: str, op: str, error: type[Exception] = InputError) -> None:
    """``a`` must hold integers (ids and offsets are never floats or booleans)."""
    if not _is_integer(a):
        raise error(f"{op}: {name} must be an integer array, got dtype {a.dtype}")


def check_positive_int(value: object, name: str, op: str, minimum: int = 1) -> int:
    """``value`` as an int, which must be an integer (not a bool) ``>= minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise InputError(f"{op}: {name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_band(sim_min: object, sim_max: object, op: str) -> tuple[float, float]:
    """The similarity band ``(sim_min, sim_max)`` as floats: two finite numbers (not bools), ``sim_min <=
    sim_max``; :class:`InputError` as ``"OP: need finite sim_min <= sim_max ..."``."""
    if not all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
               for v in (sim_min, sim_max)):
        raise InputError(f"{op}: sim_min and sim_max must be numbers, got {sim_min!r}, {sim_max!r}")
    lo, hi = float(sim_min), float(sim_max)  # type: ignore[arg-type]
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi:
        raise InputError(f"{op}: need finite sim_min <= sim_max, got [{lo}, {hi}]")
    return lo, hi


def check_ids(a: Array, name: str, n: int, op: str, what: str = "ids", padding: bool = False,
              error: type[Exception] = InputError) -> None:
    """Integer ids in ``[0, n)`` (``-1`` also allowed as padding with ``padding=True``)."""
    check_int_dtype(a, name, op, error)
    if a.numel() if isinstance(a, torch.Tensor) else a.size:
        lo, hi = min_max(a)
        low = -1 if padding else 0
        if lo < low or hi >= n:
            bad = (a < low) | (a >= n)
            at = first_where(bad)
            allowed = f"[0, {n})" + (" or -1 (padding)" if padding else "")
            raise error(f"{op}: {name} must hold {what} in {allowed}; {_at(name, at)} = {_value(a, at)}")


def check_indptr(a: Array, name: str, length: int, total: int | None, op: str,
                 error: type[Exception] = InputError) -> None:
    """A CSR offsets array: 1-D integer of ``length`` entries, starting at 0, never
    decreasing, ending at ``total`` (when given)."""
    check_int_dtype(a, name, op, error)
    if tuple(a.shape) != (length,):
        raise error(f"{op}: {name} must have shape ({length},), got {tuple(a.shape)}")
    if length == 0:
        return
    if int(a[0]) != 0:
        raise error(f"{op}: {name} must start at 0, got {name}[0] = {int(a[0])}")
    if length > 1:
        steps = (torch.diff(a) if isinstance(a, torch.Tensor) else np.diff(a))
        if min_max(steps)[0] < 0:
            i = first_where(steps < 0)[0]
            raise error(f"{op}: {name} must never decrease; {name}[{i + 1}] = {int(a[i + 1])} "
                        f"< {name}[{i}] = {int(a[i])}")
    if total is not None and int(a[-1]) != total:
        raise error(f"{op}: {name} must end at {total} (the number of entries), got {int(a[-1])}")


def check_values(a: Array, name: str, op: str, non_negative: bool = True,
                 error: type[Exception] = InputError) -> None:
    """Real numbers, all finite (no NaN or ±inf), and ``>= 0`` with ``non_negative``."""
    if not _is_real(a):
        raise error(f"{op}: {name} must be a real-valued array, got dtype {a.dtype}")
    if not (a.numel() if isinstance(a, torch.Tensor) else a.size):
        return
    lo, hi = min_max(a)
    if math.isfinite(lo) and math.isfinite(hi) and (lo >= 0 or not non_negative):
        return
    finite = torch.isfinite(a) if isinstance(a, torch.Tensor) else np.isfinite(a)
    if not bool(finite.all()):
        at = first_where(~finite)
        raise error(f"{op}: {name} must be finite (no NaN or infinity); {_at(name, at)} = {_value(a, at)}")
    at = first_where(a < 0)
    raise error(f"{op}: {name} must be non-negative; {_at(name, at)} = {_value(a, at)}")

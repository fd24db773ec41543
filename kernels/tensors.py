"""The one place where NumPy arrays cross to torch at the kernel boundary (and back: :func:`as_numpy`).

The torch-based ops declare which of their arguments are tensors when they register
(``register(..., tensors=(...))``); :func:`hopgraph.kernels.dispatch.call` passes those
arguments through :func:`as_tensor`, so callers may hand NumPy arrays to any op and the
conversion happens once, here. Tensors are passed on as they are (their dtype and device
are the caller's choice, as before).

Counting (:mod:`hopgraph.kernels.transfers`): within ``counting_transfers()``, each array that crosses this boundary outside a
kernel is recorded in a :class:`Transfers` — a host array made a tensor (:func:`as_tensor`, and
the host arrays :func:`hopgraph.kernels.dispatch.call` hands a kernel: on CUDA each is a
host→device copy) and a tensor brought back as NumPy (:func:`as_numpy`: device→host on CUDA). A
tensor passed as it is counts nothing, nor does what a kernel converts inside itself.
"""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch

from .errors import InputError
from .transfers import note_transfer


def as_tensor(value: Any, dtype: torch.dtype | None = None, device: str | torch.device = "cpu",
              name: str = "array") -> torch.Tensor:
    """``value`` as a torch tensor: a tensor is returned unchanged; a NumPy array (or any
    array-like) becomes a tensor of its own dtype (``dtype`` when given) on ``device``.

    On the CPU the tensor shares the array's memory when the dtype allows (a read-only,
    e.g. memory-mapped, array included: the kernels never write to their inputs).
    Raises :class:`InputError` naming ``name`` when ``value`` is not numeric array data.
    """
    if isinstance(value, torch.Tensor):
        return value
    array = np.asarray(value)
    if array.dtype.kind not in "biuf":
        raise InputError(f"{name} must be a numeric array or tensor, got {type(value).__name__} "
                         f"with dtype {array.dtype}")
    note_transfer("to_device", name, array)
    with warnings.catch_warnings():  # torch warns on read-only arrays
        warnings.simplefilter("ignore", UserWarning)
        t = torch.from_numpy(np.require(array, requirements="C"))
    if dtype is not None or torch.device(device).type != "cpu":
        t = t.to(device=device, dtype=dtype)
    return t


def as_numpy(value: Any) -> np.ndarray:
    """``value`` as a NumPy array: a tensor copied to the host where it is not there (detached), an
    array-like through ``np.asarray``."""
    if isinstance(value, torch.Tensor):
        note_transfer("to_host", "tensor", value)
        return value.detach().cpu().numpy()
    return np.asarray(value)

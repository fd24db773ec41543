"""Counting what crosses the kernel boundary: the host arrays made tensors for the kernels and the
tensors brought back as NumPy (:mod:`hopgraph.kernels.tensors`, :func:`hopgraph.kernels.dispatch.call`).

On CUDA each such crossing is a host→device or device→host copy; on CPU tensors it is the same
crossing without the copy, so a count on the CPU says how many copies the same search makes on a
GPU. ``bench/transfers.py`` counts a search batch (with the torch profiler's memcpy events on CUDA).
Kept free of torch so that :mod:`hopgraph.kernels.dispatch` imports it at no cost.
"""
from __future__ import annotations

import contextvars
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, NamedTuple


class Crossing(NamedTuple):
    """One array crossing the boundary: a ``name`` saying what it is, its ``nbytes`` and the
    ``address`` of its first byte where it came from (to tell which array it was)."""

    name: str
    nbytes: int
    address: int


@dataclass
class Transfers:
    """What crossed the kernel boundary while counting (module docstring): ``to_device`` and
    ``to_host``, one :class:`Crossing` per array."""

    to_device: list[Crossing] = field(default_factory=list)
    to_host: list[Crossing] = field(default_factory=list)

    @property
    def htod(self) -> int:
        """Host arrays made tensors (host→device copies on CUDA)."""
        return len(self.to_device)

    @property
    def dtoh(self) -> int:
        """Tensors brought back as NumPy (device→host copies on CUDA)."""
        return len(self.to_host)

    @property
    def htod_bytes(self) -> int:
        """Bytes of the host arrays made tensors."""
        return sum(c.nbytes for c in self.to_device)

    @property
    def dtoh_bytes(self) -> int:
        """Bytes of the tensors brought back."""
        return sum(c.nbytes for c in self.to_host)


_COUNTING: contextvars.ContextVar[Transfers | None] = contextvars.ContextVar("hopgraph_transfers", default=None)
#: set while a kernel runs: what it converts inside itself is not a transfer of its caller's
_IN_KERNEL: contextvars.ContextVar[bool] = contextvars.ContextVar("hopgraph_in_kernel", default=False)


@contextmanager
def counting_transfers() -> Iterator[Transfers]:
    """Record, in the :class:`Transfers` yielded, every array crossing the kernel boundary in this
    context (this thread and the tasks it starts) until the block ends."""
    count = Transfers()
    token = _COUNTING.set(count)
    try:
        yield count
    finally:
        _COUNTING.reset(token)


def counting() -> bool:
    """Whether transfers are being counted here (outside a kernel)."""
    return _COUNTING.get() is not None and not _IN_KERNEL.get()


@contextmanager
def inside_kernel() -> Iterator[None]:
    """Mark a kernel's own work: conversions inside it are not counted."""
    token = _IN_KERNEL.set(True)
    try:
        yield
    finally:
        _IN_KERNEL.reset(token)


def note_transfer(direction: str, name: str, value: Any) -> None:
    """Record ``value`` (an array or tensor) as crossing in ``direction`` (``"to_device"`` |
    ``"to_host"``) when counting, outside a kernel; else nothing."""
    count = _COUNTING.get()
    if count is not None and not _IN_KERNEL.get():
        if hasattr(value, "data_ptr"):  # a tensor
            nbytes, address = int(value.numel() * value.element_size()), int(value.data_ptr())
        else:
            nbytes, address = int(value.nbytes), int(value.__array_interface__["data"][0])
        getattr(count, direction).append(Crossing(name, nbytes, address))

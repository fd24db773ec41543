"""The single dispatch point of hopgraph.kernels.

Every op is registered once with a CPU implementation (torch/numpy) and, where one
exists, a Triton implementation. ``call(op, *args, device=...)`` picks the
implementation: ``"cuda"`` runs Triton on the GPU, ``"cpu"`` runs the fallback,
``"auto"`` chooses cuda when torch sees a GPU. Tests may force the Triton path on
CPU tensors under ``TRITON_INTERPRET=1`` with ``backend="triton"``.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

DEVICES = ("auto", "cuda", "cpu")


@dataclass
class Op:
    """An op: its CPU callable and its Triton entry point as ``"module:function"``.

    The Triton module is imported only when first used, so the CPU path never
    imports triton.
    """

    name: str
    cpu: Callable[..., Any]
    triton_path: str | None = None

    @property
    def triton(self) -> Callable[..., Any] | None:
        if self.triton_path is None:
            return None
        module, _, func = self.triton_path.partition(":")
        return getattr(importlib.import_module(module), func)


_OPS: dict[str, Op] = {}


def register(name: str, cpu: Callable[..., Any], triton: str | None = None) -> Op:
    """Register an op: its CPU callable and its Triton entry point ``"package.module:function"``."""
    if name in _OPS:
        raise ValueError(f"kernel op {name!r} registered twice")
    _OPS[name] = op = Op(name, cpu, triton)
    return op


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def resolve_device(device: str = "auto") -> str:
    """Map ``"auto" | "cuda" | "cpu"`` to the device that will run; error names the input."""
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got {device!r}")
    if device == "auto":
        return "cuda" if cuda_available() else "cpu"
    if device == "cuda" and not cuda_available():
        raise RuntimeError("device='cuda' was asked for but torch sees no CUDA GPU; use device='cpu' or 'auto'")
    return device


def backend_for(op: Op, device: str, backend: str | None) -> str:
    """``"triton"`` or ``"cpu"``: an explicit backend wins, else cuda → triton when the op has one."""
    if backend is not None:
        if backend not in ("triton", "cpu"):
            raise ValueError(f"backend must be 'triton' or 'cpu', got {backend!r}")
        if backend == "triton" and op.triton_path is None:
            raise NotImplementedError(f"kernel op {op.name!r} has no Triton implementation")
        return backend
    return "triton" if device == "cuda" and op.triton_path is not None else "cpu"


def get_op(name: str) -> Op:
    """The op registered as ``name``; by convention its module ``hopgraph.kernels.<name>``
    is imported on first use (importing it registers the op)."""
    if name not in _OPS:
        module = f"{__package__}.{name}"
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name != module:
                raise
    try:
        return _OPS[name]
    except KeyError:
        raise KeyError(f"unknown kernel op {name!r}; known: {sorted(_OPS)}") from None


def call(name: str, *args: Any, device: str = "auto", backend: str | None = None, **kwargs: Any) -> Any:
    """Run op ``name`` on ``device`` (see module docstring); ``device`` is passed on to the op."""
    op = get_op(name)
    dev = resolve_device(device)
    impl = op.triton if backend_for(op, dev, backend) == "triton" else op.cpu
    return impl(*args, device=dev, **kwargs)


def registered_ops() -> list[str]:
    return sorted(_OPS)

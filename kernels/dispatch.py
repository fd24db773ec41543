"""The single dispatch point of hopgraph.kernels.

Every op is registered once with a CPU implementation (torch/numpy) and, where one
exists, a Triton implementation. ``call(op, *args, device=..., backend=...)`` picks the
implementation, in this order of precedence:

1. an explicit ``backend="triton" | "cpu"`` argument (``"triton"`` on an op without a
   Triton path raises :class:`NotImplementedError`);
2. a process-wide override: the innermost :func:`use_backend` block of the calling
   context, else the environment variable ``HOPGRAPH_KERNEL_BACKEND`` (``triton`` |
   ``cpu``, read at every call). A forced ``"triton"`` runs the CPU path of the ops that
   have no Triton kernel;
3. the device rule: ``device="cuda"`` runs Triton on the GPU, ``"cpu"`` the CPU path,
   ``"auto"`` chooses cuda when torch sees a GPU.

Forcing ``"triton"`` with ``device="cpu"`` runs the Triton kernels on CPU tensors, which
works under ``TRITON_INTERPRET=1`` (the tests, ``bench/gpu_check.py --interpret``).

Torch-based ops declare their tensor arguments (``register(..., tensors=...)``): NumPy
arrays given for them are converted once, by :func:`hopgraph.kernels.tensors.as_tensor`,
onto the device the chosen implementation runs on; tensors are passed on unchanged.

Each op is also a function of :mod:`hopgraph.kernels` (``hopgraph.kernels.batched_ppr(P,
priors, ...)``), made by :func:`op_function` with the CPU implementation's signature.
"""
from __future__ import annotations

import contextvars
import functools
import importlib
import inspect
import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from .errors import DeviceUnavailable, InputError
from .transfers import counting, inside_kernel, note_transfer

DEVICES = ("auto", "cuda", "cpu")
BACKENDS = ("triton", "cpu")
#: environment variable of the process-wide backend override (read at call time)
BACKEND_ENV = "HOPGRAPH_KERNEL_BACKEND"

_BACKEND_OVERRIDE: contextvars.ContextVar[str | None] = contextvars.ContextVar("hopgraph_kernel_backend",
                                                                              default=None)


@dataclass
class Op:
    """An op: its CPU callable, its Triton entry point as ``"module:function"`` and the
    names of its tensor arguments (NumPy arrays given for them are converted by :func:`call`).

    The Triton module is imported only when first used, so the CPU path never
    imports triton.
    """

    name: str
    cpu: Callable[..., Any]
    triton_path: str | None = None
    tensors: tuple[str, ...] = ()

    @property
    def triton(self) -> Callable[..., Any] | None:
        """The Triton entry point, imported on first access; None for an op without a Triton path."""
        if self.triton_path is None:
            return None
        module, _, func = self.triton_path.partition(":")
        return getattr(importlib.import_module(module), func)

    @functools.cached_property
    def positional(self) -> tuple[str, ...]:
        """Names of the CPU implementation's positional parameters, in order."""
        kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        return tuple(p.name for p in inspect.signature(self.cpu).parameters.values() if p.kind in kinds)


_OPS: dict[str, Op] = {}


def register(name: str, cpu: Callable[..., Any], triton: str | None = None, tensors: tuple[str, ...] = ()) -> Op:
    """Register an op: its CPU callable, its Triton entry point ``"package.module:function"``
    and the parameter names (of the CPU callable) that take tensors (NumPy accepted)."""
    if name in _OPS:
        raise ValueError(f"kernel op {name!r} registered twice")
    params = inspect.signature(cpu).parameters
    unknown = [t for t in tensors if t not in params]
    if unknown:
        raise ValueError(f"kernel op {name!r}: tensors {unknown} are not parameters of {cpu.__qualname__}")
    _OPS[name] = op = Op(name, cpu, triton, tuple(tensors))
    return op


def cuda_available() -> bool:
    """Whether torch sees a CUDA GPU (what ``device="auto"`` chooses by)."""
    import torch

    return torch.cuda.is_available()


def resolve_device(device: str = "auto") -> str:
    """Map ``"auto" | "cuda" | "cpu"`` to the device that will run; error names the input."""
    if device not in DEVICES:
        raise InputError(f"device must be one of {DEVICES}, got {device!r}")
    if device == "auto":
        return "cuda" if cuda_available() else "cpu"
    if device == "cuda" and not cuda_available():
        raise DeviceUnavailable("device='cuda' was asked for but torch sees no CUDA GPU; use device='cpu' or 'auto'")
    return device


def _check_backend(backend: str, what: str) -> str:
    if backend not in BACKENDS:
        raise InputError(f"{what} must be one of {BACKENDS}, got {backend!r}")
    return backend


@contextmanager
def use_backend(backend: str) -> Iterator[None]:
    """Within this block every :func:`call` without an explicit ``backend=`` uses ``backend``
    (``"triton"`` | ``"cpu"``); ops with no Triton kernel run their CPU path under ``"triton"``.

    The setting is a :class:`contextvars.ContextVar`: it holds in this thread (and in asyncio
    tasks started inside the block), not in other threads. It wins over ``HOPGRAPH_KERNEL_BACKEND``.
    """
    token = _BACKEND_OVERRIDE.set(_check_backend(backend, "use_backend(backend)"))
    try:
        yield
    finally:
        _BACKEND_OVERRIDE.reset(token)


def forced_backend() -> str | None:
    """The process-wide override in effect: the innermost :func:`use_backend`, else the
    environment variable ``HOPGRAPH_KERNEL_BACKEND`` (unset or empty: None)."""
    backend = _BACKEND_OVERRIDE.get()
    if backend is not None:
        return backend
    value = os.environ.get(BACKEND_ENV, "").strip()
    if not value:
        return None
    return _check_backend(value.lower(), f"environment variable {BACKEND_ENV}")


def backend_for(op: Op, device: str, backend: str | None) -> str:
    """``"triton"`` or ``"cpu"`` for ``op`` on ``device`` (see the module docstring for the precedence)."""
    if backend is not None:
        _check_backend(backend, "backend")
        if backend == "triton" and op.triton_path is None:
            raise NotImplementedError(f"kernel op {op.name!r} has no Triton implementation")
        return backend
    forced = forced_backend()
    if forced is not None:
        return "triton" if forced == "triton" and op.triton_path is not None else "cpu"
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


def _tensor_args(op: Op, args: tuple[Any, ...], kwargs: dict[str, Any], device: str
                 ) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``args``/``kwargs`` with the op's declared tensor arguments given as NumPy (or other
    array-likes) converted to tensors on ``device``; None and tensors are left as they are."""
    if not op.tensors:
        return args, kwargs
    from .tensors import as_tensor

    def convert(name: str, value: Any) -> Any:
        if value is None or name not in op.tensors:
            return value
        return as_tensor(value, device=device, name=f"{op.name}: {name}")

    args = tuple(convert(name, value) for name, value in zip(op.positional, args)) + args[len(op.positional):]
    return args, {name: convert(name, value) for name, value in kwargs.items()}


def call(name: str, *args: Any, device: str = "auto", backend: str | None = None, **kwargs: Any) -> Any:
    """Run op ``name`` (see the module docstring for the choice of implementation);
    ``device`` is passed on to the op."""
    op = get_op(name)
    dev = resolve_device(device)
    use_triton = backend_for(op, dev, backend) == "triton"
    args, kwargs = _tensor_args(op, args, kwargs, "cuda" if use_triton and dev == "cuda" else "cpu")
    _note_host_arrays(op, args, kwargs)
    impl = op.triton if use_triton else op.cpu
    with inside_kernel():
        return impl(*args, device=dev, **kwargs)


def _note_host_arrays(op: Op, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Count (:func:`~hopgraph.kernels.tensors.counting_transfers`) the host arrays a kernel is
    handed besides its declared tensors — NumPy arrays, alone or in a tuple such as a CSR: on
    CUDA the kernel copies each to the device. Nothing when not counting."""
    if not counting():
        return
    import numpy as np

    named = list(zip(op.positional, args)) + list(kwargs.items())
    for name, value in named:
        parts = value if isinstance(value, (tuple, list)) else (value,)
        for i, part in enumerate(parts):
            if isinstance(part, np.ndarray) and part.ndim:
                note_transfer("to_device", f"{op.name}: {name}" + (f"[{i}]" if parts is value else ""), part)


def registered_ops() -> list[str]:
    """The names of the ops registered so far, sorted."""
    return sorted(_OPS)


def op_function(name: str) -> Callable[..., Any]:
    """Op ``name`` as a plain function: ``f(*args, device="auto", backend=None, **kwargs)`` is
    ``call(name, *args, device=device, backend=backend, **kwargs)``, with the signature of the
    op's CPU implementation (``device`` and ``backend`` keyword-only) and a docstring made
    of the op module's and the CPU implementation's."""
    op = get_op(name)

    def fn(*args: Any, device: str = "auto", backend: str | None = None, **kwargs: Any) -> Any:
        return call(name, *args, device=device, backend=backend, **kwargs)

    functools.update_wrapper(fn, op.cpu)
    fn.__name__ = fn.__qualname__ = name
    fn.__module__ = __package__
    params = [p for p in inspect.signature(op.cpu).parameters.values() if p.name != "device"]
    params += [inspect.Parameter("device", inspect.Parameter.KEYWORD_ONLY, default="auto", annotation="str"),
               inspect.Parameter("backend", inspect.Parameter.KEYWORD_ONLY, default=None,
                                 annotation="str | None")]
    fn.__signature__ = inspect.signature(op.cpu).replace(parameters=params)  # type: ignore[attr-defined]
    module = importlib.import_module(op.cpu.__module__)
    numpy_note = (f" NumPy arrays are accepted for {', '.join(op.tensors)} (converted once at the kernel "
                  "boundary)." if op.tensors else "")
    fn.__doc__ = "\n\n".join(part for part in (
        inspect.cleandoc(module.__doc__ or ""),
        f"CPU implementation ``{op.cpu.__module__}.{op.cpu.__qualname__}``: {inspect.cleandoc(op.cpu.__doc__ or '')}",
        f"Runs through ``hopgraph.kernels.call({name!r}, ...)``: ``device`` (\"auto\" | \"cuda\" | \"cpu\") "
        f"and ``backend`` (\"triton\" | \"cpu\") choose the implementation (see "
        f":mod:`hopgraph.kernels.dispatch`).{numpy_note}") if part)
    return fn

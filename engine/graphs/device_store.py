"""The device-resident graph store: an index's graphs held in accelerator memory, moved there once.

:class:`DeviceStore` is the :class:`~hopgraph.engine.graphs.store.GraphStore` an index is opened
with on a GPU (``device="cuda"``; :func:`store_for_device`), or with any torch device given
explicitly (``DeviceStore("cpu")``: the same code on CPU tensors, for tests). It saves and loads
through a base store (default: the index's own files, :class:`~hopgraph.engine.graphs.store.LocalStore`)
and hands pipelines :class:`ResidentCSR` readers: CSRs whose host arrays are the ones loaded (so
every host reader — a row gather, a save — reads them as before, bit for bit) and whose
:meth:`ResidentCSR.on_device` gives the three arrays as tensors on the store's device, copied
there on first use and kept: a search batch that hands the graph to a kernel
(:func:`~hopgraph.engine.graphs.store.kernel_graph`) copies nothing of it. A structure a search
reads on the host only never takes device memory (``docs/decisions/device-resident-graphs.md``).

Memory: each structure is placed whole or not at all, within the store's budget — ``budget``
bytes when given (else the environment variable :data:`BUDGET_ENV`), on CUDA also the device's
free memory less :data:`CUDA_HEADROOM` of its total (:func:`torch.cuda.mem_get_info`). A structure
that does not fit stays in host memory with a :class:`DeviceMemoryWarning` naming it (the
component), and its kernels copy it per call as an index without the store does.

Graphs read by rows from other processes (a sharded router's) and row matrices are returned as the
base store gives them.
"""
from __future__ import annotations

import os
import threading
import warnings
import weakref
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ...kernels.csr import CSR
from ..errors import InputError
from .store import LOCAL, NODE_ROWS, PASSAGE_ROWS, GraphStore

#: environment variable bounding the bytes a :class:`DeviceStore` places on its device (an integer)
BUDGET_ENV = "HOPGRAPH_DEVICE_BUDGET"
#: share of a CUDA device's total memory a :class:`DeviceStore` leaves free for the searches' own arrays
CUDA_HEADROOM = 0.2


class DeviceMemoryWarning(UserWarning):
    """A graph structure did not fit the device budget and stays in host memory."""


class ResidentCSR(CSR):
    """A :class:`~hopgraph.kernels.csr.CSR` (its host arrays, as loaded) held by a
    :class:`DeviceStore` under the name ``component``: :meth:`on_device` gives its arrays on the
    store's device, copied once (module docstring)."""

    store: "DeviceStore"
    component: str

    def on_device(self) -> tuple[Any, Any, Any] | None:
        """``(indptr, indices, data)`` as tensors on the store's device (int64, int32, float32),
        copied on the first call and kept (shared by every reader of the same host arrays); None
        when the graph does not fit the store's budget (warned once, :class:`DeviceMemoryWarning`)."""
        store = getattr(self, "store", None)
        if store is None:
            return None
        return store.place((self.indptr, self.indices, self.data), self.component, ("indptr", "indices", "data"))


class ResidentArray:
    """A host array (``host``) held by a :class:`DeviceStore` under the name ``component``: reads
    as the array on the host (``np.asarray``, ``[key]``, ``len``, ``shape``, ``dtype``);
    :meth:`on_device` gives it as a tensor on the store's device, copied once."""

    def __init__(self, host: np.ndarray, store: "DeviceStore", component: str) -> None:
        self.host, self.store, self.component = host, store, component
        self.shape, self.dtype = host.shape, host.dtype

    def on_device(self) -> Any:
        """The array as a tensor on the store's device (copied on the first call and kept); None
        when it does not fit the store's budget."""
        placed = self.store.place((self.host,), self.component, ("array",))
        return None if placed is None else placed[0]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self.host if dtype is None else self.host.astype(dtype, copy=False)

    def __getitem__(self, key: Any) -> Any:
        return self.host[key]

    def __len__(self) -> int:
        return len(self.host)


def resident(graph: CSR, store: "DeviceStore", component: str) -> ResidentCSR:
    """``graph``'s arrays as a :class:`ResidentCSR` of ``store`` named ``component`` (no copy of
    arrays of the kernels' dtypes: int64, int32, float32)."""
    out = ResidentCSR(np.asarray(graph.indptr, np.int64), np.asarray(graph.indices, np.int32),
                      np.asarray(graph.data, np.float32), graph.n_cols)
    out.store, out.component = store, component
    return out


class DeviceStore(GraphStore):
    """Graphs held on a torch ``device`` (module docstring); saves and loads through ``base``.
    ``budget``: the bytes it may place (None: :data:`BUDGET_ENV`, else unbounded but, on CUDA,
    the free memory less :data:`CUDA_HEADROOM`)."""

    def __init__(self, device: Any = "cuda", base: GraphStore = LOCAL, budget: int | None = None) -> None:
        import torch

        self.device = torch.device(device)
        self.base = base
        if budget is None and os.environ.get(BUDGET_ENV, "").strip():
            value = os.environ[BUDGET_ENV].strip()
            if not value.isdigit():
                raise InputError(f"environment variable {BUDGET_ENV} must be a number of bytes >= 0, got {value!r}")
            budget = int(value)
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 0):
            raise InputError(f"budget must be a number of bytes >= 0 or None, got {budget!r}")
        #: the bytes this store may place on its device (None: bounded by the device only)
        self.budget = budget
        #: bytes held on the device now
        self.used = 0
        #: the components placed so far, in order (name, bytes), and those refused (kept on the host)
        self.placed: list[tuple[str, int]] = []
        self.refused: list[tuple[str, int]] = []
        self._tensors: dict[tuple, tuple[tuple[Any, ...], int]] = {}
        self._lock = threading.RLock()  # a release may run from the GC inside place

    # ------------------------------------------------------------------ residency
    def hold(self, item: Any, component: str) -> Any:
        """``item`` as this store keeps it: a whole in-memory :class:`CSR` becomes a
        :class:`ResidentCSR` named ``component``, an array (memory-mapped or not) a
        :class:`ResidentArray` (each moved on first device use); anything else (a graph read by
        rows, an overlay, rows held elsewhere) is returned as it is."""
        if type(item) is CSR:
            return resident(item, self, component)
        if isinstance(item, np.ndarray):
            return ResidentArray(item, self, component)
        return item

    def room(self) -> int | None:
        """Bytes that may still be placed (None: no bound)."""
        left = None if self.budget is None else self.budget - self.used
        if self.device.type == "cuda":
            import torch

            free, total = torch.cuda.mem_get_info(self.device)
            cuda_left = int(free - CUDA_HEADROOM * total)
            left = cuda_left if left is None else min(left, cuda_left)
        return left

    def place(self, arrays: tuple[np.ndarray, ...], component: str, names: tuple[str, ...]
              ) -> tuple[Any, ...] | None:
        """``arrays`` (host arrays of one structure, ``names`` naming each) as tensors on this
        store's device, copied on the first call and kept while those arrays live, shared by every
        reader of the same host arrays; None when they do not fit the budget (warned once per
        ``component``)."""
        key = tuple((a.__array_interface__["data"][0], a.shape, a.dtype.str) for a in arrays)
        with self._lock:
            if key in self._tensors:
                return self._tensors[key][0]
            nbytes = sum(a.nbytes for a in arrays)
            left = self.room()
            if left is not None and nbytes > left:
                if not any(name == component for name, _ in self.refused):
                    warnings.warn(f"{component}: {nbytes:,} bytes do not fit the {self.device} budget "
                                  f"({max(left, 0):,} bytes left); it stays in host memory and is copied per "
                                  "kernel call", DeviceMemoryWarning, stacklevel=4)
                    self.refused.append((component, nbytes))
                return None
            tensors = tuple(copied_to(a, self.device, f"{component} {what}") for a, what in zip(arrays, names))
            # the tensors live as long as the host arrays: when one is freed (a graph replaced by
            # an add), they are released, before its address can be reused under the same key
            self._tensors[key] = (tensors, nbytes)
            for a in arrays:
                weakref.finalize(a, self._release, key)
            self.used += nbytes
            self.placed.append((component, nbytes))
            return tensors

    def place_together(self, fetch: Callable[[], list[Any]]) -> list[Any] | None:
        """``fetch()``: the device forms of structures a search uses together (each placed by this
        store, :meth:`place` / :meth:`hold`; None for one refused), or None when one is refused; then
        what ``fetch`` placed anew is released again, so that no budget is held by structures no
        search uses (the refusal is still reported once, and the host path runs)."""
        with self._lock:
            before = set(self._tensors)
            out = fetch()
            if any(item is None for item in out):
                for key in set(self._tensors) - before:
                    self._release(key)
                return None
            return out

    def _release(self, key: tuple) -> None:
        """Drop the tensors placed under ``key`` (their host arrays were freed)."""
        with self._lock:
            entry = self._tensors.pop(key, None)
            if entry is not None:
                self.used -= entry[1]

    # ------------------------------------------------------------------ GraphStore
    def save_graph(self, directory: Path, prefix: str, graph: Any, rows_by: str = PASSAGE_ROWS,
                   weighted: bool = True, entries: str = "indices") -> bool:
        """As the base store (the host arrays)."""
        return self.base.save_graph(directory, prefix, graph, rows_by, weighted, entries)

    def load_graph(self, directory: Path, prefix: str, n_cols: int, where: str, weighted: bool = True,
                   entries: str = "indices") -> Any:
        """The base store's graph, held (:meth:`hold`) under the name ``where``."""
        return self.hold(self.base.load_graph(directory, prefix, n_cols, where, weighted, entries), where)

    def save_matrix(self, directory: Path, name: str, matrix: Any, rows_by: str = NODE_ROWS) -> bool:
        """As the base store."""
        return self.base.save_matrix(directory, name, matrix, rows_by)

    def load_matrix(self, directory: Path, name: str, mmap: bool = True) -> Any:
        """As the base store (row matrices are read on the host)."""
        return self.base.load_matrix(directory, name, mmap)

    def by_reference(self, item: Any) -> bool:
        """As the base store."""
        return self.base.by_reference(item)

    def keep_rows(self, old: Any, new: Any, rows: Any) -> Any:
        """As the base store."""
        return self.base.keep_rows(old, new, rows)


#: bytes of a memory-mapped array read from its file at a time when it is copied to a device
COPY_BLOCK_BYTES = 64 << 20


def copied_to(array: np.ndarray, device: Any, name: str) -> Any:
    """A tensor on ``device`` owning a copy of ``array`` (one host→device transfer named ``name``). A
    memory-mapped array is read from its file in blocks of :data:`COPY_BLOCK_BYTES` into one reused
    buffer (:class:`~hopgraph.engine.storage.RowReader`), so its pages never enter the process's
    resident set (a copy through the mapping would fault the whole file in)."""
    import torch

    from ...kernels.tensors import as_tensor
    from ...kernels.transfers import note_transfer
    from ..storage import RowReader

    if not (isinstance(array, np.memmap) and array.ndim and len(array) and array.flags.c_contiguous):
        t = as_tensor(array, device=device, name=name)
        return t.clone() if t.device.type == "cpu" else t  # as_tensor shares host memory on the CPU
    note_transfer("to_device", name, array)
    out = torch.empty(array.shape, dtype=torch.from_numpy(np.zeros(0, array.dtype)).dtype, device=device)
    step = max(1, COPY_BLOCK_BYTES // max(1, array[:1].nbytes))
    buf = np.empty((min(step, len(array)),) + array.shape[1:], array.dtype)
    with RowReader(array) as read:
        for a in range(0, len(array), step):
            b = min(a + step, len(array))
            out[a:b].copy_(torch.from_numpy(read(a, b, out=buf[:b - a])))
    return out


def store_for_device(device: str) -> GraphStore | None:
    """The graph store an index opened with run setting ``device`` (``"auto" | "cuda" | "cpu"``)
    uses: a :class:`DeviceStore` on CUDA when that is where it runs; on the CPU with the Triton
    backend forced (its interpreter, which runs kernels on torch CPU tensors) a DeviceStore of CPU
    tensors, so the device path is the one exercised; else None (its own files)."""
    from ...kernels.dispatch import forced_backend, resolve_device

    if resolve_device(device) == "cuda":
        return DeviceStore("cuda")
    return DeviceStore("cpu") if forced_backend() == "triton" else None

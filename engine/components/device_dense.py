"""Exact dense search on the device where the index's graph store holds the matrix searched: the
passage embeddings X (:meth:`QueryBatch.dense_topk_tensors
<hopgraph.engine.components.query_batch.QueryBatch.dense_topk_tensors>`), STITCH's text embeddings
(its activation, SPEC §2 step 1).

The matrix is given to a :class:`~hopgraph.engine.graphs.device_store.DeviceStore` to hold
(:meth:`~hopgraph.engine.graphs.device_store.DeviceStore.hold`: a memory-mapped ``.npy`` is copied
there once, the rows of several segments, :class:`~hopgraph.engine.storage.StackedRows`, one
part at a time) and searched there by the registered op
:func:`~hopgraph.kernels.inner_product_topk.inner_product_topk`: exactly (no IVF: on a GPU the
product over every row is cheap), in float32, the questions going in and the ids and scores coming
out only when a host caller asks. A store that refuses the matrix (its budget) gives None: the
host search (:class:`~hopgraph.engine.components.dense.DenseIndex`) answers instead, after the
store's :class:`~hopgraph.engine.graphs.device_store.DeviceMemoryWarning` naming it.

The ranking is the host's (best first, equal scores toward the lower row, -1 / -inf padding); the
scores equal the host's within float rounding (another product: torch's against faiss's), so
near-ties may come in another order (``docs/decisions/dense-search-on-the-device.md``).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ... import kernels
from ...kernels.tensors import as_numpy, as_tensor
from ..graphs.device_store import DeviceStore
from ..graphs.store import device_arrays
from ..storage import StackedRows


def held_rows(graphs: Any, X: Any, component: str) -> list[torch.Tensor] | None:
    """The rows of ``X`` as tensors on the device of ``graphs`` (a :class:`DeviceStore`), one per part
    of a :class:`StackedRows` (else one), each placed once under the name ``component``; None when
    ``graphs`` holds nothing on a device, or X is not an array it can hold, or a part does not fit
    (then none of them is kept: :meth:`DeviceStore.place_together`)."""
    if not isinstance(graphs, DeviceStore):
        return None
    parts = X.parts if isinstance(X, StackedRows) else [X]
    return graphs.place_together(lambda: [device_arrays(graphs.hold(part, component)) for part in parts])


def gather_held_rows(parts: list[torch.Tensor], ids: torch.Tensor) -> torch.Tensor:
    """The rows ``ids`` (int64, any shape, all in [0, N)) of the matrix stacked from ``parts`` (float32,
    ``ids``' shape + ``[d]``)."""
    if len(parts) == 1:
        return parts[0][ids].to(torch.float32)
    out = torch.empty((*ids.shape, parts[0].shape[1]), dtype=torch.float32, device=ids.device)
    start = 0
    for part in parts:
        inside = (ids >= start) & (ids < start + len(part))
        out[inside] = part[ids[inside] - start].to(torch.float32)
        start += len(part)
    return out


class DeviceDenseSearch:
    """Exact inner-product top-k over ``rows`` (a list of tensors stacked by rows, on one device:
    :func:`held_rows`), ``mask`` (bool tensor [N] there, or None) restricting every search to those
    rows; a search returns ``(ids int64 [B, k], scores float32 [B, k])``."""

    def __init__(self, rows: list[torch.Tensor], mask: torch.Tensor | None = None) -> None:
        self.rows, self.mask = rows, mask
        #: the torch device the rows are on (where every search runs)
        self.device = rows[0].device

    @classmethod
    def held(cls, graphs: Any, X: Any, component: str, mask: np.ndarray | None = None) -> "DeviceDenseSearch | None":
        """The search over ``X`` held by ``graphs`` (:func:`held_rows`), under a fixed row ``mask``
        (bool [N], held too, as ``"{component} mask"``); None when either is not held on a device."""
        if not isinstance(graphs, DeviceStore):
            return None
        held_mask = [] if mask is None else [np.asarray(mask, bool)]
        got = graphs.place_together(lambda: [held_rows(graphs, X, component)] +
                                    [device_arrays(graphs.hold(m, f"{component} mask")) for m in held_mask])
        return None if got is None else cls(*got)

    def __len__(self) -> int:
        return sum(len(r) for r in self.rows)

    def topk_tensors(self, Q: torch.Tensor, k: int, allowed: torch.Tensor | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-``k`` rows of the query tensor ``Q`` [B, d] (on :attr:`device`) among ``allowed``
        (bool tensor [N] there; None: every row) and the mask, as tensors there."""
        if self.mask is not None:
            allowed = self.mask if allowed is None else allowed & self.mask
        return kernels.call("inner_product_topk", Q, self.rows, k, allowed,
                            device="cuda" if self.device.type == "cuda" else "cpu")

    def topk(self, Q: np.ndarray, k: int, allowed: "np.ndarray | torch.Tensor | None" = None
             ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`topk_tensors` of host queries ``Q`` (a filter ``allowed`` on the host or already on
        the device): they go in, the ids and scores come back (as :meth:`DenseIndex.topk
        <hopgraph.engine.components.dense.DenseIndex.topk>`)."""
        Qt = as_tensor(np.asarray(Q, np.float32), device=self.device, name="query vectors")
        at = allowed if allowed is None or isinstance(allowed, torch.Tensor) else \
            as_tensor(np.asarray(allowed, bool), device=self.device, name="filter")
        ids, scores = self.topk_tensors(Qt, k, at)
        return as_numpy(ids), as_numpy(scores)

"""What one batch of questions needs from an index's shared components, each computed once: the BM25
tokens, the dense and BM25 top lists, the cosine of every passage."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ..errors import InputError
from ..graphs.device_store import DeviceStore

if TYPE_CHECKING:
    import torch

    from .device_bm25 import DeviceBM25, DeviceQuery
    from .device_dense import DeviceDenseSearch
    from .shared import Components

#: a cached ``Q @ X.T`` of a batch is kept only up to this many entries (larger: not cached)
COSINE_CACHE_BUDGET = 1 << 24


class QueryBatch:
    """One batch of questions over shared components; every derived quantity is computed once."""

    def __init__(self, components: Components, Q: np.ndarray, texts: Sequence[str] | None,
                 allowed: np.ndarray | None = None) -> None:
        self.components, self.Q = components, Q
        #: the rows this batch may return (bool [N]; None = all): every top list below respects it
        self.allowed = allowed
        self.texts = None if texts is None else list(texts)
        self._tokens: list[list[str]] | None = None
        #: the widest top lists computed so far, by kind (``"dense"``, ``"bm25"``, and their tensor forms)
        self._lists: dict[str, tuple[Any, Any]] = {}
        self._cosine: np.ndarray | None = None
        self._on_device: dict[str, Any] = {}

    def __len__(self) -> int:
        return len(self.Q)

    def _require_texts(self) -> list[str]:
        if self.texts is None:
            raise InputError("this search needs the query texts (query_texts=...)")
        return self.texts

    @property
    def tokens(self) -> list[list[str]]:
        """The questions' BM25 tokens."""
        if self._tokens is None:
            self._tokens = self.components.bm25().tokenize(self._require_texts())
        return self._tokens

    def dense_topk(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Dense top-``k`` (a longer list computed earlier in the batch is sliced). Where the graph
        store holds X on its device (:meth:`dense_on_device`): :meth:`dense_topk_tensors` brought
        back once (the two forms share one list)."""
        if self.dense_on_device() is None:
            return self._top_list("dense", k, lambda k: self.components.dense.topk(self.Q, k, self.allowed))
        return self._top_list("dense", k, lambda k: self._brought_back("dense tensors", self.dense_topk_tensors, k))

    def _top_list(self, kind: str, k: int, compute: Any) -> tuple[Any, Any]:
        """The top-``k`` list ``kind`` of this batch, ``(ids, scores)``: a longer one computed earlier
        is sliced, else ``compute(k)`` is kept for the batch."""
        held = self._lists.get(kind)
        if held is None or held[0].shape[1] < k:
            held = self._lists[kind] = compute(k)
        return held[0][:, :k], held[1][:, :k]

    def _brought_back(self, kind: str, compute: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The device list ``kind`` made at least ``k`` wide (``compute(k)``) and brought to the host
        whole (two crossings), so that a narrower or equal host request never crosses again."""
        from ...kernels.tensors import as_numpy

        compute(k)
        ids, scores = self._lists[kind]
        return as_numpy(ids), as_numpy(scores)

    def _host_list_tensors(self, lists: tuple[np.ndarray, np.ndarray], kind: str) -> tuple[Any, Any]:
        """A top list made on the host, ``(ids, scores)``, as tensors on :attr:`device` (two crossings)."""
        from ...kernels.tensors import as_tensor

        ids, scores = lists
        return as_tensor(ids, device=self.device, name=f"{kind} ids"), as_tensor(scores, device=self.device,
                                                                                 name=f"{kind} scores")

    # ------------------------------------------------------------------ on the device
    @property
    def device(self) -> "torch.device | None":
        """The torch device where the index's graph store holds its arrays (a
        :class:`~hopgraph.engine.graphs.device_store.DeviceStore`), else None (the batch is
        searched on the host only)."""
        store = self.components.graphs
        return store.device if isinstance(store, DeviceStore) else None

    def _device_value(self, key: str, make: Any) -> Any:
        """``make()``, computed once per batch and kept under ``key``."""
        if key not in self._on_device:
            self._on_device[key] = make()
        return self._on_device[key]

    def question_tensor(self) -> "torch.Tensor":
        """The question vectors Q as a float32 tensor on :attr:`device` (they go in once per batch)."""
        from ...kernels.tensors import as_tensor

        return self._device_value("Q", lambda: as_tensor(np.asarray(self.Q, np.float32), device=self.device,
                                                         name="questions"))

    def allowed_tensor(self) -> "torch.Tensor | None":
        """The batch's filter (bool [N]) on :attr:`device`, None without one (it goes in once per batch)."""
        from ...kernels.tensors import as_tensor

        if self.allowed is None:
            return None
        return self._device_value("allowed", lambda: as_tensor(self.allowed, device=self.device, name="filter"))

    def dense_on_device(self) -> "DeviceDenseSearch | None":
        """The exact search over X where the index's graph store holds X on its device
        (:class:`~hopgraph.engine.components.device_dense.DeviceDenseSearch`, X placed once), else
        None (no device store, or X refused by its budget: the host search answers)."""
        from .device_dense import DeviceDenseSearch

        if self.device is None:
            return None
        return self._device_value("dense search", lambda: DeviceDenseSearch.held(self.components.graphs,
                                                                                 self.components.X, "dense X"))

    def dense_topk_tensors(self, k: int) -> tuple["torch.Tensor", "torch.Tensor"]:
        """:meth:`dense_topk` as tensors on :attr:`device` (ids int64, scores float32): searched there
        from the held X (:meth:`dense_on_device`; the questions and the filter go in once per batch,
        nothing comes back), else the host lists made tensors."""
        search = self.dense_on_device()
        if search is None:
            return self._host_list_tensors(self.dense_topk(k), "dense")
        return self._top_list("dense tensors", k,
                              lambda k: search.topk_tensors(self.question_tensor(), k, self.allowed_tensor()))

    def _device_bm25(self) -> "tuple[DeviceBM25, DeviceQuery] | None":
        """The index's BM25 postings held on :attr:`device` with this batch's query side there
        (:mod:`.device_bm25`), made once per batch; None when the batch is searched on the host
        (no device store, a sharded BM25, postings over the store's budget)."""
        if self.device is None:
            return None

        def make() -> "tuple[DeviceBM25, DeviceQuery] | None":
            from .device_bm25 import DeviceBM25

            resident = DeviceBM25.of(self.components.bm25(), self.components.graphs)
            return None if resident is None else (resident, resident.query(self.tokens))
        return self._device_value("bm25", make)

    def lists_on_device(self) -> bool:
        """Whether a top list of this batch is searched on :attr:`device` (X or the BM25 postings held
        there): when neither is, fusing them there would only move both lists in and the result out."""
        return self.device is not None and (self.dense_on_device() is not None or self._device_bm25() is not None)

    def bm25_topk_tensors(self, k: int) -> tuple["torch.Tensor", "torch.Tensor"]:
        """:meth:`bm25_topk` as tensors on :attr:`device` (ids int64, scores float32): computed
        there from the held postings (:mod:`.device_bm25`; a longer earlier list is sliced), else
        the host lists made tensors."""
        resident = self._device_bm25()
        if resident is None:
            return self._host_list_tensors(self.bm25_topk(k), "bm25")
        return self._top_list("bm25 tensors", k, lambda k: resident[0].topk(resident[1], k, self.allowed_tensor()))

    def bm25_of_tensors(self, cand: "torch.Tensor") -> "torch.Tensor":
        """:meth:`bm25_of` of candidate rows on :attr:`device` (int [B, C], -1 = padding → 0):
        float32 [B, C] there, computed from the held postings (:mod:`.device_bm25`), else on the
        host (the candidates out, the scores in)."""
        from ...kernels.tensors import as_numpy, as_tensor

        resident = self._device_bm25()
        if resident is None:
            return as_tensor(self.bm25_of(as_numpy(cand)), device=self.device, name="bm25 scores")
        return resident[0].scores_at(resident[1], as_tensor(cand, device=self.device, name="candidates"))

    def dense_topk_of(self, Q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Dense top-``k`` of other query vectors (e.g. reformulated ones) under this batch's filter:
        on the device where X is held there (:meth:`dense_on_device`: ``Q`` goes in, the lists come
        back), else on the host."""
        search = self.dense_on_device()
        if search is None:
            return self.components.dense.topk(Q, k, self.allowed)
        return search.topk(Q, k, self.allowed_tensor())

    def mask_scores(self, scores: np.ndarray) -> np.ndarray:
        """``scores`` [B, N] with the rows this batch may not return set to -inf (in place)."""
        if self.allowed is not None:
            scores[:, ~self.allowed] = -np.inf
        return scores

    def mask_prior(self, p: np.ndarray) -> np.ndarray:
        """Non-negative weights [B, N] zeroed outside the allowed rows (in place): filtered or deleted
        passages never seed a walk or a diffusion."""
        if self.allowed is not None:
            p[:, ~self.allowed] = 0
        return p

    def bm25_topk(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """BM25 top-``k`` (zero-score hits are padding; a longer earlier list is sliced): on the
        device when the store holds the postings (:meth:`bm25_topk_tensors`, brought back), else on
        the host."""
        if self._device_bm25() is None:
            return self._top_list("bm25", k, lambda k: self.components.bm25().topk(self.tokens, k, self.allowed))
        return self._top_list("bm25", k, lambda k: self._brought_back("bm25 tensors", self.bm25_topk_tensors, k))

    def bm25_of(self, cand: np.ndarray) -> np.ndarray:
        """BM25 score of candidate rows ``cand`` [B, C] (-1 = padding → 0): read at the candidates
        only (:meth:`BM25Index.scores_at`; no ``[N]`` score row per question)."""
        return self.components.bm25().scores_at_batch(self.tokens, cand)

    def cosine(self) -> np.ndarray:
        """``Q @ X.T`` [B, N] float32 (kept for the batch when it is small enough)."""
        if self._cosine is not None:
            return self._cosine
        sims = (self.Q @ np.asarray(self.components.X).T).astype(np.float32, copy=False)
        if sims.size <= COSINE_CACHE_BUDGET:
            self._cosine = sims
        return sims


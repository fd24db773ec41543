"""Any function ``f(list[str]) -> array [n, dim]`` as an embedder."""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ..errors import InputError
from .protocol import batches, validate_embeddings


class CallableEmbedder:
    """Wrap any ``f(list[str]) -> array [n, dim]`` as an embedder.

    ``fn`` is called once per batch of ``batch_size`` texts (the constructor's ``batch_size``,
    else the one given to :meth:`encode`), never on the whole corpus at once; each batch's output
    is checked (2-D, one row per text, the dimension, NaN/inf, zero rows) with an error naming
    the batch and its texts. ``dim`` None: learnt from one probe call. ``progress=True`` shows a
    tqdm bar over the batches. The manifest records ``callable:NAME``: a callable cannot be
    re-created from it, so loading such an index needs ``Index.load(..., embedder=fn)``. Raises
    :class:`InputError` for a non-callable ``fn``, a bad ``batch_size`` or a bad output.
    """

    def __init__(self, fn: Callable[[list[str]], np.ndarray], name: str | None = None, dim: int | None = None,
                 batch_size: int | None = None) -> None:
        if not callable(fn):
            raise InputError(f"CallableEmbedder: fn must be callable, got {type(fn).__name__}")
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                                       or batch_size < 1):
            raise InputError(f"CallableEmbedder: batch_size must be a positive integer, got {batch_size!r}")
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "callable")
        self.batch_size = batch_size
        if dim is None:
            probe = np.asarray(fn(["dimension probe"]))
            if probe.ndim != 2 or probe.shape[0] != 1:
                raise InputError(f"embedder {self.name!r}: the dimension probe (1 text) returned shape "
                                 f"{probe.shape}, expected [1, dim]")
            dim = int(probe.shape[1])
        self.dim = int(dim)
        self.spec = f"callable:{self.name}"

    def encode(self, texts: Sequence[str], batch_size: int = 64, progress: bool = False) -> np.ndarray:
        """Embed ``texts`` batch by batch (see the class docstring): float32 ``[len(texts), dim]``."""
        texts = list(texts)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        size = self.batch_size or batch_size
        for b, lo in enumerate(batches(len(texts), size, progress, f"embed ({self.name})")):
            batch = texts[lo:lo + size]
            what = f"embedder {self.name!r} output for batch {b} (texts {lo}..{lo + len(batch) - 1})"
            try:
                X = np.asarray(self.fn(batch))
            except InputError:
                raise
            except (ValueError, TypeError) as e:
                raise InputError(f"{what}: could not be read as an array: {e}") from None
            if X.ndim != 2 or X.shape[0] != len(batch):
                rows = X.shape[0] if X.ndim else 0
                raise InputError(f"{what}: returned {rows} rows for {len(batch)} texts (shape {X.shape}, "
                                 f"expected [{len(batch)}, {self.dim}])")
            out[lo:lo + len(batch)] = validate_embeddings(X, what, self.dim)
        return out

"""A stand-in for how MKL's sparse × dense product rounds on other CPUs, for the PPR tests.

On an Intel CPU with AVX-512, MKL's CSR × dense block takes another kernel for blocks 4 to 24
columns wide than for other widths (and fused multiply-adds that never match scipy's row sums), so
the same column of the same walk rounds differently with the width of the block it is in. This
machine's MKL may not do that; :func:`width_dependent_addmm` does it on any CPU: blocks of
:data:`WIDTHS` columns get each row's sum in another order (its entries summed last to first, by
scipy), other widths torch's product. Tests that compare paths or batches run under it as well as under the native product,
so their tolerances are shown to cover width-dependent rounding wherever they run.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch

#: block widths whose product is computed the other way
WIDTHS = range(4, 25)


def _scipy_csr(A: torch.Tensor) -> sp.csr_matrix:
    return sp.csr_matrix((A.values().numpy(), A.col_indices().numpy(), A.crow_indices().numpy()), shape=A.shape)


def _reversed_rows(A: sp.csr_matrix) -> sp.csr_matrix:
    """The same matrix with each row's entries stored last to first (scipy sums them in stored order)."""
    row = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    pos = np.arange(A.nnz)
    rev = A.indptr[row] + A.indptr[row + 1] - 1 - pos
    return sp.csr_matrix((A.data[rev], A.indices[rev], A.indptr), shape=A.shape)


def width_dependent_addmm(c: torch.Tensor, A: torch.Tensor, x: torch.Tensor, out: torch.Tensor) -> None:
    """``out = c + A x`` (the signature of ``batched_ppr.sparse_addmm``), rounded another way for
    blocks of :data:`WIDTHS` columns."""
    if x.shape[1] not in WIDTHS:
        torch.addmm(c, A, x, out=out)
        return
    out.copy_(torch.from_numpy(_reversed_rows(_scipy_csr(A)) @ x.numpy() + c.numpy()))


def install(monkeypatch) -> None:
    """Make ``batched_ppr``'s CPU product :func:`width_dependent_addmm` for the rest of the test."""
    import importlib

    monkeypatch.setattr(importlib.import_module("hopgraph.kernels.batched_ppr"), "sparse_addmm",
                        width_dependent_addmm)

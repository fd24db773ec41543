"""STITCH's activation (SPEC §2 step 1) from the description texts nearest each question: the threshold
δ_q and the expansion of the texts that pass it into the states they describe (the text → states
CSR), as the activated ``(row, state, A)`` triples the influence stage reads.

:func:`activated` runs on the host (NumPy) on the description lists the text index returns;
:func:`activated_tensors` is the same arithmetic in the same order on torch, on the lists searched
on the device and the CSR the index's graph store holds there, so that the triples stay there
(:func:`~.device_influence.influence_tensors`). Both threshold in float32 and list the triples row
after row, texts in their list's order, states in CSR order: on equal lists they are equal.
"""
from __future__ import annotations

import numpy as np
import torch

from ...sparse import row_entries, row_positions_tensors

#: the smallest best similarity a relative threshold scales (a question whose best is below it)
MIN_BEST = 1e-6


def activated(ids: np.ndarray, sims: np.ndarray, text_indptr: np.ndarray, text_nodes: np.ndarray, delta: float,
              delta_mode: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The activated ``(row, state, A)`` of description lists ``ids`` / ``sims`` [B, depth] (-1 =
    padding, best first): a listed text at or above δ_q (``delta_mode`` ``"relative"``:
    ``delta · max(best, MIN_BEST)``, ``"absolute"``: ``delta``) and above 0 activates each of its
    states (``text_indptr`` / ``text_nodes``) with its similarity."""
    if delta_mode == "relative":
        thr = delta * np.maximum(sims[:, :1], MIN_BEST)
    else:
        thr = np.float32(delta)
    hit = (ids >= 0) & (sims >= thr) & (sims > 0)
    qb, text_seg = np.nonzero(hit)
    seg, nodes = row_entries(text_indptr, text_nodes, ids[qb, text_seg])
    return qb[seg], nodes, sims[qb, text_seg][seg]


def activated_tensors(ids: torch.Tensor, sims: torch.Tensor, text_indptr: torch.Tensor, text_nodes: torch.Tensor,
                      delta: float, delta_mode: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`activated` on tensors (one device): the lists ``ids`` (int64) / ``sims`` (float32) and
    the held text → states CSR; the triples (int64, int64, float32) stay on that device."""
    if delta_mode == "relative":
        thr = delta * sims[:, :1].clamp_min(MIN_BEST)
    else:
        thr = torch.tensor(delta, dtype=torch.float32, device=sims.device)
    hit = (ids >= 0) & (sims >= thr) & (sims > 0)
    qb, text_seg = torch.nonzero(hit, as_tuple=True)
    seg, pos = row_positions_tensors(text_indptr, ids[qb, text_seg])
    return qb[seg], text_nodes[pos].to(torch.int64), sims[qb, text_seg][seg]

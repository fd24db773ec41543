"""Row-wise helpers of DMAR's ranking (SPEC §3 steps 2 and 6): z-scores within a candidate set,
ids repeated within a row dropped."""
from __future__ import annotations

import numpy as np

from ...ranking import PAD_ID


def zscore(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Row-wise z-scores over the entries where ``mask`` holds; 0 elsewhere and for flat rows."""
    m = mask.astype(np.float64)
    cnt = np.maximum(m.sum(1, keepdims=True), 1)
    v = np.where(mask, values, 0.0).astype(np.float64)
    mean = v.sum(1, keepdims=True) / cnt
    std = np.sqrt((np.where(mask, (v - mean) ** 2, 0.0)).sum(1, keepdims=True) / cnt)
    z = np.where(std > 1e-9, (v - mean) / np.maximum(std, 1e-9), 0.0)
    return np.where(mask, z, 0.0).astype(np.float32)


def dedupe_rows(ids: np.ndarray) -> np.ndarray:
    """Replace repeated ids within a row (after the first) by padding -1."""
    order = np.argsort(ids, axis=1, kind="stable")
    s = np.take_along_axis(ids, order, 1)
    dup_sorted = np.zeros_like(s, bool)
    dup_sorted[:, 1:] = (s[:, 1:] == s[:, :-1]) & (s[:, 1:] >= 0)
    dup = np.zeros_like(dup_sorted)
    np.put_along_axis(dup, order, dup_sorted, 1)
    return np.where(dup, PAD_ID, ids)

"""DMAR's adaptive fusion gate (SPEC §3 step 2).

``[α, β] = softmax(MLP([f(Q); f(D)]))`` with two hidden layers of 32 units and ReLU.
The output layer starts at zero, so an untrained gate gives α = β = 1/2 exactly.

Training (:func:`train_gate`, used by ``hopgraph train-gate``): questions with gold
passages; for each question, its stage-1 candidates with their z-scored semantic and
structural scores. The loss is the listwise softmax cross-entropy of the fused scores
``α z_sem + β z_struct`` against the uniform distribution over the gold candidates
(questions with no gold candidate are skipped). A fixed ``offset`` (DMAR's optional lexical
term) is added to the fused scores. AdamW (weight decay against over-fitting the few
questions a user has), seeded, full batch; defaults 200 epochs, lr 1e-3, weight decay 1e-2.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch
from torch import nn

from ...errors import InputError
from .adam import Adam
from .gnn import finite_weights


class Gate(nn.Module):
    """The gating MLP: ``[f(Q); f(D)]`` (2d) → 32 → 32 → 2 logits."""

    def __init__(self, dim: int, hidden: int = 32) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(2 * dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, 2))
        nn.init.zeros_(self.mlp[-1].weight)
        nn.init.zeros_(self.mlp[-1].bias)
        self.trained = False

    def forward(self, q: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        """``q`` [B, dim], ``d`` [B, C, dim] → weights [B, C, 2] (α, β)."""
        qd = torch.cat([q[:, None, :].expand(-1, d.shape[1], -1), d], dim=-1)
        return torch.softmax(self.mlp(qd), dim=-1)

    @torch.no_grad()
    def weights(self, q: np.ndarray, d: np.ndarray) -> np.ndarray:
        """numpy wrapper of :meth:`forward` (float32 [B, C, 2])."""
        return self(torch.from_numpy(np.ascontiguousarray(q, np.float32)),
                    torch.from_numpy(np.ascontiguousarray(d, np.float32))).numpy()

    def arrays(self) -> dict[str, np.ndarray]:
        """The weights (``gate.NAME`` float32) and the trained flag, for the index's arrays."""
        out = {f"gate.{k}": v.detach().numpy().astype(np.float32) for k, v in self.state_dict().items()}
        out["gate.trained"] = np.asarray([int(self.trained)], np.int64)
        return out

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> "Gate":
        """The gate :meth:`arrays` wrote; :class:`InputError` for missing or non-finite weights."""
        state = {k[5:]: torch.from_numpy(finite_weights(k, v)) for k, v in arrays.items()
                 if k.startswith("gate.") and k != "gate.trained"}
        if "mlp.0.weight" not in state:
            raise InputError("no gate weights found")
        gate = cls(state["mlp.0.weight"].shape[1] // 2, state["mlp.0.weight"].shape[0])
        gate.load_state_dict(state)
        trained = np.asarray(arrays.get("gate.trained", [0]))
        if trained.shape != (1,) or trained.dtype.kind not in "iu" or int(trained[0]) not in (0, 1):
            raise InputError("stored gate.trained must be one 0/1 integer")
        gate.trained = bool(trained[0])
        gate.eval()
        return gate


def train_gate(gate: Gate, q: np.ndarray, d: np.ndarray, z_sem: np.ndarray, z_struct: np.ndarray,
               gold: np.ndarray, valid: np.ndarray, offset: np.ndarray | None = None, epochs: int = 200,
               lr: float = 1e-3, weight_decay: float = 1e-2, seed: int = 0,
               log: Callable[[str], None] | None = None) -> list[float]:
    """Fit the gate (module docstring). Shapes: q [B, dim], d [B, C, dim], z_* / gold / valid [B, C]."""
    if not (q.ndim == 2 and d.ndim == 3 and z_sem.shape == z_struct.shape == gold.shape == valid.shape == d.shape[:2]):
        raise InputError("train_gate: q [B, dim], d [B, C, dim] and z_sem/z_struct/gold/valid [B, C] expected")
    has_gold = (gold & valid).any(1)
    if not has_gold.any():
        raise InputError("train_gate: no question has a gold passage among its candidates")
    torch.manual_seed(seed)
    t = lambda a, dt=torch.float32: torch.from_numpy(np.ascontiguousarray(a[has_gold])).to(dt)  # noqa: E731
    Q, D, zs, zt, G, V = t(q), t(d), t(z_sem), t(z_struct), t(gold & valid), t(valid, torch.bool)
    off = t(offset) if offset is not None else torch.zeros_like(zs)
    target = G / G.sum(1, keepdim=True)
    opt = Adam(gate.parameters(), lr=lr, weight_decay=weight_decay, decoupled=True)  # AdamW
    losses = []
    gate.train()
    for epoch in range(epochs):
        w = gate(Q, D)
        fused = w[..., 0] * zs + w[..., 1] * zt + off
        logp = torch.log_softmax(fused.masked_fill(~V, -1e4), dim=1)
        loss = -(target * logp).sum(1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        if log is not None and (epoch + 1) % max(epochs // 5, 1) == 0:
            log(f"epoch {epoch + 1}/{epochs}: listwise loss {losses[-1]:.4f}")
    gate.eval()
    gate.trained = True
    return losses

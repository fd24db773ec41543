"""Adam / AdamW for DMAR's small networks (the GNN's pre-training, the gate) by torch's own update.

:class:`Adam` keeps the optimiser state as ``torch.optim.Adam`` (``AdamW`` with ``decoupled=True``)
does — per parameter a step count and the two moment buffers, created at the first step that
parameter has a gradient — and runs torch's functional update ``torch.optim.adam.adam`` with the
arguments ``Adam.step`` passes, so every step leaves the same bits as ``torch.optim.Adam`` / ``AdamW``.
What it leaves out is ``torch.optim.Optimizer``, whose constructor, ``zero_grad`` and ``state_dict``
are wrapped by ``torch._disable_dynamo``: their first call imports ``torch._dynamo`` (and with it
sympy, triton and torch.distributed), a fixed cost of every process that trains, larger than the
training of these networks at a small corpus (``docs/decisions/one-forward-pass-per-passage.md``).
"""
from __future__ import annotations

import inspect
from typing import Callable, Iterable

import torch
from torch.optim.adam import adam
from torch.optim.adamw import adamw


class Adam:
    """``torch.optim.Adam(params, lr, betas, eps, weight_decay)`` (or ``AdamW`` with ``decoupled``)
    at torch's other defaults (no amsgrad, not maximising, no capturable / differentiable / fused,
    foreach chosen by torch as for the class): :meth:`zero_grad` and :meth:`step` as there."""

    def __init__(self, params: Iterable[torch.Tensor], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, decoupled: bool = False) -> None:
        self.params = list(params)
        if not self.params:
            raise ValueError("optimizer got an empty parameter list")
        self.lr, self.betas, self.eps = float(lr), (float(betas[0]), float(betas[1])), float(eps)
        self.weight_decay, self.decoupled = float(weight_decay), bool(decoupled)
        #: per parameter (by position): step count (float32 scalar), first and second moments
        self.state: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def zero_grad(self) -> None:
        """Drop every gradient (``zero_grad(set_to_none=True)``, torch's default)."""
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        """One Adam step of the parameters that have a gradient (state created on their first)."""
        params, grads, avgs, sq_avgs, steps = [], [], [], [], []
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            if p.grad.is_sparse or torch.is_complex(p):
                raise ValueError("Adam here takes dense real parameters only")
            if i not in self.state:
                self.state[i] = (torch.tensor(0.0, dtype=_scalar_dtype()),
                                 torch.zeros_like(p, memory_format=torch.preserve_format),
                                 torch.zeros_like(p, memory_format=torch.preserve_format))
            step, avg, sq_avg = self.state[i]
            params.append(p)
            grads.append(p.grad)
            avgs.append(avg)
            sq_avgs.append(sq_avg)
            steps.append(step)
        if params:
            update, decoupling = _functional_update(self.decoupled)
            update(params, grads, avgs, sq_avgs, [], steps, foreach=None, capturable=False, differentiable=False,
                   fused=None, grad_scale=None, found_inf=None, has_complex=False, amsgrad=False,
                   beta1=self.betas[0], beta2=self.betas[1], lr=self.lr, weight_decay=self.weight_decay,
                   eps=self.eps, maximize=False, **decoupling)


def _functional_update(decoupled: bool) -> tuple[Callable[..., None], dict[str, bool]]:
    """torch's functional update and its decoupling argument: ``adam(..., decoupled_weight_decay=)``
    where torch's ``adam`` takes it (AdamW is Adam with that switch in recent torch); in an older torch
    of the supported range, ``adam`` for Adam and ``adamw`` (the function ``AdamW.step`` calls there)
    for AdamW."""
    if "decoupled_weight_decay" in inspect.signature(adam).parameters:
        return adam, {"decoupled_weight_decay": decoupled}
    return (adamw if decoupled else adam), {}


def _scalar_dtype() -> torch.dtype:
    """The dtype of torch's step counters (``torch.optim.optimizer._get_scalar_dtype``)."""
    return torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32

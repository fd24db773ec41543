"""DMAR's optimiser: the same parameters, bit for bit, as torch.optim.Adam / AdamW, without
importing torch._dynamo."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch import nn

from hopgraph.engine.pipelines.dmar.adam import Adam
from hopgraph.engine.pipelines.dmar.gate import Gate


def _net(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(7, 5), nn.ReLU(), nn.Linear(5, 3), nn.Linear(3, 2, bias=False))


def _train(net: nn.Module, opt, steps: int, freeze_last_from: int | None = None) -> list[float]:
    gen = torch.Generator().manual_seed(11)
    losses = []
    for step in range(steps):
        x = torch.randn(16, 7, generator=gen)
        out = net(x)
        if freeze_last_from is not None and step >= freeze_last_from:
            out = out.detach() + net[0](x).sum() * 0  # the last layers get no gradient from here on
        loss = (out ** 2).mean() + out.abs().max()
        opt.zero_grad()
        loss.backward()
        if freeze_last_from is not None and step >= freeze_last_from:
            for p in list(net[2].parameters()) + list(net[3].parameters()):
                p.grad = None
        opt.step()
        losses.append(float(loss.detach()))
    return losses


@pytest.mark.parametrize("kind", ["adam", "adamw"])
@pytest.mark.parametrize("freeze", [None, 3])
def test_same_bits_as_torch_optim(kind: str, freeze: int | None) -> None:
    """Ten steps (some with parameters that have no gradient): every parameter and loss identical."""
    ours_net, ref_net = _net(5), _net(5)
    if kind == "adam":
        ours = Adam(ours_net.parameters(), lr=3e-2)
        ref = torch.optim.Adam(ref_net.parameters(), lr=3e-2)
    else:
        ours = Adam(ours_net.parameters(), lr=3e-2, weight_decay=0.1, decoupled=True)
        ref = torch.optim.AdamW(ref_net.parameters(), lr=3e-2, weight_decay=0.1)
    assert _train(ours_net, ours, 10, freeze) == _train(ref_net, ref, 10, freeze)
    for a, b in zip(ours_net.parameters(), ref_net.parameters()):
        assert torch.equal(a, b)
    for i, p in enumerate(ref_net.parameters()):
        if i in ours.state:
            step, avg, sq = ours.state[i]
            st = ref.state[p]
            assert torch.equal(step, st["step"]) and torch.equal(avg, st["exp_avg"]) \
                and torch.equal(sq, st["exp_avg_sq"])
        else:
            assert p not in ref.state


def test_gate_weights_move_with_weight_decay() -> None:
    """AdamW's decoupled decay shrinks a weight with a zero gradient (lr · wd a step)."""
    gate = Gate(4, 8)
    p = next(gate.parameters())
    before = p.detach().clone()
    opt = Adam([p], lr=0.1, weight_decay=0.5, decoupled=True)
    p.grad = torch.zeros_like(p)
    opt.step()
    assert torch.allclose(p.detach(), before * (1 - 0.1 * 0.5))


def test_empty_parameter_list_is_refused() -> None:
    with pytest.raises(ValueError, match="empty parameter list"):
        Adam([])


def test_gnn_pretraining_as_with_torch_optim(monkeypatch) -> None:
    """DMAR's GNN pre-training gives the same losses and weights as with torch.optim.Adam."""
    import numpy as np
    import scipy.sparse as sp

    from hopgraph.engine.pipelines.dmar import gnn
    from hopgraph.engine.sparse import csr_from_scipy

    E = 40
    adj = sp.random(E, E, 0.1, "csr", random_state=1)
    adj = csr_from_scipy((adj + adj.T).tocsr())
    ego = csr_from_scipy((sp.random(E, E, 0.15, "csr", random_state=2) + sp.eye(E, format="csr")).tocsr())
    feats = np.random.default_rng(0).standard_normal((E, 8)).astype(np.float32)
    runs = []
    for opt in (None, torch.optim.Adam):
        if opt is not None:
            monkeypatch.setattr(gnn, "Adam", opt)
        torch.manual_seed(0)
        enc = gnn.SubgraphEncoder(8, hidden=16, d_out=8)
        runs.append((gnn.pretrain(enc, ego, adj, feats, steps=12, batch_size=16, seed=3), enc.state_dict()))
    assert runs[0][0] == runs[1][0]
    for key, value in runs[0][1].items():
        assert torch.equal(value, runs[1][1][key]), key


@pytest.mark.slow
def test_gnn_pretraining_does_not_import_dynamo() -> None:
    """A fresh process pre-training the GNN never imports torch._dynamo (nor triton, sympy)."""
    script = """
import sys
import numpy as np
import scipy.sparse as sp
from hopgraph.engine.pipelines.dmar import gnn
from hopgraph.engine.sparse import csr_from_scipy
E = 30
ego = csr_from_scipy((sp.random(E, E, 0.2, "csr", random_state=1) + sp.eye(E, format="csr")).tocsr())
enc = gnn.SubgraphEncoder(8)
feats = np.random.default_rng(0).standard_normal((E, 8)).astype(np.float32)
assert len(gnn.pretrain(enc, ego, ego, feats, steps=3, batch_size=8)) == 3
print(sorted(m for m in ("torch._dynamo", "triton", "sympy") if m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("kind", ["adam", "adamw"])
def test_same_bits_on_a_torch_whose_adam_has_no_decoupling(monkeypatch, kind: str) -> None:
    """An older torch of the supported range: ``adam`` without ``decoupled_weight_decay`` (AdamW by
    ``adamw``) — the same parameters as torch.optim's classes."""
    import hopgraph.engine.pipelines.dmar.adam as module
    from torch.optim.adam import adam as torch_adam

    def old_adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, foreach=None,
                 capturable=False, differentiable=False, fused=None, grad_scale=None, found_inf=None,
                 has_complex=False, *, amsgrad, beta1, beta2, lr, weight_decay, eps, maximize):
        torch_adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, foreach=foreach,
                   capturable=capturable, differentiable=differentiable, fused=fused, grad_scale=grad_scale,
                   found_inf=found_inf, has_complex=has_complex, amsgrad=amsgrad, beta1=beta1, beta2=beta2,
                   lr=lr, weight_decay=weight_decay, eps=eps, maximize=maximize)

    monkeypatch.setattr(module, "adam", old_adam)
    ours_net, ref_net = _net(6), _net(6)
    decoupled = kind == "adamw"
    ours = Adam(ours_net.parameters(), lr=3e-2, weight_decay=0.1, decoupled=decoupled)
    ref = (torch.optim.AdamW if decoupled else torch.optim.Adam)(ref_net.parameters(), lr=3e-2, weight_decay=0.1)
    assert _train(ours_net, ours, 6) == _train(ref_net, ref, 6)
    assert all(torch.equal(a, b) for a, b in zip(ours_net.parameters(), ref_net.parameters()))

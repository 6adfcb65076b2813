"""ResidualJointNCE: the loss against a row-by-row reference, its gradients against finite differences,
the three residual energies by hand, and the population optimum by enumeration on a tiny discrete case
(the residual energy reaches log p_N - log p_data, the softmax reaches p(y | x))."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor, nn

from ebms.objectives import RESIDUAL_ENERGIES, ResidualJointNCE, residual_energy
from ebms.sequences import Sequences


class Heads(nn.Module):
    """Linear logits and a linear scalar head on a vector input: ``joint(x) -> (W x + b, v^T x + c)``."""

    def __init__(self, d: int, k: int, dtype: torch.dtype = torch.float64, scalar: bool = True) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.W = nn.Parameter(torch.randn(k, d, generator=g, dtype=dtype))
        self.b = nn.Parameter(torch.randn(k, generator=g, dtype=dtype))
        self.v = nn.Parameter(torch.randn(d, generator=g, dtype=dtype))
        self.c = nn.Parameter(torch.randn((), generator=g, dtype=dtype))
        self.scalar = scalar

    def joint(self, x: Tensor) -> tuple[Tensor, Tensor | None]:
        return x @ self.W.T + self.b, (x @ self.v + self.c) if self.scalar else None


def _softplus(z: float) -> float:
    return max(z, 0.0) + math.log1p(math.exp(-abs(z)))


def _reference(model: Heads, x: Tensor, y: Tensor, noise: Tensor, kind: str, nu: int, lam: float) -> float:
    """The loss row by row in Python floats: mean CE + lam (mean softplus(E+ + log nu) + nu mean softplus(-E- - log nu))."""
    W, b, v, c = (t.detach().double().tolist() for t in (model.W, model.b, model.v, model.c))

    def heads(row: list[float]) -> tuple[list[float], float]:
        z = [sum(wi * xi for wi, xi in zip(w, row)) + bk for w, bk in zip(W, b)]
        return z, sum(vi * xi for vi, xi in zip(v, row)) + c

    def energy(row: list[float]) -> float:
        z, s = heads(row)
        m = max(z)
        return {"scalar": s, "hidden": -(m + math.log(sum(math.exp(t - m) for t in z))), "sharp_hidden": -m}[kind]

    ce = 0.0
    for row, label in zip(x.double().tolist(), y.tolist()):
        z, _ = heads(row)
        m = max(z)
        ce += (m + math.log(sum(math.exp(t - m) for t in z))) - z[label]
    ce /= len(y)
    pos = sum(_softplus(energy(r) + math.log(nu)) for r in x.double().tolist()) / x.shape[0]
    neg = sum(_softplus(-energy(r) - math.log(nu)) for r in noise.double().tolist()) / noise.shape[0]
    return ce + lam * (pos + nu * neg)


@pytest.mark.parametrize("kind", RESIDUAL_ENERGIES)
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 2e-6)])
@pytest.mark.parametrize("nu", [1, 3])
def test_loss_matches_row_by_row_reference(kind: str, dtype: torch.dtype, tol: float, nu: int) -> None:
    g = torch.Generator().manual_seed(1)
    B, d, k = 5, 4, 3
    model = Heads(d, k, dtype)
    x = torch.randn(B, d, generator=g, dtype=dtype) * 2
    noise = torch.randn(nu * B, d, generator=g, dtype=dtype) * 2
    y = torch.randint(0, k, (B,), generator=g)
    out = ResidualJointNCE(energy=kind, nu=nu, nce_weight=0.7)(model, (x, y, noise))
    ref = _reference(model, x, y, noise, kind, nu, 0.7)
    assert out.loss.dtype == dtype
    assert out.loss.item() == pytest.approx(ref, rel=tol, abs=tol)
    assert out.metrics["loss"] == pytest.approx(ref, rel=1e-6)
    assert out.metrics["ce"] + 0.7 * out.metrics["nce"] == pytest.approx(out.metrics["loss"], rel=1e-6)


@pytest.mark.parametrize("kind", RESIDUAL_ENERGIES)
def test_gradients_match_finite_differences(kind: str) -> None:
    g = torch.Generator().manual_seed(2)
    model = Heads(3, 4)
    x, noise = torch.randn(4, 3, generator=g, dtype=torch.float64), torch.randn(8, 3, generator=g, dtype=torch.float64)
    y = torch.tensor([0, 3, 1, 1])
    obj = ResidualJointNCE(energy=kind, nu=2)
    params = list(model.parameters())
    loss = obj(model, (x, y, noise)).loss
    grads = torch.autograd.grad(loss, params, allow_unused=True)
    assert (grads[2] is None) == (kind != "scalar")  # the scalar head only enters the scalar energy
    h = 1e-6
    for p, gr in zip(params, grads):
        gr = torch.zeros_like(p) if gr is None else gr
        flat = p.detach().reshape(-1)
        for i in range(flat.numel()):
            with torch.no_grad():
                old = float(flat[i])
                p.view(-1)[i] = old + h
                up = float(obj(model, (x, y, noise)).loss)
                p.view(-1)[i] = old - h
                down = float(obj(model, (x, y, noise)).loss)
                p.view(-1)[i] = old
            assert float(gr.reshape(-1)[i]) == pytest.approx((up - down) / (2 * h), abs=1e-7)


def test_residual_energies_by_hand() -> None:
    logits = torch.tensor([[0.0, math.log(3.0)], [2.0, -1.0], [-50.0, -50.0]], dtype=torch.float64)
    scalar = torch.tensor([0.5, -2.0, 7.0], dtype=torch.float64)
    assert residual_energy(logits, scalar, "hidden").tolist() == pytest.approx(
        [-math.log(4.0), -math.log(math.exp(2) + math.exp(-1)), 50.0 - math.log(2.0)], rel=1e-14)
    assert residual_energy(logits, scalar, "sharp_hidden").tolist() == [-math.log(3.0), -2.0, 50.0]
    assert residual_energy(logits, scalar, "scalar") is scalar
    assert residual_energy(logits, None, "hidden").tolist() == pytest.approx(
        (-torch.logsumexp(logits, 1)).tolist(), rel=1e-15)


def _population(p: list[float], denom: int) -> list[int]:
    """Rows whose empirical law is exactly ``p`` (every ``p[s] * denom`` an integer)."""
    counts = [round(q * denom) for q in p]
    assert all(abs(c - q * denom) < 1e-12 for c, q in zip(counts, p))
    return [s for s, c in enumerate(counts) for _ in range(c)]


class Table(nn.Module):
    """Tabular logits (S, K) and a tabular scalar energy (S,) over states 0 .. S-1 (inputs are one-hot)."""

    def __init__(self, s: int, k: int) -> None:
        super().__init__()
        self.logits_table = nn.Parameter(torch.zeros(s, k, dtype=torch.float64))
        self.energy_table = nn.Parameter(torch.zeros(s, dtype=torch.float64))

    def joint(self, x: Tensor) -> tuple[Tensor, Tensor]:
        return x @ self.logits_table, x @ self.energy_table


@pytest.mark.parametrize("kind", RESIDUAL_ENERGIES)
@pytest.mark.parametrize("nu", [1, 2])
def test_population_optimum_by_enumeration(kind: str, nu: int) -> None:
    """With the data and noise rows spelling p_data and p_N exactly, the minimiser of the objective is
    E(x) = log p_N(x) - log p_data(x) (NCE) and softmax f(x) = p(y | x) (CE)."""
    p_data, p_noise = [0.5, 0.25, 0.25], [0.125, 0.375, 0.5]
    xs = _population(p_data, 8)                       # 4, 2, 2 rows
    labels = [0, 0, 0, 1, 1, 2, 0, 2]                  # p(y | x=0) = (3/4, 1/4, 0) ...
    p_y = {0: [0.75, 0.25], 1: [0.5, 0.5], 2: [0.5, 0.5]}
    classes = {0: [0, 1], 1: [1, 2], 2: [0, 2]}
    ns = _population(p_noise, 8 * nu)
    eye = torch.eye(3, dtype=torch.float64)
    x, noise, y = eye[xs], eye[ns], torch.tensor(labels)
    model = Table(3, 3)
    # the impossible class of each state would want logit -inf; keep it out by a fixed large negative mask
    mask = torch.full((3, 3), -60.0, dtype=torch.float64)
    for s, ks in classes.items():
        mask[s, ks] = 0.0

    class Masked(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.table = model

        def joint(self, inp: Tensor) -> tuple[Tensor, Tensor]:
            z, e = self.table.joint(inp)
            return z + inp @ mask, e

    net, obj = Masked(), ResidualJointNCE(energy=kind, nu=nu)
    opt = torch.optim.LBFGS(model.parameters(), lr=1, max_iter=300, tolerance_grad=1e-12, tolerance_change=1e-14,
                            line_search_fn="strong_wolfe")

    def closure() -> Tensor:
        opt.zero_grad()
        loss = obj(net, (x, y, noise)).loss
        loss.backward()
        return loss

    for _ in range(2):
        opt.step(closure)
    with torch.no_grad():
        logits, scalar = net.joint(eye)
        e = residual_energy(logits, scalar, kind)
        want = torch.tensor([math.log(q) - math.log(p) for p, q in zip(p_data, p_noise)], dtype=torch.float64)
        # sharp_hidden: -max f(x) is the energy; same optimum
        assert e.tolist() == pytest.approx(want.tolist(), abs=1e-5)
        probs = logits.softmax(1)
        for s, ks in classes.items():
            assert probs[s, ks].tolist() == pytest.approx(p_y[s], abs=1e-5)


def test_pack_gives_the_same_loss_and_sequences_share_one_pass() -> None:
    calls: list[int] = []

    class Bag(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(6, 3)
            self.scal = nn.Embedding(6, 1)

        def joint(self, s: Sequences) -> tuple[Tensor, Tensor]:
            calls.append(s.batch_size)
            m = s.mask().unsqueeze(-1).float()
            return (self.emb(s.tokens) * m).sum(1), (self.scal(s.tokens) * m).sum((1, 2))

    torch.manual_seed(0)
    model = Bag()
    x = Sequences.from_lists([[1, 2], [3], [4, 5, 1]])
    noise = Sequences.from_lists([[1, 1], [2, 2], [3, 4], [5, 5, 5], [1], [2, 3, 4]])
    y = torch.tensor([0, 2, 1])
    obj = ResidualJointNCE(energy="scalar", nu=2)
    a = obj(model, (x, y, noise))
    b = obj(model, ResidualJointNCE.pack(x, y, noise))
    assert calls == [9, 9]
    assert a.loss.item() == b.loss.item()
    assert set(a.metrics) == {"loss", "ce", "nce", "acc", "e_pos", "e_neg", "gap", "nce_acc"}


def test_bad_inputs_are_named() -> None:
    model = Heads(2, 3)
    x, y = torch.zeros(2, 2, dtype=torch.float64), torch.tensor([0, 1])
    with pytest.raises(ValueError, match="energy"):
        ResidualJointNCE(energy="sharp")
    with pytest.raises(ValueError, match="nu"):
        ResidualJointNCE(nu=0)
    with pytest.raises(ValueError, match="nce_weight"):
        ResidualJointNCE(nce_weight=0)
    with pytest.raises(ValueError, match=r"noise: expected nu \* B = 2 \* 2 = 4 rows"):
        ResidualJointNCE(nu=2)(model, (x, y, torch.zeros(3, 2, dtype=torch.float64)))
    with pytest.raises(ValueError, match=r"y: expected labels in \[0, 2\]"):
        ResidualJointNCE()(model, (x, torch.tensor([0, 3]), x))
    with pytest.raises(ValueError, match="y: expected a LongTensor"):
        ResidualJointNCE()(model, (x, torch.tensor([0.0, 1.0]), x))
    with pytest.raises(ValueError, match="scalar head"):
        ResidualJointNCE(energy="scalar")(Heads(2, 3, scalar=False), (x, y, x))
    with pytest.raises(TypeError, match="batch"):
        ResidualJointNCE()(model, (x, y))
    with pytest.raises(TypeError, match="model"):
        ResidualJointNCE()(object(), (x, y, x))

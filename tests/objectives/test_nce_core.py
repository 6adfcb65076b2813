"""Tests for the logistic NCE core (ebms.objectives.nce_logits / nce_loss) and its two users.

The core is checked against values written out by hand and by finite differences (gradcheck) for
each form of log Z; NCE and ConditionalNCE are checked against the formulas they used before the
core existed, written inline here (ConditionalNCE bit for bit, NCE to float64 rounding: the core
subtracts log nu before log q, NCE subtracted it after).
"""

from __future__ import annotations

import math
import re

import pytest
import torch
from torch import nn

from ebms._numerics import softplus
from ebms.distributions import NGram
from ebms.nets import GaussianEnergy
from ebms.objectives import NCE, ConditionalNCE, GaussianNoise, TagBigramNoise, nce_logits, nce_loss
from ebms.sequences import Sequences
from ebms.structured.linear_chain import LinearChainCRF


def _sp(t: float) -> float:
    """log(1 + e^t), exactly."""
    return max(t, 0.0) + math.log1p(math.exp(-abs(t)))


def _d(*xs: float) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.float64)


# --- hand-computed values --------------------------------------------------------------------


def test_scalar_log_z_loss_equals_the_hand_computed_value():
    # two data points, nu = 2 -> four noise points; every term written out
    lm_d, lq_d = [0.5, -1.0], [-0.2, 0.3]
    lm_n, lq_n = [0.1, -0.4, 2.0, 0.0], [-1.5, 0.2, -0.7, 0.4]
    zeta, nu = 0.7, 2.0
    g_d = [m - zeta - math.log(nu) - q for m, q in zip(lm_d, lq_d)]
    g_n = [m - zeta - math.log(nu) - q for m, q in zip(lm_n, lq_n)]
    want = sum(_sp(-g) for g in g_d) / 2 + nu * sum(_sp(g) for g in g_n) / 4
    gd = nce_logits(_d(*lm_d), _d(*lq_d), nu=nu, log_z=zeta)
    gn = nce_logits(_d(*lm_n), _d(*lq_n), nu=nu, log_z=torch.tensor(zeta, dtype=torch.float64))
    assert gd.tolist() == pytest.approx(g_d, abs=1e-15) and gn.tolist() == pytest.approx(g_n, abs=1e-15)
    assert float(nce_loss(gd, gn, nu=nu)) == pytest.approx(want, rel=1e-15)
    # the "sum" reduction is B times the mean form when N = nu * B
    assert float(nce_loss(gd, gn, nu=nu, reduction="sum")) == pytest.approx(2 * want, rel=1e-15)


def test_self_normalised_logits_subtract_no_log_z():
    g = nce_logits(_d(1.0, 2.0), _d(-0.5, 0.25), nu=3)
    assert g.tolist() == pytest.approx([1.0 - math.log(3) + 0.5, 2.0 - math.log(3) - 0.25], abs=1e-15)


def test_per_length_log_z_reads_each_samples_row_of_the_table():
    table = _d(0.0, 0.3, -1.2, 2.5)  # log Z_l for l = 0..3
    lm, lq, lengths = _d(0.4, -0.1, 1.0), _d(0.0, 0.5, -0.3), torch.tensor([3, 1, 2])
    g = nce_logits(lm, lq, nu=1.5, log_z=table, lengths=lengths)
    want = [m - float(table[n]) - math.log(1.5) - q for m, q, n in zip(lm.tolist(), lq.tolist(), lengths.tolist())]
    assert g.tolist() == pytest.approx(want, abs=1e-15)


def test_per_condition_log_z_is_aligned_with_the_batch_for_data_and_noise():
    zeta = _d(0.5, -1.0, 2.0)  # one log Z per condition (B = 3)
    lm_d, lq_d = _d(1.0, 0.0, -1.0), _d(0.1, 0.2, 0.3)
    lm_n, lq_n = _d(0.0, 1.0, 2.0, 3.0, 4.0, 5.0).view(2, 3), torch.zeros(2, 3, dtype=torch.float64)  # K = 2 draws
    gd = nce_logits(lm_d, lq_d, nu=2, log_z=zeta)
    gn = nce_logits(lm_n, lq_n, nu=2, log_z=zeta)
    assert gd.tolist() == pytest.approx([1.0 - 0.5 - math.log(2) - 0.1, 0.0 + 1.0 - math.log(2) - 0.2,
                                         -1.0 - 2.0 - math.log(2) - 0.3], abs=1e-15)
    assert gn[1].tolist() == pytest.approx([3.0 - 0.5 - math.log(2), 4.0 + 1.0 - math.log(2), 5.0 - 2.0 - math.log(2)],
                                           abs=1e-15)


def test_exact_softplus_keeps_terms_beyond_the_cutoff():
    # logits of +-30: torch's softplus (identity above 20) would drop e^-30 from each term
    gd, gn = _d(30.0), _d(30.0)
    assert float(nce_loss(gd, gn, nu=1)) == pytest.approx(_sp(-30.0) + _sp(30.0), rel=1e-15)


# --- finite differences ----------------------------------------------------------------------


@pytest.mark.parametrize("form", ["none", "scalar", "per_length", "per_condition"])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_loss_gradient_matches_finite_differences(form, reduction):
    g = torch.Generator().manual_seed(0)
    b, k, nu = 4, 2, 2
    lm_d, lq_d = torch.randn(b, generator=g, dtype=torch.float64), torch.randn(b, generator=g, dtype=torch.float64)
    lm_n, lq_n = (torch.randn(k, b, generator=g, dtype=torch.float64) for _ in range(2))
    len_d, len_n = torch.randint(0, 4, (b,), generator=g), torch.randint(0, 4, (k, b), generator=g)
    z = {"none": None, "scalar": torch.tensor(0.3, dtype=torch.float64), "per_length": _d(0.1, -0.4, 0.9, 0.2),
         "per_condition": torch.randn(b, generator=g, dtype=torch.float64)}[form]
    lens = (len_d, len_n) if form == "per_length" else (None, None)

    def f(lm_d, lm_n, *zs):
        zz = zs[0] if zs else None
        gd = nce_logits(lm_d, lq_d, nu=nu, log_z=zz, lengths=lens[0])
        gn = nce_logits(lm_n, lq_n, nu=nu, log_z=zz, lengths=lens[1])
        return nce_loss(gd, gn, nu=nu, reduction=reduction)

    inputs = [lm_d.requires_grad_(), lm_n.requires_grad_()] + ([] if z is None else [z.requires_grad_()])
    assert torch.autograd.gradcheck(f, tuple(inputs))


def test_gradient_in_the_logits_is_the_classifier_residual():
    # d/dG_data = -sigmoid(-G) / B, d/dG_noise = nu sigmoid(G) / N
    gd, gn = _d(0.3, -2.0).requires_grad_(), _d(1.0, 0.5, -0.25).requires_grad_()
    nce_loss(gd, gn, nu=1.5).backward()
    torch.testing.assert_close(gd.grad, -torch.sigmoid(-gd.detach()) / 2, rtol=1e-14, atol=0)
    torch.testing.assert_close(gn.grad, 1.5 * torch.sigmoid(gn.detach()) / 3, rtol=1e-14, atol=0)


# --- validation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"log_noise": _d(1.0)}, ValueError, "log_noise: expected the shape of log_model (2,); got (1,)"),
        ({"log_model": torch.zeros(2, dtype=torch.long)}, TypeError, "log_model: expected a floating-point tensor"),
        ({"nu": 0}, ValueError, "nu: expected"),
        ({"log_z": _d(1.0, 2.0, 3.0)}, ValueError, "log_z: expected a scalar, a table with lengths=, or one value "
                                                   "per condition"),
        ({"log_z": torch.tensor([1, 2])}, TypeError, "log_z: expected a floating-point tensor; got dtype torch.int64"),
        ({"log_z": "zero"}, TypeError, "log_z: expected None, a number or a tensor; got str"),
        ({"lengths": torch.tensor([1, 2])}, ValueError, "lengths: index a per-length log_z table"),
        ({"log_z": 0.5, "lengths": torch.tensor([1, 2])}, ValueError, "lengths: index a per-length log_z table"),
        ({"log_z": _d(0.0, 1.0), "lengths": torch.tensor([1, 2])}, ValueError,
         "lengths: expected values in [0, 1] (the rows of log_z); got min 1, max 2"),
        ({"log_z": _d(0.0, 1.0, 2.0), "lengths": torch.tensor([1.0, 2.0])}, TypeError,
         "lengths: expected an integer tensor"),
        ({"log_z": _d(0.0, 1.0, 2.0), "lengths": torch.tensor([1])}, ValueError,
         "lengths: expected the shape of log_model (2,); got (1,)"),
    ],
)
def test_bad_logit_arguments_are_named(kwargs, error, message):
    args = {"log_model": _d(0.0, 1.0), "log_noise": _d(0.0, 0.0), "nu": 1.0, **kwargs}
    with pytest.raises(error, match="^" + re.escape(message)):
        nce_logits(args.pop("log_model"), args.pop("log_noise"), **args)


def test_bad_loss_arguments_are_named():
    with pytest.raises(ValueError, match=r"^logit_noise: reduction='sum' weighs every sample 1 and needs nu \* B = 4 "
                                         r"noise samples; got 3"):
        nce_loss(_d(0.0, 1.0), _d(0.0, 1.0, 2.0), nu=2, reduction="sum")
    with pytest.raises(ValueError, match=r"^reduction: expected one of mean, sum; got 'none'"):
        nce_loss(_d(0.0), _d(0.0), nu=1, reduction="none")
    with pytest.raises(ValueError, match=r"^logit_data/logit_noise: expected at least one sample each; got 0 data"):
        nce_loss(_d(), _d(0.0), nu=1)


# --- the two users: same numbers as their formulas before the core ---------------------------


def test_nce_objective_equals_its_pre_core_formula_to_float64_rounding():
    g = torch.Generator().manual_seed(0)
    data = torch.tensor([1.0, -0.5], dtype=torch.float64) + torch.randn(200, 2, generator=g, dtype=torch.float64)
    torch.manual_seed(1)
    energy = GaussianEnergy(2).double()
    for nu in (1.0, 2.5):
        nce = NCE(GaussianNoise.fit(data, scale=1.5), nu=nu, log_z_init=0.3).double()
        out = nce(energy, data, generator=torch.Generator().manual_seed(5))
        n = round(nu * 200)
        with torch.no_grad():
            y = nce.noise.sample(n, generator=torch.Generator().manual_seed(5))
        both = torch.cat([data, y])
        e = energy(both)
        lq = nce.noise.log_prob(both).to(torch.float64)
        big_g = -e - nce.log_z - lq - math.log(nu)  # the formula NCE wrote before the core
        old = softplus(-big_g[:200]).mean() + nu * softplus(big_g[200:]).mean()
        params = [*energy.parameters(), nce.log_z]
        for a, b in zip(torch.autograd.grad(out.loss, params), torch.autograd.grad(old, params)):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
        assert abs(float((out.loss - old).detach())) <= 1e-12


class _TableCRF(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.w = nn.Parameter(torch.randn(5, 3, generator=g, dtype=torch.float64))
        self.a = nn.Parameter(torch.randn(3, 3, generator=g, dtype=torch.float64))

    def forward(self, x, lengths):
        return LinearChainCRF(self.w[x], self.a, lengths)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("noise_kind", ["bigram", "trigram"])
def test_conditional_nce_equals_its_pre_core_formula_bit_for_bit(dtype, noise_kind):
    model = _TableCRF().to(dtype)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randint(0, 5, (6, 5), generator=g), torch.randint(0, 3, (6, 5), generator=g)
    lengths = torch.tensor([5, 1, 3, 4, 2, 5])
    noise = (TagBigramNoise.fit(y, lengths, 3) if noise_kind == "bigram"
             else NGram.fit(Sequences(y, lengths), 4, 3, boundary=3, end=False))
    nu = 3
    out = ConditionalNCE(noise, nu=nu)(model, (x, y, lengths), generator=torch.Generator().manual_seed(2))
    draws = noise.sample(nu * 6, lengths=lengths.repeat(nu), generator=torch.Generator().manual_seed(2))
    ys = draws.tokens[:, :5].reshape(nu, 6, 5)
    crf = model(x, lengths)

    def log_q(t):
        return noise.log_prob(Sequences(t, lengths, validate=False)).to(dtype)

    # the formula ConditionalNCE wrote before the core
    g_data = crf.score(y) - math.log(nu) - log_q(y)
    g_noise = torch.stack([crf.score(ys[j]) - math.log(nu) - log_q(ys[j]) for j in range(nu)])
    old = (softplus(-g_data).sum() + softplus(g_noise).sum()) / 6
    assert torch.equal(out.loss, old)
    for a, b in zip(torch.autograd.grad(out.loss, list(model.parameters())),
                    torch.autograd.grad(old, list(model.parameters()))):
        assert torch.equal(a, b)

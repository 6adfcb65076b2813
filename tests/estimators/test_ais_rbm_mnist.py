"""AIS on a 784-20 RBM with realistic (MNIST-trained) weights, against its exact log Z.

The issue's check: with default settings (100 chains, the 14,500-temperature schedule of
Salakhutdinov & Murray, base-rate model from the data marginals) AIS lands within 0.2 nats of
the exact log Z (2^20 hidden states summed), and the AIS / reverse-AIS bracket, reverse AIS
started from exact draws, contains the exact value.
"""

from __future__ import annotations

import pytest
import torch

from ebms.data import data_root
from ebms.estimators import ais_bracket, salakhutdinov_betas
from ebms.fit import RBMEstimator
from ebms.models import BernoulliRBM
from ebms.models.rbm import marginal_logits

pytestmark = pytest.mark.skipif(
    not (data_root() / "mnist").is_dir(), reason="MNIST not found under $EBMS_DATA (or ../shared/data)"
)


@pytest.fixture(scope="module")
def trained():
    from ebms.data import binarized_mnist

    x, _, _ = binarized_mnist("train", seed=0)
    x = x[:6000]
    est = RBMEstimator(20, learning_rate=0.05, batch_size=100, n_iter=3, random_state=0).fit(x)
    # the 2^20-state sum in float32 terms (logsumexp accumulated in float64): ~3x faster than float64,
    # and its error (~1e-6 nats on these models) is far below the 0.2-nat tolerance
    exact = float(est.model_.log_partition(dtype=torch.float32))
    return est, x, exact


def _exact_draws(model: BernoulliRBM, n: int, g: torch.Generator) -> torch.Tensor:
    """Exact visible draws: h from its enumerated marginal, then v ~ p(v | h)."""
    H = model.n_hidden
    h = ((torch.arange(1 << H).unsqueeze(1) >> torch.arange(H - 1, -1, -1)) & 1).double()
    w, b, a = (p.detach().double() for p in (model.weight, model.visible_bias, model.hidden_bias))
    log_ph = torch.cat([hc @ a + torch.nn.functional.softplus(hc @ w.T + b).sum(1) for hc in h.split(1 << 15)])
    idx = torch.multinomial(torch.softmax(log_ph, 0).float(), n, replacement=True, generator=g)
    pv = torch.sigmoid(h[idx] @ w.T + b)
    return (torch.rand(pv.shape, generator=g, dtype=pv.dtype) < pv).float()


@pytest.mark.slow
def test_ais_with_default_settings_is_within_0_2_nats_of_the_exact_log_z(trained):
    est, x, exact = trained
    est.score_samples(x[:10], log_z="ais")  # defaults: 100 chains, 14,500 temperatures
    ais = est.log_partition_estimate_
    assert ais is not None and not ais.exact
    assert ais.settings["n_chains"] == 100 and ais.settings["num_steps"] == 14500
    assert abs(ais.estimate - exact) < 0.2, f"AIS {ais} vs exact {exact:.4f}"


@pytest.mark.slow
def test_ais_reverse_ais_bracket_contains_the_exact_log_z(trained):
    est, x, exact = trained
    model = est.model_
    g = torch.Generator().manual_seed(3)
    path = model.ais_path(marginal_logits(x))
    bracket = ais_bracket(path, 100, salakhutdinov_betas(), _exact_draws(model, 100, g), generator=g)
    assert bracket.lower <= exact <= bracket.upper, f"{bracket} does not contain {exact:.4f}"
    assert bracket.upper - bracket.lower < 1.0  # a bracket that says something

"""binary_log_likelihood: the test log-likelihood of a model of binary data, exact and by AIS."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn
from torch.nn.functional import softplus

from ebms.distributions import IndependentBernoulli
from ebms.estimators import GeometricPath
from ebms.estimators.evaluation import DiscreteEvalReport, ais_schedule, binary_log_likelihood, enumerated_log_z
from ebms.samplers.gibbs import Gibbs
from ebms.spaces import MAX_EXACT_STATES, Binary

D = 5


class Independent(nn.Module):
    """``E(x) = -b . x``: independent pixels, ``log Z = sum softplus(b)`` exactly."""

    def __init__(self, b: Tensor) -> None:
        super().__init__()
        self.b = nn.Parameter(b)

    def forward(self, x: Tensor) -> Tensor:
        return -(x * self.b).sum(-1)


@pytest.fixture
def setup() -> tuple[Independent, Tensor, float]:
    b = torch.linspace(-1.0, 1.5, D, dtype=torch.float64)
    x = (torch.rand(40, D, generator=torch.Generator().manual_seed(0), dtype=torch.float64) < 0.5).double()
    return Independent(b), x, float(softplus(b).sum())


def test_exact_log_z_by_enumeration_gives_the_closed_form_likelihood(setup) -> None:
    model, x, log_z = setup
    exact = enumerated_log_z(model, Binary(D))
    assert exact is not None and exact.estimate == pytest.approx(log_z, abs=1e-9)
    rep = binary_log_likelihood(model, x, step=3, exact=exact)
    with torch.no_grad():
        mean = float(-model(x).mean()) - log_z
    assert isinstance(rep, DiscreteEvalReport) and rep.log_z_method == "exact" and rep.ais_log_z is None
    assert rep.test_ll == pytest.approx(mean, abs=1e-9) and rep.n_test == 40 and rep.dim == D and rep.step == 3
    assert rep.lines()[0].startswith("test log-likelihood, step 3: ")


def test_ais_from_the_models_own_marginals_is_exact_and_brackets_it(setup) -> None:
    model, x, log_z = setup
    # the base is the target itself, so every AIS weight is Z/Z0 = 1: the estimate has no variance
    path = GeometricPath(model, IndependentBernoulli(model.b.detach().clone()), Gibbs("random", space=Binary(D)))
    rep = binary_log_likelihood(model, x, exact=None, path=path, betas=ais_schedule(20), chains=16,
                                reverse_from=x[:8], generator=torch.Generator().manual_seed(1))
    assert rep.log_z_method == "AIS" and rep.ais_log_z == pytest.approx(log_z, abs=1e-9)
    assert rep.ais_lower <= log_z <= rep.ais_upper and rep.ll_lower <= rep.test_ll <= rep.ll_upper
    assert rep.settings["ais_chains"] == 16 and rep.settings["ais_temperatures"] == 20
    assert any(line.startswith("reverse AIS log Z: ") for line in rep.lines())


def test_without_exact_log_z_or_ais_the_report_says_what_to_run(setup) -> None:
    model, x, _ = setup
    rep = binary_log_likelihood(model, x)
    assert rep.test_ll is None and rep.log_z_method == "none"
    assert "ebms eval --run DIR --ais" in rep.lines()[0]


def test_schedules_and_the_enumeration_limit() -> None:
    assert ais_schedule(14500).shape == (14501,) and ais_schedule(10).shape == (11,)
    assert float(ais_schedule(10)[0]) == 0.0 and float(ais_schedule(10)[-1]) == 1.0
    wide = Binary(26)
    assert wide.num_states > MAX_EXACT_STATES and enumerated_log_z(Independent(torch.zeros(26)), wide) is None

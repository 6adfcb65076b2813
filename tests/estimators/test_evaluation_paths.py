"""exact_log_z and ais_path: which log Z and which annealing path the evaluation of a binary model uses."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn
from torch.nn.functional import softplus

from ebms.distributions import IndependentBernoulli
from ebms.estimators import GeometricPath, ais, exact_log_partition
from ebms.estimators.evaluation import ais_path, ais_schedule, exact_log_z
from ebms.models import BernoulliRBM
from ebms.samplers.gibbs import Gibbs
from ebms.spaces import MAX_EXACT_STATES, Binary, Reals

D, H = 5, 3


class Independent(nn.Module):
    """``E(x) = -b . x``: independent pixels, ``log Z = sum softplus(b)`` exactly; no closed form offered."""

    def __init__(self, b: Tensor) -> None:
        super().__init__()
        self.b = nn.Parameter(b)

    def forward(self, x: Tensor) -> Tensor:
        return -(x * self.b).sum(-1)


class Refusing(Independent):
    """Offers ``log_partition`` but refuses to sum (as an RBM with both layers too wide does)."""

    def log_partition(self) -> float:
        raise ValueError("log_partition: too many states to sum")


def _rbm(seed: int = 0) -> BernoulliRBM:
    g = torch.Generator().manual_seed(seed)
    rbm = BernoulliRBM(D, H, generator=g)
    with torch.no_grad():
        rbm.weight.normal_(0.0, 0.5, generator=g)
        rbm.visible_bias.normal_(0.0, 0.5, generator=g)
        rbm.hidden_bias.normal_(0.0, 0.5, generator=g)
    return rbm


def test_exact_log_z_takes_a_models_closed_form_and_it_equals_enumeration() -> None:
    rbm = _rbm().double()  # float64 energies, so enumeration is exact to rounding as the closed form is
    est = exact_log_z(rbm, Binary(D))
    assert est is not None and est.exact and est.stderr == 0.0 and est.settings == {"method": "exact"}
    # the free energy enumerated over the 2^D visible states (hidden units summed out analytically)
    assert est.estimate == pytest.approx(exact_log_partition(rbm, Binary(D)).estimate, abs=1e-9)


def test_exact_log_z_enumerates_a_model_without_a_closed_form() -> None:
    b = torch.linspace(-1.0, 1.5, D, dtype=torch.float64)
    est = exact_log_z(Independent(b), Binary(D))
    assert est is not None and est.estimate == pytest.approx(float(softplus(b).sum()), abs=1e-9)


def test_exact_log_z_is_none_where_no_exact_sum_is_feasible() -> None:
    wide = Binary(26)
    assert wide.num_states > MAX_EXACT_STATES
    assert exact_log_z(Independent(torch.zeros(26)), wide) is None  # too many states to enumerate
    assert exact_log_z(Refusing(torch.zeros(D)), Binary(D)) is None  # the closed form refuses
    assert exact_log_z(BernoulliRBM(26, 26), wide) is None  # both RBM layers above 2^25 states


def test_exact_log_z_names_a_space_that_is_not_discrete() -> None:
    with pytest.raises(TypeError, match=r"space: expected a DiscreteSpace \(e.g. ebms.spaces.Binary\); got Reals"):
        exact_log_z(Independent(torch.zeros(2)), Reals(2))


def test_ais_path_takes_an_rbms_own_path_with_the_given_base_logits() -> None:
    rbm = _rbm()
    with torch.no_grad():
        rbm.weight.zero_()  # then p(v) is the product of Bernoulli(sigmoid(b)): a base with c = b is the target
    base = IndependentBernoulli(torch.zeros(D))
    path = ais_path(rbm, base, Gibbs("random", space=Binary(D)), own_path_args=(rbm.visible_bias.detach(),))
    assert not isinstance(path, GeometricPath)
    assert torch.equal(path.base_logits, rbm.visible_bias.detach().double())
    # every AIS weight is Z / Z_0 up to rounding, so the estimate is the exact log Z with no variance
    res = ais(path, 8, ais_schedule(10), generator=torch.Generator().manual_seed(0))
    b, a = rbm.visible_bias.detach().double(), rbm.hidden_bias.detach().double()
    exact = float(softplus(b).sum() + softplus(a).sum())
    assert res.estimate.estimate == pytest.approx(exact, abs=1e-9)


def test_ais_path_builds_a_geometric_path_for_any_other_energy() -> None:
    b = torch.linspace(-1.0, 1.5, D, dtype=torch.float64)
    model, kernel = Independent(b), Gibbs("random", space=Binary(D))
    base = IndependentBernoulli(b.clone())
    path = ais_path(model, base, kernel, own_path_args=(torch.zeros(D),))  # no own path: the arguments are unused
    assert isinstance(path, GeometricPath) and path.base is base and path.kernel is kernel
    res = ais(path, 8, ais_schedule(10), generator=torch.Generator().manual_seed(0))
    assert res.estimate.estimate == pytest.approx(float(softplus(b).sum()), abs=1e-9)  # base = target: exact


def test_ais_path_names_own_path_args_that_are_not_a_tuple() -> None:
    rbm = _rbm()
    with pytest.raises(TypeError, match="own_path_args: expected a tuple of arguments for the model's ais_path; "
                                        "got Tensor"):
        ais_path(rbm, IndependentBernoulli(torch.zeros(D)), Gibbs("random", space=Binary(D)),
                 own_path_args=rbm.visible_bias.detach())  # type: ignore[arg-type]

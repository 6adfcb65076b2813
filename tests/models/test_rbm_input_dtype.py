"""RBM layers take visible states in their parameters' dtype: ``log_prob``/``free_energy``/
``pseudo_log_likelihood`` on a float64 batch of a float32 RBM is one ``TypeError`` naming ``v`` and both
dtypes (it used to be an ``addmv`` traceback); data-based initialisation takes any float dtype."""

from __future__ import annotations

import pytest
import torch

from ebms.models import BernoulliRBM, CategoricalRBM, GaussianBernoulliRBM
from ebms.spaces import Categorical


def _models():
    return {
        "BernoulliRBM": (BernoulliRBM(4, 2), torch.tensor([[0.0, 1.0, 1.0, 0.0]])),
        "GaussianBernoulliRBM": (GaussianBernoulliRBM(4, 2), torch.tensor([[0.3, -1.0, 2.0, 0.0]])),
        "CategoricalRBM": (CategoricalRBM(3, 3, 2), Categorical(3, 3).one_hot(torch.tensor([[0, 2, 1]]))),
    }


@pytest.mark.parametrize("name", ["BernoulliRBM", "GaussianBernoulliRBM", "CategoricalRBM"])
def test_visible_states_in_another_dtype_are_refused_naming_v(name):
    model, v = _models()[name]
    msg = (rf"^v: expected dtype torch.float32, the dtype of the {name}'s parameters; got torch.float64; "
           r"convert v \(v.to\(torch.float32\)\) or the model \(model.to\(torch.float64\)\)$")
    for method in ("free_energy", "log_prob"):
        with pytest.raises(TypeError, match=msg):
            getattr(model, method)(v.double())
    torch.testing.assert_close(model.double().log_prob(v.double()).float(), model.float().log_prob(v), rtol=1e-5, atol=1e-5)


def test_pseudo_likelihood_and_data_initialisation():
    model = BernoulliRBM(4, 2)
    v = torch.tensor([[0.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    with pytest.raises(TypeError, match=r"^v: expected dtype torch.float32"):
        model.pseudo_log_likelihood(v.double())
    for m in (model, GaussianBernoulliRBM(4, 2)):
        m.init_visible_bias_from_data(v.double())  # a statistic copied into the bias: any float dtype
        assert m.visible_bias.dtype == torch.float32

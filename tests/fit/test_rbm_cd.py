"""The RBM's CD update as an objective run by the trainer: the same statistics as ``cd_update``, the
same update as its hand-written momentum (torch's SGD rule, for a constant learning rate), and the
estimator's fit equal to the loop it replaced."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from ebms.fit import CDState, RBMEstimator, cd_update, rbm_products
from ebms.models import CategoricalRBM
from ebms.models.rbm import BernoulliRBM, GaussianBernoulliRBM
from ebms.objectives.rbm_cd import RBMContrastiveDivergence
from ebms.train import DistributedContext, Trainer


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _binary(n: int, d: int, seed: int = 0, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return (torch.rand(n, d, generator=_gen(seed)) < 0.35).to(dtype)


def _models() -> dict[str, tuple[torch.nn.Module, torch.Tensor]]:
    g = _gen(0)
    cat = CategoricalRBM(4, 3, 5, generator=_gen(1)).double()
    onehot = torch.nn.functional.one_hot(torch.randint(3, (12, 4), generator=g), 3).double()
    return {
        "bernoulli": (BernoulliRBM(8, 5, generator=_gen(1)).double(), _binary(12, 8)),
        "bernoulli-onednn": (BernoulliRBM(64, 64, generator=_gen(1)), _binary(600, 64, dtype=torch.float32)),
        "gaussian": (GaussianBernoulliRBM(3, 4, generator=_gen(1), learn_sigma=True).double(),
                     torch.randn(12, 3, generator=g, dtype=torch.float64)),
        "categorical": (cat, onehot),
    }


@pytest.mark.parametrize("name", list(_models()))
@pytest.mark.parametrize("kw", [{"k": 1}, {"k": 2, "persistent": True}], ids=["cd1", "pcd2"])
def test_the_objective_sets_minus_the_statistics_cd_update_applies(name, kw):
    model, v = _models()[name]
    ref = copy.deepcopy(model)
    before = [p.detach().clone() for p in ref.cd_parameters()]
    cd_update(ref, v, learning_rate=1.0, generator=_gen(7), mean_field=False, **kw)  # theta += statistics
    objective = RBMContrastiveDivergence(mean_field=False, products=rbm_products, **kw)
    out = objective(model, v, generator=_gen(7))
    float32 = v.dtype == torch.float32
    for p, p0, p1 in zip(model.cd_parameters(), before, ref.cd_parameters()):
        assert p.grad is not None
        torch.testing.assert_close(-p.grad, p1.detach() - p0, atol=1e-5 if float32 else 1e-12, rtol=0)
    assert not out.loss.requires_grad and out.negatives is not None
    if kw.get("persistent"):
        assert objective.chain.shape == (v.shape[0], model.n_hidden)
        assert "chain" in objective.state_dict()


def _stream(batches: list[torch.Tensor]):
    it = iter(batches)
    return lambda size, g: next(it)


@pytest.mark.parametrize("persistent", [False, True], ids=["cd1", "pcd1"])
def test_trainer_sgd_with_momentum_and_weight_decay_equals_cd_update(persistent):
    # torch's SGD: buf = mu buf + g (+ lambda W for W), theta -= lr buf; cd_update: u = mu u + lr (-g),
    # theta += u. Equal for a constant lr: u = -lr buf by induction. float64: agreement to round-off.
    v = _binary(60, 8, seed=3)
    batches = list(v.split(12)) * 3
    lr, mu, wd = 0.05, 0.7, 0.01
    ref = BernoulliRBM(8, 5, generator=_gen(1)).double()
    model = copy.deepcopy(ref)
    g, state = _gen(11), CDState()
    for b in batches:
        state = cd_update(ref, b, learning_rate=lr, momentum=mu, weight_decay=wd, persistent=persistent,
                          state=state, generator=g)
    weight, *rest = model.cd_parameters()
    sgd = torch.optim.SGD([{"params": [weight], "weight_decay": wd}, {"params": rest}], lr=lr, momentum=mu)
    objective = RBMContrastiveDivergence(persistent=persistent, energies=False, products=rbm_products)
    Trainer(objective, model, _stream(batches), optimizer=sgd, steps=len(batches), batch_size=None, run_dir=None,
            guard=None, progress=False, device="cpu", distributed=DistributedContext(), generator=_gen(11)).fit()
    for a, b in zip(model.cd_parameters(), ref.cd_parameters()):
        torch.testing.assert_close(a.detach(), b.detach(), atol=1e-12, rtol=0)
    buf = sgd.state[weight]["momentum_buffer"]
    torch.testing.assert_close(-lr * buf, state.velocity[0], atol=1e-13, rtol=0)  # u = -lr buf


def test_energies_are_the_mean_free_energies_of_data_and_negatives():
    model, v = _models()["bernoulli"]
    out = RBMContrastiveDivergence(k=2)(model, v, generator=_gen(3))
    with torch.no_grad():
        f_pos, f_neg = float(model(v).mean()), float(model(out.negatives).mean())
    assert float(out.loss) == pytest.approx(f_pos - f_neg, rel=1e-9)  # float64, as the model
    # metrics are float32 host numbers (scalar_metrics)
    assert out.metrics["e_pos"] == pytest.approx(f_pos, rel=1e-6)
    assert out.metrics["e_neg"] == pytest.approx(f_neg, rel=1e-6)
    assert out.metrics["gap"] == pytest.approx(f_neg - f_pos, rel=1e-5)
    quiet = RBMContrastiveDivergence(k=2, energies=False)(copy.deepcopy(model), v, generator=_gen(3))
    assert quiet.metrics == {} and float(quiet.loss) == 0.0
    torch.testing.assert_close(quiet.negatives, out.negatives)  # same draws either way


def test_gradients_accumulate_like_backward():
    model, v = _models()["bernoulli"]
    objective = RBMContrastiveDivergence(mean_field=True)  # the model's own methods (ModelProducts)
    objective(model, v, generator=_gen(3))
    once = [p.grad.clone() for p in model.cd_parameters()]
    objective(model, v, generator=_gen(3))
    for p, g in zip(model.cd_parameters(), once):
        torch.testing.assert_close(p.grad, 2 * g)


def test_the_objective_names_bad_arguments():
    with pytest.raises(ValueError, match="mean_field: expected False"):
        RBMContrastiveDivergence(persistent=True, mean_field=True)
    with pytest.raises(ValueError, match="k: expected an int >= 1; got 0"):
        RBMContrastiveDivergence(k=0)
    with pytest.raises(TypeError, match="products: expected a callable"):
        RBMContrastiveDivergence(products=3)  # type: ignore[arg-type]
    model = BernoulliRBM(8, 3)
    with pytest.raises(ValueError, match=r"batch: expected shape \('\*', 8\); got \(4, 7\)"):
        RBMContrastiveDivergence()(model, torch.zeros(4, 7))
    with pytest.raises(TypeError, match="batch: expected a floating-point tensor"):
        RBMContrastiveDivergence()(model, torch.zeros(4, 8, dtype=torch.long))


# -- the estimator on the trainer -----------------------------------------------------------------------


def _loop(x: torch.Tensor, *, h: int, batch_size: int, n_iter: int, seed: int, **kw) -> RBMEstimator:
    """What ``RBMEstimator.fit`` ran before it used the trainer: cd_update over shuffled near-equal batches."""
    est = RBMEstimator(h, batch_size=batch_size, n_iter=0, random_state=seed, **kw).fit(x)  # initialised only
    model, g, state = est.model_, est.generator_, CDState()
    n = x.shape[0]
    for _ in range(n_iter):
        for idx in torch.tensor_split(torch.randperm(n, generator=g), math.ceil(n / batch_size)):
            state = cd_update(model, x.index_select(0, idx), learning_rate=0.1, k=est.cd_k,
                              persistent=est.persistent, state=state, momentum=est.momentum,
                              weight_decay=est.weight_decay, mean_field=est.mean_field, generator=g)
    return est


@pytest.mark.parametrize("kw", [{}, {"persistent": True}, {"momentum": 0.5, "weight_decay": 0.01}],
                         ids=["cd1", "pcd1", "momentum-decay"])
def test_fit_equals_the_cd_update_loop_it_replaced(kw):
    x = _binary(150, 8, seed=4, dtype=torch.float32)
    fitted = RBMEstimator(4, batch_size=20, n_iter=4, learning_rate=0.1, random_state=2, **kw).fit(x)
    loop = _loop(x, h=4, batch_size=20, n_iter=4, seed=2, **kw)
    # float32 round-off only: the trainer applies lr in SGD's step, cd_update inside the statistics
    np.testing.assert_allclose(fitted.components_, loop.components_, atol=2e-6, rtol=0)
    np.testing.assert_allclose(fitted.intercept_visible_, loop.intercept_visible_, atol=1e-5, rtol=0)


def test_set_params_between_partial_fits_takes_effect():
    x = _binary(40, 8, seed=5, dtype=torch.float32)
    est = RBMEstimator(4, random_state=0, momentum=0.5).partial_fit(x[:20])
    est.set_params(learning_rate=0.3, momentum=0.0)
    est.partial_fit(x[20:])
    ref = RBMEstimator(4, random_state=0, n_iter=0).fit(x[:20])  # the same initial model and generator
    state = cd_update(ref.model_, x[:20], learning_rate=0.1, momentum=0.5, generator=ref.generator_)
    cd_update(ref.model_, x[20:], learning_rate=0.3, state=state, generator=ref.generator_)
    np.testing.assert_allclose(est.components_, ref.components_, atol=1e-6, rtol=0)

"""CD/PCD training and the scikit-learn-style RBM estimator, checked against exact log-likelihoods."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from ebms.fit import CDState, RBMEstimator, cd_update
from ebms.models.rbm import BernoulliRBM, GaussianBernoulliRBM


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _data(n: int = 400, seed: int = 0) -> torch.Tensor:
    """Two binary prototypes of 8 pixels with 10% flip noise: structure an RBM can learn."""
    g = _gen(seed)
    protos = torch.tensor([[1, 1, 1, 1, 0, 0, 0, 0], [0, 0, 1, 1, 1, 1, 0, 1]], dtype=torch.float32)
    x = protos[torch.randint(2, (n,), generator=g)]
    flip = torch.rand(x.shape, generator=g) < 0.1
    return torch.where(flip, 1 - x, x)


def _exact_mean_loglik(model, x) -> float:
    with torch.no_grad():
        return float(model.log_prob(x).mean())


# -- cd_update -----------------------------------------------------------------------------------


@pytest.mark.parametrize("persistent", [False, True], ids=["cd1", "pcd1"])
def test_cd_training_increases_the_exact_log_likelihood(persistent):
    x = _data()
    model = BernoulliRBM(8, 4, generator=_gen(1))
    before = _exact_mean_loglik(model, x)
    g, state = _gen(2), CDState()
    for _ in range(30):
        for batch in x.split(20):
            state = cd_update(model, batch, learning_rate=0.1, persistent=persistent, state=state, generator=g)
    after = _exact_mean_loglik(model, x)
    # the data entropy bound is about -4.4 nats (two prototypes, 8 flips at 10%); start is -5.5
    assert after > before + 0.5, (before, after)


def test_cd_update_is_the_batch_mean_statistics_difference():
    x = _data(20)
    model = BernoulliRBM(8, 3, generator=_gen(1))
    w0 = model.weight.detach().clone()
    cd_update(model, x, learning_rate=0.5, generator=_gen(5))
    # replay the same draws: h ~ p(h|x) with the same generator, then mean-field reconstruction
    ref = BernoulliRBM(8, 3, generator=_gen(1))
    with torch.no_grad():
        ph = ref.hidden_probs(x)
        h = (torch.rand(ph.shape, generator=_gen(5)) < ph).float()
        vn = ref.visible_mean(h)
        phn = ref.hidden_probs(vn)
    expected = w0 + 0.5 * (x.T @ ph - vn.T @ phn) / 20
    torch.testing.assert_close(model.weight.detach(), expected)


def test_momentum_first_step_and_weight_decay_follow_the_update_rule():
    x = _data(20)
    runs = {}
    for name, kw in {"plain": {}, "momentum": {"momentum": 0.9}, "decay": {"weight_decay": 0.1}}.items():
        model = BernoulliRBM(8, 3, generator=_gen(1))
        state = cd_update(model, x, learning_rate=0.5, generator=_gen(5), **kw)
        runs[name] = (model.weight.detach().clone(), state)
    w0 = BernoulliRBM(8, 3, generator=_gen(1)).weight.detach()
    torch.testing.assert_close(runs["momentum"][0], runs["plain"][0])  # u_1 = lr * g
    torch.testing.assert_close(runs["momentum"][1].velocity[0], runs["plain"][0] - w0)
    torch.testing.assert_close(runs["decay"][0], runs["plain"][0] - 0.5 * 0.1 * w0)


def test_pcd_keeps_one_binary_chain_per_first_batch_row():
    model = BernoulliRBM(8, 3, generator=_gen(1))
    state = cd_update(model, _data(12), learning_rate=0.1, persistent=True, generator=_gen(2), k=3)
    assert state.chain.shape == (12, 3) and set(state.chain.unique().tolist()) <= {0.0, 1.0}
    state = cd_update(model, _data(5), learning_rate=0.1, persistent=True, state=state, generator=_gen(3))
    assert state.chain.shape == (12, 3)


def test_mean_field_with_persistent_chains_is_an_error():
    with pytest.raises(ValueError, match="mean_field: expected False"):
        cd_update(BernoulliRBM(8, 3), _data(4), learning_rate=0.1, persistent=True, mean_field=True)
    with pytest.raises(ValueError, match="mean_field: expected False"):
        RBMEstimator(persistent=True, mean_field=True).fit(_data(4))


def test_cd_update_rejects_a_batch_of_the_wrong_width():
    with pytest.raises(ValueError, match=r"v: expected shape"):
        cd_update(BernoulliRBM(8, 3), torch.zeros(4, 7), learning_rate=0.1)


def test_gaussian_rbm_cd_training_increases_the_exact_log_likelihood():
    g = _gen(0)
    x = torch.randn(400, 3, generator=g) @ torch.tensor([[1.0, 0.8, 0.0], [0.0, 0.6, 0.0], [0.0, 0.0, 1.0]])
    x = (x - x.mean(0)) / x.std(0)
    model = GaussianBernoulliRBM(3, 4, generator=_gen(1), learn_sigma=True)
    before = _exact_mean_loglik(model, x)
    state = CDState()
    for _ in range(20):
        for batch in x.split(20):
            state = cd_update(model, batch, learning_rate=0.05, state=state, momentum=0.5, generator=g)
    assert _exact_mean_loglik(model, x) > before + 0.05


# -- estimator -------------------------------------------------------------------------------------


def test_fit_transform_shapes_and_array_types():
    x = _data(100)
    est = RBMEstimator(5, batch_size=10, n_iter=2, random_state=0).fit(x.numpy())
    h = est.transform(x.numpy())
    assert isinstance(h, np.ndarray) and h.shape == (100, 5) and ((h > 0) & (h < 1)).all()
    assert isinstance(est.transform(x), torch.Tensor)
    assert est.components_.shape == (5, 8) and est.intercept_hidden_.shape == (5,)
    assert est.intercept_visible_.shape == (8,) and est.n_features_in_ == 8
    v = est.gibbs(x[:7])
    assert v.shape == (7, 8) and set(v.unique().tolist()) <= {0.0, 1.0}


def test_fit_is_reproducible_from_random_state():
    x = _data(100).numpy()
    a = RBMEstimator(4, batch_size=10, n_iter=2, random_state=3).fit(x).components_
    b = RBMEstimator(4, batch_size=10, n_iter=2, random_state=3).fit(x).components_
    np.testing.assert_array_equal(a, b)


def test_score_samples_equals_the_exact_log_probability():
    x = _data(200)
    est = RBMEstimator(4, batch_size=20, n_iter=5, learning_rate=0.1, random_state=0).fit(x)
    scores = est.score_samples(x)
    model64 = copy.deepcopy(est.model_).double()
    with torch.no_grad():
        expected = model64.log_prob(x.double())
        free_energy = model64(x.double())
    assert scores.dtype == torch.float64  # computed in float64 from the float32 parameters
    torch.testing.assert_close(scores, expected, atol=1e-10, rtol=0)
    assert est.log_partition_estimate_.exact
    assert est.score(x) == pytest.approx(float(scores.mean()), rel=1e-12)
    torch.testing.assert_close(est.score_samples(x, log_z=1.5), -free_energy - 1.5)


def test_training_beats_the_independent_bernoulli_baseline():
    x = _data(400)
    est = RBMEstimator(4, batch_size=20, n_iter=30, learning_rate=0.1, random_state=0).fit(x)
    p = (x.mean(0) * 400 + 1) / 402
    baseline = float((x * p.log() + (1 - x) * (1 - p).log()).sum(1).mean())
    assert est.score(x) > baseline + 0.5


def test_score_samples_with_ais_is_close_to_exact():
    x = _data(200)
    est = RBMEstimator(
        6,
        batch_size=20,
        n_iter=10,
        random_state=0,
        ais_chains=64,
        ais_betas=torch.linspace(0, 1, 301, dtype=torch.float64),
    ).fit(x)
    exact = est.model_.log_partition()
    est.score_samples(x, log_z="ais")
    e = est.log_partition_estimate_
    assert not e.exact and e.stderr > 0
    # AIS is a stochastic lower bound: P(estimate > log Z + t) <= exp(-t); below by at most 4 stderr + bias
    assert exact - 4 * e.stderr - 0.05 < e.estimate < exact + 0.5


def test_pseudo_likelihood_is_the_models_exact_sum_over_sites():
    x = _data(50)
    est = RBMEstimator(4, batch_size=10, n_iter=2, random_state=0).fit(x)
    expected = copy.deepcopy(est.model_).double().pseudo_log_likelihood(x.double())
    torch.testing.assert_close(est.pseudo_likelihood(x), expected)


def test_partial_fit_initialises_then_updates():
    x = _data(40)
    est = RBMEstimator(4, random_state=0).partial_fit(x[:20])
    w = est.components_
    est.partial_fit(x[20:])
    assert not np.allclose(w, est.components_)


def test_gaussian_visible_estimator_scores_with_the_exact_log_z():
    x = torch.randn(100, 3, generator=_gen(0))
    est = RBMEstimator(3, visible="gaussian", batch_size=10, n_iter=2, learning_rate=0.01, random_state=0).fit(x)
    with torch.no_grad():
        expected = copy.deepcopy(est.model_).double().log_prob(x.double())
    torch.testing.assert_close(est.score_samples(x), expected)
    with pytest.raises(ValueError, match="pseudo_likelihood: defined for visible='bernoulli'"):
        est.pseudo_likelihood(x)
    with pytest.raises(ValueError, match="'ais' is implemented for visible='bernoulli'"):
        est.score_samples(x, log_z="ais")


def test_verbose_fit_shows_a_progress_bar(capsys):
    RBMEstimator(3, batch_size=10, n_iter=2, random_state=0, verbose=True).fit(_data(40))
    assert "recon_error" in capsys.readouterr().err


def test_get_and_set_params_round_trip():
    est = RBMEstimator(7, learning_rate=0.05)
    assert est.get_params()["n_components"] == 7 and est.get_params()["learning_rate"] == 0.05
    assert est.set_params(n_iter=3) is est and est.n_iter == 3
    assert repr(est) == "RBMEstimator(n_components=7, learning_rate=0.05, n_iter=3)"
    with pytest.raises(ValueError, match=r"set_params: unknown parameter 'n_hidden' for RBMEstimator; valid: n_comp"):
        est.set_params(n_hidden=3)


# -- validation ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["fit", "partial_fit"])
def test_bernoulli_training_data_outside_the_unit_interval_is_an_error_naming_x(method):
    x = _data(10).numpy()
    x[3, 2] = 1.5
    with pytest.raises(ValueError, match=r"X: expected values in \[0, 1\] for visible='bernoulli'.*got max 1\.5; rescale"):
        getattr(RBMEstimator(3), method)(x)
    x[3, 2] = -0.25
    with pytest.raises(ValueError, match=r"X: Negative values in data passed to RBMEstimator.*got min -0\.25"):
        getattr(RBMEstimator(3), method)(x)


@pytest.mark.parametrize("method", ["transform", "score_samples", "gibbs", "reconstruction_error"])
def test_inputs_outside_the_unit_interval_after_fit_are_errors_naming_x(method):
    est = RBMEstimator(3, n_iter=1, random_state=0).fit(_data(20))
    with pytest.raises(ValueError, match=r"X: expected values in \[0, 1\]"):
        getattr(est, method)(np.full((2, 8), 1.3))


def test_pseudo_likelihood_needs_binary_rows():
    est = RBMEstimator(3, n_iter=1, random_state=0).fit(_data(20))
    with pytest.raises(ValueError, match=r"X: expected values in \{0, 1\}"):
        est.pseudo_likelihood(np.full((2, 8), 0.3))


@pytest.mark.parametrize("method", ["transform", "score_samples", "gibbs", "partial_fit"])
def test_wrong_number_of_features_is_an_error(method):
    est = RBMEstimator(3, n_iter=1, random_state=0).fit(_data(20))
    with pytest.raises(ValueError, match=r"X has 5 features, but RBMEstimator is expecting 8 features as input"):
        getattr(est, method)(np.zeros((2, 5)))


@pytest.mark.parametrize("method", ["transform", "score_samples", "score", "gibbs", "pseudo_likelihood"])
def test_unfitted_estimator_raises_not_fitted(method):
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError, match="This RBMEstimator instance is not fitted yet: call fit"):
        getattr(RBMEstimator(3), method)(np.zeros((1, 8)))
    assert not hasattr(RBMEstimator(3), "components_")  # NotFittedError is an AttributeError too


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"n_components": 0}, ValueError, "n_components: expected an int >= 1; got 0"),
        ({"n_components": 2.5}, TypeError, "n_components: expected an int; got 2.5"),
        ({"learning_rate": -1.0}, ValueError, "learning_rate: expected a finite number > 0; got -1.0"),
        ({"batch_size": 0}, ValueError, "batch_size: expected an int >= 1; got 0"),
        ({"n_iter": -1}, ValueError, "n_iter: expected an int >= 0; got -1"),
        ({"cd_k": 0}, ValueError, "cd_k: expected an int >= 1; got 0"),
        ({"momentum": 1.5}, ValueError, r"momentum: expected a number in \[0.0, 0.999\]; got 1.5"),
        ({"weight_decay": -0.1}, ValueError, "weight_decay: expected a finite number >= 0; got -0.1"),
        ({"ais_chains": 1}, ValueError, "ais_chains: expected an int >= 2; got 1"),
        ({"random_state": -3}, ValueError, "random_state: expected an int >= 0; got -3"),
        ({"random_state": "seed"}, TypeError, "random_state: expected an int; got 'seed'"),
        ({"visible": "binary"}, ValueError, r"visible: expected one of \('bernoulli', 'gaussian'\); got 'binary'"),
    ],
)
def test_bad_constructor_arguments_are_errors_at_fit_not_at_construction(kwargs, error, message):
    est = RBMEstimator(**kwargs)  # scikit-learn's convention: __init__ only stores
    with pytest.raises(error, match=message):
        est.fit(_data(10))


def test_numpy_integer_arguments_from_a_parameter_grid_are_accepted():
    est = RBMEstimator(np.int64(3), batch_size=np.int32(5), n_iter=np.int64(1), random_state=np.int64(0))
    assert est.fit(_data(10)).components_.shape == (3, 8)


def test_bad_inputs_and_log_z_are_errors():
    with pytest.raises(ValueError, match="Expected 2D array, got 1D array instead"):
        RBMEstimator(3).fit(np.zeros(8))
    with pytest.raises(ValueError, match="Input X contains NaN"):
        RBMEstimator(3).fit(np.full((4, 8), np.nan))
    est = RBMEstimator(3, n_iter=1, random_state=0).fit(_data(20))
    with pytest.raises(ValueError, match="log_z: expected None, 'exact', 'ais' or a number; got 'approx'"):
        est.score_samples(_data(2), log_z="approx")
    with pytest.raises(ValueError, match="log_z: expected a finite number"):
        est.score_samples(_data(2), log_z=float("inf"))


@pytest.mark.parametrize(
    "kw", [{}, {"mean_field": False}, {"persistent": True, "k": 2}, {"momentum": 0.5, "weight_decay": 0.01}],
    ids=["cd1", "cd1-sampled", "pcd2", "momentum-decay"],
)
def test_onednn_fast_path_matches_the_generic_update(kw):
    # 600 x 64 x 64 products (2.5M multiply-adds) take cd_update's oneDNN path for float32 BernoulliRBMs;
    # with oneDNN disabled the same update runs through the model's own methods: equal up to round-off
    from ebms.fit import _rbm_cd  # where the CD update lives

    g = _gen(0)
    x = (torch.rand(600, 64, generator=g) < 0.3).float()
    ref = BernoulliRBM(64, 64, generator=_gen(1))
    fast = copy.deepcopy(ref)
    assert _rbm_cd._fast_products(fast, x) is not None or not torch.backends.mkldnn.is_available()
    s_fast, s_ref = CDState(), CDState()
    for seed in (5, 6):
        s_fast = cd_update(fast, x, learning_rate=0.1, state=s_fast, generator=_gen(seed), **kw)
        with torch.backends.mkldnn.flags(enabled=False):
            assert _rbm_cd._fast_products(ref, x) is None
            s_ref = cd_update(ref, x, learning_rate=0.1, state=s_ref, generator=_gen(seed), **kw)
    for a, b in zip(fast.cd_parameters(), ref.cd_parameters()):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    if kw.get("persistent"):
        torch.testing.assert_close(s_fast.chain, s_ref.chain)

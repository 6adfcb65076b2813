"""RBMEstimator as a scikit-learn estimator: the check suite, model selection, pipelines, sparse and [0, 1] input.

References: scikit-learn's own ``check_estimator`` suite (1.9), hand-written cross-validation loops
for ``GridSearchCV``/``cross_val_score``, dense twins of sparse inputs, enumeration for the [0, 1]
semantics, and scikit-learn's ``BernoulliRBM`` for the transform and pseudo-likelihood definitions.
"""

from __future__ import annotations

import copy
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
import torch

sklearn = pytest.importorskip("sklearn")
sp = pytest.importorskip("scipy.sparse")

from sklearn.base import clone  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.model_selection import GridSearchCV, KFold, cross_val_score  # noqa: E402
from sklearn.neural_network import BernoulliRBM as SkBernoulliRBM  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import MinMaxScaler  # noqa: E402
from sklearn.utils.estimator_checks import check_estimator, parametrize_with_checks  # noqa: E402

from ebms.fit import RBMEstimator, sklearn_expected_failed_checks  # noqa: E402
from ebms.spaces import Binary  # noqa: E402


def _binary(n: int = 120, d: int = 8, seed: int = 0) -> np.ndarray:
    """Two 8-pixel prototypes with 10% flip noise (float64, as scikit-learn users pass data)."""
    rng = np.random.default_rng(seed)
    protos = np.array([[1, 1, 1, 1, 0, 0, 0, 0], [0, 0, 1, 1, 1, 1, 0, 1]], dtype=np.float64)[:, :d]
    x = protos[rng.integers(0, 2, n)]
    return np.abs(x - (rng.random(x.shape) < 0.1))


class _BinaryDataRBM(RBMEstimator):
    """Bernoulli visibles fed scikit-learn's check data rounded to {0, 1} (finite numeric arrays only).

    Shows that the checks listed by ``sklearn_expected_failed_checks`` fail only because of their data
    (values above 1, or non-binary data scored): on the same data rounded into {0, 1} every one passes.
    """

    def _input(self, X, *, reset):
        return super()._input(_binarise(X), reset=reset)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.positive_only = False  # negatives are rounded to 0, not rejected
        return tags


def _binarise(X):
    """``X`` clipped to [0, 1] and rounded, NaN and inf kept (scikit-learn checks those are refused)."""
    if sp.issparse(X) and X.dtype.kind in "fiu":
        X = X.tocsr(copy=True)
        X.data = np.where(np.isfinite(X.data), np.round(np.clip(X.data, 0, 1)), X.data)
        return X
    a = np.asarray(X) if not isinstance(X, torch.Tensor) else X
    if isinstance(a, np.ndarray) and a.dtype.kind in "fiu" and a.ndim == 2 and a.size:
        return np.where(np.isfinite(a), np.round(np.clip(a, 0, 1)), a).astype(a.dtype)
    return X


_SMALL = {"n_components": 2, "n_iter": 2, "batch_size": 10, "learning_rate": 0.01}


# -- scikit-learn's own check suite: about 100 checks, a few seconds in all ---------------------------


with warnings.catch_warnings():  # collection-time note: the estimator duck-types BaseEstimator (docs/discrete.md)
    warnings.filterwarnings("ignore", "Estimator .* does not inherit from `sklearn.base.BaseEstimator`")
    _checks = parametrize_with_checks(
        [RBMEstimator(visible="gaussian", **_SMALL), _BinaryDataRBM(**_SMALL)],
        expected_failed_checks=lambda e: {},  # every check passes on these two
        xfail_strict=True,
    )


@_checks
@pytest.mark.filterwarnings("ignore:Estimator .* does not inherit:UserWarning")
def test_sklearn_check_estimator(estimator, check):
    check(estimator)


@pytest.mark.filterwarnings("ignore:Estimator .* does not inherit:UserWarning")
def test_bernoulli_visibles_fail_exactly_the_listed_checks_for_the_listed_reasons():
    """The plain Bernoulli estimator on scikit-learn's own data: one test (not one expected failure per
    check) asserting which checks fail and that each fails on the estimator's own one-line refusal."""
    est = RBMEstimator(**_SMALL)
    results = check_estimator(est, on_fail=None, on_skip=None)
    failed: dict[str, list[str]] = {}
    for r in results:
        if r["status"] == "failed":
            failed.setdefault(r["check_name"], []).append(str(r["exception"]))
    expected = sklearn_expected_failed_checks(est)
    assert set(failed) == set(expected)
    above = "X: expected values in [0, 1] for visible='bernoulli'"
    scored = "X: expected binary values (0 or 1) for score_samples with visible='bernoulli'"
    for name, messages in failed.items():
        want = scored if expected[name].startswith("scores") else above
        assert all(want in m for m in messages), (name, messages)
    passed = {r["check_name"] for r in results if r["status"] == "passed"}
    assert len(passed) >= 20 and not passed & set(expected)


def test_expected_failed_checks_are_only_for_bernoulli_visibles():
    assert sklearn_expected_failed_checks(RBMEstimator(visible="gaussian")) == {}
    failed = sklearn_expected_failed_checks(RBMEstimator())
    above = [name for name, reason in failed.items() if "values above 1" in reason]
    assert len(failed) == 22 and len(above) == 21
    assert failed["check_fit_score_takes_y"].startswith("scores data in [0, 1] that is not binary")


# -- model selection and pipelines, against hand-written loops -----------------------------------------


def test_cross_val_score_equals_a_hand_written_loop():
    x = _binary()
    est = RBMEstimator(3, n_iter=3, batch_size=10, random_state=0)
    cv = KFold(3, shuffle=True, random_state=0)
    scores = cross_val_score(est, x, cv=cv)
    expected = [clone(est).fit(x[tr]).score(x[te]) for tr, te in cv.split(x)]
    np.testing.assert_allclose(scores, expected, rtol=1e-12)
    assert np.all(scores < 0)  # mean log-likelihoods of 8 binary pixels


def test_grid_search_picks_the_best_mean_held_out_log_likelihood():
    x = _binary()
    grid = {"n_components": [1, 4], "learning_rate": [0.01, 0.1]}
    cv = KFold(3, shuffle=True, random_state=0)
    search = GridSearchCV(RBMEstimator(n_iter=3, batch_size=10, random_state=0), grid, cv=cv).fit(x)
    means = []
    for params in search.cv_results_["params"]:
        est = RBMEstimator(n_iter=3, batch_size=10, random_state=0, **params)
        means.append(np.mean([clone(est).fit(x[tr]).score(x[te]) for tr, te in cv.split(x)]))
    np.testing.assert_allclose(search.cv_results_["mean_test_score"], means, rtol=1e-12)
    assert search.best_params_ == search.cv_results_["params"][int(np.argmax(means))]
    refit = RBMEstimator(n_iter=3, batch_size=10, random_state=0, **search.best_params_).fit(x)
    np.testing.assert_array_equal(search.best_estimator_.components_, refit.components_)


def test_pipeline_of_scaler_rbm_features_and_a_classifier():
    from sklearn.datasets import load_digits

    digits = load_digits()
    x, y = digits.data[:400], digits.target[:400]  # grey levels 0..16
    pipe = make_pipeline(MinMaxScaler(), RBMEstimator(16, n_iter=5, random_state=0), LogisticRegression(max_iter=300))
    pipe.fit(x, y)
    scaler, rbm = pipe[0], pipe[1]
    np.testing.assert_allclose(pipe[:2].transform(x), rbm.transform(scaler.transform(x)), rtol=0, atol=0)
    assert pipe.predict(x[:5]).shape == (5,)
    assert list(pipe[:2].get_feature_names_out()) == [f"rbmestimator{i}" for i in range(16)]


def test_clone_and_pickle_keep_parameters_and_fitted_results():
    import pickle

    est = RBMEstimator(3, n_iter=2, random_state=np.random.RandomState(0), ais_betas=[0.0, 0.5, 1.0])
    twin = clone(est)
    assert twin.get_params().keys() == est.get_params().keys() and twin.n_components == 3
    x = _binary(40)
    est.fit(x)
    back = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(back.transform(x), est.transform(x))
    np.testing.assert_array_equal(back.score_samples(x), est.score_samples(x))


def test_a_random_state_instance_is_consumed_reproducibly():
    x = _binary(40)
    a = RBMEstimator(3, n_iter=2, random_state=np.random.RandomState(5)).fit(x).components_
    b = RBMEstimator(3, n_iter=2, random_state=np.random.RandomState(5)).fit(x).components_
    np.testing.assert_array_equal(a, b)


# -- sparse and [0, 1] input ----------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
@pytest.mark.parametrize("shuffle", [True, False])
def test_sparse_input_gives_the_dense_results(fmt, shuffle):
    x = _binary(60)
    xs = sp.csr_matrix(x).asformat(fmt)
    kw = {"n_iter": 3, "batch_size": 7, "random_state": 0, "shuffle": shuffle}
    dense, sparse = RBMEstimator(3, **kw).fit(x), RBMEstimator(3, **kw).fit(xs)
    np.testing.assert_array_equal(sparse.components_, dense.components_)  # same float32 batches, same draws
    np.testing.assert_array_equal(sparse.transform(xs), dense.transform(x))
    np.testing.assert_array_equal(sparse.score_samples(xs), dense.score_samples(x))
    np.testing.assert_array_equal(dense.transform(xs), dense.transform(x))


def test_sparse_rows_are_densified_in_chunks_and_partial_fit_takes_sparse(monkeypatch):
    from ebms.fit import _rbm_fitted  # where the inference methods live

    monkeypatch.setattr(_rbm_fitted, "_CHUNK_ROWS", 7)  # 60 rows -> 9 chunks
    x = _binary(60)
    est = RBMEstimator(3, random_state=0).partial_fit(sp.csr_matrix(x))
    ref = RBMEstimator(3, random_state=0).partial_fit(x)
    np.testing.assert_array_equal(est.components_, ref.components_)
    np.testing.assert_allclose(est.transform(sp.csc_matrix(x)), ref.transform(x), rtol=1e-15)


def test_bernoulli_means_train_and_transform_but_only_binary_rows_are_scored():
    d = 6
    rng = np.random.default_rng(1)
    x = rng.random((50, d))  # intensities in [0, 1)
    est = RBMEstimator(3, n_iter=5, batch_size=10, random_state=0).fit(x)
    model = copy.deepcopy(est.model_).double()
    w, a = model.weight.detach(), model.hidden_bias.detach()
    # transform: the mean-field input sigma(a + x W), as scikit-learn's BernoulliRBM.transform
    np.testing.assert_allclose(est.transform(x), torch.sigmoid(a + torch.from_numpy(x) @ w).numpy(), rtol=1e-13)
    # score_samples: a log-likelihood of binary vectors; Bernoulli means are refused, naming X
    msg = (r"X: expected binary values \(0 or 1\) for score_samples with visible='bernoulli' \(log-likelihoods "
           r"of binary vectors\); got 300 other value\(s\), e\.g\. 0\.\d+; binarise X first")
    for scorer in (est.score_samples, est.score):
        with pytest.raises(ValueError, match=msg):
            scorer(x)
    with pytest.raises(ValueError, match=r"X: expected binary values .*got 1 other value\(s\), e\.g\. 0\.5;"):
        est.score_samples(sp.csr_matrix(np.array([[0.0, 1.0, 0.5, 0.0, 0.0, 1.0]])))
    # on binary rows: -F(x) - log Z, the exact log-likelihood (all 64 images enumerated)
    states = torch.cat(list(Binary(d).enumerate(dtype=torch.float64)))
    with torch.no_grad():
        log_p = model.log_prob(states)  # (64,)
    binary = states[[3, 17, 40]].numpy()
    np.testing.assert_allclose(est.score_samples(binary), log_p[[3, 17, 40]].numpy(), rtol=1e-13)
    np.testing.assert_allclose(est.score_samples(sp.csr_matrix(binary)), log_p[[3, 17, 40]].numpy(), rtol=1e-13)


# -- against scikit-learn's BernoulliRBM ------------------------------------------------------------


def _copy_sklearn_weights(est: RBMEstimator, sk: SkBernoulliRBM) -> None:
    with torch.no_grad():
        est.model_.weight.copy_(torch.from_numpy(sk.components_.T.copy()))
        est.model_.hidden_bias.copy_(torch.from_numpy(sk.intercept_hidden_))
        est.model_.visible_bias.copy_(torch.from_numpy(sk.intercept_visible_))
    est.log_partition_ = None


def test_transform_has_scikit_learns_layout_and_meaning():
    x = _binary(80).astype(np.float32)
    sk = SkBernoulliRBM(n_components=4, n_iter=3, random_state=0).fit(x)
    est = RBMEstimator(4, n_iter=0, random_state=0).fit(x)
    _copy_sklearn_weights(est, sk)
    assert est.components_.shape == sk.components_.shape == (4, 8)
    np.testing.assert_allclose(est.transform(x), sk.transform(x), rtol=1e-5)  # float32 parameters, p(h = 1 | x)


def test_pseudo_likelihood_is_the_mean_of_scikit_learns_one_site_score_samples():
    # scikit-learn's score_samples is D log p(x_i | x_-i) for one random site i per row; averaged over
    # i it is the exact pseudo-log-likelihood sum_i log p(x_i | x_-i) that pseudo_likelihood returns
    x = _binary(30)
    sk = SkBernoulliRBM(n_components=4, n_iter=3, random_state=0).fit(x)
    est = RBMEstimator(4, n_iter=0, random_state=0).fit(x)
    _copy_sklearn_weights(est, sk)
    model = copy.deepcopy(est.model_).double()
    with torch.no_grad():
        flip = model.flip_logits(torch.from_numpy(x))  # log-odds of x_i = 1 given the rest
        site_terms = -torch.nn.functional.softplus(-(2 * torch.from_numpy(x) - 1) * flip)  # log p(x_i | x_-i)
    d = x.shape[1]
    sk_scores = sk.score_samples(x)  # one random site per row
    nearest = np.abs(d * site_terms.numpy() - sk_scores[:, None]).min(1)
    np.testing.assert_array_less(nearest, 1e-5)  # each value is D log p(x_i | x_-i) for some site i
    np.testing.assert_allclose(est.pseudo_likelihood(x), site_terms.sum(1).numpy(), rtol=1e-12)
    np.testing.assert_allclose(est.pseudo_likelihood(x), (d * site_terms).mean(1).numpy(), rtol=1e-12)


# -- optional dependency ----------------------------------------------------------------------------


@pytest.mark.slow  # a new process: ~5 s
def test_works_without_scikit_learn_and_importing_ebms_models_or_fit_does_not_load_it():
    script = textwrap.dedent(
        """
        import sys
        import numpy as np
        import ebms.models
        assert "sklearn" not in sys.modules, "import ebms.models loaded scikit-learn"
        import ebms.fit
        assert "sklearn" not in sys.modules, "import ebms.fit loaded scikit-learn"
        sys.modules["sklearn"] = None  # from here on, importing scikit-learn fails
        from ebms.fit import RBMEstimator
        x = (np.random.default_rng(0).random((30, 5)) < 0.4).astype(np.float64)
        est = RBMEstimator(2, n_iter=2, random_state=0)
        try:
            est.transform(x)
        except ValueError as err:
            assert isinstance(err, AttributeError) and "not fitted yet" in str(err)
        est.fit(x)
        assert est.transform(x).shape == (30, 2) and est.transform(x).dtype == np.float64
        assert est.n_features_in_ == 5 and np.isfinite(est.score(x))
        assert est.set_params(n_iter=1).get_params()["n_iter"] == 1
        for bad, text in [(x[:, :3], "X has 3 features, but RBMEstimator is expecting 5 features as input."),
                          (x * 2, "X: expected values in [0, 1]"), (np.full((2, 5), np.nan), "X: expected finite"),
                          (np.zeros(5), "X: expected a 2-D array")]:
            try:
                est.transform(bad)
            except ValueError as err:
                assert text in str(err), str(err)
            else:
                raise AssertionError(text)
        print("ok", "sklearn" in sys.modules and sys.modules["sklearn"] is None)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok True"

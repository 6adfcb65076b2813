"""RBMEstimator's errors name its own arguments: scikit-learn's ``validate_data`` messages come back as
one line naming ``X`` (they used to pass through as "Expected 2D array ..." on several lines), sizes
that cannot be allocated name ``n_components`` / ``ais_chains`` (a torch allocator traceback before),
a bad AIS schedule names ``ais_betas`` (``betas`` before), and ``score_samples`` refuses non-binary
rows for Bernoulli visibles (accepted silently before)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("sklearn")

from ebms.fit import RBMEstimator  # noqa: E402


def _x(n: int = 30, d: int = 5) -> np.ndarray:
    return (np.random.default_rng(0).random((n, d)) < 0.4).astype(np.float64)


@pytest.mark.parametrize(
    ("bad", "kind", "text"),
    [
        (np.zeros(5), ValueError, r"X: Expected 2D array, got 1D array instead\. Reshape your data either using"),
        (torch.ones(3), ValueError, r"X: Expected 2D array, got 1D array instead\. Reshape your data"),
        (np.zeros((2, 3, 4)), ValueError, r"X: Found array with dim 3, while dim <= 2 is required by RBMEstimator\."),
        (np.array([["a", "b"]]), ValueError, r"X: expected a 2-D array of real numbers \(n_samples, n_features\); "
                                             r"could not convert string to float"),
        ([[1.0, 0.0], [1.0]], ValueError, r"X: expected a 2-D array of real numbers .*inhomogeneous"),
        (np.ones((3, 2), complex), ValueError, r"X: Complex data not supported$"),
        (np.full((3, 2), np.nan), ValueError, r"X: expected finite values; Input X contains NaN\.$"),
        (np.full((3, 2), np.inf), ValueError, r"X: expected finite values; Input X contains infinity"),
        (np.zeros((0, 3)), ValueError, r"X: Found array with 0 sample\(s\) \(shape=\(0, 3\)\) while a minimum of 1"),
        (np.zeros((3, 0)), ValueError, r"X: Found array with 0 feature\(s\)"),
    ],
)
def test_fit_input_errors_name_x_on_one_line(bad, kind, text):
    with pytest.raises(kind, match=text) as info:
        RBMEstimator(2, n_iter=1).fit(bad)
    assert "\n" not in str(info.value)


def test_inference_input_errors_name_x():
    est = RBMEstimator(2, n_iter=1, random_state=0).fit(_x())
    with pytest.raises(ValueError, match=r"^X has 3 features, but RBMEstimator is expecting 5 features as input\.$"):
        est.transform(_x()[:, :3])
    with pytest.raises(ValueError, match=r"^X: Expected 2D array, got 1D array instead\."):
        est.score_samples(_x()[0])


def test_sizes_that_cannot_be_allocated_name_the_argument():
    x = _x()
    with pytest.raises(ValueError, match=r"^n_components: 1000000000000 hidden units x 5 features need about .* GiB, "
                                         r"more than this machine's .* GiB of memory; use fewer n_components$"):
        RBMEstimator(10**12, n_iter=1).fit(x)
    est = RBMEstimator(2, n_iter=1, ais_chains=10**13, random_state=0).fit(x)
    with pytest.raises(ValueError, match=r"^ais_chains: 10000000000000 chains of 5 visible and 2 hidden units need "
                                         r"about .* GiB.*; use fewer ais_chains$"):
        est.score_samples(x, log_z="ais")


def test_an_allocator_failure_becomes_a_message_naming_n_components(monkeypatch):
    from ebms.fit import rbm_estimator

    def refuse(self, n_features):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory")

    monkeypatch.setattr(rbm_estimator.RBMEstimator, "_new_model", refuse)
    with pytest.raises(ValueError, match=r"^n_components: 3 hidden units x 5 features could not be allocated "
                                         r"\(.*can't allocate memory\); use fewer n_components$"):
        RBMEstimator(3, n_iter=1).fit(_x())


def test_a_bad_ais_schedule_names_ais_betas_when_fitting():
    with pytest.raises(ValueError, match=r"^ais_betas: expected to start at 0 and end at 1; got first 0.5, last 0.2$"):
        RBMEstimator(2, ais_betas=[0.5, 0.2]).fit(_x())
    with pytest.raises(TypeError, match=r"^ais_betas: expected a sequence of numbers or a 1-D tensor; got 'fast'$"):
        RBMEstimator(2, ais_betas="fast").fit(_x())


def test_score_samples_refuses_non_binary_rows_for_bernoulli_visibles_only():
    x = _x()
    est = RBMEstimator(2, n_iter=1, random_state=0).fit(x)
    grey = x * 0.5
    with pytest.raises(ValueError, match=r"^X: expected binary values \(0 or 1\) for score_samples with "
                                         r"visible='bernoulli'.*e\.g\. 0\.5; binarise X first"):
        est.score_samples(grey)
    assert est.transform(grey).shape == (30, 2)  # Bernoulli means stay fine for features
    assert np.isfinite(est.score_samples(x)).all()
    gauss = RBMEstimator(2, n_iter=1, visible="gaussian", random_state=0).fit(x)
    assert np.isfinite(gauss.score_samples(grey)).all()  # real-valued visibles score any real data

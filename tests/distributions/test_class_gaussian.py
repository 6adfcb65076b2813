"""ClassConditionalGaussian: fitted moments in closed form, log_prob against torch, sample moments, validation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.distributions import MultivariateNormal

from ebms.distributions.class_gaussian import ClassConditionalGaussian

DTYPES = [torch.float32, torch.float64]


def _data(dtype=torch.float64, n=(30, 50, 20), d=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    xs, ys = [], []
    for c, m in enumerate(n):
        a = torch.randn(d, d, generator=g, dtype=dtype)
        xs.append(torch.randn(m, d, generator=g, dtype=dtype) @ a + 3.0 * c)
        ys.append(torch.full((m,), c))
    perm = torch.randperm(sum(n), generator=g)
    return torch.cat(xs)[perm], torch.cat(ys)[perm]


@pytest.mark.parametrize("shrinkage", [0.0, 0.3, 1.0])
def test_fit_matches_the_closed_form(shrinkage):
    x, y = _data()
    q = ClassConditionalGaussian.fit(x, y, shrinkage=shrinkage)
    xn, yn = x.numpy(), y.numpy()
    for c in range(3):
        rows = xn[yn == c]
        s = np.cov(rows, rowvar=False)  # unbiased, 1/(n_c - 1)
        want = (1 - shrinkage) * s + shrinkage * np.trace(s) / 3 * np.eye(3)
        np.testing.assert_allclose(q.means[c].numpy(), rows.mean(0), rtol=0, atol=1e-12)
        np.testing.assert_allclose(q.covariance()[c].numpy(), want, rtol=0, atol=1e-12)
        # shrinking towards (tr S / D) I keeps the trace
        assert abs(float(q.covariance()[c].trace()) - np.trace(s)) < 1e-12
    np.testing.assert_allclose(q.log_weights.exp().numpy(), [0.3, 0.5, 0.2], rtol=0, atol=1e-15)
    assert q.n_classes == 3 and q.event_shape == (3,) and q.means.dtype == torch.float64


def test_log_prob_matches_torch_multivariate_normal_and_the_mixture():
    x, y = _data()
    q = ClassConditionalGaussian.fit(x, y, shrinkage=0.2)
    z = torch.randn(9, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(5)) * 3
    labels = torch.tensor([0, 1, 2, 2, 1, 0, 0, 1, 2])
    per = torch.stack([MultivariateNormal(q.means[c], q.covariance()[c]).log_prob(z) for c in range(3)], dim=1)
    torch.testing.assert_close(q.log_prob(z, labels), per[torch.arange(9), labels], rtol=0, atol=1e-10)
    torch.testing.assert_close(q.log_prob(z), torch.logsumexp(per + q.log_weights, 1), rtol=0, atol=1e-10)
    torch.testing.assert_close(q.class_log_prob(z), per, rtol=0, atol=1e-10)


@pytest.mark.parametrize("dtype", DTYPES)
def test_sample_moments_match_the_fitted_moments(dtype):
    x, y = _data(dtype)
    q = ClassConditionalGaussian.fit(x, y, shrinkage=0.0)
    n = 20000
    g = torch.Generator().manual_seed(3)
    for c in range(3):
        s = q.sample(n, g, torch.full((n,), c)).double()
        assert s.dtype == torch.float64 and s.shape == (n, 3)
        mu, cov = q.means[c].double(), q.covariance()[c].double()
        var = cov.diagonal()
        # z = 5 per coordinate (about 1e-5 two-sided across the 9 means and 27 covariance entries here)
        assert torch.all((s.mean(0) - mu).abs() < 5 * (var / n).sqrt())
        emp = torch.cov(s.T)
        se = ((var[:, None] * var[None, :] + cov**2) / n).sqrt()  # Gaussian sample-covariance std error
        assert torch.all((emp - cov).abs() < 5 * se)


def test_unlabelled_draws_pick_classes_from_the_weights_first():
    x, y = _data()
    q = ClassConditionalGaussian.fit(x, y, shrinkage=0.1)
    n = 30000
    g = torch.Generator().manual_seed(4)
    s = q.sample(n, g)
    # documented draw order: the classes (multinomial on the weights), then the normals
    g = torch.Generator().manual_seed(4)
    labels = torch.multinomial(q.log_weights.exp(), n, replacement=True, generator=g)
    assert torch.equal(s, q.sample(n, g, labels))
    frac = torch.bincount(labels, minlength=3).double() / n
    w = q.log_weights.exp()
    assert torch.all((frac - w).abs() < 5 * (w * (1 - w) / n).sqrt())  # z = 5 binomial bound per class
    a = q.sample(5, torch.Generator().manual_seed(9))
    assert torch.equal(a, q.sample(5, torch.Generator().manual_seed(9)))


def test_images_keep_their_event_shape():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(40, 1, 2, 2, generator=g)
    y = torch.arange(40) % 4
    q = ClassConditionalGaussian.fit(x, y, shrinkage=0.5)
    s = q.sample(6, g, torch.tensor([0, 1, 2, 3, 0, 1]))
    assert s.shape == (6, 1, 2, 2) and q.log_prob(s).shape == (6,) and s.dtype == torch.float32
    assert q.double().sample(2, g).dtype == torch.float64


def test_shrinkage_makes_a_degenerate_class_usable():
    # a constant pixel and fewer rows than dimensions: S is singular, the shrunk covariance is not
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 5, generator=g, dtype=torch.float64)
    x[:, 0] = 1.0
    y = torch.tensor([0, 0, 0, 1, 1, 1])
    with pytest.raises(ValueError, match=r"shrinkage: the covariance of class 0 is not positive definite with "
                                         r"shrinkage=0.0 \(zero variance in some direction\); use a shrinkage > 0"):
        ClassConditionalGaussian.fit(x, y, shrinkage=0.0)
    q = ClassConditionalGaussian.fit(x, y, shrinkage=0.1)
    assert bool(torch.isfinite(q.log_prob(x)).all())


def test_validation_messages():
    x, y = _data()
    with pytest.raises(ValueError, match=r"shrinkage: expected a number in \[0.0, 1.0\]; got 1.5"):
        ClassConditionalGaussian.fit(x, y, shrinkage=1.5)
    with pytest.raises(TypeError, match=r"y: expected a LongTensor of class indices; got dtype torch.float32"):
        ClassConditionalGaussian.fit(x, y.float())
    with pytest.raises(ValueError, match=r"y: expected shape \(100,\); got \(99,\)"):
        ClassConditionalGaussian.fit(x, y[:99])
    with pytest.raises(ValueError, match=r"y: expected values in \[0, 1\]; got min 0, max 2"):
        ClassConditionalGaussian.fit(x, y, n_classes=2)
    with pytest.raises(ValueError, match=r"y: expected at least 2 rows per class to fit a covariance; classes \[3\]"):
        ClassConditionalGaussian.fit(x, y, n_classes=4)
    with pytest.raises(ValueError, match=r"x: expected at least 2 rows; got shape \(1, 3\)"):
        ClassConditionalGaussian.fit(x[:1], y[:1])
    with pytest.raises(ValueError, match=r"x: expected a finite tensor; got 1 NaN"):
        ClassConditionalGaussian.fit(torch.where(x == x[0, 0], math.nan, x), y)
    with pytest.raises(TypeError, match=r"x: expected a floating-point tensor; got dtype torch.int64"):
        ClassConditionalGaussian.fit(y[:, None].repeat(1, 2), y)
    with pytest.raises(ValueError, match=r"n_classes: expected an int >= 1; got 0"):
        ClassConditionalGaussian.fit(x, y, n_classes=0)
    q = ClassConditionalGaussian.fit(x, y)
    with pytest.raises(TypeError, match=r"labels: expected a LongTensor of class indices; got dtype torch.int32"):
        q.sample(2, None, torch.tensor([0, 1], dtype=torch.int32))
    with pytest.raises(ValueError, match=r"labels: expected values in \[0, 2\]; got min 0, max 3"):
        q.sample(2, None, torch.tensor([0, 3]))
    with pytest.raises(ValueError, match=r"labels: expected shape \(3,\); got \(2,\)"):
        q.sample(3, None, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"n: expected an int >= 1; got 0"):
        q.sample(0)
    with pytest.raises(ValueError, match=r"x: expected shape \(B, 3\); got \(2, 4\)"):
        q.log_prob(torch.zeros(2, 4, dtype=torch.float64))
    m, L, w = q.means, q.scale_tril, q.log_weights
    with pytest.raises(ValueError, match=r"means: expected shape \(C, D\) with C, D >= 1; got \(3,\)"):
        ClassConditionalGaussian(m[0], L, w)
    with pytest.raises(TypeError, match=r"means: expected a floating-point tensor; got dtype torch.int64"):
        ClassConditionalGaussian(m.long(), L, w)
    with pytest.raises(ValueError, match=r"means: expected a finite tensor; got 1 NaN and 0 Inf entries"):
        ClassConditionalGaussian(torch.where(m == m[0, 0], math.nan, m), L, w)
    with pytest.raises(ValueError, match=r"log_weights: expected shape \(3,\); got \(2,\)"):
        ClassConditionalGaussian(m, L, w[:2])
    with pytest.raises(ValueError, match=r"scale_tril: expected shape \(3, 3, 3\); got \(3, 3\)"):
        ClassConditionalGaussian(m, L[0], w)
    with pytest.raises(ValueError, match=r"scale_tril: expected lower-triangular Cholesky factors with a positive"):
        ClassConditionalGaussian(m, L.transpose(-1, -2), w)
    with pytest.raises(ValueError, match=r"log_weights: expected log-probabilities \(logsumexp 0\); got logsumexp"):
        ClassConditionalGaussian(m, L, w + 1)
    with pytest.raises(ValueError, match=r"event_shape: expected positive ints whose product is D=3; got \(2, 2\)"):
        ClassConditionalGaussian(m, L, w, event_shape=(2, 2))

"""classifier_scores and frechet_distance against closed forms and scipy."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.linalg
import torch

from ebms.metrics.sample_quality import classifier_scores, frechet_distance


def test_classifier_scores_by_hand():
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 3.0, 0.0], [0.0, 0.0, 0.0], [5.0, 0.0, 1.0]], dtype=torch.float64)
    got = classifier_scores(logits, threshold=0.8)
    p = torch.softmax(logits, 1)
    mean = p.mean(0)
    kl = float((p * (p.log() - mean.log())).sum(1).mean())
    assert got.confident == pytest.approx(float((p.max(1).values >= 0.8).double().mean()))
    assert got.confident == 0.5  # rows 1 and 3
    assert got.mean_top == pytest.approx(float(p.max(1).values.mean()), rel=1e-12)
    assert got.class_entropy == pytest.approx(float(-(mean * mean.log()).sum()), rel=1e-12)
    assert got.score == pytest.approx(math.exp(kl), rel=1e-12)
    assert got.counts == [3, 1, 0] and got.n == 4  # the tie of row 2 goes to the first class


def test_classifier_scores_at_the_extremes():
    K = 10
    uniform = classifier_scores(torch.zeros(50, K))
    assert uniform.confident == 0.0 and uniform.score == pytest.approx(1.0)
    assert uniform.class_entropy == pytest.approx(math.log(K))
    sure = classifier_scores(60.0 * torch.eye(K).repeat(3, 1))  # every class, each sample certain
    assert sure.confident == 1.0 and sure.score == pytest.approx(K, rel=1e-9)
    assert sure.class_entropy == pytest.approx(math.log(K)) and sure.counts == [3] * K
    collapsed = classifier_scores(torch.tensor([[60.0] + [0.0] * (K - 1)]).repeat(20, 1))
    assert collapsed.confident == 1.0 and collapsed.score == pytest.approx(1.0)
    assert collapsed.class_entropy == pytest.approx(0.0, abs=1e-12)


def test_frechet_distance_closed_forms():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(4000, 1, generator=g, dtype=torch.float64)
    b = 2.0 + 3.0 * torch.randn(3000, 1, generator=g, dtype=torch.float64)
    sa, sb = float(a.std()), float(b.std())
    want = (float(a.mean()) - float(b.mean())) ** 2 + (sa - sb) ** 2  # 1-D: (mu_a - mu_b)^2 + (s_a - s_b)^2
    assert frechet_distance(a, b) == pytest.approx(want, rel=1e-10)
    x = torch.randn(500, 3, generator=g, dtype=torch.float64) * torch.tensor([1.0, 2.0, 0.5], dtype=torch.float64)
    y = torch.randn(400, 3, generator=g, dtype=torch.float64) @ torch.tensor([[1.0, 0.3, 0.0], [0.0, 1.0, 0.2],
                                                                              [0.1, 0.0, 1.0]],
                                                                             dtype=torch.float64) + 0.7
    ca, cb = np.cov(x.numpy().T), np.cov(y.numpy().T)
    cross = scipy.linalg.sqrtm(ca @ cb).real
    want = float(((x.mean(0) - y.mean(0)) ** 2).sum()) + np.trace(ca) + np.trace(cb) - 2 * np.trace(cross)
    assert frechet_distance(x, y) == pytest.approx(want, rel=1e-9)
    assert frechet_distance(y, x) == pytest.approx(want, rel=1e-9)
    assert frechet_distance(x, x) == pytest.approx(0.0, abs=1e-9)
    assert frechet_distance(x.float(), y.float()) == pytest.approx(want, rel=1e-5)


@pytest.mark.parametrize(("call", "match"), [
    (lambda: classifier_scores(torch.zeros(0, 3)), r"^logits: expected at least one sample and two classes"),
    (lambda: classifier_scores(torch.zeros(4)), r"^logits: expected floating logits of shape \(B, K\)"),
    (lambda: classifier_scores(torch.tensor([[0.0, float("nan")]])), r"^logits: expected finite logits"),
    (lambda: classifier_scores(torch.zeros(2, 3), threshold=1.0), r"^threshold: expected"),
    (lambda: frechet_distance(torch.zeros(1, 2), torch.zeros(3, 2)), r"^a: expected at least 2 feature vectors"),
    (lambda: frechet_distance(torch.zeros(3, 2), torch.zeros(3, 4)), r"^b: expected features of width 2 as a; got 4"),
    (lambda: frechet_distance(torch.zeros(3, 2, dtype=torch.long), torch.zeros(3, 2)), r"^a: expected floating"),
])
def test_bad_inputs_name_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()

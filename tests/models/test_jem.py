"""JEM and ScalarHeadEBM: energies and conditionals agree with the classifier's softmax exactly; gradients; validation."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ebms.energy import energy_and_grad
from ebms.models.jem import JEM, ScalarHeadEBM
from ebms.nets.classifier import ConvClassifier, MLPClassifier

DTYPES = [torch.float32, torch.float64]


def _jem(dtype=torch.float64, conv=False) -> JEM:
    torch.manual_seed(0)
    clf = ConvClassifier(1, 6, 4, channels=(8,), groups=4) if conv else MLPClassifier(3, 4, hidden=(16, 16))
    return JEM(clf.to(dtype), 4)


def _x(dtype=torch.float64, conv=False, n=7, seed=1) -> torch.Tensor:
    shape = (n, 1, 6, 6) if conv else (n, 3)
    return 2 * torch.randn(shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("conv", [False, True], ids=["mlp", "conv"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_energies_and_conditional_are_the_classifiers_own_ops(dtype, conv):
    jem, x = _jem(dtype, conv), _x(dtype, conv)
    logits = jem.classifier(x)
    y = torch.tensor([0, 3, 1, 2, 2, 0, 3])
    assert torch.equal(jem.logits(x), logits)
    assert torch.equal(jem.log_prob_y(x), torch.log_softmax(logits, dim=-1))
    assert torch.equal(jem(x), -torch.logsumexp(logits, dim=-1))
    assert torch.equal(jem.joint_energy(x, y), -logits[torch.arange(7), y])
    assert torch.equal(jem.predict(x), logits.argmax(-1))
    assert jem(x).dtype == dtype and not jem.predict(x).requires_grad


@pytest.mark.parametrize("dtype", DTYPES)
def test_bayes_rule_links_joint_marginal_and_conditional(dtype):
    # log p(y|x) = E(x) - E(x, y) and exp(-E(x)) = sum_y exp(-E(x, y)): different ops, so to rounding
    jem, x = _jem(dtype), _x(dtype)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    for c in range(4):
        y = torch.full((7,), c)
        torch.testing.assert_close(jem.log_prob_y(x)[:, c], jem(x) - jem.joint_energy(x, y), rtol=0, atol=tol)
    joint = torch.stack([jem.joint_energy(x, torch.full((7,), c)) for c in range(4)], dim=1)
    torch.testing.assert_close(jem(x), -torch.logsumexp(-joint, dim=1), rtol=0, atol=tol)
    torch.testing.assert_close(jem.log_prob_y(x).exp().sum(-1), torch.ones(7, dtype=dtype), rtol=0, atol=tol)


@pytest.mark.parametrize("dtype", DTYPES)
def test_class_energy_gradient_equals_autograd_of_the_negated_logit(dtype):
    jem, x = _jem(dtype), _x(dtype)
    for c in (0, 3):
        e, g = energy_and_grad(jem.class_energy(c), x)
        xg = x.clone().requires_grad_(True)
        ref = -jem.classifier(xg)[:, c]
        (g_ref,) = torch.autograd.grad(ref.sum(), xg)
        assert torch.equal(e, ref.detach()) and torch.equal(g, g_ref)
    y = torch.tensor([0, 3, 1, 2, 2, 0, 3])
    e, g = energy_and_grad(jem.class_energy(y), x)
    xg = x.clone().requires_grad_(True)
    ref = -jem.classifier(xg).gather(1, y[:, None]).squeeze(1)
    (g_ref,) = torch.autograd.grad(ref.sum(), xg)
    assert torch.equal(e, ref.detach()) and torch.equal(g, g_ref)
    assert torch.equal(jem.class_energy(y)(x), jem.joint_energy(x, y))


def test_marginal_energy_gradient_is_the_softmax_average_of_class_gradients():
    # grad E(x) = sum_y p(y|x) grad E(x, y): exact identity, float64 rounding
    jem, x = _jem(), _x()
    _, g = energy_and_grad(jem, x)
    p = jem.log_prob_y(x).exp().detach()
    per_class = torch.stack([energy_and_grad(jem.class_energy(c), x)[1] for c in range(4)], dim=1)
    torch.testing.assert_close(g, (p[:, :, None] * per_class).sum(1), rtol=0, atol=1e-12)


def test_parameters_are_the_classifiers_and_class_energy_shares_them():
    jem = _jem()
    assert [id(p) for p in jem.parameters()] == [id(p) for p in jem.classifier.parameters()]
    assert {id(p) for p in jem.class_energy(1).parameters()} == {id(p) for p in jem.parameters()}


def test_scalar_head_ebm_is_minus_w_dot_trunk_and_shares_the_trunk():
    torch.manual_seed(0)
    clf = MLPClassifier(3, 4, hidden=(16, 8)).double()
    ebm = ScalarHeadEBM(clf.trunk, clf.features).double()
    x = _x()
    h = clf.trunk(x)
    assert torch.equal(ebm(x), -(h @ ebm.head.weight[0]))
    assert ebm.trunk is clf.trunk and ebm.head.bias is None
    ebm(x).sum().backward()  # pre-training moves the classifier's trunk
    assert all(p.grad is not None for p in clf.trunk.parameters()) and clf.head.weight.grad is None
    assert torch.equal(ebm.potential(x), -ebm(x))


# ----------------------------------------------------------------------------- validation


class _Bad(nn.Module):
    def __init__(self, out) -> None:
        super().__init__()
        self.out = out

    def forward(self, x):
        return self.out(x)


def test_validation_messages():
    with pytest.raises(TypeError, match=r"classifier: expected an nn.Module returning \(B, K\) logits; got function"):
        JEM(lambda x: x, 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"n_classes: expected an int >= 2; got 1"):
        JEM(nn.Linear(3, 1), 1)
    with pytest.raises(ValueError, match=r"classifier\(x\): expected shape \(7, 5\); got \(7, 4\)"):
        JEM(nn.Linear(3, 4).double(), 5)(_x())
    with pytest.raises(ValueError, match=r"classifier\(x\): expected shape \(7, 4\); got \(7,\)"):
        JEM(_Bad(lambda x: x.sum(-1)), 4)(_x())
    with pytest.raises(TypeError, match=r"classifier\(x\): expected a tensor of shape \(B, 4\); got tuple"):
        JEM(_Bad(lambda x: (x,)), 4)(_x())
    with pytest.raises(TypeError, match=r"classifier\(x\): expected floating-point logits; got dtype torch.int64"):
        JEM(_Bad(lambda x: torch.zeros(x.shape[0], 4, dtype=torch.long)), 4)(_x())
    jem, x = _jem(), _x()
    with pytest.raises(TypeError, match=r"y: expected a LongTensor of class indices; got dtype torch.float32"):
        jem.joint_energy(x, torch.zeros(7))
    with pytest.raises(ValueError, match=r"y: expected shape \(7,\); got \(6,\)"):
        jem.joint_energy(x, torch.zeros(6, dtype=torch.long))
    with pytest.raises(ValueError, match=r"y: expected values in \[0, 3\]; got min -1, max 2"):
        jem.joint_energy(x, torch.tensor([0, 1, 2, -1, 0, 0, 0]))
    with pytest.raises(ValueError, match=r"y: expected a class in \[0, 3\]; got 4"):
        jem.class_energy(4)
    with pytest.raises(TypeError, match=r"y: expected an int class or a LongTensor \(B,\); got bool"):
        jem.class_energy(True)
    with pytest.raises(ValueError, match=r"y: expected an int class or a LongTensor \(B,\) with B >= 1; got shape \(2, 2\)"):
        jem.class_energy(torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"y: expected values in \[0, 3\]; got min 0, max 9"):
        jem.class_energy(torch.tensor([0, 9]))
    with pytest.raises(ValueError, match=r"x: expected 2 rows, one per label of class_energy\(y\); got 7"):
        jem.class_energy(torch.tensor([0, 1]))(x)
    with pytest.raises(TypeError, match=r"trunk: expected an nn.Module mapping x to \(B, H\) features; got int"):
        ScalarHeadEBM(3, 4)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"hidden: expected an int >= 1; got 0"):
        ScalarHeadEBM(nn.Linear(3, 4), 0)
    with pytest.raises(ValueError, match=r"trunk\(x\): expected features of shape \(7, 5\); got \(7, 4\)"):
        ScalarHeadEBM(nn.Linear(3, 4).double(), 5)(_x())

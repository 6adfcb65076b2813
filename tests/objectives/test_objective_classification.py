"""``CrossEntropy``: torch's cross-entropy over the labelled rows, nothing from the others."""

from __future__ import annotations

import pytest
import torch

from ebms.objectives.classification import CrossEntropy


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_equals_torch_cross_entropy_on_the_labelled_rows(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 3).to(dtype)
    x = torch.randn(9, 4, dtype=dtype)
    y = torch.tensor([0, 2, -1, 1, -1, 2, 0, -1, 1])
    out = CrossEntropy()(net, (x, y))
    ref = torch.nn.functional.cross_entropy(net(x[y >= 0]), y[y >= 0])
    assert torch.allclose(out.loss, ref, atol=1e-12 if dtype == torch.float64 else 1e-6)
    (g,) = torch.autograd.grad(out.loss, net.weight)
    (r,) = torch.autograd.grad(ref, net.weight)
    assert torch.allclose(g, r, atol=1e-12 if dtype == torch.float64 else 1e-6)
    assert out.metrics["labelled"] == pytest.approx(6 / 9)
    acc = float((net(x).argmax(1) == y)[y >= 0].double().mean())
    assert out.metrics["acc"] == pytest.approx(acc)


def test_a_batch_without_labels_gives_zero_and_a_model_with_logits_is_used() -> None:
    class WithLogits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(2, 3)

        def logits(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x)

        def forward(self, x: torch.Tensor) -> torch.Tensor:  # an energy, not logits
            return -torch.logsumexp(self.lin(x), -1)

    out = CrossEntropy()(WithLogits(), (torch.randn(3, 2), torch.full((3,), -1)))
    assert float(out.loss.detach()) == 0.0 and out.metrics["labelled"] == 0.0


@pytest.mark.parametrize("batch, match", [
    (torch.zeros(2, 2), "batch: expected a pair"),
    ((torch.zeros(2, 2), torch.zeros(2)), "y: expected a LongTensor of shape"),
    ((torch.zeros(2, 2), torch.tensor([0, 3])), r"y: expected labels in \[-1, 2\]"),
    ((torch.zeros(2, 2), torch.tensor([0, -2])), r"y: expected labels in \[-1, 2\]"),
])
def test_bad_batches(batch: object, match: str) -> None:
    with pytest.raises((TypeError, ValueError), match=match):
        CrossEntropy()(torch.nn.Linear(2, 3), batch)


def test_logits_of_the_wrong_shape() -> None:
    with pytest.raises(ValueError, match=r"model: expected logits of shape \(2, K\)"):
        CrossEntropy()(lambda x: x.sum(1), (torch.zeros(2, 2), torch.tensor([0, 1])))

"""Semiring operations against direct computations on small tensors."""

from __future__ import annotations

import itertools

import pytest
import torch

from ebms.structured import KMaxSemiring, LogSemiring, MaxSemiring


def test_log_semiring_sum_and_plus_are_logsumexp() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 3, 4, generator=g, dtype=torch.float64)
    s = LogSemiring()
    torch.testing.assert_close(s.sum(x, dim=-1), x.exp().sum(-1).log())
    torch.testing.assert_close(s.plus(x, x), (2 * x.exp()).log())
    assert s.lift(x[0]).shape == (1, 3, 4) and s.zero == float("-inf") and s.one == 0.0


def test_max_semiring_sum_and_plus_are_max() -> None:
    x = torch.tensor([[[1.0, 3.0, 2.0]]])
    s = MaxSemiring()
    assert s.sum(x, dim=-1).item() == 3.0
    assert s.plus(x, x + 1).max().item() == 4.0


def test_kmax_sum_keeps_k_largest_candidates_in_order() -> None:
    g = torch.Generator().manual_seed(1)
    k, n = 3, 4
    sr = KMaxSemiring(k)
    x = torch.randn(k, 2, n, generator=g, dtype=torch.float64)
    got = sr.sum(x, dim=-1)
    want = torch.stack([x[:, b].flatten().sort(descending=True).values[:k] for b in range(2)], 1)
    torch.testing.assert_close(got, want)


def test_kmax_times_then_sum_equals_topk_of_all_path_sums() -> None:
    g = torch.Generator().manual_seed(2)
    k = 4
    sr = KMaxSemiring(k)
    a = torch.randn(3, generator=g, dtype=torch.float64)
    b = torch.randn(3, 3, generator=g, dtype=torch.float64)
    total = sr.sum(sr.times(sr.lift(a).unsqueeze(-1), b), dim=-2)  # (k, 3)
    for j in range(3):
        cands = sorted((a[i] + b[i, j]).item() for i in range(3))[::-1]
        want = torch.tensor(cands + [float("-inf")] * (k - 3), dtype=torch.float64)
        torch.testing.assert_close(total[:, j], want)


def test_kmax_plus_is_topk_of_union() -> None:
    sr = KMaxSemiring(2)
    a = torch.tensor([[5.0], [1.0]])
    b = torch.tensor([[3.0], [2.0]])
    assert sr.plus(a, b).flatten().tolist() == [5.0, 3.0]
    assert list(itertools.chain(sr.lift(torch.tensor([7.0])).flatten().tolist())) == [7.0, float("-inf")]


def test_kmax_rejects_bad_k_and_leading_axis_sum() -> None:
    with pytest.raises(ValueError, match=r"k: expected an int >= 1; got 0"):
        KMaxSemiring(0)
    with pytest.raises(TypeError, match=r"k: expected an int"):
        KMaxSemiring(2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"dim: expected an axis after the leading"):
        KMaxSemiring(2).sum(torch.zeros(2, 3), dim=0)

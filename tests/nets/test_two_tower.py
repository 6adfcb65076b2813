"""TwoTowerCloze: a cloze law that never reads the token it predicts."""

from __future__ import annotations

import math

import pytest
import torch

from ebms.nets.two_tower import TwoTowerCloze
from ebms.sequences import Sequences

V = 7
KINDS = ["transformer", "lstm"]


def _model(kind: str, seed: int = 0) -> TwoTowerCloze:
    torch.manual_seed(seed)
    return TwoTowerCloze(V, dim=8, layers=2, heads=2, kind=kind).eval()


@pytest.mark.parametrize("kind", KINDS)
def test_two_tower_never_sees_the_predicted_token(kind):
    q = _model(kind).requires_grad_(False)
    x = Sequences.from_lists([[1, 2, 3, 4, 5]])
    base = q.log_probs(x)[0]
    L = 5
    for t in range(L):
        for s in range(L):
            tokens = x.tokens.clone()
            tokens[0, s] = 6 if int(tokens[0, s]) != 6 else 1
            moved = q.log_probs(x.with_tokens(tokens))[0, t]
            diff = float((moved - base[t]).abs().nan_to_num(0.0).max())
            if s == t:
                assert diff == 0.0, (t, s)
            else:  # every other token is read by one of the towers
                assert diff > 1e-6, (t, s)


@pytest.mark.parametrize("kind", KINDS)
def test_two_tower_gradient_at_a_position_ignores_its_own_embedding(kind):
    q = _model(kind)
    x = Sequences.from_lists([[2, 3, 4]])
    for tower in (q.left, q.right):
        tower.embedding.weight.grad = None
    lp = q.log_probs(x)
    lp[0, 1, 1:].sum().backward()  # position 1 reads tokens 2 (left) and 4 (right), not 3
    for tower in (q.left, q.right):
        g = tower.embedding.weight.grad
        assert g is not None
        assert float(g[3].abs().max()) == 0.0
    assert float(q.left.embedding.weight.grad[2].abs().max()) > 0
    assert float(q.right.embedding.weight.grad[4].abs().max()) > 0


@pytest.mark.parametrize("kind", KINDS)
def test_two_tower_rows_are_laws_over_the_tokens(kind):
    q = _model(kind)
    x = Sequences.from_lists([[1, 2, 3], [4], [6, 6]])
    lp = q.log_probs(x)
    mask = x.mask()
    assert lp.shape == (3, 3, V)
    assert torch.allclose(lp[mask].logsumexp(-1), torch.zeros(int(mask.sum())), atol=1e-5)
    assert bool((lp[mask][:, 0] == -math.inf).all())  # the boundary is never a token
    assert bool((lp[~mask] == 0).all())


@pytest.mark.parametrize("kind", KINDS)
def test_two_tower_ignores_padding_and_batch_mates(kind):
    q = _model(kind)
    x = Sequences.from_lists([[1, 2, 3], [4, 5]])
    padded = Sequences(torch.tensor([[1, 2, 3, 6, 6, 6], [4, 5, 3, 2, 1, 6]]), torch.tensor([3, 2]))
    a, b = q.log_probs(x), q.log_probs(padded)
    assert torch.allclose(a[x.mask()], b[:, :3][x.mask()], atol=1e-5)
    alone = q.log_probs(Sequences.from_lists([[4, 5]]))
    assert torch.allclose(alone[0], a[1, :2], atol=1e-5)
    assert b.shape == (2, 6, V)


def test_two_tower_replacements_follow_q_and_keep_other_tokens():
    q = _model("transformer")
    n = 4000
    x = Sequences(torch.tensor([[1, 2, 3]]).repeat(n, 1))
    positions = torch.zeros(n, 3, dtype=torch.bool)
    positions[:, 1] = True
    draws = q.sample_replacements(x, positions, generator=torch.Generator().manual_seed(3))
    assert bool((draws[:, 0] == 1).all()) and bool((draws[:, 2] == 3).all())
    p = q.log_probs(x[0])[0, 1].exp().detach()
    freq = torch.bincount(draws[:, 1], minlength=V).double() / n
    assert float(freq[0]) == 0.0
    # z = 4 per category (7 categories, family-wise level ~4e-4)
    se = (p * (1 - p) / n).sqrt().double()
    assert bool(((freq - p.double()).abs() <= 4 * se + 1e-12).all()), (freq, p)


def test_two_tower_reuses_given_log_probs():
    q = _model("lstm")
    x = Sequences.from_lists([[1, 2], [3]])
    pos = x.mask()
    lp = q.log_probs(x)
    a = q.sample_replacements(x, pos, generator=torch.Generator().manual_seed(0), log_probs=lp)
    b = q.sample_replacements(x, pos, generator=torch.Generator().manual_seed(0))
    assert torch.equal(a, b)
    assert not a.requires_grad


def test_two_tower_validation_messages():
    with pytest.raises(ValueError, match="kind: expected one of transformer, lstm; got 'gru'"):
        TwoTowerCloze(V, dim=8, kind="gru")
    with pytest.raises(ValueError, match="heads: expected a divisor of dim=8; got 3"):
        TwoTowerCloze(V, dim=8, heads=3)
    with pytest.raises(ValueError, match="vocab_size: expected an int >= 2"):
        TwoTowerCloze(1, dim=8)
    q = _model("lstm")
    with pytest.raises(TypeError, match="x: expected Sequences of token ids; got Tensor"):
        q.log_probs(torch.tensor([[1, 2]]))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"x: expected token ids in \[1, 6\] \(id 0 is the boundary\); got 0 at "
                                         r"sequence 0, position 1"):
        q.log_probs(Sequences.from_lists([[1, 0]]))
    with pytest.raises(ValueError, match="x: expected token ids in .* got 7 at sequence 1, position 0"):
        q.log_probs(Sequences.from_lists([[1], [7]]))
    x = Sequences.from_lists([[1, 2], [3]])
    with pytest.raises(TypeError, match="positions: expected a bool tensor"):
        q.sample_replacements(x, torch.ones(2, 2))
    with pytest.raises(ValueError, match=r"positions: expected a bool tensor of shape \(2, 2\)"):
        q.sample_replacements(x, torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="positions: expected True only at real tokens"):
        q.sample_replacements(x, torch.ones(2, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="log_probs: expected shape"):
        q.sample_replacements(x, x.mask(), log_probs=torch.zeros(2, 2, 3))

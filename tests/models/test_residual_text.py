"""ResidualTextClassifier and MaskedCompletionLM: mask counts, what completion keeps and draws, the MLM loss by
hand, padding independence, and one trainer-free step of the joint objective on sentences."""

from __future__ import annotations

import math

import pytest
import torch

from ebms.models import MaskedCompletionLM, ResidualTextClassifier, mask_positions
from ebms.objectives import ResidualJointNCE
from ebms.sequences import Sequences


def _sentences() -> Sequences:
    return Sequences.from_lists([[1, 2, 3, 4, 5], [2, 2], [3], [], [4, 1, 2, 3, 4, 5, 1, 2, 3, 4]])


@pytest.mark.parametrize("ratio", [0.15, 0.4, 0.5, 1.0])
def test_mask_positions_counts_and_placement(ratio: float) -> None:
    x = _sentences()
    pos = mask_positions(x, ratio, generator=torch.Generator().manual_seed(0))
    want = [0 if n == 0 else max(1, math.floor(ratio * n + 0.5)) for n in x.lengths.tolist()]
    assert pos.sum(1).tolist() == want
    assert not bool((pos & ~x.mask()).any())


def test_mask_positions_are_uniform() -> None:
    x = Sequences.from_lists([[1, 2, 3, 4]] * 4000)
    pos = mask_positions(x, 0.5, generator=torch.Generator().manual_seed(1))  # 2 of 4 per row
    freq = pos.double().mean(0)
    assert freq.tolist() == pytest.approx([0.5] * 4, abs=0.03)


def test_completion_keeps_unmasked_tokens_and_draws_valid_ids() -> None:
    torch.manual_seed(0)
    lm = MaskedCompletionLM(6, dim=8, mask_ratio=0.4)
    x = _sentences()
    out = lm.complete(x, n=3, generator=torch.Generator().manual_seed(2))
    assert out.batch_size == 3 * x.batch_size
    assert out.lengths.tolist() == x.lengths.repeat_interleave(3).tolist()
    rep = x.tokens.repeat_interleave(3, 0)
    real = out.mask()
    changed_max = [0 if n == 0 else max(1, math.floor(0.4 * n + 0.5)) for n in out.lengths.tolist()]
    assert ((out.tokens != rep) & real).sum(1).le(torch.tensor(changed_max)).all()
    assert bool(((out.tokens >= 1) & (out.tokens <= 5))[real].all())


def test_completion_draws_from_the_model_law() -> None:
    """An output layer that puts all mass on token 4 makes every masked token a 4."""
    lm = MaskedCompletionLM(6, dim=4, mask_ratio=0.5)
    with torch.no_grad():
        lm.output.weight.zero_()
        lm.output.bias.fill_(-1e4)
        lm.output.bias[4] = 0.0
    x = Sequences.from_lists([[1, 2, 3, 5], [2, 3]])
    g = torch.Generator().manual_seed(3)
    pos = mask_positions(x, 0.5, generator=torch.Generator().manual_seed(3))
    out = lm.complete(x, generator=g)
    assert out.tokens[pos].tolist() == [4] * int(pos.sum())
    assert out.tokens[~pos & x.mask()].tolist() == x.tokens[~pos & x.mask()].tolist()


def test_log_probs_are_normalised_and_loss_is_their_masked_mean() -> None:
    torch.manual_seed(1)
    lm = MaskedCompletionLM(7, dim=5, mask_ratio=0.4).double()
    x = _sentences()
    masked = x.with_tokens(x.tokens.masked_fill(mask_positions(x, 0.4, generator=torch.Generator().manual_seed(4)), 7))
    lp = lm.log_probs(masked).detach()
    real = x.mask()
    assert lp.shape == (5, 10, 7)
    assert lp[real].exp().sum(-1).tolist() == pytest.approx([1.0] * int(real.sum()), abs=1e-12)
    assert bool(torch.isinf(lp[real][:, 0]).all())
    pos = mask_positions(x, 0.4, generator=torch.Generator().manual_seed(4))
    ref = -sum(float(lp[b, t, x.tokens[b, t]]) for b, t in pos.nonzero().tolist()) / int(pos.sum())
    assert lm.loss(x, generator=torch.Generator().manual_seed(4)).item() == pytest.approx(ref, rel=1e-12)


def test_classifier_is_independent_of_padding_and_joint_matches_logits() -> None:
    torch.manual_seed(0)
    for kind in ("cnn", "bilstm"):
        clf = ResidualTextClassifier(6, 3, embedding_dim=4, hidden=5, kind=kind).double().eval()
        x = _sentences()
        wide = x.pad_to(14)
        logits, scalar = clf.joint(x)
        assert logits.shape == (5, 3) and scalar.shape == (5,)
        assert torch.allclose(clf.logits(wide), logits, atol=1e-12)
        assert torch.equal(clf(x), clf.logits(x))
        assert torch.equal(logits[3], clf.head.bias)  # the empty sentence encodes to zeros
        one = clf.logits(x[0])
        assert torch.allclose(one, logits[:1], atol=1e-12)


def test_one_joint_step_on_sentences_lowers_the_loss() -> None:
    torch.manual_seed(0)
    clf = ResidualTextClassifier(6, 2, embedding_dim=8, hidden=8)
    lm = MaskedCompletionLM(6, dim=4)
    x = Sequences.from_lists([[1, 2, 3], [4, 5], [1, 1, 2, 2]])
    y = torch.tensor([0, 1, 0])
    noise = lm.complete(x, n=2, generator=torch.Generator().manual_seed(0))
    obj = ResidualJointNCE(energy="scalar", nu=2)
    opt = torch.optim.SGD(clf.parameters(), lr=0.1)
    first = obj(clf, (x, y, noise)).loss
    for _ in range(20):
        loss = obj(clf, (x, y, noise)).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert obj(clf, (x, y, noise)).loss.item() < first.item()


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="mask_ratio"):
        MaskedCompletionLM(5, mask_ratio=0.0)
    with pytest.raises(ValueError, match=r"x: expected token ids in \[1, 4\]"):
        MaskedCompletionLM(5).complete(Sequences.from_lists([[1, 5]]))
    with pytest.raises(ValueError, match="n_classes"):
        ResidualTextClassifier(5, 1)

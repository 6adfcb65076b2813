"""The conditional and sequence objectives, ``objective(model, batch, generator=)``, beyond the generic contract.

Their cases (``CASES``: a tiny model and batch per objective) live in tests/_objective_cases.py, and
the generic contract every objective follows (signature, ``LossOutput``, gradients, the generator,
bad batches, state) runs on them in tests/test_contracts.py. Here: the ``Trainer`` runs each, the
tagging objectives take ``Sequences`` batches, and the conditional objectives take any model whose
distribution offers the method they need (``log_prob`` / ``score``), not only CRFs.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from _objective_cases import CASES, B, C, Frames, T, V, speech, tagger, tagging
from torch import Tensor, nn

from ebms._numerics import softplus
from ebms.objectives import ConditionalML, ConditionalNCE, CTCObjective, TagBigramNoise
from ebms.sequences import Sequences
from ebms.train import Trainer


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_trainer_runs_the_objective(name, tmp_path):
    objective, model, data = CASES[name]()
    trainer = Trainer(objective, model, data, steps=2, batch_size=3, run_dir=tmp_path, log_every=1,
                      checkpoint_every=None, progress=False)
    result = trainer.fit()
    assert result.step == 2 and math.isfinite(result.metrics["loss"])


def test_conditional_nce_noise_is_a_submodule_saved_and_moved_with_the_objective():
    noise = TagBigramNoise.uniform(C)
    objective = ConditionalNCE(noise, nu=1)
    assert objective.state_dict().keys() == {"noise.table"}
    assert objective.to("cpu").noise is noise  # the trainer's .to(device) moves it in place


def test_sequences_batches_give_the_tuple_batches_loss():
    words, tags, lengths = tagging()
    model = tagger()
    for objective in (ConditionalML(), ConditionalNCE(TagBigramNoise.uniform(C), nu=2)):
        a = objective(model, (words, tags, lengths), generator=torch.Generator().manual_seed(1))
        b = objective(model, (words, Sequences(tags, lengths)), generator=torch.Generator().manual_seed(1))
        assert torch.equal(a.loss, b.loss)
    features, flen, targets, tlen = speech()
    a = CTCObjective()(Frames(), (features, flen, targets, tlen))
    b = CTCObjective()(Frames(), (features, flen, Sequences(targets, tlen)))
    assert torch.equal(a.loss, b.loss)


# --- models other than CRFs -------------------------------------------------------------------


class _Independent:
    """p(y | x) = prod_t softmax(logits_t)[y_t]: normalised, so log_prob and score coincide."""

    def __init__(self, logits: Tensor, lengths: Tensor) -> None:
        self.logp, self.lengths = logits.log_softmax(-1), lengths

    def log_prob(self, tags: Tensor) -> Tensor:
        valid = torch.arange(tags.shape[1]) < self.lengths[:, None]
        per = self.logp.gather(-1, tags.clamp(0, C - 1).unsqueeze(-1)).squeeze(-1)
        return torch.where(valid, per, per.new_zeros(())).sum(1)

    score = log_prob


class _IndependentTagger(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.table = nn.Parameter(torch.randn(V, C, generator=g, dtype=torch.float64))

    def forward(self, words: Tensor, lengths: Tensor) -> Any:
        return _Independent(self.table[words], lengths)


def test_conditional_ml_takes_any_model_offering_log_prob():
    model = _IndependentTagger()
    words, tags, lengths = tagging()
    out = ConditionalML()(model, (words, tags, lengths))
    with torch.no_grad():
        want = -sum(float(model.table[words[i, t]].log_softmax(-1)[tags[i, t]]) for i in range(B)
                    for t in range(int(lengths[i]))) / B
    assert float(out.loss.detach()) == pytest.approx(want, rel=1e-12)


def test_conditional_nce_takes_any_model_offering_score():
    model, noise, nu = _IndependentTagger(), TagBigramNoise.uniform(C), 2
    words, tags, lengths = tagging()
    out = ConditionalNCE(noise, nu=nu)(model, (words, tags, lengths), generator=torch.Generator().manual_seed(4))
    ys = noise.sample(nu * B, lengths=lengths.repeat(nu), generator=torch.Generator().manual_seed(4))
    ys = ys.tokens[:, :T].reshape(nu, B, T)
    dist = model(words, lengths)
    log_q = -lengths.double() * math.log(C)  # uniform noise
    g_data = dist.score(tags) - math.log(nu) - log_q
    g_noise = torch.stack([dist.score(ys[j]) - math.log(nu) - log_q for j in range(nu)])
    want = (softplus(-g_data).sum() + softplus(g_noise).sum()) / B
    torch.testing.assert_close(out.loss, want, rtol=1e-12, atol=0)


def test_a_distribution_without_the_needed_method_is_named():
    class ScoreOnly(nn.Module):
        def forward(self, words: Tensor, lengths: Tensor) -> Any:
            class _S:
                def score(self, tags: Tensor) -> Tensor:
                    return tags.sum(1).double()

            return _S()

    with pytest.raises(TypeError, match=r"^model: expected forward\(\*inputs, lengths\) to return a distribution over "
                                        r"tag sequences with log_prob\(tags\) .*; got _S"):
        ConditionalML()(ScoreOnly(), tagging())

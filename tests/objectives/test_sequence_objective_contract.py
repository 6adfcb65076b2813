"""One contract table for the conditional and sequence objectives: ``objective(model, batch, generator=)``.

The unconditional objectives (``objective(energy, batch)``) have theirs in tests/test_contracts.py.
Every public objective of ``ebms.objectives`` whose ``forward`` takes a ``model`` must have an
entry here: it is an ``nn.Module``, returns a ``LossOutput`` with a differentiable 0-d loss and
float metrics, repeats itself from the generator, round-trips its state, and the ``Trainer``
runs it. The conditional objectives take any model whose distribution offers the method they
need (``log_prob`` / ``score``), not only CRFs: checked with a non-CRF model at the end.
"""

from __future__ import annotations

import copy
import inspect
import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor, nn

import ebms.objectives as objectives_pkg
from ebms._numerics import softplus
from ebms.distributions import NGram
from ebms.models import JEM, JRF, BernoulliRBM, ElectricCloze, FeatureCRF, ResidualLM
from ebms.models.crf_tagger import NeuralCRFTagger
from ebms.models.crf_transducer import CRFTransducer
from ebms.models.lm import LSTMLM
from ebms.models.rnnt_aligned import AlignedRNNT
from ebms.models.trf import TRF, DiscreteFeatures, feature_templates
from ebms.nets import MLPClassifier, NoiseConditionalEnergy, TextEnergy, TwoTowerCloze
from ebms.objectives import (
    EARM,
    TRFNCE,
    AugSA,
    AutoregressiveNLL,
    BeamEarlyUpdate,
    ConditionalML,
    ConditionalNCE,
    CorpusRowsObjective,
    CrossEntropy,
    CTCObjective,
    DynamicNCE,
    ElectricNCE,
    FeatureCRFLikelihood,
    JEMObjective,
    JRFObjective,
    LossOutput,
    RBMContrastiveDivergence,
    RecoveryLikelihood,
    ReplayBuffer,
    ResidualNCE,
    TagBigramNoise,
    TransducerML,
)
from ebms.samplers import SGLD
from ebms.sequences import Sequences
from ebms.structured import DenominatorGraph, LabelNGram
from ebms.structured.features import AttributeVocabulary
from ebms.train import Trainer

B, T, V, C = 6, 5, 9, 3


def _tagging(seed: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(1, V, (B, T), generator=g), torch.randint(0, C, (B, T), generator=g),
            torch.tensor([5, 2, 3, 5, 1, 4]))


def _tagger() -> nn.Module:
    torch.manual_seed(0)
    return NeuralCRFTagger(V, C, embedding_dim=4, hidden=3)


class _Frames(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.proj = nn.Linear(2, 4)

    def forward(self, x: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        return self.proj(x).log_softmax(-1).transpose(0, 1), lengths


def _speech() -> tuple[Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    targets = torch.randint(1, 4, (B, 3), generator=g)
    return (torch.randn(B, 8, 2, generator=g), torch.tensor([8, 7, 8, 6, 8, 7]), targets,
            torch.tensor([3, 2, 3, 1, 2, 3]))


def _ctc_crf() -> CTCObjective:
    return CTCObjective(DenominatorGraph.from_ngram(LabelNGram.fit([[1, 2, 3], [2, 2], [3, 1]], 4, 2)), ctc_weight=0.1)


def _feature_crf() -> tuple[nn.Module, nn.Module, tuple[Tensor, ...]]:
    """A feature CRF over 6 sentences of 2 random attributes per position (ids into 7 attributes)."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 7, (B, T, 2), generator=g)
    values = torch.rand(B, T, 2, generator=g, dtype=torch.float64)
    tags, lengths = _tagging()[1:]
    objective = FeatureCRFLikelihood.from_padded(ids, values, lengths, tags, n_attributes=7, l2=0.01)
    torch.manual_seed(0)
    return objective, FeatureCRF(7, C).double(), (torch.arange(B),)


def _corpus_rows() -> tuple[nn.Module, nn.Module, tuple[Tensor, ...]]:
    """Conditional NCE over the rows of an unpadded corpus of 6 sentences (2 attributes per token)."""
    g = torch.Generator().manual_seed(0)
    tags, lengths = _tagging()[1:]
    seqs = [[{f"a{int(a)}": 1.0 for a in torch.randint(0, 7, (2,), generator=g)} for _ in range(int(n))]
            for n in lengths]
    vocab = AttributeVocabulary.fit(seqs)
    inner = ConditionalNCE(TagBigramNoise.fit(tags, lengths, C), nu=2)
    torch.manual_seed(0)
    return CorpusRowsObjective(vocab.encode_flat(seqs), inner), FeatureCRF(len(vocab), C).double(), (
        torch.arange(B), tags, lengths)


def _lm() -> nn.Module:
    torch.manual_seed(0)
    return LSTMLM(V, embedding_dim=4, hidden_size=3, num_layers=1)


def _rbm(*, persistent: bool) -> tuple[nn.Module, nn.Module, Tensor]:
    g = torch.Generator().manual_seed(0)
    return (RBMContrastiveDivergence(persistent=persistent), BernoulliRBM(6, 3, generator=g),
            torch.bernoulli(torch.full((B, 6), 0.3), generator=g))


def _trf_case(objective: nn.Module) -> tuple[nn.Module, nn.Module, tuple[Tensor, Tensor]]:
    """A TRF LM with bigram features over the 6 tagging sentences (ids 1..V-1, lengths 1..5)."""
    words, _, lengths = _tagging()
    corpus = Sequences(words, lengths)
    feats = DiscreteFeatures.fit(corpus, V, feature_templates(("w",), order=2))
    return objective, TRF.from_corpus(feats, corpus, vocab_size=V), (words, lengths)


def _residual_case() -> tuple[nn.Module, nn.Module, tuple[Tensor, ...]]:
    """A residual EBM over the LSTM LM: prefixes are the tagging sentences' first two tokens."""
    words, _, lengths = _tagging()
    prefix = Sequences(words[:, :2], lengths.clamp(max=2))
    positive = Sequences(words[:, 2:], (lengths - 2).clamp(min=0))
    torch.manual_seed(0)
    model = ResidualLM(_lm(), TextEnergy(V, kind="bilstm", dim=4, layers=1), horizon=3)
    negatives = model.sample_base(prefix, 2, generator=torch.Generator().manual_seed(1))
    return ResidualNCE(nu=2), model, ResidualNCE.pack(prefix, positive, negatives)


def _electric_case() -> tuple[nn.Module, nn.Module, tuple[Tensor, Tensor]]:
    words, _, lengths = _tagging()
    torch.manual_seed(0)
    model = ElectricCloze(V, dim=8, layers=1, heads=2, max_length=T, noise=TwoTowerCloze(V, dim=8, layers=1, heads=2))
    return ElectricNCE(mask_rate=0.3), model, (words, lengths)


def _jem_case(objective: nn.Module) -> tuple[nn.Module, nn.Module, tuple[Tensor, Tensor]]:
    """A 3-class JEM on 4-dimensional points, half the rows unlabelled (y = -1)."""
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    y = torch.tensor([0, 1, 2, -1, -1, 1])
    return objective, JEM(MLPClassifier(4, C, hidden=(8,)), C), (torch.randn(B, 4, generator=g), y)


def _jrf_case() -> tuple[nn.Module, nn.Module, tuple[Tensor, Tensor, Tensor]]:
    """A JRF on the tagging sentences, the last three unlabelled (tags -1), an LSTM noise LM."""
    words, tags, lengths = _tagging()
    tags = tags.clone()
    tags[3:] = -1
    torch.manual_seed(0)
    model = JRF(V, C, max_length=T, embed=4, hidden=3)
    return JRFObjective(_lm(), alpha=0.5), model, (words, tags, lengths)


def _recovery_case() -> tuple[nn.Module, nn.Module, Tensor]:
    torch.manual_seed(0)
    model = NoiseConditionalEnergy(4, 3, trunk="mlp", hidden=(8,))
    return RecoveryLikelihood([0.05, 0.1, 0.2], k=2), model, torch.randn(B, 4, generator=torch.Generator().manual_seed(0))


Case = Callable[[], tuple[nn.Module, nn.Module, Any]]

#: name -> () -> (objective, model, training data)
CASES: dict[str, Case] = {
    "ConditionalML": lambda: (ConditionalML(l2=0.01), _tagger(), _tagging()),
    "ConditionalNCE": lambda: (ConditionalNCE(TagBigramNoise.fit(_tagging()[1], _tagging()[2], C), nu=2),
                               _tagger(), _tagging()),
    "TransducerML": lambda: (TransducerML(), AlignedRNNT(V, C, embedding_dim=4, hidden=3, label_dim=2,
                                                         label_hidden=3), _tagging()),
    "BeamEarlyUpdate": lambda: (BeamEarlyUpdate(2), CRFTransducer(V, C, embedding_dim=4, hidden=3, label_dim=2,
                                                                  label_hidden=3), _tagging()),
    "CTCObjective": lambda: (CTCObjective(), _Frames(), _speech()),
    "CTCObjective-crf": lambda: (_ctc_crf(), _Frames(), _speech()),
    "FeatureCRFLikelihood": lambda: _feature_crf(),
    "CorpusRowsObjective": lambda: _corpus_rows(),
    "AutoregressiveNLL": lambda: (AutoregressiveNLL(), _lm(), (_tagging()[0], _tagging()[2])),
    "AutoregressiveNLL-bptt": lambda: (AutoregressiveNLL(carry_state=True), _lm(),
                                       (_tagging()[0][:, :-1], _tagging()[0][:, 1:])),
    "RBMContrastiveDivergence": lambda: _rbm(persistent=False),
    "RBMContrastiveDivergence-pcd": lambda: _rbm(persistent=True),
    "AugSA": lambda: _trf_case(AugSA(chains=4)),
    "TRFNCE": lambda: _trf_case(TRFNCE(NGram.fit(Sequences(_tagging()[0], _tagging()[2]), V, order=1), nu=2)),
    "DynamicNCE": lambda: _trf_case(DynamicNCE(_lm(), nu=1)),
    "EARM": lambda: (EARM(), _lm(), (_tagging()[0], _tagging()[2])),
    "EARM-active": lambda: (EARM(weight=0.5, truncate=1), _lm(), (_tagging()[0], _tagging()[2])),
    "ResidualNCE": lambda: _residual_case(),
    "ElectricNCE": lambda: _electric_case(),
    "JEMObjective": lambda: _jem_case(JEMObjective(SGLD(0.5, 0.01), ReplayBuffer(32, 4), k=2, warmup_steps=3)),
    "JEMObjective-conditional": lambda: _jem_case(JEMObjective(SGLD(0.5, 0.01), ReplayBuffer(33, 4, n_classes=C),
                                                               k=2, conditional=True)),
    "CrossEntropy": lambda: _jem_case(CrossEntropy()),
    "RecoveryLikelihood": lambda: _recovery_case(),
    "JRFObjective": lambda: _jrf_case(),
}


def test_every_public_model_objective_is_in_the_table():
    public = {
        name for name in objectives_pkg.__all__
        if inspect.isclass(getattr(objectives_pkg, name)) and issubclass(getattr(objectives_pkg, name), nn.Module)
        and list(inspect.signature(getattr(objectives_pkg, name).forward).parameters)[1:2] == ["model"]
    }
    assert public == {name.split("-")[0] for name in CASES}


@pytest.mark.parametrize("name", sorted(CASES))
def test_signature_and_output_follow_the_contract(name):
    objective, model, data = CASES[name]()
    assert isinstance(objective, nn.Module)
    params = inspect.signature(objective.forward).parameters
    assert list(params)[:2] == ["model", "batch"]
    assert params["generator"].kind is inspect.Parameter.KEYWORD_ONLY
    twin = copy.deepcopy(objective)  # stateful objectives (PCD chains) repeat from the same state
    out = objective(model, data, generator=torch.Generator().manual_seed(0))
    assert isinstance(out, LossOutput) and out.loss.dim() == 0 and bool(torch.isfinite(out.loss))
    if getattr(type(objective), "sets_gradients", False):  # analytic gradients written into .grad
        assert all(p.grad is not None and bool(torch.isfinite(p.grad).all()) for p in model.parameters())
        assert not out.loss.requires_grad and out.negatives is not None
        for p in model.parameters():
            p.grad = None
    else:  # negatives, when returned, are the samples the loss contrasted (Electric's noised tokens)
        assert out.loss.requires_grad and (out.negatives is None or isinstance(out.negatives, Tensor))
    assert out.metrics and all(isinstance(v, float) for v in out.metrics.values())
    again = twin(model, data, generator=torch.Generator().manual_seed(0))
    assert torch.equal(out.loss, again.loss) and out.metrics == again.metrics


@pytest.mark.parametrize("name", sorted(CASES))
def test_state_round_trips_through_state_dict(name):
    a, b = CASES[name]()[0], CASES[name]()[0]
    b.load_state_dict(a.state_dict())
    assert a.state_dict().keys() == b.state_dict().keys()
    for k, v in a.state_dict().items():
        assert torch.equal(v, b.state_dict()[k]), k


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
    words, tags, lengths = _tagging()
    model = _tagger()
    for objective in (ConditionalML(), ConditionalNCE(TagBigramNoise.uniform(C), nu=2)):
        a = objective(model, (words, tags, lengths), generator=torch.Generator().manual_seed(1))
        b = objective(model, (words, Sequences(tags, lengths)), generator=torch.Generator().manual_seed(1))
        assert torch.equal(a.loss, b.loss)
    features, flen, targets, tlen = _speech()
    a = CTCObjective()(_Frames(), (features, flen, targets, tlen))
    b = CTCObjective()(_Frames(), (features, flen, Sequences(targets, tlen)))
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
    words, tags, lengths = _tagging()
    out = ConditionalML()(model, (words, tags, lengths))
    with torch.no_grad():
        want = -sum(float(model.table[words[i, t]].log_softmax(-1)[tags[i, t]]) for i in range(B)
                    for t in range(int(lengths[i]))) / B
    assert float(out.loss.detach()) == pytest.approx(want, rel=1e-12)


def test_conditional_nce_takes_any_model_offering_score():
    model, noise, nu = _IndependentTagger(), TagBigramNoise.uniform(C), 2
    words, tags, lengths = _tagging()
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
        ConditionalML()(ScoreOnly(), _tagging())

"""One contract table for every sampler, objective and estimator in the package.

Each entry is a tiny-config factory; the generic tests below pin the shared
signatures of DESIGN.md so a later addition cannot drift from them. A
completeness test fails when a public ``Sampler`` subclass or objective (an
``nn.Module`` whose ``forward`` is annotated to return ``LossOutput``) is added
to the package without an entry here.

Objectives of an energy (``ON_ENERGY``) run on the MLP energy; the conditional and sequence
objectives, ``objective(model, batch)``, on the tiny models of tests/_objective_cases.py. Where a
generic check cannot apply to an objective, an exemption table says why and a nearer check runs.

Samplers run on a small MLP energy (continuous), a 6-spin Ising model (``DISCRETE``) or a
tiny TRF language model over token sequences (``SEQUENCE``: states are ``Sequences``); every
generic sampler check runs on each, with the start/energy faults phrased for its state type.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from typing import Any, get_type_hints

import pytest
import torch
from _objective_cases import CASES as MODEL_CASES
from torch import Tensor, nn

import ebms.models as models_pkg
import ebms.objectives as objectives_pkg
import ebms.samplers as samplers_pkg
from ebms.estimators import (
    BernoulliBase,
    Estimate,
    GeometricPath,
    ais,
    ais_bracket,
    exact_log_partition,
    grid_log_partition,
    importance_log_partition,
    linear_betas,
    log_likelihood_report,
    mcmc_mean,
)
from ebms.models import BernoulliRBM, IsingModel
from ebms.models.trf import TRF, DiscreteFeatures, feature_templates
from ebms.nets import GaussianEnergy, MLPEnergy
from ebms.objectives import (
    NCE,
    ContrastiveDivergence,
    DenoisingScoreMatching,
    EnergyMatching,
    GaussianNoise,
    ImprovedCD,
    InclusiveNRF,
    LatentGaussianGenerator,
    LossOutput,
    PersistentContrastiveDivergence,
    ReplayBuffer,
    ReservoirBuffer,
    ScoreMatching,
    SlicedScoreMatching,
)
from ebms.samplers import (
    HMC,
    MALA,
    SGLD,
    ULA,
    BlockGibbs,
    ChainState,
    Gibbs,
    GibbsWithGradients,
    IndependentCategorical,
    MetropolisHastings,
    MetropolisIndependence,
    MixAndMatch,
    ParallelTempering,
    Sampler,
    StepInfo,
    StepSizeAdaptation,
    TransDimensional,
)
from ebms.sequences import Sequences
from ebms.spaces import Binary, Reals, Spins, TokenSequences
from ebms.train.protocols import sets_gradients

D = 2
B = 16
#: discrete samplers run on a learnable 6-spin Ising model
N_SPINS = 6
SPINS = Spins(N_SPINS)
#: samplers over sentences (states are Sequences) run on a tiny TRF language model: tokens 1..3
#: (id 0 is the sentence boundary, never proposed), lengths 1..4
VOCAB, MAX_LENGTH = 4, 4
TOKENS = TokenSequences(VOCAB, MAX_LENGTH)
NO_BOUNDARY = torch.tensor([0.0, 1.0, 1.0, 1.0])

SAMPLERS: dict[str, Callable[[], Sampler]] = {
    "ULA": lambda: ULA(0.05),
    "SGLD": lambda: SGLD(0.02, 0.05),
    "MALA": lambda: MALA(0.2),
    "HMC": lambda: HMC(0.2, 3),
    "StepSizeAdaptation": lambda: StepSizeAdaptation(MALA(0.2)),
    "ParallelTempering": lambda: ParallelTempering(MALA(0.2), betas=[1.0, 0.5]),
    "Gibbs": lambda: Gibbs("random", space=SPINS),
    "BlockGibbs": lambda: BlockGibbs([[0, 2, 4], [1, 3, 5]], space=SPINS),
    "MetropolisHastings": lambda: MetropolisHastings(2, space=SPINS),
    "MetropolisIndependence": lambda: MetropolisIndependence(IndependentCategorical(SPINS), space=SPINS),
    "GibbsWithGradients": lambda: GibbsWithGradients(space=SPINS),
    "TransDimensional": lambda: TransDimensional(space=TOKENS, token_probs=NO_BOUNDARY),
    "MixAndMatch": lambda: MixAndMatch(lambda x, i: NO_BOUNDARY.log().expand(x.batch_size, VOCAB)),
}
DISCRETE = {"Gibbs", "BlockGibbs", "MetropolisHastings", "MetropolisIndependence", "GibbsWithGradients"}
#: samplers that need a target over token sequences (length and tokens), not fixed-size tensors
SEQUENCE = {"TransDimensional", "MixAndMatch"}
#: wrappers whose state stacks R replicas per chain (R*B rows) and caches tempered energies beta_r * E
REPLICATED = {"ParallelTempering": 2}


def _on_mlp(objective: nn.Module) -> tuple[nn.Module, nn.Module, torch.Tensor]:
    return objective, _energy(), _x0()


#: name -> () -> (objective, model or energy, batch); a name is the class, then "-variant"
OBJECTIVES: dict[str, Callable[[], tuple[nn.Module, Any, Any]]] = {
    "ContrastiveDivergence": lambda: _on_mlp(ContrastiveDivergence(ULA(0.05), k=2)),
    "PersistentContrastiveDivergence": lambda: _on_mlp(PersistentContrastiveDivergence(
        ULA(0.05), ReplayBuffer(64, Reals(D)), k=2
    )),
    "ScoreMatching": lambda: _on_mlp(ScoreMatching()),
    "DenoisingScoreMatching": lambda: _on_mlp(DenoisingScoreMatching(sigma=0.1)),
    "SlicedScoreMatching": lambda: _on_mlp(SlicedScoreMatching(1)),
    "NCE": lambda: _on_mlp(NCE(GaussianNoise(torch.zeros(D), 2.0), nu=1.0)),
    "ImprovedCD": lambda: _on_mlp(ImprovedCD(ULA(0.05), ReservoirBuffer(64, Reals(D)), k=2, entropy_weight=0.5)),
    "EnergyMatching": lambda: _on_mlp(EnergyMatching(epsilon_max=0.1, cd_weight=0.5, steps=2, dt=0.05)),
    "InclusiveNRF": lambda: _on_mlp(InclusiveNRF(LatentGaussianGenerator.mlp(D, latent_dim=2, hidden=(8,), sigma=0.3),
                                                 steps=2, step_size=0.01)),
    **MODEL_CASES,
}
#: objective(energy, batch) on the MLP energy; every other row is objective(model, batch)
ON_ENERGY = {"ContrastiveDivergence", "PersistentContrastiveDivergence", "ScoreMatching", "DenoisingScoreMatching",
             "SlicedScoreMatching", "NCE", "ImprovedCD", "EnergyMatching", "InclusiveNRF"}
#: objectives that report the health of a contrast: e_pos, e_neg and gap = e_neg - e_pos
CONTRASTIVE = {"ContrastiveDivergence", "PersistentContrastiveDivergence", "NCE", "ImprovedCD",
               "RBMContrastiveDivergence", "RBMContrastiveDivergence-pcd", "AugSA", "TRFNCE", "DynamicNCE",
               "ResidualNCE", "ResidualJointNCE", "ElectricNCE", "JEMObjective", "JEMObjective-conditional",
               "RecoveryLikelihood",
               "JRFObjective", "EnergyMatching", "InclusiveNRF"}
#: losses of the score only: an additive constant in E (the head's bias) cannot reach them.
#: (EnergyMatching: a score regression plus a difference of energies)
SCORE_BASED = {"ScoreMatching", "DenoisingScoreMatching", "SlicedScoreMatching", "EnergyMatching"}
#: trainable parameters an objective sets otherwise than by the gradient: (parameter, reason). A nearer
#: check runs instead (test_augsa_sets_log_z_in_place_not_by_gradient)
NO_GRADIENT = {
    "AugSA": ("log_z", "the TRF's per-length log Z moves by stochastic approximation (SAGain), in place"),
}
#: objectives that keep no state (their state_dict is empty); every other one round-trips a non-empty one
STATELESS = {"ContrastiveDivergence", "ScoreMatching", "DenoisingScoreMatching", "SlicedScoreMatching",
             "ConditionalML", "TransducerML", "BeamEarlyUpdate", "MonteCarloNLL", "CTCObjective", "CTCObjective-crf",
             "FeatureCRFLikelihood", "AutoregressiveNLL", "AutoregressiveNLL-bptt", "ResidualNCE", "ResidualJointNCE",
             "ElectricNCE",
             "CrossEntropy", "PixelNLL", "Seq2SeqNLL", "ClozePLL"}
#: batches that cannot hold a NaN (integer ids): their bad batch has an id of 100, out of every
#: vocabulary and corpus, at its first entry instead
NAN_BATCH_EXEMPT = {
    name: "integer batch (token, tag or sentence ids): the bad batch holds an out-of-range id instead"
    for name in ("ConditionalML", "ConditionalNCE", "TransducerML", "BeamEarlyUpdate", "MonteCarloNLL",
                 "FeatureCRFLikelihood",
                 "CorpusRowsObjective", "AutoregressiveNLL", "AutoregressiveNLL-bptt", "AugSA", "TRFNCE",
                 "DynamicNCE", "EARM", "EARM-active", "ResidualNCE", "ResidualJointNCE", "ElectricNCE", "JRFObjective",
                 "Seq2SeqNLL",
                 "ClozePLL")
}
#: how the refusal of a bad batch starts, where not "batch": the part of the batch named as the model
#: (or the objective) calls it. CTC's features are its acoustic model's input, which the objective cannot
#: check: their NaN is refused where it reaches the loss, as the model's log_probs.
BAD_BATCH_NAME = {
    "ConditionalML": "words", "ConditionalNCE": "words", "TransducerML": "words", "BeamEarlyUpdate": "words",
    "MonteCarloNLL": "words",
    "JRFObjective": "words", "CTCObjective": "log_probs", "CTCObjective-crf": "log_probs",
    "CorpusRowsObjective": "rows", "AutoregressiveNLL": "x", "EARM": "x", "EARM-active": "x", "ElectricNCE": "x",
    "PixelNLL": "x", "CrossEntropy": "x", "ResidualNCE": "prefix", "ResidualJointNCE": "x", "Seq2SeqNLL": "src", "ClozePLL": "x",
}


def _public_objectives(package: Any) -> set[str]:
    """The names in ``package.__all__`` of ``nn.Module`` classes whose ``forward`` returns ``LossOutput``."""
    names = set()
    for name in package.__all__:
        cls = getattr(package, name)
        if inspect.isclass(cls) and issubclass(cls, nn.Module):
            if get_type_hints(cls.forward).get("return") is LossOutput:
                names.add(name)
    return names


def _spoil(name: str, batch: Any) -> Any:
    """The batch with its first entry made bad: NaN in its first floating tensor, or id 100 (NAN_BATCH_EXEMPT)."""
    parts = [batch] if isinstance(batch, Tensor) else list(batch)
    at = next(i for i, t in enumerate(parts) if isinstance(t, Tensor)
              and (name in NAN_BATCH_EXEMPT or t.is_floating_point()))
    bad = parts[at].clone()
    bad.view(-1)[0] = 100 if name in NAN_BATCH_EXEMPT else float("nan")
    parts[at] = bad
    return bad if isinstance(batch, Tensor) else tuple(parts)


def _tiny_rbm() -> BernoulliRBM:
    return BernoulliRBM(6, 3, generator=torch.Generator().manual_seed(0))


def _rbm_path():
    return _tiny_rbm().ais_path(torch.zeros(6))


ESTIMATORS: dict[str, Callable[[], Estimate]] = {
    "grid_log_partition": lambda: grid_log_partition(
        GaussianEnergy(D, learnable=False), ((-8.0, 8.0), (-8.0, 8.0)), resolution=64
    ),
    "mcmc_mean": lambda: mcmc_mean(torch.randn(200, 4, generator=torch.Generator().manual_seed(0))),
    "exact_log_partition": lambda: exact_log_partition(_tiny_rbm(), Binary(6)),
    "importance_log_partition": lambda: importance_log_partition(
        _tiny_rbm(), BernoulliBase(torch.zeros(6)), 256, generator=torch.Generator().manual_seed(0)
    ),
    "ais": lambda: ais(_rbm_path(), 32, linear_betas(20), generator=torch.Generator().manual_seed(0)).estimate,
    "ais_bracket": lambda: ais_bracket(
        _rbm_path(), 32, linear_betas(20), Binary(6).random(32, generator=torch.Generator().manual_seed(1)),
        generator=torch.Generator().manual_seed(0),
    ),
    "ais_geometric_path": lambda: ais(
        GeometricPath(_tiny_rbm(), BernoulliBase(torch.zeros(6)), GibbsWithGradients(space=Binary(6))),
        32, linear_betas(20), generator=torch.Generator().manual_seed(0),
    ).estimate,
    "log_likelihood_report": lambda: log_likelihood_report(
        _tiny_rbm(), Binary(6).random(10, generator=torch.Generator().manual_seed(2)), 3.0
    ),
}


def _trf() -> TRF:
    """Bigram-feature TRF with random weights and a length prior over 1..4 (every length possible)."""
    corpus = Sequences.from_lists([[1, 2, 3], [2, 3], [3, 1, 1, 2], [1]])
    feats = DiscreteFeatures.fit(corpus, VOCAB, feature_templates(("w",), order=2))
    with torch.no_grad():
        feats.weight.copy_(torch.randn(feats.num_features, generator=torch.Generator().manual_seed(0)))
    return TRF(feats, torch.tensor([0.2, 0.3, 0.3, 0.2]), VOCAB)


def _energy(name: str = "") -> nn.Module:
    torch.manual_seed(0)
    if name in SEQUENCE:
        return _trf()
    if name in DISCRETE:
        J = 0.3 * torch.randn(N_SPINS, N_SPINS)
        J = torch.triu(J, 1) + torch.triu(J, 1).T
        return IsingModel(J, field=0.1 * torch.randn(N_SPINS), learn_couplings=True, learn_field=True)
    return MLPEnergy(D, (16,))


def _x0(seed: int = 0, name: str = "") -> torch.Tensor | Sequences:
    g = torch.Generator().manual_seed(seed)
    if name in SEQUENCE:  # random lengths, token ids 1..V-1 inside sentences
        x = TokenSequences(VOCAB - 1, MAX_LENGTH).random(B, generator=g)
        return Sequences(x.tokens + x.mask(), x.lengths)
    if name in DISCRETE:
        return SPINS.random(B, generator=g)
    return torch.randn(B, D, generator=g)


def _rows(name: str) -> int:
    return B * REPLICATED.get(name, 1)


def _shape(x: torch.Tensor | Sequences) -> tuple[int, ...]:
    """``(B, *event)`` of a tensor state; ``(B, T)`` (padded width) of a Sequences state."""
    return (x.batch_size, x.max_length) if isinstance(x, Sequences) else tuple(x.shape)


def _same(a: torch.Tensor | Sequences, b: torch.Tensor | Sequences) -> bool:
    if isinstance(a, Sequences) and isinstance(b, Sequences):
        return a.equal(b)
    assert isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
    return torch.equal(a, b)


# ---------------------------------------------------------------- completeness


def test_every_public_sampler_is_in_the_contract_table():
    public = {
        name
        for name in samplers_pkg.__all__
        if inspect.isclass(getattr(samplers_pkg, name))
        and issubclass(getattr(samplers_pkg, name), Sampler)
        and not inspect.isabstract(getattr(samplers_pkg, name))
    }
    assert public == set(SAMPLERS)


def test_every_public_objective_is_in_the_contract_table():
    # ebms.models too: no objective may live there (issue 25 moved PixelNLL and Seq2SeqNLL to objectives)
    public = _public_objectives(objectives_pkg) | _public_objectives(models_pkg)
    rows = {name.split("-")[0] for name in OBJECTIVES}
    assert not public - rows, f"objectives without a row in OBJECTIVES: {sorted(public - rows)}"
    assert not rows - public, f"rows of OBJECTIVES that are not public objectives: {sorted(rows - public)}"
    assert ON_ENERGY | CONTRASTIVE | SCORE_BASED | set(NO_GRADIENT) | STATELESS | set(BAD_BATCH_NAME) <= set(OBJECTIVES)


# ---------------------------------------------------------------- samplers


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_sampler_signatures_match_the_contract(name):
    s = SAMPLERS[name]()
    init = inspect.signature(s.init).parameters
    step = inspect.signature(s.step).parameters
    sample = inspect.signature(s.sample).parameters
    assert list(init)[:2] == ["energy", "x0"]
    assert list(step)[:2] == ["energy", "state"]
    assert step["generator"].kind is inspect.Parameter.KEYWORD_ONLY
    assert list(sample)[:3] == ["energy", "x0", "steps"]
    assert sample["generator"].kind is inspect.Parameter.KEYWORD_ONLY


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_sampler_step_returns_state_and_info_with_batch_shapes(name):
    s, e, x0 = SAMPLERS[name](), _energy(name), _x0(name=name)
    state = s.init(e, x0)
    assert isinstance(state, ChainState)
    state, info = s.step(e, state, generator=torch.Generator().manual_seed(1))
    assert isinstance(state, ChainState) and isinstance(info, StepInfo)
    rows = _rows(name)
    assert _shape(state.x) == (rows, *_shape(x0)[1:]) and state.energy.shape == (rows,) and state.t == 1
    if name in SEQUENCE:
        assert state.x.lengths.shape == (rows,) and TOKENS.validate(state.x) is state.x
    for field in ("accept_prob", "energy", "accepted", "nonfinite"):
        assert getattr(info, field).shape == (rows,), field
    assert info.acceptance_rate.dim() == 0 and info.mean_energy.dim() == 0
    assert 0.0 <= float(info.acceptance_rate) <= 1.0


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_sampler_cached_energy_equals_fresh_evaluation(name):
    s, e = SAMPLERS[name](), _energy(name)
    state = s.init(e, _x0(name=name))
    g = torch.Generator().manual_seed(2)
    for _ in range(3):
        state, _ = s.step(e, state, generator=g)
    beta = torch.ones(_shape(state.x)[0])
    if isinstance(s, ParallelTempering):  # cached energies are tempered: beta_r * E for replica r
        beta = torch.tensor(s.betas).repeat_interleave(B)
    with torch.no_grad():
        torch.testing.assert_close(state.energy, beta * e(state.x))


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_sampler_same_generator_seed_gives_same_chain(name):
    e = _energy(name)
    runs = [
        SAMPLERS[name]().sample(e, _x0(name=name), 4, generator=torch.Generator().manual_seed(seed))
        for seed in (3, 3, 4)
    ]
    assert _same(runs[0], runs[1])
    assert not _same(runs[0], runs[2])


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_sampler_leaves_parameters_untouched(name):
    e = _energy(name)
    before = {n: p.detach().clone() for n, p in e.named_parameters()}
    flags = {n: p.requires_grad for n, p in e.named_parameters()}
    assert before, "the contract energy must have parameters for this test to mean anything"
    SAMPLERS[name]().sample(e, _x0(name=name), 3, generator=torch.Generator().manual_seed(5))
    for n, p in e.named_parameters():
        assert p.grad is None, n
        assert p.requires_grad == flags[n], n
        assert torch.equal(p, before[n]), n


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_sampler_rejects_invalid_start_with_named_argument(name):
    x0 = _x0(name=name)
    if name in SEQUENCE:  # integer states cannot hold NaN: a token id outside the vocabulary instead
        x0.tokens[3, 0] = VOCAB
        msg = r"x0.tokens: expected token ids in \[0, 3\] \(vocab_size 4\); got 4 at sequence 3, position 0"
    else:
        x0[3, 1] = float("nan")
        msg = r"x0: expected values in \{-1, 1\}; got 1 other value" if name in DISCRETE else r"x0: expected a finite tensor; got 1 NaN"
    with pytest.raises(ValueError, match=msg):
        SAMPLERS[name]().init(_energy(name), x0)


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_sampler_rejects_energy_of_wrong_shape(name):
    if name in SEQUENCE:
        bad = lambda s: torch.zeros(s.batch_size, 1)  # noqa: E731
    else:
        bad = lambda x: (x**2).sum(-1, keepdim=True)  # (B, 1) instead of (B,)  # noqa: E731
    with pytest.raises(ValueError, match=r"energy\(x\): expected shape \(16,\); got \(16, 1\)"):
        SAMPLERS[name]().init(bad, _x0(name=name))


# ---------------------------------------------------------------- objectives


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_objective_signature_matches_the_contract(name):
    params = inspect.signature(OBJECTIVES[name]()[0].forward).parameters
    assert list(params)[:2] == (["energy", "batch"] if name in ON_ENERGY else ["model", "batch"])
    assert params["generator"].kind is inspect.Parameter.KEYWORD_ONLY


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_objective_returns_loss_output_with_health_metrics(name):
    obj, model, batch = OBJECTIVES[name]()
    out = obj(model, batch, generator=torch.Generator().manual_seed(0))
    assert isinstance(obj, nn.Module) and isinstance(out, LossOutput)
    assert out.loss.dim() == 0 and torch.isfinite(out.loss)
    if sets_gradients(obj):  # analytic gradients written into .grad; the loss carries no graph
        assert not out.loss.requires_grad and out.negatives is not None
        assert all(p.grad is not None and bool(torch.isfinite(p.grad).all()) for p in model.parameters())
    else:
        assert out.loss.requires_grad
    assert out.metrics and all(isinstance(v, float) for v in out.metrics.values())
    if name in CONTRASTIVE:
        assert {"e_pos", "e_neg", "gap"} <= set(out.metrics)
        assert out.metrics["gap"] == pytest.approx(out.metrics["e_neg"] - out.metrics["e_pos"], abs=1e-5)
    if out.negatives is not None:  # the samples the loss contrasted (Electric's: its noised tokens)
        assert isinstance(out.negatives, Tensor) and not out.negatives.requires_grad
        if name in ON_ENERGY:
            assert out.negatives.shape[1:] == (D,)


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_objective_backward_reaches_every_model_parameter(name):
    obj, model, batch = OBJECTIVES[name]()
    out = obj(model, batch, generator=torch.Generator().manual_seed(0))
    if not sets_gradients(obj):
        out.loss.backward()
    skip, _ = NO_GRADIENT.get(name, (None, ""))
    own = [(f"objective.{n}", p) for n, p in obj.named_parameters()]  # learned log Z, a trained noise LM
    for n, p in [*model.named_parameters(), *own]:
        if not p.requires_grad or n == skip:  # frozen by the model (ResidualLM's base LM), or NO_GRADIENT
            assert p.grad is None, n
        elif name in SCORE_BASED and n == "head.bias":
            assert p.grad is None or torch.all(p.grad == 0), "a constant energy shift has no score"
        else:
            assert p.grad is not None and torch.isfinite(p.grad).all(), n


def test_augsa_sets_log_z_in_place_not_by_gradient():
    obj, model, batch = OBJECTIVES["AugSA"]()
    before = model.log_z.detach().clone()
    for seed in (0, 1):  # the second call applies the first call's pending step
        obj(model, batch, generator=torch.Generator().manual_seed(seed))
    assert model.log_z.grad is None and not torch.equal(model.log_z.detach(), before)


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_objective_is_reproducible_from_the_generator(name):
    obj, model, batch = OBJECTIVES[name]()
    twin = copy.deepcopy(obj)  # stateful objectives (persistent chains) repeat from the same state
    out = obj(model, batch, generator=torch.Generator().manual_seed(7))
    again = twin(model, batch, generator=torch.Generator().manual_seed(7))
    assert torch.equal(out.loss, again.loss) and out.metrics == again.metrics


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_objective_rejects_nan_batch_naming_it(name):
    obj, model, batch = OBJECTIVES[name]()
    with pytest.raises(ValueError, match=rf"^{BAD_BATCH_NAME.get(name, 'batch')}\b"):
        obj(model, _spoil(name, batch), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_objective_state_round_trips_through_state_dict(name):
    factory = OBJECTIVES[name]
    a, model, batch = factory()
    b = factory()[0]
    a(model, batch, generator=torch.Generator().manual_seed(0))  # the state after a step: chains, pending steps
    assert (not a.state_dict()) == (name in STATELESS), "STATELESS lists exactly the objectives without state"
    b.load_state_dict(a.state_dict())
    assert a.state_dict().keys() == b.state_dict().keys()
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb and torch.equal(va, vb)


# ---------------------------------------------------------------- estimators


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_estimator_returns_estimate_with_uncertainty_and_settings(name):
    r = ESTIMATORS[name]()
    assert isinstance(r, Estimate)
    assert isinstance(r.estimate, float) and r.stderr >= 0.0
    assert r.settings, "an estimate records the settings it used"
    assert str(r)  # printable


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_sampler_refuses_to_start_where_the_energy_is_nan(name):
    x0: torch.Tensor | Sequences
    if name in SEQUENCE:
        bad = lambda s: torch.where(s.tokens[:, 0] == 2, torch.nan, s.lengths.float())  # noqa: E731
        x0 = Sequences(torch.ones(B, MAX_LENGTH, dtype=torch.long))
        x0.tokens[2, 0] = 2
    elif name in DISCRETE:
        bad = lambda x: torch.where(x[:, 0] > 0.0, torch.nan, (x**2).sum(-1))  # noqa: E731
        x0 = -torch.ones(B, N_SPINS)
        x0[2, 0] = 1.0
    else:
        bad = lambda x: torch.where(x[:, 0] > 1.0, torch.nan, (x**2).sum(-1))  # noqa: E731
        x0 = torch.zeros(B, D)
        x0[2, 0] = 2.0
    with pytest.raises(ValueError, match=r"energy\(x0\): expected a finite energy .* 1 chain\(s\), rows \[2\]"):
        SAMPLERS[name]().init(bad, x0)


def test_custom_gradient_of_wrong_shape_is_refused_not_broadcast():
    from ebms.energy import from_fn

    e = from_fn(lambda x: (x**2).sum(-1), grad_fn=lambda x: 2 * x)
    e.energy_and_grad = lambda x: ((x**2).sum(-1), (2 * x).sum(-1))  # (B,) instead of (B, D)
    with pytest.raises(ValueError, match=r"energy_and_grad\(x\)\[1\]: expected the gradient's shape \(16, 2\); got \(16,\)"):
        ULA(0.1).init(e, _x0())

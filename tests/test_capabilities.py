"""The capability protocols: the docs table matches what the built-in classes offer, and per-step
code resolves capabilities once (per class or object), not at every step."""

from __future__ import annotations

import inspect
import re
import typing
from pathlib import Path

import pytest
import torch

import ebms.capabilities as caps
from ebms.capabilities import (
    HasSpace,
    SupportsAllConditionalLogits,
    SupportsBlocks,
    SupportsConditionalLogits,
    SupportsEnergyAndGrad,
    SupportsTokenLogits,
    TransDimensionalTarget,
    supports,
)
from ebms.distributions import (
    BackoffNGram,
    Distribution,
    Gaussian,
    GaussianMixture,
    IndependentBernoulli,
    IndependentCategorical,
    NGram,
    TorchDistribution,
)
from ebms.energy import Energy, energy_and_grad, from_fn
from ebms.estimators import GeometricPath, LengthConditionalLM, ais, linear_betas
from ebms.models import (
    JEM,
    JRF,
    LSTMLM,
    AlignedRNNT,
    BernoulliRBM,
    CategoricalRBM,
    ElectricCloze,
    FeatureCRF,
    GaussianBernoulliRBM,
    IsingModel,
    NGramContinuations,
    PixelCNNAdapter,
    PixelCNNModel,
    PottsModel,
    ResidualLM,
    Seq2SeqAdapter,
    Seq2SeqTransformer,
    TransformerLM,
)
from ebms.models.lm import LMAdapter
from ebms.models.trf import GNELM, TRF, DiscreteFeatures, MixedEnergy, feature_templates
from ebms.nets import ConvEnergy, GaussianEnergy, MLPClassifier, MLPEnergy, PixelCNN, TextEnergy, TwoTowerCloze
from ebms.objectives.rbm_cd import ModelProducts
from ebms.samplers import (
    MALA,
    ULA,
    BlockGibbs,
    Gibbs,
    GibbsWithGradients,
    ParallelTempering,
    Sampler,
    TransDimensional,
)
from ebms.sequences import Sequences
from ebms.spaces import Categorical, Spins
from ebms.structured import LinearChainCRF

DOC = Path(__file__).resolve().parent.parent / "docs" / "capabilities.md"
PROTOCOLS = {n: getattr(caps, n) for n in caps.__all__ if inspect.isclass(getattr(caps, n))}
CORPUS = Sequences.from_lists([[1, 2], [2, 1, 1]])  # sentences over tokens 1..2 (0 is the boundary)


def _features() -> DiscreteFeatures:
    return DiscreteFeatures.fit(CORPUS, 3, feature_templates(("w",), order=2))


#: one small instance of every class the docs name; "Energy" and "Distribution" stand for every subclass.
FACTORIES = {
    "Energy": lambda: from_fn(lambda x: (x**2).sum(-1)),
    "Distribution": lambda: IndependentBernoulli(torch.zeros(3)),
    "MLPEnergy": lambda: MLPEnergy(2, (4,)),
    "ConvEnergy": lambda: ConvEnergy(1, 8, channels=(4,), groups=1),
    "GaussianEnergy": lambda: GaussianEnergy(2),
    "IsingModel": lambda: IsingModel.lattice(3, 3),
    "PottsModel": lambda: PottsModel.lattice(3, 3, 3),
    "BernoulliRBM": lambda: BernoulliRBM(4, 3),
    "GaussianBernoulliRBM": lambda: GaussianBernoulliRBM(4, 3),
    "CategoricalRBM": lambda: CategoricalRBM(3, 3, 2),
    "Gaussian": lambda: Gaussian(torch.zeros(2), std=1.0),
    "GaussianMixture": lambda: GaussianMixture([[0.0, 0.0], [1.0, 1.0]]),
    "IndependentBernoulli": lambda: IndependentBernoulli(torch.zeros(3)),
    "IndependentCategorical": lambda: IndependentCategorical(Categorical(2, 3), torch.zeros(2, 3)),
    "NGram": lambda: NGram.fit([[1, 2], [2, 2, 1]], 3, 2),
    "BackoffNGram": lambda: BackoffNGram.fit(Sequences.from_lists([[1, 2], [2, 2, 1]]), 3, 2, smoothing="witten_bell"),
    "LSTMLM": lambda: LSTMLM(4, embedding_dim=3, hidden_size=3, num_layers=1),
    "TransformerLM": lambda: TransformerLM(4, d_model=4, num_heads=1, num_layers=1, dim_feedforward=4),
    "LMAdapter": lambda: LMAdapter(LSTMLM(4, embedding_dim=3, hidden_size=3, num_layers=1), max_length=3),
    "LengthConditionalLM": lambda: LengthConditionalLM(LSTMLM(4, embedding_dim=3, hidden_size=3, num_layers=1)),
    "DiscreteFeatures": _features,
    "MixedEnergy": lambda: MixedEnergy(_features()),
    "TRF": lambda: TRF.from_corpus(_features(), CORPUS, vocab_size=3),
    "GNELM": lambda: GNELM(_features(), vocab_size=3, max_length=3),
    "TorchDistribution": lambda: TorchDistribution(torch.distributions.Normal(torch.zeros(2), 1.0)),
    "LinearChainCRF": lambda: LinearChainCRF(torch.zeros(2, 3, 2), torch.zeros(2, 2)),
    "GeometricPath": lambda: GeometricPath(IsingModel.lattice(2, 2), IndependentBernoulli(torch.zeros(2, 2)), Gibbs()),
    "BernoulliRBMAISPath": lambda: BernoulliRBM(4, 3).ais_path(),
    "JEM": lambda: JEM(MLPClassifier(2, 3, hidden=(4,)), 3),
    "JRF": lambda: JRF(4, 2, max_length=3, embed=3, hidden=2),
    "AlignedRNNT": lambda: AlignedRNNT(4, 2, embedding_dim=3, hidden=3, label_dim=2, label_hidden=3),
    "FeatureCRF": lambda: FeatureCRF(5, 2),
    "Seq2SeqAdapter": lambda: Seq2SeqAdapter(Seq2SeqTransformer(4, 4, d_model=4, heads=1, layers=1, ff=4)),
    "PixelCNNAdapter": lambda: PixelCNNAdapter(PixelCNNModel(PixelCNN(1, hidden=4, layers=1), 2, 2)),
    "PixelCNN": lambda: PixelCNN(1, hidden=4, layers=1),
    "ResidualLM": lambda: ResidualLM(LSTMLM(4, embedding_dim=3, hidden_size=3, num_layers=1),
                                     TextEnergy(4, dim=4, layers=1, heads=1), horizon=2),
    "NGramContinuations": lambda: NGramContinuations(NGram.fit([[1, 2], [2, 2, 1]], 3, 2)),
    "ElectricCloze": lambda: ElectricCloze(4, dim=4, layers=1, heads=1, noise=TwoTowerCloze(4, dim=4, layers=1, heads=1)),
    "TwoTowerCloze": lambda: TwoTowerCloze(4, dim=4, layers=1, heads=1),
    "LSTMState": lambda: LSTMLM(4, embedding_dim=3, hidden_size=3, num_layers=1)(torch.ones(1, 1, dtype=torch.long))[1],
    "ModelProducts": lambda: ModelProducts(BernoulliRBM(4, 3)),
}
GENERIC = {"Energy", "Distribution"}  # stand for whole families: checked one way only
FAMILIES = {"Energy": Energy, "Distribution": Distribution}
LATTICE = Spins((3, 3))  # the space of IsingModel.lattice(3, 3)


def _table(marker: str) -> list[list[str]]:
    block = re.search(rf"<!-- {marker} -->(.*?)<!-- /{marker} -->", DOC.read_text(encoding="utf-8"), re.S)
    assert block, f"docs/capabilities.md: no <!-- {marker} --> block"
    rows = [line for line in block.group(1).strip().splitlines() if line.startswith("| `")]
    return [[cell.strip() for cell in row.strip().strip("|").split("|")] for row in rows]


def _names(cell: str) -> set[str]:
    return set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", cell))


def _claims() -> dict[str, set[str]]:
    """protocol name -> class names in its "Offered by" cell."""
    return {_names(row[0]).pop(): _names(row[2]) for row in _table("capabilities")}


def _collisions() -> set[tuple[str, str]]:
    return {(_names(row[0]).pop(), p) for row in _table("collisions") for p in _names(row[1])}


def _colliding(instances) -> set[tuple[str, str]]:
    """(class, protocol) of every built-in class a collision row stands for: the row names one class,
    a family (``Energy``, ``Distribution``: each instance of it) or a protocol (each class it claims)."""
    claims, found = _claims(), set()
    for who, proto in _collisions():
        if who in FAMILIES:
            found |= {(c, proto) for c, obj in instances.items() if c not in GENERIC and isinstance(obj, FAMILIES[who])}
        else:
            found |= {(c, proto) for c in claims.get(who, {who})}
    return found


@pytest.fixture(scope="module")
def instances():
    return {name: make() for name, make in FACTORIES.items()}


def test_docs_list_every_protocol_once_and_nothing_else():
    rows = [_names(row[0]).pop() for row in _table("capabilities")]
    assert len(rows) == len(set(rows))
    assert set(rows) == set(PROTOCOLS), "docs/capabilities.md and ebms.capabilities.__all__ differ"
    assert "supports" in caps.__all__ and "supports(obj, Protocol)" in DOC.read_text(encoding="utf-8")


def test_every_protocol_is_a_runtime_checkable_protocol_with_a_docstring():
    for name, proto in PROTOCOLS.items():
        assert getattr(proto, "_is_protocol", False) and getattr(proto, "_is_runtime_protocol", False), name
        assert typing.Protocol in proto.__mro__, name
        assert isinstance(object(), proto) is False, name
        assert "Used by" in (proto.__doc__ or "") or "used by" in (proto.__doc__ or "").lower(), name


def test_every_class_the_docs_name_has_a_factory_here_and_back():
    named = set().union(*_claims().values()) | {c for c, _ in _collisions() if c not in PROTOCOLS}
    assert named == set(FACTORIES), f"missing factories: {named - set(FACTORIES)}; unused: {set(FACTORIES) - named}"


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
def test_every_class_the_docs_name_offers_the_protocol(protocol, instances):
    for cls in _claims()[protocol]:
        assert isinstance(instances[cls], PROTOCOLS[protocol]), f"{cls} should offer {protocol}"


def test_no_built_in_class_offers_a_protocol_the_docs_do_not_claim(instances):
    claims, collisions = _claims(), _colliding(instances)
    for cls, obj in instances.items():
        if cls in GENERIC:
            continue
        for name, proto in PROTOCOLS.items():
            if (cls, name) in collisions:
                assert isinstance(obj, proto), f"{cls} no longer collides with {name}: update the docs"
                assert cls not in claims[name]
            elif isinstance(obj, proto):
                assert cls in claims[name], f"{cls} offers {name}: add it to docs/capabilities.md"


def test_the_sampler_module_re_exports_the_sentence_protocols():
    import ebms.samplers.trans_dimensional as td

    assert td.TransDimensionalTarget is TransDimensionalTarget and td.SupportsTokenLogits is SupportsTokenLogits


def test_supports_agrees_with_isinstance(instances):
    for obj in instances.values():
        for proto in PROTOCOLS.values():
            assert supports(obj, proto) == isinstance(obj, proto)
            assert supports(obj, proto) == isinstance(obj, proto)  # the remembered answer


def test_supports_sees_capabilities_set_on_the_instance_before_first_use():
    plain, declared = from_fn(lambda x: x.sum(-1)), from_fn(lambda x: x.sum(-1))
    declared.space = Spins(3)
    declared.blocks = lambda: [torch.arange(3)]
    assert supports(declared, HasSpace) and supports(declared, SupportsBlocks)
    assert not supports(plain, HasSpace) and not supports(plain, SupportsBlocks)  # same class, other object


def test_supports_handles_objects_that_cannot_be_remembered():
    class Unhashable:
        __hash__ = None  # type: ignore[assignment]

        def __init__(self):
            self.blocks = lambda: [torch.arange(2)]

    class Slotted:
        __slots__ = ()

    assert supports(Unhashable(), SupportsBlocks)
    assert not supports(Slotted(), SupportsBlocks) and not supports(3, HasSpace)


def test_a_method_set_to_none_does_not_count():
    class Blocked(IsingModel):
        blocks = None  # type: ignore[assignment]

    obj = Blocked(IsingModel.lattice(2, 2).couplings)
    assert not isinstance(obj, SupportsBlocks) and not supports(obj, SupportsBlocks)


def test_energy_and_grad_uses_the_method_of_any_object_that_offers_it():
    class Quadratic:  # not an Energy, not an nn.Module
        def __call__(self, x):
            return (x**2).sum(-1)

        def energy_and_grad(self, x):
            return (x**2).sum(-1), torch.full_like(x, 7.0)  # a deliberately "wrong" gradient: proves the route

    x = torch.randn(4, 2)
    assert torch.equal(energy_and_grad(Quadratic(), x)[1], torch.full_like(x, 7.0))
    assert torch.allclose(energy_and_grad(lambda z: (z**2).sum(-1), x)[1], 2 * x)


def test_annealed_energies_declare_the_targets_capabilities_on_their_class():
    ising = IsingModel.lattice(2, 2)
    path = GeometricPath(ising, IndependentBernoulli(torch.zeros(2, 2), space=Spins((2, 2))), Gibbs())
    f, h = path.intermediate_energy(0.3), path.intermediate_energy(0.8)
    assert type(f) is type(h)
    for proto in (HasSpace, SupportsBlocks, SupportsConditionalLogits, SupportsAllConditionalLogits):
        assert isinstance(f, proto) and caps._class_offers(type(f), proto)
    plain = GeometricPath(from_fn(lambda x: (x**2).sum(-1)), Gaussian(torch.zeros(2), std=1.0), MALA(0.1))
    e = plain.intermediate_energy(0.5)
    assert not any(isinstance(e, p) for p in (SupportsBlocks, SupportsConditionalLogits, SupportsAllConditionalLogits))
    assert isinstance(e, SupportsEnergyAndGrad) and e.space == plain.space


def test_tempered_wrapper_keeps_blocks_only_when_the_energy_has_them():
    x0 = LATTICE.random(4, generator=torch.Generator().manual_seed(0))
    pt = ParallelTempering(BlockGibbs(), n_replicas=2)
    state = pt.init(IsingModel.lattice(3, 3), x0)  # blocks from the model's colouring
    assert state.x.shape == (8, 3, 3)
    with pytest.raises(TypeError, match=r"blocks: the energy has neither sample_hidden/sample_visible nor blocks\(\)"):
        ParallelTempering(BlockGibbs(space=LATTICE), n_replicas=2).init(from_fn(lambda s: s.sum((1, 2))), x0)


def test_sampler_declares_default_target_accept():
    assert Sampler.default_target_accept is None and Gibbs.default_target_accept is None
    assert MALA.default_target_accept == pytest.approx(0.574)


# -- per-step code resolves capabilities once --------------------------------------------------
@pytest.fixture
def protocol_checks(monkeypatch):
    """Counts runtime ``isinstance`` checks against the capability protocols."""
    meta = type(SupportsBlocks)
    original = meta.__instancecheck__
    count = [0]

    def counting(cls, obj):
        if cls in PROTOCOLS.values():
            count[0] += 1
        return original(cls, obj)

    monkeypatch.setattr(meta, "__instancecheck__", counting)
    return count


def _runs(sampler, energy, x0):
    g = torch.Generator().manual_seed(1)
    state = sampler.init(energy, x0)

    def run(steps):
        nonlocal state
        for _ in range(steps):
            state, _ = sampler.step(energy, state, generator=g)

    return run


RING = Spins(9)
CASES = {
    "gibbs-ising": lambda: (Gibbs(), IsingModel.lattice(3, 3), LATTICE.random(4)),
    "gibbs-generic": lambda: (Gibbs(space=RING), lambda s: -(s * s.roll(1, -1)).sum(-1), RING.random(4)),
    "block-gibbs-ising": lambda: (BlockGibbs(), IsingModel.lattice(3, 3), LATTICE.random(4)),
    "block-gibbs-rbm": lambda: (BlockGibbs(), BernoulliRBM(6, 3), torch.zeros(4, 6)),
    "gwg-ising": lambda: (GibbsWithGradients(), IsingModel.lattice(3, 3), LATTICE.random(4)),
    "ula-function": lambda: (ULA(0.1), lambda x: (x**2).sum(-1), torch.zeros(4, 2)),
    "tempering-gibbs": lambda: (ParallelTempering(Gibbs(), n_replicas=3), IsingModel.lattice(3, 3),
                                LATTICE.random(4)),
    "tempering-block-gibbs": lambda: (ParallelTempering(BlockGibbs(), n_replicas=3), IsingModel.lattice(3, 3),
                                      LATTICE.random(4)),
    "trans-dimensional-trf": lambda: (TransDimensional(token_probs=torch.tensor([0.0, 1.0, 1.0])),
                                      TRF.from_corpus(MixedEnergy(_features()), CORPUS, vocab_size=3), CORPUS),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_sampler_steps_do_not_repeat_protocol_checks(case, protocol_checks):
    sampler, energy, x0 = CASES[case]()
    run = _runs(sampler, energy, x0)
    run(2)
    before = protocol_checks[0]
    run(10)
    assert protocol_checks[0] == before, f"{case}: {protocol_checks[0] - before} isinstance checks in 10 steps"


@pytest.mark.parametrize("kernel", [Gibbs, BlockGibbs, GibbsWithGradients])
def test_ais_temperatures_do_not_repeat_protocol_checks(kernel, protocol_checks):
    path = GeometricPath(IsingModel.lattice(3, 3), IndependentBernoulli(torch.zeros(3, 3), space=LATTICE), kernel())
    g = torch.Generator().manual_seed(0)
    ais(path, 4, linear_betas(3), generator=g)
    before = protocol_checks[0]
    ais(path, 4, linear_betas(12), generator=g)
    assert protocol_checks[0] - before <= 2  # the path's own check at the start of ais, not per temperature


def test_closed_form_conditionals_of_the_wrong_shape_are_refused():
    class Bad(IsingModel):
        def conditional_logits(self, x, site):
            return torch.zeros(x.shape[0], 3)

        def all_conditional_logits(self, x):
            return torch.zeros(x.shape[0], 9, 3)

    bad, x0 = Bad(IsingModel.lattice(3, 3).couplings), LATTICE.random(4)
    with pytest.raises(ValueError, match=r"conditional_logits\(x, site\): expected shape \(4, 2\); got \(4, 3\)"):
        Gibbs().sample(bad, x0, steps=1)
    with pytest.raises(ValueError, match=r"all_conditional_logits\(x\): expected shape \(4, 9, 2\); got \(4, 9, 3\)"):
        BlockGibbs().sample(bad, x0, steps=1)

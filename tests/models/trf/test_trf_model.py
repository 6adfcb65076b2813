"""TRF and GN-ELM: exact log Z_l by enumeration against brute force, log_prob normalised at the exact
normalisers (anchored or not), the neural and mixed energies against their formulas, padding
invariance, sampling with the trans-dimensional kernel, and error messages."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from ebms.capabilities import TransDimensionalTarget
from ebms.models.trf import (
    GNELM,
    TRF,
    DiscreteFeatures,
    Hidden2Scalar,
    MixedEnergy,
    SumTargetLogit,
    exact_log_z,
    feature_templates,
)
from ebms.samplers import TransDimensional
from ebms.sequences import Sequences
from ebms.spaces import TokenSequences

V, L = 4, 3  # tokens 1..3, lengths 1..3: 39 sentences


def all_sentences(vocab: int = V, max_length: int = L) -> Sequences:
    rows = [list(s) for n in range(1, max_length + 1) for s in itertools.product(range(1, vocab), repeat=n)]
    return Sequences.from_lists(rows)


def features(eos: bool = False, seed: int = 0) -> DiscreteFeatures:
    g = torch.Generator().manual_seed(seed)
    corpus = Sequences(torch.randint(1, V, (30, L), generator=g), torch.randint(1, L + 1, (30,), generator=g))
    feats = DiscreteFeatures.fit(corpus, V, feature_templates(("w", "c", "cpw"), 2),
                                 classes=torch.tensor([0, 0, 1, 1]), eos=eos)
    with torch.no_grad():
        feats.weight.copy_(torch.randn(feats.num_features, generator=g))
    return feats


def energies() -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    return {
        "features": features(),
        "cnn": Hidden2Scalar.cnn(V, embedding_dim=4, hidden=5, layers=2),
        "bilstm": Hidden2Scalar.bilstm(V, embedding_dim=4, hidden=3),
        "sum_target_logit": SumTargetLogit(V, embedding_dim=4, hidden=5),
        "mixed": MixedEnergy(features(seed=1), Hidden2Scalar.cnn(V, embedding_dim=3, hidden=3, layers=1)),
    }


@pytest.mark.parametrize("name", list(energies()))
def test_exact_log_z_matches_brute_force(name):
    energy = energies()[name]
    got = exact_log_z(energy, V, L)
    with torch.no_grad():
        brute = [torch.logsumexp(torch.stack([-energy(Sequences.from_lists([list(s)]))[0].double()
                                              for s in itertools.product(range(1, V), repeat=n)]), 0)
                 for n in range(1, L + 1)]
    torch.testing.assert_close(got, torch.stack(brute), atol=1e-5, rtol=1e-6)


@pytest.mark.parametrize("name", list(energies()))
def test_trf_log_prob_is_normalised_at_the_exact_log_z(name):
    energy = energies()[name]
    pi = torch.tensor([0.2, 0.5, 0.3])
    model = TRF(energy, pi, V, log_z=exact_log_z(energy, V, L).float())
    x = all_sentences()
    with torch.no_grad():
        p = model.log_prob(x).double().exp()
    assert float(p.sum()) == pytest.approx(1.0, abs=1e-5)
    per_length = torch.zeros(L + 1, dtype=torch.float64).index_add_(0, x.lengths, p)[1:]
    torch.testing.assert_close(per_length, pi.double(), atol=1e-5, rtol=0)
    with torch.no_grad():  # the joint energy is -log p exactly when zeta is exact
        torch.testing.assert_close(model(x).double(), -p.log(), atol=1e-4, rtol=0)


def test_anchored_normalisers_only_use_differences_of_zeta():
    energy = features()
    exact = exact_log_z(energy, V, L).float()
    model = TRF(energy, torch.ones(L), V, log_z=exact + 7.5, anchor_first=True)
    torch.testing.assert_close(model.log_normalisers().detach(), exact, atol=1e-5, rtol=0)
    with torch.no_grad():
        assert float(model.log_prob(all_sentences()).double().exp().sum()) == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("length_features", [False, True])
def test_gnelm_log_prob_is_normalised_and_its_length_law_is_z_l_over_z(length_features):
    energy = features(eos=True)
    model = GNELM(energy, V, L, length_features=length_features)
    if length_features:
        with torch.no_grad():
            model.nu.copy_(torch.tensor([0.3, -1.0, 2.0]))
    per_length = exact_log_z(model, V, L)
    with torch.no_grad():
        model.log_z.fill_(float(torch.logsumexp(per_length, 0)))
        p = model.log_prob(all_sentences()).double().exp()
    assert float(p.sum()) == pytest.approx(1.0, abs=1e-5)
    lengths = all_sentences().lengths
    implied = torch.zeros(L + 1, dtype=torch.float64).index_add_(0, lengths, p)[1:]
    torch.testing.assert_close(implied, torch.softmax(per_length, 0), atol=1e-5, rtol=0)
    if length_features:  # nu moves the energy by -nu_l
        x = all_sentences()
        with torch.no_grad():
            torch.testing.assert_close(model.energy(x), energy(x) - model.nu[x.lengths - 1])


def test_default_normalisers_are_exact_for_a_zero_energy():
    energy = features()
    with torch.no_grad():
        energy.weight.zero_()
    model = TRF(energy, torch.ones(L), V)
    torch.testing.assert_close(model.log_z.detach().double(), exact_log_z(energy, V, L), atol=1e-5, rtol=0)
    gn = GNELM(energy, V, L)
    assert float(gn.log_z.detach()) == pytest.approx(float(torch.logsumexp(exact_log_z(energy, V, L), 0)), abs=1e-5)


def test_hidden2scalar_and_sum_target_logit_follow_their_formulas():
    torch.manual_seed(1)
    x = Sequences.from_lists([[1, 2, 3], [3, 1]])
    h2s = Hidden2Scalar.cnn(V, embedding_dim=4, hidden=5, layers=2)
    h = h2s.encoder(x.tokens, x.lengths)
    manual = -(h2s.readout.weight @ (h * x.mask()[..., None]).sum(1).T + h2s.readout.bias)
    torch.testing.assert_close(h2s(x), manual.squeeze(0))
    stl = SumTargetLogit(V, embedding_dim=4, hidden=5)
    for b, sentence in enumerate(x.tolist()):
        inputs = torch.tensor([[0, *sentence[:-1]]])
        logits = stl.net(inputs, torch.tensor([len(sentence)]))[0]
        manual_b = -sum(logits[i, t] for i, t in enumerate(sentence))
        torch.testing.assert_close(stl(x)[b], manual_b)
    mixed = MixedEnergy(h2s, stl)
    torch.testing.assert_close(mixed(x), h2s(x) + stl(x))


@pytest.mark.parametrize("name", list(energies()))
def test_log_prob_ignores_padding(name):
    model = TRF(energies()[name], torch.ones(L), V)
    x = Sequences.from_lists([[1, 2, 3], [2], [3, 1]])
    padded = Sequences(torch.cat([x.tokens.masked_fill(~x.mask(), 3), torch.full((3, 4), 2)], 1), x.lengths)
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model.log_prob(padded), model.log_prob(x), atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", ["features", "mixed", "cnn"])
def test_token_logits_are_energy_differences_and_forbid_the_boundary(name):
    model = TRF(energies()[name], torch.ones(L), V)
    x = Sequences.from_lists([[1, 2, 3], [2, 2], [3]])
    pos = torch.tensor([1, 0, 0])
    cand = torch.tensor([[1, 2, 3, 0], [3, 1, 2, 0], [2, 3, 1, 0]])
    with torch.no_grad():
        s = model.token_logits(x, pos, cand)
        assert bool(torch.isneginf(s[:, 3]).all())
        tok = x.tokens.unsqueeze(1).expand(3, 3, -1).clone()
        tok.scatter_(2, pos.view(3, 1, 1).expand(3, 3, 1), cand[:, :3].unsqueeze(2))
        full = -model.energy(Sequences(tok.view(9, -1), x.lengths.repeat_interleave(3))).view(3, 3)
    diff = s[:, :3] - full
    torch.testing.assert_close(diff, diff[:, :1].expand_as(diff), atol=1e-5, rtol=0)


def test_trf_is_a_sampler_target_whose_length_marginal_is_the_sampling_prior():
    """With zeta exact, the chains' lengths follow pi0 (TV bound of _token_targets, z = 4.3)."""
    energy = features()
    pi0 = torch.tensor([0.5, 0.2, 0.3])
    model = TRF(energy, torch.tensor([0.1, 0.3, 0.6]), V, log_z=exact_log_z(energy, V, L).float(),
                sampling_length_probs=pi0)
    assert isinstance(model, TransDimensionalTarget)
    S, g = 8000, torch.Generator().manual_seed(0)
    sampler = TransDimensional(token_probs=torch.tensor([0.0, 1.0, 1.0, 1.0]), classes=torch.tensor([0, 0, 1, 1]))
    x = sampler.sample(model, Sequences(torch.ones(S, 1, dtype=torch.long)), 25, generator=g)
    assert bool((x.tokens[x.mask()] > 0).all())
    freq = torch.bincount(x.lengths, minlength=L + 1)[1:].double() / S
    p = pi0.double()
    bound = 0.5 * float(torch.sqrt(p * (1 - p) / S).sum()) + 4.3 / (2 * math.sqrt(S))
    assert 0.5 * float((freq - p).abs().sum()) < bound


def test_default_uniform_proposal_never_leaves_boundary_ids_in_the_chains():
    """Token 0 may be proposed (uniform over the space) but has energy +inf: always rejected."""
    model = TRF(features(), torch.ones(L), V)
    sampler = TransDimensional(trials=2)
    state = sampler.init(model, Sequences(torch.ones(300, 1, dtype=torch.long)))
    for _ in range(5):
        state, info = sampler.step(model, state, generator=torch.Generator().manual_seed(1))
    assert bool((state.x.tokens[state.x.mask()] > 0).all()) and bool(torch.isfinite(state.energy).all())
    assert not bool(info.nonfinite.any())


def test_feature_weights_round_trip_through_state_dict():
    feats = features()
    copy = DiscreteFeatures(feats.templates, feats.keys, V, classes=torch.tensor([0, 0, 1, 1]))
    copy.load_state_dict(feats.state_dict())
    x = all_sentences()
    torch.testing.assert_close(copy(x), feats(x))
    assert torch.equal(copy.observed_counts, feats.observed_counts)


def test_from_corpus_length_prior_and_the_raised_sampling_prior():
    corpus = Sequences.from_lists([[1], [1, 2], [1, 2], [2, 2, 2], [1, 2]])
    model = TRF.from_corpus(features(), corpus, V, max_length=4, smoothing=0.5)
    torch.testing.assert_close(model.length_probs, torch.tensor([1.5, 3.5, 1.5, 0.5]) / 7)
    assert model.max_length == 4 and model.space.max_length == 4
    raised = TRF.raised_length_prior(torch.tensor([0.0, 0.1, 0.6, 0.3, 0.0]))
    torch.testing.assert_close(raised, torch.tensor([0.6, 0.6, 0.6, 0.3, 1e-5]) / (2.1 + 1e-5))


def test_errors_name_the_argument():
    feats = features()
    with pytest.raises(TypeError, match="energy: expected an nn.Module"):
        TRF(lambda x: x, torch.ones(3), V)
    with pytest.raises(ValueError, match="length_probs: expected finite non-negative weights"):
        TRF(feats, torch.tensor([1.0, -1.0]), V)
    with pytest.raises(ValueError, match=r"log_z: expected shape \(3,\) \(one per length 1..3\); got \(2,\)"):
        TRF(feats, torch.ones(3), V, log_z=torch.zeros(2))
    with pytest.raises(ValueError, match=r"sampling_length_probs: expected shape \(3,\) like length_probs"):
        TRF(feats, torch.ones(3), V, sampling_length_probs=torch.ones(2))
    with pytest.raises(ValueError, match="max_length: the corpus has a sentence of length 3 > max_length 2"):
        TRF.from_corpus(feats, Sequences.from_lists([[1, 2, 3]]), V, max_length=2)
    model = TRF(feats, torch.ones(3), V)
    with pytest.raises(ValueError, match="x.tokens: id 0 is the sentence boundary and cannot occur inside a sentence"):
        model.log_prob(Sequences.from_lists([[1, 0]]))
    with pytest.raises(ValueError, match=r"x.lengths: expected lengths in \[1, 3\]; got min 4, max 4"):
        model.log_prob(Sequences.from_lists([[1, 1, 1, 1]]))
    with pytest.raises(TypeError, match="x: expected an ebms.sequences.Sequences"):
        model.energy(torch.ones(2, 2, dtype=torch.long))
    assert math.isinf(float(model.energy(Sequences.from_lists([[1, 0, 2]]))[0].detach()))
    with pytest.raises(ValueError, match="enumerate: .* more than the exact-enumeration limit"):
        exact_log_z(feats, 100, 5)
    with pytest.raises(TypeError, match="model: expected a TRF/GNELM or an energy callable; got int"):
        exact_log_z(3, V, L)
    class Wrong(torch.nn.Module):
        def forward(self, inputs, lengths):
            return torch.zeros(*inputs.shape, 3)

    with pytest.raises(ValueError, match=r"net: expected logits of shape \(1, 2, 4\); got \(1, 2, 3\)"):
        SumTargetLogit(V, net=Wrong())(Sequences.from_lists([[1, 2]]))
    with pytest.raises(ValueError, match="terms: expected at least one energy; got none"):
        MixedEnergy()
    assert TokenSequences(V, L).num_states == 84  # the space counts id 0; the models never hold it

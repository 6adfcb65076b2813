"""The Metropolis independence sampler on token sequences: each chain keeps its length and draws a
whole sentence from a length-conditional proposal; the chains reach the enumerated distribution
(``_token_targets``: TV bound from the sample size, ``z = 4.3``), lengths and padding stay, and a
proposal that is not length-conditional is refused by name."""

from __future__ import annotations

import pytest
import torch
from _token_targets import TokenEnergy, V, assert_matches_exact, exact_probs, length_marginal, starts, token_space

from ebms.samplers import MetropolisIndependence
from ebms.sequences import Sequences

S = 20000
Q = torch.tensor([0.5, 0.3, 0.2])


class IIDGivenLength:
    """``q(x | l) = prod_t Q[x_t]``: tokens i.i.d. from ``Q`` at the given lengths."""

    conditional_on_length = True

    def sample(self, n: int, generator: torch.Generator | None = None, *, lengths: torch.Tensor) -> Sequences:
        T = int(lengths.max()) if n else 0
        tokens = torch.multinomial(Q, n * T, replacement=True, generator=generator).view(n, T) if T else \
            torch.zeros(n, 0, dtype=torch.long)
        return Sequences(tokens * (torch.arange(T) < lengths[:, None]), lengths)

    def log_prob(self, x: Sequences) -> torch.Tensor:
        return (Q.log()[x.tokens] * x.mask()).sum(1)


def test_independence_sampler_on_sentences_matches_enumeration_and_keeps_lengths():
    space, energy = token_space(), TokenEnergy()
    p = exact_probs(energy, space)
    g = torch.Generator().manual_seed(21)
    x0 = starts(space, length_marginal(p, space), S, g)
    # Q is far from the target's law (about 16 % of proposals accepted), so the chains mix slowly: the TV
    # fell to the sample-size level after about 200-400 steps (measured once); 600 steps
    x = MetropolisIndependence(IIDGivenLength(), space=space).sample(energy, x0, 600, generator=g)
    assert isinstance(x, Sequences) and torch.equal(x.lengths, x0.lengths)
    assert x.tokens.shape == x0.tokens.shape and bool((x.tokens[~x.mask()] == 0).all())  # padding stays 0
    assert_matches_exact(x, p, space)


def test_one_step_accepts_with_the_importance_weight_ratio():
    space, energy = token_space(), TokenEnergy()
    sampler = MetropolisIndependence(IIDGivenLength(), space=space)
    x = Sequences(torch.tensor([[0, 1, 2, 0]] * 2000), torch.full((2000,), 3))
    state = sampler.init(energy, x)
    new, info = sampler.step(energy, state, generator=torch.Generator().manual_seed(5))
    q = IIDGivenLength()

    def log_w(s: Sequences) -> torch.Tensor:
        return -energy(s).double() - q.log_prob(s).double()

    # every proposal's acceptance probability is min(1, w(x') / w(x)), computed again here from the proposals kept
    moved = info.accepted
    want = (log_w(Sequences(new.x.tokens[moved], new.x.lengths[moved])) - log_w(x[moved.nonzero().squeeze(1)])).exp()
    torch.testing.assert_close(info.accept_prob[moved].double(), want.clamp(max=1.0), rtol=1e-5, atol=1e-6)
    assert 0 < int(moved.sum()) < 2000


def test_a_proposal_without_lengths_is_refused_on_sentences():
    class Plain:
        def sample(self, n, generator=None):
            return torch.zeros(n, 4)

        def log_prob(self, x):
            return torch.zeros(x.shape[0])

    space, energy = token_space(), TokenEnergy()
    sampler = MetropolisIndependence(Plain(), space=space)
    state = sampler.init(energy, Sequences(torch.zeros(3, 4, dtype=torch.long), torch.full((3,), 2)))
    with pytest.raises(TypeError, match=r"^proposal: on token sequences the chains keep their lengths, so the "
                                        r"proposal must be length-conditional .*; got Plain$"):
        sampler.step(energy, state, generator=torch.Generator())
    assert V == 3


def test_repr_names_the_token_space():
    assert repr(MetropolisIndependence(IIDGivenLength(), space=token_space())) == (
        f"MetropolisIndependence(proposal=IIDGivenLength, space={token_space()!r})")

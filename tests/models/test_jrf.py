"""JRF against brute-force enumeration on tiny vocabularies and tag sets (V - 1 = 2 words, K <= 3
tags, lengths <= 3): the marginal, the per-length normalisers, the joint law and the conditional;
gradients by gradcheck; and the TRF contract that lets TRFNCE / DynamicNCE train the marginal."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch import Tensor, nn
from torch.func import functional_call

from ebms.capabilities import TransDimensionalField
from ebms.models.jrf import JRF
from ebms.models.trf import exact_log_z
from ebms.objectives._trf_common import check_trf
from ebms.objectives.trf_nce import TRFNCE, DynamicNCE
from ebms.sequences import Sequences

V, L = 3, 3  # words 1, 2 (0 is the boundary)


def _jrf(K: int = 3, dtype: torch.dtype = torch.float64, seed: int = 0, **kw: object) -> JRF:
    torch.manual_seed(seed)
    m = JRF(V, K, max_length=L, embed=3, hidden=2, length_probs=torch.tensor([0.2, 0.5, 0.3]), **kw)  # type: ignore[arg-type]
    with torch.no_grad():  # non-zero boundary and edge potentials, so every term is exercised
        m.tagger.transitions.normal_()
        m.tagger.start.normal_()
        m.tagger.end.normal_()
        m.tagger.proj.bias.normal_()
    return m.to(dtype)


def _sentences(length: int) -> Sequences:
    rows = list(itertools.product(range(1, V), repeat=length))
    return Sequences(torch.tensor(rows, dtype=torch.long), torch.full((len(rows),), length))


def _brute_scores(m: JRF, x: Sequences) -> tuple[Tensor, list[tuple[int, ...]]]:
    """U(x, y) for every tagging y of the (equal-length) sentences x, by the formula: ``(B, K^l)``."""
    psi = m.potentials(x)
    A, s, e = m.tagger.transitions, m.tagger.start, m.tagger.end
    ys = list(itertools.product(range(m.n_tags), repeat=int(x.lengths[0])))
    cols = []
    for y in ys:
        u = s[y[0]] + e[y[-1]] + sum(psi[:, i, k] for i, k in enumerate(y))
        cols.append(u + sum((A[y[i - 1], y[i]] for i in range(1, len(y))), torch.zeros((), dtype=psi.dtype)))
    return torch.stack(cols, 1), ys


@pytest.mark.parametrize("K", [1, 2, 3])
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-10), (torch.float32, 1e-5)])
def test_marginal_potential_is_logsumexp_over_taggings(K, dtype, tol):
    m = _jrf(K, dtype)
    for length in range(1, L + 1):
        x = _sentences(length)
        u, _ = _brute_scores(m, x)
        torch.testing.assert_close(-m.energy(x), torch.logsumexp(u, 1), atol=tol, rtol=tol)
        torch.testing.assert_close(m.marginal_energy(x), m.energy(x))


@pytest.mark.parametrize("K", [2, 3])
def test_conditional_is_softmax_over_taggings(K):
    m = _jrf(K)
    for length in range(1, L + 1):
        x = _sentences(length)
        u, ys = _brute_scores(m, x)
        crf = m.crf(x)
        for j, y in enumerate(ys):
            tags = torch.tensor(y).expand(x.batch_size, -1)
            torch.testing.assert_close(crf.log_prob(tags), u[:, j] - torch.logsumexp(u, 1), atol=1e-10, rtol=0)
            torch.testing.assert_close(m.joint_energy(x, tags), -u[:, j], atol=1e-10, rtol=0)
        assert torch.equal(m.decode(x), torch.tensor(ys)[u.argmax(1)])


def _brute_log_z(m: JRF) -> Tensor:
    """log Z(l) = log sum over x in V^l and y in K^l of exp U(x, y), ``(L,)``."""
    return torch.stack([torch.logsumexp(_brute_scores(m, _sentences(n))[0].flatten(), 0) for n in range(1, L + 1)])


def test_per_length_normalisers_match_joint_enumeration():
    m = _jrf(3)
    torch.testing.assert_close(exact_log_z(m, V, L), _brute_log_z(m).detach(), atol=1e-10, rtol=0)


def test_with_exact_zeta_the_marginal_and_the_joint_are_normalised_per_length():
    m = _jrf(3)
    with torch.no_grad():
        m.log_z.copy_(_brute_log_z(m))
    pi = m.length_probs.double()
    total = torch.zeros((), dtype=torch.float64)
    for n in range(1, L + 1):
        x = _sentences(n)
        p = m.log_prob(x).exp()
        torch.testing.assert_close(p.sum(), pi[n - 1], atol=1e-12, rtol=0)  # sum_x p(l, x) = pi_l
        _, ys = _brute_scores(m, x)
        joint = sum(m.joint_log_prob(x, torch.tensor(y).expand(x.batch_size, -1)).exp().sum() for y in ys)
        torch.testing.assert_close(joint, pi[n - 1], atol=1e-12, rtol=0)
        total = total + p.sum()
    # pi is stored in float32 (as the TRF's): it sums to 1 within float32 rounding
    torch.testing.assert_close(total, pi.sum(), atol=1e-12, rtol=0)
    assert abs(float(total.detach()) - 1.0) < 1e-6


def test_anchored_first_normaliser_is_exact():
    m = _jrf(2, anchor_first=True)
    torch.testing.assert_close(m.log_normalisers()[0].detach(), _brute_log_z(m)[0].detach(), atol=1e-10, rtol=0)


class _Joint(nn.Module):
    def __init__(self, m: JRF) -> None:
        super().__init__()
        self.m = m

    def forward(self, x: Sequences, y: Tensor) -> Tensor:
        return self.m.joint_log_prob(x, y) + self.m.crf(x).log_prob(y)


def test_gradcheck_in_every_parameter_kind():
    m = _jrf(2)
    x = Sequences.from_lists([[1, 2, 2], [2], [1, 1]])
    y = torch.tensor([[0, 1, 1], [1, 0, 0], [1, 0, 0]])
    names = ["transitions", "start", "end", "proj.weight", "encoder.embed.weight", "encoder.rnn.weight_hh_l0"]
    names = ["tagger." + n for n in names] + ["log_z"]
    params = dict(m.named_parameters())
    joint = _Joint(m)
    assert {"m." + n for n in names} <= dict(joint.named_parameters()).keys()

    def marginal(*values: Tensor) -> Tensor:  # forward = -log p(l, x)
        return functional_call(m, {**params, **dict(zip(names, values))}, (x,), strict=False)

    def both(*values: Tensor) -> Tensor:  # log p(l, x, y) + log p(y | x)
        return functional_call(joint, {"m." + n: v for n, v in zip(names, values)}, (x, y), strict=False)

    inputs = tuple(params[n].detach().clone().requires_grad_(True) for n in names)
    assert torch.autograd.gradcheck(marginal, inputs)
    assert torch.autograd.gradcheck(both, inputs)


def test_forward_is_the_trf_joint_energy():
    m = _jrf(2)
    x = Sequences.from_lists([[1, 2, 2], [2]])
    idx = x.lengths - 1
    torch.testing.assert_close(m(x), m.energy(x) - m.log_pi[idx].double() + m.log_z[idx])
    torch.testing.assert_close(m(x), -m.log_prob(x))


def test_boundary_id_inside_a_sentence_has_infinite_energy():
    m = _jrf(2)
    e = m.energy(Sequences.from_lists([[1, 0, 2], [2, 1]])).detach()
    assert math.isinf(float(e[0])) and e[0] > 0 and math.isfinite(float(e[1]))


def test_length_one_sentences_and_float32_defaults():
    m = JRF(V, 2, max_length=2, embed=4, hidden=3)
    x = Sequences.from_lists([[1], [2]])
    assert m.energy(x).dtype == torch.float32 and m.log_prob(x).shape == (2,)
    assert m.crf(x).argmax.shape == (2, 1)
    # zero boundary/edge potentials at init: zeta defaults to l log((V - 1) K), exact when Psi = 0
    torch.testing.assert_close(m.log_z.detach(), torch.tensor([1.0, 2.0]) * math.log(4.0))


def test_from_corpus_takes_the_length_law():
    corpus = Sequences.from_lists([[1], [1, 2], [2, 2], [1, 1, 1]])
    m = JRF.from_corpus(corpus, V, 2, embed=2, hidden=2)
    torch.testing.assert_close(m.length_probs, torch.tensor([0.25, 0.5, 0.25]))
    assert m.max_length == 3


def test_the_trf_contract_holds():
    m = _jrf(2)
    assert isinstance(m, TransDimensionalField) and check_trf(m) is m
    w = m.length_log_weights()
    assert w.shape == (L + 1,) and math.isinf(float(w[0])) and not w.requires_grad
    x = Sequences.from_lists([[1, 2, 1]])
    scores = m.token_logits(x, torch.tensor([1]), torch.tensor([[1, 2]]))
    other = Sequences.from_lists([[1, 1, 1]])
    torch.testing.assert_close(scores[0, 0], -m.energy(other)[0])
    torch.testing.assert_close(scores[0, 1], -m.energy(x)[0])


class Unigram(nn.Module):
    """q(l, x) = softmax(a)_l prod_i softmax(b)_{x_i} over lengths 1..L: a trainable noise LM."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.zeros(L, dtype=torch.float64))
        self.b = nn.Parameter(torch.zeros(V - 1, dtype=torch.float64))

    def log_prob(self, x: Sequences) -> Tensor:
        lb = self.b.log_softmax(0)[(x.tokens - 1).clamp(min=0)] * x.mask()
        return self.a.log_softmax(0)[x.lengths - 1] + lb.sum(1)

    @torch.no_grad()
    def sample(self, n: int, generator: torch.Generator | None = None) -> Sequences:
        lengths = torch.multinomial(self.a.softmax(0), n, replacement=True, generator=generator) + 1
        tok = torch.multinomial(self.b.softmax(0), n * L, replacement=True, generator=generator).view(n, L) + 1
        return Sequences(tok.masked_fill(torch.arange(L) >= lengths[:, None], 0), lengths)


@pytest.mark.parametrize("make", [lambda q: TRFNCE(q, nu=2), lambda q: DynamicNCE(q, nu=1, alpha=0.5)])
def test_trf_nce_objectives_train_the_marginal_unchanged(make):
    m = _jrf(2)
    objective = make(Unigram())
    out = objective(m, Sequences.from_lists([[1, 2], [2, 2, 1], [1]]), generator=torch.Generator().manual_seed(0))
    out.loss.backward()
    assert math.isfinite(float(out.loss.detach()))
    assert m.log_z.grad is not None and m.tagger.transitions.grad is not None
    assert float(m.tagger.encoder.embed.weight.grad.abs().sum()) > 0


@pytest.mark.parametrize("kwargs,match", [
    ({"length_probs": torch.ones(2)}, r"length_probs: expected a 1-D tensor \(3,\)"),
    ({"length_probs": torch.tensor([1.0, -1.0, 1.0])}, "length_probs: expected finite non-negative"),
    ({"sampling_length_probs": torch.ones(4)}, r"sampling_length_probs: expected a 1-D tensor \(3,\)"),
    ({"log_z": torch.zeros(2)}, r"log_z: expected shape \(3,\)"),
    ({"max_length": 0}, "max_length"),
    ({"vocab_size": 1}, "vocab_size"),
])
def test_bad_arguments_name_themselves(kwargs, match):
    args = {"vocab_size": V, "n_tags": 2, "max_length": L, **kwargs}
    with pytest.raises(ValueError, match=match):
        JRF(**args)  # type: ignore[arg-type]


def test_non_sequences_input_is_refused_with_its_type():
    m = _jrf(2)
    with pytest.raises(TypeError, match="x: expected an ebms.sequences.Sequences .* got Tensor"):
        m.crf(torch.ones(2, 3, dtype=torch.long))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="x: expected an ebms.sequences.Sequences"):
        m.energy(torch.ones(2, 3, dtype=torch.long))  # type: ignore[arg-type]


def test_log_prob_refuses_sentences_outside_the_space():
    m = _jrf(2)
    with pytest.raises(ValueError, match="x"):
        m.log_prob(Sequences.from_lists([[1, 2, 1, 2]]))


def test_from_corpus_refuses_a_too_short_max_length():
    with pytest.raises(ValueError, match="max_length: the corpus has a sentence of length 3 > max_length 2"):
        JRF.from_corpus(Sequences.from_lists([[1, 2, 1]]), V, 2, max_length=2)


class _FixedNoise(nn.Module):
    """A stand-in noise LM: ``log q(x) = -l log(V - 1) - c * l^2`` (any known function of the sentence)."""

    def __init__(self, c: float = 0.1) -> None:
        super().__init__()
        self.c = c

    def log_prob(self, x: Sequences) -> Tensor:
        n = x.lengths.double()
        return -n * math.log(V - 1) - self.c * n**2 + 0.01 * x.tokens[:, 0].double()


def test_init_log_z_matches_the_noise_on_average_per_length_and_fits_a_line_elsewhere():
    from ebms.fit import init_log_z

    m = _jrf(K=2, anchor_first=False)
    m.train()
    x = Sequences.from_lists([[1], [2], [1, 2], [2, 2], [2, 1]])  # no sentence of length 3
    noise = _FixedNoise()
    zeta = init_log_z(m, noise, x, chunk=2)
    assert m.training  # mode restored
    torch.testing.assert_close(m.log_z.detach().double(), zeta.double())
    gap = m.log_prob(x).detach() - noise.log_prob(x)  # log p(l, x) - log q(x)
    for length in (1, 2):
        assert abs(float(gap[x.lengths == length].mean())) < 1e-6
    # length 3: the least-squares line through every (l, log pi_l + U(x) - log q(x)), computed independently
    with torch.no_grad():
        d = (m.log_pi[x.lengths - 1] - m.energy(x) - noise.log_prob(x)).double()
    n = x.lengths.double()
    slope = float(((n - n.mean()) * (d - d.mean())).sum() / ((n - n.mean()) ** 2).sum())
    intercept = float(d.mean()) - slope * float(n.mean())
    assert abs(float(zeta[2]) - (3 * slope + intercept)) < 1e-6


def test_init_log_z_refuses_empty_and_too_long_input():
    from ebms.fit import init_log_z

    m = _jrf(K=2)
    with pytest.raises(ValueError, match="x: expected at least one sentence"):
        init_log_z(m, _FixedNoise(), Sequences.from_lists([[1]])[0:0])
    with pytest.raises(ValueError, match="x: a sentence of length 4 > the model's max_length 3"):
        init_log_z(m, _FixedNoise(), Sequences.from_lists([[1, 1, 1, 1]]))


def test_pretrain_noise_lm_lowers_the_likelihood_loss_and_zero_steps_change_nothing():
    from ebms.fit import pretrain_noise_lm
    from ebms.models.lm import LSTMLM

    torch.manual_seed(0)
    lm = LSTMLM(V, embedding_dim=8, hidden_size=8, num_layers=1)
    x = Sequences.from_lists([[1, 1, 2], [1, 1, 2], [2]])
    before = {k: v.clone() for k, v in lm.state_dict().items()}
    assert pretrain_noise_lm(lm, x, steps=0, batch_size=2, lr=0.1) == []
    assert all(torch.equal(before[k], v) for k, v in lm.state_dict().items())
    with torch.no_grad():
        start = float(-lm.log_prob(x).mean())
    losses = pretrain_noise_lm(lm, x, steps=60, batch_size=3, lr=0.05, generator=torch.Generator().manual_seed(0))
    assert len(losses) == 60
    assert float(-lm.log_prob(x).mean().detach()) < 0.6 * start
    with pytest.raises(ValueError, match="x: expected at least one sentence"):
        pretrain_noise_lm(lm, x[0:0], steps=1, batch_size=1, lr=0.1)

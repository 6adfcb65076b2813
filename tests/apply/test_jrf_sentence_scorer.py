"""A JRF as a language model for scoring and n-best rescoring, against enumeration on a tiny vocabulary.

Words ``<unk>, a0, b`` (ids 1..3), ``K = 2`` tags, lengths ``1..3``: every sentence and every tagging is enumerated.
Checked: the scorer's ``log p(l, x)`` is ``log pi_l + log sum_y exp U(x, y) - log Z_l`` with ``U`` by its formula and
``log Z_l`` by enumeration of all (sentence, tagging) pairs, and the probabilities of all sentences sum to 1;
``importance_log_z_per_length`` on the JRF is exact with the exact proposal ``p(x | l)`` and within its standard
errors with a uniform one; ``lm_scores`` and ``rescore`` take the JRF; digits are normalised as in training.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch import Tensor

from ebms.apply.text import rescore, sentence_scorer
from ebms.data.nbest import NBest
from ebms.data.text import Vocabulary
from ebms.data.vocab import WordVocabulary
from ebms.errors import DataError
from ebms.estimators import importance_log_z_per_length
from ebms.metrics.rescoring import lm_scores
from ebms.models.jrf import JRF
from ebms.sequences import Sequences

WORDS = ("a0", "b")  # ids 2, 3; id 1 is <unk>
V, K, L = 4, 2, 3


def _jrf(seed: int = 0) -> JRF:
    torch.manual_seed(seed)
    m = JRF(V, K, max_length=L, embed=3, hidden=2, length_probs=torch.tensor([0.2, 0.5, 0.3]))
    with torch.no_grad():  # non-zero edge and boundary potentials
        m.tagger.transitions.normal_()
        m.tagger.start.normal_()
        m.tagger.end.normal_()
    return m.double().eval()


def _sentences(length: int) -> Sequences:
    rows = list(itertools.product(range(1, V), repeat=length))
    return Sequences(torch.tensor(rows, dtype=torch.long), torch.full((len(rows),), length))


def _joint_scores(m: JRF, x: Sequences) -> Tensor:
    """``U(x, y)`` of every tagging ``y`` of the equal-length sentences ``x`` by the formula, ``(B, K^l)``."""
    with torch.no_grad():
        psi, A, s, e = m.potentials(x), m.tagger.transitions, m.tagger.start, m.tagger.end
        cols = []
        for y in itertools.product(range(K), repeat=int(x.lengths[0])):
            u = s[y[0]] + e[y[-1]] + sum(psi[:, i, k] for i, k in enumerate(y))
            cols.append(u + sum((A[y[i - 1], y[i]] for i in range(1, len(y))), torch.zeros((), dtype=psi.dtype)))
    return torch.stack(cols, 1)


def _exact_log_z(m: JRF) -> Tensor:
    return torch.stack([torch.logsumexp(_joint_scores(m, _sentences(n)).flatten(), 0) for n in range(1, L + 1)])


def _text(x: Sequences) -> list[list[str]]:
    names = ["</s>", "<unk>", *WORDS]
    return [[names[int(t)] for t in row[: int(n)]] for row, n in zip(x.tokens, x.lengths)]


def _with_exact_log_z(m: JRF) -> Tensor:
    z = _exact_log_z(m)
    with torch.no_grad():
        m.log_z.copy_(z)
    return z


def test_scores_are_the_marginal_over_taggings_minus_log_z_and_sum_to_one() -> None:
    m = _jrf()
    z = _with_exact_log_z(m)
    scorer = sentence_scorer(m, Vocabulary(WORDS), kind="jrf")
    total = 0.0
    for n in range(1, L + 1):
        x = _sentences(n)
        expected = math.log(float(m.length_probs[n - 1])) + torch.logsumexp(_joint_scores(m, x), 1) - z[n - 1]
        got = scorer(_text(x))
        torch.testing.assert_close(got.log_prob, expected, rtol=0, atol=1e-10)
        assert got.measure == "log_prob_training_zeta" and got.tokens.tolist() == [n + 1] * x.batch_size
        total += float(got.log_prob.exp().sum())
    assert total == pytest.approx(1.0, abs=1e-6)  # pi is kept in float32


class _ExactProposal:
    """``q(x | l) = p(x | l)`` of the JRF's marginal, by enumeration: the importance weights are all ``Z_l``."""

    conditional_on_length = True

    def __init__(self, m: JRF) -> None:
        self.table = {n: _sentences(n) for n in range(1, L + 1)}
        self.logp = {n: torch.log_softmax(-m.energy(x).detach(), 0) for n, x in self.table.items()}

    def sample(self, n: int, *, lengths: Tensor, generator: torch.Generator | None = None) -> Sequences:
        rows = [self.table[int(k)].tokens[int(torch.multinomial(self.logp[int(k)].exp(), 1, generator=generator))]
                for k in lengths]
        return Sequences.from_lists([r.tolist() for r in rows])

    def log_prob(self, x: Sequences) -> Tensor:
        out = []
        for row, n in zip(x.tokens, x.lengths.tolist()):
            match = (self.table[n].tokens == row[:n]).all(1).nonzero()[0, 0]
            out.append(self.logp[n][match])
        return torch.stack(out)


class _Uniform:
    """``q(x | l)`` uniform over the ``(V - 1)^l`` sentences of length ``l``."""

    conditional_on_length = True

    def sample(self, n: int, *, lengths: Tensor, generator: torch.Generator | None = None) -> Sequences:
        tokens = torch.randint(1, V, (n, L), generator=generator)
        return Sequences(tokens * (torch.arange(L) < lengths[:, None]), lengths)

    def log_prob(self, x: Sequences) -> Tensor:
        return -x.lengths.double() * math.log(V - 1)


def test_importance_log_z_of_the_jrf_is_exact_with_the_exact_proposal() -> None:
    m = _jrf(1)
    est = importance_log_z_per_length(m, _ExactProposal(m), 8, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(est.as_log_z(L).double(), _exact_log_z(m), rtol=0, atol=1e-9)


def test_importance_log_z_of_the_jrf_with_a_uniform_proposal_is_within_its_standard_errors() -> None:
    m = _jrf(2)
    est = importance_log_z_per_length(m, _Uniform(), 4000, generator=torch.Generator().manual_seed(0))
    exact = _exact_log_z(m)
    for n, e in zip(est.lengths, est.estimates):
        assert abs(e.estimate - float(exact[n - 1])) < 5 * e.stderr + 1e-9, (n, e, float(exact[n - 1]))


def test_lm_scores_and_rescore_take_the_jrf_with_log_z_put_into_it() -> None:
    m = _jrf(3)
    z = _with_exact_log_z(m)
    vocab = Vocabulary(WORDS)
    nb = NBest.from_lists(["u1", "u2"], [[["a0", "b"], ["b"], ["a0", "a0", "b"]], [["b", "b"], ["a0"]]],
                          acoustic=[[-1.0, -1.2, -0.9], [-2.0, -2.1]])
    got = lm_scores(nb, m, vocabulary=vocab)
    x = vocab.encode([list(h) for h in nb.hypotheses])
    with torch.no_grad():
        u = torch.stack([torch.logsumexp(_joint_scores(m, x[i:i + 1]), 1)[0] for i in range(x.batch_size)])
    expected = m.log_pi.double()[x.lengths - 1] + u - z[x.lengths - 1]
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-10)
    out = rescore(nb, {"jrf": sentence_scorer(m, vocab)}, {"jrf": 1.0}, lm_scale=2.0, length_penalty=0.5)
    total = nb.acoustic + 2.0 * expected + 0.5 * nb.word_counts()
    assert out.best.tolist() == [int(total[:3].argmax()), 3 + int(total[3:].argmax())]


def test_words_are_normalised_as_in_training_and_lengths_beyond_l_refused() -> None:
    m = _jrf(4)
    scorer = sentence_scorer(m, Vocabulary(WORDS), kind="jrf", normalise=WordVocabulary.normalise)
    a, b = scorer(["a7 b", "a0 b", "zz b"]), scorer([["a3", "b"]])
    assert a.log_prob[0] == a.log_prob[1] == b.log_prob[0] and a.log_prob[2] != a.log_prob[0]
    assert a.oov.tolist() == [0, 0, 1]
    assert scorer.log_probs(["b b b b", "b"])[0] == -math.inf
    with pytest.raises(DataError, match=r"a sentence of 4 tokens; this jrf run scores sentences of 1\.\.3 tokens "
                                        r"\(the lengths 1\.\.L of the JRF"):
        scorer(["b b b b"])

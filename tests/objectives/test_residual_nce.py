"""ResidualNCE: the loss by hand, its gradients, the NCE optimum log p_LM - log p_data with known
n-gram laws (exactly by enumeration and from samples), and a Trainer run with checkpoint/resume."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ebms.data.negative_cache import NegativeCache
from ebms.distributions import NGram
from ebms.models.residual_lm import (
    NGramContinuations,
    ResidualLM,
    enumerate_continuations,
    exact_joint_log_probs,
    exact_log_z,
)
from ebms.nets.text_energy import TextEnergy
from ebms.objectives._nce_core import nce_logits
from ebms.objectives.residual_nce import ResidualNCE
from ebms.sequences import Sequences
from ebms.train import Trainer

V, K = 4, 2
PREFIXES = Sequences.from_lists([[1, 2], [3], []])


def ngram(seed: int, order: int = 2, vocab: int = V) -> NGram:
    g = torch.Generator().manual_seed(seed)
    return NGram(vocab, order, torch.randn((vocab,) * order, generator=g, dtype=torch.float64).log_softmax(-1))


def codes(s: Sequences, width: int) -> Tensor:
    """A unique integer per sequence of length <= width over ids < V."""
    t = s.pad_to(width).tokens.masked_fill(~s.pad_to(width).mask(), 0)
    return (t * V ** torch.arange(width)).sum(1) + s.lengths * V**width


class TabularEnergy(nn.Module):
    """One free energy per (prefix, continuation of the horizon law): ``table (P, N)`` float64."""

    def __init__(self, prefixes: Sequences, horizon: int) -> None:
        super().__init__()
        self.pw, self.horizon = prefixes.max_length, horizon
        xs = enumerate_continuations(V, horizon)
        self.prefix_index = torch.full(((self.pw + 1) * V**self.pw,), -1, dtype=torch.long)
        self.prefix_index[codes(prefixes, self.pw)] = torch.arange(prefixes.batch_size)
        self.x_index = torch.full(((horizon + 1) * V**horizon,), -1, dtype=torch.long)
        self.x_index[codes(xs, horizon)] = torch.arange(xs.batch_size)
        self.table = nn.Parameter(torch.zeros(prefixes.batch_size, xs.batch_size, dtype=torch.float64))
        self.override: Tensor | None = None

    def forward(self, prefix: Sequences, x: Sequences) -> Tensor:
        table = self.table if self.override is None else self.override
        return table[self.prefix_index[codes(prefix, self.pw)], self.x_index[codes(x, self.horizon)]]


def enumerated_batch(nu: int) -> tuple[Sequences, Sequences, Sequences]:
    xs = enumerate_continuations(V, K)
    g = torch.Generator().manual_seed(5)
    pick = torch.randint(xs.batch_size, (6 * (1 + nu),), generator=g)
    prefix = PREFIXES[torch.tensor([0, 1, 2, 0, 1, 2])]
    return prefix, xs[pick[:6]], xs[pick[6:]]


def model_with_table(seed: int = 0) -> ResidualLM:
    energy = TabularEnergy(PREFIXES, K)
    with torch.no_grad():
        energy.table.normal_(generator=torch.Generator().manual_seed(seed))
    return ResidualLM(ngram(0), energy, horizon=K)


@pytest.mark.parametrize("nu", [1, 4])
def test_the_loss_and_metrics_match_the_formula_by_hand(nu):
    m = model_with_table()
    prefix, pos, neg = enumerated_batch(nu)
    out = ResidualNCE(nu=nu)(m, (prefix, pos, neg))
    e_pos = m.energy(prefix, pos).detach()
    e_neg = m.energy(Sequences(prefix.tokens.repeat_interleave(nu, 0), prefix.lengths.repeat_interleave(nu)),
                     neg).detach()
    ln = math.log(nu)
    want = F.softplus(e_pos + ln).mean() + nu * F.softplus(-e_neg - ln).mean()
    if nu == 1:  # Deng et al. Eq. 3: softplus(E+) + softplus(-E-)
        want_1 = (F.softplus(e_pos) + F.softplus(-e_neg)).mean()
        torch.testing.assert_close(want, want_1)
    torch.testing.assert_close(out.loss.detach(), want, rtol=1e-12, atol=1e-12)
    acc = (int((-e_pos - ln > 0).sum()) + int((-e_neg - ln < 0).sum())) / (6 * (1 + nu))
    assert out.metrics == pytest.approx({"e_pos": float(e_pos.mean()), "e_neg": float(e_neg.mean()),
                                         "gap": float(e_neg.mean() - e_pos.mean()), "accuracy": acc})
    packed = ResidualNCE(nu=nu)(m, ResidualNCE.pack(prefix, pos, neg))  # the Trainer's six-tensor form
    assert torch.equal(packed.loss, out.loss)


def test_gradients_match_finite_differences():
    m = model_with_table(1)
    batch = enumerated_batch(3)
    obj = ResidualNCE(nu=3)

    def loss(table: Tensor) -> Tensor:
        m.energy_net.override = table
        return obj(m, batch).loss

    table = m.energy_net.table.detach().clone().requires_grad_(True)
    assert torch.autograd.gradcheck(loss, (table,), eps=1e-6, atol=1e-7)
    m.energy_net.override = None


def population_loss(e: Tensor, log_lm: Tensor, log_data: Tensor, nu: int) -> Tensor:
    """The NCE objective with exact expectations: mean over prefixes of
    sum_x p_data softplus(-G) + nu sum_x p_LM softplus(G), G = -E - log nu."""
    g = nce_logits(-e, torch.zeros_like(e), nu=nu)
    return ((log_data.exp() * F.softplus(-g)).sum(1) + nu * (log_lm.exp() * F.softplus(g)).sum(1)).mean()


def horizon_laws() -> tuple[ResidualLM, Tensor, Tensor]:
    """A base n-gram and a different data n-gram: their horizon laws ``(P, N)`` over the enumeration."""
    model = ResidualLM(ngram(0), TabularEnergy(PREFIXES, K), horizon=K)
    data = ResidualLM(ngram(1), TabularEnergy(PREFIXES, K), horizon=K)
    with torch.no_grad():  # the tabular energies are 0: the joint laws are the bases' horizon laws
        return model, exact_joint_log_probs(model, PREFIXES), exact_joint_log_probs(data, PREFIXES)


@pytest.mark.parametrize("nu", [1, 4])
def test_population_nce_recovers_log_p_lm_minus_log_p_data(nu):
    model, log_lm, log_data = horizon_laws()
    table = model.energy_net.table
    opt = torch.optim.LBFGS([table], lr=1, max_iter=500, tolerance_grad=1e-13, tolerance_change=1e-15,
                            line_search_fn="strong_wolfe")

    def closure() -> Tensor:
        opt.zero_grad()
        loss = population_loss(table, log_lm, log_data, nu)
        loss.backward()
        return loss

    for _ in range(5):
        opt.step(closure)
    # Theorem 1 (Deng et al. 2020): E = log p_LM - log p_data, c = 0 (self-normalised, same supports)
    torch.testing.assert_close(table.detach(), log_lm - log_data, rtol=0, atol=1e-6)
    with torch.no_grad():
        torch.testing.assert_close(exact_log_z(model, PREFIXES), torch.zeros(3, dtype=torch.float64), rtol=0, atol=1e-6)
        torch.testing.assert_close(exact_joint_log_probs(model, PREFIXES), log_data, rtol=0, atol=1e-6)


def test_sample_based_nce_with_the_objective_lands_within_standard_errors_of_the_optimum():
    nu, n = 4, 20_000
    prefixes = PREFIXES[:2]
    model, log_lm, log_data = horizon_laws()
    log_lm, log_data = log_lm[:2], log_data[:2]
    model.energy_net = TabularEnergy(prefixes, K)
    data = ResidualLM(ngram(1), TabularEnergy(prefixes, K), horizon=K)
    g = torch.Generator().manual_seed(11)
    positive = data.sample_base(prefixes, n, generator=g)  # rows p n .. p n + n - 1 continue prefix p
    negatives = model.sample_base(prefixes, nu * n, generator=g)  # nu per positive, same prefix
    prefix = Sequences(prefixes.tokens.repeat_interleave(n, 0), prefixes.lengths.repeat_interleave(n))
    obj, table = ResidualNCE(nu=nu), model.energy_net.table
    opt = torch.optim.LBFGS([table], lr=1, max_iter=500, tolerance_grad=1e-12, tolerance_change=1e-15,
                            line_search_fn="strong_wolfe")

    def closure() -> Tensor:
        opt.zero_grad()
        loss = obj(model, (prefix, positive, negatives)).loss
        loss.backward()
        return loss

    for _ in range(5):
        opt.step(closure)
    energy = model.energy_net
    cells = table.numel()
    count_d = torch.zeros(cells, dtype=torch.float64).index_add_(
        0, energy.prefix_index[codes(prefix, energy.pw)] * table.shape[1] + energy.x_index[codes(positive, K)],
        torch.ones(positive.batch_size, dtype=torch.float64)).view_as(table)
    rep = Sequences(prefix.tokens.repeat_interleave(nu, 0), prefix.lengths.repeat_interleave(nu))
    count_n = torch.zeros(cells, dtype=torch.float64).index_add_(
        0, energy.prefix_index[codes(rep, energy.pw)] * table.shape[1] + energy.x_index[codes(negatives, K)],
        torch.ones(negatives.batch_size, dtype=torch.float64)).view_as(table)
    assert bool((count_d > 0).all() and (count_n > 0).all())
    # the empirical minimiser is the log ratio of the empirical laws
    torch.testing.assert_close(table.detach(), (count_n / (nu * n)).log() - (count_d / n).log(), rtol=0, atol=1e-5)
    # delta method: Var log p_hat = (1 - p) / (m p) for m draws
    p_lm, p_d = log_lm.exp(), log_data.exp()
    se = ((1 - p_lm) / (nu * n * p_lm) + (1 - p_d) / (n * p_d)).sqrt()
    z = ((table.detach() - (log_lm - log_data)) / se).abs()
    assert float(z.max()) < 4.0  # z = 4 over 26 cells: two-sided family-wise false-alarm rate < 2e-3


def test_errors_name_the_argument():
    m = model_with_table()
    prefix, pos, neg = enumerated_batch(2)
    obj = ResidualNCE(nu=2)
    with pytest.raises(ValueError, match=r"^negatives: expected nu \* B = 2 \* 6 = 12 rows .*; got 6"):
        obj(m, (prefix, pos, neg[:6]))
    with pytest.raises(ValueError, match=r"^positive: expected one continuation per prefix \(6\); got 5"):
        obj(m, (prefix, pos[:5], neg))
    with pytest.raises(ValueError, match="^prefix: expected at least one prefix"):
        obj(m, (prefix[:0], pos[:0], neg[:0]))
    with pytest.raises(TypeError, match="^batch: expected .* got tuple of 2"):
        obj(m, (prefix, pos))
    with pytest.raises(TypeError, match="^negatives: expected an ebms.sequences.Sequences; got Tensor"):
        obj(m, (prefix, pos, neg.tokens))
    with pytest.raises(TypeError, match="^model: expected a residual LM with energy"):
        obj(nn.Linear(1, 1), (prefix, pos, neg))
    with pytest.raises(ValueError, match=r"^batch: expected negative tokens \(B, nu, T\) and lengths \(B, nu\)"):
        packed = ResidualNCE.pack(prefix, pos, neg)
        obj(m, packed[:4] + (packed[4].flatten(1), packed[5]))
    with pytest.raises(ValueError, match="^nu: "):
        ResidualNCE(nu=0)
    with pytest.raises(ValueError, match="^negatives: expected a positive multiple of the 6 prefixes; got 7"):
        ResidualNCE.pack(prefix, pos, neg[:7])


# --- a short Trainer run ----------------------------------------------------------------------
TV, TK, P, S = 5, 3, 16, 32


def repeat_loving_ngram() -> NGram:
    """Data law: after a token, the same token again with probability 0.6."""
    table = torch.full((TV, TV), 0.1, dtype=torch.float64)
    table[torch.arange(1, TV), torch.arange(1, TV)] = 0.6
    table = table / table.sum(1, keepdim=True)
    return NGram(TV, 2, table.log())


def toy_task() -> tuple[Sequences, NegativeCache, NegativeCache]:
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 4, (P,), generator=g)
    prefixes = Sequences(torch.randint(1, TV, (P, 3), generator=g), lengths)
    base = ngram(3, vocab=TV)
    negatives = NegativeCache.build(NGramContinuations(base), prefixes, S, horizon=TK, generator=g)
    positives = NegativeCache.build(NGramContinuations(repeat_loving_ngram()), prefixes, S, horizon=TK, generator=g)
    return prefixes, negatives, positives


def make_trainer(run: Path, steps: int, task) -> Trainer:
    prefixes, negatives, positives = task
    torch.manual_seed(0)
    model = ResidualLM(ngram(3, vocab=TV), TextEnergy(TV, kind="bilstm", dim=8, layers=1), horizon=TK)

    def stream(batch_size: int, generator: torch.Generator):
        idx = torch.randint(P, (batch_size,), generator=generator)
        return ResidualNCE.pack(prefixes[idx], positives.draw(idx, 1, generator), negatives.draw(idx, 2, generator))

    return Trainer(ResidualNCE(nu=2), model, stream, steps=steps, batch_size=16, run_dir=run, log_every=5,
                   checkpoint_every=10, progress=False, optimizer=lambda groups: torch.optim.Adam(groups, lr=0.02))


def held_out_loss(model: ResidualLM, task) -> float:
    prefixes, negatives, positives = task
    idx = torch.arange(P).repeat_interleave(S)
    neg = negatives.draw(idx, 2, torch.Generator().manual_seed(1))
    model.eval()
    with torch.no_grad():
        return float(ResidualNCE(nu=2)(model, (prefixes[idx], positives.samples, neg)).loss)


def test_trainer_lowers_the_loss_and_resumes_bit_for_bit(tmp_path: Path):
    task = toy_task()
    one = make_trainer(tmp_path / "one", 40, task)
    start = held_out_loss(one.model, task)
    assert start == pytest.approx(math.log(3) + 2 * math.log(1.5))  # E = 0: softplus(log 2) + 2 softplus(-log 2)
    one.fit()
    assert held_out_loss(one.model, task) < start
    make_trainer(tmp_path / "two", 20, task).fit()
    two = make_trainer(tmp_path / "two", 40, task)
    two.fit(resume=True)
    for a, b in zip(one.model.state_dict().values(), two.model.state_dict().values()):
        assert torch.equal(a, b)
    lines = [json.loads(s) for s in (tmp_path / "one" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in lines if "step" in r and "metrics" in r]
    assert set(steps[-1]["metrics"]) >= {"e_pos", "e_neg", "gap", "accuracy"}

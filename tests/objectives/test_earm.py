"""E-ARM's importance-weighted gradient equals the exact gradient on a tiny AR model (enumeration):
exact weights give the exact negative phase, drawn batches converge to it, truncation gives the
exact gradient of the truncated objective; the moving-average denominator, the start switch, the
sentence-LM adapter and a short training run behave as documented."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ebms.capabilities import EARMModel
from ebms.distributions import NGram
from ebms.models.lm import LSTMLM, TransformerLM, perplexity
from ebms.objectives import AutoregressiveNLL
from ebms.objectives.earm import EARM, EARMTerms, LMAdapter, energy_resample, sequence_energy
from ebms.sequences import Sequences
from ebms.train import Trainer

V, K = 3, 3


class TableAR(nn.Module):
    """Fixed-length AR model whose logits after each prefix are a free table row (``sum_k V^k`` rows)."""

    def __init__(self, seed: int = 0, scale: float = 1.0) -> None:
        super().__init__()
        rows = sum(V**k for k in range(K))
        g = torch.Generator().manual_seed(seed)
        self.table = nn.Parameter(scale * torch.randn(rows, V, generator=g, dtype=torch.float64))

    @staticmethod
    def contexts(x: torch.Tensor) -> torch.Tensor:
        """``(B, K)`` table row of the prefix before each step."""
        cols, code, offset = [], torch.zeros(x.shape[0], dtype=torch.long), 0
        for k in range(K):
            cols.append(offset + code)
            offset += V**k
            code = code * V + x[:, k]
        return torch.stack(cols, 1)

    def teacher_forced(self, x: torch.Tensor):
        return self.table[self.contexts(x)], x, torch.ones_like(x, dtype=torch.bool)

    def draw(self, x: torch.Tensor, generator):
        out = torch.zeros_like(x)
        for k in range(K):
            probs = self.table[self.contexts(out)[:, k]].softmax(-1)
            out[:, k] = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        return out


def _all(length: int) -> torch.Tensor:
    return torch.tensor(list(itertools.product(range(V), repeat=length)), dtype=torch.long).reshape(-1, length)


def _grad(value: torch.Tensor, params) -> torch.Tensor:
    return torch.cat([g.reshape(-1) for g in torch.autograd.grad(value, list(params))])


def _table_energy(model: TableAR, x: torch.Tensor, k: int, m: int | None) -> torch.Tensor:
    """``E~(x_k, x_<k) = -z[x_k] - log q~(x_<k)`` of rows ``x`` (width >= k + 1), written out directly."""
    full = F.pad(x[:, :k + 1], (0, K - k - 1))
    logits = model.table[TableAR.contexts(full)]
    lp = logits.log_softmax(-1).gather(-1, full.unsqueeze(-1)).squeeze(-1)
    hist = sum((lp[:, j] if m is None or j >= k - m else lp[:, j].detach() for j in range(k)),
               torch.zeros(x.shape[0], dtype=torch.float64))
    return -logits[:, k].gather(1, full[:, k:k + 1]).squeeze(1) - hist


def _exact_negative(model: TableAR, m: int | None) -> tuple[torch.Tensor, list[float]]:
    """``sum_k E_{P_theta,k}[grad E~]`` by enumerating every ``(x_<k, x_k)``, and ``log Z_k``."""
    total, log_z = torch.zeros((), dtype=torch.float64), []
    for k in range(K):
        x = _all(k + 1)
        full = F.pad(x, (0, K - k - 1))
        logits = model.table[TableAR.contexts(full)]
        lp = logits.log_softmax(-1).gather(-1, full.unsqueeze(-1)).squeeze(-1)
        log_p = lp[:, :k].sum(1) + logits[:, k].gather(1, x[:, k:]).squeeze(1)  # log q(x_<k) + z[x_k]
        log_z.append(float(log_p.detach().logsumexp(0)))
        total = total + ((log_p - log_p.logsumexp(0)).exp().detach() * _table_energy(model, x, k, m)).sum()
    return _grad(total, model.parameters()), log_z


def _data(seed: int = 1, n: int = 5) -> torch.Tensor:
    return torch.randint(0, V, (n, K), generator=torch.Generator().manual_seed(seed))


def _positive(model: TableAR, x: torch.Tensor, m: int | None) -> torch.Tensor:
    return _grad(sum(_table_energy(model, x, k, m).mean() for k in range(K)), model.parameters())


def _enumerated(model: TableAR):
    x = _all(K)
    tf = model.teacher_forced(x)
    log_q = tf[0].log_softmax(-1).gather(-1, x.unsqueeze(-1)).squeeze(-1).sum(1)
    return tf, log_q.detach()


# --- (a) exact weights give the exact negative phase ----------------------------------------------
@pytest.mark.parametrize("rao_blackwell", [False, True])
def test_exact_importance_weights_give_the_exact_negative_phase(rao_blackwell):
    model = TableAR()
    data = _data()
    draws, log_q = _enumerated(model)
    assert isinstance(model, EARMModel)
    assert float(log_q.logsumexp(0)) == pytest.approx(0.0, abs=1e-14)  # the enumeration is the whole law
    terms = EARM(truncate=None, rao_blackwell=rao_blackwell).surrogate(model.teacher_forced(data), draws,
                                                                       draw_log_mass=log_q)
    negative = _positive(model, data, None) - _grad(terms.value, model.parameters())
    exact, log_z = _exact_negative(model, None)
    torch.testing.assert_close(negative, exact, rtol=0, atol=1e-10)
    torch.testing.assert_close(terms.log_denominator, torch.tensor(log_z, dtype=torch.float64), rtol=0, atol=1e-12)
    assert isinstance(terms, EARMTerms) and bool(terms.used.all())


def test_exact_weights_match_enumeration_for_a_sentence_lm_with_a_horizon():
    # LSTM over tokens {1, 2} (+ </s>), horizon 3: draws = every sentence of length < 3 (ended) and of
    # length 3 (cut, no </s> step); data of different lengths, lambda_k = n_k / B
    torch.manual_seed(0)
    lm = LSTMLM(V, embedding_dim=3, hidden_size=4, num_layers=1).double()
    adapter = LMAdapter(lm, max_length=3)
    data = Sequences.from_lists([[1], [2, 1], [], [1, 1]])
    words = [list(w) for n in range(4) for w in itertools.product([1, 2], repeat=n)]
    every = Sequences.from_lists(words)
    logits, targets, mask = adapter.teacher_forced(every)
    log_q = torch.where(mask, logits.log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1), 0.0).sum(1)
    log_q = log_q.detach()
    assert float(log_q.logsumexp(0)) == pytest.approx(0.0, abs=1e-12)
    ended = every.lengths < 3
    torch.testing.assert_close(log_q[ended], lm.log_prob(every[ended]), rtol=0, atol=1e-12)
    terms = EARM(truncate=None).surrogate(adapter.teacher_forced(data), (logits, targets, mask),
                                          draw_log_mass=log_q)
    params = list(lm.parameters())

    def energy(prefix: list[list[int]], outcome: torch.Tensor, k: int) -> torch.Tensor:
        c = Sequences.from_lists(prefix)
        z = lm.logits(c)[:, k]
        hist = lm.continuation_log_prob(Sequences.from_lists([[]] * len(prefix)), c, end=False)
        return -z.gather(1, outcome.unsqueeze(1)).squeeze(1) - hist

    positive = sum(energy([s[:k]], torch.tensor([s[k] if k < len(s) else 0]), k).sum() / 4
                   for s in data.tolist() for k in range(len(s) + 1))
    negative = torch.zeros((), dtype=torch.float64)
    for k, n_k in enumerate([4, 3, 2]):  # data rows real at steps 0, 1, 2
        prefixes = [list(w) for w in itertools.product([1, 2], repeat=k) for _ in range(V)]
        outcome = torch.arange(V).repeat(len(prefixes) // V)
        e = energy(prefixes, outcome, k)
        log_p = (-e).detach()  # log q(x_<k) + z[x_k] = -E
        negative = negative + n_k / 4 * ((log_p - log_p.logsumexp(0)).exp() * e).sum()
    want = _grad(positive - negative, params)
    torch.testing.assert_close(_grad(terms.value, params), want, rtol=0, atol=1e-10)


# --- (b) drawn batches converge to the exact negative phase ---------------------------------------
def _per_row_energy_grads(model: TableAR, x: torch.Tensor) -> torch.Tensor:
    """``(B, K, P)`` gradients of ``E(x_k, x_<k)`` per row and step, in closed form for the table:
    ``grad phi = -e_{c_k, x_k}``, ``grad log q(x_l | x_<l) = e_{c_l} (onehot(x_l) - softmax(table[c_l]))``."""
    ctx = TableAR.contexts(x)
    rows, P = model.table.shape[0], model.table.numel()
    onehot = F.one_hot(x, V).double()
    score = onehot - model.table.detach()[ctx].softmax(-1)  # (B, K, V)
    place = F.one_hot(ctx, rows).double()  # (B, K, rows)
    dlogq = (place.unsqueeze(-1) * score.unsqueeze(2)).reshape(x.shape[0], K, P)
    dphi = -(place.unsqueeze(-1) * onehot.unsqueeze(2)).reshape(x.shape[0], K, P)
    before = F.pad(dlogq.cumsum(1), (0, 0, 1, 0))[:, :-1]  # sum over l < k
    return dphi - before


def test_drawn_batches_converge_to_the_exact_negative_phase():
    model = TableAR(seed=3)
    data = _data()
    n = 20000
    x = model.draw(torch.zeros(n, K, dtype=torch.long), torch.Generator().manual_seed(7))
    terms = EARM(truncate=None, ema=None).surrogate(model.teacher_forced(data), model.teacher_forced(x))
    estimate = _positive(model, data, None) - _grad(terms.value, model.parameters())
    # the same self-normalised estimator written out per row, and its delta-method standard error
    s = terms.log_weights.softmax(0)  # (n, K) = w / n
    h = _per_row_energy_grads(model, x)  # (n, K, P)
    by_step = (s.unsqueeze(-1) * h).sum(0)  # (K, P)
    torch.testing.assert_close(estimate, by_step.sum(0), rtol=0, atol=1e-10)
    influence = n * (s.unsqueeze(-1) * (h - by_step)).sum(1)  # (n, P)
    stderr = influence.square().sum(0).sqrt() / n
    exact, _ = _exact_negative(model, None)
    # z = 4.5 per coordinate: two-sided 6.8e-6, Bonferroni over the 39 coordinates 2.7e-4; the
    # self-normalisation bias is O(1/n), far below the O(1/sqrt(n)) standard error
    assert bool(((estimate - exact).abs() <= 4.5 * stderr + 1e-12).all()), ((estimate - exact) / stderr)
    assert float(terms.ess) == pytest.approx(float((1 / s.square().sum(0)).mean()), rel=1e-9)


# --- (c) truncation: the exact gradient of the truncated objective -----------------------------------
@pytest.mark.parametrize("m", [0, 1, 2])
def test_truncated_weights_give_the_exact_gradient_of_the_truncated_objective(m):
    # truncated objective: sum_k KL(P_d,k || P_theta,k) with E~ = phi - log q~, where log q~ keeps the
    # gradient of the m most recent conditionals and holds the older ones at their current value
    # (a frozen copy of theta); P_theta,k itself is unchanged. Its gradient, by enumeration:
    model = TableAR(seed=5)
    data = _data(seed=2)
    draws, log_q = _enumerated(model)
    terms = EARM(truncate=m).surrogate(model.teacher_forced(data), draws, draw_log_mass=log_q)
    want = _positive(model, data, m) - _exact_negative(model, m)[0]
    got = _grad(terms.value, model.parameters())
    torch.testing.assert_close(got, want, rtol=0, atol=1e-10)
    full = EARM(truncate=None).surrogate(model.teacher_forced(data), _enumerated(model)[0], draw_log_mass=log_q)
    assert float(terms.value.detach()) == pytest.approx(float(full.value.detach()), abs=1e-12)  # same value
    if m == K - 1:  # m >= K - 1 keeps every conditional: no truncation at all
        torch.testing.assert_close(got, _grad(full.value, model.parameters()), rtol=0, atol=1e-12)


def test_data_side_gradient_passes_gradcheck():
    model = TableAR(seed=1)
    logits = model.teacher_forced(_data())[0].detach().requires_grad_()
    x = _data()
    draws = model.teacher_forced(_data(seed=9))
    ones = torch.ones_like(x, dtype=torch.bool)
    objective = EARM(truncate=None)
    assert torch.autograd.gradcheck(lambda z: objective.surrogate((z, x, ones), draws).value, (logits,))


# --- (d) moving-average denominator and the start switch ---------------------------------------------
class Scripted(nn.Module):
    """A TableAR whose draws are given in advance (one batch per call), counting the calls."""

    def __init__(self, batches: list[torch.Tensor]) -> None:
        super().__init__()
        self.inner, self.batches, self.calls = TableAR(seed=2), batches, 0

    def teacher_forced(self, x):
        return self.inner.teacher_forced(x)

    def draw(self, x, generator):
        self.calls += 1
        return self.batches[self.calls - 1]


def _log_hat(model: Scripted, x: torch.Tensor) -> torch.Tensor:
    return model.teacher_forced(x)[0].detach().logsumexp(-1).logsumexp(0) - math.log(x.shape[0])


def test_moving_average_denominator_folds_each_batch_in():
    batches = [_data(seed=s, n=6) for s in (11, 12, 13)]
    model = Scripted(batches)
    objective = EARM(ema=0.75, truncate=None)
    objective(model, _data())
    first = _log_hat(model, batches[0])
    torch.testing.assert_close(objective.log_denominator[:K], first, rtol=0, atol=1e-12)
    out = objective(model, _data())
    second = torch.logaddexp(first + math.log(0.75), _log_hat(model, batches[1]) + math.log(0.25))
    torch.testing.assert_close(objective.log_denominator[:K], second, rtol=0, atol=1e-12)
    assert objective.ema_count[:K].tolist() == [2] * K and int(objective.ema_count[K:].sum()) == 0
    # the loss is the cross-entropy plus the surrogate with the averaged denominator
    want = EARM(truncate=None).surrogate(model.teacher_forced(_data()), model.teacher_forced(batches[1]),
                                         log_denominator=second)
    assert out.metrics["earm"] == pytest.approx(float(want.value.detach()), abs=1e-6)
    assert float(want.log_weights.exp().sum()) != pytest.approx(6 * K)  # no longer self-normalised
    alone = EARM(ema=None, truncate=None)
    terms = alone.surrogate(model.teacher_forced(_data()), model.teacher_forced(batches[2]))
    torch.testing.assert_close(terms.log_weights.exp().sum(0), torch.full((K,), 6.0, dtype=torch.float64))
    alone(model, _data())
    assert int(alone.ema_count.sum()) == 0  # ema=None keeps no average


def test_start_step_switches_on_after_that_many_training_calls_and_resumes_exactly():
    batches = [_data(seed=s, n=4) for s in range(20, 30)]
    model = Scripted(batches)
    objective = EARM(start_step=2, ema=0.5)
    flags = [objective(model, _data()).metrics["active"] for _ in range(2)]
    assert flags == [0.0, 0.0] and model.calls == 0
    saved = {k: v.clone() for k, v in objective.state_dict().items()}
    on = objective(model, _data())
    assert on.metrics["active"] == 1.0 and model.calls == 1 and on.metrics["ess"] > 0
    objective.eval()  # evaluation: cross-entropy only, the counter stands still
    off = objective(model, _data())
    assert off.metrics["active"] == 0.0 and int(objective.steps) == 3
    torch.testing.assert_close(off.loss, torch.tensor(off.metrics["ce"], dtype=torch.float64), rtol=1e-6, atol=0)
    resumed = EARM(start_step=2, ema=0.5)
    resumed.load_state_dict(saved)
    model.calls = 0
    again = resumed(model, _data())
    assert again.metrics["active"] == 1.0
    torch.testing.assert_close(again.loss, on.loss, rtol=0, atol=0)
    torch.testing.assert_close(resumed.log_denominator, objective.log_denominator, rtol=0, atol=0)


def test_a_resumed_trainer_run_continues_exactly(tmp_path: Path):
    data = torch.randint(0, V, (64, K), generator=torch.Generator().manual_seed(0))

    def trainer(where: Path, steps: int) -> Trainer:
        return Trainer(EARM(start_step=3, ema=0.9), TableAR(seed=4), data, steps=steps, batch_size=8, run_dir=where,
                       checkpoint_every=4, optimizer=lambda groups: torch.optim.Adam(groups, lr=0.05),
                       progress=False, guard=None)

    one = trainer(tmp_path / "one", 8)
    one.fit()
    trainer(tmp_path / "two", 4).fit()
    two = trainer(tmp_path / "two", 8)
    two.fit(resume=True)
    for a, b in zip([*one.model.state_dict().values(), *one.objective.state_dict().values()],
                    [*two.model.state_dict().values(), *two.objective.state_dict().values()]):
        assert torch.equal(a, b)
    assert int(two.objective.steps) == 8 and int(two.objective.ema_count[0]) == 5


def test_minus_infinity_logits_at_masked_steps_leave_values_and_gradients_finite():
    model, x = TableAR(), _data()
    logits, targets, mask = model.teacher_forced(x)
    mask = mask.clone()
    mask[:, -1] = False
    logits = torch.where(mask.unsqueeze(-1), logits, -math.inf)
    value = EARM().surrogate((logits, targets, mask), model.teacher_forced(_data(seed=3))).value
    assert math.isfinite(float(value.detach()))
    assert bool(torch.isfinite(_grad(value, model.parameters())).all())


# --- the sentence-LM adapter ---------------------------------------------------------------------------
def _lstm(seed: int = 0, vocab: int = 6) -> LSTMLM:
    torch.manual_seed(seed)
    return LSTMLM(vocab, embedding_dim=4, hidden_size=5, num_layers=1).double()


def test_adapter_steps_are_the_tokens_then_the_end_symbol_and_the_ce_is_the_lm_nll():
    lm = _lstm()
    x = Sequences.from_lists([[1, 2, 3], [4], [], [5, 5, 1, 2]])
    logits, targets, mask = LMAdapter(lm).teacher_forced((x.pad_to(7).tokens, x.lengths))
    torch.testing.assert_close(logits, lm.logits(x), rtol=0, atol=0)
    assert targets.tolist() == [[1, 2, 3, 0, 0], [4, 0, 0, 0, 0], [0, 0, 0, 0, 0], [5, 5, 1, 2, 0]]
    assert mask.sum(1).tolist() == [4, 2, 1, 5]
    objective = EARM(start_step=1)
    out = objective(lm, x)  # an LM is wrapped in LMAdapter(lm) automatically
    torch.testing.assert_close(out.loss, AutoregressiveNLL()(lm, x).loss, rtol=0, atol=1e-14)
    smooth = EARM(start_step=1, label_smoothing=0.2)(lm, x)
    log_p = logits.log_softmax(-1)
    uniform = torch.where(mask, -log_p.mean(-1), 0.0).sum() / mask.sum()
    torch.testing.assert_close(smooth.loss, 0.8 * out.loss + 0.2 * uniform, rtol=0, atol=1e-14)


def test_adapter_reads_rows_at_or_past_the_horizon_as_cut_without_an_end_step():
    lm = _lstm()
    x = Sequences.from_lists([[1, 2, 3], [4], [2, 2]])
    logits, targets, mask = LMAdapter(lm, max_length=2).teacher_forced(x)
    assert logits.shape == (3, 3, 6)
    assert mask.tolist() == [[True, True, False], [True, True, False], [True, True, False]]
    assert targets[:, :2].tolist() == [[1, 2], [4, 0], [2, 2]]


def test_adapter_draws_from_the_lms_law_in_the_batch_type_and_restores_the_mode():
    lm = _lstm()
    x = Sequences.from_lists([[1, 2, 3], [4]])
    adapter = LMAdapter(lm)
    drawn = adapter.draw(x, torch.Generator().manual_seed(0))
    assert isinstance(drawn, Sequences) and drawn.batch_size == 2 and int(drawn.lengths.max()) <= 4
    assert lm.training
    again = adapter.draw((x.tokens, x.lengths), torch.Generator().manual_seed(0))
    assert isinstance(again, tuple) and torch.equal(again[0], drawn.tokens) and torch.equal(again[1], drawn.lengths)
    fixed = LMAdapter(lm, max_length=9).draw(x, torch.Generator().manual_seed(1))
    want = lm.eval().sample(2, torch.Generator().manual_seed(1), max_length=9, truncate=True)
    assert fixed.equal(want)
    wrapped = EARM()(lm.train(), x, generator=torch.Generator().manual_seed(3))
    explicit = EARM()(LMAdapter(lm), x, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(wrapped.loss, explicit.loss, rtol=0, atol=0)


# --- (e) a short training run --------------------------------------------------------------------------
def test_a_short_earm_run_on_a_toy_lm_stays_finite_and_keeps_the_cross_entropy():
    g = torch.Generator().manual_seed(0)
    table = torch.randn(6, 6, generator=g, dtype=torch.float64) * 2.0
    table[:, 0] += 1.5
    table[0, 0] = -math.inf  # no empty sentence
    source = NGram(6, 2, table.log_softmax(-1))
    train = source.sample(256, torch.Generator().manual_seed(1), max_length=200)
    held = source.sample(256, torch.Generator().manual_seed(2), max_length=200)

    def fit(objective: nn.Module) -> tuple[float, dict[str, float]]:
        torch.manual_seed(0)
        lm = LSTMLM(6, embedding_dim=8, hidden_size=16, num_layers=1)
        trainer = Trainer(objective, lm, (train.tokens, train.lengths), steps=36, batch_size=16, run_dir=None,
                          optimizer=lambda groups: torch.optim.Adam(groups, lr=0.03), progress=False, guard=None)
        metrics = trainer.fit().metrics
        return perplexity(lm, [held]).perplexity, metrics

    base, _ = fit(AutoregressiveNLL())
    earm, metrics = fit(EARM(start_step=28, weight=0.2))
    assert metrics["active"] == 1.0 and all(math.isfinite(v) for v in metrics.values()), metrics
    assert earm < 1.1 * base, (earm, base)  # 8 E-ARM steps after 28 CE steps: held-out perplexity within 10%


# --- validation -------------------------------------------------------------------------------------------
def test_bad_arguments_models_and_outputs_are_named():
    with pytest.raises(ValueError, match=r"^weight: expected a finite number > 0; got 0"):
        EARM(weight=0)
    with pytest.raises(ValueError, match=r"^start_step: expected an int >= 0; got -1"):
        EARM(start_step=-1)
    with pytest.raises(TypeError, match=r"^truncate: expected an int; got 1.5"):
        EARM(truncate=1.5)
    with pytest.raises(ValueError, match=r"^ema: expected a number in \[0, 1\); got 1"):
        EARM(ema=1)
    with pytest.raises(TypeError, match=r"^rao_blackwell: expected a bool; got 1"):
        EARM(rao_blackwell=1)
    with pytest.raises(ValueError, match=r"^label_smoothing: expected a number in \[0, 1\); got 1.0"):
        EARM(label_smoothing=1.0)
    with pytest.raises(TypeError, match=r"^model: expected an EARMModel \(teacher_forced\(batch\), draw\(batch, "
                                        r"generator\)\) or an autoregressive sentence LM \(ebms.models.lm\); got Linear"):
        EARM()(nn.Linear(2, 2), _data())
    with pytest.raises(TypeError, match=r"^lm: expected an autoregressive sentence LM with logits"):
        LMAdapter(nn.Linear(2, 2))
    with pytest.raises(ValueError, match=r"^max_length: expected an int >= 1; got 0"):
        LMAdapter(_lstm(), max_length=0)
    with pytest.raises(TypeError, match=r"^batch: expected Sequences or a \(tokens \(B, T\), lengths \(B,\)\) tuple; "
                                        r"got list"):
        LMAdapter(_lstm()).teacher_forced([[1]])
    with pytest.raises(ValueError, match=r"^batch: expected at least one sentence"):
        LMAdapter(_lstm()).draw(Sequences(torch.zeros(0, 1, dtype=torch.long), torch.zeros(0, dtype=torch.long)),
                                None)
    with pytest.raises(ValueError, match=r"^max_steps: the batch has K=3 steps; this EARM keeps moving averages for "
                                         r"at most max_steps=2"):
        EARM(max_steps=2)(TableAR(), _data())
    model, x = TableAR(), _data()
    good = model.teacher_forced(x)
    objective = EARM()
    with pytest.raises(TypeError, match=r"^data: expected a tuple \(logits \(B, K, V\), targets \(B, K\), mask "
                                        r"\(B, K\)\) of tensors; got list"):
        objective.surrogate(list(good), good)
    with pytest.raises(ValueError, match=r"^draws: expected floating logits of shape \(B, K, V\) with B, K >= 1; "
                                         r"got torch.float64 of shape \(5, 3\)"):
        objective.surrogate(good, (good[0][..., 0], good[1], good[2]))
    with pytest.raises(ValueError, match=r"^data: expected targets and mask of shape \(5, 3\); got \(5, 2\)"):
        objective.surrogate((good[0], good[1][:, :2], good[2]), good)
    with pytest.raises(TypeError, match=r"^data: expected int64 targets and a bool mask; got torch.int64 and "
                                        r"torch.int64"):
        objective.surrogate((good[0], good[1], good[2].long()), good)
    with pytest.raises(ValueError, match=r"^data: expected targets in \[0, 3\) at the real steps; got 3"):
        objective.surrogate((good[0], good[1].clamp(min=3), good[2]), good)
    with pytest.raises(ValueError, match=r"^draws: expected 3 outcomes per step as the data; got 2"):
        objective.surrogate(good, (good[0][..., :2], good[1].clamp(max=1), good[2]))
    with pytest.raises(ValueError, match=r"^draw_log_mass: expected shape \(5,\); got \(4,\)"):
        objective.surrogate(good, good, draw_log_mass=torch.zeros(4))
    with pytest.raises(ValueError, match=r"^log_denominator: expected shape \(3,\); got \(2,\)"):
        objective.surrogate(good, good, log_denominator=torch.zeros(2))


@pytest.mark.parametrize("horizon", [None, 2])
def test_a_sentence_lm_is_an_earm_model_itself_and_reads_as_its_adapter(horizon):
    # issue 25: the capability is declared on AutoregressiveLM; LMAdapter only fixes another horizon
    torch.manual_seed(0)
    lm = TransformerLM(5, d_model=4, num_heads=1, num_layers=1, dim_feedforward=8, max_length=6)
    assert isinstance(lm, EARMModel)
    adapter = LMAdapter(lm, max_length=horizon)
    batch = Sequences.from_lists([[1, 2, 3], [4], [2, 2, 2, 2, 1]])
    for got, want in zip(lm.teacher_forced(batch, max_length=horizon), adapter.teacher_forced(batch)):
        assert torch.equal(got, want)
    lm.train()
    mine = lm.draw((batch.tokens, batch.lengths), torch.Generator().manual_seed(3), max_length=horizon)
    theirs = adapter.draw((batch.tokens, batch.lengths), torch.Generator().manual_seed(3))
    assert lm.training and isinstance(mine, tuple) and all(torch.equal(a, b) for a, b in zip(mine, theirs))
    with pytest.raises(ValueError, match="max_length: expected at most the LM's max_length=6; got 7"):
        lm.teacher_forced(batch, max_length=7)


# --- clipping the surrogate on its own --------------------------------------------------------------------
def _grads(model: nn.Module, objective: EARM, seed: int = 3) -> tuple[torch.Tensor, dict[str, float]]:
    model.zero_grad()
    out = objective(model, _data(), generator=torch.Generator().manual_seed(seed))
    out.loss.backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()]), out.metrics


@pytest.mark.parametrize("clip", [1e-3, 1e3])
def test_clip_rescales_only_the_surrogates_gradient_to_at_most_that_norm(clip):
    model = TableAR(seed=1, scale=2.0)
    g_ce, inactive = _grads(model, EARM(start_step=1, clip=clip))  # inactive: the cross-entropy's gradient alone
    weight = 0.7
    g_all, plain = _grads(model, EARM(weight=weight, ema=None))
    g_s = g_all - g_ce  # weight * grad S, same draws (same generator seed)
    g_clip, metrics = _grads(model, EARM(weight=weight, ema=None, clip=clip))
    norm = float(torch.linalg.vector_norm(g_s))
    assert metrics["earm_grad_norm"] == pytest.approx(norm, rel=1e-6)  # metrics are stored in float32
    assert torch.allclose(g_clip, g_ce + min(1.0, clip / norm) * g_s, rtol=0, atol=1e-12)
    assert metrics["earm"] == plain["earm"] and metrics["ce"] == plain["ce"]  # values are not rescaled
    assert "earm_grad_norm" not in plain and inactive["earm_grad_norm"] == 0.0


def test_a_clipped_surrogate_step_does_not_depend_on_the_weight_once_its_norm_exceeds_the_clip():
    # session 27: with clip=c, weight * ||grad S|| >= c gives the step c * grad S / ||grad S|| for every weight, so a
    # weight sweep at a binding clip trains the same model; only the clip sets the surrogate's strength
    model = TableAR(seed=1, scale=2.0)
    g_ce, _ = _grads(model, EARM(start_step=1))
    g_one, _ = _grads(model, EARM(weight=1.0, ema=None))
    n_s = float(torch.linalg.vector_norm(g_one - g_ce))  # ||grad S|| at weight 1
    clip = 0.1 * n_s
    steps = {w: _grads(model, EARM(weight=w, ema=None, clip=clip)) for w in (0.2, 1.0, 3.0)}  # all binding
    for w, (g, m) in steps.items():
        assert m["earm_grad_norm"] == pytest.approx(w * n_s, rel=1e-6)
        assert torch.allclose(g, steps[1.0][0], rtol=0, atol=1e-12)
    loose, _ = _grads(model, EARM(weight=0.05, ema=None, clip=clip))  # 0.05 ||grad S|| < clip: the weight counts
    assert torch.allclose(loose, g_ce + 0.05 * (g_one - g_ce), rtol=0, atol=1e-12)


def test_clip_needs_a_module_with_parameters():
    class Frozen(TableAR):
        pass

    frozen = Frozen()
    frozen.table.requires_grad_(False)
    with pytest.raises(TypeError, match=r"^clip: the surrogate's gradient is clipped over the model's parameters; "
                                        r"Frozen has none that require gradient \(use clip=None\)"):
        EARM(clip=1.0)(frozen, _data(), generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=r"^clip: expected a finite number > 0; got 0"):
        EARM(clip=0)


@pytest.mark.parametrize("ce_clip", [1e-3, 1e3])
@pytest.mark.parametrize("clip", [None, 1e-2])
def test_ce_clip_bounds_each_terms_gradient_on_its_own(ce_clip, clip):
    model = TableAR(seed=1, scale=2.0)
    g_ce, _ = _grads(model, EARM(start_step=1))
    g_all, _ = _grads(model, EARM(weight=0.7, ema=None))
    g_s = g_all - g_ce
    n_ce, n_s = float(torch.linalg.vector_norm(g_ce)), float(torch.linalg.vector_norm(g_s))
    want = min(1.0, ce_clip / n_ce) * g_ce + (1.0 if clip is None else min(1.0, clip / n_s)) * g_s
    got, metrics = _grads(model, EARM(weight=0.7, ema=None, clip=clip, ce_clip=ce_clip))
    assert torch.allclose(got, want, rtol=0, atol=1e-12)
    assert metrics["ce_grad_norm"] == pytest.approx(n_ce, rel=1e-6)
    warm, warm_metrics = _grads(model, EARM(start_step=1, ce_clip=ce_clip))  # warm-up: the clipped CE alone
    assert torch.allclose(warm, min(1.0, ce_clip / n_ce) * g_ce, rtol=0, atol=1e-12)
    assert warm_metrics["ce_grad_norm"] == pytest.approx(n_ce, rel=1e-6)


def test_ce_clip_is_off_in_eval_and_refuses_a_frozen_model():
    model = TableAR(seed=1, scale=2.0)
    out = EARM(ce_clip=1e-3).eval()(model, _data(), generator=torch.Generator().manual_seed(0))
    assert "ce_grad_norm" not in out.metrics  # an objective in eval mode reports the loss; no gradient is taken
    frozen = TableAR()
    frozen.table.requires_grad_(False)
    with pytest.raises(TypeError, match=r"^ce_clip: the cross-entropy's gradient is clipped over the model's "
                                        r"parameters; TableAR has none that require gradient \(use ce_clip=None\)"):
        EARM(ce_clip=1.0)(frozen, _data(), generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=r"^ce_clip: expected a finite number > 0; got -1"):
        EARM(ce_clip=-1)


# --- the sequence energy and energy resampling --------------------------------------------------------------
def test_sequence_energy_gives_the_e_arm_law_of_the_last_step_by_enumeration():
    model = TableAR(seed=2, scale=1.5)
    x = _all(K)  # every sequence of the fixed-length model
    log_q, energy = sequence_energy(model, x)
    logits = model.teacher_forced(x)[0]
    assert torch.allclose(log_q, logits.log_softmax(-1).gather(-1, x.unsqueeze(-1)).squeeze(-1).sum(1), atol=1e-12)
    # p_K(x) = q(x_<K) exp(-phi(x_K, x_<K)) / Z_K (the paper's Eq. 4 at k = K)
    phi = -logits[:, K - 1].gather(-1, x[:, K - 1:]).squeeze(-1)
    log_q_prefix = logits[:, :K - 1].log_softmax(-1).gather(-1, x[:, :K - 1].unsqueeze(-1)).squeeze(-1).sum(1)
    p_k = (log_q_prefix - phi).log_softmax(0)
    assert torch.allclose((log_q - energy).log_softmax(0), p_k, atol=1e-12)


def test_sequence_energy_of_a_sentence_lm_is_minus_the_log_normaliser_of_its_end_step():
    lm = _lstm().eval()
    x = Sequences.from_lists([[1, 2, 3], [4], [5, 5, 1, 2]])
    log_q, energy = sequence_energy(lm, x)
    assert torch.allclose(log_q, lm.log_prob(x), atol=1e-12)
    ends = lm.logits(x)[torch.arange(3), x.lengths].logsumexp(-1)
    assert torch.allclose(energy, -ends, atol=1e-12)


def test_energy_resample_follows_exp_minus_energy_and_the_joint_rule_its_argmax():
    log_q = torch.tensor([-1.0, -2.0, -math.inf, -0.5, -3.0, -0.1])
    energy = torch.tensor([0.3, -0.4, -9.0, 1.0, 0.0, 2.0])
    joint = energy_resample(log_q, energy, 3, rule="joint")
    assert joint.tolist() == [0, 3]  # row 2 is an empty slot; -0.5 - 1.0 > -3.0 - 0.0 > -0.1 - 2.0
    n = 20000
    picks = energy_resample(log_q.repeat(n), energy.repeat(n), 3, generator=torch.Generator().manual_seed(0))
    local = (picks % 3).view(n, 2)
    for b in range(2):
        p = torch.where(torch.isfinite(log_q[3 * b:3 * b + 3]), -energy[3 * b:3 * b + 3], -math.inf).softmax(0)
        freq = torch.bincount(local[:, b], minlength=3).double() / n
        se = (p * (1 - p) / n).sqrt().clamp(min=1e-12)
        assert bool((((freq - p).abs() / se)[p > 0] < 4.5).all()), (freq, p)  # z = 4.5 per cell
        assert freq[p == 0].sum() == 0
    with pytest.raises(ValueError, match=r"^rule: expected 'resample' or 'joint'; got 'best'"):
        energy_resample(log_q, energy, 3, rule="best")
    with pytest.raises(ValueError, match=r"^log_q, energy: expected two \(B k,\) tensors with k=4; got \(6,\)"):
        energy_resample(log_q, energy, 4)
    with pytest.raises(ValueError, match=r"^log_q: every input needs at least one candidate"):
        energy_resample(torch.full((3,), -math.inf), energy[:3], 3)


def test_sequence_energy_of_a_translation_model_scores_the_target_given_its_source():
    from ebms.models.seq2seq import Seq2SeqAdapter, Seq2SeqTransformer

    torch.manual_seed(0)
    net = Seq2SeqTransformer(6, 5, d_model=8, heads=2, layers=1, ff=16, dropout=0.0, max_length=6).double().eval()
    src, tgt = Sequences.from_lists([[1, 2], [3], [4, 5, 1]]), Sequences.from_lists([[2, 3, 4], [1], []])
    log_q, energy = sequence_energy(Seq2SeqAdapter(net), (src, tgt))
    assert torch.allclose(log_q, net.log_prob(src, tgt), atol=1e-12)
    ends = net.logits(src, tgt)[torch.arange(3), tgt.lengths].logsumexp(-1)
    assert torch.allclose(energy, -ends, atol=1e-12)

"""ElectricNCE: Eq. 3.18 by hand, the population optimum of Eq. 3.17, gradient separation, a toy run."""

from __future__ import annotations

import copy
import itertools
import math

import pytest
import torch

from ebms.distributions import NGram
from ebms.models.electric import ElectricCloze
from ebms.nets.two_tower import TwoTowerCloze
from ebms.objectives.electric import ElectricNCE
from ebms.sequences import Sequences

V = 6


def _model(seed: int = 0, kind: str = "transformer") -> ElectricCloze:
    torch.manual_seed(seed)
    noise = TwoTowerCloze(V, dim=8, layers=1, heads=2, kind=kind)
    return ElectricCloze(V, dim=8, layers=1, heads=2, max_length=10, noise=noise)


@pytest.mark.parametrize("eps,positions", [(0.0, "fixed"), (0.3, "fixed"), (0.3, "bernoulli")])
def test_electric_nce_equals_a_hand_computation_of_eq_3_18(eps, positions):
    model = _model()
    x = Sequences.from_lists([[2, 3, 4, 5], [3, 1], [4]])
    obj = ElectricNCE(mask_rate=0.5, noise_weight=0.7, uniform_mix=eps, positions=positions)
    out = obj(model, x, generator=torch.Generator().manual_seed(5))
    g = torch.Generator().manual_seed(5)  # the same draws, in the same order
    replaced = obj.select_positions(x, g)
    with torch.no_grad():
        log_gold = model.noise.log_probs(x)  # the noise's own law: its ML loss reads this one
        mixed = (1 - eps) * log_gold.exp() + eps / (V - 1)  # the NCE noise law, by hand
        mixed[..., 0] = 0.0
        log_q = mixed.log()
        noised = model.noise.sample_replacements(x, replaced, generator=g, log_probs=log_q)
        scores = model.token_scores(x.with_tokens(noised))
    assert torch.equal(out.negatives, noised)
    nce, noise_nll, correct, n_tok = 0.0, 0.0, 0, 0
    for b, row in enumerate(x.tolist()):
        lb = len(row)
        kb = int(replaced[b].sum())
        if positions == "fixed":
            assert kb == math.ceil(0.5 * lb)
            n_pos, n_neg = lb - kb, kb
        else:
            n_pos, n_neg = 0.5, 0.5  # the rates 1 - r and r
        for t in range(lb):
            p_hat = math.exp(float(scores[b, t]))
            q = math.exp(float(log_q[b, t, int(noised[b, t])]))
            data, noise = n_pos * p_hat, n_neg * q
            if replaced[b, t]:
                nce += -math.log(noise / (data + noise))
                noise_nll += -float(log_gold[b, t, row[t]])
                correct += data < noise
            else:
                nce += -math.log(data / (data + noise))
                correct += data > noise
            n_tok += 1
    n_rep = int(replaced.sum())
    assert n_rep > 0
    assert out.metrics["loss_nce"] == pytest.approx(nce / n_tok, rel=1e-5)
    assert out.metrics["loss_noise"] == pytest.approx(noise_nll / n_rep, rel=1e-5)
    assert float(out.loss.detach()) == pytest.approx(nce / n_tok + 0.7 * noise_nll / n_rep, rel=1e-5)
    assert out.metrics["accuracy"] == pytest.approx(correct / n_tok)
    assert set(out.metrics) == {"loss_nce", "loss_noise", "accuracy", "e_pos", "e_neg", "gap"}


def test_electric_nce_population_optimum_is_the_data_conditional():
    """Eq. 3.17 with exact expectations: l = 3 tokens from {1, 2}, k = 1, a known noise q, tabular
    log p-hat(v | t, x_\\t) minimised by L-BFGS; the optimum is log p_data(v | t, x_\\t)."""
    torch.manual_seed(0)
    n_len, k, toks = 3, 1, (1, 2)
    sentences = list(itertools.product(toks, repeat=n_len))
    p_data = torch.softmax(1.5 * torch.randn(len(sentences), dtype=torch.float64), 0)
    log_q_table = torch.log_softmax(torch.randn(n_len, 4, 2, dtype=torch.float64), -1)  # (t, context, v)

    def context(x: tuple[int, ...], t: int) -> int:
        a, b = (x[s] for s in range(n_len) if s != t)
        return 2 * (a - 1) + (b - 1)

    pos_idx, neg_idx, pos_w, neg_w = [], [], [], []
    for i, x in enumerate(sentences):
        for t in range(n_len):
            c = context(x, t)
            pos_idx.append((t, c, x[t] - 1))
            pos_w.append(float(p_data[i]))  # l * E_{t ~ Uni} with l = n_len: every position once
            for v in range(2):
                neg_idx.append((t, c, v))  # k * E_{t ~ R, v ~ q}: R uniform, so k / l per position
                neg_w.append(float(p_data[i]) * k / n_len * math.exp(float(log_q_table[t, c, v])))
    pi, ni = torch.tensor(pos_idx).T, torch.tensor(neg_idx).T
    pw, nw = torch.tensor(pos_w, dtype=torch.float64), torch.tensor(neg_w, dtype=torch.float64)
    theta = torch.zeros(n_len, 4, 2, dtype=torch.float64, requires_grad=True)
    obj = ElectricNCE()

    def objective() -> torch.Tensor:
        lm, lq = theta[pi[0], pi[1], pi[2]], log_q_table[pi[0], pi[1], pi[2]]
        pos = obj.binary_losses(obj.logits(lm, lq, n_len, k), torch.ones_like(lm, dtype=torch.bool))
        lm, lq = theta[ni[0], ni[1], ni[2]], log_q_table[ni[0], ni[1], ni[2]]
        neg = obj.binary_losses(obj.logits(lm, lq, n_len, k), torch.zeros_like(lm, dtype=torch.bool))
        return (pw * pos).sum() + (nw * neg).sum()

    opt = torch.optim.LBFGS([theta], lr=1, max_iter=500, tolerance_grad=1e-13, tolerance_change=1e-15,
                            line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = objective()
        loss.backward()
        return loss

    for _ in range(3):
        opt.step(closure)
    joint = {x: float(p) for x, p in zip(sentences, p_data)}
    want = torch.zeros(n_len, 4, 2, dtype=torch.float64)
    for x in sentences:
        for t in range(n_len):
            alts = [joint[x[:t] + (v,) + x[t + 1:]] for v in toks]
            want[t, context(x, t), x[t] - 1] = math.log(joint[x] / sum(alts))
    assert torch.allclose(theta.detach(), want, atol=1e-6), (theta - want).abs().max()


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: (p.grad.clone() if p.grad is not None else torch.zeros_like(p)) for n, p in model.named_parameters()}


def test_electric_nce_trains_energy_and_noise_separately():
    x = Sequences.from_lists([[2, 3, 4, 5, 1], [3, 1, 2], [4, 4]])
    grads = {}
    for w in (0.0, 1.0, 2.0):
        model = _model(3)
        ElectricNCE(mask_rate=0.4, noise_weight=w)(model, x, generator=torch.Generator().manual_seed(1)).loss.backward()
        grads[w] = _grads(model)
    noise = [n for n in grads[1.0] if n.startswith("noise.")]
    energy = [n for n in grads[1.0] if not n.startswith("noise.")]
    assert noise and energy
    for n in noise:  # the NCE loss does not train q; q gets exactly w * grad(ML loss)
        assert float(grads[0.0][n].abs().max()) == 0.0, n
        assert torch.allclose(grads[2.0][n], 2 * grads[1.0][n], atol=1e-7), n
    assert any(float(grads[1.0][n].abs().max()) > 0 for n in noise)
    for n in energy:  # the ML loss does not reach the energy model
        assert torch.equal(grads[0.0][n], grads[1.0][n]), n
    assert any(float(grads[0.0][n].abs().max()) > 0 for n in energy)


def test_electric_nce_selects_ceil_rate_times_length_positions_uniformly():
    obj = ElectricNCE(mask_rate=0.15)
    assert obj.replaced_counts(torch.tensor([0, 1, 6, 7, 20, 21])).tolist() == [0, 1, 1, 2, 3, 4]
    n = 3000
    x = Sequences(torch.ones(n, 8, dtype=torch.long), torch.full((n,), 7))
    r = obj.select_positions(x, torch.Generator().manual_seed(0))
    assert bool((r.sum(1) == 2).all()) and not bool(r[:, 7].any())
    freq = r[:, :7].double().mean(0)
    p = 2 / 7
    assert bool(((freq - p).abs() <= 4 * math.sqrt(p * (1 - p) / n)).all())  # z = 4 per position


def test_electric_nce_sentences_of_one_token_are_all_noise_and_add_zero():
    model = _model()
    out = ElectricNCE()(model, Sequences.from_lists([[3], [2]]), generator=torch.Generator().manual_seed(0))
    assert out.metrics["loss_nce"] == 0.0 and out.metrics["accuracy"] == 1.0
    assert math.isfinite(float(out.loss.detach()))
    out.loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_electric_training_on_an_ngram_corpus_lowers_both_losses_and_ranks_true_sentences():
    torch.manual_seed(0)
    logits = 2.5 * torch.randn(V, V)
    logits[:, 0] = -math.inf
    lm = NGram(V, 2, torch.log_softmax(logits, -1), end=False)
    g = torch.Generator().manual_seed(1)
    corpus = lm.sample(2000, g, lengths=torch.randint(4, 9, (2000,), generator=g))
    model = _model(2, kind="lstm")
    obj = ElectricNCE(mask_rate=0.3)
    fixed = [corpus[torch.arange(i, 2000, 10)] for i in range(4)]  # evaluation batches of 200

    def nce_at(m: ElectricCloze, noise: torch.nn.Module) -> float:
        m = copy.deepcopy(m).eval()
        m.noise = noise
        with torch.no_grad():
            return sum(obj(m, b, generator=torch.Generator().manual_seed(i)).metrics["loss_nce"]
                       for i, b in enumerate(fixed)) / len(fixed)

    start = copy.deepcopy(model)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    noise_curve = []
    for _ in range(250):
        out = obj(model, corpus[torch.randint(0, 2000, (32,), generator=g)], generator=g)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        noise_curve.append(out.metrics["loss_noise"])
    model.eval()
    assert sum(noise_curve[-25:]) / 25 < sum(noise_curve[:25]) / 25 - 0.5  # ML of q: measured 1.39 -> 0.44 nats
    noise = copy.deepcopy(model.noise).eval()
    # the trained energy beats its start against the same (final) noise: measured 0.712 vs 0.765 nats/token
    assert nce_at(model, noise) < nce_at(start, noise)
    # PLL rescoring: a test sentence against itself with one token changed
    n = 300
    test = lm.sample(n, g, lengths=torch.randint(4, 9, (n,), generator=g))
    rows = torch.arange(n)
    pos = (torch.rand(n, generator=g) * test.lengths).long()
    tok = test.tokens.clone()
    tok[rows, pos] = (tok[rows, pos] - 1 + torch.randint(1, V - 1, (n,), generator=g)) % (V - 1) + 1
    with torch.no_grad():
        wins = int((model.log_prob(test) > model.log_prob(test.with_tokens(tok))).sum())
    # one-sided binomial test against chance 1/2, z = 3.09 (measured 240/300; the true bigram: 281/300)
    assert wins > n / 2 + 3.09 * math.sqrt(n / 4)


def test_uniform_mix_is_a_normalised_mixture_and_its_draws_follow_it():
    obj = ElectricNCE(mask_rate=1.0, uniform_mix=0.5)
    log_q = torch.log_softmax(torch.randn(2, 3, V, dtype=torch.float64, generator=torch.Generator().manual_seed(0)), -1)
    log_q[..., 0] = -math.inf
    log_q[..., 1:] = torch.log_softmax(log_q[..., 1:], -1)
    got = obj.mixed_log_probs(log_q)
    assert got[..., 0].eq(-math.inf).all()
    assert torch.allclose(got[..., 1:].exp(), 0.5 * log_q[..., 1:].exp() + 0.5 / (V - 1), rtol=0, atol=1e-15)
    assert ElectricNCE().mixed_log_probs(log_q) is log_q
    # a noise that puts all its mass on token 2: only the uniform share draws anything else
    model = _model()
    with torch.no_grad():
        model.noise.output.weight.zero_()
        model.noise.output.bias.fill_(-50.0)
        model.noise.output.bias[2] = 50.0
    x = Sequences.from_lists([[1, 3, 4, 5, 1, 3, 4, 5]] * 250)
    out = obj(model, x, generator=torch.Generator().manual_seed(1))
    other = float((out.negatives != 2).double().mean())  # every position is replaced (mask_rate 1)
    p, n = 0.5 * (V - 2) / (V - 1), out.negatives.numel()
    assert abs(other - p) < 5 * math.sqrt(p * (1 - p) / n)
    plain = ElectricNCE(mask_rate=1.0)(model, x, generator=torch.Generator().manual_seed(1))
    assert bool((plain.negatives == 2).all())


def test_bernoulli_positions_are_independent_with_the_mask_rate():
    obj = ElectricNCE(mask_rate=0.2, positions="bernoulli")
    x = Sequences.from_lists([[1] * 10] * 3000 + [[1, 2]])
    picked = obj.select_positions(x, torch.Generator().manual_seed(0))
    assert not picked[:, 10:].any() and not picked[-1, 2:].any()  # real positions only
    rows = picked[:3000, :10].double()
    n = rows.numel()
    assert abs(float(rows.mean()) - 0.2) < 5 * math.sqrt(0.2 * 0.8 / n)
    counts = rows.sum(1)  # Binomial(10, 0.2) per sentence, not a fixed 2
    assert abs(float(counts.var()) - 10 * 0.2 * 0.8) < 0.15 and int(counts.max()) > 2
    both = float((rows[:, 0] * rows[:, 1]).mean())  # independence of two positions
    assert abs(both - 0.04) < 5 * math.sqrt(0.04 * 0.96 / 3000)


def test_electric_nce_validation_messages():
    with pytest.raises(ValueError, match=r"^positions: expected one of fixed, bernoulli; got 'all'"):
        ElectricNCE(positions="all")
    with pytest.raises(ValueError, match=r"^uniform_mix: expected"):
        ElectricNCE(uniform_mix=1.0)
    with pytest.raises(ValueError, match=r"^uniform_mix: expected"):
        ElectricNCE(uniform_mix=-0.1)
    with pytest.raises(ValueError, match="mask_rate"):
        ElectricNCE(mask_rate=0.0)
    with pytest.raises(ValueError, match="mask_rate"):
        ElectricNCE(mask_rate=1.5)
    with pytest.raises(ValueError, match="noise_weight"):
        ElectricNCE(noise_weight=-1.0)
    obj = ElectricNCE()
    x = Sequences.from_lists([[1, 2]])
    with pytest.raises(TypeError, match=r"batch: expected Sequences or a \(tokens \(B, T\), lengths \(B,\)\) tuple; got Tensor"):
        obj(_model(), torch.ones(2, 3))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="model: expected an energy cloze model with token_scores"):
        obj(object(), x)
    scoring_only = ElectricCloze(V, dim=8, layers=1, heads=2)
    with pytest.raises(TypeError, match=r"model: expected a model.noise with log_probs and sample_replacements "
                                        r"\(TwoTowerCloze\); got model.noise of type NoneType"):
        obj(scoring_only, x)
    with pytest.raises(ValueError, match="batch: expected at least one token; got 2 empty sentences"):
        obj(_model(), Sequences.from_lists([[], []]))
    with pytest.raises(ValueError, match=r"x: expected token ids in \[1, 5\]"):
        obj(_model(), Sequences.from_lists([[1, 0, 2]]))
    a = torch.zeros(3)
    with pytest.raises(ValueError, match=r"log_noise: expected the shape of log_model \(3,\); got \(2,\)"):
        obj.logits(a, torch.zeros(2), 1, 1)
    with pytest.raises(ValueError, match=r"n_pos: expected a number or a tensor of shape \(3,\); got shape \(2,\)"):
        obj.logits(a, a, torch.ones(2), 1)
    with pytest.raises(ValueError, match="n_neg: expected counts >= 0"):
        obj.logits(a, a, 1, torch.tensor([1.0, -1.0, 1.0]))
    with pytest.raises(ValueError, match="n_pos/n_neg: expected at least one positive or negative count"):
        obj.logits(a, a, 0, 0)
    with pytest.raises(ValueError, match=r"positive: expected a bool tensor of shape \(3,\)"):
        obj.binary_losses(a, torch.ones(3))
    with pytest.raises(ValueError, match="logits: an infinite logit of the wrong sign"):
        obj.binary_losses(obj.logits(a, a, 0, 1), torch.ones(3, dtype=torch.bool))
    assert repr(obj) == "ElectricNCE(mask_rate=0.15, noise_weight=1, uniform_mix=0, positions='fixed')"


def test_electric_nce_runs_under_the_trainer_with_token_length_pairs():
    from ebms.train import Trainer

    model = _model()
    corpus = Sequences.from_lists([[1, 2, 3], [2, 3, 4, 5], [5, 4], [1, 1, 2, 3, 4]] * 3)

    def data(n: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        rows = corpus[torch.randint(0, corpus.batch_size, (n,), generator=g)]
        return rows.tokens, rows.lengths

    trainer = Trainer(ElectricNCE(), model, data, steps=3, batch_size=4, run_dir=None, progress=False)
    trainer.fit()
    assert trainer.step == 3
    assert {"loss_nce", "loss_noise", "accuracy"} <= set(trainer.metrics)


def test_noise_steps_trains_the_noise_for_n_steps_then_freezes_it_under_adam():
    model = _model()
    obj = ElectricNCE(mask_rate=0.5, noise_steps=2)
    assert set(obj.state_dict()) == {"steps"} and ElectricNCE().state_dict() == {}  # older runs load
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x = Sequences.from_lists([[2, 3, 4, 5], [3, 1, 2], [4, 5]])
    g = torch.Generator().manual_seed(0)
    noise_params = lambda: [p.detach().clone() for p in model.noise.parameters()]  # noqa: E731
    energy_params = lambda: [p.detach().clone() for n, p in model.named_parameters() if not n.startswith("noise.")]  # noqa: E731
    seen = []
    for _ in range(4):
        before_noise, before_energy = noise_params(), energy_params()
        frozen = obj.noise_frozen()
        opt.zero_grad(set_to_none=True)
        out = obj(model, x, generator=g)
        out.loss.backward()
        grads = [p.grad for p in model.noise.parameters()]
        opt.step()
        moved_noise = any(not torch.equal(a, b) for a, b in zip(before_noise, noise_params()))
        moved_energy = any(not torch.equal(a, b) for a, b in zip(before_energy, energy_params()))
        seen.append((frozen, moved_noise, moved_energy, all(gr is None for gr in grads)))
        if frozen:  # the total is the NCE term alone; the noise's ML loss is still reported
            assert float(out.loss.detach()) == pytest.approx(float(out.metrics["loss_nce"]), abs=0, rel=1e-12)
            assert float(out.metrics["loss_noise"]) > 0
    assert seen == [(False, True, True, False), (False, True, True, False),
                    (True, False, True, True), (True, False, True, True)]
    assert int(obj.steps) == 4
    obj.eval()
    obj(model, x, generator=g)
    assert int(obj.steps) == 4  # evaluation calls do not count
    restored = ElectricNCE(mask_rate=0.5, noise_steps=2)
    restored.load_state_dict(obj.state_dict())
    assert restored.noise_frozen()  # a resumed run stays frozen


def test_noise_steps_zero_keeps_the_noise_at_its_initialisation_and_frozen_noise_is_dropout_free():
    torch.manual_seed(0)
    noise = TwoTowerCloze(V, dim=8, layers=1, heads=2, dropout=0.5)
    model = ElectricCloze(V, dim=8, layers=1, heads=2, max_length=10, noise=noise).train()
    x = Sequences.from_lists([[2, 3, 4, 5], [3, 1, 2]])
    losses = [float(ElectricNCE(mask_rate=0.5, noise_steps=0)(model, x, generator=torch.Generator().manual_seed(1))
                    .metrics["loss_noise"]) for _ in range(2)]
    assert losses[0] == losses[1]  # no dropout mask drawn: one fixed law
    assert model.noise.training  # the noise's mode is restored


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3"])
def test_noise_steps_must_be_a_count(bad):
    with pytest.raises(ValueError, match=r"^noise_steps: expected None or an integer >= 0; got "):
        ElectricNCE(noise_steps=bad)


def test_noise_steps_appears_in_the_repr_only_when_set():
    assert repr(ElectricNCE(noise_steps=300)).endswith("positions='fixed', noise_steps=300)")

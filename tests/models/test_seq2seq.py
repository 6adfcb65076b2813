"""Seq2SeqTransformer: exact scores, decoding against enumeration, sampling law, the loss, the E-ARM adapter."""

from __future__ import annotations

import itertools

import pytest
import torch

from ebms.capabilities import EARMModel
from ebms.data.toy_translation import toy_translation
from ebms.models.seq2seq import Seq2SeqAdapter, Seq2SeqTransformer
from ebms.objectives import Seq2SeqNLL
from ebms.sequences import Sequences

SOURCES = Sequences.from_lists([[1, 2, 3], [4], [], [2, 2, 5, 1, 3]])


def _model(tgt_vocab: int = 5, max_length: int = 6, seed: int = 0, scale: float = 0.5) -> Seq2SeqTransformer:
    """A small random model with a non-trivial law (weights spread wider than the 0.02 init)."""
    torch.manual_seed(seed)
    m = Seq2SeqTransformer(6, tgt_vocab, d_model=16, heads=2, layers=1, ff=32, dropout=0.0, max_length=max_length)
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() > 1:
                p.normal_(0.0, scale)
    return m.eval()


def _all_targets(tgt_vocab: int, longest: int) -> list[list[int]]:
    return [list(w) for n in range(longest + 1) for w in itertools.product(range(1, tgt_vocab), repeat=n)]


@torch.no_grad()
def test_log_prob_is_the_sum_of_stepwise_log_softmax() -> None:
    m = _model()
    y = Sequences.from_lists([[1, 4], [3, 3, 2], [], [4]])
    mem, pad = m.encode(SOURCES)
    expected = torch.zeros(4)
    for b, row in enumerate(y.tolist()):
        prefix = [0]
        for w in [*row, 0]:
            step = m.decode(mem[b:b + 1], pad[b:b + 1], torch.tensor([prefix]))[0, -1].log_softmax(-1)
            expected[b] += step[w]
            prefix.append(w)
    assert torch.allclose(m.log_prob(SOURCES, y), expected, atol=1e-5)
    per = m.token_log_probs(SOURCES, y)
    assert per.shape == (4, 4) and bool((per[0, 3:] == 0).all()) and bool((per[2, 1:] == 0).all())


@torch.no_grad()
def test_log_prob_ignores_padding_on_both_sides() -> None:
    m = _model()
    y = Sequences.from_lists([[1, 4], [3, 3, 2], [], [4]])
    together = m.log_prob(SOURCES, y)
    alone = torch.cat([m.log_prob(SOURCES[i], y[i]) for i in range(4)])
    wide = m.log_prob(Sequences(SOURCES.pad_to(6, pad_id=3).tokens, SOURCES.lengths), y.pad_to(5, pad_id=2))
    assert torch.allclose(together, alone, atol=1e-5) and torch.allclose(together, wide, atol=1e-5)
    assert m.logits(SOURCES, y.pad_to(5)).shape == (4, 6, 5)


@torch.no_grad()
def test_beam_of_one_is_greedy() -> None:
    m = _model(max_length=6)
    src = Sequences.from_lists([[1, 2, 3], [4], [], [2, 2, 5, 1, 3], [5, 5], [3, 1]])
    for limit in (2, 6):
        g = m.greedy(src, max_length=limit)
        r = m.beam_search(src, beam=1, max_length=limit, length_penalty=0.0)
        assert r.sequences.equal(g)
    assert torch.allclose(r.log_probs, m.log_prob(src, r.sequences), atol=1e-5)


@torch.no_grad()
@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_wide_beam_finds_the_argmax_over_all_outputs(alpha: float) -> None:
    # V_y = 3 (two words), outputs of at most 3 tokens: 15 candidates, at most 8 running at once
    m = _model(tgt_vocab=3, max_length=3, seed=1, scale=0.3)
    cands = _all_targets(3, 3)
    src = Sequences.from_lists([[1, 2, 3], [4], [], [2, 2, 5]])
    greedy_misses = 0
    for b in range(src.batch_size):
        ys = Sequences.from_lists(cands)
        lp = m.log_prob(Sequences.cat([src[b]] * len(cands)), ys)
        score = lp / (ys.lengths + 1).float() ** alpha
        best = int(score.argmax())
        r = m.beam_search(src[b], beam=16, length_penalty=alpha)
        assert r.sequences.tolist() == [cands[best]]
        greedy_misses += m.greedy(src[b]).tolist() != [cands[best]]
        assert float(r.log_probs) == pytest.approx(float(lp[best].detach()), abs=1e-5)
        assert float(r.scores) == pytest.approx(float(score[best].detach()), abs=1e-5)
    assert greedy_misses  # the search is not trivially greedy here
    batched = m.beam_search(src, beam=16, length_penalty=alpha).sequences
    assert batched.tolist() == [m.beam_search(src[b], beam=16, length_penalty=alpha).sequences.tolist()[0]
                                for b in range(4)]


@torch.no_grad()
def test_an_exhaustive_beam_lists_the_most_likely_outputs_in_order() -> None:
    # 15 candidate outputs, beam 16: the final beam is every output (one empty slot), best first
    m = _model(tgt_vocab=3, max_length=3, seed=1, scale=0.3)
    cands = _all_targets(3, 3)
    src = Sequences.from_lists([[1, 2, 3], [4]])
    r = m.beam_search(src, beam=16, length_penalty=0.0)
    assert r.hypotheses.batch_size == 2 * 16 and tuple(r.hypothesis_log_probs.shape) == (2, 16)
    for b in range(2):
        lp = m.log_prob(Sequences.cat([src[b]] * len(cands)), Sequences.from_lists(cands))
        order = lp.argsort(descending=True)
        rows = r.hypotheses[torch.arange(b * 16, b * 16 + 15)]
        assert rows.tolist() == [cands[i] for i in order.tolist()]
        assert torch.allclose(r.hypothesis_log_probs[b, :15], lp[order], atol=1e-5)
        assert torch.isinf(r.hypothesis_log_probs[b, 15]) and int(r.hypotheses.lengths[b * 16 + 15]) == 0
    assert r.hypotheses[torch.tensor([0, 16])].equal(r.sequences)  # alpha = 0: the best is the first


@torch.no_grad()
def test_narrow_beam_returns_a_finished_hypothesis_with_its_exact_score() -> None:
    m = _model(max_length=6, seed=2)
    r = m.beam_search(SOURCES, beam=3, max_length=4)
    assert torch.allclose(r.log_probs, m.log_prob(SOURCES, r.sequences), atol=1e-5)
    assert torch.allclose(r.scores, r.log_probs / (r.sequences.lengths + 1).float(), atol=1e-6)
    assert int(r.sequences.lengths.max()) <= 4


@torch.no_grad()
def test_draws_follow_log_prob_chi_square() -> None:
    # 15 cells: the 7 outputs of < 3 tokens (their law includes </s>) and the 8 three-token prefixes
    # (cut by truncate=True: probability of the first three tokens, without </s>)
    m = _model(tgt_vocab=3, max_length=3, seed=3, scale=0.1)  # cell probabilities 0.005 .. 0.24
    n = 4000
    src = Sequences.cat([SOURCES[0]] * n)
    draws = m.sample(src, torch.Generator().manual_seed(0), max_length=3, truncate=True).tolist()
    cands = _all_targets(3, 3)
    ys = Sequences.from_lists(cands)
    per = m.token_log_probs(Sequences.cat([SOURCES[0]] * len(cands)), ys)
    p = torch.where(ys.lengths == 3, per[:, :3].sum(1), per.sum(1)).double().exp()
    assert float(p.sum()) == pytest.approx(1.0, abs=1e-5)
    counts = torch.tensor([sum(1 for d in draws if d == c) for c in cands], dtype=torch.float64)
    expected = n * p
    assert float(expected.min()) > 5  # the chi-square approximation holds
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 36.12  # the 0.999 quantile of chi-square with 14 degrees of freedom


def test_the_generator_alone_decides_the_draws() -> None:
    m = _model()
    a, b = (m.sample(SOURCES, torch.Generator().manual_seed(7)) for _ in range(2))
    assert a.equal(b)


def test_unfinished_draws_raise_unless_truncated() -> None:
    m = _model()
    with torch.no_grad():
        m.output.bias[0] = -1e4  # </s> is never drawn
    assert m.sample(SOURCES, torch.Generator(), max_length=2).lengths.tolist() == [2, 2, 2, 2]
    with pytest.raises(ValueError, match="max_length: 4 of 4 draws had not ended after 2 tokens"):
        m.sample(SOURCES, torch.Generator(), max_length=2, truncate=False)


@torch.no_grad()
def test_plain_nll_is_the_mean_negative_log_prob_per_token() -> None:
    m = _model()
    y = Sequences.from_lists([[1, 4], [3, 3, 2], [], [4]])
    expected = -m.log_prob(SOURCES, y).sum() / (y.lengths.sum() + 4)
    for objective in (Seq2SeqNLL(), Seq2SeqNLL(label_smoothing=0.0, scheduled_sampling=0.0)):
        out = objective(m, (SOURCES, y), generator=torch.Generator().manual_seed(0))
        assert float(out.loss) == pytest.approx(float(expected), abs=1e-6)
        assert out.metrics["tokens"] == 10.0 and out.metrics["replaced"] == 0.0


@torch.no_grad()
def test_label_smoothing_mixes_in_the_uniform_cross_entropy() -> None:
    m, eps = _model(), 0.1
    y = Sequences.from_lists([[1, 4], [3, 3, 2], [], [4]])
    logp = m.logits(SOURCES, y).log_softmax(-1)
    mask = torch.arange(4) <= y.lengths.unsqueeze(1)
    nll = -m.token_log_probs(SOURCES, y)
    expected = (((1 - eps) * nll - eps * logp.mean(-1)) * mask).sum() / mask.sum()
    out = Seq2SeqNLL(label_smoothing=eps)(m, (SOURCES, y))
    assert float(out.loss) == pytest.approx(float(expected), abs=1e-6)
    assert out.metrics["nll"] == pytest.approx(float((nll * mask).sum() / mask.sum()), abs=1e-6)


@torch.no_grad()
def test_full_scheduled_sampling_feeds_the_first_pass_predictions() -> None:
    m = _model()
    y = Sequences.from_lists([[1, 4], [3, 3, 2], [], [4]])
    mem, pad = m.encode(SOURCES)
    inputs, targets, mask = m.teacher_forcing(y)
    guess = m.decode(mem, pad, inputs)[:, :-1].argmax(-1)
    mixed = torch.cat([inputs[:, :1], torch.where(mask[:, 1:], guess, inputs[:, 1:])], 1)
    logp = m.decode(mem, pad, mixed).log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    expected = -(logp * mask).sum() / mask.sum()
    out = Seq2SeqNLL(scheduled_sampling=1.0, mode="argmax")(m, (SOURCES, y), generator=torch.Generator())
    assert float(out.loss) == pytest.approx(float(expected), abs=1e-6)
    assert out.metrics["replaced"] == 1.0
    g1, g2 = torch.Generator().manual_seed(4), torch.Generator().manual_seed(4)
    half = Seq2SeqNLL(scheduled_sampling=0.5)
    assert float(half(m, (SOURCES, y), generator=g1).loss) == float(half(m, (SOURCES, y), generator=g2).loss)


def test_four_tensor_batches_equal_sequence_pairs_and_run_under_the_trainer() -> None:
    from ebms.objectives import EARM
    from ebms.train import Trainer

    m = _model()
    y = Sequences.from_lists([[1, 4], [3, 3, 2], [], [4]])
    flat = (SOURCES.tokens, SOURCES.lengths, y.tokens, y.lengths)
    with torch.no_grad():
        assert torch.equal(Seq2SeqNLL()(m, flat).loss, Seq2SeqNLL()(m, (SOURCES, y)).loss)
    adapter = Seq2SeqAdapter(m)
    drawn = adapter.draw(flat, torch.Generator().manual_seed(0))
    assert len(drawn) == 4 and torch.equal(drawn[0], SOURCES.tokens)
    same = adapter.draw((SOURCES, y), torch.Generator().manual_seed(0))
    assert torch.equal(drawn[2], same[1].tokens) and torch.equal(drawn[3], same[1].lengths)
    for objective, model in ((Seq2SeqNLL(label_smoothing=0.1), m), (EARM(weight=0.2), adapter)):
        result = Trainer(objective, model.train(), flat, steps=2, batch_size=2, run_dir=None, progress=False).fit()
        assert result.step == 2 and all(v == v for v in result.metrics.values())


def test_a_short_training_run_lowers_the_held_out_loss() -> None:
    torch.manual_seed(0)
    data = toy_translation(288, generator=torch.Generator().manual_seed(0), min_len=3, max_len=8)
    train, test = (data.source[:256], data.target[:256]), (data.source[256:], data.target[256:])
    m = Seq2SeqTransformer(len(data.source_vocab), len(data.target_vocab), d_model=32, heads=2, layers=1, ff=64,
                           dropout=0.0, max_length=12)
    objective = Seq2SeqNLL(label_smoothing=0.1, scheduled_sampling=0.2)
    opt = torch.optim.Adam(m.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(1)

    def held_out() -> float:
        with torch.no_grad():
            return Seq2SeqNLL()(m.eval(), test).metrics["nll"]

    before = held_out()
    m.train()
    for _ in range(60):
        rows = torch.randint(0, 256, (32,), generator=g)
        out = objective(m, (train[0][rows], train[1][rows]), generator=g)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    after = held_out()
    assert after < before - 1.0, (before, after)  # at least one nat per token better


def test_adapter_speaks_the_earm_protocol() -> None:
    m = _model()
    y = Sequences.from_lists([[1, 4], [3, 3, 2], [], [4]]).pad_to(5)
    adapter = Seq2SeqAdapter(m)
    logits, targets, mask = adapter.teacher_forced((SOURCES, y))
    assert logits.shape == (4, 4, 5) and targets.shape == mask.shape == (4, 4) and mask.dtype == torch.bool
    assert mask.sum(1).tolist() == [3, 4, 1, 2] and targets[1].tolist() == [3, 3, 2, 0]
    picked = logits.log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose((picked * mask).sum(1), m.log_prob(SOURCES, y), atol=1e-5)
    assert [p is q for p, q in zip(adapter.parameters(), m.parameters())]


def test_adapter_reads_rows_under_its_horizon() -> None:
    m = _model()
    y = Sequences.from_lists([[1, 4], [3, 3, 2], [], [4]])
    logits, targets, mask = Seq2SeqAdapter(m, max_length=2).teacher_forced((SOURCES, y))
    # rows of length >= 2 are cut to 2 tokens and have no </s> step
    assert logits.shape == (4, 3, 5) and mask.tolist() == [[True, True, False], [True, True, False],
                                                           [True, False, False], [True, True, False]]
    cut = Sequences.from_lists([[1, 4], [3, 3], [], [4]])
    assert torch.allclose(logits, Seq2SeqAdapter(m).teacher_forced((SOURCES, cut))[0], atol=1e-5)


def test_adapter_draws_for_the_same_sources_in_evaluation_mode() -> None:
    m = _model()
    m.train()
    for layer in m.modules():
        if isinstance(layer, torch.nn.Dropout):
            layer.p = 0.5
    y = Sequences.from_lists([[1, 4], [3, 3, 2], [], [4]])
    src, drawn = Seq2SeqAdapter(m).draw((SOURCES, y), torch.Generator().manual_seed(5))
    assert m.training and src is SOURCES and not drawn.tokens.requires_grad
    assert int(drawn.lengths.max()) <= 4  # one past the longest target
    assert drawn.equal(m.eval().sample(SOURCES, torch.Generator().manual_seed(5), max_length=4))
    _, fixed = Seq2SeqAdapter(m, max_length=2).draw((SOURCES, y), torch.Generator().manual_seed(5))
    assert int(fixed.lengths.max()) <= 2


def test_earm_trains_through_the_adapter() -> None:
    earm = pytest.importorskip("ebms.objectives.earm")
    m = _model()
    adapter = Seq2SeqAdapter(m)
    assert isinstance(adapter, EARMModel)
    y = Sequences.from_lists([[1, 4], [3, 3, 2], [], [4]])
    out = earm.EARM()(adapter, (SOURCES, y), generator=torch.Generator().manual_seed(0))
    out.loss.backward()
    assert out.metrics["active"] == 1.0 and m.output.weight.grad is not None


def test_bad_arguments_are_named() -> None:
    m = _model(max_length=6)
    y = Sequences.from_lists([[1], [2], [3], [4]])
    with pytest.raises(ValueError, match=r"tgt: expected token ids in \[1, 4\] .* sequence 0 has 5 at position 0"):
        m.log_prob(SOURCES, Sequences.from_lists([[5], [1], [1], [1]]))
    with pytest.raises(ValueError, match=r"src: expected token ids in \[1, 5\] .* sequence 0 has 0"):
        m.log_prob(Sequences.from_lists([[0], [1], [1], [1]]), y)
    with pytest.raises(ValueError, match="src: the longest sequence has 7 tokens; .* max_length=6"):
        m.greedy(Sequences.from_lists([[1] * 7]))
    with pytest.raises(ValueError, match=r"tgt: expected one target per source \(4\); got 1"):
        m.log_prob(SOURCES, y[:1])
    with pytest.raises(TypeError, match="src: expected an ebms.sequences.Sequences; got Tensor"):
        m.greedy(torch.ones(2, 2, dtype=torch.long))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="heads: expected a divisor of d_model=16; got 3"):
        Seq2SeqTransformer(5, 5, d_model=16, heads=3)
    with pytest.raises(ValueError, match="beam: expected an int >= 1; got 0"):
        m.beam_search(SOURCES, beam=0)
    with pytest.raises(ValueError, match="length_penalty: expected a finite number >= 0; got -1"):
        m.beam_search(SOURCES, length_penalty=-1)
    with pytest.raises(ValueError, match="max_length: expected at most the model's max_length=6; got 7"):
        m.sample(SOURCES, max_length=7)
    with pytest.raises(TypeError, match="truncate: expected a bool; got 1"):
        m.sample(SOURCES, truncate=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"batch: expected a pair \(src, tgt\) of Sequences, or four tensors "
                                        r"\(src tokens, src lengths, tgt tokens, tgt lengths\); got list"):
        Seq2SeqNLL()(m, [SOURCES, y])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="batch: expected at least one pair"):
        Seq2SeqNLL()(m, (SOURCES[:0], y[:0]))
    with pytest.raises(TypeError, match="model: expected a Seq2SeqTransformer .*; got Linear"):
        Seq2SeqNLL()(torch.nn.Linear(2, 2), (SOURCES, y))
    with pytest.raises(ValueError, match="mode: expected 'sample' or 'argmax'; got 'max'"):
        Seq2SeqNLL(mode="max")
    with pytest.raises(ValueError, match=r"label_smoothing: expected a number in \[0, 1\); got 1.0"):
        Seq2SeqNLL(label_smoothing=1.0)
    with pytest.raises(TypeError, match="model: expected a Seq2SeqTransformer; got Linear"):
        Seq2SeqAdapter(torch.nn.Linear(2, 2), max_length=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_length: expected at most the model's max_length=6; got 9"):
        Seq2SeqAdapter(m, max_length=9)
    with pytest.raises(ValueError, match="inputs: 8 decoder inputs exceed the max_length \\+ 1 = 7 positions"):
        m(SOURCES, torch.zeros(4, 8, dtype=torch.long))

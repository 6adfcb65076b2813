"""AutoregressiveNLL is the exact mean negative log-likelihood per token (</s> included), for
sentences and for running text with the state carried across chunks, and the Trainer fits an LM
with it."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
import torch.nn.functional as F

from ebms.distributions import NGram
from ebms.models.lm import LSTMLM, TransformerLM, perplexity
from ebms.objectives import AutoregressiveNLL, LossOutput
from ebms.sequences import Sequences
from ebms.train import Trainer

V = 6
CORPUS = [[1, 2, 3], [4], [], [5, 5, 1, 2], [3, 1]]


def _lstm(**kw) -> LSTMLM:
    torch.manual_seed(0)
    return LSTMLM(V, **{"embedding_dim": 4, "hidden_size": 5, "num_layers": 1, **kw}).double()


def test_sentence_loss_is_the_mean_nll_per_token_with_the_end_symbol():
    lm = _lstm()
    x = Sequences.from_lists(CORPUS)
    out = AutoregressiveNLL()(lm, x)
    tokens = sum(len(s) for s in CORPUS) + len(CORPUS)
    want = (-lm.log_prob(x).sum() / tokens).detach()
    assert isinstance(out, LossOutput) and out.negatives is None and out.loss.requires_grad
    torch.testing.assert_close(out.loss, want, rtol=0, atol=1e-14)
    assert out.metrics["tokens"] == tokens
    assert out.metrics["ppl"] == pytest.approx(math.exp(float(want)), rel=1e-6)
    assert out.metrics["nll"] == pytest.approx(float(want), rel=1e-6)
    as_tuple = AutoregressiveNLL()(lm, (x.pad_to(9).tokens, x.lengths))  # extra padding changes nothing
    torch.testing.assert_close(as_tuple.loss, out.loss, rtol=0, atol=1e-14)


def test_running_text_loss_is_the_cross_entropy_of_the_chunk():
    lm = _lstm()
    g = torch.Generator().manual_seed(0)
    stream = torch.randint(0, V, (3, 9), generator=g)
    out = AutoregressiveNLL()(lm, (stream[:, :-1], stream[:, 1:]))
    logits, _ = lm(stream[:, :-1])
    torch.testing.assert_close(out.loss, F.cross_entropy(logits.reshape(-1, V), stream[:, 1:].reshape(-1)),
                               rtol=0, atol=1e-14)
    assert out.metrics["tokens"] == 24


@pytest.mark.parametrize("build", [_lstm, lambda: TransformerLM(V, d_model=8, num_heads=2, num_layers=1,
                                                                    dim_feedforward=8, max_length=30).double()])
def test_carried_state_continues_the_stream_exactly(build):
    lm = build()
    g = torch.Generator().manual_seed(1)
    stream = torch.randint(0, V, (2, 11), generator=g)
    objective = AutoregressiveNLL(carry_state=True)
    objective(lm, (stream[:, :5], stream[:, 1:6]))
    second = objective(lm, (stream[:, 5:10], stream[:, 6:11]))
    logits, _ = lm(stream[:, :10])  # the second chunk read after the first, in one pass
    want = F.cross_entropy(logits[:, 5:].reshape(-1, V), stream[:, 6:11].reshape(-1))
    torch.testing.assert_close(second.loss, want, rtol=0, atol=1e-12)
    second.loss.backward()  # the carried state is detached: backward reaches only this chunk
    objective.reset()
    fresh = objective(lm, (stream[:, 5:10], stream[:, 6:11]))
    alone = AutoregressiveNLL()(lm, (stream[:, 5:10], stream[:, 6:11]))
    torch.testing.assert_close(fresh.loss, alone.loss, rtol=0, atol=0)
    other = objective(lm, (stream[:1, :5], stream[:1, 1:6]))  # another batch size starts afresh
    torch.testing.assert_close(other.loss, AutoregressiveNLL()(lm, (stream[:1, :5], stream[:1, 1:6])).loss,
                               rtol=0, atol=0)


def test_signature_follows_the_objective_contract():
    params = inspect.signature(AutoregressiveNLL.forward).parameters
    assert list(params)[1:3] == ["model", "batch"]
    assert params["generator"].kind is inspect.Parameter.KEYWORD_ONLY
    assert AutoregressiveNLL().state_dict() == {}


def test_the_trainer_fits_a_known_bigram_source():
    # source: a peaked bigram over tokens 1..5; the LM should close most of the gap from its start to the source
    g = torch.Generator().manual_seed(0)
    table = (torch.randn(V, V, generator=g, dtype=torch.float64) * 2.0)
    table[:, 0] += 0.5
    table[0, 0] = -math.inf  # no empty sentence
    source = NGram(V, 2, table.log_softmax(-1))
    train = source.sample(256, torch.Generator().manual_seed(1), max_length=200)
    held = source.sample(256, torch.Generator().manual_seed(2), max_length=200)
    lm = LSTMLM(V, embedding_dim=8, hidden_size=16, num_layers=1)
    before = perplexity(lm, [held]).perplexity
    trainer = Trainer(AutoregressiveNLL(), lm, (train.tokens, train.lengths), steps=80, batch_size=32, run_dir=None,
                      optimizer=lambda groups: torch.optim.Adam(groups, lr=0.03), progress=False, guard=None)
    result = trainer.fit()
    after = perplexity(lm, [held]).perplexity
    best = perplexity(source, [held]).perplexity
    assert result.step == 80 and math.isfinite(result.metrics["loss"])
    assert after < best + 0.25 * (before - best), (before, after, best)


def test_the_trainer_runs_truncated_bptt_on_a_chunk_stream():
    lm = _lstm().float()
    stream = torch.randint(0, V, (4, 40), generator=torch.Generator().manual_seed(3))
    chunks = [(stream[:, i:i + 8], stream[:, i + 1:i + 9]) for i in range(0, 32, 8)]
    step = iter(range(10**6))
    trainer = Trainer(AutoregressiveNLL(carry_state=True), lm, lambda b, gen: chunks[next(step) % len(chunks)],
                      steps=6, batch_size=4, run_dir=None, progress=False)
    assert math.isfinite(trainer.fit().metrics["loss"])


def test_bad_batches_and_models_are_named():
    lm, objective = _lstm(), AutoregressiveNLL()
    with pytest.raises(ValueError, match=r"^batch: expected at least one sentence; got an empty batch"):
        objective(lm, Sequences(torch.zeros(0, 2, dtype=torch.long), torch.zeros(0, dtype=torch.long)))
    with pytest.raises(TypeError, match=r"^batch: expected Sequences, a \(tokens \(B, T\), lengths \(B,\)\) tuple, "
                                        r"or a running-text chunk \(inputs \(B, S\), targets \(B, S\)\); got Tensor"):
        objective(lm, torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(TypeError, match=r"^batch: expected integer inputs \(B, S\) of token ids; got dtype "
                                        r"torch.float32"):
        objective(lm, (torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.long)))
    with pytest.raises(ValueError, match=r"^batch: expected running-text inputs and targets of one non-empty shape "
                                         r"\(B, S\); got \(2, 3\) and \(2, 2\)"):
        objective(lm, (torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 2, dtype=torch.long)))
    with pytest.raises(ValueError, match=r"^batch: expected targets token ids in \[0, 6\); got values in \[0, 6\]"):
        objective(lm, (torch.zeros(1, 2, dtype=torch.long), torch.tensor([[0, 6]])))
    with pytest.raises(ValueError, match=r"^x: expected token ids in \[1, 5\]"):
        objective(lm, Sequences.from_lists([[1, 0, 2]]))
    with pytest.raises(TypeError, match=r"^model: expected an autoregressive LM with token_log_probs\(Sequences\) "
                                        r"-> \(B, T \+ 1\) \(ebms.models.lm\); got Linear"):
        objective(torch.nn.Linear(2, 2), Sequences.from_lists([[1]]))
    with pytest.raises(TypeError, match=r"^carry_state: expected a bool; got 1"):
        AutoregressiveNLL(carry_state=1)


# --- label smoothing and scheduled sampling (off by default) ----------------------------------------------
class _Successor(torch.nn.Module):
    """A causal 'LM' whose next token is deterministic: after input ``v`` it puts a large logit on
    ``v % (V - 1) + 1``; it records the inputs of every forward pass."""

    vocab_size = V

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor(5.0, dtype=torch.float64))
        self.seen: list[torch.Tensor] = []

    def forward(self, inputs, state=None):
        self.seen.append(inputs.clone())
        return self.scale * F.one_hot(inputs % (V - 1) + 1, V).double(), None

    def logits(self, x):
        return self(F.pad(x.tokens.masked_fill(~x.mask(), 0), (1, 0)))[0]

    def token_log_probs(self, x):
        targets = F.pad(x.tokens.masked_fill(~x.mask(), 0), (0, 1))
        per = self.logits(x).log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        return torch.where(torch.arange(targets.shape[1]) <= x.lengths.unsqueeze(1), per, 0.0)


def test_options_off_leave_the_loss_bit_for_bit_unchanged():
    lm, x = _lstm(), Sequences.from_lists(CORPUS)
    plain = AutoregressiveNLL()(lm, x)
    off = AutoregressiveNLL(label_smoothing=0.0, scheduled_sampling=0.0)(lm, x, generator=torch.Generator())
    torch.testing.assert_close(off.loss, plain.loss, rtol=0, atol=0)
    assert off.metrics == plain.metrics and AutoregressiveNLL(label_smoothing=0.1).state_dict() == {}
    ss = AutoregressiveNLL(scheduled_sampling=0.7).eval()  # scheduled sampling is for training only
    torch.testing.assert_close(ss(lm, x).loss, plain.loss, rtol=0, atol=0)


def test_label_smoothing_mixes_each_target_with_the_uniform_law():
    lm, x, eps = _lstm(), Sequences.from_lists(CORPUS), 0.1
    out = AutoregressiveNLL(label_smoothing=eps)(lm, x)
    log_p = lm.logits(x).detach().log_softmax(-1)  # (B, T + 1, V)
    total, tokens = 0.0, 0
    for b, sentence in enumerate(CORPUS):
        for t, y in enumerate(sentence + [0]):
            row = log_p[b, t]
            total += (1 - eps) * -float(row[y]) + eps * -float(row.mean())
            tokens += 1
    assert float(out.loss.detach()) == pytest.approx(total / tokens, rel=1e-12)
    assert out.metrics["nll"] == pytest.approx(float(AutoregressiveNLL()(lm, x).loss.detach()), rel=1e-6)
    stream = torch.randint(0, V, (2, 7), generator=torch.Generator().manual_seed(4))
    running = AutoregressiveNLL(label_smoothing=eps)(lm, (stream[:, :-1], stream[:, 1:]))
    lp = lm(stream[:, :-1])[0].log_softmax(-1)
    want = ((1 - eps) * -lp.gather(-1, stream[:, 1:].unsqueeze(-1)).squeeze(-1) + eps * -lp.mean(-1)).mean()
    torch.testing.assert_close(running.loss, want, rtol=0, atol=1e-12)


def test_scheduled_sampling_at_one_feeds_only_the_models_own_tokens():
    model, x = _Successor(), Sequences.from_lists([[3, 1, 4], [2], []])
    out = AutoregressiveNLL(scheduled_sampling=1.0, scheduled_sampling_decode="argmax")(
        model, x, generator=torch.Generator().manual_seed(0))
    first, second = model.seen
    assert first.tolist() == [[0, 3, 1, 4], [0, 2, 0, 0], [0, 0, 0, 0]]  # pass 1: teacher-forced
    # pass 2: every real input after <s> is the argmax after the gold input before it: v -> v % 5 + 1
    assert second.tolist() == [[0, 1, 4, 2], [0, 1, 0, 0], [0, 0, 0, 0]]
    log_p = model(second)[0].log_softmax(-1)
    targets = torch.tensor([[3, 1, 4, 0], [2, 0, 0, 0], [0, 0, 0, 0]])
    keep = torch.arange(4) <= x.lengths.unsqueeze(1)
    want = -log_p.gather(-1, targets.unsqueeze(-1)).squeeze(-1)[keep].sum() / 7
    torch.testing.assert_close(out.loss, want, rtol=0, atol=1e-12)
    assert out.metrics["nll"] == pytest.approx(float(AutoregressiveNLL()(model, x).loss.detach()), rel=1e-6)
    model.seen.clear()
    AutoregressiveNLL(scheduled_sampling=1e-12)(model, x, generator=torch.Generator().manual_seed(0))
    assert model.seen[1].tolist() == model.seen[0].tolist()  # (almost) never replaced: the gold inputs


def test_scheduled_sampling_draws_real_tokens_and_keeps_the_gradient_of_the_second_pass():
    lm, x = _lstm(), Sequences.from_lists(CORPUS)
    out = AutoregressiveNLL(scheduled_sampling=0.5)(lm, x, generator=torch.Generator().manual_seed(1))
    out.loss.backward()
    assert all(p.grad is not None for p in lm.parameters()) and math.isfinite(float(out.loss.detach()))
    assert out.metrics["nll"] == pytest.approx(float(AutoregressiveNLL()(lm, x).loss.detach()), rel=1e-6)
    torch.manual_seed(0)
    fed: list[torch.Tensor] = []
    hook = lm.register_forward_pre_hook(lambda module, args: fed.append(args[0].clone()))
    AutoregressiveNLL(scheduled_sampling=1.0)(lm, x, generator=torch.Generator().manual_seed(2))
    hook.remove()
    real = torch.arange(x.max_length) < x.lengths.unsqueeze(1)
    assert bool((fed[-1][:, 1:][real] >= 1).all())  # </s> is never fed inside a sentence


class _NoLogits(torch.nn.Module):
    def token_log_probs(self, x):
        return torch.zeros(x.batch_size, x.max_length + 1)


def test_bad_option_values_are_named():
    with pytest.raises(ValueError, match=r"^label_smoothing: expected a number in \[0, 1\); got 1"):
        AutoregressiveNLL(label_smoothing=1)
    with pytest.raises(ValueError, match=r"^scheduled_sampling: expected a number in \[0, 1\]; got 1.5"):
        AutoregressiveNLL(scheduled_sampling=1.5)
    with pytest.raises(ValueError, match=r"^scheduled_sampling_decode: expected 'sample' or 'argmax'; got 'beam'"):
        AutoregressiveNLL(scheduled_sampling_decode="beam")
    with pytest.raises(ValueError, match=r"^scheduled_sampling: supported for sentence batches only; got a "
                                         r"running-text chunk with scheduled_sampling=0.5"):
        AutoregressiveNLL(scheduled_sampling=0.5)(_lstm(), (torch.ones(1, 2).long(), torch.ones(1, 2).long()))
    with pytest.raises(TypeError, match=r"^model: label_smoothing and scheduled_sampling need an autoregressive LM "
                                        r"with logits\(Sequences\) -> \(B, T \+ 1, V\) \(ebms.models.lm\); got _NoLogits"):
        AutoregressiveNLL(label_smoothing=0.1)(_NoLogits(), Sequences.from_lists([[1]]))

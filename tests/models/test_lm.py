"""LSTM and Transformer LMs score sentences exactly: against naive per-prefix loops, by enumeration
of a tiny vocabulary (the law over all finite sentences sums to 1), and under changes of padding,
batching, dtype and mode; gradients pass gradcheck."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import pytest
import torch
from torch.func import functional_call

from ebms.distributions import Distribution, NormalisedModel
from ebms.models.lm import LSTMLM, AutoregressiveLM, KVCache, LSTMState, TransformerLM
from ebms.sequences import Sequences

V = 5


def _lstm(v: int = V, **kw) -> LSTMLM:
    return LSTMLM(v, **{"embedding_dim": 4, "hidden_size": 5, "num_layers": 2, **kw})


def _lstm_tied(v: int = V, **kw) -> LSTMLM:
    return LSTMLM(v, **{"embedding_dim": 4, "hidden_size": 6, "num_layers": 1, "tie_weights": True, **kw})


def _transformer(v: int = V, **kw) -> TransformerLM:
    return TransformerLM(v, **{"d_model": 8, "num_heads": 2, "num_layers": 2, "dim_feedforward": 12,
                               "max_length": 12, **kw})


def _transformer_sin(v: int = V, **kw) -> TransformerLM:
    return _transformer(v, positions="sinusoidal", tie_weights=True, **kw)


FACTORIES: dict[str, Callable[..., AutoregressiveLM]] = {
    "lstm": _lstm, "lstm-tied": _lstm_tied, "transformer": _transformer, "transformer-sin-tied": _transformer_sin,
}


def make(name: str, v: int = V, *, seed: int = 0, sharpen: float = 20.0, grad: bool = False, **kw) -> AutoregressiveLM:
    """A float64 model in eval mode whose next-token laws are far from uniform (decoder scaled);
    parameters frozen unless ``grad``."""
    torch.manual_seed(seed)
    lm = FACTORIES[name](v, **kw).double().eval()
    with torch.no_grad():
        lm.decoder.weight.mul_(sharpen)
        lm.decoder.bias.copy_(torch.randn(v, generator=torch.Generator().manual_seed(seed), dtype=torch.float64))
        lm.decoder.bias[0] = -1.0  # sentences neither all tiny nor all endless
    return lm.requires_grad_(grad)


SENTENCES = [[1, 2, 3], [4], [], [2, 2, 2, 2, 1], [3, 1]]


def naive_log_prob(lm: AutoregressiveLM, y: list[int]) -> float:
    """sum_t log softmax(logits of <s> y_<t, run alone)[y_t] plus the </s> term: one forward per prefix."""
    total = 0.0
    for t, target in enumerate([*y, 0]):
        history = torch.tensor([[0, *y[:t]]])
        logits, _ = lm(history)
        total += float(logits[0, -1].log_softmax(-1)[target])
    return total


def incremental_log_prob(lm: AutoregressiveLM, y: list[int]) -> float:
    """The same, feeding one token at a time through the carried state (LSTM state, KV cache)."""
    total, state, prev = 0.0, None, 0
    for target in [*y, 0]:
        logits, state = lm(torch.tensor([[prev]]), state)
        total += float(logits[0, -1].log_softmax(-1)[target])
        prev = target
    return total


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_log_prob_equals_naive_and_incremental_loops(name):
    lm = make(name)
    got = lm.log_prob(Sequences.from_lists(SENTENCES))
    for i, y in enumerate(SENTENCES):
        assert float(got[i]) == pytest.approx(naive_log_prob(lm, y), abs=1e-12)
        assert float(got[i]) == pytest.approx(incremental_log_prob(lm, y), abs=1e-12)


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_sentence_probabilities_plus_longer_mass_sum_to_one(name):
    # V = 3 (tokens 1, 2): all 31 sentences of length <= 4, plus the mass of not having ended after 4 tokens,
    # which is the sum over the 32 five-token starts z of p(z without </s>) = continuation_log_prob(<s>, z, end=False)
    lm, L = make(name, 3), 4
    sentences = [list(s) for n in range(L + 1) for s in itertools.product([1, 2], repeat=n)]
    starts = Sequences(torch.tensor(list(itertools.product([1, 2], repeat=L + 1))))
    empty = Sequences(torch.zeros(starts.batch_size, 0, dtype=torch.long), torch.zeros(starts.batch_size, dtype=torch.long))
    with torch.no_grad():
        finished = lm.log_prob(Sequences.from_lists(sentences)).exp().sum()
        longer = lm.continuation_log_prob(empty, starts, end=False).exp().sum()
    assert 0.01 < float(longer) < 0.99  # both parts matter
    assert float(finished + longer) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_token_log_probs_have_the_contract_layout(name):
    lm = make(name)
    x = Sequences.from_lists(SENTENCES)
    per = lm.token_log_probs(x)
    assert per.shape == (5, x.max_length + 1) and per.dtype == torch.float64
    for i, y in enumerate(SENTENCES):
        assert bool((per[i, len(y) + 1:] == 0).all()) and bool((per[i, : len(y) + 1] < 0).all())
    torch.testing.assert_close(per.sum(-1), lm.log_prob(x), rtol=0, atol=1e-13)
    logits = lm.logits(x)
    assert logits.shape == (5, x.max_length + 1, V)
    # position L of the logits scores </s>
    assert float(logits[1, 1].log_softmax(-1)[0]) == pytest.approx(float(per[1, 1]), abs=1e-13)


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_padding_and_batching_do_not_change_log_prob(name):
    lm = make(name)
    base = lm.log_prob(Sequences.from_lists(SENTENCES))
    wide = Sequences.from_lists(SENTENCES).pad_to(9, pad_id=3)  # garbage padding, wider batch
    wide = wide.with_tokens(torch.where(wide.mask(), wide.tokens, 4))
    torch.testing.assert_close(lm.log_prob(wide), base, rtol=0, atol=1e-12)
    order = [3, 0, 4, 2, 1]
    mixed = lm.log_prob(Sequences.from_lists([SENTENCES[i] for i in order] + [[1, 1, 1, 1, 1, 1, 1]]))
    torch.testing.assert_close(mixed[:5], base[order], rtol=0, atol=1e-12)
    for i, y in enumerate(SENTENCES):
        alone = lm.log_prob(Sequences.from_lists([y]))
        assert float(alone) == pytest.approx(float(base[i]), abs=1e-12)
    as_tensor = lm.log_prob(torch.tensor([[1, 2, 3]]))  # a tensor is read as full-length sentences
    assert float(as_tensor) == pytest.approx(float(base[0]), abs=1e-12)


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_lengths_zero_and_one_score_the_boundary_terms(name):
    lm = make(name)
    with torch.no_grad():
        first = lm(torch.zeros(1, 1, dtype=torch.long))[0][0, 0].log_softmax(-1)
        second = lm(torch.tensor([[0, 3]]))[0][0, 1].log_softmax(-1)
    got = lm.log_prob(Sequences.from_lists([[], [3]]))
    assert float(got[0]) == pytest.approx(float(first[0]), abs=1e-13)  # log p(</s> | <s>)
    assert float(got[1]) == pytest.approx(float(first[3] + second[0]), abs=1e-13)


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_empty_batch_gives_empty_results(name):
    lm = make(name)
    empty = Sequences(torch.zeros(0, 3, dtype=torch.long), torch.zeros(0, dtype=torch.long))
    assert lm.log_prob(empty).shape == (0,)
    assert lm.token_log_probs(empty).shape == (0, 4)
    assert lm.continuation_log_prob(empty, empty).shape == (0,)
    drawn = lm.sample(0)
    assert drawn.batch_size == 0


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_float32_matches_float64(name):
    lm64 = make(name)
    lm32 = make(name).float()
    x = Sequences.from_lists(SENTENCES)
    got = lm32.log_prob(x)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), lm64.log_prob(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_continuation_log_prob_is_the_joint_minus_the_prefix_part(name):
    lm = make(name)
    prefixes = [[1], [2, 3], [], [4, 4, 4], [1, 2]]
    conts = [[3, 2], [], [1], [2, 1, 1], [4]]
    c, x = Sequences.from_lists(prefixes), Sequences.from_lists(conts)
    joint = lm.log_prob(Sequences.from_lists([a + b for a, b in zip(prefixes, conts)]))
    empty = Sequences.from_lists([[]] * 5)
    prefix_part = lm.continuation_log_prob(empty, c, end=False)
    torch.testing.assert_close(lm.continuation_log_prob(c, x), joint - prefix_part, rtol=0, atol=1e-12)
    # without </s>: the joint of (prefix + x) minus its end term
    per = lm.token_log_probs(Sequences.from_lists([a + b for a, b in zip(prefixes, conts)]))
    ends = per.gather(1, (c.lengths + x.lengths).unsqueeze(1)).squeeze(1)
    torch.testing.assert_close(lm.continuation_log_prob(c, x, end=False), joint - ends - prefix_part,
                               rtol=0, atol=1e-12)
    steps = lm.continuation_token_log_probs(c, x)
    assert steps.shape == (5, x.max_length + 1) and float(steps[1, 1:].abs().sum()) == 0.0


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_a_chunk_continued_from_its_state_equals_the_whole_stream(name):
    lm = make(name)
    stream = torch.tensor([[0, 1, 2, 0, 3, 4, 0, 2], [0, 4, 4, 1, 0, 0, 2, 3]])
    whole, _ = lm(stream)
    first, state = lm(stream[:, :3])
    second, _ = lm(stream[:, 3:], state.detach())
    torch.testing.assert_close(torch.cat([first, second], 1), whole, rtol=0, atol=1e-12)
    assert isinstance(state, (LSTMState, KVCache)) and state.batch_size == 2
    picked, _ = lm(stream[1:, 3:], state.select(torch.tensor([1])))
    torch.testing.assert_close(picked, whole[1:, 3:], rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", ["lstm", "transformer"])
def test_dropout_is_active_in_training_mode_only(name):
    torch.manual_seed(0)
    lm = FACTORIES[name](V, dropout=0.5).double()
    x = Sequences.from_lists(SENTENCES)
    lm.train()
    assert not torch.equal(lm.log_prob(x), lm.log_prob(x))
    lm.eval()
    torch.testing.assert_close(lm.log_prob(x), lm.log_prob(x), rtol=0, atol=0)
    twin = FACTORIES[name](V, dropout=0.0).double().eval()
    twin.load_state_dict(lm.state_dict())
    torch.testing.assert_close(lm.log_prob(x), twin.log_prob(x), rtol=0, atol=0)


@pytest.mark.parametrize("name", ["lstm-tied", "transformer-sin-tied"])
def test_tied_weights_share_one_parameter(name):
    lm = make(name, grad=True)
    assert lm.decoder.weight is lm.embedding.weight
    untied = FACTORIES[name.replace("-tied", "").replace("-sin", "")](V)
    n_params = sum(p.numel() for p in lm.parameters())
    assert len(list(lm.parameters())) == len({id(p) for p in lm.parameters()})
    assert n_params < sum(p.numel() for p in untied.parameters()) + lm.embedding.weight.numel()
    lm.log_prob(Sequences.from_lists([[1, 1]])).sum().backward()
    # rows never fed as input get gradient through the output layer only
    assert float(lm.embedding.weight.grad[4].abs().sum()) > 0


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_log_prob_gradients_pass_gradcheck(name):
    lm = make(name, sharpen=1.0)
    x = Sequences.from_lists([[1, 2], [3], []])
    names = ["embedding.weight", "decoder.bias"] + (["lstm.weight_hh_l0"] if "lstm" in name else
                                                    ["layers.0.qkv.weight"])
    params = {n: p.detach().clone().requires_grad_(True) for n, p in lm.named_parameters() if n in names}
    assert len(params) == 3

    def f(*values):
        return _log_prob_with(lm, dict(zip(params, values)), x)

    assert torch.autograd.gradcheck(f, tuple(params.values()), eps=1e-6, atol=1e-7)


def _log_prob_with(lm: AutoregressiveLM, params: dict, x: Sequences):
    class _Call(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lm = lm

        def forward(self, seqs):
            return self.lm.log_prob(seqs)

    return functional_call(_Call(), {f"lm.{k}": v for k, v in params.items()}, (x,), strict=False)


def test_models_are_normalised_distributions():
    for name in FACTORIES:
        lm = make(name)
        assert isinstance(lm, Distribution) and isinstance(lm, NormalisedModel)
        assert lm.log_partition() == 0.0 and not lm.conditional_on_length


# --- validation -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["lstm", "transformer"])
def test_bad_sentences_are_refused_with_their_position(name):
    lm = make(name)
    with pytest.raises(ValueError, match=r"^x: expected token ids in \[1, 4\] within lengths \(id 0 is the boundary "
                                         r"<s>/</s>\); sequence 1 has 0 at position 1"):
        lm.log_prob(Sequences.from_lists([[1], [2, 0, 3]]))
    with pytest.raises(ValueError, match=r"^x: expected token ids in \[1, 4\].*sequence 0 has 5 at position 0"):
        lm.log_prob(Sequences.from_lists([[5]]))
    with pytest.raises(TypeError, match=r"^x: expected an ebms.sequences.Sequences .*; got list"):
        lm.log_prob([[1, 2]])
    with pytest.raises(TypeError, match=r"^x: expected Sequences or an integer tensor \(B, T\) of token ids; "
                                        r"got torch.float32 tensor of shape \(1, 2\)"):
        lm.log_prob(torch.ones(1, 2))
    with pytest.raises(ValueError, match=r"^prefix: expected one prefix per continuation \(2\); got 1"):
        lm.continuation_log_prob(Sequences.from_lists([[1]]), Sequences.from_lists([[1], [2]]))


def test_transformer_refuses_sentences_beyond_its_positions():
    lm = make("transformer")
    with pytest.raises(ValueError, match=r"^x: the longest sequence has 13 tokens; this model scores at most "
                                         r"max_length=12"):
        lm.log_prob(Sequences.from_lists([[1] * 13]))
    assert lm.log_prob(Sequences.from_lists([[1] * 12])).shape == (1,)
    with pytest.raises(ValueError, match=r"^inputs: position 13 exceeds max_length=12 \(positions 0..max_length\)"):
        lm(torch.zeros(1, 14, dtype=torch.long))
    _, state = lm(torch.zeros(1, 10, dtype=torch.long))
    with pytest.raises(ValueError, match=r"^inputs: position 13 exceeds max_length=12"):
        lm(torch.zeros(1, 4, dtype=torch.long), state)


def test_states_of_the_other_architecture_are_refused():
    lstm, transformer = make("lstm"), make("transformer")
    _, kv = transformer(torch.zeros(1, 2, dtype=torch.long))
    _, hc = lstm(torch.zeros(1, 2, dtype=torch.long))
    with pytest.raises(TypeError, match=r"^state: expected an LSTMState or None; got KVCache"):
        lstm(torch.zeros(1, 1, dtype=torch.long), kv)
    with pytest.raises(TypeError, match=r"^state: expected a KVCache or None; got LSTMState"):
        transformer(torch.zeros(1, 1, dtype=torch.long), hc)


@pytest.mark.parametrize(("build", "error", "message"), [
    (lambda: LSTMLM(1), ValueError, r"^vocab_size: expected an int >= 2; got 1"),
    (lambda: LSTMLM(5, dropout=1.0), ValueError, r"^dropout: expected a number in \[0, 1\); got 1.0"),
    (lambda: LSTMLM(5, tie_weights=1), TypeError, r"^tie_weights: expected a bool; got 1"),
    (lambda: LSTMLM(5, hidden_size=0), ValueError, r"^hidden_size: expected an int >= 1; got 0"),
    (lambda: TransformerLM(5, d_model=10, num_heads=3), ValueError,
     r"^num_heads: expected a divisor of d_model=10; got 3"),
    (lambda: TransformerLM(5, positions="rotary"), ValueError,
     r"^positions: expected one of learned, sinusoidal; got 'rotary'"),
    (lambda: TransformerLM(5, max_length=0), ValueError, r"^max_length: expected an int >= 1; got 0"),
])
def test_bad_settings_are_named(build, error, message):
    with pytest.raises(error, match=message):
        build()


def test_sinusoidal_positions_are_fixed_and_not_saved():
    lm = make("transformer-sin-tied")
    assert "sinusoids" not in lm.state_dict() and lm.position_embedding is None
    assert float(lm.sinusoids[3, 0]) == pytest.approx(math.sin(3.0), abs=1e-6)
    assert float(lm.sinusoids[3, 1]) == pytest.approx(math.cos(3.0), abs=1e-6)


def test_logits_keep_the_padded_width_and_ignore_padding():
    lm = make("transformer")
    x = Sequences.from_lists([[1, 2], [3]])
    wide = x.pad_to(20, pad_id=4)  # wider than the model's 12 positions: only real tokens are run
    got = lm.logits(wide)
    assert got.shape == (2, 21, V) and float(got[:, 3:].abs().sum()) == 0.0
    torch.testing.assert_close(got[:, :3], lm.logits(x), rtol=0, atol=1e-12)
    assert lm.logits(Sequences(torch.zeros(0, 2, dtype=torch.long), torch.zeros(0, dtype=torch.long))).shape == (0, 3, V)


@pytest.mark.parametrize("name", ["lstm", "transformer"])
def test_forward_refuses_float_ids_instead_of_failing_inside_the_embedding(name):
    lm = make(name)
    with pytest.raises(TypeError, match=r"^inputs: expected an integer tensor \(B, S\) of token ids; got dtype "
                                        r"torch.float32 \(ids are never rounded\)$"):
        lm(torch.ones(1, 3))
    with pytest.raises(ValueError, match=r"^inputs: expected shape \(B, S\); got \(3,\)$"):
        lm(torch.ones(3, dtype=torch.long))


def test_transformer_refuses_a_prefix_and_continuation_beyond_its_positions_naming_both():
    lm = make("transformer")  # max_length = 12
    c, x = Sequences.from_lists([[1] * 8, [2]]), Sequences.from_lists([[3] * 5, [4]])
    with pytest.raises(ValueError, match=r"^prefix, x: a prefix and its continuation have 13 tokens together; this "
                                         r"model scores at most max_length=12$"):
        lm.continuation_log_prob(c, x)
    assert lm.continuation_log_prob(c, Sequences.from_lists([[3] * 4, [4]])).shape == (2,)
    with pytest.raises(ValueError, match=r"^prefix: the longest prefix has 13 tokens; the model's max_length is 12$"):
        lm.sample(1, prefix=Sequences.from_lists([[1] * 13]))
    with pytest.raises(ValueError, match=r"^max_length: a prefix of 8 tokens plus 5 drawn tokens exceeds the "
                                         r"model's max_length=12$"):
        lm.sample(2, prefix=c, max_length=5)
    draws = lm.sample(2, generator=torch.Generator().manual_seed(0), prefix=c, truncate=True)  # default: the rest
    assert int(draws.lengths.max()) <= 12 - 8

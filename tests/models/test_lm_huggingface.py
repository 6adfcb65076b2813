"""HuggingFaceLM scores and draws exactly as the wrapped ``transformers`` model: against a direct
computation with the model (permuted ids), under padding and batching, through its key/value cache
(against full recomputation), by enumeration of a tiny vocabulary (the law sums to one), and in
distribution (draws against exact cell probabilities). Tiny randomly initialised GPT-2 and Llama
configs are built locally: nothing is downloaded.

The statistical test uses ``tv_threshold`` of ``_discrete_checks`` (``E[TV]`` bound plus McDiarmid's
deviation at ``delta = 1e-4``, a z of about 3.7), as tests/models/test_lm_sampling.py.
"""

from __future__ import annotations

import ast
import importlib.util
import itertools
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from _discrete_checks import tv_distance, tv_threshold
from torch import nn

# found, not imported: its model classes load when a test builds one (seconds of import per collecting process)
if importlib.util.find_spec("transformers") is None:
    pytest.skip("could not import 'transformers': not installed", allow_module_level=True)

import ebms.models.lm.huggingface as hf_module  # noqa: E402
from ebms.models.lm.huggingface import HFState, HuggingFaceLM  # noqa: E402
from ebms.objectives import AutoregressiveNLL  # noqa: E402
from ebms.sequences import Sequences  # noqa: E402

V = 12


def gpt2(v: int = V, *, boundary: int | None = None, positions: int = 32, seed: int = 0, init: float = 0.5,
         dropout: float = 0.0) -> nn.Module:
    """Tiny GPT-2 (bos = eos = ``boundary``, default ``min(9, v - 1)``); ``initializer_range`` ``init``
    makes the next-token laws far from uniform."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    boundary = min(9, v - 1) if boundary is None else boundary
    cfg = GPT2Config(vocab_size=v, n_layer=2, n_embd=16, n_head=2, n_positions=positions, bos_token_id=boundary,
                     eos_token_id=boundary, initializer_range=init, resid_pdrop=dropout, embd_pdrop=dropout,
                     attn_pdrop=dropout)
    return GPT2LMHeadModel(cfg)


def llama(v: int = V, *, seed: int = 0) -> nn.Module:
    """Tiny Llama (rotary positions, grouped keys/values): bos 1 and eos 2 differ."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=v, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, max_position_embeddings=32, bos_token_id=1, eos_token_id=2,
                      initializer_range=0.5)
    return LlamaForCausalLM(cfg)


ARCHS = {"gpt2": gpt2, "gpt2-boundary0": lambda v=V, **kw: gpt2(v, boundary=0, **kw), "llama": llama}


def make(name: str, v: int = V, *, grad: bool = False, **kw) -> HuggingFaceLM:
    return HuggingFaceLM(ARCHS[name](v, **kw).double().eval()).requires_grad_(grad)


SENTENCES = [[1, 2, 3], [4], [], [5, 5, 5, 5, 1], [3, 9, 11]]


def direct_log_prob(lm: HuggingFaceLM, y: list[int]) -> torch.Tensor:
    """The model's own log p(bos y eos): its ids are ``permutation[y]``, fed after ``bos_id``."""
    hf = [int(lm.permutation[t]) for t in y]
    logp = lm.model(torch.tensor([[lm.bos_id, *hf]])).logits[0].log_softmax(-1)
    targets = torch.tensor([*hf, lm.boundary_id])
    return logp.gather(1, targets.unsqueeze(1)).sum()


@pytest.mark.parametrize("name", sorted(ARCHS))
def test_log_prob_equals_a_direct_computation_with_the_hf_model(name):
    lm = make(name)
    got = lm.log_prob(Sequences.from_lists(SENTENCES))
    for i, y in enumerate(SENTENCES):
        assert float(got[i]) == pytest.approx(float(direct_log_prob(lm, y)), abs=1e-10)
    assert lm.boundary_id == {"gpt2": 9, "gpt2-boundary0": 0, "llama": 2}[name]
    assert lm.bos_id == {"gpt2": 9, "gpt2-boundary0": 0, "llama": 1}[name]
    assert lm.max_length == 31 and lm.vocab_size == V
    # float32 model: within 1e-5 of float64
    lm32 = make(name).float()
    torch.testing.assert_close(lm32.log_prob(Sequences.from_lists(SENTENCES)).double(), got, rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_padding_and_batching_do_not_change_scores(name):
    lm = make(name)
    x = Sequences.from_lists(SENTENCES)
    base = lm.token_log_probs(x)
    wide = x.pad_to(9, pad_id=3)
    wide = wide.with_tokens(torch.where(wide.mask(), wide.tokens, 7))  # garbage padding, wider batch
    torch.testing.assert_close(lm.token_log_probs(wide)[:, : base.shape[1]], base, rtol=0, atol=1e-12)
    order = [3, 0, 4, 2, 1]
    mixed = lm.log_prob(Sequences.from_lists([SENTENCES[i] for i in order] + [[1] * 9]))
    torch.testing.assert_close(mixed[:5], base.sum(-1)[order], rtol=0, atol=1e-12)
    for i, y in enumerate(SENTENCES):
        alone = lm.token_log_probs(Sequences.from_lists([y]))
        torch.testing.assert_close(alone[0], base[i, : len(y) + 1], rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_cached_steps_equal_full_recomputation_after_select_and_detach(name):
    lm = make(name)
    prefixes = [[1, 2, 3], [], [5], [4, 4, 1, 2, 5]]
    steps = torch.tensor([[3, 6, 1], [2, 2, 8], [11, 4, 4], [9, 1, 7]])  # the same 3 tokens fed after each prefix
    c = Sequences.from_lists(prefixes)
    full = lm.continuation_token_log_probs(c, Sequences(steps))  # (4, 4): recomputed from scratch
    hist = torch.nn.functional.pad(lm._real(c, c.max_length), (1, 0))
    logits, state = lm._encode(hist, c.lengths + 1)
    assert isinstance(state, HFState) and state.batch_size == 4
    rows = torch.arange(4)
    for t in range(3):
        got = logits.log_softmax(-1).gather(1, steps[rows, t].unsqueeze(1)).squeeze(1)
        torch.testing.assert_close(got, full[rows, t], rtol=0, atol=1e-12)
        if t == 1:  # row 1 leaves, the rest are reordered (as finished draws leave in sampling)
            keep = torch.tensor([3, 0, 2])
            rows, state = rows[keep], state.select(keep).detach()
        step_logits, state = lm(steps[rows, t].unsqueeze(1), state)
        logits = step_logits[:, 0]
    end = logits.log_softmax(-1)[:, 0]
    torch.testing.assert_close(end, full[rows, 3], rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_a_chunk_continued_from_its_state_equals_the_whole_stream(name):
    lm = make(name)
    stream = torch.tensor([[0, 1, 2, 0, 3, 4, 0, 2], [0, 4, 4, 1, 0, 0, 2, 3]])
    whole, _ = lm(stream)
    first, state = lm(stream[:, :3])
    second, _ = lm(stream[:, 3:], state.detach())
    torch.testing.assert_close(torch.cat([first, second], 1), whole, rtol=0, atol=1e-12)
    picked, _ = lm(stream[1:, 3:], state.select(torch.tensor([1])))
    torch.testing.assert_close(picked, whole[1:, 3:], rtol=0, atol=1e-12)
    empty, fresh = lm(stream[:, :0])
    assert empty.shape == (2, 0, V) and fresh.batch_size == 2
    torch.testing.assert_close(lm(stream, fresh)[0], whole, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_greedy_continuations_of_ragged_prefixes_match_a_naive_loop(name):
    lm = make(name)
    prefixes = [[1, 2, 3], [], [5], [4, 4, 1, 2, 5]]
    got = lm.sample(4, torch.Generator().manual_seed(0), prefix=Sequences.from_lists(prefixes), top_k=1,
                    max_length=6, truncate=True)
    for i, c in enumerate(prefixes):
        history, want = [0, *c], []
        for _ in range(6):
            nxt = int(lm(torch.tensor([history]))[0][0, -1].argmax())
            if nxt == 0:
                break
            want.append(nxt)
            history.append(nxt)
        assert got.tolist()[i] == want


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_sentence_probabilities_plus_longer_mass_sum_to_one(name):
    # V = 3 (tokens 1, 2): all 31 sentences of length <= 4 plus the mass of the 32 unfinished 5-token starts
    lm, L = make(name, 3), 4
    sentences = [list(s) for n in range(L + 1) for s in itertools.product([1, 2], repeat=n)]
    starts = Sequences(torch.tensor(list(itertools.product([1, 2], repeat=L + 1))))
    empty = Sequences(torch.zeros(32, 0, dtype=torch.long), torch.zeros(32, dtype=torch.long))
    with torch.no_grad():
        finished = lm.log_prob(Sequences.from_lists(sentences)).exp().sum()
        longer = lm.continuation_log_prob(empty, starts, end=False).exp().sum()
        steps = lm.logits(Sequences.from_lists(sentences)).softmax(-1).sum(-1)
    assert 0.01 < float(longer) < 0.99
    assert float(finished + longer) == pytest.approx(1.0, abs=1e-12)
    torch.testing.assert_close(steps, torch.ones_like(steps), rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_continuation_log_prob_is_the_joint_minus_the_prefix_part(name):
    lm = make(name)
    prefixes, conts = [[1], [2, 3], [], [4, 4, 4], [1, 2]], [[3, 2], [], [1], [2, 1, 1], [9]]
    c, x = Sequences.from_lists(prefixes), Sequences.from_lists(conts)
    joint = lm.log_prob(Sequences.from_lists([a + b for a, b in zip(prefixes, conts)]))
    prefix_part = lm.continuation_log_prob(Sequences.from_lists([[]] * 5), c, end=False)
    torch.testing.assert_close(lm.continuation_log_prob(c, x) + prefix_part, joint, rtol=0, atol=1e-12)


SHORT, DRAWS = 3, 4000


def _cells(lm: HuggingFaceLM, **law) -> tuple[list[list[int]], torch.Tensor]:
    short = [list(s) for n in range(SHORT + 1) for s in itertools.product(range(1, lm.vocab_size), repeat=n)]
    p = lm.log_prob(Sequences.from_lists(short), **law).exp()
    return short, torch.cat([p, (1 - p.sum()).clamp(min=0).reshape(1)])


def _histogram(short: list[list[int]], draws: Sequences) -> torch.Tensor:
    index = {tuple(s): i for i, s in enumerate(short)}
    cells = [index.get(tuple(s), len(short)) for s in draws.tolist()]
    return torch.bincount(torch.tensor(cells), minlength=len(short) + 1).double() / len(cells)


@pytest.mark.parametrize(("name", "law"), [
    ("gpt2", {}), ("llama", {}), ("gpt2", {"top_k": 2}), ("llama", {"top_p": 0.8, "temperature": 1.5}),
])
def test_draws_follow_the_exact_law_and_stay_on_the_restricted_support(name, law):
    lm = make(name, 4, positions=42, seed=2, init=0.3) if name == "gpt2" else make(name, 4)
    with torch.no_grad():
        short, p = _cells(lm, **law)
        draws = lm.sample(DRAWS, torch.Generator().manual_seed(1), max_length=25, truncate=True, **law)
        emp = _histogram(short, draws)
        assert float(p[-1]) > 0.02 and float(p.max()) < 0.8  # the "longer" cell is used; the law is random
        assert tv_distance(emp, p) < tv_threshold(p, DRAWS)
        if law:
            assert int((p[:-1] == 0).sum()) > 0 and float(emp[p == 0].sum()) == 0.0  # cells removed, never drawn
            ended = draws[draws.lengths < 25]
            assert ended.batch_size > DRAWS // 2 and bool(torch.isfinite(lm.log_prob(ended, **law)).all())
        else:  # negative control: the bound has power against a wrong (tempered) law
            _, tempered = _cells(lm, temperature=2.0)
            assert tv_distance(emp, tempered) > tv_threshold(tempered, DRAWS)


def test_gradients_reach_the_hf_parameters_as_in_a_direct_computation():
    lm = make("llama", grad=True)
    params = [p for p in lm.parameters() if p.requires_grad]
    assert {id(p) for p in params} == {id(p) for p in lm.model.parameters()}
    ours = torch.autograd.grad(lm.log_prob(Sequences.from_lists(SENTENCES)).sum(), params)
    direct = torch.autograd.grad(sum(direct_log_prob(lm, y) for y in SENTENCES), params)
    for a, b in zip(ours, direct):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-10)
    out = AutoregressiveNLL()(lm, Sequences.from_lists(SENTENCES))
    out.loss.backward()
    assert all(p.grad is not None and bool(torch.isfinite(p.grad).all()) for p in params)


def test_the_wrapped_models_mode_is_kept_and_dropout_acts_in_training_only():
    lm = HuggingFaceLM(gpt2(dropout=0.5).double().train())
    x = Sequences.from_lists(SENTENCES)
    assert lm.training and lm.model.training
    assert not torch.equal(lm.log_prob(x), lm.log_prob(x))
    lm.eval()
    assert not lm.model.training
    torch.testing.assert_close(lm.log_prob(x), lm.log_prob(x), rtol=0, atol=0)
    assert not HuggingFaceLM(gpt2().eval()).training


def test_ids_convert_from_tokenizer_output_and_back():
    lm = make("llama")  # bos 1, boundary 2: our 0 <-> its 2, our 2 <-> its 0
    ids = torch.tensor([[1, 5, 0, 7, 2, 3],     # right-padded: bos, tokens, eos, padding
                        [3, 3, 1, 5, 6, 7]])    # left-padded, no bos/eos
    mask = torch.tensor([[1, 1, 1, 1, 1, 0], [0, 0, 1, 1, 1, 1]])
    x = lm.from_hf_ids(ids, mask)
    assert x.tolist() == [[5, 2, 7], [5, 6, 7]]  # leading bos and trailing eos dropped, ids 0 <-> 2 swapped
    back, back_mask = lm.to_hf_ids(x)
    assert back.tolist() == [[5, 0, 7], [5, 6, 7]] and back_mask.tolist() == [[1, 1, 1], [1, 1, 1]]
    assert lm.from_hf_ids(torch.tensor([[1, 1, 4]])).tolist() == [[1, 4]]  # only one leading bos is dropped
    assert lm.from_hf_ids(torch.zeros(2, 0, dtype=torch.long)).lengths.tolist() == [0, 0]
    g = make("gpt2")  # bos = eos = 9: a lone <|endoftext|> is an empty sentence
    assert g.from_hf_ids(torch.tensor([[9, 9], [9, 4]]), torch.tensor([[1, 0], [1, 1]])).tolist() == [[], [4]]
    with pytest.raises(ValueError, match=r"^input_ids: row 0 has the boundary token 2 inside the sentence \(real "
                                         r"position 1\); split the text into sentences first"):
        lm.from_hf_ids(torch.tensor([[5, 2, 6]]))
    with pytest.raises(ValueError, match=r"^input_ids: expected ids in \[0, 11\] at the real positions"):
        lm.from_hf_ids(torch.tensor([[5, 12]]))
    with pytest.raises(ValueError, match=r"^attention_mask: expected the shape of input_ids \(1, 2\); got \(1, 3\)"):
        lm.from_hf_ids(torch.tensor([[5, 6]]), torch.ones(1, 3))
    with pytest.raises(TypeError, match=r"^input_ids: expected an integer tensor \(B, T\)"):
        lm.from_hf_ids(torch.ones(2, 2))


def test_from_pretrained_loads_a_saved_model_directory(tmp_path):
    model = gpt2().eval()
    model.save_pretrained(tmp_path)
    lm = HuggingFaceLM.from_pretrained(str(tmp_path), max_length=20)
    assert not lm.training and lm.max_length == 20 and lm.boundary_id == 9
    x = Sequences.from_lists(SENTENCES)
    torch.testing.assert_close(lm.log_prob(x), HuggingFaceLM(model).log_prob(x), rtol=0, atol=1e-6)


def test_transformers_is_imported_lazily_and_its_absence_is_named(monkeypatch):
    tree = ast.parse(Path(hf_module.__file__).read_text())
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    names = [a.name for n in top for a in n.names] + [n.module or "" for n in top if isinstance(n, ast.ImportFrom)]
    assert not any(name.split(".")[0] == "transformers" for name in names)
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(ImportError, match=r"^HuggingFaceLM needs the transformers package: pip install transformers$"):
        HuggingFaceLM.from_pretrained("gpt2")


# --- validation -----------------------------------------------------------------------------


class _Fake(nn.Module):
    """A stand-in model: a config and a forward returning given logits and cache."""

    def __init__(self, cache=None, width: int = 5, **config) -> None:
        super().__init__()
        self.config = SimpleNamespace(**{"vocab_size": 5, "eos_token_id": 4, **config})
        self.w = nn.Parameter(torch.zeros(()))
        self.cache, self.width = cache, width

    def forward(self, input_ids, attention_mask=None, position_ids=None, cache=None, use_cache=None):
        return SimpleNamespace(logits=torch.zeros(*input_ids.shape, self.width), cache=self.cache)


@pytest.mark.parametrize(("build", "error", "message"), [
    (lambda: HuggingFaceLM(nn.Linear(2, 2)), TypeError,
     r"^model: expected a Hugging Face causal LM \(a torch module with a .config, e.g. GPT2LMHeadModel\); got Linear"),
    (lambda: HuggingFaceLM(_Fake(is_encoder_decoder=True)), ValueError,
     r"^model: expected a decoder-only causal LM; got an encoder-decoder _Fake"),
    (lambda: HuggingFaceLM(_Fake(eos_token_id=None)), ValueError,
     r"^boundary_id: the model's config has no eos_token_id; pass boundary_id="),
    (lambda: HuggingFaceLM(_Fake(), boundary_id=5), ValueError, r"^boundary_id: expected a token id in \[0, 4\]; got 5"),
    (lambda: HuggingFaceLM(_Fake(), bos_id=-1), ValueError, r"^bos_id: expected an int >= 0; got -1"),
    (lambda: HuggingFaceLM(_Fake(vocab_size=1)), ValueError, r"^model.config.vocab_size: expected an int >= 2; got 1"),
    (lambda: HuggingFaceLM(gpt2(), max_length=32), ValueError,
     r"^max_length: the model has 32 positions \(<s> plus at most 31 tokens\); got 32"),
])
def test_bad_settings_are_named(build, error, message):
    with pytest.raises(error, match=message):
        build()


def test_config_defaults_without_positions_and_with_a_list_of_eos_ids():
    lm = HuggingFaceLM(_Fake(eos_token_id=[3, 4], bos_token_id=None))
    assert lm.boundary_id == 3 and lm.bos_id == 3 and lm.max_length is None
    assert lm.permutation.tolist() == [3, 1, 2, 0, 4]


def test_unsupported_models_and_states_are_refused():
    with pytest.raises(ValueError, match=r"^model: its logits have 6 columns; config.vocab_size is 5"):
        HuggingFaceLM(_Fake(width=6)).log_prob(Sequences.from_lists([[1]]))
    with pytest.raises(ValueError, match=r"^model: its forward returned no key/value cache with use_cache=True"):
        HuggingFaceLM(_Fake()).log_prob(Sequences.from_lists([[1]]))
    sliding = SimpleNamespace(layers=[SimpleNamespace()])
    with pytest.raises(TypeError, match=r"^model: HuggingFaceLM supports full-attention key/value caches "
                                        r"\(DynamicLayer\); this model's cache has a SimpleNamespace layer"):
        HuggingFaceLM(_Fake(cache=sliding)).log_prob(Sequences.from_lists([[1]]))
    lm = make("gpt2")
    with pytest.raises(TypeError, match=r"^state: expected an HFState or None; got tuple"):
        lm(torch.zeros(1, 1, dtype=torch.long), ())
    with pytest.raises(ValueError, match=r"^inputs: position 32 exceeds max_length=31 \(positions 0..max_length\)"):
        lm(torch.zeros(1, 33, dtype=torch.long))
    _, state = lm(torch.zeros(1, 30, dtype=torch.long))
    with pytest.raises(ValueError, match=r"^inputs: position 32 exceeds max_length=31"):
        lm(torch.zeros(1, 3, dtype=torch.long), state)
    with pytest.raises(ValueError, match=r"^x: the longest sequence has 32 tokens; this model scores at most "
                                         r"max_length=31"):
        lm.log_prob(Sequences.from_lists([[1] * 32]))

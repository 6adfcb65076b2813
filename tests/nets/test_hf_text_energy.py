"""HFTextEnergy: a transformers encoder (BERT, RoBERTa) read as a residual energy, against the model's own
forward on unpadded rows (its own position ids), padding and batch invariance, the joint model by enumeration,
pretrained weights from a local folder (no download), and its errors."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from torch import nn

from ebms.distributions import NGram
from ebms.models.residual_lm import ResidualLM, enumerate_continuations, exact_joint_log_probs, exact_log_z
from ebms.sequences import Sequences

if importlib.util.find_spec("transformers") is None:
    pytest.skip("could not import 'transformers': not installed", allow_module_level=True)

from ebms.nets.hf_text_energy import HFTextEnergy  # noqa: E402

KINDS = ("bert", "roberta")
PREFIX = Sequences.from_lists([[1, 2, 3], [4], [], [6, 6]])
CONT = Sequences.from_lists([[5], [2, 3, 1], [4, 4], []])


def make(kind: str, pooling: str = "mean", dtype: torch.dtype = torch.float64) -> HFTextEnergy:
    torch.manual_seed(0)
    e = HFTextEnergy.from_config(kind, 7, dim=8, layers=2, heads=2, max_length=12, pooling=pooling).to(dtype).eval()
    nn.init.normal_(e.head.weight)  # a fresh head is 0: make the energy non-trivial
    nn.init.normal_(e.head.bias)
    return e


def reference(e: HFTextEnergy, c: list[int], x: list[int]) -> torch.Tensor:
    """The model's own forward on the one unpadded row <s> c x (its default position ids), pooled by hand."""
    ids = e.token_map[torch.tensor([[0, *c, *x]])]
    h = e.encoder(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state[0]
    return e.head(h[0] if e.pooling == "first" else h.mean(0)).squeeze(-1)


@pytest.mark.parametrize("pooling", ["mean", "first"])
@pytest.mark.parametrize("kind", KINDS)
def test_each_row_equals_the_models_own_forward_on_that_row_alone(kind, pooling):
    e = make(kind, pooling)
    got = e(PREFIX, CONT)
    assert got.shape == (4,) and got.dtype == torch.float64
    for b in range(4):
        want = reference(e, PREFIX.tokens[b, :PREFIX.lengths[b]].tolist(), CONT.tokens[b, :CONT.lengths[b]].tolist())
        torch.testing.assert_close(got[b], want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_energy_ignores_padding_whatever_its_ids(kind):
    e = make(kind)
    base = e(PREFIX, CONT)
    wider = e(Sequences(torch.cat([PREFIX.tokens, torch.full((4, 3), 5)], 1), PREFIX.lengths),
              Sequences(torch.cat([CONT.tokens, torch.full((4, 2), 3)], 1), CONT.lengths))
    torch.testing.assert_close(wider, base, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_a_fresh_energy_is_zero_and_float32_agrees_with_float64(kind):
    torch.manual_seed(0)
    fresh = HFTextEnergy.from_config(kind, 7, dim=8, layers=1, heads=2).eval()
    assert torch.equal(fresh(PREFIX, CONT), torch.zeros(4))
    e64 = make(kind)
    e32 = make(kind, dtype=torch.float32)
    torch.testing.assert_close(e32(PREFIX, CONT).double(), e64(PREFIX, CONT), rtol=0, atol=1e-4)


def test_gradients_reach_the_encoder_and_the_head():
    e = make("bert")
    e(PREFIX, CONT).sum().backward()
    assert e.head.weight.grad is not None and e.head.weight.grad.abs().sum() > 0
    emb = e.encoder.embeddings.word_embeddings.weight.grad
    assert emb is not None and emb[1].abs().sum() == 0  # the padding row is never read
    assert emb[2].abs().sum() > 0  # our id 1


def test_empty_batches_and_empty_rows():
    e = make("roberta")
    empty = Sequences.from_lists([])
    assert e(empty, empty).shape == (0,)
    both_empty = e(Sequences.from_lists([[]]), Sequences.from_lists([[]]))
    torch.testing.assert_close(both_empty[0], reference(e, [], []), rtol=0, atol=1e-12)


def test_joint_model_with_a_bert_energy_normalises_by_enumeration():
    V = 4
    g = torch.Generator().manual_seed(0)
    base = NGram(V, 2, torch.randn((V, V), generator=g, dtype=torch.float64).log_softmax(-1))
    torch.manual_seed(1)
    energy = HFTextEnergy.from_config("bert", V, dim=8, layers=1, heads=2).double()
    nn.init.normal_(energy.head.weight)
    m = ResidualLM(base, energy, horizon=2)
    prefixes = Sequences.from_lists([[1, 2], [3], []])
    joint = exact_joint_log_probs(m, prefixes)
    assert joint.shape == (3, enumerate_continuations(V, 2).batch_size)
    torch.testing.assert_close(joint.exp().sum(1), torch.ones(3, dtype=torch.float64), rtol=0, atol=1e-12)
    assert exact_log_z(m, prefixes).abs().max() > 1e-3  # the energy does reweight the base


def test_pretrained_weights_from_a_local_folder_score_the_same(tmp_path):
    e = make("roberta")
    e.encoder.save_pretrained(tmp_path)
    loaded = HFTextEnergy.from_pretrained(str(tmp_path), token_map=e.token_map, dtype=torch.float64).eval()
    loaded.head.load_state_dict(e.head.state_dict())
    torch.testing.assert_close(loaded(PREFIX, CONT), e(PREFIX, CONT), rtol=0, atol=1e-12)


def test_default_token_map_swaps_zero_and_the_models_start_id():
    from transformers import BertConfig, BertModel

    model = BertModel(BertConfig(vocab_size=20, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=16, max_position_embeddings=16), add_pooling_layer=False)
    model.config.cls_token_id = 5
    e = HFTextEnergy(model, vocab_size=10)
    assert e.token_map.tolist() == [5, 1, 2, 3, 4, 0, 6, 7, 8, 9]
    assert e.max_length == 15 and e.vocab_size == 10
    assert HFTextEnergy(model, vocab_size=4, start_id=7).token_map.tolist() == [7, 1, 2, 3]


def test_errors_name_the_argument():
    from transformers import BertConfig, BertModel

    with pytest.raises(TypeError, match="model: expected a Hugging Face encoder"):
        HFTextEnergy(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="kind: expected one of bert, roberta"):
        HFTextEnergy.from_config("gpt2", 7)
    with pytest.raises(ValueError, match="heads: expected a divisor"):
        HFTextEnergy.from_config("bert", 7, dim=9, heads=2)
    with pytest.raises(ValueError, match="pooling: expected one of mean, first"):
        HFTextEnergy.from_config("bert", 7, dim=8, heads=2, pooling="max")
    model = BertModel(BertConfig(vocab_size=8, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=16, max_position_embeddings=4), add_pooling_layer=False)
    with pytest.raises(ValueError, match="vocab_size: the model has 8 ids; got 9"):
        HFTextEnergy(model, vocab_size=9)
    with pytest.raises(ValueError, match=r"token_map: expected at least 2 ids in \[0, 7\]"):
        HFTextEnergy(model, token_map=torch.tensor([0, 8]))
    with pytest.raises(TypeError, match="token_map: expected a 1-D integer tensor"):
        HFTextEnergy(model, token_map=torch.tensor([0.0, 1.0]))
    e = HFTextEnergy(model, vocab_size=8)
    with pytest.raises(ValueError, match="<s> c x needs 5 positions; this energy covers <s> plus 3 tokens"):
        e(Sequences.from_lists([[1, 2]]), Sequences.from_lists([[3, 4]]))
    with pytest.raises(ValueError, match="x"):
        e(Sequences.from_lists([[1]]), Sequences.from_lists([[8]]))
    with pytest.raises(ValueError, match="prefix"):
        e(Sequences.from_lists([[1], [2]]), Sequences.from_lists([[3]]))


@pytest.mark.parametrize("kind", KINDS)
def test_a_masked_lm_built_from_the_config_shares_its_encoder_with_the_energy(kind):
    import transformers

    from ebms.nets.hf_text_energy import hf_encoder_config

    config, table, mask_id = hf_encoder_config(kind, 7, dim=8, layers=1, heads=2, max_length=12)
    assert mask_id == 8 and config.vocab_size == 9 and table.tolist() == [0, 2, 3, 4, 5, 6, 7]
    mlm_class = transformers.BertForMaskedLM if kind == "bert" else transformers.RobertaForMaskedLM
    torch.manual_seed(0)
    mlm = mlm_class(config)
    e = HFTextEnergy(mlm, token_map=table).eval()
    assert e.encoder is mlm.base_model and e.max_length == 12
    nn.init.normal_(e.head.weight)
    before = e(PREFIX, CONT).detach()
    ids = torch.tensor([[0, 2, mask_id, 4]])
    loss = mlm(input_ids=ids, attention_mask=torch.ones_like(ids), labels=torch.tensor([[-100, -100, 3, -100]])).loss
    loss.backward()
    with torch.no_grad():
        for q in mlm.parameters():
            if q.grad is not None:
                q -= 0.1 * q.grad
    assert not torch.allclose(e(PREFIX, CONT), before)  # pretraining the masked LM moved the energy's encoder

"""End-to-end: ``model.kind = "huggingface"``, a local pretrained causal LM on the language tasks.

A tiny GPT-2 (one layer, 16 wide, a byte-level BPE of 300 units) is saved with ``save_pretrained`` into a
temporary folder: ``ebms train`` keeps it in a run without training, ``eval`` gives its exact perplexity per
token of its own tokenizer and per word, ``ebms score`` sums to the same total and equals the model's own
log-probabilities computed with ``transformers`` directly, and the run is applied with the folder gone.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from _apply_data import tsv_rows, word_corpus  # noqa: E402

from ebms.cli.main import main  # noqa: E402
from ebms.runs import load_run  # noqa: E402
from ebms.sequences import Sequences  # noqa: E402


def save_tiny_gpt2(folder: Path, text: Path) -> None:
    """A one-layer GPT-2 and a byte-level BPE tokenizer fitted on ``text``, saved as ``save_pretrained`` does."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(text.read_text().splitlines(), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>")
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=tok.get_vocab_size(), n_positions=64, n_embd=16, n_layer=1, n_head=2,
                        bos_token_id=0, eos_token_id=0)
    GPT2LMHeadModel(config).eval().save_pretrained(folder)
    fast.save_pretrained(folder)


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hf_cli")


@pytest.fixture(scope="module")
def run(tmp: Path) -> Path:
    files = {s: word_corpus(tmp / f"{s}.txt", n, seed) for s, n, seed in (("train", 100, 0), ("valid", 10, 1),
                                                                       ("test", 12, 2))}
    save_tiny_gpt2(tmp / "gpt2", files["train"])
    args = ["train", "data.name=text", *(f"language.{s}_path={p}" for s, p in files.items()), f"run.out_dir={tmp}/runs",
            "run.progress=false", "run.name=hf", "model.kind=huggingface", f"huggingface.path={tmp / 'gpt2'}"]
    assert main(args) == 0
    return tmp / "runs" / "hf"




def _hf_log_probs(folder: Path, lines: list[str]) -> list[float]:
    """``log p(tokens, eos)`` of each line by the transformers model itself (eos fed first, as GPT-2 does)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tok = AutoModelForCausalLM.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)
    out = []
    for line in lines:
        ids = [tok.eos_token_id, *tok(" ".join(line.split()))["input_ids"], tok.eos_token_id]
        with torch.no_grad():
            logp = model(torch.tensor([ids])).logits.log_softmax(-1)[0]
        out.append(float(sum(logp[t, ids[t + 1]] for t in range(len(ids) - 1))))
    return out


def test_eval_is_per_token_and_per_word(run: Path, tmp: Path) -> None:
    fig = json.loads((run / "eval.json").read_text())["figures"]["test"]
    words = sum(len(line.split()) for line in (tmp / "test.txt").read_text().splitlines())
    assert fig["unit"] == "subword" and fig["words"] == words and fig["sentences"] == 12
    assert fig["perplexity_per_word"] == pytest.approx(math.exp(-fig["log_prob"] / (words + 12)))
    expected = sum(_hf_log_probs(tmp / "gpt2", (tmp / "test.txt").read_text().splitlines()))
    assert fig["log_prob"] == pytest.approx(expected, abs=1e-3)
    assert sorted(p.name for p in run.iterdir()) == ["checkpoints", "config.toml", "eval.json", "huggingface.json",
                                                      "tokenizer.json"]


def test_score_is_the_models_own_log_prob_and_sums_to_eval(run: Path, tmp: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["score", str(run), str(tmp / "test.txt")]) == 0
    out, err = capsys.readouterr()
    rows = tsv_rows(out)
    lines = (tmp / "test.txt").read_text().splitlines()
    assert [float(r["log_prob"]) for r in rows] == pytest.approx(_hf_log_probs(tmp / "gpt2", lines), abs=1e-4)
    fig = json.loads((run / "eval.json").read_text())["figures"]["test"]
    assert sum(float(r["log_prob"]) for r in rows) == pytest.approx(fig["log_prob"], abs=1e-3)
    assert "[huggingface: exact" in err and "per word" in err and err.count("\n") == 1


def test_the_run_is_applied_with_its_folder_gone(run: Path, tmp: Path) -> None:
    lines = ["the cat sat", "dogs jumped quickly over"]
    expected = load_run(run).score(lines)
    (tmp / "gpt2").rename(tmp / "gpt2.away")
    try:
        light, full = load_run(run, training_data=False), load_run(run)
        assert torch.equal(light.score(lines).log_prob, expected.log_prob)
        assert torch.equal(full.score(lines).log_prob, expected.log_prob)
        x = full.sample(2)
        assert len(full.data.vocab.to_text(Sequences(x, (x > 0).sum(1)))) == 2  # decoded by the stored tokenizer
    finally:
        (tmp / "gpt2.away").rename(tmp / "gpt2")


def _bad(tmp: Path, *extra: str) -> list[str]:
    return ["train", "data.name=text", f"language.train_path={tmp / 'train.txt'}", f"run.out_dir={tmp}/bad",
            "run.progress=false", "model.kind=huggingface", "--no-eval", *extra]


def test_bad_inputs_are_one_line(run: Path, tmp: Path, capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import BertConfig, BertModel

    BertModel(BertConfig(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=8)).save_pretrained(tmp / "bert")
    cases = [((), "huggingface.path: expected the folder of a pretrained causal LM"),
             ((f"huggingface.path={tmp / 'none'}",), "none': not found; expected the folder"),
             ((f"huggingface.path={tmp / 'train.txt'}",), "a file, not a folder"),
             ((f"huggingface.path={tmp / 'bert'}",), "its architecture BertModel is not a causal LM"),
             ((f"huggingface.path={tmp / 'gpt2'}", "language.level=char"), "language.level: model.kind='huggingface'"),
             ((f"huggingface.path={tmp / 'gpt2'}", "language.min_count=2"), "language.min_count: model.kind="),
             (("huggingface.path=x", "model.kind=lstm"), "huggingface.path: ")]
    for extra, expect in cases:
        capsys.readouterr()
        assert main(_bad(tmp, *extra)) == 2, extra
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and expect in err, (extra, err)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "transformers" else real(name, *a))
    assert main(_bad(tmp, f"huggingface.path={tmp / 'gpt2'}")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'ebms[text]'" in err

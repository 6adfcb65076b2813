"""The language task's pieces: its config section, data loading, training batches, recipes and reports."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from ebms.cli._language_data import load_language_data
from ebms.cli._language_eval import normalised_report
from ebms.cli.build import validate_config
from ebms.cli.config import ConfigError, load_config
from ebms.cli.language import LanguageSettings, LanguageTask
from ebms.cli.main import recipe_path
from ebms.cli.tasks import task_for
from ebms.data.text import length_windows, unigram_probs
from ebms.models.lm import perplexity
from ebms.sequences import Sequences

RECIPES = ("kn5-ptb", "lstm-ptb", "char-lstm-shakespeare", "trf-ptb", "trf-nce-ptb")


def _files(tmp_path: Path) -> list[str]:
    (tmp_path / "train.txt").write_text("a b c\na b\nb c d e f\na\n\nc a b\n")
    (tmp_path / "test.txt").write_text("a z\nb\n")
    return ["data.name=text", f"language.train_path={tmp_path}/train.txt", f"language.test_path={tmp_path}/test.txt"]


@pytest.mark.parametrize("recipe", RECIPES)
def test_recipes_are_valid_language_configs(recipe: str) -> None:
    cfg = validate_config(load_config(recipe_path(recipe)), device=False)
    task = task_for(cfg)
    assert isinstance(task, LanguageTask) and cfg.data.name in ("ptb", "tiny-shakespeare")
    assert task.fitted(cfg) == (recipe == "kn5-ptb")
    assert cfg.run.name == recipe


def test_data_name_alone_brings_the_task_defaults() -> None:
    cfg = load_config(None, ["data.name=ptb"])
    assert (cfg.model.kind, cfg.objective.kind) == ("kn", "ml")
    assert cfg.eval.n_samples == 10  # ebms sample prints ten sentences by default
    assert cfg.section("language") == LanguageSettings()


def test_paths_are_stored_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = load_config(None, ["data.name=text", "language.train_path=train.txt"])
    s = cfg.section("language")
    assert s.train_path == str(tmp_path / "train.txt") and s.test_path is None


def test_load_builds_the_vocabulary_on_training_sentences_and_drops_long_ones(tmp_path: Path) -> None:
    cfg = validate_config(load_config(None, [*_files(tmp_path), "language.max_length=3"]), device=False)
    data = load_language_data(cfg)
    assert data.vocab.tokens[:5] == ("</s>", "<unk>", "a", "b", "c")  # by training count, ties by string
    assert data.size == 4 and data.dropped == 1 and data.max_length == 3  # "b c d e f" is longer than 3
    assert "z" not in data.vocab and data.vocab.to_text(data.held_out["test"]) == ["a <unk>", "b"]
    assert set(data.held_out) == {"test"}


def test_max_length_defaults_to_the_longest_training_sentence(tmp_path: Path) -> None:
    cfg = validate_config(load_config(None, _files(tmp_path)), device=False)
    assert load_language_data(cfg).max_length == 5


def test_n_test_keeps_the_first_test_sentences(tmp_path: Path) -> None:
    cfg = validate_config(load_config(None, [*_files(tmp_path), "data.n_test=1"]), device=False)
    assert load_language_data(cfg).held_out["test"].batch_size == 1


def test_char_level_tokens_are_characters_with_spaces(tmp_path: Path) -> None:
    cfg = validate_config(load_config(None, [*_files(tmp_path), "language.level=char"]), device=False)
    data = load_language_data(cfg)
    assert " " in data.vocab and data.vocab.to_text(data.train[:1]) == ["a b c"]


def test_length_windows_hold_sentences_of_similar_length_cut_to_the_longest() -> None:
    lengths = torch.tensor([5, 1, 3, 2, 5, 4, 1, 2, 3, 4, 2, 2])
    x = Sequences(torch.arange(1, 61).view(12, 5), lengths).canonical()  # distinct first tokens
    draw = length_windows(x, seed=0)
    g = torch.Generator().manual_seed(1)
    seen = torch.zeros(12)
    for _ in range(3000):
        tokens, lens = draw(4, g)
        assert tokens.shape == (4, int(lens.max()))
        # a window of consecutive sentences in length order (one wrap from the longest to the shortest)
        assert int((lens[1:] < lens[:-1]).sum()) <= 1
        rows = [int(torch.nonzero((x.tokens[:, :tokens.shape[1]] == t).all(1) & (x.lengths == n))[0])
                for t, n in zip(tokens, lens)]
        seen[rows] += 1
    # each sentence is in a window with probability 4/12: binomial(3000, 1/3) counts, 4 standard errors
    se = math.sqrt(3000 * (1 / 3) * (2 / 3))
    assert (seen - 1000).abs().max() <= 4 * se


def test_length_windows_repeat_with_the_generator_state() -> None:
    x = Sequences(torch.randint(1, 9, (30, 6), generator=torch.Generator().manual_seed(0)),
                  torch.randint(1, 7, (30,), generator=torch.Generator().manual_seed(1))).canonical()
    draw = length_windows(x, seed=3)
    a, b = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    for _ in range(5):
        (ta, la), (tb, lb) = draw(8, a), draw(8, b)
        assert torch.equal(ta, tb) and torch.equal(la, lb)


def test_unigram_proposal_never_proposes_the_boundary(tmp_path: Path) -> None:
    data = load_language_data(validate_config(load_config(None, _files(tmp_path)), device=False))
    q = unigram_probs(data.train, len(data.vocab))
    assert q[0] == 0 and float(q.sum()) == pytest.approx(1.0) and bool((q[1:] > 0).all())
    assert float(q[2]) > float(q[1])  # "a" (4 times) above <unk> (never seen in training)


def test_normalised_report_is_the_exact_perplexity(tmp_path: Path) -> None:
    cfg = validate_config(load_config(None, [*_files(tmp_path), "model.kind=kn", "language.smoothing=witten_bell",
                                             "language.order=2"]), device=False)
    task = task_for(cfg)
    data = task.load(cfg)
    model = task.build_model(cfg, data)
    report = normalised_report(cfg, model, data, step=0)
    test = data.held_out["test"]
    direct = perplexity(model, [test])
    assert report.figures["test"]["perplexity"] == pytest.approx(direct.perplexity)
    assert report.figures["test"]["tokens"] == 3 + 2  # 3 tokens and 2 </s>
    assert report.lines()[0].startswith("test perplexity, step 0: ")


def test_sample_text_decodes_padded_ids(tmp_path: Path) -> None:
    cfg = validate_config(load_config(None, _files(tmp_path)), device=False)
    task = task_for(cfg)
    data = task.load(cfg)
    ids = torch.tensor([[2, 3, 0], [4, 1, 2]])
    assert task.sample_text(ids, data) == ["a b", "c <unk> a"]


def test_check_runs_before_any_file_is_read(tmp_path: Path) -> None:
    cfg = load_config(None, ["data.name=text", f"language.train_path={tmp_path}/absent.txt", "model.kind=lstm",
                             "objective.kind=dnce"])
    with pytest.raises(ConfigError, match="objective.kind: 'dnce' trains a TRF"):
        validate_config(cfg, device=False)


def test_dnce_noise_starts_at_the_unigram_so_its_draws_end(tmp_path: Path) -> None:
    """A zero output bias over 2,000 ids would give </s> probability 1/2000 per token (draws of
    about 2,000 tokens); the noise starts at the training unigram instead, </s> included."""
    words = [f"w{i}" for i in range(2000)]
    g = torch.Generator().manual_seed(0)
    lines = [" ".join(words[int(i)] for i in torch.randint(0, 2000, (int(n),), generator=g))
             for n in torch.randint(1, 9, (800,), generator=g)]
    (tmp_path / "train.txt").write_text("\n".join(lines) + "\n")
    cfg = validate_config(load_config(None, ["data.name=text", f"language.train_path={tmp_path}/train.txt",
                                             "model.kind=trf-cnn", "objective.kind=dnce", "language.noise_hidden=8"]),
                          device=False)
    task = task_for(cfg)
    data = task.load(cfg)
    noise = task.build_objective(cfg, data).noise.eval()
    with torch.no_grad():
        end = noise.token_log_probs(Sequences.from_lists([[2]]))[0, 1].exp()
    rate = data.size / (int(data.train.lengths.sum()) + data.size)  # sentences per token, </s> counted
    assert float(end) == pytest.approx(rate, rel=0.5)
    draws = noise.sample(50, generator=torch.Generator().manual_seed(1), max_length=200)
    assert int(draws.lengths.max()) < 200


def test_feature_scaling_builds_scaled_sgd_with_the_training_variances(tmp_path: Path) -> None:
    from ebms.models.trf import feature_moments
    from ebms.train import ScaledSGD

    cfg = validate_config(load_config(None, [*_files(tmp_path), "model.kind=trf", "train.optimizer=sgd",
                                             "train.lr=0.1", "train.weight_decay=0.01", "language.feature_scaling=true",
                                             "language.step_clip=0.5"]), device=False)
    task = task_for(cfg)
    data = task.load(cfg)
    model = task.build_model(cfg, data)
    make = task.build_optimizer(cfg, data)
    assert make is not None
    opt = make([{"params": list(model.parameters())}])
    assert isinstance(opt, ScaledSGD) and opt.defaults == {"lr": 0.1, "l2": 0.01, "clip": 0.5}
    # one step on a known gradient is the source's: -lr clip((g + l2 w) / (v + l2), +-clip)
    _, var = feature_moments(model.field, data.train)
    w = model.field.weight
    g = torch.linspace(-1.0, 1.0, w.numel(), dtype=w.dtype)
    w.grad = g.clone()
    opt.step()
    want = -0.1 * ((g.double() / (var + 0.01)).clamp(-0.5, 0.5))
    torch.testing.assert_close(w.detach().double(), want, rtol=1e-6, atol=1e-7)
    plain = validate_config(load_config(None, [*_files(tmp_path), "model.kind=trf"]), device=False)
    assert task.build_optimizer(plain, task.load(plain)) is None  # train.optimizer decides

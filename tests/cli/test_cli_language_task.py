"""The language task's pieces: its config section, data loading, training batches, recipes and reports;
the settings a run would ignore, Kneser-Ney's discounts and the default length bound (issue 23)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from ebms.cli._language_data import load_language_data
from ebms.cli._language_eval import normalised_report
from ebms.cli.build import validate_config
from ebms.cli.config import Config, ConfigError, load_config
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
    cfg = validate_config(load_config(None, [*_files(tmp_path), "model.kind=kn", "ngram.smoothing=witten_bell",
                                             "ngram.order=2"]), device=False)
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
                                             "model.kind=trf-cnn", "objective.kind=dnce", "trf.noise_hidden=8"]),
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


def test_kn_start_sets_the_word_ngram_weights_of_the_configured_backoff_lm_and_its_zeta(tmp_path: Path) -> None:
    from ebms.distributions import BackoffNGram
    from ebms.models.trf import exact_log_z, ngram_weights

    # min_count 2: d, e, f become <unk>, so every id is seen in training (an unseen id has no unigram
    # feature, and the started TRF is not the LM there)
    over = [*_files(tmp_path), "model.kind=trf", "trf.order=2", "language.max_length=5", "language.min_count=2"]
    plain = validate_config(load_config(None, over), device=False)
    task = task_for(plain)
    zero = task.build_model(plain, task.load(plain))
    assert not bool(zero.field.weight.any())  # the default: the source's zero start
    cfg = validate_config(load_config(None, [*over, "trf.trf_init=kn", "ngram.smoothing=witten_bell"]),
                          device=False)
    data = task.load(cfg)
    model = task.build_model(cfg, data)
    V = len(data.vocab)
    lm = BackoffNGram.fit(data.train, V, order=2, smoothing="witten_bell")
    want, n = ngram_weights(model.field, lm)
    assert n > 0 and torch.equal(model.field.weight.detach(), want)
    exact = exact_log_z(model, V, 5)  # 5 ids, lengths 1..5: enumerable
    # zeta from 100 draws per length of the LM given the length: near the started model's exact log Z_l
    torch.testing.assert_close(model.log_z.detach().double(), exact.double(), rtol=0, atol=0.1)
    assert float((exact.double() - zero.log_z.detach().double()).abs().max()) > 0.5  # it did move zeta
    data.stored = {"format": "loaded from a run"}  # eval, sample, resume: the checkpoint replaces the start
    assert not bool(task.build_model(cfg, data).field.weight.any())


def test_feature_scaling_builds_scaled_sgd_with_the_training_variances(tmp_path: Path) -> None:
    from ebms.models.trf import feature_moments
    from ebms.train import ScaledSGD

    cfg = validate_config(load_config(None, [*_files(tmp_path), "model.kind=trf", "train.optimizer=sgd",
                                             "train.lr=0.1", "train.weight_decay=0.01", "trf.feature_scaling=true",
                                             "trf.step_clip=0.5"]), device=False)
    task = task_for(cfg)
    data = task.load(cfg)
    model = task.build_model(cfg, data)
    make = task.build_optimizer(cfg, data)
    assert make is not None
    opt = make([{"params": list(model.parameters())}])
    assert isinstance(opt, ScaledSGD) and opt.defaults == {"lr": 0.1, "l2": 0.01, "clip": 0.5}
    # one step on a known gradient is the source's: -clip(lr (g + l2 w) / (v + l2), +-clip)
    _, var = feature_moments(model.field, data.train)
    w = model.field.weight
    g = torch.linspace(-1.0, 1.0, w.numel(), dtype=w.dtype)
    w.grad = g.clone()
    opt.step()
    want = -(0.1 * g.double() / (var + 0.01)).clamp(-0.5, 0.5)
    torch.testing.assert_close(w.detach().double(), want, rtol=1e-6, atol=1e-7)
    objective = task.build_objective(cfg, data)  # the data term is the whole training set's feature means
    mean, _ = feature_moments(model.field, data.train)
    assert objective.data_mean is not None and torch.equal(objective.data_mean, mean)
    plain = validate_config(load_config(None, [*_files(tmp_path), "model.kind=trf"]), device=False)
    assert task.build_optimizer(plain, task.load(plain)) is None  # train.optimizer decides
    plain_data = task.load(plain)
    task.build_model(plain, plain_data)
    assert task.build_objective(plain, plain_data).data_mean is None  # without feature_scaling: the batch's


# -- issue 23: settings that were accepted without a word, discounts, the length bound, the stored vocabulary ----
def _cfg(tmp_path: Path, *extra: str):
    return load_config(None, [*_files(tmp_path), *extra])


@pytest.mark.parametrize(("extra", "message"), [
    (("model.kind=lstm", "residual.base_run=runs/base"),
     "residual.base_run: the [residual] section is read by data.name = ptb, text, tiny-shakespeare with model.kind = "
     "residual; this run has data.name='text'"),
    (("model.kind=lstm", "objective.kind=earm", "train.steps=100", "lm.earm_start=100"),
     "lm.earm_start: E-ARM is switched on after 100 steps but the run stops at train.steps=100, so it would "
     "never start"),
    (("model.kind=lstm", "ngram.smoothing=witten_bell"),
     "ngram.smoothing: the [ngram] section is read by data.name = ptb, text, tiny-shakespeare with model.kind = kn, "
     "trf, trf-cnn, trf-bilstm; this run has data.name='text'"),
    (("model.kind=residual", "objective.kind=nce", "lm.hidden=16"), "residual.base_run: a residual model"),
    (("model.kind=electric", "objective.kind=nce", "lm.hidden=16"),
     "lm.hidden: the [lm] section is read by data.name = ptb, text, tiny-shakespeare with model.kind = lstm, "
     "transformer; this run has data.name='text'"),
    (("model.kind=trf", "ngram.order=4"), "ngram.order: model.kind='trf' with objective.kind='ml' does not read it, "
                                          "so ngram.order=4 would be ignored; it is read with model.kind = kn: drop it"),
    (("model.kind=trf-cnn", "trf.classes=5"), "trf.classes: model.kind='trf-cnn' with objective.kind='ml' "
                                                   "does not read it"),
    (("model.kind=trf", "trf.noise_hidden=8"), "trf.noise_hidden: model.kind='trf' with objective.kind='ml' "
                                                    "does not read it"),
    (("model.kind=trf", "trf.step_clip=0.5"), "trf.step_clip: model.kind='trf' with objective.kind='ml' does "
                                                   "not read it, so trf.step_clip=0.5 would be ignored; it is "
                                                   "read with trf.feature_scaling = true: drop it"),
    (("model.kind=lstm", "lm.earm_weight=0.5"), "lm.earm_weight: model.kind='lstm' with objective.kind="
                                                      "'ml' does not read it"),
    (("model.kind=transformer", "trf.chains=4"), "trf.chains: the [trf] section is read by data.name = ptb, text, "
                                                 "tiny-shakespeare with model.kind = trf, trf-cnn, trf-bilstm"),
    (("model.kind=kn", "ngram.discounts=[0.5, 0.5]"),
     "ngram.discounts: expected one discount per order or three (D1, D2, D3+) per order, lowest order first: 3 or "
     "9 values for ngram.order=3; got 2"),
    (("model.kind=kn", "ngram.smoothing=witten_bell", "ngram.discounts=[0.5, 0.5, 0.5]"),
     "ngram.discounts: only Kneser-Ney smoothing takes discounts"),
    (("model.kind=kn", "ngram.smoothing=kneser_ney", "ngram.discounts=[0.5, 1, 1.5, 0.5, 1, 1.5, 0.5, 1, 1.5]"),
     "ngram.discounts: expected one discount per order, lowest order first: 3 values"),
    (("model.kind=lstm", "ngram.discounts=[0.5, 0.5, 0.5]"), "ngram.discounts: the [ngram] section is read by"),
])
def test_settings_the_run_would_ignore_are_refused_naming_the_key(tmp_path: Path, extra: tuple[str, ...],
                                                                  message: str) -> None:
    cfg = _cfg(tmp_path, *extra)
    with pytest.raises(ConfigError) as err:
        validate_config(cfg, device=False)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


@pytest.mark.parametrize("extra", [
    ("model.kind=kn", "ngram.discounts=[0.5, 0.5, 0.5]"),
    ("model.kind=trf", "objective.kind=nce", "trf.noise_order=1", "ngram.discounts=[0.4]"),
    ("model.kind=trf", "train.optimizer=sgd", "trf.feature_scaling=true", "trf.step_clip=0.5"),
    ("model.kind=lstm", "objective.kind=earm", "train.steps=100", "lm.earm_start=99"),
])
def test_settings_the_run_reads_are_accepted(tmp_path: Path, extra: tuple[str, ...]) -> None:
    validate_config(_cfg(tmp_path, *extra), device=False)


def reads(cfg: Config) -> set[str]:
    """The dotted keys the kind of ``cfg`` reads."""
    return task_for(cfg).reads(cfg)  # type: ignore[union-attr]


def test_a_residual_run_reads_heads_only_with_a_transformer_energy(tmp_path: Path) -> None:
    residual = ("model.kind=residual", "objective.kind=nce")
    assert "residual.heads" in reads(_cfg(tmp_path, *residual, "residual.energy=transformer"))
    assert "residual.heads" not in reads(_cfg(tmp_path, *residual))
    assert not any(k.endswith(".hidden") for k in reads(_cfg(tmp_path, *residual)))


def test_classes_above_the_vocabulary_are_refused_before_clustering(tmp_path: Path) -> None:
    """100,000 classes on a 9-id vocabulary used to reach exchange clustering (74.5 GiB for a C x C table)."""
    cfg = validate_config(_cfg(tmp_path, "model.kind=trf", "trf.classes=100000"), device=False)
    with pytest.raises(ConfigError, match=r"^trf.classes: exchange clustering sorts the vocabulary's 7 token ids "
                                          r"\(<unk> and the 6 kept tokens\) into classes; expected at most 7; got 100000$"):
        task_for(cfg).load(cfg)
    ok = validate_config(_cfg(tmp_path, "model.kind=trf", "trf.classes=7"), device=False)
    assert task_for(ok).load(ok).vocab.tokens[0] == "</s>"


def test_a_vocabulary_of_nothing_but_unk_is_refused(tmp_path: Path) -> None:
    cfg = validate_config(_cfg(tmp_path, "model.kind=lstm", "language.min_count=50"), device=False)
    with pytest.raises(ConfigError, match=r"^language.min_count: no training token is kept \(language.min_count=50"):
        load_language_data(cfg)
    cfg = validate_config(_cfg(tmp_path, "model.kind=lstm", "language.max_vocab=2"), device=False)
    with pytest.raises(ConfigError, match=r"^language.max_vocab: no training token is kept"):
        load_language_data(cfg)


def test_kn_discounts_go_to_the_backoff_model(tmp_path: Path) -> None:
    for given, used in (("[0.3, 0.6, 0.9]", [[0.3] * 3, [0.6] * 3, [0.9] * 3]),
                        ("[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]", [[0.1, 0.2, 0.3], [0.4, 0.5, 0.6],
                                                                          [0.7, 0.8, 0.9]])):
        cfg = validate_config(_cfg(tmp_path, "model.kind=kn", f"ngram.discounts={given}"), device=False)
        task = task_for(cfg)
        model = task.build_model(cfg, task.load(cfg))
        assert model.discounts == used


def test_a_discount_out_of_range_names_the_key(tmp_path: Path) -> None:
    cfg = validate_config(_cfg(tmp_path, "model.kind=kn", "ngram.discounts=[0.5, 1.5, 0.5]"), device=False)
    task = task_for(cfg)
    with pytest.raises(ConfigError, match=r"^ngram.discounts: D1 must be in \[0, 1\].*\(entry 1, order 1 first\)$"):
        task.build_model(cfg, task.load(cfg))


def test_modified_kn_on_a_small_vocabulary_asks_for_discounts_not_a_lower_order(tmp_path: Path) -> None:
    """35 word types, each after many others: no type has a continuation count of 1, 2 or 3, so the
    discounts of order 1 cannot be estimated and no lower ngram.order can help."""
    words = [f"w{i}" for i in range(35)]
    g = torch.Generator().manual_seed(0)
    lines = [" ".join(words[int(i)] for i in torch.randint(0, 35, (int(n),), generator=g))
             for n in torch.randint(3, 12, (300,), generator=g)]
    (tmp_path / "train.txt").write_text("\n".join(lines) + "\n")
    cfg = validate_config(load_config(None, ["data.name=text", f"language.train_path={tmp_path}/train.txt",
                                             "model.kind=kn"]), device=False)
    task = task_for(cfg)
    data = task.load(cfg)
    with pytest.raises(ConfigError) as err:
        task.build_model(cfg, data)
    msg = str(err.value)
    assert msg.startswith("ngram.smoothing: 'modified_kneser_ney' cannot estimate its discounts at order 1")
    assert "set ngram.discounts=[0.5, 1, 1.5, 0.5, 1, 1.5, 0.5, 1, 1.5]" in msg and "ngram.order" not in msg
    fixed = validate_config(load_config(None, ["data.name=text", f"language.train_path={tmp_path}/train.txt",
                                               "model.kind=kn", "ngram.discounts=[0.5, 1, 1.5, 0.5, 1, 1.5, 0.5, 1, "
                                               "1.5]"]), device=False)
    assert task.build_model(fixed, task.load(fixed)).discounts == [[0.5, 1.0, 1.5]] * 3


@pytest.mark.parametrize("kind", ["transformer", "lstm", "trf", "electric"])
def test_an_unset_max_length_is_bounded_for_kinds_that_grow_with_it(tmp_path: Path, kind: str) -> None:
    from ebms.cli._language_data import DEFAULT_MAX_LENGTH

    (tmp_path / "train.txt").write_text("a b\n" + " ".join(["a"] * (DEFAULT_MAX_LENGTH + 1)) + "\nb a\n")
    extra = ("objective.kind=nce",) if kind == "electric" else ()
    cfg = validate_config(load_config(None, ["data.name=text", f"language.train_path={tmp_path}/train.txt",
                                             f"model.kind={kind}", *extra]), device=False)
    with pytest.raises(ConfigError, match=rf"^language.max_length: unset, it would be the longest training sentence, "
                                          rf"{DEFAULT_MAX_LENGTH + 1} tokens, above the default bound of "
                                          rf"{DEFAULT_MAX_LENGTH} for model.kind='{kind}'"):
        load_language_data(cfg)
    set_ = validate_config(load_config(None, ["data.name=text", f"language.train_path={tmp_path}/train.txt",
                                              f"model.kind={kind}", "language.max_length=5", *extra]), device=False)
    data = load_language_data(set_)
    assert data.max_length == 5 and data.size == 2 and data.dropped == 1
    kn = validate_config(load_config(None, ["data.name=text", f"language.train_path={tmp_path}/train.txt",
                                            "model.kind=kn"]), device=False)
    assert load_language_data(kn).max_length == DEFAULT_MAX_LENGTH + 1  # counting has no such cost


@pytest.mark.parametrize("clip", [None, 0.5])
def test_earm_keys_reach_the_objective(clip: float | None) -> None:
    from ebms.cli.generation import GenerationTask
    from ebms.cli.language import autoregressive_objective
    from ebms.objectives import EARM

    extra = [] if clip is None else [f"lm.earm_clip={clip}"]
    cfg = validate_config(load_config(recipe_path("earm-shakespeare"), extra), device=False)
    objective = autoregressive_objective(cfg.objective.kind, cfg.section("lm"))
    assert isinstance(objective, EARM) and objective.clip == clip
    assert (objective.weight, objective.start_step, objective.truncate) == (0.03, 4000, 2)
    add = validate_config(load_config(recipe_path("earm-addition"), [] if clip is None else
                                      [f"generation.earm_clip={clip}"]), device=False)
    assert isinstance(task_for(add), GenerationTask)
    assert autoregressive_objective(add.objective.kind, add.section("generation")).clip == clip


def test_electric_scores_long_splits_in_chunks_with_the_same_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    """PTB's test split scored at once needed a (3761, 82, 10000) table (~12 GB): the OOM of an electric eval."""
    from ebms.cli import _generation_text as gt
    from ebms.sequences import Sequences

    x = Sequences.from_lists([[1, 2, 3], [4], [2, 2, 2, 2], [5, 1], [3]])
    seen: list[int] = []

    def score(r: Sequences) -> torch.Tensor:
        seen.append(r.batch_size)
        return r.tokens.sum(1).double() + r.lengths.double() / 10

    whole = score(x)
    seen.clear()
    monkeypatch.setattr(gt, "CHUNK_ELEMENTS", 4 * 6 * 2)  # width 4, V 6: two rows per chunk
    got = gt._by_chunks(score, x, 6)
    assert seen == [2, 2, 1] and torch.equal(got, whole)
    assert gt._by_chunks(score, x[:0], 6).shape == (0,)

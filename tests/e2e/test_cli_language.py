"""End-to-end: language models on the command line (``ebms.cli.language``).

The packaged recipes run with small overrides on tiny text files written into ``tmp_path`` (a
few steps each); ``eval`` prints perplexity (exact for the normalised models, training and
re-estimated normalisers for a TRF), ``sample`` prints sentences, a resumed run equals an
uninterrupted one, and, where PTB is installed, ``kn5-ptb`` gives the published KN5 figure.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import torch

from ebms.cli.main import main
from ebms.data.paths import DATA_ENV_VAR, data_root
from ebms.data.text import Vocabulary, read_sentences
from ebms.distributions import BackoffNGram

WORDS = ("the", "cat", "dog", "sat", "ran")


def _corpus(path: Path, n: int, seed: int) -> Path:
    """``n`` sentences of 1..5 words from :data:`WORDS`, a few patterns more frequent than others."""
    r = random.Random(seed)
    lines = []
    for _ in range(n):
        if r.random() < 0.5:
            lines.append(r.choice(["the cat sat", "the dog ran", "the cat ran"]))
        else:
            lines.append(" ".join(r.choice(WORDS) for _ in range(r.randint(1, 5))))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture()
def text(tmp_path: Path) -> list[str]:
    """Overrides that put a recipe on tiny text files (train 200, valid 20, test 20 sentences)."""
    files = {split: _corpus(tmp_path / f"{split}.txt", n, seed)
             for split, n, seed in (("train", 200, 0), ("valid", 20, 1), ("test", 20, 2))}
    return ["data.name=text", *(f"language.{s}_path={p}" for s, p in files.items()), f"run.out_dir={tmp_path}/runs",
            "run.progress=false", "train.steps=4", "train.batch_size=8", "train.log_every=2", "train.checkpoint_every=2"]


SMALL = {
    "kn5-ptb": ["ngram.smoothing=witten_bell"],
    "lstm-ptb": ["lm.embedding_dim=8", "lm.hidden=8"],
    "char-lstm-shakespeare": ["lm.embedding_dim=4", "lm.hidden=8"],
    "trf-ptb": ["trf.classes=2", "trf.chains=8", "trf.logz_samples=200"],
    "trf-nce-ptb": ["trf.embedding_dim=8", "trf.hidden=8", "trf.noise_hidden=8",
                    "trf.logz_samples=200"],
}


def _eval(run: Path) -> dict:
    return json.loads((run / "eval.json").read_text())


@pytest.mark.parametrize("recipe", sorted(SMALL))
def test_recipe_trains_evaluates_and_samples_on_tiny_text(recipe: str, text: list[str], tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "runs" / recipe
    assert main(["train", recipe, *text, *SMALL[recipe]]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    report = _eval(run)
    if recipe.startswith("trf"):
        test = report["figures"]["test"]
        assert test["sentences"] == 20 and math.isfinite(test["training_zeta"]["perplexity"])
        lo, hi = test["reestimated"]["interval95"]
        assert 1.0 < lo <= test["reestimated"]["perplexity"] <= hi
        assert "training zeta" in out and "re-estimated log Z_l (importance)" in out
        assert "exact" in test  # 6 token ids (5 words and <unk>), lengths 1..5: 9330 sentences, enumerated
    else:
        for split in ("valid", "test"):
            fig = report["figures"][split]
            assert fig["sentences"] == 20 and 1.0 < fig["perplexity"] < 100.0
        assert "test perplexity, step" in out and "exact;" in out
    assert main(["sample", str(run), "--n", "3", "--steps", "2", "--seed", "5"]) == 0, capsys.readouterr().err
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 4 and lines[-1].startswith("wrote ")
    vocabulary = set(WORDS) | {"<unk>"} if "char" not in recipe else set("".join(WORDS) + " ") | {"<unk>"}
    for sentence in lines[:3]:
        pieces = sentence.split() if "char" not in recipe else [c for c in sentence.replace("<unk>", "")]
        assert set(pieces) <= vocabulary, sentence
    assert (run / "samples-n3-steps2-seed5.txt").read_text().splitlines() == lines[:3]


def test_kn_run_leaves_an_arpa_file_that_scores_the_test_set_like_eval(text: list[str], tmp_path: Path) -> None:
    assert main(["train", "kn5-ptb", *text, "ngram.smoothing=witten_bell", "ngram.order=3"]) == 0
    run = tmp_path / "runs" / "kn5-ptb"
    assert not (run / "metrics.jsonl").exists()  # fitted by counting: no optimizer steps
    vocab = Vocabulary.load(run / "vocab.txt")
    lm = BackoffNGram.from_arpa(run / "model.arpa", vocab.tokens)
    test = vocab.encode(read_sentences(tmp_path / "test.txt"))
    tokens = int(test.lengths.sum()) + test.batch_size
    ppl = math.exp(-float(lm.log_prob(test).sum()) / tokens)
    assert _eval(run)["figures"]["test"]["perplexity"] == pytest.approx(ppl, rel=1e-5)  # ARPA keeps 7 digits


def test_resumed_lstm_run_equals_the_uninterrupted_one(text: list[str], tmp_path: Path) -> None:
    args = ["train", "lstm-ptb", *text, *SMALL["lstm-ptb"], "lm.dropout=0.3", "train.lr_schedule=constant", "--no-eval"]
    assert main([*args, "run.name=whole", "train.steps=6"]) == 0
    assert main([*args, "run.name=split", "train.steps=3"]) == 0
    assert main([*args, "run.name=split", "train.steps=6", "--resume"]) == 0
    for name in ("whole", "split"):
        assert main(["eval", "--run", str(tmp_path / "runs" / name)]) == 0
    whole, split = (_eval(tmp_path / "runs" / n)["figures"]["test"]["perplexity"] for n in ("whole", "split"))
    assert _eval(tmp_path / "runs" / "split")["step"] == 6
    assert whole == split  # batches come from the checkpointed generator, dropout from the checkpointed RNG
    # (a constant rate: the cosine schedule of the recipe depends on train.steps, which the resume raises)


def test_trf_reestimated_normalisers_agree_with_enumeration(text: list[str], tmp_path: Path) -> None:
    """On 6 ids and lengths up to 5 every log Z_l is enumerable: the importance estimate of the
    perplexity must be within 4 of its standard errors of the exact one (z = 4)."""
    args = ["train", "trf-ptb", *text, *SMALL["trf-ptb"], "train.steps=20", "trf.logz_samples=2000"]
    assert main(args) == 0
    test = _eval(tmp_path / "runs" / "trf-ptb")["figures"]["test"]
    re, exact = test["reestimated"], test["exact"]
    assert exact["exact"] and not re["exact"]
    se_log = re["stderr"] / re["perplexity"]
    assert abs(math.log(re["perplexity"]) - math.log(exact["perplexity"])) <= 4 * se_log + 1e-9


def test_trf_eval_with_ais_and_a_positional_run_folder(text: list[str], tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "trf-nce-ptb", *text, *SMALL["trf-nce-ptb"], "--no-eval"]) == 0
    run = tmp_path / "runs" / "trf-nce-ptb"
    capsys.readouterr()
    assert main(["eval", str(run), "--ais", "eval.ais_chains=16", "eval.ais_temperatures=10"]) == 0
    out = capsys.readouterr().out
    assert "by AIS, 16 chains x 10 steps per length" in out and "re-estimated log Z_l (ais)" in out
    assert _eval(run)["figures"]["test"]["reestimated"]["label"] == "re-estimated log Z_l (ais)"


def test_running_text_is_split_into_sentences(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    story = "The cat sat. The dog ran! Did the cat run? The dog sat.\n" * 20
    (tmp_path / "story.txt").write_text(story)
    args = ["train", "data.name=text", f"language.train_path={tmp_path}/story.txt", f"language.test_path={tmp_path}/story.txt",
            "language.sentence_split=true", "language.lower=true", "model.kind=kn", "ngram.smoothing=witten_bell",
            f"run.out_dir={tmp_path}", "run.name=story"]
    assert main(args) == 0, capsys.readouterr().err
    fig = _eval(tmp_path / "story")["figures"]["test"]
    assert fig["sentences"] == 80 and fig["tokens"] == 20 * (3 + 3 + 4 + 3 + 4)  # words and one </s> each
    vocab = Vocabulary.load(tmp_path / "story" / "vocab.txt")
    assert vocab.tokens[2:] == ("the", "cat", "dog", "sat.", "did", "ran!", "run?")  # by count, ties by string


@pytest.mark.slow  # PTB counted and written as ARPA: ~5 s
def test_kn5_ptb_recipe_gives_the_published_perplexity(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if not (data_root() / "ptb" / "ptb.train.txt").is_file():
        pytest.skip(f"PTB absent: set {DATA_ENV_VAR} to the folder holding ptb/ptb.train.txt")
    torch.set_num_threads(1)
    assert main(["train", "kn5-ptb", f"run.out_dir={tmp_path}"]) == 0
    out = capsys.readouterr().out
    test = _eval(tmp_path / "kn5-ptb")["figures"]["test"]
    assert test["tokens"] == 82430 and test["sentences"] == 3761
    assert test["perplexity"] == pytest.approx(141.2, rel=0.01)  # Mikolov et al. (2011): KN5 141.2
    assert "test perplexity, step 0: 141.19" in out
    assert (tmp_path / "kn5-ptb" / "model.arpa").stat().st_size > 50_000_000


# -- issue 23 ----------------------------------------------------------------------------------------------
def test_a_character_kn_run_on_text_with_spaces_writes_its_arpa_file_and_checkpoint(
        text: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The space is a token of a character model; ARPA separates words by whitespace, so the file
    names it ``<U+0020>`` and reads it back as the space (the old run died writing it, with no checkpoint)."""
    run = tmp_path / "runs" / "kc"
    assert main(["train", *text, "model.kind=kn", "language.level=char", "ngram.smoothing=witten_bell",
                 "run.name=kc"]) == 0, capsys.readouterr().err
    assert (run / "checkpoints").is_dir() and "\t<U+0020>\t" in (run / "model.arpa").read_text()
    vocab = Vocabulary.load(run / "vocab.txt")
    assert " " in vocab.tokens
    lm = BackoffNGram.from_arpa(run / "model.arpa", vocab.tokens)
    test = vocab.encode(read_sentences(tmp_path / "test.txt", level="char"))
    ppl = math.exp(-float(lm.log_prob(test).sum()) / (int(test.lengths.sum()) + test.batch_size))
    assert _eval(run)["figures"]["test"]["perplexity"] == pytest.approx(ppl, rel=1e-5)
    assert main(["sample", str(run), "--n", "2", "--seed", "1"]) == 0


def test_characters_with_modified_kn_need_discounts_and_take_them(text: list[str], tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Five words spelled in 11 characters: every character follows many others, so order 1 has no
    type seen after 1, 2 or 3 distinct characters; the message asks for discounts, not a lower order."""
    args = ["train", *text, "model.kind=kn", "language.level=char", "run.name=kd", "--no-eval"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("ebms train: error: ngram.smoothing: 'modified_kneser_ney' cannot estimate its discounts "
                          "at order") and "set ngram.discounts=[" in err and err.count("\n") == 1
    assert main([*args, "ngram.discounts=[0.5, 1, 1.5, 0.5, 1, 1.5, 0.5, 1, 1.5]"]) == 0
    assert main(["eval", str(tmp_path / "runs" / "kd")]) == 0


def test_a_transformer_on_one_overlong_line_is_refused_naming_max_length(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A file of running text read one line per sentence: the default L was the longest line (a
    400,000-token line hung the Transformer); now it is bounded, and language.max_length opts out."""
    from ebms.cli._language_data import DEFAULT_MAX_LENGTH

    long_line = " ".join(WORDS[i % 5] for i in range(DEFAULT_MAX_LENGTH + 1))
    (tmp_path / "train.txt").write_text("the cat sat\nthe dog ran\n" * 4 + long_line + "\n")
    args = ["train", "data.name=text", f"language.train_path={tmp_path}/train.txt", "model.kind=transformer",
            "lm.embedding_dim=8", "lm.hidden=8", "lm.layers=1", "lm.heads=2",
            "train.steps=2", "train.batch_size=2", f"run.out_dir={tmp_path}", "run.progress=false", "--no-eval"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err == (f"ebms train: error: language.max_length: unset, it would be the longest training sentence, "
                   f"{DEFAULT_MAX_LENGTH + 1} tokens, above the default bound of {DEFAULT_MAX_LENGTH} for model.kind="
                   f"'transformer' (its size and cost grow with it; 1 training sentence(s) are longer); set "
                   f"language.max_length=N to leave longer training sentences out, or cut running text into sentences "
                   f"with language.sentence_split=true\n")
    assert main([*args, "language.max_length=8"]) == 0


@pytest.mark.parametrize(("extra", "start"), [
    (("model.kind=lstm", "residual.base_run=runs/none"),
     "residual.base_run: the [residual] section is read by data.name = ptb, text, tiny-shakespeare with model.kind = "
     "residual"),
    (("model.kind=lstm", "objective.kind=earm", "lm.earm_start=4"),
     "lm.earm_start: E-ARM is switched on after 4 steps but the run stops at train.steps=4"),
    (("model.kind=lstm", "trf.classes=100"),
     "trf.classes: the [trf] section is read by data.name = ptb, text, tiny-shakespeare with model.kind = trf"),
    (("model.kind=lstm", "lm.heads=2"), "lm.heads: model.kind='lstm' with objective.kind='ml' does not read it"),
    (("model.kind=trf", "trf.classes=100000"), "trf.classes: exchange clustering sorts the vocabulary's"),
])
def test_settings_that_would_do_nothing_are_one_line_and_exit_2(text: list[str], extra: tuple[str, ...], start: str,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", *text, *extra, "--no-eval"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ebms train: error: {start}") and err.count("\n") == 1, err

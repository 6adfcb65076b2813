"""End-to-end: language runs on subword units (``language.level = "subword"``) from the command line.

Tiny ``kn`` and ``lstm`` runs on a small text with 60 BPE units: the run keeps its tokenizer
(``tokenizer.json``, its sha256 in ``vocab.json`` and the checkpoint), ``eval`` reports the per-unit and the
per-word perplexity of the same total, ``ebms score`` sums to ``eval``'s total, a resume and a run applied
without its training text use the stored tokenizer, and a residual run takes its subword base's vocabulary.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

pytest.importorskip("tokenizers")

from _apply_data import moved_away, tsv_rows, word_corpus  # noqa: E402

from ebms.cli.main import main  # noqa: E402
from ebms.data.subword import SubwordVocabulary  # noqa: E402
from ebms.runs import load_run  # noqa: E402


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("subword_cli")


def _text(tmp: Path) -> list[str]:
    files = {s: word_corpus(tmp / f"{s}.txt", n, seed) for s, n, seed in (("train", 150, 0), ("valid", 15, 1),
                                                                       ("test", 15, 2))}
    return ["data.name=text", *(f"language.{s}_path={p}" for s, p in files.items()), f"run.out_dir={tmp}/runs",
            "run.progress=false", "language.level=subword", "language.subword_units=60", "language.max_length=40"]


@pytest.fixture(scope="module")
def runs(tmp: Path) -> dict[str, Path]:
    text = _text(tmp)
    jobs = {"kn": [*text, "model.kind=kn", "ngram.smoothing=witten_bell"],
            "lstm": [*text, "model.kind=lstm", "lm.embedding_dim=8", "lm.hidden=8", "lm.layers=1", "train.steps=4",
                     "train.batch_size=8", "train.log_every=2", "train.checkpoint_every=2"]}
    for name, args in jobs.items():
        assert main(["train", *args, f"run.name={name}"]) == 0
    return {name: tmp / "runs" / name for name in jobs}




@pytest.mark.parametrize("kind", ["kn", "lstm"])
def test_eval_reports_per_unit_and_per_word_perplexity_of_one_total(kind: str, runs: dict[str, Path],
                                                                    tmp: Path) -> None:
    fig = json.loads((runs[kind] / "eval.json").read_text())["figures"]["test"]
    words = sum(len(line.split()) for line in (tmp / "test.txt").read_text().splitlines())
    assert fig["unit"] == "subword" and fig["words"] == words and fig["sentences"] == 15
    assert fig["tokens"] > words + 15  # units outnumber words here
    assert fig["perplexity"] == pytest.approx(math.exp(-fig["log_prob"] / fig["tokens"]))
    assert fig["perplexity_per_word"] == pytest.approx(math.exp(-fig["log_prob"] / (words + 15)))


@pytest.mark.parametrize("kind", ["kn", "lstm"])
def test_score_sums_to_evals_total(kind: str, runs: dict[str, Path], tmp: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["score", str(runs[kind]), str(tmp / "test.txt")]) == 0
    out, err = capsys.readouterr()
    rows = tsv_rows(out)
    fig = json.loads((runs[kind] / "eval.json").read_text())["figures"]["test"]
    total = sum(float(r["log_prob"]) for r in rows)
    assert total == pytest.approx(fig["log_prob"], abs=1e-3)
    assert sum(int(r["tokens"]) for r in rows) == fig["tokens"] and sum(int(r["words"]) for r in rows) == fig["words"]
    assert out.splitlines()[0].split("\t") == ["line", "log_prob", "tokens", "oov", "perplexity", "words",
                                              "perplexity_per_word", "sentence"]
    said = float(err.split(" per word")[0].rsplit(" ", 1)[1])
    assert said == pytest.approx(fig["perplexity_per_word"], rel=1e-4) and err.count("\n") == 1


def test_the_run_keeps_its_tokenizer(runs: dict[str, Path]) -> None:
    run = load_run(runs["kn"])
    v = run.data.vocab
    assert isinstance(v, SubwordVocabulary) and v.scheme == "words"
    stored = (runs["kn"] / "tokenizer.json").read_bytes()
    assert stored == v.tokenizer.to_bytes()
    assert json.loads((runs["kn"] / "vocab.json").read_text())["subword"]["tokenizer_sha256"] == v.tokenizer.sha256()
    assert (runs["kn"] / "model.arpa").read_text().count("\u2581") > 0  # the n-gram is over units


def test_an_altered_tokenizer_file_is_refused(runs: dict[str, Path], tmp: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = runs["kn"] / "tokenizer.json"
    good = path.read_bytes()
    try:
        path.write_bytes(good.replace("\u2581the".encode(), "\u2581teh".encode()))
        assert main(["score", str(runs["kn"]), str(tmp / "test.txt")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "tokenizer.json" in err
    finally:
        path.write_bytes(good)




@pytest.mark.parametrize("kind", ["kn", "lstm"])
def test_applied_without_training_text_as_with_it(kind: str, runs: dict[str, Path], tmp: Path) -> None:
    lines = [*(tmp / "test.txt").read_text().splitlines(), "the zebra jumped"]
    full = load_run(runs[kind])
    expected = full.score(lines)
    with moved_away(tmp / "train.txt"):
        light = load_run(runs[kind], training_data=False)
        got = light.score(lines)
    assert light.data.size == 0 and light.data.vocab == full.data.vocab
    assert torch.equal(got.log_prob, expected.log_prob) and torch.equal(got.words, expected.words)
    assert int(got.oov[-1]) >= 1  # 'z' was never seen: a unit scored as <unk>


def test_resume_uses_the_stored_tokenizer(runs: dict[str, Path], tmp: Path) -> None:
    text = _text(tmp)
    before = (runs["lstm"] / "tokenizer.json").read_bytes()
    assert main(["train", *text, "model.kind=lstm", "lm.embedding_dim=8", "lm.hidden=8", "lm.layers=1",
                 "train.steps=6", "train.batch_size=8", "train.log_every=2", "train.checkpoint_every=2",
                 "run.name=lstm", "--resume", "--no-eval"]) == 0
    assert (runs["lstm"] / "tokenizer.json").read_bytes() == before
    assert load_run(runs["lstm"]).step == 6


def test_a_residual_run_takes_its_subword_bases_units(runs: dict[str, Path], tmp: Path) -> None:
    text = _text(tmp)
    assert main(["train", *text, "model.kind=residual", "objective.kind=nce", f"residual.base_run={runs['lstm']}",
                 "residual.embedding_dim=8", "residual.layers=1", "train.steps=2", "train.batch_size=8",
                 "run.name=residual", "--no-eval"]) == 0
    res, base = load_run(tmp / "runs" / "residual"), load_run(runs["lstm"])
    assert res.data.vocab == base.data.vocab
    assert (tmp / "runs" / "residual" / "tokenizer.json").read_bytes() == (runs["lstm"] / "tokenizer.json").read_bytes()

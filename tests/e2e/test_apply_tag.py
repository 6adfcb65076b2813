"""End-to-end: ``ebms tag`` applies a trained tagging run to new sentences (issue 27).

Four tiny runs (a BiLSTM-CRF with characters, a feature CRF, a CRF transducer, a JRF) are trained once on a small
CoNLL-2000-format corpus of their own (random sentences from a word/POS/chunk table, under
``data.root``), so these checks do not need the real data. Checked: the run's own test file tagged
through ``ebms tag`` gives the F1, precision and recall ``ebms eval`` wrote to ``eval.json``; plain
tokens give the tags of the CoNLL lines; stdin and ``--out`` work; empty and one-token sentences;
every bad input is one line on stderr and exit status 2.
"""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from _apply_data import conll_corpus as _corpus
from _apply_data import write_conll2000

from ebms.cli.main import main

RUNS = {
    "bilstm-crf": ["model.kind=bilstm-crf", "tagging.embedding_dim=8", "tagging.hidden=8", "tagging.char_dim=4",
                   "train.steps=4", "train.batch_size=8", "train.lr=0.05"],
    "feature-crf": ["model.kind=feature-crf", "train.optimizer=lbfgs", "train.batch_size=60", "train.steps=2"],
    "crf-transducer": ["model.kind=crf-transducer", "objective.kind=early-update", "tagging.embedding_dim=8",
                       "tagging.hidden=8", "tagging.char_dim=4", "tagging.beam=3", "train.steps=4",
                       "train.batch_size=8", "train.lr=0.05"],  # decoded by beam search of width 3
    "jrf": ["model.kind=jrf", "jrf.label_fraction=0.5", "jrf.embed=4", "jrf.hidden=4", "train.steps=2",
            "train.batch_size=4"],  # the supervised baseline (objective.kind=crf): no noise LM to fit
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with ``conll2000/{train,test}.txt``, the three runs under ``runs/<kind>`` and a language run."""
    root = tmp_path_factory.mktemp("tag")
    write_conll2000(root, _corpus(60, 0), _corpus(30, 1))
    common = ["train", "data.name=conll2000", f"data.root={root}", f"run.out_dir={root}/runs", "run.progress=false",
              "objective.kind=crf"]
    for kind, extra in RUNS.items():
        assert main([*common, *extra, f"run.name={kind}"]) == 0
    (root / "lm.txt").write_text("the cat sat on the mat\na dog ran\n" * 5)
    assert main(["train", "data.name=text", f"language.train_path={root}/lm.txt", f"language.test_path={root}/lm.txt",
                 "model.kind=kn", "ngram.smoothing=witten_bell", f"run.out_dir={root}/runs", "run.name=lm",
                 "run.progress=false", "--no-eval"]) == 0
    return root


def _stderr_figures(err: str) -> dict[str, str]:
    return dict(re.findall(r"(F1|precision|recall) (\d+\.\d\d)", err))


@pytest.mark.parametrize("kind", list(RUNS))
def test_tagging_the_test_file_gives_the_figures_of_eval(kind: str, tiny: Path, capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    test = tiny / "conll2000" / "test.txt"
    capsys.readouterr()
    assert main(["tag", str(tiny / "runs" / kind), str(test)]) == 0
    out, err = capsys.readouterr()
    figures = json.loads((tiny / "runs" / kind / "eval.json").read_text())["figures"]
    assert err.count("\n") == 1 and err.startswith("tag: chunk F1 "), err
    assert _stderr_figures(err) == {"F1": f"{figures['f1']:.2f}", "precision": f"{figures['precision']:.2f}",
                                    "recall": f"{figures['recall']:.2f}"}, err
    assert "gold tags of column 3" in err and "in 30 sentences" in err
    rows = [line.split() for line in out.split("\n\n") if line for line in line.splitlines()]
    given = [line.split() for line in test.read_text().splitlines() if line]
    assert [r[:3] for r in rows] == given and all(len(r) == 4 for r in rows)  # the input's columns, then the tag
    assert out.count("\n\n") == 30


@pytest.mark.parametrize("kind", ["bilstm-crf", "jrf"])
def test_plain_tokens_get_the_tags_of_the_conll_lines(kind: str, tiny: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    test = (tiny / "conll2000" / "test.txt").read_text()
    words = [" ".join(line.split()[0] for line in block.splitlines()) for block in test.split("\n\n") if block.strip()]
    (tmp_path / "plain.txt").write_text("\n".join(words) + "\n")
    run = str(tiny / "runs" / kind)
    assert main(["tag", run, str(tiny / "conll2000" / "test.txt"), "--out", str(tmp_path / "a.conll")]) == 0
    assert main(["tag", run, str(tmp_path / "plain.txt"), "--out", str(tmp_path / "b.conll")]) == 0
    assert capsys.readouterr().out == ""  # --out: nothing on stdout
    a = [line.split() for line in (tmp_path / "a.conll").read_text().splitlines()]
    b = [line.split() for line in (tmp_path / "b.conll").read_text().splitlines()]
    assert [r[-1:] for r in a] == [r[-1:] for r in b] and all(len(r) in (0, 2) for r in b)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.conll", "b.conll", "plain.txt"]  # no temporary files


def test_stdin_empty_and_one_token_sentences(tiny: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Plain tokens: one sentence per line; an empty line is an empty sentence (an empty block out)."""
    monkeypatch.setattr("sys.stdin", io.StringIO("the cat sat\n\n.\nthe mat\n"))
    capsys.readouterr()
    assert main(["tag", str(tiny / "runs" / "bilstm-crf"), "--format", "tokens", "--batch-size", "1"]) == 0
    out, err = capsys.readouterr()
    blocks = out.split("\n")
    assert err == "" and out.endswith("\n\n")
    words = [line.split()[0] if line else "" for line in blocks[:-1]]
    assert words == ["the", "cat", "sat", "", "", ".", "", "the", "mat", ""]


def test_a_feature_crf_reads_the_pos_column(tiny: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Word and POS without gold tags: tagged, no figures on stderr."""
    (tmp_path / "x.conll").write_text("the DT\ncat NN\n\nran VBD\n")
    assert main(["tag", str(tiny / "runs" / "feature-crf"), str(tmp_path / "x.conll")]) == 0
    out, err = capsys.readouterr()
    assert err == "" and [len(line.split()) for line in out.splitlines()] == [3, 3, 0, 3, 0]


# -- bad input: one line on stderr, exit status 2 ----------------------------------------------------------------
@dataclass(frozen=True)
class Bad:
    name: str
    argv: tuple[str, ...]
    piece: str
    files: tuple[tuple[str, bytes], ...] = ()


NN, FC, JRF = "{tiny}/runs/bilstm-crf", "{tiny}/runs/feature-crf", "{tiny}/runs/jrf"
BAD = [
    Bad("missing file", ("tag", NN, "{tmp}/nope.txt"), "FILE: '{tmp}/nope.txt' not found"),
    Bad("file is a folder", ("tag", NN, "{tmp}"), "FILE: '{tmp}' is a folder, not a file"),
    Bad("empty file", ("tag", NN, "{tmp}/in.txt"), "FILE '{tmp}/in.txt': no tokens (the input is empty)",
        (("in.txt", b"\n \n"),)),
    Bad("not UTF-8", ("tag", NN, "{tmp}/in.txt"), "FILE: '{tmp}/in.txt' is not UTF-8 text",
        (("in.txt", b"\xff\xfe a\n"),)),
    Bad("ragged CoNLL", ("tag", NN, "{tmp}/in.txt"),
        "FILE '{tmp}/in.txt': not CoNLL: line 2: expected 3 fields; got 2 in 'cat NN'",
        (("in.txt", b"the DT B-NP\ncat NN\n\nran VBD B-VP\n"),)),
    Bad("CoNLL forced on ragged text", ("tag", JRF, "{tmp}/in.txt", "--format", "conll"),
        "not CoNLL: line 2: expected 2 fields; got 3", (("in.txt", b"the cat\na dog ran\n"),)),
    Bad("only -DOCSTART- lines", ("tag", NN, "{tmp}/in.txt"), "no tokens (only -DOCSTART- lines)",
        (("in.txt", b"-DOCSTART- -X- O\n\n"),)),
    Bad("plain tokens to a feature CRF", ("tag", FC, "{tmp}/in.txt"),
        "FILE '{tmp}/in.txt': plain tokens, but model.kind='feature-crf' (tagging.features='crfsuite-chunking') reads "
        "the word and POS of every token; give CoNLL lines",
        (("in.txt", b"the cat sat\n"),)),
    Bad("a feature CRF without the POS column", ("tag", FC, "{tmp}/in.txt", "--format", "conll"),
        "reads the word (column 1) and POS (column 2) of every token; the input has 1 column",
        (("in.txt", b"the\ncat\n\nsat\n"),)),
    Bad("a feature CRF given tags where the POS goes", ("tag", FC, "{tmp}/in.txt"),
        "column 2 holds chunk tags, not the POS that model.kind='feature-crf' (tagging.features='crfsuite-chunking') "
        "reads there",
        (("in.txt", b"the B-NP\ncat I-NP\n\nsat B-VP\n"),)),
    Bad("RUN missing", ("tag", "{tmp}/norun", "{tmp}/in.txt"), "RUN: '{tmp}/norun' is not a run folder",
        (("in.txt", b"the cat\n"),)),
    Bad("RUN not a tagging run", ("tag", "{tiny}/runs/lm", "{tmp}/in.txt"),
        "tag: the run in '{tiny}/runs/lm' (data.name='text', model.kind='kn') is not one `ebms tag` applies",
        (("in.txt", b"the cat\n"),)),
    Bad("batch size 0", ("tag", NN, "{tmp}/in.txt", "--batch-size", "0"),
        "--batch-size: expected an integer >= 1; got 0"),
    Bad("unknown format", ("tag", NN, "{tmp}/in.txt", "--format", "json"), "invalid choice: 'json'"),
    Bad("--out a folder", ("tag", NN, "{tmp}/in.txt", "--out", "{tmp}"), "--out: '{tmp}' is a folder; expected a file",
        (("in.txt", b"the cat\n"),)),
]


@pytest.mark.parametrize("bad", BAD, ids=[b.name for b in BAD])
def test_bad_input_is_one_line_and_exit_2(bad: Bad, tiny: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    for name, data in bad.files:
        (tmp_path / name).write_bytes(data)
    before = sorted(tmp_path.iterdir())
    capsys.readouterr()
    assert main([a.format(tmp=tmp_path, tiny=tiny) for a in bad.argv]) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and out == "", err
    assert bad.piece.format(tmp=tmp_path, tiny=tiny) in err, err
    assert sorted(tmp_path.iterdir()) == before  # nothing written


# --- applied without the training files (Task.load_applied) ----------------------------------------------------------
@pytest.mark.parametrize("kind", list(RUNS))
def test_tag_without_the_training_files_prints_what_the_full_load_gives(kind: str, tiny: Path, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """With ``data.root``'s CoNLL folder moved away, ``ebms tag`` (the run's stored files alone) writes the lines
    and the scores of the tagger of the full load."""
    from ebms.apply.tagging import read_tagging_input
    from ebms.runs import load_run

    new = tmp_path / "new.txt"
    new.write_text((tiny / "conll2000" / "test.txt").read_text())
    inp = read_tagging_input(new.read_text().splitlines(), source=f"FILE {str(new)!r}")
    result = load_run(tiny / "runs" / kind).applier("tag").tag_input(inp)
    (tiny / "conll2000").rename(tiny / "conll2000.away")
    try:
        capsys.readouterr()
        assert main(["tag", str(tiny / "runs" / kind), str(new)]) == 0
        out, err = capsys.readouterr()
    finally:
        (tiny / "conll2000.away").rename(tiny / "conll2000")
    assert out.splitlines() == list(result.conll_lines()) and err == f"tag: {result.summary()}\n"


def test_a_jrf_run_written_before_the_length_law_was_kept_tags_and_resumes(tiny: Path, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A JRF run whose ``vocab.json`` has no ``length_counts`` (written before they were kept) tags through the
    full load, as before, and resumes (the full load writes its file back unchanged)."""
    from ebms.cli.jrf import JRFTask
    from ebms.runs import load_run
    from ebms.train.run_files import dump_json

    files = JRFTask.run_files
    with monkeypatch.context() as m:  # this version's file without the length law: an older run's
        m.setattr(JRFTask, "run_files", lambda self, cfg, data: {
            k: dump_json({a: b for a, b in json.loads(v).items() if a != "length_counts"})
            for k, v in files(self, cfg, data).items()})
        args = ["train", "data.name=conll2000", f"data.root={tiny}", f"run.out_dir={tmp_path}", "run.progress=false",
                "objective.kind=crf", *RUNS["jrf"], "run.name=old", "--no-eval"]
        assert main(args) == 0
    assert "length_counts" not in json.loads((tmp_path / "old" / "vocab.json").read_text())
    light, full = load_run(tmp_path / "old", training_data=False), load_run(tmp_path / "old")
    sentences = [["the", "cat", "sat"], ["dog", "ran", "on", "the", "mat", "."]]
    assert light.data.size == full.data.size > 0 and light.tag(sentences) == full.tag(sentences)
    assert main([*[a for a in args if not a.startswith("train.steps")], "train.steps=3", "--resume"]) == 0
    assert load_run(tmp_path / "old").step == 3

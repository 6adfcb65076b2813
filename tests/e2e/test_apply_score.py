"""End-to-end: ``ebms score`` and ``ebms rescore`` on tiny language-model runs (issue 27).

Tiny ``kn``, ``lstm``, ``trf`` and ``electric`` runs are trained once on small text files in a temporary
folder (seconds). The checks: summing the per-sentence log-probabilities of the test file gives ``ebms eval``'s
perplexity (``kn``, ``lstm``); KN scores are the model's own ``log_prob``; a TRF's are ``log pi_l - E(x) -
zeta_l`` with the stored zeta; stdin works; ``--out`` is written whole or not at all; rescoring at weight 0
keeps the acoustic best and with weights picks the argmax computed by hand. Then the bad-input table: each row
one line on stderr and exit status 2.
"""

from __future__ import annotations

import io
import json
import math
import random
from pathlib import Path

import pytest
import torch
from _apply_data import moved_away, tsv_rows, write_conll2000

from ebms.cli.main import main
from ebms.data.nbest import NBest, write_kaldi_nbest, write_nbest_tsv
from ebms.runs import load_run
from ebms.sequences import Sequences

WORDS = ("the", "cat", "dog", "sat", "ran")


def _corpus(path: Path, n: int, seed: int) -> Path:
    r = random.Random(seed)
    lines = [r.choice(["the cat sat", "the dog ran", "the cat ran"]) if r.random() < 0.5
             else " ".join(r.choice(WORDS) for _ in range(r.randint(1, 5))) for _ in range(n)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _conll(n: int, seed: int) -> str:
    """CoNLL-2000 columns (word, POS, chunk) of ``n`` sentences of 1..5 of WORDS (and a number)."""
    r = random.Random(seed)
    table = {"the": "DT", "cat": "NN", "dog": "NN", "sat": "VBD", "ran": "VBD", "12": "CD"}
    return "".join("".join(f"{w} {table[w]} O\n" for w in (r.choice([*WORDS, "12"]) for _ in range(r.randint(1, 5))))
                   + "\n" for _ in range(n))


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("apply_score")


@pytest.fixture(scope="module")
def runs(tmp: Path) -> dict[str, Path]:
    """Run folders ``kn``, ``lstm``, ``trf`` (lengths up to 5), ``electric``, ``toy`` (not a language run), ``jrf``
    (a JRF on CoNLL-2000 columns, lengths up to 5) and ``jrfsup`` (the same, ``objective.kind = "crf"``)."""
    files = {s: _corpus(tmp / f"{s}.txt", n, seed) for s, n, seed in (("train", 200, 0), ("valid", 20, 1),
                                                                       ("test", 20, 2))}
    text = ["data.name=text", *(f"language.{s}_path={p}" for s, p in files.items()), f"run.out_dir={tmp}/runs",
            "run.progress=false", "train.steps=2", "train.batch_size=8", "train.log_every=1",
            "train.checkpoint_every=1"]
    jobs = {"kn": ["kn5-ptb", *text, "ngram.smoothing=witten_bell"],
            "lstm": ["lstm-ptb", *text, "lm.embedding_dim=8", "lm.hidden=8"],
            "trf": ["trf-ptb", *text, "trf.classes=2", "trf.chains=8", "--no-eval"],
            "electric": [*text, "model.kind=electric", "objective.kind=nce", "electric.embedding_dim=8",
                         "electric.layers=1", "electric.heads=2", "--no-eval"],
            "toy": ["data.name=rings", "train.steps=2", f"run.out_dir={tmp}/runs", "run.progress=false", "--no-eval"]}
    root = write_conll2000(tmp / "conll", _conll(60, 3), _conll(10, 4))
    jrf = ["data.name=conll2000", "model.kind=jrf", f"data.root={root}", "jrf.label_fraction=0.5", "jrf.min_count=1",
           "jrf.embed=4", "jrf.hidden=4", "train.steps=2", "train.batch_size=8", f"run.out_dir={tmp}/runs",
           "run.progress=false", "--no-eval"]
    jobs.update(jrf=[*jrf, "jrf.noise_hidden=4", "jrf.noise_steps=2"], jrfsup=[*jrf, "objective.kind=crf"])
    for name, args in jobs.items():
        assert main(["train", *args, f"run.name={name}"]) == 0
    return {name: tmp / "runs" / name for name in jobs}




@pytest.mark.parametrize("kind", ["kn", "lstm"])
def test_summed_log_probs_give_the_eval_perplexity(kind: str, runs: dict[str, Path], tmp: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["score", str(runs[kind]), str(tmp / "test.txt")]) == 0
    out, err = capsys.readouterr()
    rows = tsv_rows(out)
    total, tokens = sum(float(r["log_prob"]) for r in rows), sum(int(r["tokens"]) for r in rows)
    fig = json.loads((runs[kind] / "eval.json").read_text())["figures"]["test"]
    assert len(rows) == fig["sentences"] == 20 and tokens == fig["tokens"]
    assert math.exp(-total / tokens) == pytest.approx(fig["perplexity"], rel=1e-6)
    assert err.count("\n") == 1 and f"[{kind}: exact" in err


def test_kn_scores_are_the_models_own_log_prob(runs: dict[str, Path], tmp: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    lines = ["the cat sat", "the zebra ran fast", "dog"]
    (tmp / "new.txt").write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    assert main(["score", str(runs["kn"]), str(tmp / "new.txt"), "--batch-size", "2"]) == 0
    rows = tsv_rows(capsys.readouterr().out)
    run = load_run(runs["kn"])
    lp = run.model.log_prob(run.data.vocab.encode([s.split() for s in lines])).tolist()
    assert [float(r["log_prob"]) for r in rows] == pytest.approx(lp, abs=1e-6)
    assert [r["oov"] for r in rows] == ["0", "2", "0"] and [r["sentence"] for r in rows] == lines


def test_trf_scores_are_log_density_minus_the_stored_zeta(runs: dict[str, Path]) -> None:
    run = load_run(runs["trf"])
    sentences = [["the", "cat"], ["dog", "ran", "the"], ["cat"]]
    s = run.score(sentences)
    x = run.data.vocab.encode(sentences)
    with torch.no_grad():
        m = run.model
        expected = m.log_pi[x.lengths - 1] - m.energy(x) - m.log_normalisers()[x.lengths - 1]
    torch.testing.assert_close(s.log_prob, expected.double(), rtol=0, atol=1e-5)
    assert s.measure == "log_prob_training_zeta"


def test_jrf_scores_are_its_marginal_minus_the_stored_zeta(runs: dict[str, Path], tmp: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A JRF run scores ``log pi_l - E(x) - zeta_l`` (E: minus the CRF's log-partition), its words normalised as in
    training (``34`` is the training word ``12`` -> ``00``), an unknown word as ``<unk>``."""
    run = load_run(runs["jrf"])
    lines = ["the cat 34", "dog ran the", "zebra"]
    s = run.score([line.split() for line in lines])  # token lists are normalised as lines are
    words = run.data.info["words"]
    x = Sequences.from_lists([[words.index(w) if w in words else 1 for w in line.replace("34", "00").split()]
                              for line in lines])
    with torch.no_grad():
        m = run.model
        expected = m.log_pi[x.lengths - 1] - m.marginal_energy(x) - m.log_z[x.lengths - 1]
    torch.testing.assert_close(s.log_prob, expected.double(), rtol=0, atol=1e-5)
    assert s.measure == "log_prob_training_zeta" and s.oov.tolist() == [0, 0, 1] and s.tokens.tolist() == [4, 4, 2]
    (tmp / "jrf-in.txt").write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    assert main(["score", str(runs["jrf"]), str(tmp / "jrf-in.txt")]) == 0
    out, err = capsys.readouterr()
    assert [float(r["log_prob_training_zeta"]) for r in tsv_rows(out)] == pytest.approx(expected.tolist(), abs=1e-5)
    assert "[jrf: log-probability with the normalisers log Z_l estimated in training" in err


def test_stdin_with_blank_lines_and_the_line_column(runs: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("the cat sat\n\nthe dog\n"))
    capsys.readouterr()
    assert main(["score", str(runs["trf"]), "-"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0].split("\t")[:2] == ["line", "log_prob_training_zeta"]
    assert [r["line"] for r in tsv_rows(out)] == ["1", "3"] and "1 blank line skipped" in err and "training" in err


def test_electric_scores_are_labelled_pseudo_log_likelihoods(runs: dict[str, Path], tmp: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["score", str(runs["electric"]), str(tmp / "test.txt")]) == 0
    out, err = capsys.readouterr()
    assert out.split("\n")[0] == "line\tpseudo_log_likelihood\ttokens\toov\tpseudo_perplexity\tsentence"
    assert "not a log-probability" in err


def test_out_is_written_whole_or_not_at_all(runs: dict[str, Path], tmp: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp / "scores.tsv"
    assert main(["score", str(runs["kn"]), str(tmp / "test.txt"), "--out", str(out)]) == 0
    assert len(out.read_text().splitlines()) == 21 and capsys.readouterr().out == ""
    before = out.read_text()
    (tmp / "long.txt").write_text("the cat\n" + "the cat sat the dog ran the cat\n")
    assert main(["score", str(runs["trf"]), str(tmp / "long.txt"), "-o", str(out)]) == 2
    assert out.read_text() == before and sorted(p.name for p in tmp.glob(".scores*")) == []


# --- rescore ---------------------------------------------------------------------------------------
NB = NBest.from_lists(["u1", "u2"], [[["the", "cat", "ran"], ["the", "cat", "sat"], ["cat", "the", "dog", "sat"]],
                                     [["dog", "dog", "the"], ["the", "dog", "ran"]]],
                      acoustic=[[-4.0, -4.5, -3.9], [-2.0, -2.2]], lm=[[-9.0, -9.0, -1.0], [-9.0, -9.0]])


@pytest.fixture(scope="module")
def nbest(tmp: Path) -> Path:
    (tmp / "refs.txt").write_text("u1 the cat sat\nu2 the dog ran\n")
    write_kaldi_nbest(NB, tmp / "kaldi")
    return write_nbest_tsv(NB, tmp / "nbest.tsv")


def _best(out: str) -> dict[str, str]:
    return dict(line.split("\t") for line in out.splitlines())


def test_weight_zero_keeps_the_acoustic_best(runs: dict[str, Path], nbest: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["rescore", str(runs["kn"]), str(nbest), "--weights", "0"]) == 0
    assert _best(capsys.readouterr().out) == {"u1": "cat the dog sat", "u2": "dog dog the"}


def test_a_jrf_run_rescores_beside_kn_with_the_argmax_by_hand(runs: dict[str, Path], nbest: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    kn, jrf = load_run(runs["kn"]), load_run(runs["jrf"])
    hyps = [list(h) for h in NB.hypotheses]
    lps = [kn.model.log_prob(kn.data.vocab.encode(hyps)).double(), jrf.score(hyps).log_prob]
    total = NB.acoustic + 0.4 * lps[0] + 1.5 * lps[1]
    expected = {u: " ".join(max((float(total[i]), -i, hyps[i]) for i in range(len(NB)) if int(NB.utterance[i]) == k)[2])
                for k, u in enumerate(NB.utt_ids)}
    capsys.readouterr()
    assert main(["rescore", str(runs["kn"]), str(runs["jrf"]), str(nbest), "--weights", "0.4", "1.5"]) == 0
    out, err = capsys.readouterr()
    assert _best(out) == expected and "LM weights kn 0.4, jrf 1.5" in err


def test_weights_pick_the_argmax_by_hand_and_refs_give_wer(runs: dict[str, Path], nbest: Path, tmp: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    kn, lstm = load_run(runs["kn"]), load_run(runs["lstm"])
    hyps = [list(h) for h in NB.hypotheses]
    w, scale, beta = (0.7, 0.3), 2.5, 0.25
    with torch.no_grad():
        lps = [r.model.log_prob(r.data.vocab.encode(hyps)).double() for r in (kn, lstm)]
    total = NB.acoustic + scale * (w[0] * lps[0] + w[1] * lps[1]) + beta * NB.word_counts()
    expected = {u: " ".join(max((float(total[i]), -i, hyps[i]) for i in range(len(NB)) if int(NB.utterance[i]) == k)[2])
                for k, u in enumerate(NB.utt_ids)}
    for source in (nbest, tmp / "kaldi"):
        capsys.readouterr()
        assert main(["rescore", str(runs["kn"]), str(runs["lstm"]), str(source), "--weights", *map(str, w),
                     "--lm-scale", str(scale), "--length-penalty", str(beta), "--refs", str(tmp / "refs.txt")]) == 0
        out, err = capsys.readouterr()
        assert _best(out) == expected
        assert "WER first pass 50.00% (3/6) -> rescored" in err


BAD_INPUTS = [  # (id, arguments with {run kind} / {tmp} / {nbest} placeholders, files to write first, piece)
    ("no-run-folder", ["score", "{tmp}/nope", "{tmp}/test.txt"], {}, "RUN: "),
    ("run-is-a-file", ["score", "{tmp}/test.txt", "{tmp}/test.txt"], {}, "is a file, not a run folder"),
    ("missing-file", ["score", "{kn}", "{tmp}/absent.txt"], {}, "FILE: "),
    ("file-is-a-folder", ["score", "{kn}", "{tmp}"], {}, "is a folder, not a file"),
    ("empty-file", ["score", "{kn}", "{tmp}/empty.txt"], {"empty.txt": ""}, "holds no sentence"),
    ("blank-file", ["score", "{kn}", "{tmp}/blank.txt"], {"blank.txt": "\n \n"}, "holds no sentence"),
    ("not-utf8", ["score", "{kn}", "{tmp}/latin.txt"], {"latin.txt": b"caf\xe9\n"}, "not UTF-8 text"),
    ("not-a-language-run", ["score", "{toy}", "{tmp}/test.txt"], {}, "is not one `ebms score` applies"),
    ("too-long-for-trf", ["score", "{trf}", "{tmp}/long.txt"], {"long.txt": "the cat\nthe cat sat the dog ran\n"},
     "long.txt:2: a sentence of 6 tokens; this trf run scores sentences of 1..5"),
    ("boundary-marker", ["score", "{kn}", "{tmp}/marker.txt"], {"marker.txt": "the </s> cat\n"}, "boundary marker"),
    ("batch-size-zero", ["score", "{kn}", "{tmp}/test.txt", "--batch-size", "0"], {}, "argument --batch-size"),
    ("out-is-a-folder", ["score", "{kn}", "{tmp}/test.txt", "--out", "{tmp}"], {}, "--out: "),
    ("rescore-missing-nbest", ["rescore", "{kn}", "{tmp}/absent.tsv"], {}, "NBEST: "),
    ("rescore-no-nbest", ["rescore", "{kn}"], {}, "required: NBEST"),
    ("rescore-bad-tsv", ["rescore", "{kn}", "{tmp}/bad.tsv"], {"bad.tsv": "u1 1 -2.0 the cat\n"},
     "expected 5 tab-separated fields"),
    ("rescore-empty-nbest", ["rescore", "{kn}", "{tmp}/empty.tsv"], {"empty.tsv": ""}, "at least one hypothesis"),
    ("rescore-bad-score", ["rescore", "{kn}", "{tmp}/nan.tsv"], {"nan.tsv": "u1\t1\tnan\t0\tthe cat\n"},
     "expected a finite number"),
    ("rescore-kaldi-no-ac-cost", ["rescore", "{kn}", "{tmp}/kaldi-bad"], {"kaldi-bad/text": "u1-1 the cat\n"},
     "a folder without ac_cost"),
    ("rescore-weights-count", ["rescore", "{kn}", "{nbest}", "--weights", "0.5", "0.5"], {},
     "--weights: expected one weight per run (1: "),
    ("rescore-negative-weight", ["rescore", "{kn}", "{nbest}", "--weights", "-1"], {}, "argument --weights"),
    ("rescore-nan-weight", ["rescore", "{kn}", "{nbest}", "--weights", "nan"], {}, "expected a finite number >= 0"),
    ("rescore-inf-scale", ["rescore", "{kn}", "{nbest}", "--lm-scale", "inf"], {}, "argument --lm-scale"),
    ("rescore-missing-refs", ["rescore", "{kn}", "{nbest}", "--refs", "{tmp}/absent-refs"], {}, "--refs: "),
    ("rescore-refs-lack-utt", ["rescore", "{kn}", "{nbest}", "--refs", "{tmp}/refs1.txt"],
     {"refs1.txt": "u1 the cat\n"}, "no reference for utterance 'u2'"),
    ("rescore-not-a-language-run", ["rescore", "{kn}", "{toy}", "{nbest}"], {}, "is not one `ebms score` applies"),
    ("score-jrf-without-log-z", ["score", "{jrfsup}", "{tmp}/test.txt"], {},
     "objective.kind='crf' (the CRF likelihood alone): its zeta was never trained, so it has no log Z_l table"),
    ("rescore-jrf-without-log-z", ["rescore", "{kn}", "{jrfsup}", "{nbest}"], {}, "has no log Z_l table"),
    ("too-long-for-jrf", ["score", "{jrf}", "{tmp}/long-jrf.txt"], {"long-jrf.txt": "the cat\nthe cat sat the dog ran\n"},
     "long-jrf.txt:2: a sentence of 6 tokens; this jrf run scores sentences of 1..5"),
]


@pytest.mark.parametrize("args, files, piece", [r[1:] for r in BAD_INPUTS], ids=[r[0] for r in BAD_INPUTS])
def test_bad_input_is_one_line_and_exit_2(args: list[str], files: dict[str, str | bytes], piece: str,
                                          runs: dict[str, Path], nbest: Path, tmp: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    for name, content in files.items():
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    names = {**{k: str(v) for k, v in runs.items()}, "tmp": str(tmp), "nbest": str(nbest)}
    capsys.readouterr()
    assert main([a.format(**names) for a in args]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.endswith("\n"), err
    assert piece in err, err


# --- applied without the training text (Task.load_applied) ----------------------------------------------------------


@pytest.mark.parametrize("kind", ["kn", "lstm", "trf", "electric"])
def test_a_run_scores_without_its_training_text_as_with_it(kind: str, runs: dict[str, Path], tmp: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """``ebms score`` builds the model from the run's ``vocab.json`` and checkpoint alone (no sentence read): with
    the training file moved away it prints what the full load's scorer gives, and loads the same weights."""
    lines = (tmp / "test.txt").read_text().splitlines()
    (tmp / "score-in.txt").write_text("\n".join(lines) + "\nthe zebra ran\n")
    full = load_run(runs[kind])
    expected = full.score([*lines, "the zebra ran"])
    with moved_away(tmp / "train.txt"):
        light = load_run(runs[kind], training_data=False)
        capsys.readouterr()
        assert main(["score", str(runs[kind]), str(tmp / "score-in.txt")]) == 0
        out, err = capsys.readouterr()
    assert light.data.size == 0 and light.data.vocab == full.data.vocab and light.sampler is None
    light_state, full_state = light.model.state_dict(), full.model.state_dict()
    assert light_state.keys() == full_state.keys()
    assert all(torch.equal(light_state[k], full_state[k]) for k in full_state)
    got = light.score([*lines, "the zebra ran"])
    assert torch.equal(got.log_prob, expected.log_prob) and torch.equal(got.oov, expected.oov)
    assert out.splitlines() == expected.tsv([*lines, "the zebra ran"]) and err.endswith(f"{expected.summary()}\n")


def test_a_trf_file_without_its_word_classes_takes_the_full_load(runs: dict[str, Path]) -> None:
    from ebms.cli.run import serving_task

    run = load_run(runs["trf"])
    task, stored = serving_task(run.config), {"vocab.json": (runs["trf"] / "vocab.json").read_bytes()}
    assert task.load_applied(run.config, stored) is not None
    payload = json.loads(stored["vocab.json"])
    del payload["classes"]
    assert task.load_applied(run.config, {"vocab.json": json.dumps(payload).encode()}) is None

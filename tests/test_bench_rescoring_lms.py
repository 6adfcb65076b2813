"""``benchmarks/rescoring_lms.py``: the interpolated rows, the words of a paired interval, and the loading of
an ``ebms train`` TRF run folder (read only; floors and ``<unk>`` as the other LMs) on a tiny run trained here
(fast); its quick mode with ``--trf-run`` ends with its JSON line (slow, needs PTB)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from _benchmarks import bench
from _tiny_trf_run import tiny_trf_run

from ebms.data.paths import data_root
from ebms.metrics.rescoring import evaluate_rescoring, lm_scores, simulate_nbest, tune_weights
from ebms.sequences import Sequences

ROOT = Path(__file__).resolve().parents[1]
SENTS = ["the cat sat", "the dog sat on the mat", "a cat ran", "the man ran home", "a dog ran home"]


def _bench():
    return bench("rescoring_lms")


def _tiny_trf_run(tmp: Path) -> Path:
    """A discrete-feature TRF run folder (``ebms train`` on five sentences, two steps; well under a second)."""
    return tiny_trf_run(tmp, SENTS * 3, ["the cat ran"])


def _tiny_electric_run(tmp: Path) -> Path:
    """An Electric run folder on the five sentences' words (``ebms train``, two steps)."""
    from ebms.cli.build import validate_config
    from ebms.cli.config import load_config
    from ebms.cli.run import train

    (tmp / "el-train.txt").write_text("\n".join(SENTS * 3) + "\n")
    (tmp / "el-test.txt").write_text("the cat ran\n")
    cfg = validate_config(load_config(None, [
        "data.name=text", f"language.train_path={tmp}/el-train.txt", f"language.test_path={tmp}/el-test.txt",
        "model.kind=electric", "objective.kind=nce", "electric.embedding_dim=8", "electric.layers=1",
        "electric.heads=2", "language.max_length=6", "train.steps=2", "train.batch_size=4",
        "train.checkpoint_every=1", "train.log_every=1", f"run.out_dir={tmp}", "run.name=el", "run.progress=false"]),
        device=False)
    return train(cfg)


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))}


def test_trf_run_loads_read_only_and_scores_unknown_words_as_unk_and_long_hypotheses_at_the_floor(
        tmp_path: Path) -> None:
    rl = _bench()
    run = _tiny_trf_run(tmp_path)
    before = _snapshot(run)
    label, trf, vocab, info = rl.load_trf_run(run)
    assert _snapshot(run) == before  # nothing written into the run folder
    assert label == "trf-discrete" and info["checkpoint_step"] == 2 and info["max_length"] == trf.max_length == 6
    lm = rl.NT.FixedZeta(trf, trf.log_normalisers().detach())
    hyps = [["the", "cat", "sat"], ["the", "zebra", "sat"], ["the", "<unk>", "sat"], ["the"] * 7]
    got = lm_scores(hyps, lm, vocabulary=vocab)
    x = vocab.encode(hyps[:1])
    with torch.no_grad():
        assert float(got[0]) == pytest.approx(float(trf.log_prob(x)[0]), abs=1e-4)  # log pi_l - E(x) - zeta_l
    assert float(got[1]) == float(got[2])  # an unknown word is <unk>
    assert float(got[3]) == -1e4 and rl.outside(SimpleNamespace(hypotheses=hyps), trf.max_length) == 1
    nb, _ = simulate_nbest([s.split() for s in SENTS], n=4, seed=0)
    assert rl.out_of_vocabulary(nb, vocab) == sum(1 for h in nb.hypotheses if any(w not in vocab for w in h))


def test_a_folder_without_a_run_is_one_line_naming_the_flag(tmp_path: Path) -> None:
    rl = _bench()
    with pytest.raises(SystemExit, match=r"--trf-run: .*no config.toml"):
        rl.load_trf_run(tmp_path)


def test_electric_run_scores_by_its_pll_with_unk_and_the_floor_and_a_trf_run_is_refused(tmp_path: Path) -> None:
    rl = _bench()
    run = _tiny_electric_run(tmp_path)
    before = _snapshot(run)
    model, vocab, info = rl.load_electric_run(run)
    assert _snapshot(run) == before and info["checkpoint_step"] == 2 and info["max_length"] == model.max_length
    hyps = [["the", "cat", "sat"], ["the", "zebra", "sat"], ["the", "<unk>", "sat"], ["the"] * 7, []]
    got = lm_scores(hyps, rl.pll_scorer(model.pseudo_log_likelihood, vocab, model.max_length))
    with torch.no_grad():
        assert float(got[0]) == pytest.approx(float(model.pseudo_log_likelihood(vocab.encode(hyps[:1]))[0]), abs=1e-6)
    assert float(got[1]) == pytest.approx(float(got[2]), abs=1e-6)  # an unknown word is <unk> (float32 batches)
    assert float(got[3]) == float(got[4]) == -1e4  # longer than max_length, empty: the floor
    with pytest.raises(SystemExit, match=r"^--electric-run: .*: expected an Electric run \(model.kind electric\); "
                                         r"got model.kind='trf'"):
        rl.load_electric_run(_tiny_trf_run(tmp_path))
    assert rl.without_trf("electric+lstm") == "lstm" and rl.without_trf("electric+kn5") == "kn5"


def test_paired_interval_words_say_not_significant_when_it_covers_zero() -> None:
    rl = _bench()
    assert rl.verdict(-0.5, 0.2) == "not significant" and rl.verdict(0.0, 0.3) == "not significant"
    assert rl.verdict(-0.9, -0.1) == "fewer errors than KN5" and rl.verdict(0.1, 0.4) == "more errors than KN5"


def test_combinations_are_the_monographs_pairs_and_triple() -> None:
    rl = _bench()
    assert rl.combinations("trf-discrete") == [("trf+kn5", ("trf-discrete", "kn5")), ("lstm+kn5", ("lstm", "kn5")),
                                               ("trf+lstm", ("trf-discrete", "lstm")),
                                               ("trf+lstm+kn5", ("trf-discrete", "lstm", "kn5"))]
    assert rl.combinations(None) == [("lstm+kn5", ("lstm", "kn5"))]
    assert rl.combinations("trf-discrete", lstm=False) == [("trf+kn5", ("trf-discrete", "kn5"))]
    assert rl.combinations(None, lstm=False) == []
    nd = "trf-dnce (re-estimated)"
    assert rl.combinations("trf-discrete", neural=nd)[-1] == ("ntrf+lstm", (nd, "lstm"))
    assert rl.combinations(nd, neural=nd) == rl.combinations(nd)  # the neural TRF is already trf
    assert rl.combinations("trf-discrete", lstm=False, neural=nd) == [("trf+kn5", ("trf-discrete", "kn5"))]


def test_each_interpolation_is_compared_with_itself_without_the_trf() -> None:
    rl = _bench()
    assert [rl.without_trf(n) for n in ("trf+kn5", "trf+lstm", "trf+lstm+kn5", "ntrf+lstm")] == [
        "kn5", "lstm", "lstm+kn5", "lstm"]
    assert [rl.without_trf(n) for n in ("lstm+kn5", "kn5", "trf-discrete")] == [None, None, None]


def test_interpolated_row_uses_the_dev_tuned_weights_on_test() -> None:
    rl = _bench()
    words = [s.split() for s in SENTS * 4]
    (dev, dev_refs), (tst, test_refs) = (simulate_nbest(words, n=5, seed=s, prefix=p) for s, p in ((0, "d"), (1, "t")))
    g = torch.Generator().manual_seed(0)
    scored = {k: (torch.randn(len(dev), generator=g, dtype=torch.float64),
                  torch.randn(len(tst), generator=g, dtype=torch.float64), 0.0) for k in ("trf", "lstm", "kn5")}
    tuned, res = rl.interpolate(dev, dev_refs, tst, test_refs, scored, ("trf", "kn5"), None, None, 20,
                                torch.Generator().manual_seed(1))
    assert tuned.search == "grid" and list(tuned.weights) == ["trf", "kn5"]
    again = tune_weights(dev, dev_refs, {"trf": scored["trf"][0], "kn5": scored["kn5"][0]}, lm_weights=rl.LAMBDAS,
                         length_penalties=rl.BETAS)
    assert (again.weights, again.length_penalty) == (tuned.weights, tuned.length_penalty)
    direct = evaluate_rescoring(tst, test_refs, {"trf": scored["trf"][1], "kn5": scored["kn5"][1]},
                                lm_weight=tuned.weights, length_penalty=tuned.length_penalty, samples=20)
    assert torch.equal(res.chosen, direct.chosen) and res.lm_weights == tuned.weights


@pytest.mark.slow
@pytest.mark.bench  # about a minute; the two tests below run the same script's other modes in CI
def test_quick_mode_with_a_trf_run_ends_with_every_row(tmp_path: Path) -> None:
    if not (data_root() / "ptb").is_dir():
        pytest.skip("PTB is not under the data root ($EBMS_DATA)")
    run = _tiny_trf_run(tmp_path)
    out = subprocess.run([sys.executable, "rescoring_lms.py", "--quick", "--no-save", "--budget", "1", "--sentences",
                          "20", "--samples", "50", "--trf-run", str(run)],
                         cwd=ROOT / "benchmarks", capture_output=True, text=True, timeout=600, check=True)
    line = json.loads(out.stdout.strip().splitlines()[-1])
    assert line["bench"] == "rescoring_lms" and line["quick"] is True
    for key in ("kn5", "lstm", "trf_discrete", "trf_kn5", "lstm_kn5", "trf_lstm", "trf_lstm_kn5"):
        assert 0.0 <= line[f"{key}_wer"] <= 100.0
    assert line["oracle_wer"] <= line["first_pass_wer"]
    assert "not significant" in out.stdout or "than KN5" in out.stdout


@pytest.mark.slow
def test_no_neural_mode_scores_kn5_and_the_run_only_and_refuses_to_run_without_one(tmp_path: Path) -> None:
    if not (data_root() / "ptb").is_dir():
        pytest.skip("PTB is not under the data root ($EBMS_DATA)")
    bad = subprocess.run([sys.executable, "rescoring_lms.py", "--quick", "--no-save", "--no-neural"],
                         cwd=ROOT / "benchmarks", capture_output=True, text=True, timeout=600)
    assert bad.returncode != 0 and bad.stderr.strip().splitlines()[-1].startswith("--no-neural: ")
    run = _tiny_trf_run(tmp_path)
    out = subprocess.run([sys.executable, "rescoring_lms.py", "--quick", "--no-save", "--no-neural", "--sentences",
                          "20", "--samples", "50", "--trf-run", str(run)],
                         cwd=ROOT / "benchmarks", capture_output=True, text=True, timeout=600, check=True)
    line = json.loads(out.stdout.strip().splitlines()[-1])
    assert {k for k in line if k.endswith("_wer")} == {"first_pass_wer", "oracle_wer", "kn5_wer", "trf_discrete_wer",
                                                       "trf_kn5_wer"}


@pytest.mark.slow
def test_models_folder_with_only_the_lstm_needs_a_trf_run_and_then_gives_every_combination(tmp_path: Path) -> None:
    if not (data_root() / "ptb").is_dir():
        pytest.skip("PTB is not under the data root ($EBMS_DATA)")
    models = tmp_path / "models"
    nt = bench("neural_trf_lstm")
    data = nt.load_ptb()
    test = data.test[torch.arange(20)]
    nt.train_all(data, ["lstm"], 1.0, 2, Sequences(test.tokens[:, : int(test.lengths.max())], test.lengths), 0,
                 models)
    assert sorted(p.name for p in models.iterdir()) == ["lstm.pt"]  # written whole (no .part left)
    bad = subprocess.run([sys.executable, "rescoring_lms.py", "--quick", "--no-save", "--models", str(models)],
                         cwd=ROOT / "benchmarks", capture_output=True, text=True, timeout=600)
    assert bad.returncode != 0 and "no nce.pt or dnce.pt and no --trf-run" in bad.stderr.strip().splitlines()[-1]
    run = _tiny_trf_run(tmp_path)
    out = subprocess.run([sys.executable, "rescoring_lms.py", "--quick", "--no-save", "--models", str(models),
                          "--sentences", "20", "--samples", "50", "--trf-run", str(run)],
                         cwd=ROOT / "benchmarks", capture_output=True, text=True, timeout=600, check=True)
    line = json.loads(out.stdout.strip().splitlines()[-1])
    assert {k for k in line if k.endswith("_wer")} == {
        "first_pass_wer", "oracle_wer", "kn5_wer", "lstm_wer", "trf_discrete_wer", "trf_kn5_wer", "lstm_kn5_wer",
        "trf_lstm_wer", "trf_lstm_kn5_wer"}

"""``benchmarks/trf_logz_ais.py``: the convergence table on an ``ebms train`` TRF run folder (``--run``,
``--temps-list``) trained here on a tiny corpus (lengths <= 3, so the exact log Z_l is enumerated), its
budget planning and its stops-moving words (fast); the neural path (``--neural``) on a tiny BiLSTM TRF
with an LSTM proposal built here (V = 6, lengths 1..3: exact by enumeration), its flag and folder
messages (fast); its quick modes on PTB (slow, need PTB)."""

from __future__ import annotations

import itertools
import json
import math
import re
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from _benchmarks import bench
from _tiny_trf_run import tiny_trf_run

from ebms.data.paths import data_root
from ebms.estimators import LengthConditionalLM, ais_log_z_per_length, importance_log_z_per_length, linear_betas
from ebms.metrics import trf_perplexity
from ebms.models.lm import LSTMLM, perplexity
from ebms.models.trf import TRF, Hidden2Scalar, exact_log_z
from ebms.sequences import Sequences

ROOT = Path(__file__).resolve().parents[1]
SENTS = ["the cat sat", "a dog ran", "the man", "a cat", "dogs", "the dog sat", "a man ran", "cat ran"]
TEST = ["the cat ran", "a dog", "the", "a man sat", "cat", "dogs ran"]
Z = 4.0  # z-value of the forward-AIS perplexity against the exact one (one comparison)


def _bench():
    return bench("trf_logz_ais")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A discrete-feature TRF run folder (``ebms train`` on eight sentences of 1-3 words, two steps)."""
    tmp = tmp_path_factory.mktemp("trf_run")
    return tiny_trf_run(tmp, SENTS * 3, TEST)


def _main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[dict, str]:
    bench = _bench()
    monkeypatch.setattr(sys, "argv", ["trf_logz_ais.py", *argv])
    torch_threads = torch.get_num_threads()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            bench.main()
    finally:
        torch.set_num_threads(torch_threads)
    out = capsys.readouterr().out
    return json.loads(out.strip().splitlines()[-1]), out


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))}


def test_convergence_table_on_a_run_folder_reaches_the_exact_perplexity_and_brackets_its_forward_figure(
        tiny_run: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    before = _snapshot(tiny_run)
    line, out = _main(monkeypatch, capsys, "--run", str(tiny_run), "--temps-list", "3,30", "--chains", "16",
                      "--reverse", "6", "--burn", "10", "--no-save")
    assert _snapshot(tiny_run) == before  # read only
    assert line["bench"] == "trf_ais_convergence" and line["temps_run"] == [3, 30] and line["checkpoint_step"] == 2
    from rescoring_lms import open_trf_run

    _, _, trf, data, _ = open_trf_run(tiny_run)
    test, V = data.held_out["test"], len(data.vocab)
    with torch.no_grad():
        exact = trf_perplexity(trf, test, log_z=exact_log_z(trf, V, trf.max_length))
    assert line["ppl_training_zeta"] == pytest.approx(exact.training.perplexity, abs=1e-4)  # rounded to 4 places
    low, high = line["ppl_ais_last_interval"]
    log_se = math.log(high / low) / (2 * 1.96)
    assert abs(math.log(line["ppl_ais_last"] / exact.reestimated.perplexity)) <= Z * log_se
    lo, hi = line["ppl_bracket"]  # each log Z_l bracket holds its forward value; PPL is increasing in each
    assert lo <= line["ppl_ais_last"] <= hi
    assert "changed by" in out and ("within the combined 95 %" in out or "outside the combined 95 %" in out)
    assert "stopped moving at K" in out or "still moving" in out
    assert re.search(r"KN5, the source's table +141\.19 +published, row KN5", out)
    assert "published rows: wbengine/SPMILM" in out


def test_a_zero_budget_runs_no_temperature_and_says_so(
        tiny_run: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    line, out = _main(monkeypatch, capsys, "--run", str(tiny_run), "--temps-list", "3,30", "--chains", "4",
                      "--budget", "0", "--no-save")
    assert line["temps_run"] == [] and line["ppl_ais_last"] is None and line["ppl_bracket"] is None
    assert out.count("not run (budget)") == 2 and "fewer than two temperatures completed" in out


def test_a_full_run_writes_a_small_record_with_the_table_the_bracket_and_the_published_rows(
        tiny_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _bench()
    import _common
    import _record

    monkeypatch.setattr(_record, "RECORDS_DIR", tmp_path / "records")
    monkeypatch.setattr(_record, "git_commit", lambda: (None, []))
    monkeypatch.setattr(_common, "RESULTS_DIR", tmp_path / "results")
    line, _ = _main(monkeypatch, capsys, "--run", str(tiny_run), "--temps-list", "3,10", "--chains", "4",
                    "--reverse", "2", "--burn", "2")
    path = tmp_path / "records" / "trf_ais_convergence.json"
    assert path.stat().st_size < _record.MAX_BYTES and (tmp_path / "results" / "trf_ais_convergence.json").is_file()
    rec = json.loads(path.read_text())
    figures = rec["figures"]
    assert rec["name"] == "trf_ais_convergence" and rec["settings"]["temps_list"] == [3, 10]
    assert [r["K"] for r in figures["table"]] == [3, 10] and figures["summary"] == line
    assert figures["bracket"]["K"] == 10 and len(figures["bracket"]["lower"]) == len(figures["lengths"])
    assert figures["published"]["kn5"]["value"] == 141.187 and "models_ppl.txt" in figures["published"]["kn5"]["source"]
    assert set(figures["per_temps"]) == {"3", "10"} and figures["probe"]["moves_per_s"] > 0


def test_plan_runs_a_temperature_only_when_it_and_the_reverse_run_after_it_fit() -> None:
    plan = _bench().plan_step
    assert plan(None, 5.0, 3.0, 50.0) == "more" and plan(None, 5.0, 3.0, None) == "last"
    assert plan(100.0, 20.0, 10.0, 80.0) == "more"  # 20 + 80 (next K with its reverse) fit
    assert plan(100.0, 20.0, 10.0, 81.0) == "last"  # the next does not: reverse here
    assert plan(100.0, 95.0, 10.0, None) == "last, no reverse"
    assert plan(100.0, 101.0, 0.0, None) == "not run"


def test_stops_moving_at_the_first_temperature_after_which_every_change_is_within_the_combined_interval() -> None:
    stops = _bench().stops_moving
    rows = [{"K": 100, "ppl": 140.0, "se": 1.0}, {"K": 300, "ppl": 150.0, "se": 1.0},
            {"K": 1000, "ppl": 151.0, "se": 1.0}, {"K": 3000, "ppl": 151.5, "se": 1.0}]
    pairs, verdict = stops(rows)
    assert [p["within"] for p in pairs] == [False, True, True]  # half width 1.96 sqrt(2) = 2.77
    assert pairs[0]["words"] == ("K 100 -> 300: changed by +10.00 (140.00 -> 150.00), outside the combined 95 % "
                                 "interval (+-2.77)")
    assert verdict.startswith("stopped moving at K = 300")
    _, verdict = stops(rows[:2])
    assert verdict.startswith("still moving: the last change (K 100 -> 300)")
    assert stops(rows[:1]) == ([], "fewer than two temperatures completed: no convergence criterion")


@pytest.mark.parametrize("text", ["300,100", "1,10", "100,100", "a,b", ""])
def test_bad_temps_list_is_one_line_naming_the_flag(text: str) -> None:
    with pytest.raises(SystemExit, match=r"^--temps-list: expected increasing integers >= 2 .*got"):
        _bench().parse_temps(text)


def test_a_folder_without_a_run_is_one_line_naming_the_run_flag(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"^--run: .*no config.toml"):
        _bench().build_run(tmp_path)


@pytest.mark.parametrize(("chains", "reverse", "bad"), [(1, 0, "1, 0"), (4, 1, "4, 1"), (4, -2, "4, -2")])
def test_bad_chain_counts_are_one_line_naming_both_flags(chains: int, reverse: int, bad: str) -> None:
    args = SimpleNamespace(chains=chains, reverse=reverse, quick=False)
    with pytest.raises(SystemExit, match=rf"^--chains, --reverse: expected chains >= 2 and reverse 0 or >= 2; got {bad}$"):
        _bench().convergence_counts(args)


@pytest.mark.parametrize(("lengths", "message"), [("2,9", r"^--lengths: no test sentence of length \[9\]"),
                                                  ("2,x", r"^--lengths: expected integers separated by commas")])
def test_bad_lengths_are_one_line_naming_the_flag(lengths: str, message: str) -> None:
    test = Sequences(torch.ones(3, 3, dtype=torch.long), torch.tensor([1, 2, 3]))
    with pytest.raises(SystemExit, match=message):
        _bench().chosen_lengths(SimpleNamespace(lengths=lengths, quick=False), test, 3)


def test_a_class_kernel_without_classes_and_two_models_are_one_line_each(
        tiny_run: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    args = SimpleNamespace(kernel="class", sweeps=1, trials=1)
    with pytest.raises(SystemExit, match=r"^--kernel class: the model has no word classes"):
        _bench().make_kernel(args, {"classes": None, "unigram": torch.ones(4)})
    with pytest.raises(SystemExit, match=r"^--model, --run: expected one model; got both$"):
        _main(monkeypatch, capsys, "--run", str(tiny_run), "--model", "x.pt", "--no-save")


@pytest.mark.parametrize(("argv", "got"), [(["--name", "Bad/Name", "--temps-list", "2,4"], "'Bad/Name'"),
                                           (["--name", "trf_ais_rev"], "'trf_ais_rev' without --temps-list")])
def test_a_bad_record_name_is_one_line(tiny_run: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str], argv: list[str], got: str) -> None:
    with pytest.raises(SystemExit, match=rf"^--name: expected lower-case letters, digits and _ with --temps-list; "
                                         rf"got {got}$"):
        _main(monkeypatch, capsys, "--run", str(tiny_run), "--no-save", *argv)


@pytest.mark.slow
def test_quick_mode_ends_with_its_json_line() -> None:
    if not (data_root() / "ptb").is_dir():
        pytest.skip("PTB is not under the data root ($EBMS_DATA)")
    out = subprocess.run([sys.executable, "trf_logz_ais.py", "--quick", "--no-save"], cwd=ROOT / "benchmarks",
                         capture_output=True, text=True, timeout=600, check=True)
    line = json.loads(out.stdout.strip().splitlines()[-1])
    assert line["bench"] == "trf_logz_ais" and line["quick"] is True and line["ais_lengths"] == line["lengths"]
    assert line["ppl_is"] > 0 and line["ppl_ais"] > 0


# -- the neural path (--neural) ----------------------------------------------------------------------------------

V_N, L_N = 6, 3  # tiny neural TRF: tokens 1..5, lengths 1..3 (155 sentences: exact log Z_l by enumeration)
Z_N = 4.0  # z-value of each AIS estimate (forward, reverse) against the exact log Z_l (three lengths each)
TEST_N = [[1, 2, 3], [4], [2, 5], [3, 3, 1], [5], [1, 4], [2, 2, 2], [5, 1]]


def _tiny_neural() -> tuple[TRF, LSTMLM]:
    """A BiLSTM TRF whose energies spread over a few nats (readout scaled up) and a small untrained LSTM."""
    torch.manual_seed(0)
    energy = Hidden2Scalar.bilstm(V_N, 4, 4)
    with torch.no_grad():
        energy.readout.weight.mul_(12.0)  # log-weight sd of IS from the LSTM: 1.3, 2.0, 2.7 nats at lengths 1, 2, 3
    return TRF(energy, torch.ones(L_N), V_N).eval(), LSTMLM(V_N, embedding_dim=4, hidden_size=8).eval()


def _tiny_d(folder: Path, kind: str) -> dict[str, Any]:
    """What ``build_neural`` returns, for the tiny model (``folder``: only its name is read, for ``_cf<C>``)."""
    bench = _bench()
    trf, lstm = _tiny_neural()
    saved = importance_log_z_per_length(trf, LengthConditionalLM(lstm), 50, generator=torch.Generator().manual_seed(3))
    test = Sequences.from_lists(TEST_N)
    unigram = torch.bincount(test.tokens[test.mask()], minlength=V_N).double() + 1.0
    unigram[0] = 0.0
    return {"trf": trf, "classes": None, "vocab_size": V_N, "order": None, "unigram": unigram, "steps": 3,
            "train": test, "test": test, "proposal": bench.TrimmedLM(lstm),
            "neural": {"kind": kind, "dir": str(folder), "suffix": bench.neural_suffix(folder), "lstm": lstm,
                       "lstm_record": {"steps": 4, "test_perplexity": 5.5, "tokens": 20},
                       "record": {"steps": 3, "ess_median": 40.0, "logz_stderr": saved.stderrs().tolist()},
                       "saved_log_z": saved.values().float()}}


def _exact_samples(trf: TRF, n: int, g: torch.Generator) -> Sequences:
    """``n`` exact draws of the model at each length 1..L (categorical over the enumerated sentences)."""
    parts = []
    for ell in range(1, L_N + 1):
        xs = torch.tensor(list(itertools.product(range(1, V_N), repeat=ell)))
        with torch.no_grad():
            e = trf.energy(Sequences(xs, validate=False)).double()
        idx = torch.multinomial(torch.softmax(-e, 0), n, replacement=True, generator=g)
        parts.append(Sequences(xs[idx], validate=False).pad_to(L_N))
    return Sequences.cat(parts)


def test_trimmed_lm_proposal_gives_the_library_log_q_on_padded_batches_and_from_its_memo() -> None:
    bench = _bench()
    _, lstm = _tiny_neural()
    ref, q = LengthConditionalLM(lstm), bench.TrimmedLM(lstm, chunk_tokens=5)  # chunks of 1-5 rows
    x = ref.sample(40, torch.Generator().manual_seed(0), lengths=torch.randint(1, 4, (40,))).pad_to(9)
    first = q.log_prob(x)
    assert q.scored == len({tuple(r[:n].tolist()) for r, n in zip(x.tokens, x.lengths)})  # each distinct once
    torch.testing.assert_close(first, ref.log_prob(x), rtol=0, atol=1e-5)  # float32 log-sum-exp
    again = q.log_prob(x[torch.arange(39, -1, -1)])
    assert q.scored == len({tuple(r[:n].tolist()) for r, n in zip(x.tokens, x.lengths)})  # all from the memo
    assert torch.equal(again, first.flip(0))
    with pytest.raises(ValueError, match=r"^x: expected token ids in \[0, 6\) other than the boundary 0"):
        q.log_prob(Sequences(torch.tensor([[1, 0, 2]]), torch.tensor([3]), validate=False))


def test_forward_ais_from_an_lstm_proposal_meets_the_exact_log_z_of_a_neural_trf_and_reverse_ais_lies_above() -> None:
    bench = _bench()
    trf, lstm = _tiny_neural()
    exact = exact_log_z(trf, V_N, L_N)
    d = {"neural": {}, "classes": None, "unigram": torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0, 5.0])}
    kernel = bench.make_kernel(SimpleNamespace(kernel="unigram", sweeps=1, trials=1), d)
    q = bench.TrimmedLM(lstm)
    g = torch.Generator().manual_seed(1)
    target = _exact_samples(trf, 32, g)
    with torch.no_grad():  # a TRF with a BiLSTM energy: moves score whole variant sentences (no local token_logits)
        r = ais_log_z_per_length(trf, q, 64, linear_betas(20), lengths=[1, 2, 3], kernel=kernel,
                                 target_samples=target, generator=g)
    for ell, est in zip(r.lengths, r.estimates):
        truth, st = float(exact[ell - 1]), est.settings
        assert est.ess > 16 and abs(est.estimate - truth) <= Z_N * est.stderr  # forward: a lower bound in mean
        # reverse from exact samples: a stochastic upper bound; above the truth up to Z_N of its stderr, and near it
        assert truth - Z_N * st["reverse_stderr"] <= st["reverse"] <= truth + Z_N * st["reverse_stderr"]
        assert est.lower <= truth <= est.upper
    assert q.scored <= sum(5 ** n for n in range(1, L_N + 1))  # every sentence scored by the LSTM at most once


def test_neural_work_counts_one_lstm_trial_sentence_and_two_bilstm_sentences_per_position_move() -> None:
    work = _bench().neural_work
    # 2 chains at lengths 2 and 3, K = 3 (2 transitions), 1 sweep, 1 trial: s1 = 5, s2 = 13
    lm, energy = 2 * (2 * 5 + 2 * 13), 2 * (5 + 2 * (2 * 5 + 2 * 13))
    assert work(2, [2, 3], 3, 1, 1, rho=0.0) == lm and work(2, [2, 3], 3, 1, 1, rho=0.5) == lm + 0.5 * energy
    assert work(2, [2, 3], 3, 1, 1, rho=0.5, burn=4) == lm + 0.5 * (energy + 2 * (5 + 4 * 2 * 13))


@pytest.mark.parametrize(("name", "suffix"), [("neural_trf_lstm", ""), ("neural_trf_lstm_cf50", "_cf50"),
                                              ("neural_trf_lstm_quick_mix0.1_cf200", "_cf200")])
def test_the_record_suffix_keeps_the_folder_cf_classes(tmp_path: Path, name: str, suffix: str) -> None:
    assert _bench().neural_suffix(tmp_path / name) == suffix


@pytest.mark.parametrize(("argv", "message"), [
    (["--neural", "d", "--model", "x.pt"], r"^--model, --neural: expected one model; got both$"),
    (["--run", "r", "--neural", "d"], r"^--run, --neural: expected one model; got both$"),
    (["--neural-kind", "nce"], r"^--neural-kind: expected it with --neural DIR; got --neural-kind nce alone$")])
def test_neural_flag_conflicts_are_one_line_naming_the_flags(
        argv: list[str], message: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit, match=message):
        _main(monkeypatch, capsys, *argv, "--no-save")


def test_a_neural_folder_without_the_models_is_one_line_naming_it_and_the_command(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit, match=rf"^--neural: {re.escape(str(tmp_path))}: no lstm.pt or dnce.pt \(written by "
                                         rf"`python benchmarks/neural_trf_lstm.py --save {re.escape(str(tmp_path))}`\)$"):
        _main(monkeypatch, capsys, "--neural", str(tmp_path), "--no-save")
    (tmp_path / "lstm.pt").write_bytes(b"")
    with pytest.raises(SystemExit, match=r"^--neural: .*: no nce.pt \(written by"):
        _bench().check_neural_folder(tmp_path, "nce")
    with pytest.raises(SystemExit, match=r"^--kernel class: a neural TRF has no word classes; use --kernel unigram$"):
        _bench().make_kernel(SimpleNamespace(kernel="class", sweeps=1, trials=1),
                             {"neural": {}, "classes": None, "unigram": torch.ones(4)})


@pytest.mark.parametrize("kind", ["dnce", "nce"])
def test_neural_convergence_table_writes_its_own_record_with_the_lstm_beside_and_a_labelled_zeta_row(
        kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    bench = _bench()
    import _common
    import _record

    monkeypatch.setattr(_record, "RECORDS_DIR", tmp_path / "records")
    monkeypatch.setattr(_record, "git_commit", lambda: (None, []))
    monkeypatch.setattr(_common, "RESULTS_DIR", tmp_path / "results")
    folder = tmp_path / "neural_trf_lstm_cf7"
    d = _tiny_d(folder, kind)
    monkeypatch.setattr(bench, "build_neural", lambda f, k, quick: d if (f, k) == (folder, kind) else None)
    line, out = _main(monkeypatch, capsys, "--neural", str(folder), "--neural-kind", kind, "--temps-list", "3,20",
                      "--chains", "64", "--reverse", "8", "--burn", "5")
    name = f"trf_ais_convergence_neural_{kind}_cf7"
    assert (tmp_path / "records" / f"{name}.json").is_file() and (tmp_path / "results" / f"{name}.json").is_file()
    assert not (tmp_path / "records" / "trf_ais_convergence.json").exists()
    rec = json.loads((tmp_path / "records" / f"{name}.json").read_text())
    assert rec["name"] == name and rec["settings"]["neural_kind"] == kind and rec["figures"]["summary"] == line
    assert "published" not in rec["figures"] and "KN5" not in out and "published rows" not in out
    trf, test = d["trf"], d["test"]
    with torch.no_grad():
        exact = trf_perplexity(trf, test, log_z=exact_log_z(trf, V_N, L_N))
    assert line["bench"] == name and line["temps_run"] == [3, 20] and line["training_zeta_is_perplexity"] == (kind == "nce")
    assert line["training_zeta_figure"] == pytest.approx(exact.training.perplexity, abs=1e-4)  # rounded to 4 places
    if kind == "dnce":
        assert line["ppl_training_zeta"] is None and "TRF (DNCE), training zeta: NOT a perplexity" in out
    else:
        assert line["ppl_training_zeta"] == line["training_zeta_figure"] and "TRF (NCE), training zeta " in out
    lstm = perplexity(d["neural"]["lstm"], [test]).perplexity
    assert line["ppl_lstm_exact"] == pytest.approx(lstm, abs=1e-4) and line["ppl_lstm_saved"] == 5.5
    assert re.search(r"LSTM \(the proposal\), exact +\d", out) and "TRF, IS log Z_l saved with the model" in out
    low, high = line["ppl_ais_last_interval"]
    log_se = math.log(high / low) / (2 * 1.96)
    assert abs(math.log(line["ppl_ais_last"] / exact.reestimated.perplexity)) <= Z * log_se
    lo, hi = line["ppl_bracket"]
    assert lo <= line["ppl_ais_last"] <= hi
    probe = rec["figures"]["probe"]
    assert probe["unit"] == "token-evals" and probe["energy_sentences_per_s"] > 0 and probe["rho"] > 0


def test_neural_is_vs_ais_mode_reports_the_lstm_beside(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    bench = _bench()
    d = _tiny_d(tmp_path / "ntl", "dnce")
    monkeypatch.setattr(bench, "build_neural", lambda f, k, quick: d)
    line, out = _main(monkeypatch, capsys, "--neural", str(tmp_path / "ntl"), "--temps", "10", "--chains", "32",
                      "--is-draws", "64", "--reverse", "4", "--burn", "3", "--no-save")
    assert line["neural"] == "dnce" and line["ais_lengths"] == line["lengths"] == 3
    assert line["ppl_lstm_exact"] == pytest.approx(perplexity(d["neural"]["lstm"], [d["test"]]).perplexity, abs=1e-3)
    assert "LSTM (the proposal), exact perplexity" in out and line["ppl_is"] > 0 and line["ppl_ais"] > 0


@pytest.mark.slow
@pytest.mark.bench  # about a minute on two idle cores; the plain quick mode above runs in CI
def test_neural_quick_mode_on_a_quick_neural_trf_lstm_folder_ends_with_its_json_line(tmp_path: Path) -> None:
    if not (data_root() / "ptb").is_dir():
        pytest.skip("PTB is not under the data root ($EBMS_DATA)")
    folder = tmp_path / "ntl_quick"
    subprocess.run([sys.executable, "neural_trf_lstm.py", "--quick", "--save", str(folder)], cwd=ROOT / "benchmarks",
                   capture_output=True, text=True, timeout=600, check=True)
    out = subprocess.run([sys.executable, "trf_logz_ais.py", "--quick", "--neural", str(folder), "--temps-list", "3,6",
                          "--chains", "3", "--reverse", "2", "--no-save"], cwd=ROOT / "benchmarks",
                         capture_output=True, text=True, timeout=600, check=True)
    line = json.loads(out.stdout.strip().splitlines()[-1])
    assert line["bench"] == "trf_ais_convergence_neural_dnce" and line["temps_run"] == [3, 6]
    assert line["ppl_ais_last"] > 0 and line["ppl_bracket"] is not None and line["ppl_lstm_exact"] > 0
    assert "forward token-evals" in out.stdout and "TRF (DNCE), training zeta: NOT a perplexity" in out.stdout


# -- the independence kernel (--kernel independence) -------------------------------------------------------------

def test_the_independence_flag_builds_an_independence_sampler_from_the_ais_proposal(tmp_path: Path) -> None:
    import argparse

    from ebms.samplers.metropolis import MetropolisIndependence

    bench = _bench()
    parser = argparse.ArgumentParser()
    bench.add_args(parser)
    args = parser.parse_args(["--kernel", "independence", "--sweeps", "3"])
    d = _tiny_d(tmp_path / "ntl", "dnce")
    kernel = bench.make_kernel(args, d)
    assert isinstance(kernel, MetropolisIndependence) and kernel.proposal is d["proposal"]
    assert repr(kernel.token_space) == repr(d["trf"].space) and bench.kernel_steps(args) == 3  # --sweeps: steps per temperature
    assert parser.parse_args([]).kernel == "unigram" and bench.kernel_steps(parser.parse_args(["--sweeps", "3"])) == 1


def test_forward_ais_with_the_independence_kernel_meets_the_exact_log_z_of_a_neural_trf() -> None:
    bench = _bench()
    trf, lstm = _tiny_neural()
    exact = exact_log_z(trf, V_N, L_N)
    q = bench.TrimmedLM(lstm)
    kernel = bench.make_kernel(SimpleNamespace(kernel="independence"), {"proposal": q, "trf": trf})
    g = torch.Generator().manual_seed(2)
    target = _exact_samples(trf, 32, g)
    with torch.no_grad():
        r = ais_log_z_per_length(trf, q, 64, linear_betas(12), lengths=[1, 2, 3], kernel=kernel,
                                 target_samples=target, generator=g)
    for ell, est in zip(r.lengths, r.estimates):
        truth, st = float(exact[ell - 1]), est.settings
        assert est.ess > 16 and abs(est.estimate - truth) <= Z_N * est.stderr  # Z_N = 4 stderr (three lengths)
        assert abs(st["reverse"] - truth) <= Z_N * st["reverse_stderr"]  # from exact samples: also near the truth
        assert est.lower <= truth <= est.upper


def test_independence_work_equals_a_hand_count_of_draws_scores_and_energies() -> None:
    work = _bench().independence_work
    # 2 chains per length, one group at lengths 2 and 3 (s1 = 5; each draw samples 2 lengths x 3 tokens = 6 per
    # chain), K = 3 (2 transitions), 2 steps each: 4 steps per chain
    lm = 2 * 5 + 2 * 4 * 5  # the base draw scored, then each step's proposal (the current one from the memo)
    sampled = 2 * 6 + 2 * 4 * 6  # the base draw, then one draw per step
    energy = 2 * 5 + 2 * 2 * (2 * 5) + 2 * 4 * 5  # base slope; each transition's kernel start and slope; each step
    assert work(2, [[2, 3]], 3, 2, rho=0.0, sigma=0.0) == lm
    assert work(2, [[2, 3]], 3, 2, rho=0.5, sigma=2.0) == lm + 0.5 * energy + 2.0 * sampled
    # reverse, burn 3 (6 more steps): the start scored once (no base draw), its kernel start under the model
    lm_r, sampled_r = 2 * 5 + 2 * 10 * 5, 2 * 10 * 6
    energy_r = 2 * 5 + 2 * 5 + 2 * 2 * (2 * 5) + 2 * 10 * 5
    assert work(2, [[2, 3]], 3, 2, rho=0.5, sigma=2.0, burn=3) == lm_r + 0.5 * energy_r + 2.0 * sampled_r
    # two groups: each draws to its own longest length
    assert work(1, [[1], [3]], 2, 1, rho=0.0, sigma=1.0) == (4 + 4) + (1 + 3) * 2


def test_neural_convergence_table_with_the_independence_kernel_meets_the_exact_perplexity(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    bench = _bench()
    d = _tiny_d(tmp_path / "ntl", "nce")
    monkeypatch.setattr(bench, "build_neural", lambda f, k, quick: d)
    line, out = _main(monkeypatch, capsys, "--neural", str(tmp_path / "ntl"), "--neural-kind", "nce", "--kernel",
                      "independence", "--temps-list", "3,12", "--chains", "64", "--reverse", "8", "--burn", "5",
                      "--no-save")
    trf, test = d["trf"], d["test"]
    with torch.no_grad():
        exact = trf_perplexity(trf, test, log_z=exact_log_z(trf, V_N, L_N))
    low, high = line["ppl_ais_last_interval"]
    log_se = math.log(high / low) / (2 * 1.96)
    assert abs(math.log(line["ppl_ais_last"] / exact.reestimated.perplexity)) <= Z * log_se
    lo, hi = line["ppl_bracket"]
    assert lo <= line["ppl_ais_last"] <= hi and line["temps_run"] == [3, 12]
    assert "1 step(s) of the independence kernel per temperature" in out and "8/length after 5 steps at beta = 1" in out


def test_a_run_folder_with_the_independence_kernel_meets_the_exact_perplexity(
        tiny_run: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    line, out = _main(monkeypatch, capsys, "--run", str(tiny_run), "--kernel", "independence", "--temps-list", "3,30",
                      "--chains", "16", "--reverse", "6", "--burn", "10", "--no-save")
    from rescoring_lms import open_trf_run

    _, _, trf, data, _ = open_trf_run(tiny_run)
    with torch.no_grad():
        exact = trf_perplexity(trf, data.held_out["test"], log_z=exact_log_z(trf, len(data.vocab), trf.max_length))
    low, high = line["ppl_ais_last_interval"]
    log_se = math.log(high / low) / (2 * 1.96)
    assert abs(math.log(line["ppl_ais_last"] / exact.reestimated.perplexity)) <= Z * log_se  # Z = 4
    assert line["temps_run"] == [3, 30] and "forward sentence-tokens" in out and "independence kernel" in out

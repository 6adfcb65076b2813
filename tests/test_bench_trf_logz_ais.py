"""``benchmarks/trf_logz_ais.py``: the convergence table on an ``ebms train`` TRF run folder (``--run``,
``--temps-list``) trained here on a tiny corpus (lengths <= 3, so the exact log Z_l is enumerated), its
budget planning and its stops-moving words (fast); its quick mode on PTB (slow, needs PTB)."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from _tiny_trf_run import tiny_trf_run

from ebms.data.paths import data_root
from ebms.metrics import trf_perplexity
from ebms.models.trf import exact_log_z
from ebms.sequences import Sequences

ROOT = Path(__file__).resolve().parents[1]
SENTS = ["the cat sat", "a dog ran", "the man", "a cat", "dogs", "the dog sat", "a man ran", "cat ran"]
TEST = ["the cat ran", "a dog", "the", "a man sat", "cat", "dogs ran"]
Z = 4.0  # z-value of the forward-AIS perplexity against the exact one (one comparison)


def _bench():
    bench = str(ROOT / "benchmarks")
    if bench not in sys.path:
        sys.path.insert(0, bench)
    import trf_logz_ais

    return trf_logz_ais


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


@pytest.mark.slow
def test_quick_mode_ends_with_its_json_line() -> None:
    if not (data_root() / "ptb").is_dir():
        pytest.skip("PTB is not under the data root ($EBMS_DATA)")
    out = subprocess.run([sys.executable, "trf_logz_ais.py", "--quick", "--no-save"], cwd=ROOT / "benchmarks",
                         capture_output=True, text=True, timeout=600, check=True)
    line = json.loads(out.stdout.strip().splitlines()[-1])
    assert line["bench"] == "trf_logz_ais" and line["quick"] is True and line["ais_lengths"] == line["lengths"]
    assert line["ppl_is"] > 0 and line["ppl_ais"] > 0

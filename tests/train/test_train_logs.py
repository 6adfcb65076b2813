"""The log as a table (``read_metrics``), its CSV and TensorBoard writers, and the curves' figure."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
from pathlib import Path

import pytest
from _train_helpers import NoisyNCE, make_trainer, metric_lines

from ebms.errors import DataError
from ebms.train import Callback, CSVLog, PeriodicEval, TensorBoardLog, read_metrics
from ebms.viz import plot_metrics


class KillAt(Callback):
    """Raises KeyboardInterrupt inside the callbacks of one step (the step is logged but not checkpointed)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, trainer, step, metrics):
        if step == self.step:
            raise KeyboardInterrupt


def _rows(path: Path, drop: tuple[str, ...] = ("elapsed_s",)) -> list[dict[str, str]]:
    rows = list(csv.DictReader(io.StringIO(path.read_text())))
    return [{k: v for k, v in r.items() if k not in drop} for r in rows]


def test_the_table_is_the_logged_step_lines_with_the_evaluations_merged(tmp_path: Path) -> None:
    ev = PeriodicEval(lambda t: {"score": float(t.step) / 2}, every=10)
    make_trainer(NoisyNCE(), tmp_path, callbacks=[ev]).fit()
    table = read_metrics(tmp_path)
    lines = metric_lines(tmp_path)
    assert table.steps == [r["step"] for r in lines] == list(range(5, 41, 5))
    for rec in lines:
        row = table.rows[rec["step"]]
        flat = {**{k: v for k, v in rec.items() if k not in ("step", "metrics", "lr_groups")}, **rec["metrics"]}
        assert {k: row[k] for k in flat} == flat and set(row) == {*flat, "elapsed_s", *(["eval/score"] * (rec["step"] % 10 == 0))}
    assert table.column("eval/score") == ([10, 20, 30, 40], [5.0, 10.0, 15.0, 20.0])
    assert table.columns[-1] == "elapsed_s" and "eval/score" in table.columns
    with pytest.raises(KeyError, match="'nope': not a logged metric; the log has loss"):
        table.column("nope")


def test_a_step_written_twice_keeps_the_later_row_and_steps_come_out_in_order(tmp_path: Path) -> None:
    lines = [{"step": 10, "loss": 1.0}, {"step": 20, "loss": 2.0}, {"event": "resume", "step": 10},
             {"step": 20, "loss": 3.0, "gap": "nan"}, {"step": 15, "loss": 4.0},
             {"event": "eval", "step": 15, "values": {"f1": 0.5}}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    t = read_metrics(tmp_path / "metrics.jsonl")
    assert t.steps == [10, 15, 20]
    assert t.rows[20]["loss"] == 3.0 and t.rows[20]["gap"] != t.rows[20]["gap"]  # nan kept as nan
    assert t.rows[15] == {"loss": 4.0, "eval/f1": 0.5}
    assert t.csv_text().splitlines() == ["step,loss,gap,eval/f1", "10,1.0,,", "15,4.0,,0.5", "20,3.0,nan,"]


@pytest.mark.parametrize(("text", "expect"), [
    ("not json\n", ":1: not a JSON line"),
    ('{"loss": 1}\n', ":1: expected a JSON object with an integer 'step'"),
    ('{"step": 1, "loss": 1}\n[1]\n', ":2: expected a JSON object"),
])
def test_a_file_that_is_not_a_metrics_log_is_named_with_its_line(tmp_path: Path, text: str, expect: str) -> None:
    (tmp_path / "metrics.jsonl").write_text(text)
    with pytest.raises(DataError, match=expect):
        read_metrics(tmp_path)


def test_a_missing_log_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="metrics.jsonl: no such file"):
        read_metrics(tmp_path)


def test_the_csv_is_the_table_and_a_killed_and_resumed_run_writes_the_uninterrupted_one(tmp_path: Path) -> None:
    ev = PeriodicEval(lambda t: {"score": float(t.step)}, every=10)
    full = make_trainer(NoisyNCE(), tmp_path / "full", callbacks=[ev, CSVLog()])
    full.fit()
    assert (tmp_path / "full" / "metrics.csv").read_text() == read_metrics(tmp_path / "full").csv_text()
    part = tmp_path / "part"
    with pytest.raises(KeyboardInterrupt):  # steps 21..25 logged after the checkpoint at 20
        make_trainer(NoisyNCE(), part, callbacks=[PeriodicEval(lambda t: {"score": float(t.step)}, every=10),
                                                  CSVLog(), KillAt(25)]).fit()
    assert [r["step"] for r in _rows(part / "metrics.csv")][-1] == "25"
    make_trainer(NoisyNCE(), part, callbacks=[PeriodicEval(lambda t: {"score": float(t.step)}, every=10),
                                              CSVLog()]).fit(resume=True)
    assert _rows(part / "metrics.csv") == _rows(tmp_path / "full" / "metrics.csv")
    assert len(_rows(part / "metrics.csv")) == 8


def test_the_writers_change_no_number_of_training(tmp_path: Path) -> None:
    make_trainer(NoisyNCE(), tmp_path / "a").fit()
    make_trainer(NoisyNCE(), tmp_path / "b", callbacks=[CSVLog(tmp_path / "x.csv")]).fit()
    assert metric_lines(tmp_path / "a") == metric_lines(tmp_path / "b")
    assert (tmp_path / "x.csv").is_file() and not (tmp_path / "b" / "metrics.csv").exists()


def test_a_trainer_without_a_run_folder_writes_no_csv(tmp_path: Path) -> None:
    cb = CSVLog()
    make_trainer(NoisyNCE(), None, callbacks=[cb], checkpoint_every=None).fit()
    assert cb._target is None


@pytest.mark.skipif(importlib.util.find_spec("tensorboard") is None, reason="tensorboard is not installed")
def test_tensorboard_events_hold_the_logged_scalars_and_a_resume_purges_the_undone_steps(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    def scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
        acc = EventAccumulator(str(folder / "tensorboard"))
        acc.Reload()
        return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}

    make_trainer(NoisyNCE(), tmp_path / "full", callbacks=[TensorBoardLog()]).fit()
    full = scalars(tmp_path / "full")
    table = read_metrics(tmp_path / "full")
    steps, losses = table.column("loss")
    assert [s for s, _ in full["loss"]] == steps
    assert [v for _, v in full["loss"]] == pytest.approx(losses, rel=1e-6)  # float32 in the event file
    with pytest.raises(KeyboardInterrupt):
        make_trainer(NoisyNCE(), tmp_path / "part", callbacks=[TensorBoardLog(), KillAt(25)]).fit()
    make_trainer(NoisyNCE(), tmp_path / "part", callbacks=[TensorBoardLog()]).fit(resume=True)
    assert scalars(tmp_path / "part")["loss"] == full["loss"]


def test_the_curves_figure_has_a_panel_per_metric(tmp_path: Path) -> None:
    make_trainer(NoisyNCE(), tmp_path, callbacks=[PeriodicEval(lambda t: {"score": 1.0}, every=20)]).fit()
    table = read_metrics(tmp_path)
    fig = plot_metrics(table)
    assert [ax.get_title() for ax in fig.axes] == [c for c in table.columns if c != "elapsed_s"]
    fig = plot_metrics(table, ["loss", "eval/score"], ncols=1)
    assert len(fig.axes) == 2 and len(fig.axes[1].lines[0].get_xdata()) == 2
    with pytest.raises(KeyError, match="'x': not a logged metric"):
        plot_metrics(table, ["x"])
    with pytest.raises(ValueError, match="columns: expected at least one"):
        plot_metrics(table, [])

"""``ebms train``/``eval`` of the text-classification task (issue 28): both objectives on a tiny CSV, the figures
``eval`` writes, a resume, and the packaged recipe's configuration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ebms.cli.config import load_config
from ebms.cli.main import main, recipe_path

WORDS = {"positive": "good", "negative": "bad", "neutral": "the"}


def _csv(tmp: Path) -> Path:
    rows = ["sentiment,text"] + [f"{c},{w} day {i} {w if i % 3 else 'it'}"
                                 for i, (c, w) in enumerate(list(WORDS.items()) * 30)]
    p = tmp / "t.csv"
    p.write_text("\n".join(rows) + "\n")
    return p


def _args(tmp: Path, name: str, *extra: str) -> list[str]:
    return ["train", f"run.out_dir={tmp}/runs", f"run.name={name}", "run.progress=false", "data.name=tweet-sentiment",
            f"textclass.csv={_csv(tmp)}", "textclass.dev_size=20", "textclass.test_size=30", "textclass.min_count=1",
            "textclass.embedding_dim=8", "textclass.hidden=8", "train.batch_size=8", "train.steps=6",
            "train.checkpoint_every=3", *extra]


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:TemperatureScaling.fit")  # 20 dev rows of a 6-step model
@pytest.mark.parametrize("extra", [(), ("objective.kind=residual-joint", "objective.nu=2", "textclass.noise_steps=3",
                                        "textclass.energy=scalar")], ids=["ce", "residual-joint"])
def test_train_eval_and_resume(tmp_path: Path, extra: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(_args(tmp_path, "r", *extra)) == 0
    run = tmp_path / "runs" / "r"
    figures = json.loads((run / "eval.json").read_text())
    got = figures.get("figures", figures)
    for key in ("accuracy", "ece_classwise", "ece_top_label", "nll", "temperature", "ece_classwise_ts"):
        assert key in json.dumps(got), key
    assert (run / "vocab.json").is_file()
    assert main(["eval", str(run)]) == 0
    assert main([*_args(tmp_path, "r", *extra), "train.steps=9", "--resume"]) == 0
    assert "step 9" in capsys.readouterr().out


def test_the_recipe_is_a_valid_configuration() -> None:
    cfg = load_config(recipe_path("residual-jem-tweets"))
    assert (cfg.data.name, cfg.model.kind, cfg.objective.kind) == ("tweet-sentiment", "text-classifier",
                                                                   "residual-joint")
    assert cfg.sections["textclass"].energy == "sharp_hidden"

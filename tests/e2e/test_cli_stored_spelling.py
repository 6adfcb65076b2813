"""End-to-end: run folders written before each language kind got its own section still work (issue 25).

Before issue 25 every language kind read one ``[language]`` section; a run folder of that time has
those keys in its ``config.toml`` (every one written, at its default where the kind did not read
it) and in every checkpoint's identity. :func:`_old_spelling` turns a run folder trained now into
exactly that (the checkpoint records re-hashed), and the tests check that ``eval``, a resume and a
residual run on such a base give what the same folder gives in today's spelling, and that the
identity checks still compare the moved keys (one that differs is named in today's spelling).
"""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from ebms.cli._config_toml import _toml_value
from ebms.cli.main import main
from ebms.cli.run import key_role
from ebms.cli.tasks import KIND_TASKS, registered, task_sections
from ebms.train import CheckpointStore
from ebms.train.checkpoint import canonical_digest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

WORDS = ("the", "cat", "dog", "sat", "ran", "on", "a", "mat")
#: the sections that took the language kinds' keys out of [language].
KIND_SECTIONS = ("ngram", "lm", "trf", "residual", "electric")


def _text(path: Path, n: int, seed: int) -> None:
    r = random.Random(seed)
    path.write_text("".join(" ".join(r.choice(WORDS) for _ in range(r.randint(2, 7))) + "\n" for _ in range(n)))


@pytest.fixture()
def lm(tmp_path: Path) -> list[str]:
    """Overrides for tiny text files (train 120, test 20 sentences) and a run folder of the test."""
    _text(tmp_path / "train.txt", 120, 0)
    _text(tmp_path / "test.txt", 20, 1)
    return ["data.name=text", f"language.train_path={tmp_path}/train.txt", f"language.test_path={tmp_path}/test.txt",
            f"run.out_dir={tmp_path}/runs", "run.progress=false", "train.batch_size=8", "train.checkpoint_every=2",
            "train.log_every=1"]


def _old_defaults() -> dict[str, Any]:
    """Every key the kinds' sections took from ``[language]``, with its default (the same in every section)."""
    moved = {old.split(".", 1)[1] for t in registered() for old in t.kind_moves()}
    sections = task_sections()
    return {f.name: getattr(sections[s](), f.name) for s in KIND_SECTIONS
            for f in dataclasses.fields(sections[s]) if f.name in moved}


def _old_role(name: str) -> str:
    """The role ``language.NAME`` had: that of the key in any section that holds it now (roles did not change)."""
    return next(key_role(f"{s}.{name}") for s in KIND_SECTIONS if name in task_sections()[s].__dataclass_fields__)


def _old_spelling(run: Path) -> None:
    """Rewrite ``run`` as ebms wrote it before issue 25: its kind's keys back in ``[language]`` (every other
    such key at its default) in ``config.toml``, and under ``language.`` in every checkpoint's identity."""
    table = tomllib.loads((run / "config.toml").read_text())
    task = KIND_TASKS[(table["data"]["name"], table["model"]["kind"])]
    back = {new: old for old, new in task.kind_moves().items()}
    defaults = _old_defaults()
    for section in KIND_SECTIONS:
        for key, value in table.pop(section, {}).items():
            if f"{section}.{key}" in back:
                table["language"][key] = value
    table["language"] = {**defaults, **table["language"]}
    lines = [line for name, values in table.items() for line in (
        f"[{name}]", *(f"{k} = {_toml_value(v)}" for k, v in values.items() if v is not None), "")]
    (run / "config.toml").write_text("\n".join(lines))
    for path in sorted((run / "checkpoints").glob("ckpt-*.json")):
        record = json.loads(path.read_text())
        identity = {back.get(k, k): v for k, v in record["identity"].items()
                    if k.split(".")[0] not in KIND_SECTIONS or k in back}
        for name, value in defaults.items():
            if _old_role(name) in ("model", "training"):
                identity.setdefault(f"language.{name}", value)
        record["identity"] = identity
        record["record_sha256"] = canonical_digest(record)
        path.write_text(json.dumps(record))


def _weights(run: Path) -> dict[str, torch.Tensor]:
    return CheckpointStore(run / "checkpoints").load().tensors


def _figures(run: Path) -> Any:
    return json.loads((run / "eval.json").read_text())["figures"]


def test_a_trf_run_of_the_old_spelling_evaluates_and_resumes_as_before(lm: list[str], tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    runs = tmp_path / "runs"
    trf = [*lm, "model.kind=trf", "trf.classes=3", "trf.chains=4", "trf.logz_samples=20", "train.steps=2"]
    assert main(["train", *trf, "run.name=new", "--no-eval"]) == 0
    shutil.copytree(runs / "new", runs / "old")
    _old_spelling(runs / "old")
    text = (runs / "old" / "config.toml").read_text()
    assert "[trf]" not in text and "chains = 4" in text and "mask_rate = 0.15" in text
    assert "language.chains" in CheckpointStore(runs / "old" / "checkpoints").load().identity
    for name in ("new", "old"):
        assert main(["eval", str(runs / name)]) == 0
    assert _figures(runs / "old") == _figures(runs / "new")
    for name in ("new", "old"):  # a resume: the user's config in today's spelling, the folder in the old one
        assert main(["train", *trf, f"run.name={name}", "train.steps=4", "--resume", "--no-eval"]) == 0
    new, old = _weights(runs / "new"), _weights(runs / "old")
    assert new.keys() == old.keys() and all(torch.equal(new[k], old[k]) for k in new)
    assert "trf.chains" in CheckpointStore(runs / "old" / "checkpoints").load().identity  # written as today


def test_a_moved_key_that_differs_from_the_checkpoint_is_named_in_todays_spelling(
        lm: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "runs" / "old"
    assert main(["train", *lm, "model.kind=trf", "trf.classes=3", "trf.chains=4", "train.steps=2", "run.name=old",
                 "--no-eval"]) == 0
    _old_spelling(run)
    config = run / "config.toml"
    config.write_text(config.read_text().replace("chains = 4", "chains = 8"))
    capsys.readouterr()
    assert main(["eval", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "checkpoint of another run: trained with trf.chains=4 (here 8)" in err, err


def test_a_residual_run_on_an_old_base_and_itself_old_evaluates_and_resumes_as_before(
        lm: list[str], tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    assert main(["train", *lm, "model.kind=lstm", "lm.embedding_dim=8", "lm.layers=1", "lm.hidden=8",
                 "train.steps=2", "run.name=base", "--no-eval"]) == 0
    _old_spelling(runs / "base")
    assert "embedding_dim = 8" in (runs / "base" / "config.toml").read_text()
    residual = [*lm, "model.kind=residual", "objective.kind=nce", f"residual.base_run={runs}/base",
                "residual.embedding_dim=8", "residual.layers=1", "residual.prefix_length=2", "residual.horizon=2",
                "residual.negatives=2", "residual.joint_samples=4"]
    assert main(["train", *residual, "train.steps=2", "run.name=new", "--no-eval"]) == 0
    shutil.copytree(runs / "new", runs / "old")
    _old_spelling(runs / "old")
    assert "base_run = " in (runs / "old" / "config.toml").read_text()
    for name in ("new", "old"):
        assert main(["eval", str(runs / name)]) == 0
    assert _figures(runs / "old") == _figures(runs / "new")
    for name in ("new", "old"):
        assert main(["train", *residual, f"run.name={name}", "train.steps=4", "--resume", "--no-eval"]) == 0
    new, old = _weights(runs / "new"), _weights(runs / "old")
    assert new.keys() == old.keys() and all(torch.equal(new[k], old[k]) for k in new)

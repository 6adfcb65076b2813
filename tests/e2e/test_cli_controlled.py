"""End-to-end: controlled generation on the command line (``model.kind = "controlled"``).

A tiny ``addition-base`` and the packaged ``controlled-addition`` recipe on 1-digit sums: ``eval``'s
plain-sampling figures equal those recomputed from the loaded base LM's own draws with string
arithmetic, every share is a share, and ``sample`` marks each sentence as its last digit says.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch

from ebms.cli.generation import EVAL_SEED_OFFSET
from ebms.cli.main import main
from ebms.cli.run import load_run

SMALL = ["run.progress=false", "generation.digits=1", "generation.n_train=60", "data.n_test=30", "generation.dim=16",
         "train.batch_size=16", "train.log_every=10", "train.checkpoint_every=20"]
CONTROL = ["generation.mm_epochs=2", "generation.cold_steps=6", "generation.layers=1"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("controlled")
    assert main(["train", "addition-base", f"run.out_dir={root}", *SMALL, "generation.heads=2", "generation.hidden=32",
                 "train.steps=40"]) == 0
    assert main(["train", "controlled-addition", f"run.out_dir={root}", f"generation.base_run={root}/addition-base",
                 *SMALL, *CONTROL, "train.steps=20"]) == 0
    return root


def _met(text: str, digit: int) -> bool:
    return re.fullmatch(r"\d\+\d=\d\d", text) is not None and text[-1] == str(digit)


def _right(text: str) -> bool:
    m = re.fullmatch(r"(\d)\+(\d)=(\d\d)", text)
    return m is not None and int(m[1]) + int(m[2]) == int(m[3])


@pytest.mark.slow
def test_eval_plain_figures_are_the_base_draws_checked_by_string_arithmetic(runs: Path) -> None:
    figures = json.loads((runs / "controlled-addition" / "eval.json").read_text())["figures"]
    for m in ("plain", "mm", "cold"):
        for k in ("met", "met_right", "right"):
            assert 0.0 <= figures[f"{m}_{k}"] <= 1.0
        assert figures[f"{m}_ppl"] >= 1.0
    cfg, _, data, _ = load_run(runs / "controlled-addition")
    lm, n = data.cache["base"], cfg.data.n_test
    g = torch.Generator().manual_seed(cfg.run.seed + EVAL_SEED_OFFSET)
    with torch.no_grad():
        draw = lm.sample(n, g, max_length=data.task.length, truncate=True)
    texts = data.task.decode(draw)
    met = [_met(t, b % 10) for b, t in enumerate(texts)]
    assert figures["plain_met"] == pytest.approx(sum(met) / n)
    assert figures["plain_met_right"] == pytest.approx(sum(a and _right(t) for a, t in zip(met, texts)) / n)
    assert figures["plain_right"] == pytest.approx(sum(map(_right, texts)) / n)
    if all(len(t) == data.task.length for t in texts):  # short draws are padded before scoring
        with torch.no_grad():
            lp = float(lm.log_prob(draw).double().sum())
        assert figures["plain_ppl"] == pytest.approx(math.exp(-lp / (n * (data.task.length + 1))), rel=1e-6)


@pytest.mark.slow
def test_sample_marks_each_sentence_by_its_last_digit(runs: Path) -> None:
    assert main(["sample", str(runs / "controlled-addition"), "--n", "12", *CONTROL]) == 0
    lines = next((runs / "controlled-addition").glob("samples-n12-*.txt")).read_text().splitlines()
    assert len(lines) == 12
    for b, line in enumerate(lines):
        text, rest = line.split("  ends in ")
        digit, mark = rest.split("? ")
        assert int(digit) == b % 10 and mark == ("met" if _met(text, b % 10) else "missed")

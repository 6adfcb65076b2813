"""benchmarks/compare_runs.py: the before tree's spelling of split sections, and what counts as a difference."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import compare_runs  # noqa: E402


def test_old_spelling_moves_only_the_split_sections_to_language():
    assert compare_runs.old_spelling("lm.earm_start=1") == "language.earm_start=1"
    assert compare_runs.old_spelling("residual.base_run=/x/y.z") == "language.base_run=/x/y.z"
    assert compare_runs.old_spelling("trf.chains=4") == "language.chains=4"
    assert compare_runs.old_spelling("language.limit=300") == "language.limit=300"
    assert compare_runs.old_spelling("generation.earm_start=1") == "generation.earm_start=1"
    assert compare_runs.old_spelling("run.progress=false") == "run.progress=false"


def _run(root: Path, loss: float, w: torch.Tensor, time: float) -> Path:
    root.mkdir(parents=True)
    (root / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": loss, "time": time}) + "\n")
    save_file({"model/w": w}, str(root / "ckpt-000000001-aa.safetensors"))
    return root


def test_differences_ignore_wall_time_and_catch_metrics_tensors_and_files(tmp_path):
    w = torch.arange(4.0)
    a = _run(tmp_path / "a", 0.5, w, time=1.0)
    assert compare_runs.differences(a, _run(tmp_path / "b", 0.5, w.clone(), time=9.0)) == []
    assert compare_runs.differences(a, _run(tmp_path / "c", 0.25, w, time=1.0)) == ["metrics.jsonl differs"]
    changed = compare_runs.differences(a, _run(tmp_path / "d", 0.5, w + 1e-7, time=1.0))
    assert changed == ["ckpt-000000001-aa.safetensors: tensors differ: model/w"]
    e = _run(tmp_path / "e", 0.5, w, time=1.0)
    (e / "extra.txt").write_text("x")
    assert compare_runs.differences(a, e) == ["files: ['extra.txt']"]

"""Smoke test of ``benchmarks/residual_text.py --quick`` (one corpus): it runs and ends with its JSON line.

The quick mode trains a base LM, a residual energy and evaluates the perplexity interval; on 2
busy cores that takes about half a minute per corpus, so the test is marked slow.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ebms.data.paths import data_root

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_residual_text_quick_mode_ends_with_a_summary_whose_bounds_are_ordered() -> None:
    if not (data_root() / "tinyshakespeare" / "input.txt").is_file():
        pytest.skip("Tiny Shakespeare is not under the data root ($EBMS_DATA)")
    out = subprocess.run([sys.executable, "residual_text.py", "--quick", "--corpus", "shakespeare", "--no-save"],
                         cwd=ROOT / "benchmarks", capture_output=True, text=True, timeout=600, check=True)
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["bench"] == "residual_text"
    s = summary["shakespeare"]
    assert s["joint_lower"] <= s["joint_upper"]  # lower <= upper holds for every draw (Jensen)
    assert set(s["gaps"]) == {"n10", "n100"} and all(g >= 0 for g in s["gaps"].values())
    assert s["base_ppl"] > 1.0

"""``benchmarks/recovery_scale.py --quick`` trains both energies a few steps and prints its table (slow: MNIST)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ebms.data.paths import data_root

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.bench  # about 1.5 min on two idle cores; `make test-bench` runs it
def test_recovery_scale_quick_mode_prints_both_energies_and_the_data() -> None:
    if not (data_root() / "mnist").is_dir():
        pytest.skip("MNIST is not under the data root ($EBMS_DATA)")
    out = subprocess.run([sys.executable, "recovery_scale.py", "--quick"], cwd=ROOT / "benchmarks",
                         capture_output=True, text=True, timeout=600, check=True).stdout
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.split()[:1] in
            (["groupnorm"], ["no_norm"], ["data"])}
    assert set(rows) == {"groupnorm", "no_norm", "data"}
    assert len(rows["groupnorm"]) == 6 + 6 + 6 and len(rows["data"]) == 6  # levels 5..0 twice, six energies
    assert all(float(v) > 0 for v in rows["data"])

"""PCD on eight Gaussians (the packaged demo recipe, unchanged) gets close to the true density.

The figure of merit is exact up to grid error: the model's test NLL uses a
log Z computed on a 400x400 grid (error reported ~1e-4 nats), on 20,000 held-out
points (standard error ~0.008 nats), beside the true mixture's NLL on the same
points. The issue's bar is a gap below 0.3 nats; the demo recipe measured
+0.13 (1 thread) and +0.19 (2 threads) on this machine.
"""

import json

import pytest

from ebms.cli.main import main


@pytest.mark.slow
def test_pcd_on_eight_gaussians_is_within_0_3_nats_of_the_true_density(tmp_path, capsys):
    assert main(["demo", f"run.out_dir={tmp_path}", "run.progress=false"]) == 0
    report = json.loads((tmp_path / "demo" / "eval.json").read_text())
    gap = report["model_nll"] - report["true_nll"]
    print(f"model NLL {report['model_nll']:.4f} ± {report['model_nll_stderr']:.4f}, true {report['true_nll']:.4f}, gap {gap:+.4f}")
    assert report["log_z_error"] < 0.01
    # the gap is a difference of two means on the same points; its own noise is well below 0.05
    assert gap < 0.3
    assert gap > -0.05, "a model cannot beat the true density by more than the noise"

"""PCD on eight Gaussians (the packaged demo recipe, unchanged) gets close to the true density.

The figure of merit is exact up to grid error: the model's test NLL uses a log Z computed on a 400x400
grid (error reported ~1e-4 nats), on 20,000 held-out points (standard error ~0.008 nats), beside the
true mixture's NLL on the same points. The issue's bar is a gap below 0.3 nats.

The demo is trained once per CI run, not twice: README.md's first transcript is ``ebms demo``'s
output, and ``tests/docs/test_transcripts.py`` (slow set) reruns the demo and requires every number
of that output to be the same (the block allows no tolerance, which this test also checks). So the
bar is checked here on the README's figures, which that test ties to a fresh run; before session 36
this file trained the demo a second time (~2 min of CI).
"""

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _demo_block():
    spec = importlib.util.spec_from_file_location("_transcripts_for_demo", ROOT / "tests" / "docs" / "test_transcripts.py")
    assert spec is not None and spec.loader is not None
    mod = sys.modules.get(spec.name) or importlib.util.module_from_spec(spec)
    if spec.name not in sys.modules:
        sys.modules[spec.name] = mod  # its dataclasses look their module up there
        spec.loader.exec_module(mod)
    (block,) = [b for b in mod.parse_blocks(ROOT / "README.md") if b.commands() == ["ebms demo"]]
    return block


def check_demo_output(text: str) -> float:
    """The gap the demo's output reports, after checking it against the bar (AssertionError if not met)."""
    assert "demo: PCD on 'eight_gaussians'" in text
    model = re.search(r"test NLL \(grid-normalised\), step \d+: ([0-9.]+) ± ([0-9.]+) nats.*grid log Z error ([0-9.e+-]+)\]", text)
    true = re.search(r"true density NLL on the same points:\s+([0-9.]+) nats\s+\(gap ([+-][0-9.]+)\)", text)
    assert model is not None and true is not None, text
    nll, stderr, log_z_error = (float(g) for g in model.groups())
    true_nll, gap = float(true.group(1)), float(true.group(2))
    assert abs(gap - (nll - true_nll)) < 1e-3  # the printed gap is the difference of the printed figures
    assert log_z_error < 0.01 and stderr < 0.05
    assert gap < 0.3
    assert gap > -0.05, "a model cannot beat the true density by more than the noise"
    return gap


def test_pcd_on_eight_gaussians_is_within_0_3_nats_of_the_true_density():
    block = _demo_block()
    # the transcript test compares this block with a fresh run exactly: no tolerance, nothing masked
    assert (block.rtol, block.atol, block.vary, block.slow, block.bench) == (0.0, 0.0, None, True, False)
    assert 0 < check_demo_output(block.content) < 0.3


@pytest.mark.parametrize(("old", "new"), [("(gap +", "(gap +9"), ("e-05]", "e+00]"),
                                          ("true density NLL", "true NLL")])
def test_the_bar_fails_on_a_worse_or_unreadable_output(old, new):
    text = _demo_block().content
    assert old in text
    with pytest.raises(AssertionError):
        check_demo_output(text.replace(old, new))

"""Long estimators show progress through :func:`ebms._progress.progress_bar` when asked, and only then:
off a terminal each bar writes ``\\n``-terminated lines (here one per update, ``TQDM_MININTERVAL=0``),
never a ``\\r`` redraw; by default they print nothing."""

from __future__ import annotations

import sys

import pytest
import torch
from _residual_standin import ResidualStandIn

from ebms.distributions import Gaussian, NGram
from ebms.energy import from_fn
from ebms.estimators.ais import GeometricPath, ais, linear_betas, reverse_ais
from ebms.estimators.evaluation import enumerated_log_z, exact_log_z
from ebms.estimators.exact import exact_log_partition
from ebms.estimators.importance import importance_log_partition, importance_log_weights
from ebms.estimators.residual_log_z import residual_log_z, residual_perplexity, stepwise_log_prob_bounds
from ebms.estimators.sequence_log_z import ais_log_z_per_length, importance_log_z_per_length
from ebms.samplers import MALA
from ebms.sequences import Sequences
from ebms.spaces import Spins, TokenSequences

V, L = 4, 3
QUADRATIC = from_fn(lambda x: 0.5 * (x ** 2).sum(-1))
SPINS = from_fn(lambda s: -(s * torch.linspace(-1, 1, 6)).sum(-1))


def _sentence_energy(x: Sequences) -> torch.Tensor:
    return 0.3 * (x.tokens * x.mask()).sum(-1).double()


def _g() -> torch.Generator:
    return torch.Generator().manual_seed(0)


CALLS = {
    "ais": lambda p: ais(GeometricPath(QUADRATIC, Gaussian(torch.zeros(2), std=2.0), MALA(step_size=0.2)), 8,
                         linear_betas(5), generator=_g(), **p),
    "reverse_ais": lambda p: reverse_ais(GeometricPath(QUADRATIC, Gaussian(torch.zeros(2), std=2.0),
                                                       MALA(step_size=0.2)), torch.randn(8, 2, generator=_g()),
                                         linear_betas(5), generator=_g(), **p),
    "exact_log_partition": lambda p: exact_log_partition(SPINS, Spins(6), chunk_size=16, **p),
    "evaluation.exact_log_z": lambda p: exact_log_z(SPINS, Spins(6), **p),
    "evaluation.enumerated_log_z": lambda p: enumerated_log_z(SPINS, Spins(6), **p),
    "importance_log_weights": lambda p: importance_log_weights(QUADRATIC, Gaussian(torch.zeros(2), std=1.5), 64,
                                                               generator=_g(), batch_size=16, **p),
    "importance_log_partition": lambda p: importance_log_partition(QUADRATIC, Gaussian(torch.zeros(2), std=1.5), 64,
                                                                   generator=_g(), batch_size=16, **p),
    "importance_log_z_per_length": lambda p: importance_log_z_per_length(
        _sentence_energy, NGram.uniform(V, end=False), 32, space=TokenSequences(V, L), generator=_g(),
        batch_size=16, **p),
    "ais_log_z_per_length": lambda p: ais_log_z_per_length(
        _sentence_energy, NGram.uniform(V, end=False), 4, linear_betas(3), space=TokenSequences(V, L),
        generator=_g(), **p),
    "stepwise_log_prob_bounds": lambda p: stepwise_log_prob_bounds(
        ResidualStandIn(), Sequences.from_lists([[2, 1], [3]]), Sequences.from_lists([[1, 2], [3]]), 4,
        generator=_g(), **p),
}


@pytest.fixture(autouse=True)
def _line_per_update(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    monkeypatch.setenv("TQDM_MININTERVAL", "0")


@pytest.mark.parametrize("name", sorted(CALLS))
def test_progress_writes_lines_without_carriage_returns(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    CALLS[name]({"progress": True})
    err = capsys.readouterr().err
    assert err.endswith("\n") and err.count("\n") >= 1, err
    assert "\r" not in err


@pytest.mark.parametrize("name", sorted(CALLS))
def test_no_progress_by_default(name: str, capsys: pytest.CaptureFixture[str],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    CALLS[name]({})
    assert capsys.readouterr().err == ""


def test_progress_on_a_terminal_is_a_live_bar(capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    CALLS["importance_log_partition"]({"progress": True})
    err = capsys.readouterr().err
    assert "\r" in err and "importance" in err


def test_residual_estimators_are_silent_by_default_even_when_long(capsys: pytest.CaptureFixture[str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Library calls print nothing unless asked (the CLI passes ``run.progress``), even past the 20 calls
    after which ``progress=None`` shows a bar."""
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    model, c = ResidualStandIn(), Sequences.from_lists([[1], [2, 3]] * 30)
    x = Sequences.from_lists([[1, 2], [3]] * 30)
    residual_log_z(model, c, 4, generator=_g(), batch_size=8)  # 30 calls of 8 rows
    residual_perplexity(model, c, x, 4, generator=_g(), batch_size=8)
    stepwise_log_prob_bounds(model, c, x, 4, generator=_g(), batch_size=8)
    assert capsys.readouterr().err == ""

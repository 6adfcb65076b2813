"""Objective buffers created on first use (persistent chains, replay memories) across a divergence
restore to the step-0 snapshot and across a step-0 checkpoint.

At step 0 such a buffer is an empty placeholder; the first call fills it. The guard's step-0
snapshot and a checkpoint written before the first step therefore hold the empty placeholder while
the live objective holds the filled buffer. Restoring must make the buffer empty again, so the
objective re-creates it from the (restored) generator and data exactly as it did the first time:
the run then equals a fresh run started with the lowered learning rate, step line for step line.
Three objectives: a minimal one with a lazily created buffer (:class:`NoisyNCE`), AugSA's
trans-dimensional chains and the PCD-RBM persistent chain.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch
from _train_helpers import FailAt, NoisyNCE, events, make_data, metric_lines
from torch import nn

from ebms.models import BernoulliRBM
from ebms.models.trf import TRF, DiscreteFeatures, feature_templates
from ebms.objectives import RBMContrastiveDivergence
from ebms.objectives.trf_augsa import AugSA
from ebms.sequences import Sequences
from ebms.train import DistributedContext, Trainer

LR = 0.2
STEPS = 6


class FailAtSetsGradients(FailAt):
    """:class:`FailAt` for objectives that fill ``.grad`` themselves (no ``backward()``)."""

    sets_gradients: ClassVar[bool] = True


def _noisy_nce() -> tuple[nn.Module, nn.Module, Any]:
    from ebms.nets import GaussianEnergy

    return NoisyNCE(), GaussianEnergy(2), make_data()


def _augsa() -> tuple[nn.Module, nn.Module, Any]:
    vocab, length = 3, 3
    corpus = Sequences.from_lists([[1, 2], [2, 1, 1], [1], [2, 2], [1, 1, 2], [2], [1, 2, 2], [2, 1]])
    feats = DiscreteFeatures.fit(corpus, vocab, feature_templates(("w",), order=2), bos=True)
    trf = TRF(feats, torch.tensor([0.3, 0.4, 0.3], dtype=torch.float64), vocab)
    return AugSA(chains=6), trf, (corpus.pad_to(length).tokens, corpus.lengths)


def _pcd_rbm() -> tuple[nn.Module, nn.Module, Any]:
    g = torch.Generator().manual_seed(0)
    model = BernoulliRBM(6, 3, generator=g)
    return RBMContrastiveDivergence(persistent=True), model, torch.bernoulli(torch.full((32, 6), 0.3), generator=g)


CASES: dict[str, tuple[Callable[[], tuple[nn.Module, nn.Module, Any]], str, int]] = {
    # name: (factory, name of the lazily created buffer, batch size)
    "generic": (_noisy_nce, "memory", 16),
    "augsa": (_augsa, "chain_tokens", 4),
    "pcd-rbm": (_pcd_rbm, "chain", 8),
}


def _trainer(case: str, run_dir: Path | None, *, fail: set[int], lr: float = LR, **kw: Any) -> Trainer:
    factory, _, batch = CASES[case]
    objective, model, data = factory()
    wrap = FailAtSetsGradients if getattr(objective, "sets_gradients", False) else FailAt
    opts: dict[str, Any] = dict(
        optimizer=lambda groups: torch.optim.SGD(groups, lr=lr), steps=STEPS, batch_size=batch, run_dir=run_dir,
        seed=0, log_every=1, checkpoint_every=None, progress=False, device="cpu", distributed=DistributedContext(),
    )
    opts.update(kw)
    return Trainer(wrap(objective, fail), model, data, **opts)


def _buffer(t: Trainer, case: str) -> torch.Tensor:
    return t.objective.inner.get_buffer(CASES[case][1])


@pytest.mark.parametrize("case", sorted(CASES))
def test_guard_restores_step_zero_snapshot_with_an_empty_buffer(case: str, tmp_path: Path) -> None:
    # call 3 fails after calls 1-2 filled the buffer; the only snapshot is the one taken before
    # step 1 (no checkpoint steps), so the guard goes back to step 0, where the buffer was empty
    t = _trainer(case, tmp_path / "a", fail={3})
    assert _buffer(t, case).numel() == 0
    result = t.fit()
    (ev,) = events(tmp_path / "a", "diverged")
    assert (ev["step"], ev["failed_step"], ev["action"], result.restores) == (0, 3, "restore", 1)
    assert _buffer(t, case).numel() > 0 and result.step == STEPS
    # the replay re-created the buffer from the restored generator: identical to a fresh run at lr / 2
    _trainer(case, tmp_path / "b", fail=set(), lr=LR / 2).fit()
    lines = metric_lines(tmp_path / "a")
    assert [r["step"] for r in lines] == list(range(1, STEPS + 1))
    assert lines == metric_lines(tmp_path / "b")


@pytest.mark.parametrize("case", sorted(CASES))
def test_step_zero_checkpoint_with_an_empty_buffer_resumes_exactly(case: str, tmp_path: Path) -> None:
    ref = _trainer(case, tmp_path / "ref", fail=set())
    ref.fit()
    t = _trainer(case, tmp_path / "run", fail=set())
    path = t.save_checkpoint()
    assert path is not None and _buffer(t, case).numel() == 0
    t.fit(resume=True)  # resume from the step-0 checkpoint into a fresh objective
    assert metric_lines(tmp_path / "run") == metric_lines(tmp_path / "ref")
    assert _buffer(t, case).numel() > 0
    # the same checkpoint into the trained objective (buffer filled): the buffer goes back to empty
    t.restore(path)
    assert t.step == 0 and _buffer(t, case).numel() == 0
    t.fit(resume=path)
    assert metric_lines(tmp_path / "run") == metric_lines(tmp_path / "ref")


def test_other_buffer_shape_mismatches_are_still_errors(tmp_path: Path) -> None:
    from ebms.errors import CheckpointError

    t = _trainer("generic", tmp_path / "a", fail=set(), steps=2)
    t.fit()
    other = _trainer("generic", tmp_path / "b", fail=set(), steps=2)
    other.objective.inner.memory = torch.zeros(3, 2)
    with pytest.raises(CheckpointError, match=r"objective.inner.memory: shape mismatch: checkpoint has \(4, 2\), "
                                              r"current objective has \(3, 2\)"):
        other.restore(t.store.latest())

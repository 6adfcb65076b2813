r"""The two starts of a JRF's noise-contrastive training: a fitted noise LM and a fitted :math:`\zeta`.

* :func:`pretrain_noise_lm` fits the noise language model :math:`q` to the unlabelled sentences by
  likelihood: an in-memory :class:`~ebms.train.Trainer` run of Adam on the mean sentence negative
  log-likelihood :math:`-\frac1B \sum_b \log q(x_b)` over batches drawn with replacement.
* :func:`init_log_z` sets :math:`\zeta_l` of a :class:`~ebms.models.JRF` so that its marginal
  matches that noise on average per length, so that NCE/DNCE (:class:`~ebms.objectives.JRFObjective`)
  starts with its classifier near chance instead of saturated.

References:
    Song, Y., Ou, Z., Liu, Z. & Yang, S. (2020). "Upgrading CRFs to JRFs and its benefits to
    sequence modeling and labeling." ICASSP.
    Ou (2024), "Energy-Based Models with Applications to Speech and Language Processing", §5.3.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ebms._checks import check_int, check_positive
from ebms.capabilities import SupportsLogProb
from ebms.models.jrf import JRF
from ebms.objectives import LossOutput
from ebms.sequences import Sequences
from ebms.train import Callback, DistributedContext, Trainer

__all__ = ["init_log_z", "pretrain_noise_lm"]


@torch.no_grad()
def init_log_z(model: JRF, noise: Any, x: Sequences, *, chunk: int = 256) -> Tensor:
    r"""Set :math:`\zeta` so that the marginal matches the noise on ``x``: returns the new ``log_z`` ``(L,)``.

    :math:`\zeta_l` becomes the mean of :math:`\log\pi_l + U_\theta(x) - \log q(x)` over the
    sentences of ``x`` of length :math:`l` (so :math:`\log p_\xi(l, x) = \log q(x)` on average there);
    a length without a sentence takes a least-squares straight line in :math:`l` through all of them.
    Noise-contrastive training then starts with its classifier near chance instead of saturated:
    the default :math:`l \log((V-1)K)` is far off for a network at its random initialisation.

    Args:
        model: the JRF (``model.log_z`` is overwritten; train/eval mode restored).
        noise: a language model with ``log_prob(Sequences) -> (B,)`` (e.g. :class:`~ebms.models.lm.LSTMLM`).
        x: unlabelled sentences ``Sequences (N, T)`` of lengths ``1..L``, ids ``1..V-1``.
        chunk: sentences scored at once.
    """
    x = Sequences.coerce(x, name="x", pairs=False)
    if x.batch_size == 0:
        raise ValueError("x: expected at least one sentence to fit log_z on; got an empty batch")
    L = model.max_length
    if int(x.lengths.max()) > L:
        raise ValueError(f"x: a sentence of length {int(x.lengths.max())} > the model's max_length {L}")
    was_training = model.training
    model.eval()
    diffs = []
    for start in range(0, x.batch_size, check_int(chunk, "chunk", minimum=1)):
        part = x[start:start + chunk]
        part = Sequences(part.tokens[:, : int(part.lengths.max())], part.lengths)
        diffs.append((model.log_pi[part.lengths - 1] - model.energy(part) - noise.log_prob(part)).double())
    model.train(was_training)
    d, n = torch.cat(diffs).cpu(), x.lengths.cpu()
    sums = torch.zeros(L + 1, dtype=torch.float64).index_add_(0, n, d)
    counts = torch.bincount(n, minlength=L + 1).double()
    design = torch.stack([n.double(), torch.ones_like(d)], 1)
    slope, intercept = torch.linalg.lstsq(design, d.unsqueeze(1)).solution.squeeze(1)
    line = slope * torch.arange(L + 1, dtype=torch.float64) + intercept
    zeta = torch.where(counts > 0, sums / counts.clamp(min=1), line)[1:]
    model.log_z.copy_(zeta.to(model.log_z))
    return model.log_z.detach().clone()


class _SentenceNLL(nn.Module):
    """Mean negative log-likelihood per sentence, :math:`-\\frac1B\\sum_b \\log q(x_b)`, of a batch
    ``(tokens (B, T), lengths (B,))`` (the trainer's tensors); ``model.log_prob(Sequences) -> (B,)``."""

    def forward(self, model: SupportsLogProb, batch: tuple[Tensor, Tensor], *,
                generator: torch.Generator | None = None) -> LossOutput:
        return LossOutput(-model.log_prob(Sequences(*batch)).mean())


class _Losses(Callback):
    """Collects each step's loss."""

    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_step_end(self, trainer: Trainer, step: int, metrics: dict[str, float]) -> None:
        self.losses.append(metrics["loss"])


def pretrain_noise_lm(lm: nn.Module, x: Sequences, *, steps: int, batch_size: int, lr: float,
                      generator: torch.Generator | None = None) -> list[float]:
    r"""Fit a noise language model to ``x`` by likelihood before noise-contrastive training.

    ``steps`` Adam steps (learning rate ``lr``) on ``batch_size`` sentences of ``x`` drawn with
    replacement by ``generator`` (torch's global RNG when ``None``), each minimising the mean
    :math:`-\log q(x)`: an in-memory :class:`~ebms.train.Trainer` run (no files, no divergence guard)
    on the model's device. Returns the losses. ``lm`` needs ``log_prob(Sequences) -> (B,)``
    (e.g. :class:`~ebms.models.lm.LSTMLM`).
    """
    x = Sequences.coerce(x, name="x", pairs=False)
    steps = check_int(steps, "steps", minimum=0)
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    if x.batch_size == 0 and steps > 0:
        raise ValueError("x: expected at least one sentence to fit the noise LM on; got an empty batch")
    lr = check_positive(lr, "lr")
    if steps == 0:
        return []

    def draw(size: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
        part = x[torch.randint(x.batch_size, (size,), generator=generator)]  # the caller's generator, not g
        return part.tokens[:, : int(part.lengths.max())], part.lengths

    losses = _Losses()
    device = next(lm.parameters()).device
    Trainer(_SentenceNLL(), lm, draw, optimizer=lambda groups: torch.optim.Adam(groups, lr=lr), steps=steps,
            batch_size=batch_size, run_dir=None, guard=None, progress=False, log_every=steps, callbacks=[losses],
            device=device, distributed=DistributedContext()).fit()
    return losses.losses

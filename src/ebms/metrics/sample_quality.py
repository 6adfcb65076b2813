r"""How much image samples look like the data, judged by a classifier trained on the data.

Two figures, both computed from a classifier ``f: x -> logits (B, K)`` trained on the real images
(e.g. the ``classifier-mnist`` recipe's network):

* :func:`classifier_scores` — per sample the class posterior :math:`p(y \mid x)`: the share of
  samples the classifier assigns to a class with probability at least ``threshold`` (a digit it
  recognises), the mean top probability, the entropy of the mean posterior (how evenly the samples
  cover the classes; :math:`\log K` for a uniform cover, 0 for one class) and the classifier
  score :math:`\exp(\mathbb{E}_x \mathrm{KL}(p(y \mid x) \,\|\, p(y)))` (the "inception score"
  with the data's own classifier: high when each sample is confidently one class and the classes
  are covered; between 1 and ``K``).
* :func:`frechet_distance` — the Fréchet distance between Gaussians fitted to two sets of feature
  vectors, :math:`\lVert\mu_a - \mu_b\rVert^2 + \mathrm{tr}(\Sigma_a + \Sigma_b - 2(\Sigma_a^{1/2}
  \Sigma_b \Sigma_a^{1/2})^{1/2})` (FID's formula; with the data classifier's penultimate features
  instead of Inception's). It is 0 for identical statistics and grows with any mismatch of mean or
  spread; test images against training images give its floor at a given sample size.

Noise scores low on both (no class is confident, the features are off the data's); a collapsed
sampler scores a low class entropy. Neither is a likelihood: they measure what the classifier sees.

References:
    Salimans, T. et al. (2016). "Improved techniques for training GANs." NeurIPS (the inception score).
    Heusel, M. et al. (2017). "GANs trained by a two time-scale update rule converge to a local Nash
    equilibrium." NeurIPS (the Fréchet distance of feature statistics).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import Tensor

from ebms._checks import check_probability

__all__ = ["ClassifierScores", "classifier_scores", "frechet_distance"]


@dataclass(frozen=True)
class ClassifierScores:
    """What a data classifier sees in samples (see :func:`classifier_scores`)."""

    confident: float  # share of samples with top probability >= threshold
    mean_top: float  # mean top probability
    class_entropy: float  # entropy (nats) of the mean posterior over classes
    score: float  # exp(E_x KL(p(y|x) || p(y))), in [1, K]
    counts: list[int]  # samples per predicted class
    threshold: float
    n: int

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _logits(logits: Tensor, name: str) -> Tensor:
    if not isinstance(logits, Tensor) or logits.dim() != 2 or not logits.is_floating_point():
        raise ValueError(f"{name}: expected floating logits of shape (B, K); got "
                         f"{getattr(logits, 'shape', type(logits).__name__)}")
    if logits.shape[0] == 0 or logits.shape[1] < 2:
        raise ValueError(f"{name}: expected at least one sample and two classes; got shape {tuple(logits.shape)}")
    if not bool(torch.isfinite(logits).all()):
        raise ValueError(f"{name}: expected finite logits")
    return logits.double()


def classifier_scores(logits: Tensor, *, threshold: float = 0.9) -> ClassifierScores:
    """The classifier's view of ``B`` samples from its logits ``(B, K)`` (module docstring).

    Args:
        logits: ``(B, K)`` the data classifier's logits of the samples.
        threshold: top probability from which a sample counts as recognised, in ``(0, 1)``.

    Raises:
        ValueError: logits that are not ``(B, K)`` floats with ``B >= 1``, ``K >= 2``, all finite;
            a threshold outside ``(0, 1)``.
    """
    logits = _logits(logits, "logits")
    check_probability(threshold, "threshold", open_low=True, open_high=True)
    log_p = torch.log_softmax(logits, 1)
    p = log_p.exp()
    top = p.max(1).values
    mean = p.mean(0)
    log_mean = mean.clamp(min=torch.finfo(torch.float64).tiny).log()
    kl = (p * (log_p - log_mean)).sum(1).mean()
    counts = torch.bincount(p.argmax(1), minlength=p.shape[1])
    return ClassifierScores(confident=float((top >= threshold).double().mean()), mean_top=float(top.mean()),
                            class_entropy=float(-(mean * log_mean).sum()), score=math.exp(float(kl)),
                            counts=[int(c) for c in counts], threshold=threshold, n=int(p.shape[0]))


def _moments(x: Tensor, name: str) -> tuple[Tensor, Tensor]:
    if not isinstance(x, Tensor) or x.dim() != 2 or not x.is_floating_point():
        raise ValueError(f"{name}: expected floating features of shape (N, D); got "
                         f"{getattr(x, 'shape', type(x).__name__)}")
    if x.shape[0] < 2:
        raise ValueError(f"{name}: expected at least 2 feature vectors (a covariance); got {x.shape[0]}")
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name}: expected finite features")
    x = x.double()
    return x.mean(0), torch.cov(x.T).reshape(x.shape[1], x.shape[1])


def _psd_sqrt(m: Tensor) -> Tensor:
    """The symmetric square root of a symmetric positive semi-definite matrix (negative round-off clipped)."""
    w, v = torch.linalg.eigh((m + m.T) / 2)
    return (v * w.clamp(min=0).sqrt()) @ v.T


def frechet_distance(a: Tensor, b: Tensor) -> float:
    r"""Fréchet distance between Gaussians fitted to feature sets ``a (N_a, D)`` and ``b (N_b, D)``.

    :math:`\lVert\mu_a-\mu_b\rVert^2 + \mathrm{tr}\,\Sigma_a + \mathrm{tr}\,\Sigma_b - 2\,\mathrm{tr}
    (\Sigma_a^{1/2}\Sigma_b\Sigma_a^{1/2})^{1/2}`, in float64 with unbiased covariances; symmetric in
    its arguments and 0 for equal statistics (up to round-off, clipped at 0).

    Raises:
        ValueError: features that are not 2-D floats, fewer than 2 rows, non-finite values, or two
            sets of different widths ``D``.
    """
    mu_a, cov_a = _moments(a, "a")
    mu_b, cov_b = _moments(b, "b")
    if mu_a.shape != mu_b.shape:
        raise ValueError(f"b: expected features of width {mu_a.shape[0]} as a; got {mu_b.shape[0]}")
    root_a = _psd_sqrt(cov_a)
    cross = _psd_sqrt(root_a @ cov_b @ root_a)
    value = float((mu_a - mu_b).square().sum() + cov_a.trace() + cov_b.trace() - 2 * cross.trace())
    return max(value, 0.0)


r"""Class-conditional Gaussian fitted on labelled data: an informative start for JEM's chains.

For classes :math:`c = 1..C` with :math:`n_c` rows :math:`x_i \in \mathbb R^D` (images are
flattened), :meth:`ClassConditionalGaussian.fit` computes

.. math::  \mu_c = \frac1{n_c}\sum_{y_i=c} x_i, \qquad
           S_c = \frac1{n_c-1}\sum_{y_i=c}(x_i-\mu_c)(x_i-\mu_c)^\top, \qquad
           \Sigma_c = (1-\lambda)\,S_c + \lambda\,\frac{\operatorname{tr} S_c}{D}\,I ,

a shrinkage towards the scaled identity (Ledoit & Wolf, 2004, "A well-conditioned estimator for
large-dimensional covariance matrices") that keeps the trace, :math:`\operatorname{tr}\Sigma_c =
\operatorname{tr}S_c`, and makes :math:`\Sigma_c` positive definite for any
:math:`\lambda \in (0, 1]` even when :math:`n_c \le D` or pixels are constant within a class.
Class weights are the frequencies :math:`\pi_c = n_c / n`.

``sample(n, generator, labels)`` draws :math:`x = \mu_{y} + L_{y}\varepsilon` with
:math:`\Sigma_y = L_y L_y^\top`; without labels, :math:`y \sim \pi` first. ``log_prob(x, labels)``
is :math:`\log\mathcal N(x;\mu_y,\Sigma_y)`, or without labels the mixture
:math:`\log\sum_c \pi_c\,\mathcal N(x;\mu_c,\Sigma_c)`.

Use: JEM++ (Yang & Ji, 2021, "JEM++: Improved Techniques for Training JEM", ICCV) starts the
replay buffer's fresh chains from such a per-class Gaussian instead of uniform noise, which
lets far fewer SGLD steps reach data-like samples; pass ``init=gaussian.sample`` to
:class:`~ebms.objectives.buffer.ReplayBuffer` (the buffer hands it the class of each slot).
Cost: fitting ``O(n D^2 + C D^3)``; sampling and ``log_prob`` ``O(C B D^2)`` (every class is
evaluated for every row, which avoids a ``(B, D, D)`` gather of the factors).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from ebms._checks import check_finite, check_in_range, check_int, check_shape, check_tensor
from ebms.distributions._base import Distribution, check_event
from ebms.spaces import Reals

__all__ = ["ClassConditionalGaussian"]


def _check_labels(labels: object, n: int, n_classes: int | None, name: str = "labels") -> Tensor:
    """``labels``: ``LongTensor (n,)`` with values in ``[0, n_classes)`` (one host sync; no range check
    when ``n_classes`` is ``None``)."""
    check_tensor(labels, name)
    assert isinstance(labels, Tensor)
    if labels.dtype != torch.long:
        raise TypeError(f"{name}: expected a LongTensor of class indices; got dtype {labels.dtype}")
    check_shape(labels, (n,), name)
    if n and n_classes is not None:
        lo, hi = torch.stack([labels.min(), labels.max()]).tolist()
        if lo < 0 or hi >= n_classes:
            raise ValueError(f"{name}: expected values in [0, {n_classes - 1}]; got min {lo}, max {hi}")
    return labels


class ClassConditionalGaussian(Distribution):
    r"""Per-class Gaussians :math:`\mathcal N(\mu_c, \Sigma_c)` with class weights (see the module docstring).

    Build it with :meth:`fit`; the constructor takes fitted parameters.

    Args:
        means: ``(C, D)``.
        scale_tril: Cholesky factors ``(C, D, D)`` of the covariances (lower triangular, positive
            diagonal).
        log_weights: ``(C,)`` normalised log class weights :math:`\log\pi_c`.
        event_shape: shape of one draw, with ``prod(event_shape) = D`` (default ``(D,)``).

    Attributes:
        means, scale_tril, log_weights: buffers as above (``.double()`` / ``.to()`` move them).
        n_classes: ``C``; ``event_shape``; ``space``: :class:`~ebms.spaces.Reals`.

    Shapes: ``sample(n) -> (n, *event)``; ``log_prob(x: (B, *event), labels: (B,) | None) -> (B,)``.

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> x, y = torch.randn(40, 3, generator=g), torch.arange(40) % 2
        >>> q = ClassConditionalGaussian.fit(x, y, shrinkage=0.1)
        >>> q.sample(5, g, torch.tensor([0, 1, 1, 0, 1])).shape
        torch.Size([5, 3])
    """

    means: Tensor
    scale_tril: Tensor
    log_weights: Tensor

    def __init__(
        self, means: Tensor, scale_tril: Tensor, log_weights: Tensor, *, event_shape: Sequence[int] | None = None
    ) -> None:
        super().__init__()
        check_tensor(means, "means", floating=True)
        if means.dim() != 2 or means.shape[0] < 1 or means.shape[1] < 1:
            raise ValueError(f"means: expected shape (C, D) with C, D >= 1; got {tuple(means.shape)}")
        C, D = means.shape
        check_tensor(scale_tril, "scale_tril", floating=True)
        check_shape(scale_tril, (C, D, D), "scale_tril")
        check_tensor(log_weights, "log_weights", floating=True)
        check_shape(log_weights, (C,), "log_weights")
        for t, name in ((means, "means"), (scale_tril, "scale_tril"), (log_weights, "log_weights")):
            check_finite(t, name)
        diag = scale_tril.diagonal(dim1=-2, dim2=-1)
        if not bool((diag > 0).all()) or not torch.equal(scale_tril, scale_tril.tril()):
            raise ValueError("scale_tril: expected lower-triangular Cholesky factors with a positive diagonal")
        total = float(torch.logsumexp(log_weights.double(), 0))
        if abs(total) > 1e-5:
            raise ValueError(f"log_weights: expected log-probabilities (logsumexp 0); got logsumexp {total:.6g}")
        shape = (D,) if event_shape is None else tuple(event_shape)
        if not shape or not all(isinstance(s, int) and s >= 1 for s in shape) or math.prod(shape) != D:
            raise ValueError(f"event_shape: expected positive ints whose product is D={D}; got {event_shape!r}")
        self.register_buffer("means", means.detach().clone())
        self.register_buffer("scale_tril", scale_tril.detach().to(means.dtype).clone())
        self.register_buffer("log_weights", log_weights.detach().to(means.dtype).clone())
        self.n_classes = int(C)
        self.event_shape = shape
        self.space = Reals(shape)

    @classmethod
    def fit(
        cls, x: Tensor, y: Tensor, *, n_classes: int | None = None, shrinkage: float = 0.1
    ) -> ClassConditionalGaussian:
        r"""Fit means, shrunk covariances and class weights on labelled data.

        Args:
            x: ``(N, *event)`` floating, finite.
            y: ``LongTensor (N,)`` in ``[0, C)``; every class needs at least two rows.
            n_classes: ``C`` (default ``max(y) + 1``).
            shrinkage: :math:`\lambda \in [0, 1]`; ``0`` keeps the sample covariance, which must
                then be positive definite.

        Returns:
            The fitted model, in ``x``'s dtype.

        Raises:
            ValueError: a class with fewer than two rows, a covariance that is not positive
                definite (zero variance; raise ``shrinkage``), or bad shapes/values.
        """
        check_tensor(x, "x", floating=True, min_dim=2)
        check_finite(x, "x")
        N = x.shape[0]
        if N < 2:
            raise ValueError(f"x: expected at least 2 rows; got shape {tuple(x.shape)}")
        lam = check_in_range(shrinkage, "shrinkage", 0.0, 1.0)
        _check_labels(y, N, None, "y")
        C = int(y.max()) + 1 if n_classes is None else check_int(n_classes, "n_classes", minimum=1)
        y = _check_labels(y, N, C, "y")
        counts = torch.bincount(y, minlength=C)
        few = (counts < 2).nonzero().flatten().tolist()
        if few:
            raise ValueError(f"y: expected at least 2 rows per class to fit a covariance; classes {few} have fewer")
        flat = x.detach().reshape(N, -1)
        D = flat.shape[1]
        means = torch.zeros(C, D, dtype=flat.dtype, device=flat.device).index_add_(0, y, flat)
        means = means / counts[:, None].to(flat.dtype)
        centred = flat - means[y]
        tril = torch.empty(C, D, D, dtype=flat.dtype, device=flat.device)
        eye = torch.eye(D, dtype=flat.dtype, device=flat.device)
        for c in range(C):
            z = centred[y == c]
            s = z.T @ z / (z.shape[0] - 1)
            cov = (1 - lam) * s + lam * (s.diagonal().sum() / D) * eye
            L, info = torch.linalg.cholesky_ex(cov)
            if int(info) != 0:
                raise ValueError(
                    f"shrinkage: the covariance of class {c} is not positive definite with shrinkage={shrinkage!r} "
                    "(zero variance in some direction); use a shrinkage > 0"
                )
            tril[c] = L
        log_w = torch.log(counts.to(flat.dtype)) - math.log(N)
        return cls(means, tril, log_w, event_shape=tuple(x.shape[1:]))

    @property
    def dim(self) -> int:
        """``D``, the number of coordinates of one draw."""
        return int(self.means.shape[1])

    def covariance(self) -> Tensor:
        r""":math:`\Sigma_c = L_c L_c^\top`, shape ``(C, D, D)``."""
        return self.scale_tril @ self.scale_tril.transpose(-1, -2)

    def sample(self, n: int, generator: torch.Generator | None = None, labels: Tensor | None = None) -> Tensor:
        """``n`` draws ``(n, *event)``; row ``r`` from class ``labels[r]``, or a class drawn from the weights.

        Random draws, in order: the classes (only without ``labels``, ``torch.multinomial``), then
        ``n x D`` standard normals. The call ``sample(n, generator, labels)`` is the
        :class:`~ebms.objectives.buffer.ReplayBuffer` ``init`` signature.
        """
        check_int(n, "n", minimum=1)
        dev, dtype = self.means.device, self.means.dtype
        # draw on the generator's device (a buffer on the GPU hands over a CUDA generator), compute on ours
        g_dev = generator.device if generator is not None else dev
        if labels is None:
            w = self.log_weights.exp().to(g_dev)
            labels = torch.multinomial(w, n, replacement=True, generator=generator).to(dev)
        else:
            labels = _check_labels(labels, n, self.n_classes).to(dev)
        eps = torch.randn(n, self.dim, generator=generator, device=g_dev, dtype=dtype).to(dev)
        # every class's transform of every row, (C, n, D), then each row's own class: C times the
        # arithmetic of a gather, but no (n, D, D) copy of the factors
        every = self.means[:, None, :] + eps @ self.scale_tril.transpose(-1, -2)
        x = every[labels, torch.arange(n, device=dev)]
        return x.reshape(n, *self.event_shape)

    def log_prob(self, x: Tensor, labels: Tensor | None = None) -> Tensor:
        r""":math:`\log\mathcal N(x;\mu_y,\Sigma_y)` per row, or the mixture over classes without ``labels``; ``(B,)``."""
        per_class = self.class_log_prob(x)
        B = x.shape[0]
        if labels is None:
            return torch.logsumexp(per_class + self.log_weights, dim=1)
        labels = _check_labels(labels, B, self.n_classes).to(self.means.device)
        return per_class.gather(1, labels[:, None]).squeeze(1)

    def class_log_prob(self, x: Tensor) -> Tensor:
        r""":math:`\log\mathcal N(x_b;\mu_c,\Sigma_c)` for every row and class, ``(B, *event) -> (B, C)``."""
        check_event(x, self.event_shape)
        B = x.shape[0]
        flat = x.reshape(B, self.dim).to(self.means.dtype)
        diff = (flat[None, :, :] - self.means[:, None, :]).transpose(-1, -2)  # (C, D, B)
        z = torch.linalg.solve_triangular(self.scale_tril, diff, upper=False)  # (C, D, B)
        half_log_det = torch.log(self.scale_tril.diagonal(dim1=-2, dim2=-1)).sum(-1)  # (C,)
        quad = z.pow(2).sum(1).T  # (B, C)
        return -0.5 * quad - half_log_det - 0.5 * self.dim * math.log(2 * math.pi)

    def extra_repr(self) -> str:
        return f"n_classes={self.n_classes}, event_shape={self.event_shape}"

r"""JEM: a classifier read as an energy-based model of :math:`(x, y)`.

A classifier with logits :math:`f_\theta(x) \in \mathbb R^K` defines (Grathwohl et al., 2020,
"Your classifier is secretly an energy based model and you should treat it like one", ICLR;
monograph Eqs. 5.1-5.3 with the potential :math:`U = -E`)

.. math::  E(x, y) = -f_\theta(x)[y], \qquad
           E(x) = -\log\sum_{y'} \exp f_\theta(x)[y'], \qquad
           p(y \mid x) = \operatorname{softmax} f_\theta(x)[y] = \exp\big(E(x) - E(x, y)\big),

so :math:`p(x, y) \propto \exp(-E(x, y))` and :math:`p(x) \propto \exp(-E(x))` share one
partition function, while the conditional :math:`p(y \mid x)` needs none: it is the
classifier's softmax, exactly. :class:`JEM` is an :class:`~ebms.energy.Energy` (``JEM(x)`` is
:math:`E(x)`, what samplers follow for :math:`p(x)`); :meth:`JEM.class_energy` gives the energy
:math:`x \mapsto -f_\theta(x)[y]` of :math:`p(x \mid y)` for class-conditional sampling.
Training: :class:`ebms.objectives.jem.JEMObjective`.

:class:`ScalarHeadEBM` is the pre-training half of the other generative SSL route (monograph
§5.1, "pre-training"): a scalar EBM :math:`E(x) = -w^\top h_\theta(x)` on a trunk shared with a
classifier. Train it as an EBM on all (unlabelled) data, then fine-tune the classifier holding
the same trunk object::

    clf = MLPClassifier(64, 10)
    ebm = ScalarHeadEBM(clf.trunk, clf.features)     # E(x) = -w^T trunk(x)
    # ... PersistentContrastiveDivergence on ebm (unlabelled x) ...
    # ... cross-entropy (or JEMObjective) on JEM(clf, 10) with the labelled rows ...
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ebms._checks import check_int, check_shape, check_tensor
from ebms.energy import Energy

__all__ = ["JEM", "ScalarHeadEBM"]


def _check_labels(y: object, n: int, n_classes: int, name: str = "y") -> Tensor:
    """``y``: ``LongTensor (n,)`` in ``[0, K)``; one host sync."""
    check_tensor(y, name)
    assert isinstance(y, Tensor)
    if y.dtype != torch.long:
        raise TypeError(f"{name}: expected a LongTensor of class indices; got dtype {y.dtype}")
    check_shape(y, (n,), name)
    if n:
        lo, hi = torch.stack([y.min(), y.max()]).tolist()
        if lo < 0 or hi >= n_classes:
            raise ValueError(f"{name}: expected values in [0, {n_classes - 1}]; got min {lo}, max {hi}")
    return y


class JEM(Energy):
    r"""Joint energy model on top of a classifier ``(B, *event) -> (B, K)`` logits.

    Everything is computed from one call of ``classifier(x)`` with the same operations a
    classifier user would apply: :meth:`log_prob_y` is ``torch.log_softmax(logits, -1)``,
    :meth:`forward` is ``-torch.logsumexp(logits, -1)``.

    Args:
        classifier: ``nn.Module`` mapping ``x: (B, *event)`` to logits ``(B, K)``, per-sample
            (no BatchNorm: a chain's energy must not depend on the other chains); e.g.
            :class:`ebms.nets.classifier.ConvClassifier` or ``MLPClassifier``.
        n_classes: ``K >= 2``; the classifier's output width is checked against it.

    Shapes: ``x: (B, *event)``; ``y: LongTensor (B,)`` in ``[0, K)``; energies ``(B,)``.

    Example:
        >>> import torch
        >>> from ebms.nets.classifier import MLPClassifier
        >>> jem = JEM(MLPClassifier(4, 3, hidden=(8,)), 3)
        >>> x = torch.randn(5, 4)
        >>> jem(x).shape, jem.log_prob_y(x).shape
        (torch.Size([5]), torch.Size([5, 3]))
    """

    def __init__(self, classifier: nn.Module, n_classes: int) -> None:
        super().__init__()
        if not isinstance(classifier, nn.Module):
            raise TypeError(f"classifier: expected an nn.Module returning (B, K) logits; got {type(classifier).__name__}")
        self.classifier = classifier
        self.n_classes = check_int(n_classes, "n_classes", minimum=2)

    def logits(self, x: Tensor) -> Tensor:
        """:math:`f_\\theta(x)`, ``(B, K)`` (shape and dtype checked, no host sync)."""
        out = self.classifier(x)
        if not isinstance(out, Tensor):
            raise TypeError(f"classifier(x): expected a tensor of shape (B, {self.n_classes}); got {type(out).__name__}")
        if out.dim() != 2 or out.shape != (x.shape[0], self.n_classes):
            raise ValueError(f"classifier(x): expected shape ({x.shape[0]}, {self.n_classes}); got {tuple(out.shape)}")
        if not out.is_floating_point():
            raise TypeError(f"classifier(x): expected floating-point logits; got dtype {out.dtype}")
        return out

    def forward(self, x: Tensor) -> Tensor:
        r"""Marginal energy :math:`E(x) = -\log\sum_y \exp f(x)[y]`, ``(B,)``."""
        return -torch.logsumexp(self.logits(x), dim=-1)

    def joint_energy(self, x: Tensor, y: Tensor) -> Tensor:
        """:math:`E(x, y) = -f(x)[y]`, ``(B,)``; ``y: LongTensor (B,)`` in ``[0, K)``."""
        y = _check_labels(y, x.shape[0], self.n_classes)
        return -self.logits(x).gather(1, y[:, None]).squeeze(1)

    def log_prob_y(self, x: Tensor) -> Tensor:
        r""":math:`\log p(y \mid x)` for every class, ``(B, K)`` (``log_softmax`` of the logits)."""
        return torch.log_softmax(self.logits(x), dim=-1)

    @torch.no_grad()
    def predict(self, x: Tensor) -> Tensor:
        r""":math:`\arg\max_y f(x)[y]`, ``LongTensor (B,)`` (no graph)."""
        return self.logits(x).argmax(dim=-1)

    def class_energy(self, y: int | Tensor) -> Energy:
        r"""The energy :math:`x \mapsto -f(x)[y]` of :math:`p(x \mid y)`, for sampling ``x | y``.

        Args:
            y: one class for every row (``int`` in ``[0, K)``), or ``LongTensor (B,)``: row ``b``
                of the batch conditions on ``y[b]`` (the batch must then have ``B`` rows).
        """
        return _ClassEnergy(self, y)

    def extra_repr(self) -> str:
        return f"n_classes={self.n_classes}"


class _ClassEnergy(Energy):
    """``x -> -f(x)[y]`` of a :class:`JEM` (see :meth:`JEM.class_energy`); shares its parameters."""

    labels: Tensor

    def __init__(self, jem: JEM, y: int | Tensor) -> None:
        super().__init__()
        self.jem = jem
        K = jem.n_classes
        if isinstance(y, Tensor):
            if y.dim() != 1 or y.shape[0] == 0:
                raise ValueError(f"y: expected an int class or a LongTensor (B,) with B >= 1; got shape {tuple(y.shape)}")
            _check_labels(y, y.shape[0], K)
            self.register_buffer("labels", y.detach().clone(), persistent=False)
            self.single: int | None = None
        else:
            if isinstance(y, bool) or not isinstance(y, int):
                raise TypeError(f"y: expected an int class or a LongTensor (B,); got {type(y).__name__}")
            if not 0 <= y < K:
                raise ValueError(f"y: expected a class in [0, {K - 1}]; got {y}")
            self.register_buffer("labels", torch.empty(0, dtype=torch.long), persistent=False)
            self.single = y

    def forward(self, x: Tensor) -> Tensor:
        logits = self.jem.logits(x)
        if self.single is not None:
            return -logits[:, self.single]
        if x.shape[0] != self.labels.shape[0]:
            raise ValueError(
                f"x: expected {self.labels.shape[0]} rows, one per label of class_energy(y); got {x.shape[0]}"
            )
        return -logits.gather(1, self.labels.to(logits.device)[:, None]).squeeze(1)

    def extra_repr(self) -> str:
        return f"y={self.single}" if self.single is not None else f"y=LongTensor({self.labels.shape[0]})"


class ScalarHeadEBM(Energy):
    r"""Scalar EBM on a trunk: :math:`U(x) = w^\top h_\theta(x)`, :math:`E(x) = -w^\top h_\theta(x)`.

    Args:
        trunk: ``nn.Module`` mapping ``x: (B, *event)`` to features ``(B, H)``, e.g. the
            ``.trunk`` of a :mod:`ebms.nets.classifier` network (the object is shared, not copied).
        hidden: ``H``, the trunk's output width (checked on every call).

    Attributes:
        trunk: the shared trunk; ``head``: ``nn.Linear(H, 1, bias=False)`` (a bias would only
        shift ``E`` by a constant, which :math:`p \propto e^{-E}` ignores).

    Shapes: ``x: (B, *event)`` -> ``(B,)``.
    """

    def __init__(self, trunk: nn.Module, hidden: int) -> None:
        super().__init__()
        if not isinstance(trunk, nn.Module):
            raise TypeError(f"trunk: expected an nn.Module mapping x to (B, H) features; got {type(trunk).__name__}")
        self.trunk = trunk
        self.hidden = check_int(hidden, "hidden", minimum=1)
        self.head = nn.Linear(self.hidden, 1, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        """:math:`E(x) = -w^\\top h(x)`, ``(B,)``."""
        h = self.trunk(x)
        if not isinstance(h, Tensor) or h.dim() != 2 or h.shape != (x.shape[0], self.hidden):
            got = tuple(h.shape) if isinstance(h, Tensor) else type(h).__name__
            raise ValueError(f"trunk(x): expected features of shape ({x.shape[0]}, {self.hidden}); got {got}")
        return -self.head(h).squeeze(-1)

    def extra_repr(self) -> str:
        return f"hidden={self.hidden}"

r"""Residual joint EBM for calibrated classification: cross-entropy plus NCE of a residual energy.

A classifier with encoder :math:`h = \mathrm{enc}(x)` and logits :math:`f(x) = f_{CLS}(h) \in
\mathbb R^K` also defines a model of the inputs in residual form (monograph §5.5, Eq. 5.18; He et
al. 2021)

.. math::  E_\theta(x) = -\log p_N(x) + \hat E_\theta(x),

where :math:`p_N` is a base law, also NCE's noise. Three residual energies
(:data:`RESIDUAL_ENERGIES`, :func:`residual_energy`):

* ``"scalar"``: a separate linear head on the encoding, :math:`\hat E_\theta(x) = g_S(h)`;
* ``"hidden"``: the classifier's own logits, :math:`\hat E_\theta(x) = -\operatorname{LogSumExp}_y f(x)[y]`;
* ``"sharp_hidden"``: :math:`\hat E_\theta(x) = -\max_y f(x)[y]`.

The joint loss is :math:`\mathcal L = \mathcal L_{CE} + \lambda\,\mathcal L_{NCE}` (Eq. 5.17 plus
NCE, :math:`\lambda = 1` in the source), with ``nu`` noise samples per data sample:

.. math::  \mathcal L_{NCE} = -\mathbb E_{x^+\sim p_{data}}\log\frac{1}{1 + \nu e^{E_\theta(x^+)}}
           - \nu\,\mathbb E_{x^-\sim p_N}\log\frac{1}{1 + e^{-E_\theta(x^-)}/\nu}.

With the residual form the NCE log-ratio :math:`\log\tilde p_\theta(x) - \log p_N(x)` is
:math:`-\hat E_\theta(x)`, so the :math:`E_\theta` inside both sigmoids is the residual
:math:`\hat E_\theta` and :math:`p_N(x)` is never evaluated: with :math:`G(x) = -\hat E_\theta(x) -
\log\nu`,

.. math::  \mathcal L_{NCE} = \frac1B\sum_b \operatorname{softplus}(-G(x^+_b))
           + \nu\,\frac{1}{\nu B}\sum_{b,k}\operatorname{softplus}(G(x^-_{b,k}))

(:func:`~ebms.objectives.nce_logits` with ``log_noise = 0`` and ``log_z = None``, then
:func:`~ebms.objectives.nce_loss`). Its population minimiser, where :math:`p_N` covers the data, is
:math:`\hat E_\theta(x) = \log p_N(x) - \log p_{data}(x)`: the joint model
:math:`p_N(x) e^{-\hat E_\theta(x)}` equals the data law and is self-normalised (Gutmann &
Hyvärinen 2010). The CE term is the mean over the ``B`` labelled rows of
:math:`-\log\operatorname{softmax}(f(x^+_b))[y_b]`; the noise carries no label.

The model offers ``joint(x) -> (logits (N, K), scalar (N,) or None)`` for ``N`` inputs (one
encoder pass gives both heads; :class:`~ebms.models.ResidualTextClassifier`), or only
``logits(x)`` for the two hidden energies. Data and noise go through ONE call on the ``(1 + nu) B``
rows (:class:`~ebms.sequences.Sequences` are concatenated with :meth:`~ebms.sequences.Sequences.cat`;
per-sample networks only, no BatchNorm).

Batches: ``(x, y, noise)`` with ``x`` ``B`` inputs (``Sequences`` or a tensor ``(B, *event)``),
``y`` a LongTensor ``(B,)`` in ``[0, K)``, ``noise`` ``nu B`` inputs of the same kind in the
n-per-row layout (row ``b``'s draws at ``b nu .. b nu + nu - 1``; only their number is checked,
the loss does not pair them); or the five-tensor form of :meth:`ResidualJointNCE.pack` for the
trainer's data streams.

Metrics (one host sync): ``loss``, ``ce``, ``nce``, ``acc`` (classification accuracy on the data),
``e_pos``/``e_neg`` (mean residual energies), ``gap = e_neg - e_pos`` and ``nce_acc`` (share of the
``(1 + nu) B`` samples that ``G > 0`` labels correctly).

Cost: one forward and backward on ``(1 + nu) B`` rows.

References:
    He, T., McCann, B., Xiong, C. & Hosseini-Asl, E. (2021). "Joint energy-based model training for
    better calibrated natural language understanding models." EACL (the monograph's [60]).
    Gutmann, M. & Hyvärinen, A. (2010). "Noise-contrastive estimation: a new estimation principle
    for unnormalized statistical models." AISTATS.
    Grathwohl, W. et al. (2020). "Your classifier is secretly an energy based model and you should
    treat it like one." ICLR (the hidden energy).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ebms._checks import check_choice, check_int, check_positive, check_tensor
from ebms.objectives._base import LossOutput, scalar_metrics
from ebms.objectives._nce_core import nce_logits, nce_loss
from ebms.sequences import Sequences

__all__ = ["RESIDUAL_ENERGIES", "ResidualJointNCE", "residual_energy"]

#: the residual energies :class:`ResidualJointNCE` takes.
RESIDUAL_ENERGIES = ("scalar", "hidden", "sharp_hidden")


def residual_energy(logits: Tensor, scalar: Tensor | None, kind: str) -> Tensor:
    r"""The residual energy :math:`\hat E_\theta(x)` ``(N,)`` of ``kind`` from one encoder pass.

    Args:
        logits: ``(N, K)`` classifier logits :math:`f(x)`.
        scalar: ``(N,)`` the scalar head :math:`g_S(h)` (needed for ``"scalar"`` only; else ignored).
        kind: ``"scalar"`` (:math:`g_S(h)`), ``"hidden"`` (:math:`-\operatorname{LSE}_y f(x)[y]`) or
            ``"sharp_hidden"`` (:math:`-\max_y f(x)[y]`).

    Raises:
        ValueError: an unknown ``kind``, logits not 2-D, a missing or misshapen ``scalar``.
    """
    check_choice(kind, "kind", RESIDUAL_ENERGIES)
    check_tensor(logits, "logits", floating=True)
    if logits.dim() != 2 or logits.shape[1] == 0:
        raise ValueError(f"logits: expected shape (N, K) with K >= 1; got {tuple(logits.shape)}")
    if kind == "hidden":
        return -torch.logsumexp(logits, dim=1)
    if kind == "sharp_hidden":
        return -logits.amax(dim=1)
    if scalar is None:
        raise ValueError("scalar: the 'scalar' residual energy needs the model's scalar head "
                         "(joint(x) returned None); use 'hidden' or 'sharp_hidden', or a model with a scalar head")
    check_tensor(scalar, "scalar", floating=True)
    if tuple(scalar.shape) != (logits.shape[0],):
        raise ValueError(f"scalar: expected shape ({logits.shape[0]},); got {tuple(scalar.shape)}")
    return scalar


def _heads(model: Any, x: Any) -> tuple[Tensor, Tensor | None]:
    if hasattr(model, "joint"):
        out = model.joint(x)
        if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], Tensor)):
            raise TypeError(f"model: expected joint(x) -> (logits (N, K), scalar (N,) or None); got "
                            f"{type(out).__name__}")
        return out[0], out[1]
    if hasattr(model, "logits"):
        return model.logits(x), None
    raise TypeError(f"model: expected joint(x) -> (logits, scalar) or logits(x); got {type(model).__name__}")


def _rows(x: Any) -> int:
    return x.batch_size if isinstance(x, Sequences) else int(x.shape[0])


class ResidualJointNCE(nn.Module):
    r""":math:`\mathcal L_{CE} + \lambda\,\mathcal L_{NCE}` of a residual energy (see the module docstring).

    Args:
        energy: the residual energy, one of :data:`RESIDUAL_ENERGIES`.
        nu: noise samples per data sample, an integer ``>= 1``.
        nce_weight: :math:`\lambda > 0`.

    Call: ``objective(model, (x, y, noise), generator=None) -> LossOutput``; ``generator`` is unused
    (the noise comes with the batch).

    Example:
        >>> import torch
        >>> class Flat(torch.nn.Module):           # logits 0 for every class: E = -log K
        ...     def logits(self, x): return torch.zeros(x.shape[0], 2)
        >>> out = ResidualJointNCE(energy="hidden")(Flat(), (torch.zeros(3, 1), torch.tensor([0, 1, 0]),
        ...                                                   torch.zeros(3, 1)))
        >>> round(out.metrics["ce"], 4), out.metrics["gap"]
        (0.6931, 0.0)
    """

    def __init__(self, *, energy: str = "sharp_hidden", nu: int = 1, nce_weight: float = 1.0) -> None:
        super().__init__()
        self.energy = check_choice(energy, "energy", RESIDUAL_ENERGIES)
        self.nu = check_int(nu, "nu", minimum=1)
        self.nce_weight = check_positive(nce_weight, "nce_weight")

    @staticmethod
    def pack(x: Sequences, y: Tensor, noise: Sequences) -> tuple[Tensor, ...]:
        """The five-tensor form ``(tokens (B, T), lengths (B,), y (B,), noise tokens (B, nu, T'),
        noise lengths (B, nu))`` of a sentence batch (every tensor has ``B`` rows, as the trainer's
        data streams require)."""
        Sequences.coerce(x, name="x", pairs=False, expected="an ebms.sequences.Sequences")
        Sequences.coerce(noise, name="noise", pairs=False, expected="an ebms.sequences.Sequences")
        B = x.batch_size
        if B == 0 or noise.batch_size % B:
            raise ValueError(f"noise: expected a positive multiple of the {B} inputs; got {noise.batch_size}")
        nu = noise.batch_size // B
        return x.tokens, x.lengths, y, noise.tokens.reshape(B, nu, -1), noise.lengths.reshape(B, nu)

    def _unpack(self, batch: Any) -> tuple[Any, Tensor, Any]:
        if isinstance(batch, (tuple, list)) and len(batch) == 5 and all(isinstance(t, Tensor) for t in batch):
            nt, nl = batch[3], batch[4]
            if nt.dim() != 3 or nl.dim() != 2 or nl.shape != nt.shape[:2]:
                raise ValueError(f"batch: expected noise tokens (B, nu, T) and lengths (B, nu); got "
                                 f"{tuple(nt.shape)} and {tuple(nl.shape)}")
            return (Sequences(batch[0], batch[1]), batch[2],
                    Sequences(nt.reshape(-1, nt.shape[-1]), nl.reshape(-1)))
        if not (isinstance(batch, (tuple, list)) and len(batch) == 3):
            raise TypeError(f"batch: expected (x, y, noise) or the five-tensor pack; got {type(batch).__name__}"
                            + (f" of {len(batch)}" if isinstance(batch, (tuple, list)) else ""))
        x, y, noise = batch
        if isinstance(x, Sequences) != isinstance(noise, Sequences):
            raise TypeError(f"noise: expected the same kind of input as x ({type(x).__name__}); "
                            f"got {type(noise).__name__}")
        if not isinstance(x, Sequences):
            check_tensor(x, "x", min_dim=1)
            check_tensor(noise, "noise", min_dim=1)
            if tuple(noise.shape[1:]) != tuple(x.shape[1:]):
                raise ValueError(f"noise: expected rows of shape {tuple(x.shape[1:])} like x; got "
                                 f"{tuple(noise.shape[1:])}")
        return x, y, noise

    def forward(self, model: Any, batch: Any, *, generator: torch.Generator | None = None) -> LossOutput:
        """The joint loss of one batch.

        Raises:
            TypeError: a model without ``joint``/``logits``, a batch of the wrong form.
            ValueError: an empty batch, labels of the wrong shape or range, not ``nu B`` noise rows.
        """
        x, y, noise = self._unpack(batch)
        B, nu = _rows(x), self.nu
        if B == 0:
            raise ValueError("x: expected at least one input; got an empty batch")
        check_tensor(y, "y")
        if y.dtype != torch.long or tuple(y.shape) != (B,):
            raise ValueError(f"y: expected a LongTensor of shape ({B},); got dtype {y.dtype}, shape {tuple(y.shape)}")
        if _rows(noise) != nu * B:
            raise ValueError(f"noise: expected nu * B = {nu} * {B} = {nu * B} rows (n-per-row layout); "
                             f"got {_rows(noise)}")
        both = Sequences.cat([x, noise]) if isinstance(x, Sequences) else torch.cat([x, noise.to(x.dtype)])
        logits, scalar = _heads(model, both)
        if not isinstance(logits, Tensor) or logits.dim() != 2 or logits.shape[0] != (1 + nu) * B:
            got = tuple(logits.shape) if isinstance(logits, Tensor) else type(logits).__name__
            raise ValueError(f"model: expected logits of shape ({(1 + nu) * B}, K); got {got}")
        k = logits.shape[1]
        if bool(((y < 0) | (y >= k)).any()):
            raise ValueError(f"y: expected labels in [0, {k - 1}]; got min {int(y.min())}, max {int(y.max())}")
        energies = residual_energy(logits, scalar, self.energy)
        e_pos, e_neg = energies[:B], energies[B:]
        data_logits = logits[:B]
        ce = -torch.log_softmax(data_logits, dim=1).gather(1, y[:, None]).squeeze(1).mean()
        g_pos = nce_logits(-e_pos, torch.zeros_like(e_pos), nu=nu)
        g_neg = nce_logits(-e_neg, torch.zeros_like(e_neg), nu=nu)
        nce = nce_loss(g_pos, g_neg, nu=nu)
        loss = ce + self.nce_weight * nce
        with torch.no_grad():
            acc = (data_logits.argmax(1) == y).to(logits.dtype).mean()
            correct = (g_pos > 0).sum() + (g_neg < 0).sum()
            ep, en = e_pos.mean(), e_neg.mean()
            metrics = scalar_metrics(loss=loss, ce=ce, nce=nce, acc=acc, e_pos=ep, e_neg=en, gap=en - ep,
                                     nce_acc=correct.to(logits.dtype) / ((1 + nu) * B))
        return LossOutput(loss, metrics)

    def extra_repr(self) -> str:
        return f"energy={self.energy!r}, nu={self.nu}, nce_weight={self.nce_weight:g}"

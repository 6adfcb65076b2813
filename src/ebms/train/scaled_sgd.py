r"""SGD with a fixed per-coordinate scale, an L2 term and a clipped step: the TRF trainer's update.

Per parameter :math:`\lambda` with gradient :math:`g` (of the loss to minimise), a fixed positive
scale :math:`v` of the same shape (default 1), L2 coefficient :math:`\rho \ge 0`, step bound
:math:`c > 0` and learning rate :math:`\gamma_t`:

.. math::  \lambda \leftarrow \lambda -
           \operatorname{clip}\Big(\gamma_t \frac{g + \rho\lambda}{v + \rho}, -c, c\Big) .

For a discrete TRF trained by :class:`~ebms.objectives.AugSA`, :math:`-g` is
:math:`\tilde p[f] - \sum_l \pi_l E_{p_l}[f]` (data minus sample feature expectations) and the
authors' trainer divides it by the empirical variance of each feature,
:math:`v_i = E_{\tilde p}[f_i^2] - \sum_l \pi_l E_{\tilde p_l}[f_i]^2`
(:func:`~ebms.models.trf.feature_moments`), a diagonal approximation of the Fisher information
(the Hessian of the negative log-likelihood of a log-linear model), so that rare and frequent
features move at comparable speeds; it clips each coordinate's step, the learning rate included,
to :math:`\pm c` (their ``dir_gap``, 1: ``SAtrain::UpdateDir`` clips :math:`\gamma_t` times the
scaled gradient; clipping the scaled gradient before the rate would bound a step by
:math:`\gamma_t c` — 1/3001 on PTB — and hold back the rare features the scaling is for) and uses :math:`\gamma_t = 1/(3000 + 1)` for 2,000 steps then :math:`1/t` decay on PTB
(:class:`~ebms.objectives.SAGain` ``(3000, 0, 2000)`` as the trainer's ``lr_schedule`` with
``lr = 1``), with :math:`\rho = 4\cdot 10^{-5}`. Unlike Adam, whose step is about ``lr`` per
coordinate whatever the gradient's size, this step shrinks with the gradient, so the model moves no
faster than the stochastic-approximation estimates of its normalisers can follow (Wang, Ou & Tan
2018, §V; monograph §3.2).

The scales are data, not state: they are not in ``state_dict`` (rebuild the optimizer with them when
resuming). Parameters without a gradient are skipped. Cost per step: a few elementwise passes over
each parameter.

References:
    Wang, B., Ou, Z. & Tan, Z. (2018). "Learning trans-dimensional random fields with applications
    to language modeling." IEEE TPAMI 40(4).
    Ou, Z. (2024). "Energy-Based Models with Applications to Speech and Language Processing", §3.2.

Example:
    >>> w = torch.zeros(3, requires_grad=True)
    >>> opt = ScaledSGD([w], lr=0.5, scales={w: torch.tensor([1.0, 4.0, 0.01])}, clip=1.0)
    >>> w.grad = torch.tensor([-1.0, -1.0, -1.0])
    >>> opt.step()
    >>> w.detach()
    tensor([0.5000, 0.1250, 1.0000])
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import Tensor

__all__ = ["ScaledSGD"]


def _number(value: Any, name: str, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a Python number; got {type(value).__name__} {value!r}")
    v = float(value)
    if not math.isfinite(v) or v < 0 or (positive and v == 0):
        raise ValueError(f"{name}: expected a finite number {'> 0' if positive else '>= 0'}; got {value!r}")
    return v


class ScaledSGD(torch.optim.Optimizer):
    r"""Scaled, L2-regularised, clipped SGD (module docstring).

    Args:
        params: tensors or parameter groups (dicts with ``"params"`` and any of ``lr``, ``l2``, ``clip``).
        lr: learning rate :math:`\gamma \ge 0` (the trainer's ``lr_schedule`` multiplies it).
        scales: ``{parameter: v}`` with ``v`` positive, finite and of the parameter's shape (any
            dtype; used in the parameter's); parameters not listed get ``v = 1``.
        l2: :math:`\rho \ge 0`, added to the gradient (times the parameter) and to the scale.
        clip: :math:`c > 0`, the largest step per coordinate, learning rate included (``math.inf``:
            no clipping).

    Raises:
        ValueError / TypeError: an option out of range, a scale of the wrong shape, not positive or
            not finite, or a scale for a tensor that is not one of the parameters.
    """

    def __init__(self, params: Iterable[Tensor] | Iterable[dict[str, Any]], lr: float = 1.0, *,
                 scales: Mapping[Tensor, Tensor] | None = None, l2: float = 0.0, clip: float = 1.0) -> None:
        if isinstance(params, Tensor):
            raise TypeError("params: expected an iterable of tensors or of parameter-group dicts; got a Tensor "
                            "(wrap it in a list)")
        defaults = {"lr": _number(lr, "lr", positive=False), "l2": _number(l2, "l2", positive=False),
                    "clip": clip if clip == math.inf else _number(clip, "clip", positive=True)}
        super().__init__(params, defaults)
        for i, group in enumerate(self.param_groups):
            _number(group["lr"], f"params[{i}].lr", positive=False)
            _number(group["l2"], f"params[{i}].l2", positive=False)
            if group["clip"] != math.inf:
                _number(group["clip"], f"params[{i}].clip", positive=True)
        self._scales: dict[int, Tensor] = {}
        owned = {id(p): p for g in self.param_groups for p in g["params"]}
        for p, v in (scales or {}).items():
            if id(p) not in owned:
                raise ValueError("scales: a key is not one of the optimizer's parameters; expected "
                                 "{parameter: scale} for parameters passed in params")
            if not isinstance(v, Tensor) or v.shape != p.shape:
                got = tuple(v.shape) if isinstance(v, Tensor) else type(v).__name__
                raise ValueError(f"scales: expected a tensor of the parameter's shape {tuple(p.shape)}; got {got}")
            v = v.detach().to(device=p.device, dtype=p.dtype)
            if not bool(torch.isfinite(v).all()) or not bool((v > 0).all()):
                raise ValueError("scales: expected finite values > 0 (floor the empirical variances, e.g. "
                                 f"feature_moments(..., floor=1e-15)); got min {float(v.min()) if v.numel() else 0.0}")
            self._scales[id(p)] = v

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # type: ignore[override]
        """One update of every parameter with a gradient; ``closure`` re-evaluates the loss first."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, l2, clip = group["lr"], group["l2"], group["clip"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise ValueError("ScaledSGD: sparse gradients are not supported")
                d = p.grad.add(p, alpha=l2) if l2 else p.grad.clone()
                v = self._scales.get(id(p))
                if v is None:
                    d.div_(1.0 + l2)
                else:
                    d.div_(v + l2 if l2 else v)
                if clip == math.inf:
                    p.add_(d, alpha=-lr)  # as torch.optim.SGD rounds it
                else:
                    p.sub_(d.mul_(lr).clamp_(-clip, clip))
        return loss

r"""Elementwise activations with their closed-form derivatives.

An :class:`Activation` bundles the function ``f`` and its vector–Jacobian
product ``grad_z = grad_a * f'(z)``, so a network can run its own backward
pass without autograd (see :meth:`ebms.nets.MLPEnergy.energy_and_grad`).

Names are resolved once, in :data:`ACTIVATIONS`, by :func:`resolve_activation`;
inside the package activations are passed around as objects.

==============  ==============================  ==========================================
name            :math:`f(z)`                    :math:`f'(z)`
==============  ==============================  ==========================================
``silu``        :math:`z\,s(z)`                 :math:`s(z)\,(1 + z\,(1 - s(z)))`
``elu``         :math:`z` or :math:`e^z - 1`    :math:`1` or :math:`f(z) + 1` (``z <= 0``)
``gelu``        :math:`z\,\Phi(z)`              :math:`\Phi(z) + z\,\varphi(z)`
``leaky_relu``  :math:`\max(z, 0.2 z)`          :math:`1` or :math:`0.2`
``relu``        :math:`\max(z, 0)`              :math:`1[z > 0]`
``sigmoid``     :math:`s(z)`                    :math:`s(z)\,(1 - s(z))`
``softplus``    :math:`\log(1 + e^z)`           :math:`s(z)`
``tanh``        :math:`\tanh z`                 :math:`1 - \tanh^2 z`
==============  ==============================  ==========================================

``s`` is the logistic sigmoid, ``Φ``/``φ`` the standard normal cdf/pdf;
``swish`` is another name for ``silu`` (Ramachandran et al., 2017,
"Searching for Activation Functions"). The products are evaluated with
PyTorch's fused elementwise derivative kernels (``torch.ops.aten.*_backward``,
one pass over memory each) when an import-time self-check finds them equal to
autograd, and with the closed forms above in public operations otherwise
(see :mod:`ebms.nets._fastpaths`);
ReLU and leaky ReLU use the derivative's value 0 (resp. 0.2) at ``z = 0``,
like autograd. ``softplus`` and its derivative return ``z`` and 1 only above
the dtype's cut-off :func:`ebms._numerics.softplus_threshold` (20 in float32,
as torch; 37 in float64, where torch's 20 would be off by ``e^{-20}``), so
both are exact to rounding in float64 as well. For Langevin sampling prefer smooth activations (``silu``,
``softplus``, ``tanh``, ``elu``): ``relu`` gives a piecewise-constant gradient.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ebms._numerics import softplus, softplus_threshold
from ebms.nets import _fastpaths

__all__ = ["ACTIVATIONS", "Activation", "ActivationModule", "resolve_activation"]

_aten = torch.ops.aten


@dataclass(frozen=True)
class Activation:
    """An elementwise function with its closed-form derivative.

    Attributes:
        name: name shown in ``repr`` and error messages.
        fn: ``f``, ``z -> a`` (any shape).
        vjp: ``(grad_a, z, a) -> grad_a * f'(z)``; ``a = f(z)`` is passed so
            derivatives written in terms of the output (tanh, sigmoid, relu)
            need no recomputation. ``grad_a`` may be a broadcast (expanded) view.
        public_vjp: the same product written with public torch operations
            only, run when the fast paths are switched off
            (:mod:`ebms.nets._fastpaths`); ``None`` means ``vjp`` is already that.
    """

    name: str
    fn: Callable[[Tensor], Tensor]
    vjp: Callable[[Tensor, Tensor, Tensor], Tensor]
    public_vjp: Callable[[Tensor, Tensor, Tensor], Tensor] | None = None

    def vjp_now(self) -> Callable[[Tensor, Tensor, Tensor], Tensor]:
        """``vjp``, or ``public_vjp`` while ``activation_vjps`` is switched off."""
        if self.public_vjp is not None and _fastpaths.switched_off("activation_vjps"):
            return self.public_vjp
        return self.vjp

    def __call__(self, z: Tensor) -> Tensor:
        return self.fn(z)

    def __repr__(self) -> str:
        return f"Activation({self.name!r})"


class ActivationModule(nn.Module):
    """An :class:`Activation` as an ``nn.Module`` (for ``nn.Sequential`` stacks)."""

    def __init__(self, activation: Activation) -> None:
        super().__init__()
        self.activation = activation

    def forward(self, z: Tensor) -> Tensor:
        return self.activation.fn(z)

    def extra_repr(self) -> str:
        return self.activation.name


# Public closed forms of the same products (used when the aten kernels are absent, disagree,
# or the fast paths are switched off; see ebms.nets._fastpaths).
def _silu_vjp(g: Tensor, z: Tensor, a: Tensor) -> Tensor:
    s = torch.sigmoid(z)
    return g * (s * (1 + z * (1 - s)))


def _gelu_vjp(g: Tensor, z: Tensor, a: Tensor) -> Tensor:
    cdf = 0.5 * (1 + torch.erf(z * math.sqrt(0.5)))
    pdf = torch.exp(-0.5 * z * z) * (1 / math.sqrt(2 * math.pi))
    return g * (cdf + z * pdf)


_PUBLIC_VJPS: dict[str, Callable[[Tensor, Tensor, Tensor], Tensor]] = {
    "silu": _silu_vjp,
    "tanh": lambda g, z, a: g * (1 - a * a),
    "sigmoid": lambda g, z, a: g * (a * (1 - a)),
    "softplus": lambda g, z, a: g * torch.where(z > softplus_threshold(z.dtype), torch.ones_like(z), torch.sigmoid(z)),
    "elu": lambda g, z, a: g * torch.where(a > 0, torch.ones_like(a), a + 1),
    "gelu": _gelu_vjp,
    "relu": lambda g, z, a: g * (a > 0).to(a.dtype),
    "leaky_relu": lambda g, z, a: g * torch.where(z > 0, torch.ones_like(z), torch.full_like(z, 0.2)),
}

_ATEN_VJPS: dict[str, Callable[[Tensor, Tensor, Tensor], Tensor]] = {
    "silu": lambda g, z, a: _aten.silu_backward(g, z),
    "tanh": lambda g, z, a: _aten.tanh_backward(g, a),
    "sigmoid": lambda g, z, a: _aten.sigmoid_backward(g, a),
    "softplus": lambda g, z, a: _aten.softplus_backward(g, z, 1.0, softplus_threshold(z.dtype)),
    "elu": lambda g, z, a: _aten.elu_backward(g, 1.0, 1.0, 1.0, True, a),
    "gelu": lambda g, z, a: _aten.gelu_backward(g, z),
    "relu": lambda g, z, a: _aten.threshold_backward(g, a, 0.0),
    "leaky_relu": lambda g, z, a: _aten.leaky_relu_backward(g, z, 0.2, False),
}

_FNS: dict[str, Callable[[Tensor], Tensor]] = {
    "silu": F.silu,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "softplus": softplus,
    "elu": F.elu,
    "gelu": F.gelu,
    "relu": F.relu,
    "leaky_relu": lambda z: F.leaky_relu(z, 0.2),
}


def _aten_vjps_agree(kernels: dict[str, Callable[[Tensor, Tensor, Tensor], Tensor]] | None = None) -> str:
    """Empty if every aten kernel matches autograd on a tiny float64 input (a broadcast
    ``grad_a`` included, values on both sides of every kink); else why not."""
    z = torch.tensor([[-25.0, -3.0, -0.5, 0.0, 0.5, 3.0, 25.0]], dtype=torch.float64).expand(2, 7).contiguous()
    g = torch.linspace(-2.0, 2.0, 7, dtype=torch.float64).expand(2, 7)  # a broadcast view, as MLPEnergy passes
    kernels = _ATEN_VJPS if kernels is None else kernels
    try:
        for name, fn in _FNS.items():
            zg = z.clone().requires_grad_(True)
            (ref,) = torch.autograd.grad(fn(zg), zg, g)
            a = fn(z)
            for vjp in (kernels[name], _PUBLIC_VJPS[name]):
                out = vjp(g, z, a)
                if out.shape != ref.shape or not torch.allclose(out, ref, rtol=1e-10, atol=1e-12):
                    return f"torch.ops.aten backward kernel for {name!r} disagrees with autograd"
    except Exception as exc:  # noqa: BLE001 - absent op or changed signature
        return f"torch.ops.aten backward kernels unusable: {type(exc).__name__}: {exc}"
    return ""


with torch.inference_mode(False), torch.enable_grad():  # the same answer whatever mode imports us
    _USE_ATEN = _fastpaths.record("activation_vjps", _fastpaths.decide("activation_vjps", lambda: (None, _aten_vjps_agree()))[1])
_VJPS = _ATEN_VJPS if _USE_ATEN else _PUBLIC_VJPS


def _builtin(name: str) -> Activation:
    return Activation(name, _FNS[name], _VJPS[name], _PUBLIC_VJPS[name])


SILU = _builtin("silu")
TANH = _builtin("tanh")
SIGMOID = _builtin("sigmoid")
SOFTPLUS = _builtin("softplus")
ELU = _builtin("elu")
GELU = _builtin("gelu")
RELU = _builtin("relu")
LEAKY_RELU = _builtin("leaky_relu")

#: The one name -> activation table (config/CLI edge only).
ACTIVATIONS: dict[str, Activation] = {
    "elu": ELU,
    "gelu": GELU,
    "leaky_relu": LEAKY_RELU,
    "relu": RELU,
    "sigmoid": SIGMOID,
    "silu": SILU,
    "softplus": SOFTPLUS,
    "swish": SILU,
    "tanh": TANH,
}


def resolve_activation(value: str | Activation, name: str = "activation") -> Activation:
    """An :class:`Activation` from itself or from a name in :data:`ACTIVATIONS`.

    Raises:
        ValueError: unknown name (the message lists the valid ones).
        TypeError: neither a string nor an :class:`Activation`.
    """
    if isinstance(value, Activation):
        return value
    if isinstance(value, str):
        act = ACTIVATIONS.get(value.lower())
        if act is None:
            valid = ", ".join(repr(k) for k in sorted(ACTIVATIONS))
            raise ValueError(f"{name}: expected one of {valid} or an Activation; got {value!r}")
        return act
    raise TypeError(f"{name}: expected a name (str) or an Activation; got {type(value).__name__}")

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
PyTorch's fused elementwise derivative kernels (one pass over memory each);
ReLU and leaky ReLU use the derivative's value 0 (resp. 0.2) at ``z = 0``,
like autograd. For Langevin sampling prefer smooth activations (``silu``,
``softplus``, ``tanh``, ``elu``): ``relu`` gives a piecewise-constant gradient.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

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
    """

    name: str
    fn: Callable[[Tensor], Tensor]
    vjp: Callable[[Tensor, Tensor, Tensor], Tensor]

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


SILU = Activation("silu", F.silu, lambda g, z, a: _aten.silu_backward(g, z))
TANH = Activation("tanh", torch.tanh, lambda g, z, a: _aten.tanh_backward(g, a))
SIGMOID = Activation("sigmoid", torch.sigmoid, lambda g, z, a: _aten.sigmoid_backward(g, a))
SOFTPLUS = Activation("softplus", F.softplus, lambda g, z, a: _aten.softplus_backward(g, z, 1.0, 20.0))
ELU = Activation("elu", F.elu, lambda g, z, a: _aten.elu_backward(g, 1.0, 1.0, 1.0, True, a))
GELU = Activation("gelu", F.gelu, lambda g, z, a: _aten.gelu_backward(g, z))
RELU = Activation("relu", F.relu, lambda g, z, a: _aten.threshold_backward(g, a, 0.0))
LEAKY_RELU = Activation(
    "leaky_relu",
    lambda z: F.leaky_relu(z, 0.2),
    lambda g, z, a: _aten.leaky_relu_backward(g, z, 0.2, False),
)

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

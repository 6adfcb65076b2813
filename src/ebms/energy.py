r"""Energies: the one object every layer of ``ebms`` talks about.

Sign convention (fixed for the whole package):

.. math::  p(x) = \exp(-E(x)) / Z, \qquad Z = \int \exp(-E(x))\,dx .

``energy(x)`` takes a batch ``x: (B, *event_shape)`` and returns ``(B,)``.
Lower energy means more probable. The monograph writes a *potential*
``U = -E``; convert once at the boundary with :func:`potential_to_energy` /
:func:`energy_to_potential`, never by sprinkling minus signs.

Samplers need the energy and its input gradient together; they call
:func:`energy_and_grad`, which uses an energy's own ``energy_and_grad`` method
when it offers one (:class:`~ebms.capabilities.SupportsEnergyAndGrad`: analytic
or fused forms, e.g. :class:`ebms.nets.MLPEnergy`) and autograd otherwise. Any ``nn.Module`` or plain callable that maps
``(B, *event) -> (B,)`` works as an energy; :func:`from_fn` turns a callable
into a module so it composes with ``+`` and :meth:`Energy.tempered`. :class:`ZeroEnergy` is the
zero correction of a conditional sequence model (a residual LM that is its base).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from ebms._checks import check_energy_output, check_positive
from ebms._precision import autocast, autocast_dtype, check_precision
from ebms.capabilities import SupportsEnergyAndGrad, SupportsLogProb, supports
from ebms.sequences import Sequences

__all__ = [
    "Compiled",
    "Energy",
    "EnergyLike",
    "FunctionEnergy",
    "MixedPrecision",
    "Residual",
    "SumEnergy",
    "Tempered",
    "ZeroEnergy",
    "autograd_energy_and_grad",
    "compiled",
    "energy_and_grad",
    "energy_to_potential",
    "evaluate",
    "from_fn",
    "mixed_precision",
    "potential_to_energy",
]


#: Anything callable as ``energy(x) -> (B,)``: an ``nn.Module`` or a plain function.
EnergyLike = Callable[[Tensor], Tensor]


_LOW = (torch.bfloat16, torch.float16)


def _widened(t: Tensor, x: Tensor) -> Tensor:
    """``t`` in ``x``'s float dtype when autocast left it in a narrower one (else ``t`` itself).

    Under ``torch.autocast`` an energy's last product comes out in bfloat16; energies and
    gradients leave every evaluation in the input's dtype (float32 when ``x`` is not floating),
    so Metropolis ratios, losses and updates are never formed in bfloat16. Outside autocast
    nothing changes: a model the user keeps in bfloat16 returns bfloat16.
    """
    if t.dtype not in _LOW or autocast_dtype(t.device.type) is None:
        return t
    want = x.dtype if x.is_floating_point() else torch.float32
    return t if want in _LOW else t.to(want)


def evaluate(energy: EnergyLike, x: Tensor) -> Tensor:
    """``energy(x)`` with its output shape checked to be ``(B,)`` (no host sync).

    Under ``torch.autocast`` a bfloat16 energy is returned in ``x``'s dtype (see :mod:`ebms._precision`).
    """
    e = check_energy_output(energy(x), x.shape[0])
    return e if e.dtype not in _LOW else _widened(e, x)


def _name(energy: Any) -> str:
    """How messages name an energy: a function's qualified name or a module's class."""
    fn = energy.fn if isinstance(energy, FunctionEnergy) else energy
    if isinstance(fn, nn.Module):
        return type(fn).__name__
    return getattr(fn, "__qualname__", None) or type(fn).__name__


def _check_floating(t: Tensor, what: str, energy: Any) -> None:
    if not t.is_floating_point():
        raise TypeError(
            f"{what}: expected a floating-point tensor from energy {_name(energy)!r}; got dtype {t.dtype} "
            "(an integer energy has no gradient: compute it in floating point)"
        )


def autograd_energy_and_grad(
    energy: EnergyLike, x: Tensor, *, allow_constant: bool = False
) -> tuple[Tensor, Tensor]:
    r"""Energy ``(B,)`` and input gradient :math:`\nabla_x E` ``(B, *event)`` via autograd.

    Only the gradient with respect to ``x`` is computed; parameter ``.grad``
    fields are untouched and no graph is kept. Both outputs are detached.

    Args:
        energy: ``(B, *event) -> (B,)``.
        x: ``(B, *event)``.
        allow_constant: return a zero gradient, instead of raising, when
            ``energy(x)`` has no graph back to ``x``. For terms that may
            legitimately be constant in ``x`` (a base distribution's
            ``-log_prob``, e.g. a uniform one), never for the energy a
            sampler follows.

    Raises:
        TypeError: ``energy(x)`` is not a tensor, or not floating point.
        ValueError: ``energy(x)`` is not ``(B,)``, or autograd finds no path
            from it back to ``x`` (it was detached, computed under
            ``torch.no_grad()``, through NumPy or ``.item()``, or does not
            depend on ``x``), which would turn a gradient sampler into a
            random walk without a word. An energy that really is constant
            in ``x`` states its gradient: ``from_fn(fn, grad_fn=torch.zeros_like)``.
    """
    if torch.is_inference_mode_enabled():
        raise RuntimeError(
            f"energy_and_grad: cannot differentiate energy {_name(energy)!r} inside torch.inference_mode(); "
            "use torch.no_grad() around sampling instead (gradients w.r.t. x are still computed)"
        )
    with torch.enable_grad():
        xg = x.detach().requires_grad_(True)
        e = evaluate(energy, xg)
        _check_floating(e, "energy(x)", energy)
        g = None
        if e.requires_grad:
            (g,) = torch.autograd.grad(e.sum(), xg, allow_unused=True)
    if g is None:
        if allow_constant:
            return e.detach(), torch.zeros_like(x)
        raise ValueError(
            f"energy(x): expected a tensor that autograd can differentiate w.r.t. x; energy {_name(energy)!r} "
            "returned one with no graph back to x (detached, computed under no_grad, through NumPy/.item(), "
            "or constant in x), so a gradient sampler would see a zero gradient; keep the computation in "
            "torch, or give the gradient explicitly (from_fn(fn, grad_fn=...) or an energy_and_grad method)"
        )
    return e.detach(), g


def energy_and_grad(energy: EnergyLike, x: Tensor) -> tuple[Tensor, Tensor]:
    """Dispatch to ``energy.energy_and_grad`` when offered, else autograd.

    Returns detached ``(E: (B,), grad: (B, *event))``. Whether the energy offers
    :class:`~ebms.capabilities.SupportsEnergyAndGrad` is resolved once per class or
    object (:func:`~ebms.capabilities.supports`), so the dispatch costs well under a
    microsecond per call. Under ``torch.autocast`` both come back in ``x``'s dtype.

    Raises:
        TypeError: the energy or the gradient is not a floating-point tensor.
        ValueError: wrong shapes, or (autograd route) an energy with no
            graph back to ``x``; see :func:`autograd_energy_and_grad`.
    """
    if not supports(energy, SupportsEnergyAndGrad):
        return autograd_energy_and_grad(energy, x)
    e, g = energy.energy_and_grad(x)
    if e.dtype in _LOW or (isinstance(g, Tensor) and g.dtype in _LOW):  # an analytic form run under autocast
        e, g = _widened(e, x), _widened(g, x) if isinstance(g, Tensor) else g
    # shape metadata only (no host sync): a custom gradient must never broadcast into the state
    check_energy_output(e, x.shape[0], "energy_and_grad(x)[0]")
    _check_floating(e, "energy_and_grad(x)[0]", energy)
    if not isinstance(g, Tensor):
        raise TypeError(f"energy_and_grad(x)[1]: expected a tensor of shape {tuple(x.shape)}; got {type(g).__name__}")
    _check_floating(g, "energy_and_grad(x)[1]", energy)
    if g.shape != x.shape:
        raise ValueError(f"energy_and_grad(x)[1]: expected the gradient's shape {tuple(x.shape)}; got {tuple(g.shape)}")
    return e, g


class Energy(nn.Module):
    """Base class for energies. Subclasses implement ``forward(x) -> (B,)``.

    Override :meth:`energy_and_grad` when an analytic input gradient is
    cheaper than autograd (it must return detached tensors).
    """

    def energy_and_grad(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Detached energy ``(B,)`` and input gradient ``(B, *event)``."""
        return autograd_energy_and_grad(self, x)

    def potential(self, x: Tensor) -> Tensor:
        """The monograph's potential ``U(x) = -E(x)``, shape ``(B,)``."""
        return -self(x)

    def score(self, x: Tensor) -> Tensor:
        r""":math:`\nabla_x \log p(x) = -\nabla_x E(x)`, shape ``(B, *event)``."""
        return -self.energy_and_grad(x)[1]

    def tempered(self, temperature: float) -> Tempered:
        """``E(x) / T``: ``T > 1`` flattens, ``T < 1`` sharpens."""
        return Tempered(self, temperature)

    def __add__(self, other: EnergyLike) -> SumEnergy:
        return SumEnergy(self, other)


class FunctionEnergy(Energy):
    """An energy defined by a plain function (see :func:`from_fn`)."""

    def __init__(
        self,
        fn: EnergyLike,
        grad_fn: Callable[[Tensor], Tensor] | None = None,
    ) -> None:
        super().__init__()
        if not callable(fn):
            raise TypeError(f"fn: expected a callable x -> (B,); got {type(fn).__name__}")
        if grad_fn is not None and not callable(grad_fn):
            raise TypeError(f"grad_fn: expected a callable or None; got {type(grad_fn).__name__}")
        self.fn = fn
        self.grad_fn = grad_fn

    def forward(self, x: Tensor) -> Tensor:
        return self.fn(x)

    def energy_and_grad(self, x: Tensor) -> tuple[Tensor, Tensor]:
        if self.grad_fn is None:
            return autograd_energy_and_grad(self.fn, x)
        with torch.no_grad():
            e = evaluate(self.fn, x)
            g = self.grad_fn(x)
        if not isinstance(g, Tensor):
            raise TypeError(f"grad_fn(x): expected a tensor of shape {tuple(x.shape)}; got {type(g).__name__}")
        if g.shape != x.shape:
            raise ValueError(f"grad_fn(x): expected shape {tuple(x.shape)}; got {tuple(g.shape)}")
        return e, g


def from_fn(
    fn: Callable[[Tensor], Tensor], *, grad_fn: Callable[[Tensor], Tensor] | None = None
) -> FunctionEnergy:
    """Wrap ``fn: (B, *event) -> (B,)`` as an :class:`Energy`.

    Args:
        fn: the energy. Lower is more probable.
        grad_fn: optional analytic :math:`\\nabla_x E`, ``(B, *event) -> (B, *event)``.

    Example:
        >>> import torch
        >>> from ebms.energy import from_fn
        >>> e = from_fn(lambda x: 0.5 * (x ** 2).sum(-1))
        >>> e(torch.zeros(3, 2)).shape
        torch.Size([3])
    """
    return FunctionEnergy(fn, grad_fn)


def potential_to_energy(potential: Callable[[Tensor], Tensor]) -> FunctionEnergy:
    """Convert a monograph potential ``U`` (``p ∝ exp(U)``) to an energy ``E = -U``."""
    return FunctionEnergy(lambda x: -potential(x))


def energy_to_potential(energy: EnergyLike) -> Callable[[Tensor], Tensor]:
    """The potential ``U = -E`` of an energy, as a plain function."""
    return lambda x: -energy(x)


class SumEnergy(Energy):
    """``E(x) = sum_k E_k(x)``: a product of experts. Keeps each term's fast gradient."""

    terms: nn.ModuleList

    def __init__(self, *terms: EnergyLike) -> None:
        super().__init__()
        if len(terms) < 1:
            raise ValueError("terms: expected at least one energy; got none")
        flat: list[EnergyLike] = []
        for t in terms:
            flat.extend(list(t.terms) if isinstance(t, SumEnergy) else [t])
        self.terms = nn.ModuleList(
            [t if isinstance(t, nn.Module) else from_fn(t) for t in flat]
        )

    def forward(self, x: Tensor) -> Tensor:
        out = evaluate(self.terms[0], x)
        for t in self.terms[1:]:
            out = out + evaluate(t, x)
        return out

    def energy_and_grad(self, x: Tensor) -> tuple[Tensor, Tensor]:
        e, g = energy_and_grad(self.terms[0], x)
        for t in self.terms[1:]:
            e_k, g_k = energy_and_grad(t, x)
            e, g = e + e_k, g + g_k
        return e, g


class Tempered(Energy):
    r"""``E(x) / T`` — the Boltzmann distribution at temperature ``T``.

    Args:
        energy: the base energy.
        temperature: ``T > 0``.
    """

    def __init__(self, energy: EnergyLike, temperature: float) -> None:
        super().__init__()
        self.temperature = check_positive(temperature, "temperature")
        self.base = energy if isinstance(energy, nn.Module) else from_fn(energy)

    def forward(self, x: Tensor) -> Tensor:
        return evaluate(self.base, x) / self.temperature

    def energy_and_grad(self, x: Tensor) -> tuple[Tensor, Tensor]:
        e, g = energy_and_grad(self.base, x)
        return e / self.temperature, g / self.temperature


class Residual(Energy):
    r"""Residual energy: a normalised base model times an energy correction.

    .. math::  p(x) \propto p_{base}(x)\,\exp(-E_{corr}(x)), \qquad
               E(x) = -\log p_{base}(x) + E_{corr}(x).

    With a zero correction the model *is* the base (``log Z = 0``), which is
    what makes residual EBMs easy to start and to evaluate (Deng et al., 2020,
    "Residual Energy-Based Models for Text Generation").

    Args:
        base: object with ``log_prob(x) -> (B,)``
            (:class:`~ebms.capabilities.SupportsLogProb`; e.g. an :mod:`ebms.distributions`
            model or a ``torch.distributions`` distribution with event shape matching ``x``).
        correction: the energy correction ``E_corr``.
    """

    def __init__(self, base: Any, correction: EnergyLike) -> None:
        super().__init__()
        if not isinstance(base, SupportsLogProb):
            raise TypeError(f"base: expected an object with log_prob(x) -> (B,); got {type(base).__name__}")
        self.base = base
        self.correction = correction if isinstance(correction, nn.Module) else from_fn(correction)

    def base_energy(self, x: Tensor) -> Tensor:
        """``-log p_base(x)``, shape ``(B,)``."""
        return check_energy_output(-self.base.log_prob(x), x.shape[0], "base.log_prob(x)")

    def forward(self, x: Tensor) -> Tensor:
        return self.base_energy(x) + evaluate(self.correction, x)

    def energy_and_grad(self, x: Tensor) -> tuple[Tensor, Tensor]:
        e0, g0 = autograd_energy_and_grad(self.base_energy, x, allow_constant=True)  # e.g. a uniform base
        e1, g1 = energy_and_grad(self.correction, x)
        return e0 + e1, g0 + g1


class MixedPrecision(Energy):
    r"""An energy evaluated under ``torch.autocast``: products in bfloat16, energies and gradients returned
    in the input's dtype (see :func:`mixed_precision`).

    Args:
        energy: the energy (its parameters stay in their dtype).
        precision: ``"bf16"`` or ``"fp32"`` (no autocast: the energy unchanged).
    """

    def __init__(self, energy: EnergyLike, precision: str = "bf16") -> None:
        super().__init__()
        self.precision = check_precision(precision)
        self.base = energy if isinstance(energy, nn.Module) else from_fn(energy)

    def forward(self, x: Tensor) -> Tensor:
        with autocast(self.precision, x.device.type):
            return evaluate(self.base, x)  # in x's dtype: evaluate widens what autocast narrowed

    def energy_and_grad(self, x: Tensor) -> tuple[Tensor, Tensor]:
        with autocast(self.precision, x.device.type):
            return energy_and_grad(self.base, x)  # in x's dtype, as evaluate

    def extra_repr(self) -> str:
        return f"precision={self.precision!r}"


def mixed_precision(energy: EnergyLike, precision: str = "bf16") -> MixedPrecision:
    """``energy`` evaluated with its matrix products in bfloat16 (``torch.autocast``), for samplers and objectives.

    Chain states, energies and input gradients stay in the input's dtype; analytic gradients
    (:meth:`ebms.nets.MLPEnergy.energy_and_grad`) take their bfloat16 path, closed-form energies
    (Gaussians, RBMs, lattices) stay exact in full precision. Whether it is faster depends on the
    hardware: without bfloat16 instructions (an AVX2-only CPU) it is much slower
    (``benchmarks/precision.py`` measures it).

    Example:
        >>> import torch
        >>> from ebms.energy import mixed_precision
        >>> from ebms.nets import MLPEnergy
        >>> net = MLPEnergy(2, hidden=(16,))
        >>> e, g = mixed_precision(net).energy_and_grad(torch.randn(4, 2))
        >>> e.dtype, g.dtype
        (torch.float32, torch.float32)
    """
    return MixedPrecision(energy, precision)


class Compiled(Energy):
    """An energy whose ``forward`` and ``energy_and_grad`` run through ``torch.compile`` (see :func:`compiled`).

    Args:
        energy: the energy module; its parameters are shared, not copied.
        **options: passed to ``torch.compile`` (e.g. ``dynamic=False``, ``mode="max-autotune"``).
    """

    def __init__(self, energy: EnergyLike, **options: Any) -> None:
        super().__init__()
        self.base = energy if isinstance(energy, nn.Module) else from_fn(energy)
        self.options = dict(options)
        base = self.base
        self._forward = torch.compile(base, **options)
        if supports(base, SupportsEnergyAndGrad):
            self._grad = torch.compile(base.energy_and_grad, **options)
        else:
            self._grad = torch.compile(lambda x: autograd_energy_and_grad(base, x), **options)

    def forward(self, x: Tensor) -> Tensor:
        return self._forward(x)

    def energy_and_grad(self, x: Tensor) -> tuple[Tensor, Tensor]:
        return self._grad(x)


def compiled(energy: EnergyLike, **options: Any) -> Compiled:
    """``energy`` with ``forward`` and ``energy_and_grad`` compiled by ``torch.compile`` (same values to rounding).

    The first calls compile (seconds to a minute on a CPU, a C++ compiler needed); a new batch
    shape recompiles unless ``dynamic=True``. Pays where Python overhead or unfused elementwise
    work dominates (small networks, many steps); ``benchmarks/precision.py`` measures it.

    Example:
        >>> # not run (compiles for several seconds)
        >>> sampler.sample(compiled(net, dynamic=False), x0, steps=200, generator=g)
    """
    return Compiled(energy, **options)


class ZeroEnergy(nn.Module):
    r"""The zero energy of a conditional sequence model: :math:`E(x \mid c) = 0` for every pair.

    As the correction of a :class:`~ebms.models.ResidualLM` it leaves the base LM's law
    unchanged, :math:`p(x \mid c) = p_{LM}(x \mid c)` with :math:`\log Z(c) = 0`: a plain LM wrapped
    this way is its own horizon law, evaluated and sampled by the same code as a trained
    residual EBM (Deng et al., 2020, "Residual Energy-Based Models for Text Generation").

    ``forward(prefix, x) -> (B,)`` zeros on ``x``'s device (``B = x.batch_size``); it has no weights.
    """

    def forward(self, prefix: Sequences, x: Sequences) -> Tensor:
        return torch.zeros(x.batch_size, device=x.tokens.device)

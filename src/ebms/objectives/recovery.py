r"""Diffusion recovery likelihood (Gao, Song, Poole, Wu & Kingma, 2021).

Noise levels :math:`\sigma_1, \dots, \sigma_T \in (0, 1)` (``sigmas[t]`` is
:math:`\sigma_{t+1}`) define a variance-preserving forward chain from the data
:math:`x_0`:

.. math::  x_{t+1} = \sqrt{1 - \sigma_{t+1}^2}\; x_t + \sigma_{t+1}\,\varepsilon, \qquad
           x_t = \sqrt{\bar\alpha_t}\, x_0 + \sqrt{1 - \bar\alpha_t}\,\varepsilon', \quad
           \bar\alpha_t = \textstyle\prod_{s \le t} (1 - \sigma_s^2).

We use the paper's *scaled* form: the energy of level ``t`` is defined on
:math:`y_t = \sqrt{1 - \sigma_{t+1}^2}\, x_t`, so that :math:`x_{t+1} = y_t + \sigma_{t+1}\varepsilon`
and the conditional ("recovery") EBM is

.. math::  p_\theta(y_t \mid x_{t+1}) \propto
           \exp\!\Big(-E_\theta(y_t, t) - \frac{\lVert x_{t+1} - y_t \rVert^2}{2\sigma_{t+1}^2}\Big).

The quadratic term makes it far easier to sample than the marginal: short-run
Langevin (ULA) started at :math:`x_{t+1}`, with step
:math:`\epsilon_t = b\,\sigma_{t+1}^2 (1 - \sigma_{t+1}^2)`, on the conditional energy.

The step is a fraction ``b`` of the conditional's variance for unit-variance data:
if :math:`x_t \sim \mathcal N(m, I)` then :math:`y_t \mid x_{t+1}` is Gaussian with
variance :math:`\sigma_{t+1}^2 (1 - \sigma_{t+1}^2)`, which shrinks to 0 as
:math:`\sigma_{t+1} \to 1` because :math:`y_t` itself is scaled by
:math:`\sqrt{1 - \sigma_{t+1}^2}`. The rule :math:`\epsilon = b\,\sigma^2` (Langevin
noise proportional to :math:`\sigma`) ignores that factor: at the top level of a schedule
that ends near pure noise (which :func:`recovery_sample`'s start :math:`\mathcal N(0, I)`
needs) it is ``1 / (1 - σ²)`` times too large, and ULA diverges on the conditional
(at σ = 0.99 and ``b = 0.1``: :math:`\epsilon/(2 v) = 2.5 > 2`), which in training
feeds back into energies that grow without bound.

Loss (rows draw ``t`` uniformly from ``0..T-1``; negatives detached):

.. math::  \mathcal L = \overline{E_\theta(y_t^+, t)} - \overline{E_\theta(y_t^-, t)},

the recovery log-likelihood's gradient estimate (the quadratic term does not
depend on :math:`\theta`). Sampling (:func:`recovery_sample`) is progressive:
:math:`x_T \sim \mathcal N(0, I)`, then for ``t = T-1, ..., 0`` draw :math:`y_t` from
the conditional and set :math:`x_t = y_t / \sqrt{1 - \sigma_{t+1}^2}`.

**The authors' protocol** (their released code; options off by default, and helpers):

* ``scaled=True``: the network's energy enters the conditional divided by the level's Langevin step,
  :math:`E_\theta(y, t) / \epsilon_t`, so that one ULA step moves
  :math:`y` by :math:`-\tfrac12 \nabla_y E_\theta` (plus the pull of the quadratic term and
  :math:`\sqrt{\epsilon_t}` noise) whatever the level: the network learns the move itself.
* ``marginal_top=True``: the top level is an *unconditional* EBM of :math:`x_{T-1}` (no quadratic
  term, no :math:`\sqrt{1-\sigma^2}` scaling), sampled by ULA from :math:`x_T`; with a top level near
  pure noise this is the short-run EBM that turns :math:`\mathcal N(0, I)` into :math:`x_{T-1}`.
* ``level_weights``: a weight per level on the loss (the authors use :math:`\sigma_1 / \sigma_{t+1}`).
* :func:`gao_sigmas` gives their levels (DDPM's 1,000 linear :math:`\beta` from ``1e-4`` to ``0.02``,
  grouped into ``T`` levels, the last one reaching :math:`\bar\alpha \approx 4 \cdot 10^{-5}`);
  :func:`gao_step_sizes` their steps :math:`\epsilon_t = b\,\sigma_{t+1}^2\,\bar\sigma_t / \bar\sigma_0`
  (``b = 2e-4``; :math:`\bar\sigma_t` the marginal noise of :math:`x_t`, :math:`\bar\sigma_0 = 0.01`, the
  one DDPM step their :math:`x_0` carries), far smaller than the conditional's variance: the chains
  follow the learned drift more than they diffuse (``step_sizes=``).
* :func:`protocol_options` spells out the keyword arguments of either protocol (``"plain"``, ``"gao"``).

Reference: Gao, R., Song, Y., Poole, B., Wu, Y. N. & Kingma, D. P. (2021).
"Learning Energy-Based Models by Diffusion Recovery Likelihood." ICLR.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ebms._checks import check_int, check_positive, check_tensor
from ebms.capabilities import HasEventShape
from ebms.energy import Energy, from_fn
from ebms.objectives._base import LossOutput, check_batch, scalar_metrics
from ebms.samplers.langevin import ULA

__all__ = ["PROTOCOLS", "RecoveryLikelihood", "RecoveryPairs", "gao_sigmas", "gao_step_sizes", "protocol_options",
           "recovery_sample"]

#: A noise-conditional energy ``(x (B, *event), t LongTensor (B,)) -> (B,)``.
ConditionalModel = Callable[[Tensor, Tensor], Tensor]


@dataclass(frozen=True)
class RecoveryPairs:
    """One batch of recovery pairs (detached).

    Attributes:
        t: levels ``LongTensor (B,)``.
        positives: :math:`y_t = \\sqrt{1-\\sigma_{t+1}^2}\\,x_t`, ``(B, *event)``.
        noisy: :math:`x_{t+1}`, ``(B, *event)``.
        negatives: Langevin draws of :math:`y_t \\mid x_{t+1}`, ``(B, *event)``.
        accept: mean acceptance (0-d); nonfinite: fraction of rejected non-finite proposals (0-d).
    """

    t: Tensor
    positives: Tensor
    noisy: Tensor
    negatives: Tensor
    accept: Tensor
    nonfinite: Tensor


def _check_sigmas(sigmas: Sequence[float] | Tensor) -> Tensor:
    s = torch.as_tensor(sigmas, dtype=torch.float64) if not isinstance(sigmas, Tensor) else sigmas.double()
    if s.dim() != 1 or s.numel() == 0:
        raise ValueError(f"sigmas: expected a non-empty 1-D sequence of noise levels; got shape {tuple(s.shape)}")
    if not bool(((s > 0) & (s < 1)).all()):
        raise ValueError(f"sigmas: expected every level in (0, 1); got {s.tolist()}")
    return s


def _alpha_bar(s: Tensor) -> Tensor:
    r""":math:`\bar\alpha_t = \prod_{s \le t} (1 - \sigma_s^2)` for ``t = 0..T-1`` (``alpha_bar[0] = 1``: ``x_0`` is the data)."""
    return torch.cat([s.new_ones(1), torch.cumprod(1 - s**2, 0)[:-1]])


def gao_sigmas(n_levels: int = 6) -> Tensor:
    r"""The noise levels :math:`\sigma_1..\sigma_T` of Gao et al.'s code, float64 ``(T,)``.

    DDPM's schedule (1,000 steps, :math:`\beta` linear from ``1e-4`` to ``0.02``) cut at steps
    ``0, s, 2s, ..., (T-1) s`` and ``999`` with ``s = 1000 // (2 (T - 1))``; level ``t`` merges the
    DDPM steps between two cuts: :math:`\sigma_{t+1}^2 = 1 - \prod (1 - \beta)` over them. The first
    DDPM step (:math:`\sigma = 0.01`) is the authors' :math:`x_0` noise and is left out (our :math:`x_0`
    is the data). ``T = 6``: ``0.3237, 0.5165, 0.6322, 0.7132, 0.7734, 0.9997``.
    """
    n_levels = check_int(n_levels, "n_levels", minimum=2)
    if n_levels > 501:
        raise ValueError(f"n_levels: expected at most 501 (1,000 DDPM steps cut every 1000 // (2 (T - 1))); got {n_levels}")
    betas = torch.linspace(1e-4, 0.02, 1000, dtype=torch.float64)
    step = 1000 // (2 * (n_levels - 1))
    cuts = [i * step for i in range(n_levels)] + [999]
    keep = torch.stack([(1 - betas[a + 1: b + 1]).prod() for a, b in zip(cuts, cuts[1:])])
    return (1 - keep).sqrt()


def gao_step_sizes(sigmas: Sequence[float] | Tensor, b: float = 2e-4, first: float = 0.01) -> Tensor:
    r"""Gao et al.'s Langevin step per level, :math:`\epsilon_t = b\,\sigma_{t+1}^2\,\bar\sigma_t / \bar\sigma_0`, float64 ``(T,)``.

    :math:`\bar\sigma_t = \sqrt{1 - (1 - \bar\sigma_0^2)\,\bar\alpha_t}` is the marginal noise of
    :math:`x_t` when :math:`x_0` carries noise :math:`\bar\sigma_0` = ``first`` (the authors' one DDPM
    step), :math:`\bar\alpha_t = \prod_{s \le t}(1 - \sigma_s^2)`. Their ``b`` (``mcmc_step_size_b_square``)
    is ``2e-4``; with :func:`gao_sigmas` the steps are ``2.1e-05`` at the lowest level and ``1.9e-02`` at the top.
    """
    s = _check_sigmas(sigmas)
    b = check_positive(b, "b")
    first = check_positive(first, "first")
    if first >= 1:
        raise ValueError(f"first: expected the noise of x_0 in (0, 1); got {first}")
    marginal = (1 - (1 - first**2) * _alpha_bar(s)).sqrt()
    return b * s**2 * marginal / first


#: the protocols :func:`protocol_options` knows: ``plain`` (the paper's equations, step ``b σ² (1 − σ²)``) and
#: ``gao`` (the authors' code: module docstring).
PROTOCOLS = ("plain", "gao")


def protocol_options(name: str, sigmas: Sequence[float] | Tensor, b: float, *, weights: bool = True) -> dict[str, Any]:
    """Keyword arguments of :class:`RecoveryLikelihood` (``weights=True``) or :func:`recovery_sample`
    (``weights=False``) for a protocol at levels ``sigmas``: ``plain`` gives ``b=b``; ``gao`` gives
    ``step_sizes=gao_step_sizes(sigmas, b)`` (their ``b`` is ``2e-4``), ``scaled=True``, ``marginal_top=True``
    and, with ``weights``, ``level_weights = sigmas[0] / sigmas``."""
    if name not in PROTOCOLS:
        raise ValueError(f"name: expected one of {', '.join(PROTOCOLS)}; got {name!r}")
    if name == "plain":
        return {"b": b}
    s = _check_sigmas(sigmas)
    out: dict[str, Any] = {"step_sizes": gao_step_sizes(s, b=b), "scaled": True, "marginal_top": True}
    if weights:
        out["level_weights"] = s[0] / s
    return out


def _per_level(values: Sequence[float] | Tensor, sigmas: Tensor, name: str) -> Tensor:
    v = torch.as_tensor(values, dtype=torch.float64) if not isinstance(values, Tensor) else values.double()
    if v.shape != sigmas.shape or not bool(((v > 0) & v.isfinite()).all()):
        raise ValueError(f"{name}: expected {sigmas.numel()} finite positive values, one per level; got {v.tolist()}")
    return v


class RecoveryLikelihood(nn.Module):
    r"""Diffusion recovery likelihood objective (module docstring for the math).

    Called as ``objective(model, batch, *, generator=None) -> LossOutput`` where
    ``model(x, t)`` is a noise-conditional energy (e.g.
    :class:`~ebms.nets.noise_conditional.NoiseConditionalEnergy`) and ``batch``
    the clean data ``(B, *event)``.

    What keeps its graph: both energy terms, through the parameters; the
    negatives are detached (the sampler returns detached chains).

    Metrics (one host sync): ``loss``, ``e_pos``, ``e_neg``, ``gap = e_neg - e_pos``,
    ``accept``, ``nonfinite``. A gap near zero at every level means the
    conditionals are well sampled; a growing one, too few steps or too small ``b``.

    Cost per call: ``k`` energy-and-gradient evaluations on ``B`` chains plus one
    forward/backward on ``2B`` rows.

    Random draws per call, in order: ``t (B,)``, the noise of :math:`x_t`, the noise
    of :math:`x_{t+1}`, then the sampler's noise.

    Args:
        sigmas: ``T`` noise levels in ``(0, 1)``; ``sigmas[t]`` is :math:`\sigma_{t+1}`.
        k: Langevin steps per conditional draw.
        b: step-size factor ``> 0``: ULA step :math:`\epsilon = b\,\sigma_{t+1}^2 (1 - \sigma_{t+1}^2)`
            (for unit-variance data at level ``t``, ``b`` times the conditional's variance:
            stable for ``b < 4``, and ULA's stationary variance exceeds the target's by a
            factor ``1 / (1 - b/4)``; a flat energy or a broader one is no less stable).
        step_size_fn: optional ``sigma (B,) -> epsilon (B,)`` replacing the ``b`` rule.
        step_sizes: optional ``T`` steps, one per level (e.g. :func:`gao_step_sizes`), replacing the
            ``b`` rule; not with ``step_size_fn``.
        scaled: the energy enters the conditional as :math:`E(y, t) / \epsilon_t` (the authors'
            parametrisation; module docstring).
        marginal_top: the top level is an unconditional EBM of :math:`x_{T-1}` sampled from
            :math:`x_T` (module docstring).
        level_weights: optional ``T`` positive loss weights, one per level (the authors:
            ``sigmas[0] / sigmas``); the metrics stay unweighted means.
    """

    sigmas: Tensor
    alpha_bar: Tensor
    fixed_steps: Tensor | None
    weights: Tensor | None

    def __init__(
        self,
        sigmas: Sequence[float] | Tensor,
        k: int = 30,
        *,
        b: float = 0.1,
        step_size_fn: Callable[[Tensor], Tensor] | None = None,
        step_sizes: Sequence[float] | Tensor | None = None,
        scaled: bool = False,
        marginal_top: bool = False,
        level_weights: Sequence[float] | Tensor | None = None,
    ) -> None:
        super().__init__()
        s = _check_sigmas(sigmas)
        self.k = check_int(k, "k", minimum=1)
        self.b = check_positive(b, "b")
        if step_size_fn is not None and not callable(step_size_fn):
            raise TypeError(f"step_size_fn: expected a callable sigma -> step size or None; got {step_size_fn!r}")
        if step_size_fn is not None and step_sizes is not None:
            raise ValueError("step_sizes: expected either step_sizes or step_size_fn, not both")
        for name, flag in (("scaled", scaled), ("marginal_top", marginal_top)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name}: expected True or False; got {flag!r}")
        self.step_size_fn = step_size_fn
        self.scaled, self.marginal_top = scaled, marginal_top
        self.register_buffer("sigmas", s)
        self.register_buffer("fixed_steps", None if step_sizes is None else _per_level(step_sizes, s, "step_sizes"))
        self.register_buffer("weights", None if level_weights is None else _per_level(level_weights, s, "level_weights"))
        self.register_buffer("alpha_bar", _alpha_bar(s))

    @property
    def n_levels(self) -> int:
        return int(self.sigmas.numel())

    def step_sizes(self, t: Tensor, dtype: torch.dtype) -> Tensor:
        """ULA step per row ``(B,)`` for levels ``t: LongTensor (B,)``."""
        sigma = self.sigmas.to(t.device)[t]
        if self.fixed_steps is not None:
            eps = self.fixed_steps.to(t.device)[t]
        elif self.step_size_fn is None:
            eps = self.b * sigma**2 * (1 - sigma**2)
        else:
            eps = self.step_size_fn(sigma)
        if not isinstance(eps, Tensor) or eps.shape != t.shape or not bool((eps > 0).all() & eps.isfinite().all()):
            raise ValueError(
                f"step_size_fn: expected finite positive step sizes of shape {tuple(t.shape)}; got {eps!r}"
            )
        return eps.to(dtype)

    def is_marginal(self, t: Tensor) -> Tensor:
        """``(B,)`` bool: rows whose level is the unconditional top one (``marginal_top``)."""
        return (t == self.n_levels - 1) & self.marginal_top

    def scales(self, t: Tensor, dtype: torch.dtype) -> Tensor:
        r"""``(B,)``: the factor from :math:`x_t` to the energy's input, :math:`\sqrt{1 - \sigma_{t+1}^2}`
        (``1`` at an unconditional top level)."""
        sigma = self.sigmas.to(t.device)[t]
        return torch.where(self.is_marginal(t), torch.ones_like(sigma), (1 - sigma**2).sqrt()).to(dtype)

    def conditional(self, model: ConditionalModel, noisy: Tensor, t: Tensor) -> Energy:
        r"""The energy :math:`y \mapsto E(y, t) + \lVert x_{t+1} - y\rVert^2 / (2\sigma_{t+1}^2)`, per row
        (:math:`E / \epsilon_t` with ``scaled``; no quadratic term at an unconditional top level).

        Args:
            model: ``(y, t) -> (B,)``.
            noisy: :math:`x_{t+1}`, ``(B, *event)``.
            t: ``LongTensor (B,)`` in ``[0, T)``.
        """
        check_tensor(t, "t")
        if t.dtype != torch.long or tuple(t.shape) != (noisy.shape[0],):
            raise ValueError(f"t: expected a LongTensor of shape ({noisy.shape[0]},); got {t.dtype} {tuple(t.shape)}")
        if int(t.min()) < 0 or int(t.max()) >= self.n_levels:
            raise ValueError(
                f"t: expected levels in [0, {self.n_levels - 1}]; got min {int(t.min())}, max {int(t.max())}"
            )
        var = (self.sigmas.to(noisy.device)[t] ** 2).to(noisy.dtype)
        pull = torch.where(self.is_marginal(t), torch.zeros_like(var), 1 / (2 * var))
        scale = 1 / self.step_sizes(t, noisy.dtype) if self.scaled else None
        target = noisy.detach()

        def fn(y: Tensor) -> Tensor:
            sq = (target - y).pow(2).flatten(1).sum(1)
            e = model(y, t)
            return (e if scale is None else e * scale) + sq * pull

        return from_fn(fn)

    def sample_conditional(
        self, model: ConditionalModel, noisy: Tensor, t: Tensor, *, generator: torch.Generator | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``k`` ULA steps on :meth:`conditional` from ``y = noisy``.

        Returns:
            ``(y, accept, nonfinite)``: detached draws ``(B, *event)`` and two 0-d tensors.
        """
        energy = self.conditional(model, noisy, t)
        sampler = ULA(step_size=1.0)
        state = sampler.init(energy, noisy.detach())
        state = state.replace(step_size=self.step_sizes(t, noisy.dtype))
        accept = noisy.new_zeros(())
        bad = noisy.new_zeros(())
        for state, info in sampler.iterate(energy, state, self.k, generator=generator):  # noqa: B007, B020
            accept = accept + info.acceptance_rate.to(accept.dtype)
            bad = bad + info.nonfinite.to(bad.dtype).mean()
        return state.x.detach(), accept / self.k, bad / self.k

    def pairs(
        self, model: ConditionalModel, batch: Tensor, *, generator: torch.Generator | None = None
    ) -> RecoveryPairs:
        """Draw levels, the noisy pairs and the negatives for a clean batch ``(B, *event)``."""
        x0 = check_batch(batch)
        B, dev, dtype = x0.shape[0], x0.device, x0.dtype
        t = torch.randint(0, self.n_levels, (B,), generator=generator, device=dev)
        view = (B,) + (1,) * (x0.dim() - 1)
        ab = self.alpha_bar.to(dev)[t].to(dtype).reshape(view)
        sig = self.sigmas.to(dev)[t].to(dtype).reshape(view)
        e1 = torch.randn(x0.shape, generator=generator, device=dev, dtype=dtype)
        e2 = torch.randn(x0.shape, generator=generator, device=dev, dtype=dtype)
        x_t = ab.sqrt() * x0 + (1 - ab).sqrt() * e1
        noisy = (1 - sig**2).sqrt() * x_t + sig * e2
        y_t = self.scales(t, dtype).reshape(view) * x_t
        neg, accept, bad = self.sample_conditional(model, noisy, t, generator=generator)
        return RecoveryPairs(t=t, positives=y_t, noisy=noisy, negatives=neg, accept=accept, nonfinite=bad)

    def forward(
        self, model: ConditionalModel, batch: Tensor, *, generator: torch.Generator | None = None
    ) -> LossOutput:
        """Recovery-likelihood loss for clean data ``(B, *event)``; negatives ``(B, *event)`` (level ``t`` scale)."""
        p = self.pairs(model, batch, generator=generator)
        B = p.t.shape[0]
        e = model(torch.cat([p.positives, p.negatives]), torch.cat([p.t, p.t]))
        if not isinstance(e, Tensor) or tuple(e.shape) != (2 * B,):
            raise ValueError(f"model(x, t): expected energies of shape ({2 * B},); got {getattr(e, 'shape', e)!r}")
        m_pos, m_neg = e[:B].mean(), e[B:].mean()
        loss = m_pos - m_neg if self.weights is None else (self.weights.to(e)[p.t] * (e[:B] - e[B:])).mean()
        metrics = scalar_metrics(
            loss=loss, e_pos=m_pos, e_neg=m_neg, gap=m_neg - m_pos, accept=p.accept, nonfinite=p.nonfinite
        )
        return LossOutput(loss=loss, metrics=metrics, negatives=p.negatives)

    def extra_repr(self) -> str:
        extra = "".join(f", {k}=True" for k in ("scaled", "marginal_top") if getattr(self, k))
        return f"n_levels={self.n_levels}, k={self.k}, b={self.b}{extra}"


def recovery_sample(
    model: ConditionalModel,
    sigmas: Sequence[float] | Tensor,
    n: int,
    *,
    k: int = 30,
    generator: torch.Generator | None = None,
    b: float = 0.1,
    step_size_fn: Callable[[Tensor], Tensor] | None = None,
    step_sizes: Sequence[float] | Tensor | None = None,
    scaled: bool = False,
    marginal_top: bool = False,
    event_shape: Sequence[int] | None = None,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
    keep_levels: bool = False,
) -> Tensor:
    r"""Progressive sampling from :math:`x_T \sim \mathcal N(0, I)` down to :math:`x_0` (module docstring).

    Random draws, in order: :math:`x_T`, then each level's Langevin noise (``t = T-1, ..., 0``).
    Cost: ``T k`` energy-and-gradient evaluations on ``n`` chains.

    Args:
        model: ``(x, t) -> (B,)``; its ``event_shape`` attribute is used unless given.
        sigmas: the ``T`` training noise levels.
        n: number of samples.
        k, b, step_size_fn, step_sizes, scaled, marginal_top: as :class:`RecoveryLikelihood`.
        event_shape: shape of one sample (default ``model.event_shape``).
        keep_levels: also return every level's chains (to plot how each short run moves).

    Returns:
        Detached samples ``(n, *event_shape)``; with ``keep_levels``, ``(T + 1, n, *event_shape)``:
        :math:`x_T` (the noise) first, then :math:`x_{T-1}, \dots, x_0` (the samples last).
    """
    check_int(n, "n", minimum=1)
    obj = RecoveryLikelihood(sigmas, k, b=b, step_size_fn=step_size_fn, step_sizes=step_sizes, scaled=scaled,
                             marginal_top=marginal_top)
    shape = event_shape
    if shape is None and isinstance(model, HasEventShape):
        shape = model.event_shape
    if shape is None:
        raise ValueError("event_shape: expected a shape, or a model with an event_shape attribute; got neither")
    x = torch.randn((n, *tuple(shape)), generator=generator, dtype=dtype, device=device)
    kept = [x] if keep_levels else None  # every level's chains are held only when asked for
    for level in range(obj.n_levels - 1, -1, -1):
        t = torch.full((n,), level, dtype=torch.long, device=x.device)
        y, _, _ = obj.sample_conditional(model, x, t, generator=generator)
        x = y / obj.scales(t[:1], torch.float64).item()
        if kept is not None:
            kept.append(x)
    return x if kept is None else torch.stack(kept)

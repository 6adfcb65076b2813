r"""Inclusive-NRF (Song & Ou, 2018): a random field trained with an inclusive auxiliary generator.

The energy model :math:`p_\theta(x) \propto e^{-E_\theta(x)}` (the monograph writes
:math:`u_\theta = -E_\theta`) is paired with a latent-variable generator (monograph Eq. 2.35)

.. math::  h \sim \mathcal N(0, I_{d_h}), \qquad x = g_\phi(h) + \epsilon, \quad
           \epsilon \sim \mathcal N(0, \sigma^2 I), \qquad
           \log q_\phi(h, x) = -\tfrac12\|h\|^2 - \tfrac1{2\sigma^2}\|x - g_\phi(h)\|^2
           - \tfrac{d_h + D}2\log 2\pi - D\log\sigma ,

and the two are trained on two objectives (Eq. 2.34): :math:`\min_\theta KL[p_{\mathrm{emp}}\|p_\theta]`
(maximum likelihood) and :math:`\min_\phi KL[p_\theta\|q_\phi]` (the *inclusive* divergence, which makes
the generator cover the model's modes: a good proposal). Their gradients (Proposition 1, Eq. 2.36) are

.. math::  -\partial_\theta KL[p_{\mathrm{emp}}\|p_\theta]
           = \mathbb E_{p_{\mathrm{emp}}}[-\nabla_\theta E_\theta(\tilde x)]
           - \mathbb E_{p_\theta}[-\nabla_\theta E_\theta(x)], \qquad
           -\partial_\phi KL[p_\theta\|q_\phi] = \mathbb E_{p_\theta(x) q_\phi(h|x)}[\nabla_\phi\log q_\phi(h, x)] .

**Sampling (Algorithm 8): revise generator draws in the augmented space.** The target is
:math:`p_\theta(x)\,q_\phi(h|x)` (Eq. 2.37), whose :math:`x`-marginal is :math:`p_\theta`. Its
:math:`x`-score holds the intractable :math:`\partial_x \log q_\phi(x)`, replaced by
:math:`\partial_x\log q_\phi(h^*, x)` at one Langevin draw :math:`h^*` aimed at :math:`q_\phi(h|x)`
(Proposition 2, Eq. 2.38-2.39). From an ancestral draw :math:`(x^{(0)}, h^{(0)}) \sim q_\phi`, for
:math:`l = 1..L` with step :math:`\delta` (the SGLD form, Eq. 2.24) and :math:`\eta \sim \mathcal N(0, I)`:

.. math::  h^{*} &= h^{(l-1)} \ (l = 1), \quad
           h^{(l-1)} + \delta^*\,\partial_h\log q_\phi(h^{(l-1)}, x^{(l-1)}) + \sqrt{2\delta^*}\,\eta^* \ (l > 1)
           \quad\text{(2.41)} \\
           x^{(l)} &= x^{(l-1)} + \delta\Big[-\nabla_x E_\theta(x^{(l-1)})
           + \frac{g_\phi(h^{(l-1)}) - g_\phi(h^*)}{\sigma^2}\Big] + \sqrt{2\delta}\,\eta_x \\
           h^{(l)} &= h^{(l-1)} + \delta\,\partial_h\log q_\phi(h^{(l-1)}, x^{(l-1)}) + \sqrt{2\delta}\,\eta_h
           \quad\text{(2.40)},

where :math:`\partial_h \log q_\phi(h, x) = -h + J_{g_\phi}(h)^\top (x - g_\phi(h))/\sigma^2` (autograd
through :math:`g_\phi`) and the bracket is the closed form of
:math:`\partial_x[\log q_\phi(h, x) - \log q_\phi(h^*, x)]` for this Gaussian generator. The SGHMC
alternative (``revision="sghmc"``; Chen, Fox & Guestrin 2014, Eq. 15) moves the same drift
:math:`\Delta(z)` of :math:`z = (x, h)` through a momentum with friction :math:`\alpha`:
:math:`v \leftarrow (1 - \alpha) v + \delta\,\Delta(z) + \sqrt{2\alpha\delta}\,\eta`,
:math:`z \leftarrow z + v`, from :math:`v = 0` (the :math:`h^*` draw stays a Langevin step).

**Training (Algorithm 7).** With the revised samples :math:`(x, h)` detached, one loss carries both
updates (their parameters do not meet):

.. math::  \mathcal L = \overline{E_\theta(\tilde x)} - \overline{E_\theta(x)}
           + \alpha_E\big(\overline{E(\tilde x)^2} + \overline{E(x)^2}\big)
           + \lambda_q\,\overline{\tfrac1{2\sigma^2}\|x - g_\phi(h)\|^2},

the last term being :math:`-\overline{\log q_\phi(h, x)}` up to terms without :math:`\phi`: an L2
regression of :math:`g_\phi(h)` onto the revised :math:`x` (the inclusive-KL step fits the generator
to the revised samples). :math:`\sigma` is fixed (the monograph absorbs it into the learning rates,
footnote 15). The generator is a sub-module, so its parameters are in ``objective.parameters()``
(the trainer's second parameter group) and in ``objective.state_dict()``.

What is ours: the energy-sign convention, the optional :math:`\alpha_E` term (as in CD), the weight
:math:`\lambda_q`, one step size :math:`\delta` for :math:`x` and :math:`h` (and :math:`\delta^* = \delta`
unless given), the rows whose move turns non-finite staying where they were (counted in ``nonfinite``).

Reference: Song, Y. & Ou, Z. (2018). "Learning Neural Random Fields with Inclusive Auxiliary
Generators." arXiv:1806.00271; monograph (Ou, *Energy-Based Models with Applications to Speech and
Language Processing*), Sec. 2.3.4, Algorithms 7-8, Eqs. 2.35-2.41.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ebms._checks import check_choice, check_int, check_positive, check_probability, check_tensor
from ebms.energy import EnergyLike, energy_and_grad, evaluate
from ebms.nets import Activation, resolve_activation
from ebms.objectives._base import LossOutput, check_batch, scalar_metrics

__all__ = ["InclusiveNRF", "LatentGaussianGenerator", "inclusive_nrf_revise"]

REVISIONS = ("sgld", "sghmc")


class _MLP(nn.Module):
    """``h (N, d_h) -> (N, D)``: linear layers with an activation between them."""

    def __init__(self, widths: Sequence[int], activation: Activation) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:])])
        self.activation = activation

    def forward(self, h: Tensor) -> Tensor:
        for i, layer in enumerate(self.layers):
            h = layer(h)
            if i < len(self.layers) - 1:
                h = self.activation.fn(h)
        return h


class LatentGaussianGenerator(nn.Module):
    r"""The auxiliary generator :math:`q_\phi(h, x) = \mathcal N(h; 0, I)\,\mathcal N(x; g_\phi(h), \sigma^2 I)`.

    Args:
        net: :math:`g_\phi`, any module mapping ``(N, latent_dim)`` to ``(N, *event_shape)``.
        latent_dim: :math:`d_h \ge 1`.
        event_shape: the shape of one ``x``.
        sigma: the fixed noise scale :math:`\sigma > 0`.

    Shapes: ``h: (N, d_h)``, ``x: (N, *event_shape)``; :meth:`log_prob` ``-> (N,)``.

    Example:
        >>> import torch
        >>> q = LatentGaussianGenerator.mlp(2, latent_dim=3, hidden=(8,), sigma=0.5)
        >>> h, x = q.sample(4, generator=torch.Generator().manual_seed(0))
        >>> h.shape, x.shape, q.log_prob(h, x).shape
        (torch.Size([4, 3]), torch.Size([4, 2]), torch.Size([4]))
    """

    def __init__(self, net: nn.Module, latent_dim: int, event_shape: int | Sequence[int], sigma: float) -> None:
        super().__init__()
        if not isinstance(net, nn.Module):
            raise TypeError(f"net: expected an nn.Module mapping (N, latent_dim) to (N, *event); got {type(net).__name__}")
        self.net = net
        self.latent_dim = check_int(latent_dim, "latent_dim", minimum=1)
        shape = (event_shape,) if isinstance(event_shape, int) else tuple(event_shape)
        if not shape or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in shape):
            raise ValueError(f"event_shape: expected a positive int or a tuple of positive ints; got {event_shape!r}")
        self.event_shape = shape
        self.sigma = check_positive(sigma, "sigma")

    @classmethod
    def mlp(
        cls,
        event_shape: int | Sequence[int],
        *,
        latent_dim: int,
        hidden: Sequence[int] = (128, 128),
        activation: str | Activation = "silu",
        sigma: float = 0.1,
    ) -> LatentGaussianGenerator:
        """A generator whose :math:`g_\\phi` is an MLP ``latent_dim -> hidden... -> prod(event_shape)``."""
        shape = (event_shape,) if isinstance(event_shape, int) else tuple(event_shape)
        widths = [check_int(latent_dim, "latent_dim", minimum=1), *(check_int(w, "hidden", minimum=1) for w in hidden),
                  math.prod(shape)]
        mlp = _MLP(widths, resolve_activation(activation))
        net: nn.Module = nn.Sequential(mlp, nn.Unflatten(1, shape)) if len(shape) > 1 else mlp
        return cls(net, latent_dim, shape, sigma)

    @property
    def data_dim(self) -> int:
        """:math:`D`, the number of coordinates of one ``x``."""
        return math.prod(self.event_shape)

    def mean(self, h: Tensor) -> Tensor:
        """:math:`g_\\phi(h)`: ``(N, d_h) -> (N, *event_shape)``."""
        out = self.net(h)
        if tuple(out.shape) != (h.shape[0], *self.event_shape):
            raise ValueError(f"net: expected an output of shape ({h.shape[0]}, "
                             f"{', '.join(map(str, self.event_shape))}); got {tuple(out.shape)}")
        return out

    def log_prob(self, h: Tensor, x: Tensor) -> Tensor:
        r""":math:`\log q_\phi(h, x)` per row, normalised (module docstring): ``(N,)``."""
        r = (x - self.mean(h)).flatten(1)
        const = 0.5 * (self.latent_dim + self.data_dim) * math.log(2 * math.pi) + self.data_dim * math.log(self.sigma)
        return -0.5 * h.pow(2).sum(1) - 0.5 * r.pow(2).sum(1) / self.sigma**2 - const

    def regression_loss(self, h: Tensor, x: Tensor) -> Tensor:
        r""":math:`\overline{\|x - g_\phi(h)\|^2 / (2\sigma^2)}`: the part of :math:`-\overline{\log q_\phi(h, x)}`
        that depends on :math:`\phi` (0-d)."""
        return (x - self.mean(h)).flatten(1).pow(2).sum(1).mean() / (2 * self.sigma**2)

    def grad_h(self, h: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
        r"""``(g_φ(h), ∂_h log q_φ(h, x))``, both detached: :math:`-h + J_g(h)^\top (x - g_\phi(h))/\sigma^2`."""
        with torch.enable_grad():
            hg = h.detach().requires_grad_(True)
            mu = self.mean(hg)
            inner = ((x.detach() - mu.detach()) * mu).sum() / self.sigma**2  # gradient J^T r / sigma^2
            (jr,) = torch.autograd.grad(inner, hg)
        return mu.detach(), jr - h.detach()

    def sample(
        self, n: int, *, generator: torch.Generator | None = None, dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
    ) -> tuple[Tensor, Tensor]:
        """An ancestral draw ``(h (n, d_h), x (n, *event))``, detached; the latent noise first, then ``x``'s."""
        n = check_int(n, "n", minimum=1)
        p = next(self.net.parameters(), None)
        dtype = dtype or (p.dtype if p is not None else torch.get_default_dtype())
        device = device if device is not None else (p.device if p is not None else None)
        h = torch.randn((n, self.latent_dim), generator=generator, dtype=dtype, device=device)
        with torch.no_grad():
            mu = self.mean(h)
        x = mu + self.sigma * torch.randn(mu.shape, generator=generator, dtype=dtype, device=device)
        return h, x

    def extra_repr(self) -> str:
        return f"latent_dim={self.latent_dim}, event_shape={self.event_shape}, sigma={self.sigma}"


def inclusive_nrf_revise(
    energy: EnergyLike,
    q: LatentGaussianGenerator,
    x: Tensor,
    h: Tensor,
    *,
    steps: int,
    step_size: float,
    star_step_size: float | None = None,
    revision: str = "sgld",
    friction: float = 0.1,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    r"""Algorithm 8: ``steps`` moves of ``(x, h)`` towards :math:`p_\theta(x) q_\phi(h|x)` (module docstring).

    Args:
        x, h: the starts ``(N, *event)``, ``(N, d_h)`` (usually an ancestral draw of ``q``).
        steps: :math:`L \ge 1`; ``step_size``: :math:`\delta > 0`; ``star_step_size``: :math:`\delta^*`
            of the :math:`h^*` draw (``None``: :math:`\delta`).
        revision: ``"sgld"`` or ``"sghmc"`` (with ``friction`` :math:`\alpha \in (0, 1]`).

    Random draws per step, in order: :math:`\eta^*` (from the second step on), then :math:`\eta_x`,
    :math:`\eta_h`. A row whose move gives a non-finite energy, gradient or position stays where it was
    (and, with SGHMC, loses its momentum).

    Returns:
        ``(x, h, nonfinite)``: detached revised samples and the mean fraction of refused moves (0-d).
    """
    x = check_tensor(x, "x", floating=True, min_dim=2).detach()
    h = check_tensor(h, "h", floating=True, min_dim=2).detach()
    if h.shape != (x.shape[0], q.latent_dim):
        raise ValueError(f"h: expected shape ({x.shape[0]}, {q.latent_dim}); got {tuple(h.shape)}")
    steps = check_int(steps, "steps", minimum=1)
    delta = check_positive(step_size, "step_size")
    delta_star = delta if star_step_size is None else check_positive(star_step_size, "star_step_size")
    revision = check_choice(revision, "revision", REVISIONS)
    alpha = check_probability(friction, "friction", open_low=True)
    s2 = q.sigma**2
    view = (-1,) + (1,) * (x.dim() - 1)
    vx, vh = torch.zeros_like(x), torch.zeros_like(h)
    bad = torch.zeros((), dtype=x.dtype, device=x.device)
    for step in range(1, steps + 1):
        _, g_e = energy_and_grad(energy, x)
        mu, g_h = q.grad_h(h, x)
        if step == 1:
            shift = torch.zeros_like(x)  # h* = h: an exact draw from q(h | x) for a fresh ancestral pair
        else:
            eta = torch.randn(h.shape, generator=generator, dtype=h.dtype, device=h.device)
            with torch.no_grad():
                mu_star = q.mean(h + delta_star * g_h + math.sqrt(2 * delta_star) * eta)
            shift = (mu - mu_star) / s2
        drift_x, drift_h = -g_e.to(x.dtype) + shift, g_h
        eta_x = torch.randn(x.shape, generator=generator, dtype=x.dtype, device=x.device)
        eta_h = torch.randn(h.shape, generator=generator, dtype=h.dtype, device=h.device)
        if revision == "sgld":
            x_new = x + delta * drift_x + math.sqrt(2 * delta) * eta_x
            h_new = h + delta * drift_h + math.sqrt(2 * delta) * eta_h
        else:
            noise = math.sqrt(2 * alpha * delta)
            vx_new = (1 - alpha) * vx + delta * drift_x + noise * eta_x
            vh_new = (1 - alpha) * vh + delta * drift_h + noise * eta_h
            x_new, h_new = x + vx_new, h + vh_new
        ok = torch.isfinite(x_new.flatten(1)).all(1) & torch.isfinite(h_new).all(1)
        if bool(ok.all()):
            x, h = x_new.detach(), h_new.detach()
            if revision == "sghmc":
                vx, vh = vx_new, vh_new
        else:
            bad = bad + (~ok).to(bad.dtype).mean()
            x = torch.where(ok.reshape(view), x_new, x).detach()
            h = torch.where(ok[:, None], h_new, h).detach()
            if revision == "sghmc":
                vx = torch.where(ok.reshape(view), vx_new, torch.zeros_like(vx))
                vh = torch.where(ok[:, None], vh_new, torch.zeros_like(vh))
    return x, h, bad / steps


class InclusiveNRF(nn.Module):
    r"""Inclusive-NRF training (Algorithms 7-8): MLE of the energy on generator draws revised by Langevin
    (or SGHMC) moves in :math:`(x, h)`, and the generator fitted to the revised samples (module docstring).

    What keeps its graph: the energies of the data and of the revised samples (through :math:`\theta`) and
    :math:`g_\phi(h)` of the regression term (through :math:`\phi`). Detached: the revised :math:`(x, h)`.

    Random draws per call, in order: the generator's latent and output noise, then the revision's noise
    (:func:`inclusive_nrf_revise`).

    Metrics (one host sync): ``loss``, ``e_pos``, ``e_neg``, ``gap = e_neg - e_pos`` (as in CD),
    ``gen_nll`` (:math:`-\overline{\log q_\phi(h, x)}` of the revised samples, normalised), ``gen_e``
    (the mean energy of the generator's own draws before revision: above ``e_neg`` while the revision
    still has work to do), ``move`` (the mean distance the revision moved ``x``), ``nonfinite``.

    Args:
        generator_net: the :class:`LatentGaussianGenerator` (its parameters are trained by this objective).
        steps: :math:`L`, revision steps per call; ``step_size`` :math:`\delta`; ``star_step_size``
            :math:`\delta^*` (``None``: :math:`\delta`).
        revision: ``"sgld"`` (Eq. 2.40) or ``"sghmc"`` with ``friction`` :math:`\alpha \in (0, 1]`.
        regularization: :math:`\alpha_E \ge 0`, the energy-magnitude penalty of CD.
        generator_weight: :math:`\lambda_q > 0`, the weight of the generator's regression term.

    Example:
        >>> import torch
        >>> from ebms.nets import MLPEnergy
        >>> q = LatentGaussianGenerator.mlp(2, latent_dim=2, hidden=(16,), sigma=0.3)
        >>> obj = InclusiveNRF(q, steps=5, step_size=0.01)
        >>> g = torch.Generator().manual_seed(0)
        >>> out = obj(MLPEnergy(2, (16,)), torch.randn(8, 2, generator=g), generator=g)
        >>> sorted(out.metrics)
        ['e_neg', 'e_pos', 'gap', 'gen_e', 'gen_nll', 'loss', 'move', 'nonfinite']
    """

    def __init__(
        self,
        generator_net: LatentGaussianGenerator,
        *,
        steps: int = 20,
        step_size: float = 0.005,
        star_step_size: float | None = None,
        revision: str = "sgld",
        friction: float = 0.1,
        regularization: float = 0.0,
        generator_weight: float = 1.0,
    ) -> None:
        super().__init__()
        if not isinstance(generator_net, LatentGaussianGenerator):
            raise TypeError(f"generator_net: expected a LatentGaussianGenerator; got {type(generator_net).__name__}")
        self.q = generator_net
        self.steps = check_int(steps, "steps", minimum=1)
        self.step_size = check_positive(step_size, "step_size")
        self.star_step_size = None if star_step_size is None else check_positive(star_step_size, "star_step_size")
        self.revision = check_choice(revision, "revision", REVISIONS)
        self.friction = check_probability(friction, "friction", open_low=True)
        self.regularization = check_positive(regularization, "regularization", allow_zero=True)
        self.generator_weight = check_positive(generator_weight, "generator_weight")

    def revise(self, energy: EnergyLike, n: int, *, generator: torch.Generator | None = None,
               dtype: torch.dtype | None = None, device: torch.device | str | None = None
               ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Draw ``n`` pairs from the generator and revise them: ``(x0, x, h, nonfinite)`` (detached)."""
        h0, x0 = self.q.sample(n, generator=generator, dtype=dtype, device=device)
        x, h, bad = inclusive_nrf_revise(energy, self.q, x0, h0, steps=self.steps, step_size=self.step_size,
                                         star_step_size=self.star_step_size, revision=self.revision,
                                         friction=self.friction, generator=generator)
        return x0, x, h, bad

    def forward(self, energy: EnergyLike, batch: Tensor, *, generator: torch.Generator | None = None) -> LossOutput:
        """Loss for a data batch ``(B, *event)``; ``B`` revised samples; negatives ``(B, *event)``."""
        pos = check_batch(batch)
        if tuple(pos.shape[1:]) != self.q.event_shape:
            raise ValueError(f"batch: expected shape (B, {', '.join(map(str, self.q.event_shape))}) to match the "
                             f"generator's event shape; got {tuple(pos.shape)}")
        B = pos.shape[0]
        x0, x, h, bad = self.revise(energy, B, generator=generator, dtype=pos.dtype, device=pos.device)
        e = evaluate(energy, torch.cat([pos, x]))
        e_pos, e_neg = e[:B], e[B:]
        with torch.no_grad():
            e_gen = evaluate(energy, x0)
        m_pos, m_neg = e_pos.mean(), e_neg.mean()
        loss = m_pos - m_neg
        if self.regularization > 0:
            loss = loss + self.regularization * (e_pos.pow(2).mean() + e_neg.pow(2).mean())
        reg = self.q.regression_loss(h, x)
        loss = loss + self.generator_weight * reg
        with torch.no_grad():
            gen_nll = -self.q.log_prob(h, x).mean()
            move = (x - x0).flatten(1).norm(dim=1).mean()
        metrics = scalar_metrics(loss=loss, e_pos=m_pos, e_neg=m_neg, gap=m_neg - m_pos, gen_nll=gen_nll,
                                 gen_e=e_gen.mean(), move=move, nonfinite=bad)
        return LossOutput(loss=loss, metrics=metrics, negatives=x)

    def extra_repr(self) -> str:
        return (f"steps={self.steps}, step_size={self.step_size}, star_step_size={self.star_step_size}, "
                f"revision={self.revision!r}, friction={self.friction}, generator_weight={self.generator_weight}")

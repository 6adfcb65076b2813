r"""Score matching: fit the model score :math:`s_\theta = -\nabla_x E_\theta` without ``Z`` or MCMC.

Derivation for the energy convention. The Fisher divergence between the data
density ``p`` and the model is
:math:`\tfrac12\mathbb E_p\|s_\theta(x) - \nabla_x\log p(x)\|^2`. Integrating the
cross term by parts (Hyvärinen, 2005; ``p`` vanishing at infinity) gives, up to
a constant independent of :math:`\theta`,

.. math::  J(\theta) = \mathbb E_p\Big[\tfrac12\|s_\theta(x)\|^2 + \operatorname{tr}\nabla_x s_\theta(x)\Big]
           = \mathbb E_p\Big[\tfrac12\|\nabla_x E_\theta(x)\|^2 - \operatorname{tr}\nabla_x^2 E_\theta(x)\Big].

The trace enters with a *minus* sign: the loss rewards curvature (a sharp
minimum of ``E`` at the data) and penalises steep slopes. For a Gaussian
energy :math:`\tfrac12(x-\mu)^\top P(x-\mu)` the minimiser on a sample is the
sample mean and :math:`P = S^{-1}` with ``S`` the (1/N) sample covariance:
exact score matching coincides with maximum likelihood here.

Three estimators of ``J`` (or of a relative of it):

* :class:`ScoreMatching` — the formula above, trace by ``D`` extra backward
  passes (exact; for small ``D``).
* :class:`DenoisingScoreMatching` — Vincent (2011): match the score of a
  Gaussian-perturbed data set; one or several noise levels (Song & Ermon, 2019).
* :class:`SlicedScoreMatching` — Song, Garg, Shi & Ermon (2019): the trace is
  replaced by random projections :math:`v^\top\nabla^2E\,v`.

All need the energy to be twice differentiable in ``x`` (so ReLU networks
give a zero Hessian almost everywhere: use softplus/SiLU/ELU-type activations),
and differentiate ``energy(x)`` by autograd with ``create_graph=True`` (an
energy's detached ``energy_and_grad`` shortcut cannot carry parameter gradients).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from ebms._checks import check_bool, check_energy_output, check_int, check_tensor
from ebms.energy import EnergyLike, evaluate
from ebms.objectives._base import LossOutput, check_batch, scalar_metrics

__all__ = ["DenoisingScoreMatching", "ScoreMatching", "SlicedScoreMatching"]


def _energy_and_score_graph(energy: EnergyLike, x: Tensor, *extra: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(x_leaf, E (B,), grad_x E (B, *event))`` with the graph kept for second derivatives."""
    xg = x.detach().requires_grad_(True)
    e = check_energy_output(energy(xg, *extra), x.shape[0], "energy(x)") if extra else evaluate(energy, xg)
    (g,) = torch.autograd.grad(e.sum(), xg, create_graph=True)
    return xg, e, g


def _sq_norm(t: Tensor) -> Tensor:
    return t.flatten(1).pow(2).sum(1)


def _mean_norm(t: Tensor) -> Tensor:
    """Mean row norm of ``t: (B, *event)`` for metrics: no graph, no ``(B, D)`` temporary."""
    with torch.no_grad():
        return torch.linalg.vector_norm(t.flatten(1), dim=1).mean()


class ScoreMatching(nn.Module):
    r"""Exact (Hyvärinen) score matching.

    .. math::  \mathcal L = \frac1B\sum_b\Big[\tfrac12\|\nabla_x E(x_b)\|^2 - \operatorname{tr}\nabla_x^2E(x_b)\Big].

    Nothing is detached: the loss depends on the parameters through the input
    gradient and the Hessian diagonal (``create_graph=True``). The loss is
    unbounded below for a mis-specified family; its value is only meaningful
    up to a data-dependent constant (``-½ E||∇ log p||²``).

    Cost: one forward, one backward for :math:`\nabla_x E`, then ``D`` more
    backward passes for the Hessian diagonal (``D`` = number of coordinates
    of one point), each kept in the graph. Use for ``D`` up to a few dozen;
    otherwise :class:`SlicedScoreMatching` or :class:`DenoisingScoreMatching`.

    Metrics: ``loss``, ``energy`` (mean data energy), ``score_norm`` (mean
    :math:`\|\nabla_x E\|`), ``hessian_trace`` (mean Laplacian).

    Reference: Hyvärinen, A. (2005). "Estimation of non-normalized statistical
    models by score matching." JMLR 6.
    """

    #: the loss holds the energy's input gradient (``create_graph=True``): a double backward
    differentiates_twice = True

    def forward(
        self, energy: EnergyLike, batch: Tensor, *, generator: torch.Generator | None = None
    ) -> LossOutput:
        """Loss for ``batch: (B, *event)``; ``generator`` is unused (deterministic)."""
        x = check_batch(batch)
        with torch.enable_grad():
            xg, e, g = _energy_and_score_graph(energy, x)
            gf = g.flatten(1)
            trace = torch.zeros_like(e)
            for i in range(gf.shape[1]):
                (h,) = torch.autograd.grad(gf[:, i].sum(), xg, create_graph=True)
                trace = trace + h.flatten(1)[:, i]
            sq = gf.pow(2).sum(1)
            loss = (0.5 * sq - trace).mean()
        metrics = scalar_metrics(
            loss=loss, energy=e.mean(), score_norm=sq.sqrt().mean(), hessian_trace=trace.mean()
        )
        return LossOutput(loss=loss, metrics=metrics, negatives=None)


class DenoisingScoreMatching(nn.Module):
    r"""Denoising score matching at one or several noise levels.

    Each row gets a noise level :math:`\sigma_b` (drawn uniformly from
    ``sigmas``; always the same one when a single level is given) and
    :math:`\tilde x_b = x_b + \sigma_b\varepsilon_b`, :math:`\varepsilon_b\sim\mathcal N(0,I)`.
    The score of the perturbation kernel is
    :math:`\nabla_{\tilde x}\log q(\tilde x|x) = -\varepsilon/\sigma`, so with
    :math:`s = -\nabla E`:

    .. math::  \mathcal L = \frac1B\sum_b \lambda(\sigma_b)\,\tfrac12
               \big\|\nabla_x E(\tilde x_b) - \varepsilon_b/\sigma_b\big\|^2,
               \qquad \lambda(\sigma) = \sigma^2 \text{ by default},

    (Vincent, 2011, for one level; Song & Ermon, 2019, "NCSN", for several,
    whose choice :math:`\lambda(\sigma)=\sigma^2` makes every level's term
    :math:`\tfrac12\|\sigma\nabla E(\tilde x) - \varepsilon\|^2` of order one).

    DSM fits the *perturbed* density :math:`p * \mathcal N(0,\sigma^2 I)`, not
    ``p``: for Gaussian data with covariance :math:`\Sigma` the optimum is a
    Gaussian with covariance :math:`\Sigma + \sigma^2 I`. Small ``σ`` reduces
    this bias but raises the variance (relative error of order
    :math:`\mathrm{sd}(x)/(\sigma\sqrt N)` in 1-D).

    Noise-conditional energies: with ``noise_conditional=True`` the energy is
    called as ``energy(x_noisy, sigma)`` with ``sigma: (B,)``, one noise level
    per row (an NCSN-style model). Otherwise it is called as ``energy(x)``;
    several levels then train one energy on the mixture of perturbed densities.
    The flag is explicit because energies may also take a condition as a
    second argument.

    What is detached: the perturbed inputs (a fresh leaf); the loss keeps the
    graph through :math:`\nabla_x E` to the parameters (``create_graph=True``).
    ``out.negatives`` holds the perturbed points :math:`\tilde x` (detached).

    Cost: one forward and one double backward per row.

    Metrics: ``loss``, ``energy`` (mean energy at :math:`\tilde x`),
    ``score_norm`` (mean :math:`\|\nabla_x E(\tilde x)\|`), ``sigma`` (mean level).

    Args:
        sigma: one noise level ``> 0`` or a sequence / 1-d tensor of levels.
        weighting: ``λ``, a callable mapping levels ``(B,) -> (B,)`` weights;
            ``None`` means :math:`\sigma^2`. ``lambda s: torch.ones_like(s)``
            gives Vincent's unweighted loss.
        noise_conditional: pass the level to the energy as a second argument.
    """

    #: the loss holds the energy's input gradient (``create_graph=True``): a double backward
    differentiates_twice = True

    sigmas: Tensor

    def __init__(
        self,
        sigma: float | Sequence[float] | Tensor,
        *,
        weighting: Callable[[Tensor], Tensor] | None = None,
        noise_conditional: bool = False,
    ) -> None:
        super().__init__()
        try:
            s = torch.as_tensor(sigma, dtype=torch.float64).detach().reshape(-1).clone()
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(f"sigma: expected a positive number or a sequence of them; got {sigma!r}") from None
        if s.numel() == 0 or not bool(torch.isfinite(s).all()) or bool((s <= 0).any()):
            raise ValueError(f"sigma: expected finite noise level(s) > 0; got {s.tolist()}")
        if weighting is not None and not callable(weighting):
            raise TypeError(f"weighting: expected a callable sigmas (B,) -> weights (B,) or None; got {weighting!r}")
        check_bool(noise_conditional, "noise_conditional")
        # float64 so that float64 data sees the exact levels; cast to the data dtype per call
        self.register_buffer("sigmas", s, persistent=False)
        self.weighting = weighting
        self.noise_conditional = noise_conditional

    def perturb(self, x: Tensor, *, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Draw the noise: ``(x_noisy (B, *event), sigma (B,), eps (B, *event))``.

        The only use of ``generator`` by this objective. Draw order: the level
        indices (only when there are several levels), then ``eps``.
        """
        B = x.shape[0]
        levels = self.sigmas.to(device=x.device, dtype=x.dtype)
        if levels.numel() == 1:
            sigma = levels.expand(B)
        else:
            sigma = levels[torch.randint(levels.numel(), (B,), generator=generator, device=x.device)]
        eps = torch.randn(x.shape, generator=generator, device=x.device, dtype=x.dtype)
        s = sigma.reshape(B, *([1] * (x.dim() - 1)))
        return torch.addcmul(x, s, eps), sigma, eps  # x + s * eps without a (B, *event) temporary

    def forward(
        self, energy: EnergyLike, batch: Tensor, *, generator: torch.Generator | None = None
    ) -> LossOutput:
        """Loss for ``batch: (B, *event)``."""
        x = check_batch(batch)
        x_noisy, sigma, eps = self.perturb(x, generator=generator)
        s = sigma.reshape(-1, *([1] * (x.dim() - 1)))
        extra = (sigma,) if self.noise_conditional else ()
        with torch.enable_grad():
            _, e, g = _energy_and_score_graph(energy, x_noisy, *extra)
            if self.weighting is None:
                w = sigma * sigma
            else:
                w = self.weighting(sigma)
                check_tensor(w, "weighting(sigma)")
                if tuple(w.shape) != (x.shape[0],):
                    raise ValueError(f"weighting(sigma): expected shape ({x.shape[0]},); got {tuple(w.shape)}")
            loss = (w * 0.5 * _sq_norm(g - eps / s)).mean()
        metrics = scalar_metrics(
            loss=loss, energy=e.detach().mean(), score_norm=_mean_norm(g), sigma=sigma.mean()
        )
        return LossOutput(loss=loss, metrics=metrics, negatives=x_noisy.detach())

    def extra_repr(self) -> str:
        return f"sigmas={self.sigmas.tolist()}, noise_conditional={self.noise_conditional}"


_DISTRIBUTIONS = ("gaussian", "rademacher")


class SlicedScoreMatching(nn.Module):
    r"""Sliced score matching with random projections ``v``.

    .. math::  \mathcal L = \frac1{BM}\sum_{b,m}\Big[-v_{bm}^\top\nabla_x^2E(x_b)\,v_{bm}
               + \tfrac12\big(v_{bm}^\top\nabla_x E(x_b)\big)^2\Big]

    with ``M = n_projections``. With ``variance_reduced=True`` (SSM-VR) the
    second term is replaced by its expectation over ``v``,
    :math:`\tfrac12\|\nabla_x E(x_b)\|^2`, valid because
    :math:`\mathbb E[vv^\top] = I` for both projection laws; only the Hessian
    term is then estimated by projection. In expectation over ``v`` both equal
    the exact score-matching loss of :class:`ScoreMatching`.

    Nothing is detached (``create_graph=True`` through the Hessian-vector
    products). Cost: one forward, one backward for :math:`\nabla_x E`, and one
    extra backward per projection — independent of the dimension.

    Metrics: ``loss``, ``energy``, ``score_norm`` as in :class:`ScoreMatching`.

    Args:
        n_projections: ``M >= 1`` projections per data point.
        distribution: ``'gaussian'`` (``v ~ N(0, I)``) or ``'rademacher'``
            (entries ``±1``; lower variance).
        variance_reduced: use the SSM-VR form.

    Reference: Song, Y., Garg, S., Shi, J. & Ermon, S. (2019). "Sliced score
    matching: a scalable approach to density and score estimation." UAI.
    """

    #: the loss holds the energy's input gradient (``create_graph=True``): a double backward
    differentiates_twice = True

    def __init__(
        self, n_projections: int = 1, *, distribution: str = "gaussian", variance_reduced: bool = False
    ) -> None:
        super().__init__()
        self.n_projections = check_int(n_projections, "n_projections", minimum=1)
        if distribution not in _DISTRIBUTIONS:
            raise ValueError(f"distribution: expected one of {list(_DISTRIBUTIONS)}; got {distribution!r}")
        check_bool(variance_reduced, "variance_reduced")
        self.distribution = distribution
        self.variance_reduced = variance_reduced

    def projections(self, x: Tensor, *, generator: torch.Generator | None = None) -> Tensor:
        """Draw ``v: (M, B, *event)``; the only use of ``generator`` by this objective."""
        shape = (self.n_projections, *x.shape)
        if self.distribution == "gaussian":
            return torch.randn(shape, generator=generator, device=x.device, dtype=x.dtype)
        bits = torch.randint(0, 2, shape, generator=generator, device=x.device)
        return bits.to(x.dtype) * 2 - 1

    def forward(
        self, energy: EnergyLike, batch: Tensor, *, generator: torch.Generator | None = None
    ) -> LossOutput:
        """Loss for ``batch: (B, *event)``."""
        x = check_batch(batch)
        v = self.projections(x, generator=generator)
        with torch.enable_grad():
            xg, e, g = _energy_and_score_graph(energy, x)

            def term(vm: Tensor) -> Tensor:  # one projection's per-row term, (B,)
                gv = (g * vm).flatten(1).sum(1)  # v' grad E
                (hv,) = torch.autograd.grad(gv.sum(), xg, create_graph=True)  # H v, (B, *event)
                vhv = (hv * vm).flatten(1).sum(1)
                return -vhv if self.variance_reduced else 0.5 * gv.pow(2) - vhv

            total = term(v[0])
            for vm in v[1:]:
                total = total + term(vm)
            per_row = total / self.n_projections if self.n_projections > 1 else total
            if self.variance_reduced:
                per_row = per_row + 0.5 * _sq_norm(g)
            loss = per_row.mean()
        metrics = scalar_metrics(loss=loss, energy=e.detach().mean(), score_norm=_mean_norm(g))
        return LossOutput(loss=loss, metrics=metrics, negatives=None)

    def extra_repr(self) -> str:
        return (
            f"n_projections={self.n_projections}, distribution={self.distribution!r}, "
            f"variance_reduced={self.variance_reduced}"
        )

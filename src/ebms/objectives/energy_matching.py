r"""Energy Matching (Balcerak et al., 2025): flow matching and contrastive divergence on one static energy.

One time-independent energy :math:`E_\theta` (density :math:`p_\theta \propto e^{-E_\theta}`) serves two
regimes. The paper writes the potential as :math:`V_\theta` with the sampling dynamics

.. math::  \mathrm dx = -\nabla_x V_\theta(x)\,\mathrm dt + \sqrt{2\,\varepsilon(t)}\,\mathrm dW_t,

whose equilibrium at the final temperature :math:`\varepsilon_{\max}` is :math:`\exp(-V_\theta/\varepsilon_{\max})`.
Here the energy module is that equilibrium's energy, :math:`E_\theta = V_\theta / \varepsilon_{\max}`, so the
library's convention :math:`p \propto e^{-E}` (and every evaluation that assumes it: grid NLL, AIS) holds
for the trained model; the potential the loss sees is :math:`V = \varepsilon_{\max} E` (``epsilon_max > 0``).

**Phase 1 (the paper's Algorithm 1, "warm-up"): optimal-transport flow matching.** Noise
:math:`x_0 \sim \mathcal N(0, \sigma_0^2 I)` and data :math:`x_1` are paired by the exact optimal-transport
plan of the mini-batch (squared Euclidean cost; ``coupling="ot"``) or independently (``"independent"``),
:math:`t \sim U(0, 1)` per row, :math:`x_t = (1 - t)\,x_0 + t\,x_1`, and the static velocity
:math:`-\nabla V_\theta(x_t)` is regressed onto the straight-line velocity :math:`x_1 - x_0`:

.. math::  \mathcal L_{\mathrm{OT}} = \frac1B\sum_b w(t_b)\,\frac1D
           \big\|-\nabla_x V_\theta(x_{t_b}) - (x_{1,b} - x_{0,b})\big\|^2 .

The mean over the ``D`` coordinates (not the sum in the paper's norm) is what the authors' code computes;
it keeps ``cd_weight`` comparable with their settings.

**Phase 2 (Algorithm 2): plus contrastive divergence near the data.**

.. math::  \mathcal L = \mathcal L_{\mathrm{OT}} + \lambda_{\mathrm{CD}}
           \Big(\overline{V_\theta(x^+)} - \overline{V_\theta(x^-)}\Big),

with detached negatives :math:`x^-` from :func:`energy_matching_sample`: Langevin steps
:math:`x \leftarrow x - h\nabla V(x) + \sqrt{2\varepsilon(t)h}\,\xi` of size ``h = dt`` while :math:`t`
runs from a row's start to 1. The temperature schedule :math:`\varepsilon(t)`
(:func:`em_temperature`) is 0 before :math:`\tau^*`, rises linearly to :math:`\varepsilon_{\max}` at
:math:`t = 1` and stays there. A fraction ``data_start`` of the chains starts at data rows with
:math:`t = 1` (plain Langevin at :math:`\varepsilon_{\max}`, i.e. ULA on :math:`E` with step
:math:`h\varepsilon_{\max}`), the rest at fresh noise with :math:`t = 0` (the generative path), as in the
authors' code. With ``flow_weighting=True`` the phase-2 OT term is down-weighted near the data by
:math:`w(t)` (:func:`em_flow_weight`: 1 before :math:`\tau^*`, then linearly to 0 at :math:`t = 1`), so
the CD term alone shapes the energy where the Boltzmann regime takes over; in phase 1 :math:`w \equiv 1`.

The phase switch is counted by the objective: the first ``warmup_steps`` calls are phase 1; the count is a
registered buffer (``objective.state_dict()``), so a resumed run continues in the right phase.

What the paper fixes and what is ours. Taken from the paper and the authors' released code: the static
scalar potential, the mini-batch OT pairing with straight paths, the squared-error velocity regression,
the two phases with :math:`\lambda_{\mathrm{CD}}` on :math:`V(x^+) - V(x^-)`, the piecewise-linear
temperature :math:`\varepsilon(t)` with cutoff :math:`\tau^*` (``time_cutoff`` in their code) and
:math:`\varepsilon_{\max}`, the optional flow weight :math:`w(t)`, the half-data/half-noise chain starts.
(The equation numbers differ between the paper's versions v1–v5; this docstring names the algorithms.)
Ours: :math:`E = V/\varepsilon_{\max}`, and the phase count inside the objective.

Every call differentiates the energy twice (:math:`\nabla_x V` is built with ``create_graph=True``), so the
energy must be smooth (SiLU/softplus, not ReLU) and the objective declares ``differentiates_twice``.

Reference: Balcerak, M., Amiranashvili, T., Terpin, A., Shit, S., Bogensperger, L., Kaltenbach, S.,
Koumoutsakos, P. & Menze, B. (2025). "Energy Matching: Unifying Flow Matching and Energy-Based Models for
Generative Modeling." arXiv:2504.10612.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ebms._checks import check_bool, check_choice, check_int, check_positive, check_probability, check_tensor
from ebms.energy import EnergyLike, evaluate
from ebms.objectives._base import LossOutput, check_batch, scalar_metrics

__all__ = ["EnergyMatching", "em_flow_weight", "em_temperature", "energy_matching_sample", "ot_pairing"]

COUPLINGS = ("ot", "independent")


def em_temperature(t: Tensor, tau_star: float, epsilon_max: float) -> Tensor:
    r"""The paper's temperature :math:`\varepsilon(t)`: 0 for :math:`t < \tau^*`, then
    :math:`\varepsilon_{\max}(t - \tau^*)/(1 - \tau^*)` up to :math:`t = 1`, then :math:`\varepsilon_{\max}`.
    ``tau_star = 1`` gives 0 before 1 and :math:`\varepsilon_{\max}` from 1 on."""
    tau = check_probability(tau_star, "tau_star")
    eps = check_positive(epsilon_max, "epsilon_max", allow_zero=True)
    t = check_tensor(t, "t", floating=True)
    ramp = (t - tau) / (1.0 - tau) if tau < 1.0 else torch.zeros_like(t)
    out = torch.where(t < tau, torch.zeros_like(t), eps * ramp.clamp(max=1.0))
    return torch.where(t >= 1.0, torch.full_like(t, eps), out)


def em_flow_weight(t: Tensor, tau_star: float) -> Tensor:
    r"""The optional phase-2 weight :math:`w(t)` of the OT term: 1 for :math:`t < \tau^*`, then
    :math:`1 - (t - \tau^*)/(1 - \tau^*)`, 0 from :math:`t = 1` on."""
    tau = check_probability(tau_star, "tau_star")
    t = check_tensor(t, "t", floating=True)
    if tau >= 1.0:
        return (t < 1.0).to(t.dtype)
    return (1.0 - (t - tau) / (1.0 - tau)).clamp(0.0, 1.0).where(t >= tau, torch.ones_like(t))


def ot_pairing(x0: Tensor, x1: Tensor) -> Tensor:
    """Index ``perm`` such that ``(x0[perm], x1)`` is the exact optimal-transport plan between the two
    equal-size mini-batches (uniform weights, squared Euclidean cost): an assignment problem, solved by
    ``scipy.optimize.linear_sum_assignment`` (scipy is needed for ``coupling="ot"``)."""
    if x0.shape != x1.shape:
        raise ValueError(f"x0: expected the shape of x1 {tuple(x1.shape)}; got {tuple(x0.shape)}")
    try:
        from scipy.optimize import linear_sum_assignment
    except ImportError:  # pragma: no cover - scipy is a dev dependency
        raise ImportError("coupling: 'ot' needs scipy (pip install scipy); or use coupling='independent'") from None
    cost = torch.cdist(x1.flatten(1).double(), x0.flatten(1).double()).pow(2)
    rows, cols = linear_sum_assignment(cost.cpu().numpy())
    perm = torch.empty(x1.shape[0], dtype=torch.long)
    perm[torch.as_tensor(rows, dtype=torch.long)] = torch.as_tensor(cols, dtype=torch.long)
    return perm.to(x0.device)


def _grad_v(energy: EnergyLike, x: Tensor, epsilon_max: float, *, create_graph: bool) -> tuple[Tensor, Tensor]:
    """``(E(x) (B,), ∇_x V(x) = ε_max ∇_x E(x))``; the graph is kept for a double backward when asked."""
    xg = x.detach().requires_grad_(True)
    e = evaluate(energy, xg)
    (g,) = torch.autograd.grad(e.sum(), xg, create_graph=create_graph)
    return e, epsilon_max * g


def energy_matching_sample(
    energy: EnergyLike,
    x0: Tensor,
    t_start: Tensor | float = 0.0,
    *,
    steps: int,
    dt: float,
    tau_star: float,
    epsilon_max: float,
    generator: torch.Generator | None = None,
) -> Tensor:
    r"""The paper's sampler: Langevin on :math:`V = \varepsilon_{\max} E` with the temperature schedule.

    Step ``j = 1..steps`` of a row that starts at time :math:`t_0` sits at
    :math:`t_j = t_0 + (1 - t_0)\,j/\text{steps}` and moves
    :math:`x \leftarrow x - dt\,\nabla V(x) + \sqrt{2\,\varepsilon(t_j)\,dt}\;\xi`. From noise
    (``t_start = 0``) the first :math:`\tau^*` of the path is the deterministic transport, the rest anneals
    into the Boltzmann regime; from data (``t_start = 1``) it is ULA at :math:`\varepsilon_{\max}`, which
    keeps :math:`e^{-E}` invariant up to the step's bias. Returns detached ``(N, *event)``.
    """
    x = check_tensor(x0, "x0", floating=True, min_dim=1).detach()
    steps = check_int(steps, "steps", minimum=1)
    dt = check_positive(dt, "dt")
    eps_max = check_positive(epsilon_max, "epsilon_max")
    t0 = torch.as_tensor(t_start, dtype=x.dtype, device=x.device).expand(x.shape[0])
    if not bool(((t0 >= 0) & (t0 <= 1)).all()):
        raise ValueError("t_start: expected times in [0, 1]")
    view = (-1,) + (1,) * (x.dim() - 1)
    for j in range(1, steps + 1):
        t = t0 + (1.0 - t0) * (j / steps)
        with torch.enable_grad():
            _, g = _grad_v(energy, x, eps_max, create_graph=False)
        temp = em_temperature(t, tau_star, eps_max).reshape(view)
        noise = torch.randn(x.shape, generator=generator, dtype=x.dtype, device=x.device)
        x = (x - dt * g + (2.0 * temp * dt).sqrt() * noise).detach()
    return x


class EnergyMatching(nn.Module):
    r"""Energy Matching: OT flow matching of :math:`-\nabla V`, then plus CD near the data (module docstring).

    What keeps its graph: the OT term through :math:`\nabla_x E` (``create_graph=True``, a double backward)
    and the CD energies through the parameters. Detached: the noise, the pairing, the times, the negatives.

    Random draws per call, in order: noise ``x0``, times ``t``; in phase 2 the chains' noise starts, then
    the Langevin noise.

    Metrics (one host sync): ``loss``, ``ot`` (the flow-matching term), ``cd`` (the unweighted
    :math:`\overline{V(x^+)} - \overline{V(x^-)}`, 0 in phase 1), ``e_pos`` (mean data energy), ``e_neg``
    (mean negative energy; in phase 1 the energy at the noise draws ``x0``), ``gap = e_neg - e_pos``,
    ``phase`` (1 or 2). A healthy run has ``ot`` falling in phase 1 and a small bounded ``gap`` in phase 2;
    a gap that grows steadily means the chains leave the model's low-energy set (smaller ``dt``).

    Args:
        epsilon_max: :math:`\varepsilon_{\max} > 0`, the final temperature; :math:`V = \varepsilon_{\max}E`.
        tau_star: :math:`\tau^* \in [0, 1]`, where the temperature ramp and the flow weight's decay begin.
        cd_weight: :math:`\lambda_{\mathrm{CD}} \ge 0` (0: flow matching only).
        warmup_steps: calls spent in phase 1 (the OT term alone) before the CD term starts.
        steps: Langevin steps per chain in phase 2; ``dt`` their size :math:`h`.
        data_start: fraction of the chains started at the data batch (the rest at noise).
        flow_weighting: weight the phase-2 OT term by :math:`w(t)`.
        coupling: ``"ot"`` (exact mini-batch OT plan; needs scipy) or ``"independent"``.
        noise_std: :math:`\sigma_0` of the Gaussian noise the flow starts from.

    Example:
        >>> import torch
        >>> from ebms.nets import MLPEnergy
        >>> g = torch.Generator().manual_seed(0)
        >>> em = EnergyMatching(epsilon_max=0.1, cd_weight=0.1, steps=5, dt=0.01)
        >>> out = em(MLPEnergy(2, (16,)), torch.randn(8, 2, generator=g) + 2.0, generator=g)
        >>> sorted(out.metrics)
        ['cd', 'e_neg', 'e_pos', 'gap', 'loss', 'ot', 'phase']
    """

    #: the OT term holds the energy's input gradient (``create_graph=True``): a double backward
    differentiates_twice = True
    #: the flow term sees only the energy's gradient and the CD term only a difference, so the energy's level is
    #: free: the mean energies may drift (by hundreds on MNIST in phase 1) and the divergence guard leaves them be
    unanchored_metrics = ("e_pos", "e_neg")

    calls: Tensor

    def __init__(
        self,
        *,
        epsilon_max: float = 0.01,
        tau_star: float = 0.9,
        cd_weight: float = 1e-4,
        warmup_steps: int = 0,
        steps: int = 20,
        dt: float = 0.01,
        data_start: float = 0.5,
        flow_weighting: bool = False,
        coupling: str = "ot",
        noise_std: float = 1.0,
    ) -> None:
        super().__init__()
        self.epsilon_max = check_positive(epsilon_max, "epsilon_max")
        self.tau_star = check_probability(tau_star, "tau_star")
        self.cd_weight = check_positive(cd_weight, "cd_weight", allow_zero=True)
        self.warmup_steps = check_int(warmup_steps, "warmup_steps", minimum=0)
        self.steps = check_int(steps, "steps", minimum=1)
        self.dt = check_positive(dt, "dt")
        self.data_start = check_probability(data_start, "data_start")
        self.flow_weighting = check_bool(flow_weighting, "flow_weighting")
        self.coupling = check_choice(coupling, "coupling", COUPLINGS)
        self.noise_std = check_positive(noise_std, "noise_std")
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))

    @property
    def phase(self) -> int:
        """The phase the next call trains in: 1 (OT alone) or 2 (OT plus CD)."""
        return 2 if self.cd_weight > 0 and int(self.calls) >= self.warmup_steps else 1

    def flow_loss(self, energy: EnergyLike, x1: Tensor, x0: Tensor, t: Tensor, weight: Tensor | None = None) -> Tensor:
        r"""The OT term for given pairs ``(x0[b], x1[b])`` and times ``t: (B,)`` (no pairing, no draws):
        :math:`\frac1B\sum_b w_b \frac1D\|\varepsilon_{\max}\nabla E(x_{t_b}) + x_{1,b} - x_{0,b}\|^2`."""
        if x0.shape != x1.shape:
            raise ValueError(f"x0: expected the shape of x1 {tuple(x1.shape)}; got {tuple(x0.shape)}")
        if t.shape != (x1.shape[0],):
            raise ValueError(f"t: expected shape ({x1.shape[0]},); got {tuple(t.shape)}")
        tv = t.reshape((-1,) + (1,) * (x1.dim() - 1)).to(x1.dtype)
        xt = (1.0 - tv) * x0 + tv * x1
        with torch.enable_grad():
            _, gv = _grad_v(energy, xt, self.epsilon_max, create_graph=True)
            per_row = (gv + (x1 - x0)).flatten(1).pow(2).mean(1)
            return per_row.mean() if weight is None else (weight.to(per_row.dtype) * per_row).mean()

    def forward(self, energy: EnergyLike, batch: Tensor, *, generator: torch.Generator | None = None) -> LossOutput:
        """Loss for a data batch ``(B, *event)``; counts the call (phase 1 for ``warmup_steps`` calls)."""
        x1 = check_batch(batch)
        B, dtype, device = x1.shape[0], x1.dtype, x1.device
        phase = self.phase
        x0 = self.noise_std * torch.randn(x1.shape, generator=generator, dtype=dtype, device=device)
        t = torch.rand(B, generator=generator, dtype=dtype, device=device)
        if self.coupling == "ot":
            x0 = x0[ot_pairing(x0, x1)]
        weight = em_flow_weight(t, self.tau_star) if (phase == 2 and self.flow_weighting) else None
        ot = self.flow_loss(energy, x1, x0, t, weight)
        negatives: Tensor | None = None
        if phase == 2:
            n_data = round(self.data_start * B)
            starts = torch.cat([
                x1[:n_data],
                self.noise_std * torch.randn((B - n_data, *x1.shape[1:]), generator=generator, dtype=dtype,
                                             device=device),
            ])
            t0 = torch.cat([torch.ones(n_data, dtype=dtype, device=device),
                            torch.zeros(B - n_data, dtype=dtype, device=device)])
            negatives = energy_matching_sample(energy, starts, t0, steps=self.steps, dt=self.dt,
                                               tau_star=self.tau_star, epsilon_max=self.epsilon_max,
                                               generator=generator)
            e = evaluate(energy, torch.cat([x1, negatives]))
            e_pos, e_neg = e[:B].mean(), e[B:].mean()
            cd = self.epsilon_max * (e_pos - e_neg)
            loss = ot + self.cd_weight * cd
        else:
            with torch.no_grad():
                e = evaluate(energy, torch.cat([x1, x0]))
            e_pos, e_neg = e[:B].mean(), e[B:].mean()
            cd = torch.zeros((), dtype=dtype, device=device)
            loss = ot
        self.calls += 1
        metrics = scalar_metrics(loss=loss, ot=ot, cd=cd, e_pos=e_pos, e_neg=e_neg, gap=e_neg - e_pos,
                                 phase=float(phase))
        return LossOutput(loss=loss, metrics=metrics, negatives=negatives)

    def extra_repr(self) -> str:
        return (f"epsilon_max={self.epsilon_max}, tau_star={self.tau_star}, cd_weight={self.cd_weight}, "
                f"warmup_steps={self.warmup_steps}, steps={self.steps}, dt={self.dt}, coupling={self.coupling!r}")

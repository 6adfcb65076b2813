r"""E-ARM: train an autoregressive model as the energy-based model its own logits define.

An autoregressive (AR) model :math:`Q_\theta` gives next-step logits :math:`z_\theta(x_{<k}) \in
\mathbb R^V`; softmax ignores a shift of the logits, so their raw values are a spare degree of
freedom. E-ARM reads them as an energy: :math:`\phi_\theta(x_k, x_{<k}) = -z_\theta(x_{<k})[x_k]`,
:math:`E_\theta(x_k, x_{<k}) = \phi_\theta(x_k, x_{<k}) - \log q_\theta(x_{<k})`, and at each step
``k`` the energy-based law

.. math::  p_{\theta,k}(x_k, x_{<k}) = q_\theta(x_{<k})\, e^{-\phi_\theta(x_k, x_{<k})} / Z_k, \qquad
           Z_k = \mathbb E_{Q_\theta}\big[e^{\mathrm{LSE}\, z_\theta(x_{<k})}\big].

Minimising :math:`\sum_k \lambda_k\, \mathrm{KL}(P_{d,k} \| P_{\theta,k})` has the gradient
:math:`\sum_k \lambda_k (\mathbb E_{P_d}[\nabla E_\theta] - \mathbb E_{P_{\theta,k}}[\nabla E_\theta])`;
the negative phase is importance-sampled from the model's own draws
:math:`\hat x^{(i)} \sim Q_\theta` (no MCMC, no extra parameters) with the weights of Eq. 13,

.. math::  w_k(\hat x_{<k}) = e^{\mathrm{LSE}\, z_\theta(\hat x_{<k})} / \bar D_k, \qquad
           \hat D_k = \tfrac1{B'} \textstyle\sum_i m_{ik}\, e^{\mathrm{LSE}\, z_\theta(\hat x^{(i)}_{<k})},

:math:`\bar D_k` = :math:`\hat D_k` (``ema=None``: ``w = B'`` softmax over the draws) or its moving
average :math:`\bar D_k \leftarrow \beta \bar D_k + (1 - \beta) \hat D_k` (``ema=β``, MINE-style;
the first value seen at step ``k`` starts it). The surrogate, whose gradient is the estimator of
Eq. 15 (weights detached, draws without gradient):

.. math::  S = \sum_k \lambda_k \Big[\frac1{n_k}\sum_{b:\,m_{bk}} \tilde E_\theta(x_{bk}, x_{b,<k})
           - \frac1{B'} \sum_i m_{ik}\, w_{ik}\, \tilde E_\theta(\hat x_{ik}, \hat x_{i,<k})\Big],
           \qquad \tilde E = \phi_\theta - \log \tilde q_\theta,

where :math:`\log \tilde q_\theta(x_{<k}) = \sum_{l<k} \log q(x_l \mid x_{<l})` carries gradient only
through the ``truncate = m`` most recent conditionals ``l >= k - m`` (older ones detached, the
paper's fix of the time-step imbalance of Eq. 16; ``None``: all). ``rao_blackwell=True`` replaces the
drawn :math:`\phi_\theta(\hat x_k, \hat x_{<k})` by :math:`-\mathrm{LSE}\, z_\theta(\hat x_{<k})`, its
expectation's gradient over :math:`\hat x_k \sim q_\theta(\cdot \mid \hat x_{<k})` (lower variance).

**Steps and masks.** ``mask[b, k]`` says whether step ``k`` of row ``b`` is real (sentences of
different lengths). Step ``k``'s laws live on the rows real at ``k``; :math:`n_k` data rows are real
there and :math:`\lambda_k = n_k / B` (equal :math:`\lambda_k = 1` for fixed-length data, as the
paper; otherwise each real data step counts once, like the cross-entropy). A step enters ``S`` only
when at least one data row and one draw are real there (both phases present); draws' steps after
the data's last step are ignored. The value of ``S`` includes the detached older conditionals, so
with ``truncate=None`` it is the untruncated surrogate's value.

**Loss** = cross-entropy on the data (teacher-forced, mean per real step, optional label smoothing)
+ ``weight`` * ``S``. ``S`` is summed over steps (not averaged), so its scale grows with the length:
``weight ~ 1 / K`` puts it on the per-token scale of the cross-entropy. It is switched on after
``start_step`` calls of the objective in training mode (counter ``steps``, a buffer in the state
dict, as are the moving averages, of fixed size ``max_steps``, so a resumed run continues exactly).
A start *epoch* ``e`` is ``start_step = e * steps_per_epoch`` (e.g. ``ceil(n_train / batch_size)``
for the Trainer). In
evaluation mode the loss is the cross-entropy only. Metrics: ``ce``, ``earm`` (= ``S``, 0 when off),
``ess`` (Kish ESS :math:`(\sum w)^2 / \sum w^2` of the draws' weights, mean over the steps used, 0
when off), ``active`` (1 or 0).

**Clipping the surrogate on its own** (``clip=c``). The surrogate's gradient can be many times the
cross-entropy's (its sum over steps, its weights), so one clip of the total gradient mostly clips
the cross-entropy away. With ``clip`` the term's own gradient :math:`g_S = \nabla_\theta(\text{weight}
\cdot S)` is rescaled to norm at most ``c`` before it joins the cross-entropy's:

.. math::  \nabla \text{loss} = \nabla \mathrm{CE} + \min\big(1, c / \lVert g_S \rVert\big)\, g_S,

by multiplying the term with that detached factor (one more backward pass through the
surrogate, :func:`torch.autograd.grad` over the model's parameters; per process under data
parallelism). Metric ``earm_grad_norm``: :math:`\lVert g_S \rVert` before the rescaling (0 when off).
While :math:`\lVert g_S \rVert \ge c` the step is :math:`c\, \nabla S / \lVert \nabla S \rVert` whatever
``weight`` is: a binding clip, not the weight, sets the surrogate's strength.

**Models** follow :class:`~ebms.capabilities.EARMModel`: every :class:`~ebms.models.lm.AutoregressiveLM`
does (read under its own ``max_length``), as do :class:`~ebms.models.lm.LMAdapter` (another horizon),
the seq2seq and PixelCNN adapters; another :class:`~ebms.capabilities.SentenceLM` without
``teacher_forced`` is wrapped in ``LMAdapter`` with ``max_length=None`` automatically.

Cost per active step: the data pass (shared with the cross-entropy), ``B`` ancestral draws without
gradient, a teacher-forced pass with gradient on the draws; ``O(B K V)`` memory for each pass.

**Energy resampling at inference** (the paper's Tables 3 and 9). At the last step ``K`` of a complete
sequence the E-ARM law is :math:`p_K(x) \propto q_\theta(x_{<K})\, e^{-\phi_\theta(x_K, x_{<K})} =
q_\theta(x)\, e^{\mathrm{LSE}\, z_\theta(x_{<K})}`: the model's own law times :math:`e^{-E(x)}` with
:math:`E(x) = -\mathrm{LSE}\, z_\theta(x_{<K})` (the sequence energy :math:`\phi - \log q` at the last step,
the reading the paper leaves open). :func:`sequence_energy` gives :math:`\log q_\theta(x)` and
:math:`E(x)` of any :class:`~ebms.capabilities.EARMModel`'s complete sequences; :func:`energy_resample`
picks one of ``k`` candidates per input (beam hypotheses or draws) by that energy, as the top-k joint
sampling of Deng et al. (2020) does with a residual energy.

References: Wang, Che, Li, Song, Pei, Bengio & Li (2022), *Your autoregressive generative model
can be better if you treat it as an energy-based one*; Deng, Bakhtin, Ott, Szlam & Ranzato (2020),
*Residual energy-based models for text generation* (top-k joint sampling); Belghazi et al. (2018), *MINE: mutual
information neural estimation* (moving-average denominator).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ebms._checks import check_bool, check_int, check_positive, check_probability
from ebms.capabilities import EARMModel, SentenceLM, supports
from ebms.models.lm import LMAdapter
from ebms.objectives._base import LossOutput, scalar_metrics

__all__ = ["EARM", "EARMTerms", "LMAdapter", "energy_resample", "sequence_energy"]

Triple = tuple[Tensor, Tensor, Tensor]


@dataclass(frozen=True)
class EARMTerms:
    r"""What :meth:`EARM.surrogate` computes.

    Attributes:
        value: 0-d surrogate ``S`` (with gradient).
        log_weights: ``(B', K)`` detached :math:`\log w_{ik}` (``-inf`` at masked or unused steps).
        log_denominator: ``(K,)`` float64 :math:`\log \bar D_k` used (``-inf`` at unused steps).
        used: ``(K,)`` bool, the steps in ``S``.
        ess: 0-d mean Kish ESS of the weights over the used steps (0 when none).
    """

    value: Tensor
    log_weights: Tensor
    log_denominator: Tensor
    used: Tensor
    ess: Tensor


class EARM(nn.Module):
    r"""Cross-entropy plus the E-ARM surrogate (see the module docstring).

    Args:
        weight: multiplier of the surrogate ``S`` (``> 0``).
        start_step: training-mode calls with the cross-entropy alone before ``S`` switches on.
        truncate: ``m``, conditionals of :math:`\log \tilde q` that carry gradient (``None``: all).
        ema: :math:`\beta \in [0, 1)` of the moving-average denominator, or ``None`` (this batch's).
        rao_blackwell: use :math:`-\mathrm{LSE}` for the draws' :math:`\phi` (closed-form expectation).
        label_smoothing: :math:`\varepsilon \in [0, 1)` of the cross-entropy term.
        max_steps: the most steps ``K`` a batch may have when ``ema`` is set (the moving averages are
            buffers of this fixed size, 16 bytes per step, so snapshots and checkpoints always fit).
        clip: bound ``c > 0`` on the norm of the surrogate term's own gradient (``None``: not clipped;
            the model must be an ``nn.Module`` with parameters that require gradient).
        ce_clip: bound on the norm of the cross-entropy term's own gradient, in every call (``None``: not
            clipped). With ``clip`` and ``ce_clip`` set and the trainer's total clip off, each term keeps
            its own bound: the cross-entropy step is the one a cross-entropy run clipped at ``ce_clip``
            takes, and the surrogate's is added to it, not traded against it.

    Example:
        >>> from ebms.models.lm import LSTMLM
        >>> from ebms.sequences import Sequences
        >>> lm = LSTMLM(6, embedding_dim=4, hidden_size=4, num_layers=1)
        >>> out = EARM()(lm, Sequences.from_lists([[1, 2, 3], [4]]), generator=torch.Generator().manual_seed(0))
        >>> out.metrics["active"]
        1.0
    """

    steps: Tensor
    log_denominator: Tensor
    ema_count: Tensor

    def __init__(self, *, weight: float = 1.0, start_step: int = 0, truncate: int | None = 2,
                 ema: float | None = 0.9, rao_blackwell: bool = False, label_smoothing: float = 0.0,
                 max_steps: int = 4096, clip: float | None = None, ce_clip: float | None = None) -> None:
        super().__init__()
        self.weight = check_positive(weight, "weight")
        self.start_step = check_int(start_step, "start_step", minimum=0)
        self.truncate = None if truncate is None else check_int(truncate, "truncate", minimum=0)
        self.ema = None if ema is None else check_probability(ema, "ema", open_high=True)
        self.rao_blackwell = check_bool(rao_blackwell, "rao_blackwell")
        self.label_smoothing = check_probability(label_smoothing, "label_smoothing", open_high=True)
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))
        self.max_steps = check_int(max_steps, "max_steps", minimum=1)
        self.clip = None if clip is None else check_positive(clip, "clip")
        self.ce_clip = None if ce_clip is None else check_positive(ce_clip, "ce_clip")
        self.register_buffer("log_denominator", torch.zeros(self.max_steps, dtype=torch.float64))
        self.register_buffer("ema_count", torch.zeros(self.max_steps, dtype=torch.long))

    def forward(self, model: Any, batch: Any, *, generator: torch.Generator | None = None) -> LossOutput:
        model = _adapt(model)
        data = _checked(model.teacher_forced(batch), "model.teacher_forced(batch)")
        logits, targets, mask = data
        per = F.cross_entropy(logits.transpose(1, 2), targets.masked_fill(~mask, 0), reduction="none",
                              label_smoothing=self.label_smoothing)
        ce = torch.where(mask, per, per.new_zeros(())).sum() / mask.sum().clamp(min=1)
        active = self.training and int(self.steps) >= self.start_step
        if self.training:
            self.steps += 1
        extra = {}
        ce_step = ce
        if self.ce_clip is not None and self.training:
            ce_step, extra["ce_grad_norm"] = _clipped(ce, model, self.ce_clip, "ce_clip", "the cross-entropy's")
        if not active:
            zero = ce.new_zeros(())
            if self.clip is not None:
                extra["earm_grad_norm"] = zero
            return LossOutput(ce_step, scalar_metrics(ce=ce.detach(), earm=zero, ess=zero, active=0.0, **extra))
        with torch.no_grad():
            drawn = model.draw(batch, generator)
        draws = _checked(model.teacher_forced(drawn), "model.teacher_forced(model.draw(batch))")
        terms = self._terms(data, draws, None, None, update=self.ema is not None)
        term = self.weight * terms.value
        if self.clip is not None:
            term, extra["earm_grad_norm"] = _clipped(term, model, self.clip, "clip", "the surrogate's")
        return LossOutput(ce_step + term, scalar_metrics(ce=ce.detach(), earm=terms.value.detach(), ess=terms.ess,
                                                    active=1.0, **extra))

    def surrogate(self, data: Triple, draws: Triple, *, draw_log_mass: Tensor | None = None,
                  log_denominator: Tensor | None = None) -> EARMTerms:
        r"""``S`` for teacher-forced data and draws (:meth:`~ebms.capabilities.EARMModel.teacher_forced` triples), without
        touching the moving averages.

        Args:
            data: ``(logits (B, K, V), targets, mask)`` of the data.
            draws: the same of the draws ``(B', K', V)`` (cut or padded to ``K``).
            draw_log_mass: ``(B',)`` log-masses of the draw rows in place of the uniform ``-log B'``:
                with every sequence of a tiny model and its log-probability, the draw averages become
                exact expectations over :math:`Q_\theta` (enumeration; masses should sum to 1).
            log_denominator: ``(K,)`` :math:`\log \bar D_k` to use instead of this batch's.
        """
        data = _checked(data, "data")
        draws = _checked(draws, "draws")
        if draw_log_mass is not None and tuple(draw_log_mass.shape) != (draws[0].shape[0],):
            raise ValueError(f"draw_log_mass: expected shape ({draws[0].shape[0]},); got {tuple(draw_log_mass.shape)}")
        if log_denominator is not None and tuple(log_denominator.shape) != (data[0].shape[1],):
            raise ValueError(f"log_denominator: expected shape ({data[0].shape[1]},); got "
                             f"{tuple(log_denominator.shape)}")
        return self._terms(data, draws, draw_log_mass, log_denominator, update=False)

    def _terms(self, data: Triple, draws: Triple, log_mass: Tensor | None, log_den: Tensor | None, *,
               update: bool) -> EARMTerms:
        if data[0].shape[2] != draws[0].shape[2]:
            raise ValueError(f"draws: expected {data[0].shape[2]} outcomes per step as the data; got "
                             f"{draws[0].shape[2]}")
        B, K = data[1].shape
        draws = _fit(draws, K)
        n_draws = draws[1].shape[0]
        phi_d, logq_d, _ = _energy_parts(data, self.truncate, rao_blackwell=False)
        phi_s, logq_s, lse_s = _energy_parts(draws, self.truncate, rao_blackwell=self.rao_blackwell)
        m_d, m_s = data[2], draws[2]
        if log_mass is None:
            log_mass = lse_s.new_full((n_draws,), -math.log(n_draws))
        log_mass = log_mass.detach().to(lse_s)
        log_hat = torch.where(m_s, lse_s.detach() + log_mass.unsqueeze(1), -math.inf).double().logsumexp(0)
        used = m_d.any(0) & m_s.any(0)
        if update:
            log_hat = self._ema_update(log_hat, used)
        elif log_den is not None:
            log_hat = log_den.detach().double().to(log_hat.device)
        log_hat = torch.where(used, log_hat, -math.inf)
        log_w = torch.where(m_s & used, lse_s.detach() - log_hat.to(lse_s), -math.inf)
        lam = m_d.sum(0).to(lse_s) / B  # lambda_k = n_k / B
        pos = torch.where(m_d, phi_d - logq_d, 0.0).sum(0) / m_d.sum(0).clamp(min=1)
        v = (log_w + log_mass.unsqueeze(1)).exp()  # (B', K): mass * weight, 0 where unused
        neg = (v * torch.where(m_s, phi_s - logq_s, 0.0)).sum(0)
        value = torch.where(used, lam * (pos - neg), 0.0).sum()
        ess_k = v.sum(0).square() / v.square().sum(0).clamp(min=torch.finfo(v.dtype).tiny)
        ess = torch.where(used, ess_k, 0.0).sum() / used.sum().clamp(min=1)
        return EARMTerms(value, log_w, log_hat, used, ess.detach())

    def _ema_update(self, log_hat: Tensor, used: Tensor) -> Tensor:
        """``log D_bar`` after folding this batch's ``log D_hat`` in at the used steps."""
        assert self.ema is not None
        K = log_hat.shape[0]
        if K > self.max_steps:
            raise ValueError(f"max_steps: the batch has K={K} steps; this EARM keeps moving averages for at most "
                             f"max_steps={self.max_steps} (raise it, or use ema=None)")
        old = self.log_denominator[:K].to(log_hat.device)
        count = self.ema_count[:K].to(log_hat.device)
        beta = self.ema
        mixed = torch.logaddexp(old + math.log(beta) if beta > 0 else torch.full_like(old, -math.inf),
                                log_hat + math.log1p(-beta))
        new = torch.where(count > 0, mixed, log_hat)
        new = torch.where(used, new, old)
        self.log_denominator[:K] = new.to(self.log_denominator.device)
        self.ema_count[:K] += used.to(self.ema_count.device, self.ema_count.dtype)
        return new

    def extra_repr(self) -> str:
        return (f"weight={self.weight}, start_step={self.start_step}, truncate={self.truncate}, ema={self.ema}, "
                f"rao_blackwell={self.rao_blackwell}, label_smoothing={self.label_smoothing}, "
                f"max_steps={self.max_steps}, clip={self.clip}, ce_clip={self.ce_clip}")


def _energy_parts(triple: Triple, m: int | None, *, rao_blackwell: bool) -> Triple:
    """``(phi (B, K), log q~ of the prefix (B, K), LSE (B, K))``; masked steps' conditionals count 0."""
    logits, targets, mask = triple
    safe = targets.masked_fill(~mask, 0).unsqueeze(-1)
    picked = logits.gather(-1, safe).squeeze(-1)
    lse = logits.logsumexp(-1)
    lp = torch.where(mask, picked - lse, 0.0)  # log q(x_k | x_<k)
    live = lp - lp.detach()  # value 0, gradient of lp
    before = F.pad(lp.detach().cumsum(1), (1, 0))[:, :-1]  # sum_{l<k}, detached
    g = F.pad(live.cumsum(1), (1, 0))  # g[:, k] = sum_{l<k} live
    K = lp.shape[1]
    if m is None:
        window = g[:, :-1]
    else:
        start = (torch.arange(K, device=lp.device) - m).clamp(min=0)
        window = g[:, :-1] - g[:, start]
    phi = -lse if rao_blackwell else -picked
    return phi, before + window, lse


def _fit(triple: Triple, K: int) -> Triple:
    """The draws cut or padded (masked) to ``K`` steps."""
    logits, targets, mask = triple
    k = targets.shape[1]
    if k >= K:
        return logits[:, :K], targets[:, :K], mask[:, :K]
    return F.pad(logits, (0, 0, 0, K - k)), F.pad(targets, (0, K - k)), F.pad(mask, (0, K - k))


def _checked(out: Any, name: str) -> Triple:
    if not (isinstance(out, tuple) and len(out) == 3 and all(isinstance(t, Tensor) for t in out)):
        raise TypeError(f"{name}: expected a tuple (logits (B, K, V), targets (B, K), mask (B, K)) of tensors; "
                        f"got {type(out).__name__}")
    logits, targets, mask = out
    if logits.dim() != 3 or not logits.is_floating_point() or logits.shape[0] == 0 or logits.shape[1] == 0:
        raise ValueError(f"{name}: expected floating logits of shape (B, K, V) with B, K >= 1; got "
                         f"{logits.dtype} of shape {tuple(logits.shape)}")
    if targets.shape != logits.shape[:2] or mask.shape != logits.shape[:2]:
        raise ValueError(f"{name}: expected targets and mask of shape {tuple(logits.shape[:2])}; got "
                         f"{tuple(targets.shape)} and {tuple(mask.shape)}")
    if mask.dtype != torch.bool or targets.dtype != torch.long:
        raise TypeError(f"{name}: expected int64 targets and a bool mask; got {targets.dtype} and {mask.dtype}")
    bad = mask & ((targets < 0) | (targets >= logits.shape[2]))
    if bool(bad.any()):
        raise ValueError(f"{name}: expected targets in [0, {logits.shape[2]}) at the real steps; got "
                         f"{int(targets[bad][0])}")
    # masked steps' logits are ignored: zeros keep -inf/NaN there out of the values and the gradients
    return logits.masked_fill(~mask.unsqueeze(-1), 0.0), targets, mask


@torch.no_grad()
def sequence_energy(model: Any, batch: Any) -> tuple[Tensor, Tensor]:
    r"""``(log q (B,), energy (B,))`` of complete sequences: :math:`\log q_\theta(x) = \sum_k \log
    q_\theta(x_k \mid x_{<k})` over the real steps, and :math:`E(x) = -\mathrm{LSE}\, z_\theta(x_{<K})` at
    the last real step ``K`` (the ``</s>`` step of a sentence), so that the E-ARM law of the sequence is
    :math:`\propto q_\theta(x)\, e^{-E(x)}` (module docstring).

    Args:
        model: an :class:`~ebms.capabilities.EARMModel` (an LM, ``Seq2SeqAdapter``, ``PixelCNNAdapter``) or a
            sentence LM; read as it is (call ``model.eval()`` first for dropout-free scores).
        batch: what ``model.teacher_forced`` takes (sentences; ``(src, tgt)`` pairs).

    Cost: one teacher-forced pass, no gradient.
    """
    logits, targets, mask = _checked(_adapt(model).teacher_forced(batch), "model.teacher_forced(batch)")
    if not bool(mask[:, 0].all()) or bool((mask[:, 1:] & ~mask[:, :-1]).any()):
        raise ValueError("model.teacher_forced(batch): expected the real steps of each row to come first (a mask "
                         "of the form 1..1 0..0 with at least one real step)")
    picked = logits.log_softmax(-1).gather(-1, targets.masked_fill(~mask, 0).unsqueeze(-1)).squeeze(-1)
    log_q = torch.where(mask, picked, 0.0).sum(1)
    last = mask.sum(1) - 1
    energy = -logits[torch.arange(logits.shape[0], device=logits.device), last].logsumexp(-1)
    return log_q, energy


def energy_resample(log_q: Tensor, energy: Tensor, k: int, *, rule: str = "resample",
                    generator: torch.Generator | None = None) -> Tensor:
    r"""Pick one of every ``k`` consecutive candidates by the E-ARM energy; returns their row indices ``(B,)``.

    Args:
        log_q: ``(B k,)`` :math:`\log q_\theta` of the candidates (from :func:`sequence_energy`); ``-inf`` marks
            an empty slot (a beam with fewer outputs), never picked.
        energy: ``(B k,)`` their :math:`E`.
        k: candidates per input (rows ``b k .. b k + k - 1`` belong to input ``b``).
        rule: ``"resample"``: candidate ``i`` with probability :math:`\propto e^{-E_i}` (top-k joint sampling:
            with draws from :math:`q_\theta` as candidates the pick tends to the E-ARM law as ``k`` grows);
            ``"joint"``: the candidate of the largest :math:`\log q_\theta - E`, the E-ARM law's own score
            (for beam hypotheses, which are not draws).
        generator: the pick's random source (``"resample"``).
    """
    k = check_int(k, "k", minimum=1)
    if rule not in ("resample", "joint"):
        raise ValueError(f"rule: expected 'resample' or 'joint'; got {rule!r}")
    if log_q.dim() != 1 or log_q.shape != energy.shape or log_q.shape[0] % k:
        raise ValueError(f"log_q, energy: expected two (B k,) tensors with k={k}; got {tuple(log_q.shape)} and "
                         f"{tuple(energy.shape)}")
    lq, e = log_q.view(-1, k), energy.view(-1, k)
    live = torch.isfinite(lq)
    if not bool(live.any(1).all()):
        raise ValueError("log_q: every input needs at least one candidate with a finite log-probability")
    score = torch.where(live, -e if rule == "resample" else lq - e, -math.inf)
    if rule == "joint":
        pick = score.argmax(1)
    else:
        pick = torch.multinomial(score.double().softmax(1), 1, generator=generator).squeeze(1)
    return torch.arange(lq.shape[0], device=pick.device) * k + pick


def _clipped(term: Tensor, model: Any, bound: float, key: str, whose: str) -> tuple[Tensor, Tensor]:
    """``term`` scaled by the detached ``min(1, bound / ||d term / d theta||)``, and that norm."""
    norm = _gradient_norm(term, model, key, whose)
    return term * (bound / norm.clamp(min=torch.finfo(norm.dtype).tiny)).clamp(max=1.0).detach(), norm


def _gradient_norm(term: Tensor, model: Any, key: str, whose: str) -> Tensor:
    """``||d term / d theta||`` over the parameters of ``model`` that require gradient (the graph is kept)."""
    params = [p for p in model.parameters() if p.requires_grad] if isinstance(model, nn.Module) else []
    if not params:
        raise TypeError(f"{key}: {whose} gradient is clipped over the model's parameters; "
                        f"{type(model).__name__} has none that require gradient (use {key}=None)")
    grads = torch.autograd.grad(term, params, retain_graph=True, allow_unused=True)
    norms = [torch.linalg.vector_norm(g.detach()) for g in grads if g is not None]
    return torch.linalg.vector_norm(torch.stack(norms)) if norms else term.new_zeros(())


def _adapt(model: Any) -> Any:
    if supports(model, EARMModel):
        return model
    if supports(model, SentenceLM):
        return LMAdapter(model)
    raise TypeError(f"model: expected an EARMModel (teacher_forced(batch), draw(batch, generator)) or an "
                    f"autoregressive sentence LM (ebms.models.lm); got {type(model).__name__}")

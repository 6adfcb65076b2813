r"""Augmented stochastic approximation (AugSA) for trans-dimensional random field LMs.

A TRF :math:`p(l, x) = \pi_l e^{-E_\theta(x)} / Z_l` is fitted by maximum likelihood while its
log normalisers :math:`\zeta_l \approx \log Z_l(\theta)` are estimated alongside (Wang, Ou & Tan
2018; monograph §2.3 Algorithms 4–6 and chapter 3). Persistent trans-dimensional chains target the
*augmented* law :math:`p(l, x; \theta, \zeta) \propto \pi^0_l e^{-E_\theta(x) - \zeta_l}` (the TRF as
a :class:`~ebms.samplers.trans_dimensional.TransDimensionalTarget` with its sampling prior
:math:`\pi^0`), whose length marginal equals :math:`\pi^0` exactly when :math:`\zeta = \log Z + c`.
One call (one SA iteration :math:`t`, "SA with multiple moves", Algorithm 5):

1. **Sampling.** ``moves`` :math:`K` sampler steps from the chains' last states; the :math:`n = KC`
   visited states (``C`` chains) form :math:`B_t`.
2. **Parameters** (through the returned loss and the trainer's optimizer): the surrogate

   .. math::  \mathcal L(\theta) = \frac1B\sum_{x \in D} E_\theta(x)
              - \frac1n \sum_{x \in B_t} \frac{\pi_{l(x)}}{\pi^0_{l(x)}} E_\theta(x)

   (samples detached) has the gradient :math:`E_{data}[\nabla E] - \sum_l \pi_l E_{p_l}[\nabla E]`,
   the negative log-likelihood gradient: the weights :math:`\pi_l/\pi^0_l` undo the sampler's
   length marginal :math:`\pi^0` (Algorithm 6 with the TRF's reweighting). With ``data_mean``
   (a linear feature energy :math:`E = -\lambda^\top f`, e.g. :class:`~ebms.models.trf.DiscreteFeatures`)
   the first term is the whole training set's, :math:`-\lambda^\top \tilde p[f]` with the
   precomputed expectation :math:`\tilde p[f]`, as the source's trainer computes it once
   (``MLfunc::GetEmpExp``); the batch then only starts the chains. The minibatch term has the same
   expectation but adds its own noise, which the per-feature variance scaling of the source's
   update magnifies for rare features.
3. **Normalisers** (by the objective itself, in place, with its own rate :math:`\gamma^\zeta_t`):

   .. math::  \zeta_l \leftarrow \zeta_l + \min(\gamma^\zeta_t, L\pi^0_l)
              \Big(\frac{\delta_l(B_t)}{\pi^0_l} - 1\Big),

   :math:`\delta_l` the fraction of :math:`B_t` of length ``l``: an over-visited length gets a larger
   :math:`\zeta_l` and is visited less (Wang–Landau-like). The source writes the step without the
   :math:`-1` and then subtracts :math:`\zeta_1`; with one rate for all lengths the two agree after
   the anchor, and the centred form keeps the root :math:`\delta = \pi^0` when the per-length cap
   :math:`L\pi^0_l` (the source's, ``cap=True``) makes the rates differ. With ``anchor`` the level
   is fixed after each step: :math:`\zeta_1 = 0` when the model reads :math:`\zeta` relative to an
   exact :math:`\log Z_1` (``TRF(anchor_first=True)``), else :math:`\zeta_1 = \log Z_1(\theta)`
   summed exactly over the ``V - 1`` one-token sentences, so :math:`\zeta_l` estimates
   :math:`\log Z_l` itself. Without the anchor only differences :math:`\zeta_l - \zeta_k` are
   estimated (the update preserves :math:`\sum_l \pi^0_l \zeta_l`).

**When ζ moves.** The step of call :math:`t` is kept in the buffer ``pending`` and applied, with
the anchor, at the start of call :math:`t + 1`, before its sampling — the source's order (sample
with :math:`\zeta_{t-1}`, update, sample with :math:`\zeta_t`), with two gains: a call changes the
model only by the *previous* call's step, so it repeats exactly from the same state, and the
anchor sees the parameters after the optimizer's step. **After the last step, call**
:meth:`AugSA.finish` to apply the last pending step.

**Trainer.** :math:`\theta` follows the optimizer (the source: SGD with the two-stage
:class:`~ebms.objectives.SAGain` as ``lr_schedule``); :math:`\zeta` (the model's ``log_z``
parameter) gets no gradient from the loss, so the optimizer leaves it alone and only step 3 moves
it. Under ``torchrun`` the length counts are summed over ranks (one ``all_reduce`` of ``L`` numbers)
so every rank takes the same :math:`\zeta` step; each rank keeps its own chains. Optimizers that
re-evaluate the loss (L-BFGS) would repeat step 3: use first-order ones.

**State** (buffers, in ``state_dict``, so checkpoints resume the chains): ``chain_tokens``
``(C, L)`` and ``chain_lengths`` ``(C,)`` (empty until the first call starts them from the data
batch, tiled to ``C`` rows), ``step`` (SA iterations so far, the :math:`t` of the rate),
``pending`` (the step not yet applied, ``(L,)``); with ``trace``, the traced values.

**Constant rates and sweeps.** With a constant :math:`\gamma^\zeta` the iterates fluctuate (standard
deviation about :math:`\sqrt{\gamma/(2\pi^0_l n_{eff})}`) and their average carries a bias from the
Markov noise: on a 3-token, 3-length TRF with one within-length sweep per step (:math:`\gamma = 0.05`,
200 chains) the averages of 8 runs all sat above :math:`\log Z_l`, by about a quarter of the
iterates' standard deviation — chains that just changed length are not yet in equilibrium within
it while :math:`\zeta` moves. With 4 sweeps the sign was no longer systematic. The bias vanishes
as the rate decays (:class:`~ebms.objectives.SAGain`), which convergence needs anyway.

**Metrics** (one host sync): ``loss`` (the surrogate), ``e_pos`` / ``e_neg`` (mean data energy and
reweighted mean sample energy), ``gap``; ``accept`` (mean MH acceptance of the moves),
``jump_accept``; ``zeta_gain`` (:math:`\gamma^\zeta_t`), ``zeta_step`` (largest
:math:`|\Delta\zeta_l|`), ``length_tv`` (:math:`\frac12\sum_l|\delta_l - \pi^0_l|`: it falls to the
sampling noise level once :math:`\zeta` is right — the health number to watch).

Cost per call: ``K`` sampler steps on ``C`` chains (:class:`~ebms.samplers.TransDimensional`), one
energy evaluation with gradient over ``B + KC`` sentences, one over the ``V - 1`` one-token
sentences for the anchor (none with ``anchor_first``).

References:
    Wang, B., Ou, Z. & Tan, Z. (2018). "Learning trans-dimensional random fields with applications
    to language modeling." IEEE TPAMI 40(4).
    Ou, Z. (2024). "Energy-Based Models with Applications to Speech and Language Processing",
    §2.3 (stochastic approximation) and §3.2.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from ebms._checks import check_bool, check_int
from ebms.capabilities import TransDimensionalField
from ebms.objectives._base import LossOutput, scalar_metrics
from ebms.objectives._trf_common import (
    check_in_space,
    check_trf,
    distributed_sum,
    single_token_log_z,
)
from ebms.objectives._trf_gain import SAGain
from ebms.objectives._trf_trace import ZetaTrace, ZetaTraced
from ebms.samplers.trans_dimensional import TransDimensional
from ebms.sequences import Sequences

__all__ = ["AugSA"]


class AugSA(ZetaTraced, nn.Module):
    r"""AugSA for TRF language models (see the module docstring).

    ``out = objective(trf, batch, generator=g)`` runs one SA iteration: it moves the persistent
    chains, updates ``trf.log_z`` in place and returns the surrogate loss whose gradient is the
    negative log-likelihood gradient in the energy's parameters.

    Args:
        sampler: the trans-dimensional kernel (default: :class:`~ebms.samplers.TransDimensional`
            with uniform proposals over the tokens ``1..V-1`` and one sweep per step; class
            proposals, ``trials`` and ``sweeps`` are set there).
        chains: persistent chains ``C``.
        moves: sampler steps ``K`` per call; all ``K C`` visited states are used.
        zeta_gain: ``step -> rate`` :math:`\gamma^\zeta_t` (default ``SAGain(0, 0.6, 500)``, the
            source's).
        cap: cap the per-length rate at :math:`L\pi^0_l` (the source's guard for rare lengths).
        anchor: fix the level of :math:`\zeta` after each step (see the module docstring).
        trace: keep the last ``trace`` values of the model's :math:`\log Z_l` — the values each call
            samples with, after the previous step is applied — for :meth:`zeta_estimate` (0: none).
        data_mean: ``(F,)`` the training set's mean feature counts :math:`\tilde p[f]` (e.g. the first
            result of :func:`~ebms.models.trf.feature_moments`) for a model whose energy is
            ``model.field``, linear in ``model.field.weight`` ``(F,)``: the data term becomes the full
            training set's (module docstring). Data, not state: not in ``state_dict``.

    Example:
        >>> import torch
        >>> from ebms.models.trf import TRF, DiscreteFeatures, feature_templates
        >>> corpus = Sequences.from_lists([[1, 2], [2, 1, 1], [1], [2, 2]])
        >>> feats = DiscreteFeatures.fit(corpus, 3, feature_templates(("w",), order=2))
        >>> trf = TRF.from_corpus(feats, corpus, vocab_size=3)
        >>> out = AugSA(chains=8)(trf, corpus, generator=torch.Generator().manual_seed(0))
        >>> sorted(out.metrics)[:3]
        ['accept', 'e_neg', 'e_pos']
    """

    chain_tokens: Tensor
    chain_lengths: Tensor
    step: Tensor
    pending: Tensor

    def __init__(self, sampler: TransDimensional | None = None, *, chains: int = 100, moves: int = 1,
                 zeta_gain: Callable[[int], float] | None = None, cap: bool = True, anchor: bool = True,
                 trace: int = 0, data_mean: Tensor | None = None) -> None:
        super().__init__()
        if sampler is not None and not isinstance(sampler, TransDimensional):
            raise TypeError(f"sampler: expected an ebms.samplers.TransDimensional or None; got {type(sampler).__name__}")
        self.sampler = sampler
        self.chains = check_int(chains, "chains", minimum=1)
        self.moves = check_int(moves, "moves", minimum=1)
        if zeta_gain is not None and not callable(zeta_gain):
            raise TypeError(f"zeta_gain: expected a callable step -> rate (e.g. SAGain) or None; got {zeta_gain!r}")
        self.zeta_gain: Callable[[int], float] = SAGain(0.0, 0.6, 500) if zeta_gain is None else zeta_gain
        for name, flag in (("cap", cap), ("anchor", anchor)):
            check_bool(flag, name)
        self.cap, self.anchor = cap, anchor
        self._default: dict[int, TransDimensional] = {}
        self.register_buffer("chain_tokens", torch.zeros(0, 0, dtype=torch.long))
        self.register_buffer("chain_lengths", torch.zeros(0, dtype=torch.long))
        self.register_buffer("step", torch.zeros((), dtype=torch.long))
        self.register_buffer("pending", torch.zeros(0))
        self.trace = ZetaTrace(trace) if check_int(trace, "trace", minimum=0) else None
        if data_mean is not None and (not isinstance(data_mean, Tensor) or data_mean.dim() != 1
                                      or not bool(torch.isfinite(data_mean).all())):
            got = tuple(data_mean.shape) if isinstance(data_mean, Tensor) else type(data_mean).__name__
            raise ValueError(f"data_mean: expected a finite 1-D tensor (F,) of mean feature counts; got {got}")
        self.data_mean = data_mean

    def _sampler(self, vocab_size: int) -> TransDimensional:
        if self.sampler is not None:
            return self.sampler
        if vocab_size not in self._default:
            probs = torch.ones(vocab_size)
            probs[0] = 0.0  # the boundary id is never proposed
            self._default[vocab_size] = TransDimensional(token_probs=probs)
        return self._default[vocab_size]

    def _start(self, x: Sequences, width: int) -> Sequences:
        """The chains' current states, started from the data batch on the first call."""
        if self.chain_lengths.numel() == 0:
            rows = torch.arange(self.chains, device=x.device) % x.batch_size
            start = x[rows].pad_to(width)
            self.chain_tokens = start.tokens[:, :width].clone()
            self.chain_lengths = start.lengths.clone()
        return Sequences(self.chain_tokens, self.chain_lengths, validate=False)

    def forward(self, model: TransDimensionalField, batch: Sequences | tuple[Tensor, Tensor], *,
                generator: torch.Generator | None = None) -> LossOutput:
        """One SA iteration on the data ``batch`` (``B`` sentences); see the class docstring."""
        model = check_trf(model)
        space = model.space
        L = space.max_length
        x = check_in_space(Sequences.coerce(batch, empty=False), space, "batch")
        self.finish(model)
        if self.trace is not None:
            self.trace.record(model.log_normalisers())
        sampler = self._sampler(model.vocab_size)
        target: Any = model  # a TransDimensionalTarget, which the sampler reads by protocol
        state = sampler.init(target, self._start(x, L))
        tokens, lengths, accept, jump = [], [], [], []
        for _ in range(self.moves):
            state, info = sampler.step(target, state, generator=generator)
            tokens.append(state.x.tokens[:, :L])
            lengths.append(state.x.lengths)
            accept.append(info.accept_prob.mean())
            jump.append(info.jump_accept_prob.mean())
        self.chain_tokens, self.chain_lengths = state.x.tokens[:, :L].clone(), state.x.lengths.clone()
        samples = Sequences(torch.cat(tokens), torch.cat(lengths), validate=False)
        gain, delta = self._zeta_step(model, samples.lengths)

        n = samples.batch_size
        if self.data_mean is None:
            e = model.energy(Sequences.cat([x, samples]))
            e_pos, e_samp = e[: x.batch_size].mean(), e[x.batch_size:]
        else:  # the whole training set's mean energy, -lambda . p~[f]
            e_samp = model.energy(samples)
            e_pos = -(self._field_weight(model) * self.data_mean).sum().to(e_samp.dtype)
        weight = (model.log_pi - model.log_pi0).exp()[samples.lengths - 1].to(e_samp.dtype)
        e_neg = (weight * e_samp).sum() / n
        loss = e_pos - e_neg
        pi0 = model.log_pi0.exp().to(delta.dtype)
        metrics = scalar_metrics(loss=loss, e_pos=e_pos, e_neg=e_neg, gap=e_neg - e_pos,
                                 accept=torch.stack(accept).mean(), jump_accept=torch.stack(jump).mean(),
                                 zeta_gain=gain, zeta_step=self.pending.abs().max(),
                                 length_tv=0.5 * (delta - pi0).abs().sum())
        return LossOutput(loss=loss, metrics=metrics)

    def _field_weight(self, model: TransDimensionalField) -> Tensor:
        """``model.field.weight`` ``(F,)`` matched to ``data_mean`` (moved once to its device and dtype)."""
        w = getattr(getattr(model, "field", None), "weight", None)
        assert self.data_mean is not None
        if not isinstance(w, Tensor) or w.shape != self.data_mean.shape:
            got = tuple(w.shape) if isinstance(w, Tensor) else "none"
            raise ValueError(f"data_mean: expected a model whose energy is linear in model.field.weight of shape "
                             f"{tuple(self.data_mean.shape)} (DiscreteFeatures); got a weight of shape {got}")
        if self.data_mean.device != w.device or self.data_mean.dtype != torch.float64:
            self.data_mean = self.data_mean.to(device=w.device, dtype=torch.float64)
        return w.double()

    @torch.no_grad()
    def _zeta_step(self, model: TransDimensionalField, lengths: Tensor) -> tuple[float, Tensor]:
        """Step 3 of the module docstring, kept in ``pending``; returns the rate and :math:`\\delta` ``(L,)``."""
        L = model.log_z.shape[0]
        counts = torch.bincount(lengths - 1, minlength=L).to(torch.float64)
        counts = distributed_sum(torch.cat([counts, counts.new_full((1,), float(lengths.numel()))]))
        delta = counts[:L] / counts[L]
        pi0 = model.log_pi0.exp().to(torch.float64)
        gain = float(self.zeta_gain(int(self.step)))
        rate = pi0.mul(L).clamp(max=gain) if self.cap else torch.full_like(pi0, gain)
        self.pending = (rate * (delta / pi0 - 1.0)).to(model.log_z.dtype)
        self.step.add_(1)
        return gain, delta

    @torch.no_grad()
    def finish(self, model: TransDimensionalField) -> None:
        """Apply the pending :math:`\\zeta` step of the last call to ``model.log_z``, then the anchor.

        Each call does this first, so call it once more after the last training step (with the
        final parameters, the anchor is then exact). Calling it twice changes nothing.
        """
        model = check_trf(model)
        zeta = model.log_z
        if self.pending.numel():
            if self.pending.shape != zeta.shape:
                raise ValueError(f"model: log_z has shape {tuple(zeta.shape)}, but this objective's pending step has "
                                 f"{tuple(self.pending.shape)} (another model?)")
            zeta.add_(self.pending.to(zeta.device, zeta.dtype))
            self.pending.zero_()
        if self.anchor:
            if model.anchor_first:
                zeta.sub_(zeta[0].clone())
            else:
                zeta.add_(single_token_log_z(model).to(zeta.dtype) - zeta[0])

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        """Chains of any size load (they are created on first use, so a fresh objective has none)."""
        for name in ("chain_tokens", "chain_lengths", "pending"):
            stored = state_dict.get(prefix + name)
            if isinstance(stored, Tensor) and stored.shape != getattr(self, name).shape:
                have = getattr(self, name)
                setattr(self, name, torch.empty(stored.shape, dtype=have.dtype, device=have.device))
        super()._load_from_state_dict(state_dict, prefix, *args)

    def extra_repr(self) -> str:
        return (f"chains={self.chains}, moves={self.moves}, zeta_gain={self.zeta_gain!r}, cap={self.cap}, "
                f"anchor={self.anchor}")

r"""Noise-contrastive estimation of TRF language models: fixed noise (NCE) and dynamic noise (DNCE).

The TRF's log-probability with its learned per-length normalisers :math:`\zeta_l` (the model's
``log_z`` parameter, or anchored, ``TRF.log_normalisers()``),

.. math::  \log p_{\theta,\zeta}(l, x) = \log\pi_l - E_\theta(x) - \zeta_l ,

is classified against a normalised noise LM :math:`q` (an n-gram, an LSTM: anything with
``sample(n, generator=)`` and ``log_prob(Sequences)`` over sentences ending in ``</s>``) with the
logit :math:`G = \log p_{\theta,\zeta} - \log\nu - \log q`, written once in
:func:`~ebms.objectives.nce_logits` (per-length table) and :func:`~ebms.objectives.nce_loss`
(Wang & Ou 2017/2018; monograph Eq. 2.45–2.48 and §5's TRF part).

**TRFNCE** (fixed noise, :math:`\nu` noise draws per data sentence, drawn afresh at every call):

.. math::  \mathcal L = \frac1B\sum_{x \in D}\operatorname{softplus}(-G(x))
           + \nu\,\frac1N\sum_{y \sim q}\operatorname{softplus}(G(y)),

whose population optimum is :math:`p_{\theta,\zeta} =` the data law, so :math:`\zeta_l = \log Z_l`
(Gutmann & Hyvärinen's Theorem, monograph Thm 2.4). **Noise outside the TRF's lengths.** A draw of
length 0 or longer than ``L`` has model probability 0: :math:`G = -\infty`, so it adds exactly 0
to the loss and its gradient while still counting in :math:`N` — the objective above with the
unrestricted :math:`q`, whose optimum is unchanged (metric ``noise_outside``: the wasted fraction).

**DynamicNCE** (DNCE, Wang & Ou 2018): the noise :math:`q_\phi` is an ``nn.Module`` LM trained
jointly by maximum likelihood on the data, and the positive class is the interpolation
:math:`p_{int} = \alpha\,p_{data} + (1 - \alpha)\,q_\phi` (noise drawn as fake data makes the task
harder as :math:`q_\phi` improves and regularises sparse data):

.. math::  \mathcal L = \underbrace{\frac{1}{B + N_1}\sum_{x \in D \cup B_1}\operatorname{softplus}(-G(x))
           + \nu\,\frac1{N_2}\sum_{y \in B_2}\operatorname{softplus}(G(y))}_{\text{trains } \theta,\,\zeta}
           \;+\; w\,\underbrace{\Big(-\frac1B\sum_{x \in D}\log q_\phi(x)\Big)}_{\text{trains } \phi},

with :math:`B_1` (:math:`N_1 = \mathrm{round}(\frac{1-\alpha}{\alpha}B)` draws) and :math:`B_2`
(:math:`N_2 = \mathrm{round}(\frac{\nu}{\alpha}B)` draws) from :math:`q_\phi`, so the positives'
mean is :math:`\alpha\,E_D + (1-\alpha)\,E_{B_1}` (exactly when :math:`N_1` needs no rounding;
metric ``alpha``) and there are :math:`\nu` noise draws per positive. :math:`B_1` is drawn from
:math:`q_\phi` restricted to lengths ``1..L`` (rejection) so that :math:`p_{int}` lives where the
TRF does; :math:`B_2` is unrestricted, as in TRFNCE. The noise log-probabilities and draws in the
first term are detached, so the NCE term trains only the TRF (:math:`\theta` and :math:`\zeta`)
and the likelihood term only the noise (:math:`\phi`); one ``backward`` of ``LossOutput.loss``
fills both. The optimum is :math:`p_{\theta} = p_{int}` for the current noise; as :math:`q_\phi`
reaches the data law both equal it (monograph Thm 2.5) — when the noise family cannot represent
the data law, :math:`p_\theta` keeps the share :math:`(1-\alpha)(q_\phi - p_{data})` of its error.
**What DNCE's ζ estimate.** The TRF keeps its own length law :math:`\pi`, so at that optimum
:math:`\zeta_l = \log Z_l + \log\pi_l - \log\pi^{int}_l` with :math:`\pi^{int}` the length law of
:math:`p_{int}` (tested at the exact optimum to 1e-8): :math:`\log Z_l` itself only once the
noise's length law is the data's. Re-estimate :math:`\zeta` (or finish with NCE / AugSA) before
reporting a perplexity.

**Trainer.** :math:`\zeta` is a model parameter: the optimizer trains it with :math:`\theta`.
The noise is a submodule of the objective, so the trainer's default factory puts its parameters
in the second group (give that group its own learning rate through a factory); TRFNCE's noise
gets no gradient, and optimizers leave parameters without one unchanged. Noise draws come from
the trainer's ``generator``. Noise with dropout scores and draws with its current mode (a random
law in training mode): give DNCE a noise without dropout for exact NCE.

Metrics (one host sync): ``loss``, ``accuracy`` (data with :math:`G > 0`, noise with
:math:`G \le 0`), ``e_pos`` / ``e_neg`` (mean energy of the data / of the noise draws inside the
lengths, ``e_neg = e_pos`` when none is), ``gap``, ``noise_outside``; DNCE adds ``nce`` (the first
term), ``noise_nll`` (per sentence), ``noise_ppl`` (per token, ``</s>`` counted) and ``alpha``.
With ``trace=W`` the last ``W`` values of :math:`\log Z_l` the model used are kept for
:meth:`TRFNCE.zeta_estimate`. Cost per call: the noise draws, one energy pass over the data and the
noise draws inside the lengths, ``log_prob`` of the same under the noise.

References:
    Gutmann, M. & Hyvärinen, A. (2012). "Noise-contrastive estimation of unnormalized statistical
    models, with applications to natural image statistics." JMLR 13.
    Wang, B. & Ou, Z. (2018). "Learning neural trans-dimensional random field language models with
    noise-contrastive estimation." ICASSP.
    Wang, B. & Ou, Z. (2018). "Improved training of neural trans-dimensional random field language
    models with dynamic noise-contrastive estimation." IEEE SLT.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from ebms._checks import check_energy_output, check_int, check_positive, check_probability
from ebms.capabilities import NormalisedModel, TransDimensionalField
from ebms.objectives._base import LossOutput, scalar_metrics
from ebms.objectives._nce_core import nce_logits, nce_loss
from ebms.objectives._trf_common import check_in_space, check_trf, padded_log_z
from ebms.objectives._trf_trace import ZetaTrace, ZetaTraced
from ebms.sequences import Sequences

__all__ = ["DynamicNCE", "TRFNCE"]

_MAX_ROUNDS = 20


class TRFNCE(ZetaTraced, nn.Module):
    r"""NCE of a TRF against a fixed noise LM (module docstring).

    Args:
        noise: normalised sentence LM (``sample(n, generator=) -> Sequences``, ``log_prob(Sequences)
            -> (B,)`` with ``</s>``), e.g. :class:`~ebms.distributions.NGram`,
            :class:`~ebms.distributions.BackoffNGram`, :class:`~ebms.models.lm.LSTMLM` (in ``eval()``).
        nu: noise draws per data sentence :math:`\nu > 0` (``round(nu B)`` per call).
        trace: keep the last ``trace`` values of :math:`\log Z_l` (0: none).
        sample_options: extra keywords for ``noise.sample``. An LM that may run long should stop at
            ``L + 1`` tokens — for :class:`~ebms.models.lm.LSTMLM`, ``{"max_length": L + 1,
            "truncate": True}``: a draw cut there lies outside the TRF's lengths either way, and
            only its count matters, so the cut changes nothing but the time.

    Example:
        >>> import torch
        >>> from ebms.distributions import NGram
        >>> from ebms.models.trf import TRF, DiscreteFeatures, feature_templates
        >>> corpus = Sequences.from_lists([[1, 2], [2, 1, 1], [1], [2, 2]])
        >>> feats = DiscreteFeatures.fit(corpus, 3, feature_templates(("w",), order=2))
        >>> trf = TRF.from_corpus(feats, corpus, vocab_size=3)
        >>> objective = TRFNCE(NGram.fit(corpus, 3, order=1), nu=2)
        >>> out = objective(trf, corpus, generator=torch.Generator().manual_seed(0))
        >>> out.loss.requires_grad
        True
    """

    def __init__(self, noise: NormalisedModel, *, nu: float = 1.0, trace: int = 0,
                 sample_options: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        if not isinstance(noise, NormalisedModel):
            raise TypeError("noise: expected a normalised sentence LM with sample(n, generator=) and "
                            f"log_prob(Sequences) (ebms.distributions.NormalisedModel); got {type(noise).__name__}")
        self.noise = noise
        self.nu = check_positive(nu, "nu")
        self.trace = ZetaTrace(trace) if check_int(trace, "trace", minimum=0) else None
        if sample_options is not None and not isinstance(sample_options, Mapping):
            raise TypeError(f"sample_options: expected a mapping of keywords for noise.sample or None; "
                            f"got {type(sample_options).__name__}")
        self.sample_options = dict(sample_options or {})

    # -- pieces shared with DynamicNCE ----------------------------------------------------------
    def _sample(self, n: int, generator: torch.Generator | None) -> Sequences:
        with torch.no_grad():
            y = self.noise.sample(n, generator=generator, **self.sample_options)
        if not isinstance(y, Sequences) or y.batch_size != n:
            raise TypeError(f"noise.sample(n): expected Sequences of n={n} sentences; got {y!r}")
        return y

    def _log_q(self, x: Sequences, *, grad: bool = False) -> Tensor:
        with torch.set_grad_enabled(grad):
            lq = self.noise.log_prob(x)
        return check_energy_output(lq, x.batch_size, "noise.log_prob(x)")

    def _inside(self, model: TransDimensionalField, y: Sequences) -> tuple[Sequences, int]:
        """The draws with lengths in ``[1, L]`` (checked, cut to width ``L``) and how many fell outside."""
        ok = (y.lengths >= 1) & (y.lengths <= model.space.max_length)
        kept = y[ok.nonzero().squeeze(1)]
        if kept.batch_size:
            kept = check_in_space(kept, model.space, "noise.sample(n)")
        return kept, y.batch_size - kept.batch_size

    def _sample_inside(self, model: TransDimensionalField, n: int, generator: torch.Generator | None) -> Sequences:
        """``n`` draws of the noise restricted to lengths ``1..L``, by rejection (each round draws the
        missing number divided by the acceptance rate so far, with 20 % to spare)."""
        parts, kept, drawn = [], 0, 0
        for _ in range(_MAX_ROUNDS):
            need = n - kept
            m = need if kept == 0 else min(math.ceil(need * drawn / kept * 1.2), 16 * n)
            y, _ = self._inside(model, self._sample(m, generator))
            parts.append(y)
            kept, drawn = kept + y.batch_size, drawn + m
            if kept >= n:
                out = Sequences.cat(parts)
                return out[torch.arange(n, device=out.device)]
        raise ValueError(f"noise: {kept} of {drawn} draws had lengths in [1, {model.space.max_length}] after "
                         f"{_MAX_ROUNDS} rounds; the noise puts too little mass on the TRF's lengths (pre-train it "
                         "by maximum likelihood, e.g. with AutoregressiveNLL)")

    def _logits(self, model: TransDimensionalField, x: Sequences, log_q: Tensor, table: Tensor) -> tuple[Tensor, Tensor]:
        """``G`` and ``E`` of sentences inside the TRF's lengths ``(B,)``."""
        e = model.energy(x)
        lp = model.log_pi[x.lengths - 1].to(e.dtype) - e
        return nce_logits(lp, log_q.to(e.dtype), nu=self.nu, log_z=table.to(e.dtype), lengths=x.lengths), e

    def _table(self, model: TransDimensionalField) -> Tensor:
        table = padded_log_z(model)
        if self.trace is not None:
            self.trace.record(table[1:])
        return table

    def _metrics(self, g_pos: Tensor, g_neg: Tensor, e_pos: Tensor, e_neg: Tensor, outside: int,
                 **extra: Tensor | float) -> dict[str, float]:
        n = g_neg.numel()
        correct = (g_pos > 0).sum() + (g_neg <= 0).sum()
        mean_pos = e_pos.mean()
        mean_neg = e_neg.mean() if e_neg.numel() else mean_pos
        return scalar_metrics(**extra, accuracy=correct.to(e_pos.dtype) / (g_pos.numel() + n), e_pos=mean_pos,
                              e_neg=mean_neg, gap=mean_neg - mean_pos, noise_outside=outside / n)

    # -- the objective --------------------------------------------------------------------------
    def forward(self, model: TransDimensionalField, batch: Sequences | tuple[Tensor, Tensor], *,
                generator: torch.Generator | None = None) -> LossOutput:
        """NCE loss on the data ``batch`` (``B`` sentences) with ``round(nu B)`` fresh noise draws."""
        model = check_trf(model)
        x = check_in_space(Sequences.coerce(batch, empty=False), model.space, "batch")
        B = x.batch_size
        y, outside = self._inside(model, self._sample(max(1, round(self.nu * B)), generator))
        both = Sequences.cat([x, y])
        table = self._table(model)
        g, e = self._logits(model, both, self._log_q(both), table)
        g_neg = torch.cat([g[B:], g.new_full((outside,), -math.inf)])
        loss = nce_loss(g[:B], g_neg, nu=self.nu)
        return LossOutput(loss=loss, metrics=self._metrics(g[:B], g_neg, e[:B], e[B:], outside, loss=loss))

    def extra_repr(self) -> str:
        return f"nu={self.nu}"


class DynamicNCE(TRFNCE):
    r"""Dynamic NCE (DNCE): NCE against a noise LM trained jointly on the data (module docstring).

    Args:
        noise: a trainable sentence LM (an ``nn.Module`` with parameters, ``sample`` and a
            differentiable ``log_prob``), e.g. :class:`~ebms.models.lm.LSTMLM` without dropout,
            pre-trained by maximum likelihood: the fake data :math:`B_1` are drawn by rejection
            from its sentences of lengths ``1..L``, which an untrained LM over a large vocabulary
            almost never ends in time (after 20 rounds of draws the call raises).
        nu: noise draws per positive sentence (data or fake data) :math:`\nu > 0`.
        alpha: the data's share :math:`\alpha \in (0, 1]` of the positive law :math:`p_{int}`
            (1: no fake data, plain NCE against the moving noise).
        noise_weight: weight :math:`w > 0` of the noise's likelihood term.
        trace: keep the last ``trace`` values of :math:`\log Z_l` (0: none).
        sample_options: extra keywords for ``noise.sample`` (see :class:`TRFNCE`).
    """

    def __init__(self, noise: nn.Module, *, nu: float = 1.0, alpha: float = 0.5, noise_weight: float = 1.0,
                 trace: int = 0, sample_options: Mapping[str, Any] | None = None) -> None:
        if not isinstance(noise, nn.Module) or not any(p.requires_grad for p in noise.parameters()):
            raise TypeError("noise: expected a trainable LM (an nn.Module with parameters requiring grad, e.g. "
                            f"ebms.models.lm.LSTMLM); got {type(noise).__name__}")
        super().__init__(noise, nu=nu, trace=trace, sample_options=sample_options)  # type: ignore[arg-type]
        self.alpha = check_probability(alpha, "alpha", open_low=True)
        self.noise_weight = check_positive(noise_weight, "noise_weight")

    def forward(self, model: TransDimensionalField, batch: Sequences | tuple[Tensor, Tensor], *,
                generator: torch.Generator | None = None) -> LossOutput:
        """DNCE loss on the data ``batch``: NCE term for the TRF plus the noise's likelihood term."""
        model = check_trf(model)
        x = check_in_space(Sequences.coerce(batch, empty=False), model.space, "batch")
        B = x.batch_size
        n1 = round((1.0 - self.alpha) / self.alpha * B)
        fake = self._sample_inside(model, n1, generator) if n1 else None
        y, outside = self._inside(model, self._sample(max(1, round(self.nu / self.alpha * B)), generator))
        pos = x if fake is None else Sequences.cat([x, fake])
        both = Sequences.cat([pos, y])
        lq_data = self._log_q(x, grad=True)
        lq_rest = self._log_q(Sequences.cat([fake, y]) if fake is not None else y)
        table = self._table(model)
        g, e = self._logits(model, both, torch.cat([lq_data.detach().to(lq_rest.dtype), lq_rest]), table)
        P = pos.batch_size
        g_neg = torch.cat([g[P:], g.new_full((outside,), -math.inf)])
        nce = nce_loss(g[:P], g_neg, nu=self.nu)
        nll = -lq_data.mean()
        loss = nce + self.noise_weight * nll.to(nce.dtype)
        tokens = x.lengths.sum() + B
        return LossOutput(loss=loss, metrics=self._metrics(
            g[:P], g_neg, e[:B], e[P:], outside, loss=loss, nce=nce, noise_nll=nll,
            noise_ppl=(-lq_data.sum() / tokens).exp(), alpha=B / P))

    def extra_repr(self) -> str:
        return f"nu={self.nu}, alpha={self.alpha}, noise_weight={self.noise_weight}"

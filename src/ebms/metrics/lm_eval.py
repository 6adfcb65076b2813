r"""Honest perplexity of energy-based LMs: with the normalisers of training *and* re-estimated ones.

A TRF scores a sentence :math:`x` of length :math:`l` as :math:`\log p(x) = \log\pi_l - E(x) - \log Z_l`,
and its perplexity over a corpus of :math:`S` sentences and :math:`N = \sum_i (l_i + 1)` tokens
(``</s>`` counted, the convention of :func:`ebms.models.lm.perplexity`) is

.. math::  \mathrm{PPL} = \exp\Big(-\frac1N \sum_i \log p(x_i)\Big)
           = \exp\Big(-\frac1N \Big[\sum_i (\log\pi_{l_i} - E(x_i)) - \sum_l n_l \log Z_l\Big]\Big),

with :math:`n_l` the number of sentences of length :math:`l`. The :math:`\zeta_l` fitted during
training (AugSA, NCE) stand in for :math:`\log Z_l` and are noisy estimates themselves; an error
:math:`\delta` in them moves :math:`\log\mathrm{PPL}` by :math:`\sum_l n_l\delta_l / N`, and an
underestimated :math:`\zeta` flatters the model. (The public TRF code's own log shows the same
model at about 137 with its training :math:`\zeta` and 187.6 ± 11.9 with AIS-estimated ones.)
:func:`trf_perplexity` therefore prints both: with the training :math:`\zeta`, and with
re-estimated :math:`\log\hat Z_l` (:func:`~ebms.estimators.ais_log_z_per_length`,
:func:`~ebms.estimators.importance_log_z_per_length`) and its uncertainty.

**Uncertainty (delta method).** With independent per-length estimates of standard errors
:math:`\mathrm{se}_l`, :math:`\mathrm{se}(\log\mathrm{PPL}) = \sqrt{\sum_l n_l^2\,\mathrm{se}_l^2}\,/\,N`,
:math:`\mathrm{se}(\mathrm{PPL}) = \mathrm{PPL}\cdot\mathrm{se}(\log\mathrm{PPL})`, and the interval is
:math:`\exp(\log\mathrm{PPL} \pm z\,\mathrm{se})`. The report also gives the bound
:math:`\sum_l n_l\,\mathrm{se}_l / N`, valid whatever the correlation between lengths. Both
inherit the estimators' blind spot: with heavy-tailed weights (small ESS) the stderr is too
small, and every :math:`\log\hat Z_l` is biased low, which biases the perplexity low.

A GN-ELM has one :math:`\log Z = \log\sum_l Z_l` (:meth:`~ebms.estimators.LengthLogZ.total`), so
:math:`\mathrm{se}(\log\mathrm{PPL}) = S\,\mathrm{se}(\log\hat Z)/N`.

Reference: Wang, Ou & Tan (2018), "Learning trans-dimensional random fields with applications to
language modeling", IEEE TPAMI 40(4).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ebms._checks import check_positive
from ebms.estimators import Estimate, LengthLogZ
from ebms.models.trf import GNELM, TRF
from ebms.sequences import Sequences

__all__ = ["PerplexityRow", "TRFPerplexity", "trf_perplexity"]


@dataclass(frozen=True)
class PerplexityRow:
    """One perplexity figure and its uncertainty.

    Attributes:
        label: which normalisers (``"training zeta"``, ``"ais"``, ``"importance"``, ``"exact"``, ...).
        perplexity: ``exp(nll)``.
        nll: mean negative log-probability per token (nats, ``</s>`` counted).
        log_prob: the corpus total (nats).
        log_stderr: delta-method standard error of ``log perplexity`` (independent lengths);
            ``None`` when the normalisers carry no uncertainty estimate (training :math:`\\zeta`).
        log_stderr_bound: :math:`\\sum_l n_l \\mathrm{se}_l / N`, any correlation (``None`` likewise).
        exact: the normalisers were exact.
    """

    label: str
    perplexity: float
    nll: float
    log_prob: float
    log_stderr: float | None = None
    log_stderr_bound: float | None = None
    exact: bool = False

    @property
    def stderr(self) -> float | None:
        """Delta-method standard error of the perplexity, ``perplexity * log_stderr``."""
        return None if self.log_stderr is None else self.perplexity * self.log_stderr

    def interval(self, z: float = 1.96) -> tuple[float, float] | None:
        """``exp(log PPL ± z log_stderr)`` (``None`` without a stderr)."""
        if self.log_stderr is None:
            return None
        zz = check_positive(z, "z", allow_zero=True)
        return (self.perplexity * math.exp(-zz * self.log_stderr), self.perplexity * math.exp(zz * self.log_stderr))


@dataclass(frozen=True)
class TRFPerplexity:
    """Perplexity of a TRF / GN-ELM with training and re-estimated normalisers, side by side.

    Attributes:
        model: ``"TRF"`` or ``"GNELM"``.
        sentences, tokens: corpus size (tokens include one ``</s>`` per sentence).
        length_counts: :math:`n_l`, sentences per length.
        training: the figure with the model's own normalisers (``log_normalisers()`` / ``log_z``).
        reestimated: the figure with the supplied ones (``None`` when none were given).
        z: the normal quantile of the printed intervals.
        low_ess_lengths: lengths whose re-estimate rests on fewer than ``min_ess`` effective draws
            (heavy-tailed weights: the estimate is likely too low and its stderr too small).
    """

    model: str
    sentences: int
    tokens: int
    length_counts: dict[int, int]
    training: PerplexityRow
    reestimated: PerplexityRow | None
    z: float = 1.96
    low_ess_lengths: tuple[int, ...] = ()

    def __str__(self) -> str:
        shown = [r for r in (self.training, self.reestimated) if r is not None]
        w = max(len(r.label) for r in shown) + 2
        rows = [f"{self.model} perplexity: {self.sentences} sentences, {self.tokens} tokens (</s> counted)",
                f"{'normalisers':<{w}}{'PPL':>10}{'± stderr':>11}   {100 * _coverage(self.z):.0f}% interval"]
        for r in shown:
            iv = r.interval(self.z)
            se = "exact" if r.exact else "n/a" if r.stderr is None else f"{r.stderr:.2f}"
            rng = "" if iv is None or r.exact else f"   [{iv[0]:.2f}, {iv[1]:.2f}]"
            rows.append(f"{r.label:<{w}}{r.perplexity:>10.2f}{se:>11}{rng}")
        re = self.reestimated
        if re is not None and not re.exact and re.log_stderr is not None:
            what = ("the per-length log Z_l (independent lengths); any-correlation bound on se(log PPL) "
                    f"{re.log_stderr_bound:.4f}" if self.model == "TRF" else "the single log Z")
            rows.append(f"stderr and interval: delta method on log PPL, from the stderr of {what}")
        if self.low_ess_lengths:
            rows.append(f"warning: small ESS at lengths {list(self.low_ess_lengths)[:10]}: heavy-tailed weights, so "
                        "log Z_l is likely too low and its stderr too small (use a better proposal or more steps)")
        return "\n".join(rows)


def _coverage(z: float) -> float:
    return math.erf(z / math.sqrt(2.0))


def _batches(corpus: Sequences | Iterable[Sequences]) -> list[Sequences]:
    batches = [corpus] if isinstance(corpus, Sequences) else list(corpus)
    for i, b in enumerate(batches):
        if not isinstance(b, Sequences):
            raise TypeError(f"corpus: expected Sequences or an iterable of Sequences; item {i} is {type(b).__name__}")
    if not batches or sum(b.batch_size for b in batches) == 0:
        raise ValueError("corpus: expected at least one sentence; got none")
    return batches


def _check_sentences(x: Sequences, model: TRF | GNELM) -> None:
    """Lengths in ``[1, L]``, token ids in ``[1, V)`` (one host sync)."""
    model.space.validate(x, "corpus")
    zero = x.mask() & (x.tokens == 0)
    if bool(zero.any()):
        i, t = (int(v) for v in zero.nonzero()[0])
        raise ValueError(f"corpus: id 0 is the sentence boundary and cannot occur inside a sentence; got it at "
                         f"sentence {i}, position {t}")


def _row(label: str, base: float, norm: float, tokens: int, var: float | None, bound: float | None,
         exact: bool) -> PerplexityRow:
    total = base - norm
    if math.isnan(total):
        raise ValueError(f"model: the corpus log-probability with the {label} normalisers is NaN (a NaN energy, "
                         "log pi or log Z); no perplexity")
    nll = -total / tokens
    return PerplexityRow(label, math.exp(nll) if nll < 709.0 else math.inf, nll, total,
                         None if var is None else math.sqrt(var) / tokens,
                         None if bound is None else bound / tokens, exact)


def _trf_normalisers(log_z: Any, counts: dict[int, int]) -> tuple[str, float, float, float, bool]:
    """``(label, sum_l n_l log Z_l, sum n_l^2 se_l^2, sum n_l se_l, exact)`` for a TRF."""
    if isinstance(log_z, Tensor):
        log_z = LengthLogZ.exact(log_z.detach().double().cpu())
    if not isinstance(log_z, LengthLogZ):
        raise TypeError(f"log_z: expected a LengthLogZ (per-length estimates) or a tensor (L,) of log Z_l; "
                        f"got {type(log_z).__name__}")
    missing = sorted(n for n in counts if n not in log_z.lengths)
    if missing:
        raise ValueError(f"log_z: the corpus has sentences of lengths {missing[:8]} that log_z does not cover "
                         f"(it has {log_z.lengths[0]}..{log_z.lengths[-1]})")
    ests = {n: log_z[n] for n in counts}
    norm = sum(counts[n] * ests[n].estimate for n in counts)
    var = sum((counts[n] * ests[n].stderr) ** 2 for n in counts)
    bound = sum(counts[n] * ests[n].stderr for n in counts)
    return log_z.method, norm, var, bound, all(e.exact for e in ests.values())


def _gnelm_normaliser(log_z: Any, max_length: int) -> tuple[str, Estimate]:
    if isinstance(log_z, Tensor):
        log_z = LengthLogZ.exact(log_z.detach().double().cpu())
    if isinstance(log_z, LengthLogZ):
        missing = [n for n in range(1, max_length + 1) if n not in log_z.lengths]
        if missing:
            raise ValueError(f"log_z: a GN-ELM's log Z sums over every length 1..{max_length}; lengths "
                             f"{missing[:8]} are missing")
        return log_z.method, log_z.total()
    if isinstance(log_z, Estimate):
        return str(log_z.settings.get("method", "estimate")), log_z
    if isinstance(log_z, (int, float)) and not isinstance(log_z, bool):
        return "given", Estimate(float(log_z), exact=True)
    raise TypeError(f"log_z: expected a LengthLogZ, a tensor (L,) of log Z_l, an Estimate or a number; "
                    f"got {type(log_z).__name__}")


@torch.no_grad()
def trf_perplexity(model: TRF | GNELM, corpus: Sequences | Iterable[Sequences], *, log_z: Any = None,
                   z: float = 1.96, min_ess: float = 10.0) -> TRFPerplexity:
    r"""Perplexity of a TRF or GN-ELM with its training normalisers and, given ``log_z``, re-estimated ones.

    Args:
        model: a :class:`~ebms.models.trf.TRF` (training normalisers: ``log_normalisers()``, i.e.
            :math:`\zeta`, anchored when the model is) or a :class:`~ebms.models.trf.GNELM`
            (``log_z``).
        corpus: sentences, one :class:`~ebms.sequences.Sequences` or an iterable of them.
        log_z: re-estimated normalisers: a :class:`~ebms.estimators.LengthLogZ` (per length,
            covering the corpus's lengths for a TRF and every length for a GN-ELM), a tensor of
            :math:`\log Z_l` for lengths ``1..L`` (taken as exact, e.g.
            :func:`~ebms.models.trf.exact_log_z`); for a GN-ELM also one
            :class:`~ebms.estimators.Estimate` or number of :math:`\log Z`.
        z: normal quantile of the printed interval (1.96: 95 %).
        min_ess: per-length estimates with a smaller ``ess`` are listed in ``low_ess_lengths`` and
            printed as a warning.

    Returns:
        :class:`TRFPerplexity`; ``print`` it for the side-by-side table.

    Cost: one energy call per batch (no gradients; modules scored in eval mode).
    """
    if not isinstance(model, (TRF, GNELM)):
        raise TypeError(f"model: expected an ebms.models.trf.TRF or GNELM; got {type(model).__name__}")
    zz = check_positive(z, "z", allow_zero=True)
    floor = check_positive(min_ess, "min_ess", allow_zero=True)
    batches = _batches(corpus)
    was_training = model.training
    model.eval()
    try:
        base, counts = 0.0, dict[int, int]()
        for b in batches:
            _check_sentences(b, model)
            lp = -model.energy(b).double()
            if isinstance(model, TRF):
                lp = lp + model.log_pi[b.lengths - 1].double()
            base += float(lp.sum())  # sum of log pi_l - E(x) (TRF) or -E(x) (GN-ELM)
            for n, c in zip(*torch.unique(b.lengths.cpu(), return_counts=True)):
                counts[int(n)] = counts.get(int(n), 0) + int(c)
        counts = dict(sorted(counts.items()))
        S = sum(counts.values())
        N = S + sum(n * c for n, c in counts.items())
        if isinstance(model, TRF):
            zeta = model.log_normalisers().detach().double().cpu()
            training = _row("training zeta", base, sum(c * float(zeta[n - 1]) for n, c in counts.items()), N,
                            None, None, False)
            re = None
            if log_z is not None:
                label, norm, var, bound, exact = _trf_normalisers(log_z, counts)
                re = _row(f"re-estimated log Z_l ({label})", base, norm, N, var, bound, exact)
        else:
            training = _row("training log Z", base, S * float(model.log_z), N, None, None, False)
            re = None
            if log_z is not None:
                label, est = _gnelm_normaliser(log_z, model.max_length)
                se = S * est.stderr
                re = _row(f"re-estimated log Z ({label})", base, S * est.estimate, N, se * se, se, est.exact)
    finally:
        model.train(was_training)
    low: tuple[int, ...] = ()
    if isinstance(log_z, LengthLogZ):
        wanted = counts if isinstance(model, TRF) else log_z.lengths
        low = tuple(n for n in log_z.lengths if n in wanted and (log_z[n].ess or math.inf) < floor)
    return TRFPerplexity(type(model).__name__, S, N, counts, training, re, zz, low)

r"""Objectives of aligned transducer taggers: teacher-forced ML and beam search with early updates.

Both follow the objective contract, ``out = objective(model, batch, generator=None)`` returning a
:class:`~ebms.objectives.LossOutput`, with the tagging batches of the conditional objectives:
``(words, tags, lengths)`` or ``(words, chars, tags, lengths)`` (``tags, lengths`` may come as one
:class:`~ebms.sequences.Sequences`), cut to the longest sentence first. Neither keeps state or
draws randomness. ``compute(model, words, lengths, tags, chars=)`` is the same loss on unpacked,
uncut arguments. The models do not build their losses: the objective takes the model.

**Teacher-forced ML** (:class:`TransducerML`) for a *locally normalised* transducer such as
:class:`ebms.models.rnnt_aligned.AlignedRNNT` (monograph eqs. 4.28-4.29): the model offers
``log_prob(words, lengths, tags, *, chars=None) -> (B,)``
(:class:`~ebms.capabilities.TeacherForcedLogProb`), exact in one pass, and the loss is :math:`-\frac1B\sum_i \log p(y_i \mid x_i)`.

**Beam search with early updates** (:class:`BeamEarlyUpdate`) for a *globally normalised*
transducer such as :class:`ebms.models.crf_transducer.CRFTransducer`, whose :math:`\log Z(x)` has
no dynamic program (Collins & Roark 2004, *Incremental parsing with the perceptron algorithm*;
Wiseman & Rush 2016, *Sequence-to-sequence learning as beam-search optimization*; monograph
section 4.4): run the beam search of width ``W`` with the gold prefix :math:`y^*_{1:i}` tracked;
at the first step :math:`j` where it is not among the top ``W`` prefixes :math:`\mathcal B_j`,

.. math::  L_j = -u(y^*_{1:j}) + \log \sum_{y' \in \mathcal B_j \cup \{y^*_{1:j}\}} \exp u(y'_{1:j}),

and if it survives to :math:`j = T` the same loss with the final beam (the oracle counted once,
with its teacher-forced score, so that :math:`L_j \ge 0` holds in floating point too). This is the
conditional negative log-likelihood with :math:`Z` restricted to the beam, so with ``W >= K^T`` it
equals :math:`-\log p(y^*|x)` exactly. Sentences run in parallel, positions in sequence, ``G`` on
all ``B W`` hypotheses per step; the search stops once every sentence has lost its oracle or
ended. The model is any :class:`~ebms.nets.transducer.AlignedTransducer` (its ``local`` score
defines :math:`u`). Cost per batch: one teacher-forced pass plus ``<= T`` beam steps.

**Monte Carlo training** (:class:`MonteCarloNLL`), the alternative that beam search with early
updates replaces in the monograph (section 4.4: early updates "marginally outperform" it): the
gradient of the globally normalised NLL :math:`L = -u(y^*) + \log Z(x)` is
:math:`-\nabla u(y^*) + E_{p(y|x)}[\nabla u(y)]`, and the model expectation is estimated by
self-normalised importance sampling from a tractable proposal :math:`q(y|x) = \prod_i q(y_i|y_{<i}, x)`:
draw :math:`y^{(1..S)} \sim q` (explicit ``torch.Generator``), weight
:math:`w_s = \exp(u(y^{(s)}) - \log q(y^{(s)}))`, and use
:math:`\sum_s \bar w_s \nabla u(y^{(s)})` with :math:`\bar w_s = w_s / \sum_r w_r`. Proposals:
``"model"``, the model's own step-wise softmax over its local potentials,
:math:`q(y_i = k | y_{<i}) = \mathrm{softmax}_k\,\mathrm{local}(f_i, g_i, y_{i-1})` (so
:math:`\log w = \sum_i \mathrm{logsumexp}_k \mathrm{local}_i(k)`, and forbidden tags get no mass);
``"uniform"``, uniform over the tags the allowed-label mask permits. The proposal is detached:
samples and weights carry no gradient, and :math:`u(y^{(s)})` is re-scored teacher-forced with one.
The loss returned is :math:`-u(y^*) + \log\hat Z` in value, :math:`\log\hat Z = \log\frac1S\sum_s
w_s`, with the gradient of the SNIS estimate above.

Bias: :math:`\hat Z` is unbiased for :math:`Z`, so :math:`\log\hat Z` is biased low (Jensen), by
about :math:`\frac{1}{2S}\mathrm{Var}_q(w/Z)`; the SNIS gradient has bias
:math:`-\frac1S E_q[\tilde w^2 (h - E_p h)] + O(S^{-2})` and variance
:math:`\frac1S E_q[\tilde w^2 (h - E_p h)^2]` (:math:`h = \nabla u`, :math:`\tilde w = p/q`), both
vanishing as :math:`S \to \infty` when :math:`q > 0` wherever :math:`p > 0` (true for both
proposals). Metrics report ``log_z`` (mean :math:`\log\hat Z`) and ``ess`` (mean effective sample
size :math:`(\sum w)^2/\sum w^2`, in ``[1, S]``), the signal to watch: an ESS near 1 means one
sample carries the estimate. Cost per batch: ``T`` sampling steps of ``G`` on ``B S`` rows, a
teacher-forced pass of ``G`` on the ``B S`` samples and one on the gold.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from ebms._checks import check_int
from ebms.capabilities import TeacherForcedLogProb
from ebms.nets.transducer import AlignedTransducer, check_tagging_batch, transducer_beam_search
from ebms.objectives._base import LossOutput, scalar_metrics
from ebms.objectives._tagging_batch import split_batch

__all__ = ["PROPOSALS", "BeamEarlyUpdate", "MonteCarloNLL", "TransducerML", "proposal_log_prob",
           "proposal_sample"]

#: proposals :class:`MonteCarloNLL` accepts.
PROPOSALS = ("model", "uniform")


def _unpack(batch: Any) -> tuple[Tensor, Tensor | None, Tensor, Tensor]:
    inputs, tags, lengths = split_batch(batch)
    if len(inputs) not in (1, 2):
        raise ValueError(f"batch: expected (words, tags, lengths) or (words, chars, tags, lengths); "
                         f"got {len(inputs)} inputs before tags and lengths")
    return inputs[0], inputs[1] if len(inputs) == 2 else None, tags, lengths


class TransducerML(nn.Module):
    """Teacher-forced conditional maximum likelihood of a locally normalised transducer (module docstring).

    Metrics: ``loss`` (mean ``-log p`` per sentence) and ``nll_token`` (per tag).
    """

    def forward(self, model: nn.Module, batch: Any, *, generator: torch.Generator | None = None) -> LossOutput:
        words, chars, tags, lengths = _unpack(batch)
        return self.compute(model, words, lengths, tags, chars=chars)

    def compute(self, model: nn.Module, words: Tensor, lengths: Tensor, tags: Tensor, *,
                chars: Tensor | None = None) -> LossOutput:
        """The loss of one padded batch (no cutting); ``model`` a :class:`~ebms.capabilities.TeacherForcedLogProb`."""
        if not isinstance(model, TeacherForcedLogProb):
            raise TypeError(f"model: expected a locally normalised tagger with log_prob(words, lengths, tags, *, "
                            f"chars) (e.g. AlignedRNNT); got {type(model).__name__}")
        lp = model.log_prob(words, lengths, tags, chars=chars)
        loss = -lp.mean()
        per_token = -lp.sum() / lengths.sum().to(lp.dtype)
        return LossOutput(loss, scalar_metrics(loss=loss, nll_token=per_token))


class BeamEarlyUpdate(nn.Module):
    """Beam-search-with-early-update loss of an aligned transducer, averaged over the batch (module docstring).

    Args:
        beam: beam width ``W >= 1``.

    Metrics: ``loss``, ``early`` (fraction of sentences whose oracle fell out of the beam) and
    ``prefix`` (mean fraction of each sentence searched before its update).
    """

    def __init__(self, beam: int = 8) -> None:
        super().__init__()
        self.beam = check_int(beam, "beam", minimum=1)

    def forward(self, model: nn.Module, batch: Any, *, generator: torch.Generator | None = None) -> LossOutput:
        words, chars, tags, lengths = _unpack(batch)
        return self.compute(model, words, lengths, tags, chars=chars)

    def compute(self, model: nn.Module, words: Tensor, lengths: Tensor, tags: Tensor, *,
                chars: Tensor | None = None) -> LossOutput:
        """The loss of one padded batch (no cutting); ``model`` an :class:`~ebms.nets.transducer.AlignedTransducer`.

        Raises:
            TypeError: ``model`` is not an aligned transducer.
            ValueError: bad words, lengths or tags, or a gold sequence forbidden by the model's
                allowed-label mask.
        """
        if not isinstance(model, AlignedTransducer):
            raise TypeError(f"model: expected an aligned transducer (ebms.nets.transducer.AlignedTransducer, e.g. "
                            f"CRFTransducer); got {type(model).__name__}")
        y = check_tagging_batch(words, lengths, tags, model.n_tags)
        assert y is not None
        f = model.transcription(words, lengths, chars)
        lengths = lengths.to(f.device).long()
        valid = torch.arange(y.shape[1], device=f.device) < lengths[:, None]
        loc = model.local(f, model.prediction(y), model.prediction.previous(y)).gather(-1, y.unsqueeze(-1)).squeeze(-1)
        prefix = torch.where(valid, loc, loc.new_zeros(())).cumsum(1)  # u(y*_{1:i}), (B, T)
        if not bool(torch.isfinite(prefix[:, -1]).all()):
            bad = (~torch.isfinite(prefix[:, -1])).nonzero().flatten().tolist()
            raise ValueError(f"tags: sequences {bad} use a tag pair that allowed/allowed_start forbid")
        res = transducer_beam_search(f, lengths, model.prediction, model.local, beam=self.beam, oracle=y,
                                     stop_when_lost=True)
        assert res.in_beam is not None
        lost = ~res.in_beam
        early = lost.any(1)
        j = torch.where(early, lost.to(torch.uint8).argmax(1), lengths - 1)  # update step, 0-based
        beams = torch.stack(res.step_scores, dim=1)  # (B, steps, W)
        beam_j = beams.gather(1, j.view(-1, 1, 1).expand(-1, 1, beams.shape[2])).squeeze(1)
        # A sentence that kept its oracle to the end updates on its final beam, which holds the
        # oracle once, scored incrementally. Its teacher-forced score ``gold`` differs from that copy
        # by rounding (1e-4 at potentials of 1e3 in float32), enough to make the loss negative; so
        # the copy is dropped and ``gold`` itself enters the sum: the loss is then >= 0 exactly.
        kept = (res.beam_tags == y.unsqueeze(1)) | ~valid.unsqueeze(1)  # (B, W, T)
        oracle_slot = kept.all(-1) & torch.isfinite(res.beam_scores) & ~early.unsqueeze(1)
        beam_j = torch.where(early.unsqueeze(1), beam_j, res.beam_scores).masked_fill(oracle_slot, float("-inf"))
        gold = prefix.gather(1, j.unsqueeze(1)).squeeze(1)
        losses = torch.logsumexp(torch.cat([beam_j, gold.unsqueeze(1)], dim=1), dim=1) - gold
        loss = losses.mean()
        frac = ((j + 1).to(f.dtype) / lengths.to(f.dtype)).mean()
        return LossOutput(loss, scalar_metrics(loss=loss, early=early.to(f.dtype).mean(), prefix=frac))

    def extra_repr(self) -> str:
        return f"beam={self.beam}"


def _proposal_logits(model: AlignedTransducer, loc: Tensor, prev: Tensor, proposal: str) -> Tensor:
    """Unnormalised log-proposal ``(..., K)`` from local potentials ``loc`` and previous tags."""
    if proposal == "model":
        return loc
    return model.label_bias[prev].to(loc.dtype)


def proposal_log_prob(model: AlignedTransducer, words: Tensor, lengths: Tensor, tags: Tensor, *,
                      chars: Tensor | None = None, proposal: str = "model") -> Tensor:
    """``log q(tags | words)`` under the step-wise proposal of :class:`MonteCarloNLL`, ``(B,)``,
    teacher-forced (``-inf`` for a sequence the proposal cannot draw)."""
    if proposal not in PROPOSALS:
        raise ValueError(f"proposal: expected one of {', '.join(PROPOSALS)}; got {proposal!r}")
    y = check_tagging_batch(words, lengths, tags, model.n_tags)
    assert y is not None
    f = model.transcription(words, lengths, chars)
    prev = model.prediction.previous(y)
    lq = _proposal_logits(model, model.local(f, model.prediction(y), prev), prev, proposal).log_softmax(-1)
    lq = lq.gather(-1, y.unsqueeze(-1)).squeeze(-1)
    valid = torch.arange(y.shape[1], device=f.device) < lengths.to(f.device)[:, None]
    return torch.where(valid, lq, lq.new_zeros(())).sum(1)


@torch.no_grad()
def proposal_sample(model: AlignedTransducer, f: Tensor, lengths: Tensor, n_samples: int, *,
                    proposal: str = "model", generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """Draw ``n_samples`` tag sequences per sentence from the step-wise proposal of :class:`MonteCarloNLL`.

    Args:
        model: the aligned transducer (its ``prediction`` net and ``local`` score).
        f: ``(B, T, K)`` transcription outputs.
        lengths: ``(B,)`` long, values in ``[1, T]``.
        n_samples: ``S`` samples per sentence.
        proposal: ``"model"`` or ``"uniform"`` (module docstring).
        generator: source of randomness (``None``: the global one).

    Returns:
        ``tags (B, S, T)`` (``0`` beyond each length) and ``log q (B, S)`` of each sample (detached).
    """
    b, t, k = f.shape
    n = b * n_samples
    fr = f.detach().repeat_interleave(n_samples, dim=0)  # (B S, T, K)
    live_all = torch.arange(t, device=f.device) < lengths.repeat_interleave(n_samples)[:, None]
    prev = torch.full((n,), model.prediction.bos, dtype=torch.long, device=f.device)
    state = model.prediction.initial_state(n, device=f.device)
    tags = torch.zeros(n, t, dtype=torch.long, device=f.device)
    logq = f.new_zeros(n)
    for i in range(t):
        g, state = model.prediction.step(prev, state)
        logits = _proposal_logits(model, model.local(fr[:, i], g, prev), prev, proposal)
        live = live_all[:, i]
        logits = torch.where(live[:, None], logits, logits.new_zeros(()))
        lp = logits.log_softmax(-1)
        y = torch.multinomial(lp.exp(), 1, generator=generator).squeeze(1)
        y = torch.where(live, y, torch.zeros_like(y))
        logq = logq + torch.where(live, lp.gather(1, y[:, None]).squeeze(1), logq.new_zeros(()))
        tags[:, i] = y
        prev = y
    return tags.view(b, n_samples, t), logq.view(b, n_samples)


class MonteCarloNLL(nn.Module):
    r"""Globally normalised NLL of a CRF transducer with ``E_p[grad u]`` by self-normalised importance
    sampling (module docstring), averaged over the batch.

    Args:
        n_samples: samples ``S >= 1`` per sentence.
        proposal: ``"model"`` (the model's step-wise softmax over its potentials) or ``"uniform"``.

    ``forward(model, batch, generator=)`` draws the samples from ``generator`` (``None``: the global
    generator). Metrics: ``loss`` (mean :math:`-u(y^*) + \log\hat Z`, which can be negative),
    ``log_z`` (mean :math:`\log\hat Z`) and ``ess`` (mean effective sample size, in ``[1, S]``).
    ``negatives`` holds the samples ``(B, S, T)`` (``0`` beyond each length).
    """

    def __init__(self, n_samples: int = 8, proposal: str = "model") -> None:
        super().__init__()
        self.n_samples = check_int(n_samples, "n_samples", minimum=1)
        if proposal not in PROPOSALS:
            raise ValueError(f"proposal: expected one of {', '.join(PROPOSALS)}; got {proposal!r}")
        self.proposal = proposal

    def forward(self, model: nn.Module, batch: Any, *, generator: torch.Generator | None = None) -> LossOutput:
        words, chars, tags, lengths = _unpack(batch)
        return self.compute(model, words, lengths, tags, chars=chars, generator=generator)

    def compute(self, model: nn.Module, words: Tensor, lengths: Tensor, tags: Tensor, *,
                chars: Tensor | None = None, generator: torch.Generator | None = None) -> LossOutput:
        """The loss of one padded batch (no cutting); ``model`` an :class:`~ebms.nets.transducer.AlignedTransducer`.

        Raises:
            TypeError: ``model`` is not an aligned transducer, or ``generator`` not a ``torch.Generator``.
            ValueError: bad words, lengths or tags, or a gold sequence forbidden by the model's
                allowed-label mask.
        """
        if not isinstance(model, AlignedTransducer):
            raise TypeError(f"model: expected an aligned transducer (ebms.nets.transducer.AlignedTransducer, e.g. "
                            f"CRFTransducer); got {type(model).__name__}")
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator: expected a torch.Generator or None; got {type(generator).__name__}")
        y = check_tagging_batch(words, lengths, tags, model.n_tags)
        assert y is not None
        f = model.transcription(words, lengths, chars)
        lengths = lengths.to(f.device).long()
        b, t, _ = f.shape
        s = self.n_samples
        samples, logq = proposal_sample(model, f, lengths, s, proposal=self.proposal, generator=generator)
        both = torch.cat([y.unsqueeze(1), samples], dim=1).reshape(b * (s + 1), t)  # gold first, then samples
        fr = f.repeat_interleave(s + 1, dim=0)
        loc = model.local(fr, model.prediction(both), model.prediction.previous(both))
        loc = loc.gather(-1, both.unsqueeze(-1)).squeeze(-1)
        valid = (torch.arange(t, device=f.device) < lengths.repeat_interleave(s + 1)[:, None])
        u = torch.where(valid, loc, loc.new_zeros(())).sum(1).view(b, s + 1)
        gold, us = u[:, 0], u[:, 1:]
        if not bool(torch.isfinite(gold).all()):
            bad = (~torch.isfinite(gold)).nonzero().flatten().tolist()
            raise ValueError(f"tags: sequences {bad} use a tag pair that allowed/allowed_start forbid")
        logw = us.detach() - logq  # (B, S)
        log_z = torch.logsumexp(logw, dim=1) - math.log(s)
        wbar = torch.softmax(logw, dim=1)
        ess = 1.0 / (wbar * wbar).sum(1)
        expect = (wbar * us).sum(1)  # gradient: the SNIS estimate of E_p[grad u]
        losses = -gold + log_z + (expect - expect.detach())
        loss = losses.mean()
        return LossOutput(loss, scalar_metrics(loss=loss, log_z=log_z.mean(), ess=ess.mean()), samples)

    def extra_repr(self) -> str:
        return f"n_samples={self.n_samples}, proposal={self.proposal!r}"

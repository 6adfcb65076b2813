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
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ebms._checks import check_int
from ebms.capabilities import TeacherForcedLogProb
from ebms.nets.transducer import AlignedTransducer, check_tagging_batch, transducer_beam_search
from ebms.objectives._base import LossOutput, scalar_metrics
from ebms.objectives._tagging_batch import split_batch

__all__ = ["BeamEarlyUpdate", "TransducerML"]


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

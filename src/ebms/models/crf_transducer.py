r"""CRF transducer: a globally normalised tagger with unbounded label history.

For words :math:`x_{1:T}` and tags :math:`y_{1:T}\in\{0..K-1\}^T` (monograph section 4.4,
eqs. 4.30-4.31; Hu, Ou, Xiang & Ding 2021, *Neural CRF transducers for sequence labeling*),

.. math::

    p(y|x) = \frac{\exp u(y, x)}{Z(x)}, \qquad
    u(y, x) = \sum_{i=1}^T \phi_i(y_i, x) + \psi_i(y_{0:i-1}, y_i), \qquad
    Z(x) = \sum_{y' \in \mathcal D_T} \exp u(y', x),

with :math:`f_i = F(x)_i` from the transcription net and :math:`g_i = G(y_{0:i-1})` from the
prediction net (:mod:`ebms.nets.transducer`), and two potential designs:

* ``potentials="raw"`` (design 1): :math:`\phi_i(k) = f_i^k`, :math:`\psi_i(\cdot, k) = g_i^k`;
* ``potentials="log_softmax"`` (design 2): :math:`\phi_i(k) = \log\mathrm{softmax}(f_i)_k`,
  :math:`\psi_i(\cdot, k) = \log\mathrm{softmax}(g_i)_k`.

An allowed-label mask (e.g. BIO) adds :math:`-\infty` to forbidden (previous tag, tag) pairs, so
:math:`\mathcal D_T` is the set of allowed sequences. Unlike a linear-chain CRF, :math:`G` makes
:math:`u` non-Markov: neither :math:`\log Z` nor the argmax has a dynamic program.

**Decoding**: beam search of width ``W`` (:func:`~ebms.nets.transducer.transducer_beam_search`).

**Training by beam search with early updates** (Collins & Roark 2004, *Incremental parsing with
the perceptron algorithm*; Wiseman & Rush 2016, *Sequence-to-sequence learning as beam-search
optimization*): run the beam search with the gold prefix :math:`y^*_{1:i}` tracked; at the first
step :math:`j` where it is not among the top ``W`` prefixes :math:`\mathcal B_j`,

.. math::  L_j = -u(y^*_{1:j}) + \log \sum_{y' \in \mathcal B_j \cup \{y^*_{1:j}\}} \exp u(y'_{1:j}),

and if it survives to :math:`j = T` the same loss with the final beam (the oracle counted once,
with its teacher-forced score, so that :math:`L_j \ge 0` holds in floating point too). This is the conditional
negative log-likelihood with :math:`Z` restricted to the beam, so with ``W >= K^T`` it equals
:math:`-\log p(y^*|x)` exactly. :meth:`CRFTransducer.early_update_loss` does it for a batch at
once (sentences in parallel, positions in sequence, ``G`` run on all ``B W`` hypotheses per step)
and stops the search once every sentence has lost its oracle or ended.
Cost per batch: one teacher-forced pass plus ``<= T`` beam steps.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ebms._checks import check_int
from ebms.nets.transducer import AlignedTransducer, check_tagging_batch, transducer_beam_search
from ebms.objectives import LossOutput, scalar_metrics

__all__ = ["POTENTIALS", "CRFTransducer"]

#: potential designs :class:`CRFTransducer` accepts (monograph eqs. 4.30 and 4.31).
POTENTIALS = ("raw", "log_softmax")


class CRFTransducer(AlignedTransducer):
    """CRF transducer tagger (see the module docstring).

    Args:
        vocab_size: word ids (``0`` is conventionally padding).
        n_tags: tags ``K``.
        potentials: ``"raw"`` (design 1) or ``"log_softmax"`` (design 2).
        **kwargs: network sizes and the allowed-label masks of
            :class:`~ebms.nets.transducer.AlignedTransducer` (``embedding_dim``, ``hidden``, ``kind``,
            ``layers``, ``dropout``, ``char_vocab_size``, ``label_dim``, ``label_hidden``,
            ``label_layers``, ``allowed``, ``allowed_start``).

    Example:
        >>> import torch
        >>> model = CRFTransducer(vocab_size=20, n_tags=3, hidden=8)
        >>> words = torch.randint(1, 20, (2, 5)); lengths = torch.tensor([5, 3])
        >>> tags, scores = model.beam_search(words, lengths, beam=4)
        >>> tags.shape, scores.shape
        (torch.Size([2, 5]), torch.Size([2]))
    """

    def __init__(self, vocab_size: int, n_tags: int, *, potentials: str = "raw", **kwargs: object) -> None:
        if potentials not in POTENTIALS:
            raise ValueError(f"potentials: expected one of {', '.join(POTENTIALS)}; got {potentials!r}")
        super().__init__(vocab_size, n_tags, **kwargs)  # type: ignore[arg-type]
        self.potentials = potentials

    def local(self, f: Tensor, g: Tensor, prev: Tensor) -> Tensor:
        """``phi_i(k) + psi_i(y_{<i}, k)`` (plus the mask) for every tag ``k``, ``(..., K)``."""
        if self.potentials == "log_softmax":
            f, g = f.log_softmax(-1), g.log_softmax(-1)
        return f + g + self.label_bias[prev]

    def score(self, words: Tensor, lengths: Tensor, tags: Tensor, *, chars: Tensor | None = None) -> Tensor:
        """``u(y, x)`` with ``G`` teacher-forced on ``tags``, ``(B,)``; ``-inf`` for a forbidden sequence."""
        return self.local_scores(words, lengths, tags, chars=chars).sum(1)

    def early_update_loss(self, words: Tensor, lengths: Tensor, tags: Tensor, *, beam: int = 8,
                          chars: Tensor | None = None) -> LossOutput:
        """Beam-search-with-early-update loss, averaged over the batch.

        Returns a :class:`~ebms.objectives._base.LossOutput` whose metrics are ``loss``,
        ``early`` (fraction of sentences whose oracle fell out of the beam) and ``prefix``
        (mean fraction of each sentence searched before its update).

        Raises:
            ValueError: a gold sequence is forbidden by the allowed-label mask.
        """
        y = check_tagging_batch(words, lengths, tags, self.n_tags)
        assert y is not None
        check_int(beam, "beam", minimum=1)
        f = self.transcription(words, lengths, chars)
        lengths = lengths.to(f.device).long()
        valid = torch.arange(y.shape[1], device=f.device) < lengths[:, None]
        loc = self.local(f, self.prediction(y), self.prediction.previous(y)).gather(-1, y.unsqueeze(-1)).squeeze(-1)
        prefix = torch.where(valid, loc, loc.new_zeros(())).cumsum(1)  # u(y*_{1:i}), (B, T)
        if not bool(torch.isfinite(prefix[:, -1]).all()):
            bad = (~torch.isfinite(prefix[:, -1])).nonzero().flatten().tolist()
            raise ValueError(f"tags: sequences {bad} use a tag pair that allowed/allowed_start forbid")
        res = transducer_beam_search(f, lengths, self.prediction, self.local, beam=beam, oracle=y,
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

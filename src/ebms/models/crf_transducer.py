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

**Training by beam search with early updates** (Collins & Roark 2004; Wiseman & Rush 2016): the
conditional negative log-likelihood with :math:`Z` restricted to the beam at the first step where
the gold prefix falls out of it (or to the final beam), exact with ``W >= K^T``. The objective is
:class:`ebms.objectives.BeamEarlyUpdate`, which takes the model: ``objective(model, (words, tags,
lengths))`` (what a :class:`~ebms.train.Trainer` runs), or ``BeamEarlyUpdate(W).compute(model,
words, lengths, tags)`` on unpacked arguments. Cost per batch: one teacher-forced pass plus
``<= T`` beam steps.
"""

from __future__ import annotations

from torch import Tensor

from ebms.nets.transducer import AlignedTransducer

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
            ``layers``, ``dropout``, ``char_vocab_size``, ``char_dim``, ``label_dim``, ``label_hidden``,
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

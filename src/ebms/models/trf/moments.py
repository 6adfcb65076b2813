r"""Empirical feature moments of a discrete TRF: the data expectations and within-length variances.

For a corpus of :math:`N` sentences, :math:`N_l` of length :math:`l` (:math:`\tilde\pi_l = N_l/N`),
and the feature counts :math:`f_i(x)` of :class:`~ebms.models.trf.DiscreteFeatures`:

.. math::  m_i = \frac1N \sum_x f_i(x), \qquad
           v_i = \frac1N \sum_x f_i(x)^2 - \sum_l \tilde\pi_l \Big(\frac{1}{N_l}\sum_{|x| = l} f_i(x)\Big)^2 ,

the mean and the variance *within lengths*: :math:`v_i = \sum_l \tilde\pi_l \mathrm{Var}_{\tilde p_l}[f_i]`.
A TRF's log-likelihood :math:`\sum_l \tilde\pi_l \log p_l` has the Hessian
:math:`-\sum_l \tilde\pi_l \mathrm{Cov}_{p_l}[f]` in :math:`\lambda`, so at the data :math:`v` is its
diagonal: the scale of the authors' per-feature steps (:class:`~ebms.train.ScaledSGD`; Wang, Ou &
Tan 2018). A feature seen in one sentence only, or the same number of times in every sentence of
each length it occurs in, has :math:`v_i = 0`; ``floor`` raises those (the source's ``var_gap``,
:math:`10^{-15}`), and the step clip then bounds their moves.

Cost: one pass over the corpus, one length at a time and ``chunk_size`` sentences at a time, with a
sort of each chunk's (sentence, feature) pairs; memory: three ``(F,)`` float64 vectors besides a
chunk's windows (each length's sums are folded into the variance when its sentences are done).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ebms._checks import check_int, check_positive
from ebms.models.trf.features import DiscreteFeatures
from ebms.sequences import Sequences

__all__ = ["feature_moments"]


def feature_moments(features: DiscreteFeatures, corpus: Sequences, *, floor: float = 1e-15,
                    chunk_size: int = 512) -> tuple[Tensor, Tensor]:
    r"""Mean :math:`m` and within-length variance :math:`v` of every feature over ``corpus`` (module docstring).

    Args:
        features: the feature energy (only its feature table is used).
        corpus: ``N >= 1`` sentences (ids below the features' ``vocab_size``).
        floor: the smallest variance returned (``> 0``); values below it are raised to it.
        chunk_size: sentences per pass.

    Returns:
        ``(m, v)``, each ``(F,)`` float64 on the CPU.
    """
    if not isinstance(features, DiscreteFeatures):
        raise TypeError(f"features: expected an ebms.models.trf.DiscreteFeatures; got {type(features).__name__}")
    corpus = Sequences.coerce(corpus, name="corpus", pairs=False, expected="an ebms.sequences.Sequences")
    if corpus.batch_size == 0:
        raise ValueError("corpus: expected at least one sentence; got an empty batch")
    check_positive(floor, "floor")
    check_int(chunk_size, "chunk_size", minimum=1)
    features._check(corpus, "corpus")
    corpus = corpus.to(features.weight.device)
    F, N = features.num_features, corpus.batch_size
    per_length = torch.bincount(corpus.lengths.cpu()).double()  # N_l
    sq = torch.zeros(F, dtype=torch.float64)  # sum_x f_i(x)^2
    s_l = torch.zeros(F, dtype=torch.float64)  # S_{l,i}: the count sums of one length at a time
    between = torch.zeros(F, dtype=torch.float64)  # sum_l S_{l,i}^2 / N_l
    total = torch.zeros(F, dtype=torch.float64)
    lengths = corpus.lengths.cpu()
    with torch.no_grad():
        for length in torch.unique(lengths).tolist():
            rows = (lengths == length).nonzero().squeeze(1)
            for start in range(0, rows.numel(), chunk_size):
                part = corpus[rows[start: start + chunk_size].to(corpus.device)]
                ids = features.feature_ids(part).cpu()  # (b, W)
                row = torch.arange(part.batch_size)[:, None].expand_as(ids)
                hit = ids >= 0
                pair, count = torch.unique(row[hit] * F + ids[hit], return_counts=True)  # per (sentence, feature)
                feat, c = pair % F, count.double()
                sq.index_add_(0, feat, c * c)
                s_l.index_add_(0, feat, c)
            between += s_l * s_l / per_length[length]
            total += s_l
            s_l.zero_()
    mean = total / N
    var = ((sq - between) / N).clamp(min=floor)  # sum_l pi_l (S_l / N_l)^2 = (1/N) sum_l S_l^2 / N_l
    return mean, var


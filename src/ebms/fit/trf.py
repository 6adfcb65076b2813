r"""Starting a discrete TRF at a backoff n-gram LM (the KN-started variant of Wang, Ou & Tan, 2018).

:func:`start_from_ngram` copies the word n-gram weights that reproduce the LM
(:func:`ebms.models.trf.ngram_init.ngram_weights`, whose module docstring has the decomposition)
into a :class:`~ebms.models.trf.TRF` and sets its per-length log normalisers :math:`\zeta_l` to
importance-sampling estimates with the LM conditioned on each length as the proposal
(:func:`ebms.estimators.importance_log_z_per_length`).

References:
    Wang, B., Ou, Z. & Tan, Z. (2018). "Learning trans-dimensional random fields with applications to
    language modeling." IEEE TPAMI.
"""

from __future__ import annotations

import torch

from ebms.distributions import BackoffNGram
from ebms.estimators import LengthConditionalLM, importance_log_z_per_length
from ebms.models.trf import TRF, DiscreteFeatures
from ebms.models.trf.ngram_init import ngram_weights

__all__ = ["start_from_ngram"]


def start_from_ngram(trf: TRF, lm: BackoffNGram, *, draws: int = 100, generator: torch.Generator | None = None,
                     batch_size: int = 4096) -> int:
    r"""Start a discrete TRF at a backoff LM: the KN-started variant of Wang, Ou & Tan (2018)'s training.

    The word n-gram weights become :func:`ngram_weights` of ``lm`` (every other weight 0), so that within
    each length the TRF is ``lm`` (exactly where the features hold all of its n-grams, see the module
    docstring), and :math:`\zeta_l` (``trf.log_z``) becomes an importance-sampling estimate of the new
    :math:`\log Z_l` for every length :math:`l = 1..L`: ``draws`` sentences per length from ``lm``
    conditioned on that length (:class:`~ebms.estimators.LengthConditionalLM`), a proposal close to the
    started model. In place; returns how many weights were set. An id never seen in the features'
    training sentences has no unigram feature, so there the started TRF is not the LM and the
    proposal, which rarely draws it, misses mass: map rare words to ``<unk>`` in training.

    Args:
        trf: a :class:`~ebms.models.trf.TRF` whose energy is :class:`~ebms.models.trf.DiscreteFeatures`
            with the word n-gram templates of orders ``1..lm.order`` (group ``"w"``).
        lm: a backoff n-gram LM over the TRF's ids (e.g. ``BackoffNGram.fit(train, V, order=4)``).
        draws: sentences per length for :math:`\zeta`, ``>= 2``. generator: their random source.
        batch_size: sentences per energy call.

    Raises:
        TypeError: ``trf`` is not a TRF over discrete features. ValueError: see :func:`ngram_weights`.
    """
    if not isinstance(trf, TRF) or not isinstance(trf.field, DiscreteFeatures):
        raise TypeError(f"trf: expected an ebms.models.trf.TRF over DiscreteFeatures; got {type(trf).__name__}"
                        + (f" over {type(trf.field).__name__}" if isinstance(trf, TRF) else ""))
    weights, n_set = ngram_weights(trf.field, lm)
    with torch.no_grad():
        trf.field.weight.copy_(weights)
        est = importance_log_z_per_length(trf, LengthConditionalLM(lm), draws, generator=generator,
                                          batch_size=batch_size)
        trf.log_z.copy_(torch.tensor([e.estimate for e in est.estimates], dtype=trf.log_z.dtype))
    return n_set

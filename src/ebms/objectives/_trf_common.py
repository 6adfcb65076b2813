"""Private: the checks the TRF training objectives (:mod:`~ebms.objectives.trf_augsa`,
:mod:`~ebms.objectives.trf_nce`) share.

They see the model through the protocol :class:`~ebms.capabilities.TransDimensionalField`
(which :class:`ebms.models.trf.TRF` follows).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ebms._checks import check_energy_output
from ebms.capabilities import SupportsSingleTokenEnergies, TransDimensionalField, supports
from ebms.sequences import Sequences
from ebms.spaces import TokenSequences


def check_trf(model: Any) -> TransDimensionalField:
    if not isinstance(model, TransDimensionalField) or not isinstance(model.log_z, nn.Parameter):
        raise TypeError("model: expected a TRF (ebms.models.trf.TRF or any model with energy, log_z parameter, "
                        f"log_pi, log_pi0, log_normalisers, length_log_weights, space); got {type(model).__name__}")
    return model


def check_in_space(x: Sequences, space: TokenSequences, name: str) -> Sequences:
    """Lengths in ``[1, L]`` and ids in ``[1, V)`` (id 0 is the boundary), cut to width ``L``."""
    space.check(x, name, boundary=0)
    return Sequences(x.tokens[:, : space.max_length], x.lengths, validate=False)


def single_token_log_z(model: TransDimensionalField) -> Tensor:
    """:math:`\\log Z_1` exactly: log-sum-exp of :math:`-E` over the ``V - 1`` one-token sentences (0-d)."""
    V = model.vocab_size
    if supports(model, SupportsSingleTokenEnergies):  # cached one-token features (DiscreteFeatures)
        return torch.logsumexp(-check_energy_output(model.single_token_energies(), V - 1, "model.energy(x)"), 0)
    ones = Sequences(torch.arange(1, V, device=model.log_z.device)[:, None], validate=False)
    return torch.logsumexp(-check_energy_output(model.energy(ones), V - 1, "model.energy(x)"), 0)


def padded_log_z(model: TransDimensionalField) -> Tensor:
    """``(L + 1,)``: 0 then :math:`\\log Z_l` as the model uses it, indexed by length (for ``nce_logits``)."""
    z = model.log_normalisers()
    return torch.cat([z.new_zeros(1), z])


def distributed_sum(t: Tensor) -> Tensor:
    """``t`` summed over the ranks of an initialised process group (unchanged otherwise)."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        t = t.clone()
        dist.all_reduce(t)
    return t


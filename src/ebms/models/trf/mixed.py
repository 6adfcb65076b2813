r"""Mixed discrete + neural sentence energy (monograph §3.3.2; Gao, Ou et al. 2020, "Integrating
discrete and neural features via mixed-feature trans-dimensional random field language models").

.. math::  E(x) = \sum_k E_k(x), \quad \text{e.g.} \quad E(x) = -\lambda^\top f(x) + E^{NN}_\theta(x),

trained jointly in one model (no second interpolation step). Terms are energies over
:class:`~ebms.sequences.Sequences`. :meth:`MixedEnergy.token_logits` adds the terms' own
``token_logits`` where they offer one (n-gram features: local windows only) and evaluates the other
terms on the substituted sentences, so samplers keep the cheap path for the discrete part.
"""

from __future__ import annotations

from torch import Tensor, nn

from ebms._checks import check_energy_output
from ebms.capabilities import SupportsTokenLogits, supports
from ebms.models.trf._common import variant_scores
from ebms.sequences import Sequences

__all__ = ["MixedEnergy"]


class MixedEnergy(nn.Module):
    """Sum of sentence energies ``E(Sequences) -> (B,)``.

    Args:
        terms: at least one energy module (e.g. :class:`~ebms.models.trf.DiscreteFeatures` and
            :class:`~ebms.models.trf.Hidden2Scalar`).

    Example:
        >>> from ebms.models.trf import DiscreteFeatures, Hidden2Scalar, feature_templates
        >>> from ebms.sequences import Sequences
        >>> corpus = Sequences.from_lists([[1, 2, 3], [2, 3]])
        >>> feats = DiscreteFeatures.fit(corpus, 5, feature_templates(("w",), order=2))
        >>> energy = MixedEnergy(feats, Hidden2Scalar.cnn(5, embedding_dim=4, hidden=4, layers=1))
        >>> energy(corpus).shape
        torch.Size([2])
    """

    def __init__(self, *terms: nn.Module) -> None:
        super().__init__()
        if not terms:
            raise ValueError("terms: expected at least one energy; got none")
        for i, t in enumerate(terms):
            if not isinstance(t, nn.Module):
                raise TypeError(f"terms[{i}]: expected an nn.Module energy over Sequences; got {type(t).__name__}")
        self.terms = nn.ModuleList(terms)

    def forward(self, x: Sequences) -> Tensor:
        """:math:`\\sum_k E_k(x)`, ``(B,)``."""
        out = check_energy_output(self.terms[0](x), x.batch_size, "terms[0](x)")
        for i, t in enumerate(self.terms[1:], 1):
            out = out + check_energy_output(t(x), x.batch_size, f"terms[{i}](x)")
        return out

    def token_logits(self, x: Sequences, position: Tensor, candidates: Tensor) -> Tensor:
        """``-E`` of ``x`` with ``position`` set to each candidate, ``(B, K)``, up to a per-row constant
        (``-1`` candidates are absent)."""
        out: Tensor | None = None
        for t in self.terms:
            if supports(t, SupportsTokenLogits):
                part = t.token_logits(x, position, candidates)
            else:
                part = variant_scores(t, x, position, candidates)
            out = part if out is None else out + part
        assert out is not None
        return out.masked_fill(candidates < 0, 0.0)

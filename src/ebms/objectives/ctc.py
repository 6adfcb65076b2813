r"""CTC and CTC-CRF as training objectives for acoustic models ``p(y | x)``.

:class:`CTCObjective` follows the objective contract, ``out = objective(model, batch)``
returning a :class:`~ebms.objectives.LossOutput`, for a model that maps padded features to
per-frame label log-probabilities::

    log_probs, out_lengths = model(features, lengths)     # (T', B, V), (B,)

* Without a denominator graph the loss is CTC (Graves et al., 2006, "Connectionist temporal
  classification"): :math:`-\log p_{CTC}(y \mid x)`.
* With one (a label n-gram composed with the CTC topology,
  :class:`~ebms.structured.DenominatorGraph`) it is CTC-CRF (Xiang & Ou, 2019, "CRF-based
  single-stage acoustic modeling with CTC topology"):
  :math:`\log Z_{den}(x) - (1 + \lambda) \log p_{CTC}(y \mid x)` with the auxiliary CTC weight
  :math:`\lambda` (``ctc_weight``).

Both are per-utterance losses divided by the target length, averaged over the batch (the
``reduction="mean"`` of :func:`~ebms.structured.ctc_loss`). Cost: one forward-backward over the
``(T', 2S + 1)`` CTC lattice per utterance, plus, for CTC-CRF, one over the denominator graph.
The objective keeps no state and draws no randomness.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ebms._checks import check_tensor
from ebms.objectives._base import LossOutput, scalar_metrics
from ebms.sequences import Sequences
from ebms.structured.ctc import ctc_loss
from ebms.structured.ctc_crf import ctc_crf_loss
from ebms.structured.den_graph import DenominatorGraph

__all__ = ["CTCObjective"]


class CTCObjective(nn.Module):
    """CTC (``graph=None``) or CTC-CRF loss of an acoustic model on a padded batch.

    Args:
        graph: the CTC-CRF denominator graph; ``None`` trains with plain CTC.
        ctc_weight: CTC-CRF only: weight ``λ >= 0`` of the auxiliary CTC term.

    Call:
        ``objective(model, (features, lengths, targets, target_lengths), generator=None)``
        with ``features (B, T, F)`` float, ``lengths (B,)``, ``targets (B, S)`` labels in
        ``1..V-1`` (0 is the blank) and ``target_lengths (B,)``; ``targets, target_lengths`` may
        also come as one :class:`~ebms.sequences.Sequences`: ``(features, lengths, Sequences(targets,
        target_lengths))``. The batch is cut to its longest input and target first. The model is
        called as ``model(features, lengths)`` and returns ``(log_probs (T', B, V), out_lengths (B,))``.
        Returns ``LossOutput(loss, {"ctc": ...} or {"ctc_crf": ...})``.
    """

    def __init__(self, graph: DenominatorGraph | None = None, *, ctc_weight: float = 0.0) -> None:
        super().__init__()
        if graph is not None and not isinstance(graph, DenominatorGraph):
            raise TypeError(f"graph: expected a DenominatorGraph or None; got {type(graph).__name__}")
        if not ctc_weight >= 0:
            raise ValueError(f"ctc_weight: expected a number >= 0; got {ctc_weight}")
        if graph is None and ctc_weight:
            raise ValueError(f"ctc_weight: weights the CTC term of CTC-CRF, which needs a graph; got {ctc_weight} "
                             "with graph=None")
        self.graph, self.ctc_weight = graph, float(ctc_weight)

    def forward(self, model: nn.Module, batch: Any, *, generator: torch.Generator | None = None) -> LossOutput:
        features, lengths, targets, target_lengths = _unpack(batch)
        t_max, s_max = int(lengths.max()), int(target_lengths.max())
        out = model(features[:, :t_max], lengths)
        if not (isinstance(out, (tuple, list)) and len(out) == 2 and all(isinstance(x, Tensor) for x in out)):
            raise TypeError(f"model: expected model(features, lengths) to return (log_probs (T', B, V), "
                            f"out_lengths (B,)); got {type(out).__name__}")
        log_probs, out_lengths = out
        targets = targets[:, :s_max]
        if self.graph is None:
            loss = ctc_loss(log_probs, targets, out_lengths, target_lengths)
            return LossOutput(loss, scalar_metrics(ctc=loss))
        loss = ctc_crf_loss(log_probs, targets, out_lengths, target_lengths, self.graph, ctc_weight=self.ctc_weight)
        return LossOutput(loss, scalar_metrics(ctc_crf=loss))

    def extra_repr(self) -> str:
        return "ctc" if self.graph is None else f"ctc-crf, ctc_weight={self.ctc_weight}"


def _unpack(batch: Any) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(features, lengths, targets, target_lengths)`` from either batch form, checked for type and rank."""
    if isinstance(batch, (tuple, list)) and len(batch) == 3 and isinstance(batch[2], Sequences):
        batch = (batch[0], batch[1], batch[2].tokens, batch[2].lengths)
    if not isinstance(batch, (tuple, list)) or len(batch) != 4:
        got = f"{len(batch)} tensors" if isinstance(batch, (tuple, list)) else f"a {type(batch).__name__}"
        raise ValueError(f"batch: expected (features, lengths, targets, target_lengths); got {got}")
    features, lengths, targets, target_lengths = batch
    check_tensor(features, "features", floating=True, min_dim=3)
    if features.shape[0] == 0:
        raise ValueError(f"features: expected at least one utterance; got shape {tuple(features.shape)}")
    for name, x, dim in (("lengths", lengths, 1), ("targets", targets, 2), ("target_lengths", target_lengths, 1)):
        check_tensor(x, name)
        if x.dim() != dim or x.is_floating_point() or x.dtype == torch.bool or x.shape[0] != features.shape[0]:
            raise ValueError(f"{name}: expected a ({features.shape[0]}{', S' if dim == 2 else ''}) integer tensor "
                             f"(B = features.shape[0]); got {tuple(x.shape)} {x.dtype}")
    return features, lengths, targets, target_lengths

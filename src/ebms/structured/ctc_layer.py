"""``CTCLoss``: the CTC negative log-likelihood as an ``nn.Module``, a drop-in for ``torch.nn.CTCLoss``.

Same constructor (``blank``, ``reduction``, ``zero_infinity``) and call
``loss(log_probs, targets, input_lengths, target_lengths)`` with every input form torch takes:
``(T, B, V)`` or unbatched ``(T, V)`` log-probabilities, padded ``(B, S)`` or 1-D concatenated
targets, lengths as tensors, lists, tuples (or ints when unbatched). The value is torch's
(computed by torch's fused kernel, exact at every logit scale); the gradient is the exact
derivative with respect to ``log_probs``, ``-gamma`` (Graves et al., 2006, "Connectionist
temporal classification", Eq. 16), where torch returns ``exp(log_probs) - gamma``: the two agree
with respect to logits behind a ``log_softmax``, which is how CTC is trained. See
:func:`ebms.structured.ctc.ctc_loss`.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from ebms._checks import check_bool, check_choice, check_int
from ebms.structured.ctc import METHODS, ctc_loss

__all__ = ["CTCLoss"]


class CTCLoss(nn.Module):
    """CTC loss module (no parameters).

    Args:
        blank: id of the blank label (default 0).
        reduction: ``"mean"`` (default; each loss divided by its target length, at least 1, then
            averaged over the batch), ``"sum"`` or ``"none"`` (``(B,)``, ``()`` unbatched).
        zero_infinity: replace infinite losses (targets that cannot be aligned to the frames)
            and their gradients by zero.
        method: ``"auto"``, ``"torch"`` or ``"dp"``, as :func:`ebms.structured.ctc.ctc_loss`.
        normalized: ``True`` (default): ``log_probs`` are checked to be normalised per frame;
            ``False``: they are logits and ``log_softmax(-1)`` is applied first (as
            :func:`ebms.structured.ctc.ctc_loss`).

    Shapes: ``log_probs (T, B, V)`` or ``(T, V)``; ``targets (B, S)`` / ``(sum L_b,)`` /
    ``(S,)``; ``input_lengths``, ``target_lengths`` ``(B,)``. Cost ``O(T B S)``.
    """

    def __init__(self, blank: int = 0, reduction: str = "mean", zero_infinity: bool = False, *,
                 method: str = "auto", normalized: bool = True) -> None:
        super().__init__()
        self.blank = check_int(blank, "blank", minimum=0)
        if reduction not in ("mean", "sum", "none"):
            raise ValueError(f"reduction: expected 'mean', 'sum' or 'none'; got {reduction!r}")
        check_bool(zero_infinity, "zero_infinity")
        check_choice(method, "method", METHODS)
        check_bool(normalized, "normalized")
        self.reduction = reduction
        self.zero_infinity = zero_infinity
        self.method = method
        self.normalized = normalized

    def extra_repr(self) -> str:
        extra = "" if self.normalized else ", normalized=False"
        return f"blank={self.blank}, reduction={self.reduction!r}, zero_infinity={self.zero_infinity}{extra}"

    def forward(self, log_probs: Tensor, targets: Tensor, input_lengths: Any,
                target_lengths: Any) -> Tensor:
        """The reduced loss; arguments as :func:`ebms.structured.ctc.ctc_loss`."""
        return ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=self.blank,
                        reduction=self.reduction, zero_infinity=self.zero_infinity,
                        method=self.method, normalized=self.normalized)

"""A linear-chain CRF layer with the interface of pytorch-crf's ``torchcrf.CRF``.

:class:`CRF` owns the tag-level parameters of a linear-chain CRF (Lafferty, McCallum & Pereira,
2001, "Conditional random fields: probabilistic models for segmenting and labeling sequence
data") and takes the node scores from any encoder:

    score(y) = start_transitions[y_1] + sum_t emissions[t, y_t]
               + sum_{t >= 2} transitions[y_{t-1}, y_t] + end_transitions[y_L],
    log p(y | x) = score(y) - log Z(x),

for each sequence up to its own length ``L``. ``forward`` returns the log-likelihood (to be
maximised, as in pytorch-crf; the loss is its negative) and ``decode`` the Viterbi tag lists.
Both run on :class:`~ebms.structured.linear_chain.LinearChainCRF` (scaled forward-backward for
``log Z``, ``O(T B C^2)``), whose gradients reach every parameter in any ``requires_grad``
combination. Moving from pytorch-crf is the import line: the constructor, ``forward``'s
arguments (``mask``, ``reduction``), ``decode``'s return type, ``batch_first`` and the parameter
names are the same. Additions: ``lengths=`` instead of ``mask=``, sequences of length 0 (an
all-zero mask row: log-likelihood 0, decoded as ``[]``), and :meth:`CRF.distribution` for
marginals, k-best lists, samples and entropy.

Shapes: ``T`` sequence length, ``B`` batch, ``C = num_tags``; time-major ``(T, B, ...)`` unless
``batch_first``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ebms._checks import check_choice, check_int, check_tensor
from ebms.structured.linear_chain import LinearChainCRF

__all__ = ["CRF"]

_REDUCTIONS = ("none", "sum", "mean", "token_mean")


class CRF(nn.Module):
    """Linear-chain CRF layer owning ``start_transitions``, ``end_transitions`` and ``transitions``.

    Args:
        num_tags: number of tags ``C >= 1``.
        batch_first: inputs are ``(B, T, ...)`` rather than ``(T, B, ...)``.

    Attributes:
        start_transitions: ``(C,)`` score of each first tag.
        end_transitions: ``(C,)`` score of each last tag.
        transitions: ``(C, C)`` score of moving from tag ``i`` to tag ``j``, ``transitions[i, j]``.

    All three start uniform in ``[-0.1, 0.1]`` (as in pytorch-crf). Emissions of another floating
    dtype are computed in the promoted dtype (e.g. float16 emissions with float32 parameters run
    in float32).
    """

    def __init__(self, num_tags: int, batch_first: bool = False) -> None:
        check_int(num_tags, "num_tags", minimum=1)
        if not isinstance(batch_first, bool):
            raise TypeError(f"batch_first: expected a bool; got {type(batch_first).__name__}")
        super().__init__()
        self.num_tags = num_tags
        self.batch_first = batch_first
        self.start_transitions = nn.Parameter(torch.empty(num_tags))
        self.end_transitions = nn.Parameter(torch.empty(num_tags))
        self.transitions = nn.Parameter(torch.empty(num_tags, num_tags))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw every parameter uniformly from ``[-0.1, 0.1]`` (torch's global generator)."""
        for p in (self.start_transitions, self.end_transitions, self.transitions):
            nn.init.uniform_(p, -0.1, 0.1)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(num_tags={self.num_tags})"

    # -- public API --------------------------------------------------------------------------
    def forward(self, emissions: Tensor, tags: Tensor, mask: Tensor | None = None,
                reduction: str = "sum", *, lengths: Tensor | Sequence[int] | None = None) -> Tensor:
        """Conditional log-likelihood ``log p(tags | emissions)``.

        Args:
            emissions: ``(T, B, C)`` (``(B, T, C)`` if ``batch_first``) float scores.
            tags: ``(T, B)`` (``(B, T)``) integer tags; entries outside the mask are ignored.
            mask: optional ``(T, B)`` (``(B, T)``) bool or 0/1 integer mask, a left-aligned
                prefix per sequence (ones, then zeros). ``None`` (and no ``lengths``): all ones.
            reduction: ``"none"`` -> ``(B,)``; ``"sum"`` -> sum over the batch; ``"mean"`` ->
                mean over sequences; ``"token_mean"`` -> sum divided by the number of unmasked
                tokens. A mean over zero sequences or tokens is 0 (the sum is 0).
            lengths: optional ``(B,)`` sequence lengths in ``[0, T]``, instead of ``mask``.

        Returns:
            The log-likelihood, ``(B,)`` for ``"none"``, a scalar otherwise.
        """
        check_choice(reduction, "reduction", _REDUCTIONS)
        crf = self.distribution(emissions, mask, lengths=lengths)
        check_tensor(tags, "tags")
        if tags.is_floating_point() or tags.is_complex() or tags.dtype == torch.bool:
            raise TypeError(f"tags: expected an integer tensor; got dtype {tags.dtype}")
        if tags.shape != emissions.shape[:2]:
            raise ValueError(f"tags: expected shape {tuple(emissions.shape[:2])} (the first two "
                             f"dimensions of emissions); got {tuple(tags.shape)}")
        llh = crf.log_prob(tags if self.batch_first else tags.t())
        if reduction == "none":
            return llh
        total = llh.sum()
        if reduction == "sum":
            return total
        count = crf.lengths.new_tensor(llh.shape[0]) if reduction == "mean" else crf.lengths.sum()
        return total / count.clamp_min(1).to(total.dtype)

    @torch.no_grad()
    def decode(self, emissions: Tensor, mask: Tensor | None = None, *,
               lengths: Tensor | Sequence[int] | None = None) -> list[list[int]]:
        """Viterbi decoding: the best tag sequence of each batch element, as lists of ints.

        Args:
            emissions: ``(T, B, C)`` (``(B, T, C)`` if ``batch_first``) float scores.
            mask: optional left-aligned prefix mask, as in :meth:`forward`.
            lengths: optional ``(B,)`` lengths, instead of ``mask``.

        Returns:
            ``B`` lists, the ``i``-th of length ``lengths[i]``.
        """
        crf = self.distribution(emissions, mask, lengths=lengths)
        return [row[:n] for row, n in zip(crf.argmax.tolist(), crf.lengths.tolist())]

    def distribution(self, emissions: Tensor, mask: Tensor | None = None, *,
                     lengths: Tensor | Sequence[int] | None = None) -> LinearChainCRF:
        """The :class:`LinearChainCRF` of a batch (batch-first ``(B, T, C)`` internally), for
        ``marginals``, ``kbest``, ``sample``, ``entropy`` and ``log_partition``."""
        check_tensor(emissions, "emissions", floating=True)
        if emissions.dim() != 3:
            order = "(B, T, C)" if self.batch_first else "(T, B, C)"
            raise ValueError(f"emissions: expected 3 dimensions {order}; got shape {tuple(emissions.shape)}")
        if emissions.shape[2] != self.num_tags:
            raise ValueError(f"emissions: expected the last dimension to be num_tags = {self.num_tags}; "
                             f"got shape {tuple(emissions.shape)}")
        em = emissions if self.batch_first else emissions.transpose(0, 1)
        n = self._lengths(mask, lengths, tuple(emissions.shape[:2]), em.shape[0], emissions.device)
        dtype = torch.promote_types(emissions.dtype, self.transitions.dtype)
        return LinearChainCRF(em.to(dtype), self.transitions.to(dtype), n,
                              start=self.start_transitions.to(dtype), end=self.end_transitions.to(dtype))

    # -- helpers -----------------------------------------------------------------------------
    def _lengths(self, mask: Tensor | None, lengths: Tensor | Sequence[int] | None,
                 shape: tuple[int, ...], batch: int, device: torch.device) -> Tensor | None:
        """``(B,)`` lengths from ``mask`` or ``lengths`` (``None``: full length)."""
        if mask is not None and lengths is not None:
            raise ValueError("mask, lengths: expected at most one of them; got both")
        if lengths is not None:
            if not isinstance(lengths, Tensor):
                lengths = torch.as_tensor(lengths, dtype=torch.long, device=device)
            return lengths  # checked by LinearChainCRF (integer, (B,), values in [0, T])
        if mask is None:
            return None
        check_tensor(mask, "mask")
        if mask.is_floating_point() or mask.is_complex():
            raise TypeError(f"mask: expected a bool or 0/1 integer tensor; got dtype {mask.dtype}")
        if tuple(mask.shape) != shape:
            raise ValueError(f"mask: expected shape {shape} (the first two dimensions of emissions); "
                             f"got {tuple(mask.shape)}")
        m = mask if self.batch_first else mask.t()  # (B, T)
        if m.dtype != torch.bool:
            if m.numel() and bool(((m != 0) & (m != 1)).any()):
                raise ValueError("mask: expected values 0 and 1 only; got others")
            m = m != 0
        n = m.sum(1)
        prefix = torch.arange(m.shape[1], device=m.device) < n[:, None]
        bad = (prefix != m).any(1).nonzero().flatten()
        if bad.numel():
            raise ValueError(f"mask: expected a left-aligned prefix per sequence (ones, then zeros); "
                             f"got gaps in batch elements {bad.tolist()[:10]}")
        return n.to(device)

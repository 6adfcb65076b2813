r"""Private: :class:`~ebms.samplers.TransDimensional`'s class-proposal trials on a flat candidate list.

With word classes, a trial draws a class :math:`c \sim Q` and then a word from the exact conditional
inside it, which needs the score of every word of the class (and of the current token's class, for
the reverse move). The padded route scores a ``(B, G, K)`` block, ``K`` the largest class; with
classes of very different sizes (200 exchange classes of PTB: 1 to 382 words, about 58 expected
under :math:`Q`) most of it is padding, and rows that do not move are scored too. This route lists
only the moving rows' class members, ``N`` pairs in ``A G`` segments (row, group), scores them with
the target's ``token_logits_flat`` and does the within-class softmax, draw and log-sum-exp per
segment. It consumes the generator exactly as the padded route (one uniform per row of the batch
and draw), so the chains' randomness does not depend on which rows move; the draws agree with the
padded route's up to rounding (the normalisers are summed in another order, here in float64).

Cost: :math:`O(N + B)` per call besides the target's scoring, :math:`N = \sum` over moving rows of
their groups' class sizes.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ebms.sequences import Sequences


def _segments(length: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Segment id of each element ``(N,)``, its index inside the segment ``(N,)``, and each segment's start ``(S,)``."""
    first = torch.cumsum(length, 0) - length
    seg = torch.repeat_interleave(torch.arange(length.numel(), device=length.device), length)
    return seg, torch.arange(seg.numel(), device=length.device) - first[seg], first


def draw_in_segments(s: Tensor, first: Tensor, length: Tensor, act: Tensor, B: int, width: int,
                     generator: torch.Generator | None) -> Tensor:
    """One element per segment ``[first, first + length)`` of ``s`` with probability ``softmax`` inside it.

    ``act (A,)``: the batch row of each segment; one uniform is drawn for each of the ``B`` rows
    (``(B, 1)`` in ``s``'s dtype, as ``sample_categorical`` draws for a ``(B, K)`` block), so the
    generator advances as on the padded route. ``width``: the largest possible segment (unused here;
    a scripted replacement pads to it). Returns flat indices into ``s`` ``(A,)``.
    """
    u = torch.rand((B, 1), generator=generator, device=s.device, dtype=s.dtype)[act, 0].double()
    seg, within, start = _segments(length)
    idx = first[seg] + within  # the segments' elements, flat indices into s
    v = s[idx].double()
    top = torch.full((length.numel(),), -torch.inf, dtype=torch.float64, device=s.device).scatter_reduce(0, seg, v, "amax")
    top = torch.where(torch.isfinite(top), top, 0.0)
    cum = torch.cat([v.new_zeros(1), torch.cumsum((v - top[seg]).exp(), 0)])
    before, end = cum[start], cum[start + length]
    k = torch.searchsorted(cum[1:], before + u * (end - before), right=True)
    return idx[torch.minimum(torch.maximum(k, start), start + length - 1)]


def class_trials_flat(flat: Any, tab: Any, x: Sequences, pos: Tensor, cur: Tensor, c: Tensor, c_cur: Tensor,
                      rows: Tensor | None, gen: torch.Generator | None,
                      draw: Any = draw_in_segments) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The ``m`` class-proposal trials of ``TransDimensional._trials`` (same returns), scored flat.

    Args:
        flat: ``token_logits_flat(x, position, row, candidates) -> (N,)`` of the target.
        tab: the sampler's proposal tables (``members``, ``class_start``, ``class_size``, ``slot``, ``log_class``).
        x: the chains ``(B, T)``; pos: the position each row moves ``(B,)``; cur: its current token ``(B,)``.
        c: the trials' drawn classes ``(B, m)``; c_cur: the current token's class ``(B,)``.
        rows: bool ``(B,)``, the rows that move (``None``: all); the others get neutral values.
        gen: the generator. draw: the within-class word draw (:func:`draw_in_segments`).

    Returns:
        ``(y, ly, lw, l_cur, lw_cur)``: trial tokens ``(B, m)``, their scores, log weights
        :math:`\\log S_c - \\log Q(c)` ``(B, m)``, the current token's score and log weight ``(B,)``.
    """
    B, m = c.shape
    C = tab.class_size.numel()
    G = 1 if C == 1 else m + 1
    at = [0] * (m + 1) if C == 1 else list(range(m + 1))  # group of trial i, then of cur
    groups = c[:, :1] if C == 1 else torch.cat([c, c_cur[:, None]], 1)  # (B, G)
    act = torch.arange(B, device=x.device) if rows is None else rows.nonzero().squeeze(1)
    A = act.numel()
    gcls = groups[act].reshape(-1)  # (A G,) segment classes
    length = tab.class_size[gcls]
    seg, within, first = _segments(length)
    words = tab.members[tab.class_start[gcls][seg] + within]
    sub = Sequences(x.tokens[act], x.lengths[act], validate=False)
    s = flat(sub, pos[act], seg // G, words)  # (N,)
    dtype = s.dtype
    s64 = s.double()  # per-segment log-sum-exp in float64
    top = torch.full((A * G,), -torch.inf, dtype=torch.float64, device=s.device).scatter_reduce(0, seg, s64, "amax")
    top = torch.where(torch.isfinite(top), top, 0.0)
    total = torch.zeros(A * G, dtype=torch.float64, device=s.device).index_add_(0, seg, (s64 - top[seg]).exp())
    lse = (total.log() + top).view(A, G)

    y = cur[:, None].expand(B, m).clone()
    ly = torch.zeros(B, m, dtype=dtype, device=x.device)
    lw = torch.zeros(B, m, dtype=dtype, device=x.device)
    l_cur = torch.zeros(B, dtype=dtype, device=x.device)
    lw_cur = torch.zeros(B, dtype=dtype, device=x.device)
    width = int(tab.words.shape[1])
    for i in range(m):
        g = torch.arange(A, device=x.device) * G + at[i]
        k = draw(s, first[g], length[g], act, B, width, gen)
        y[act, i] = words[k]
        ly[act, i] = s[k]
    lw[act] = (lse[:, at[:m]] - tab.log_class[c[act]]).to(dtype)
    g_cur = torch.arange(A, device=x.device) * G + at[m]
    l_cur[act] = s[first[g_cur] + tab.slot[cur[act]]]
    lw_cur[act] = (lse[:, at[m]] - tab.log_class[c_cur[act]]).to(dtype)
    return y, ly, lw, l_cur, lw_cur

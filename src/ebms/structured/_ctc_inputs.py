"""Argument handling shared by the CTC functions: ``torch.nn.functional.ctc_loss``'s input forms.

Accepted (as torch does):

* ``log_probs``: ``(T, B, V)`` batched or ``(T, V)`` unbatched, float, no NaN or ``+inf``
  (``-inf``, an impossible symbol, is allowed);
* ``targets``: ``(B, S)`` padded (entries past ``target_lengths`` ignored), or 1-D
  ``(sum(target_lengths),)`` concatenated; ``(S,)`` for unbatched input;
* ``input_lengths`` / ``target_lengths``: an integer tensor, a list or tuple of ints, a plain int
  (unbatched), or ``None`` (``T`` / ``S``; for concatenated targets ``target_lengths`` is
  required unless ``B = 1``).

Everything is returned as :class:`CTCInputs` with ``(T, B, V)`` log-probs, ``(B, S)`` padded
targets (padding replaced by the blank) and ``(B,)`` long lengths, or a one-line
``ValueError``/``TypeError`` naming the argument, the expectation and the value received.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ebms._checks import check_int, check_tensor

__all__ = ["CTCInputs", "check_log_probs", "lengths_tensor", "prepare"]


@dataclass
class CTCInputs:
    """Normalised CTC arguments: ``log_probs (T, B, V)``, ``labels (B, S)`` long with padding set
    to ``blank``, ``input_lengths (B,)`` and ``target_lengths (B,)`` long, ``blank``; ``unbatched``
    tells whether a batch axis of size 1 was added; ``has_neginf`` whether ``log_probs`` holds a
    ``-inf``."""

    log_probs: Tensor
    labels: Tensor
    input_lengths: Tensor
    target_lengths: Tensor
    blank: int
    unbatched: bool
    has_neginf: bool


def check_log_probs(log_probs: Any, blank: Any, *, allow_unbatched: bool = True) -> Tensor:
    """``log_probs`` as ``(T, B, V)`` (an unbatched ``(T, V)`` gets ``B = 1``) after the checks."""
    check_tensor(log_probs, "log_probs", floating=True)
    if log_probs.dim() == 2 and allow_unbatched:
        log_probs = log_probs.unsqueeze(1)
    elif log_probs.dim() != 3:
        what = "(T, B, V) or unbatched (T, V)" if allow_unbatched else "(T, B, V)"
        raise ValueError(f"log_probs: expected shape {what} (time-major, as torch ctc_loss); "
                         f"got {tuple(log_probs.shape)}")
    t, b, v = log_probs.shape
    if t == 0 or b == 0 or v == 0:
        raise ValueError(f"log_probs: expected non-empty T, B and V; got shape {(t, b, v)}")
    check_int(blank, "blank")
    if not 0 <= blank < v:
        raise ValueError(f"blank: expected an int in [0, {v}) (V = log_probs.shape[-1]); got {blank}")
    if bool(torch.isfinite(log_probs.sum())):  # no NaN, no inf: one reduction in the common case
        return log_probs
    bad = torch.isnan(log_probs) | torch.isposinf(log_probs)
    if bool(bad.any()):
        raise ValueError(f"log_probs: expected no NaN or +inf entries (-inf is allowed); "
                         f"got {int(bad.sum())} in shape {tuple(log_probs.shape)}")
    return log_probs


def _integer_tensor(x: Any, name: str) -> Tensor:
    if isinstance(x, Tensor):
        if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
            raise TypeError(f"{name}: expected integers (a tensor, list or tuple); got dtype {x.dtype}")
        return x
    if isinstance(x, bool) or not isinstance(x, (int, list, tuple)):
        raise TypeError(f"{name}: expected an integer tensor, a list or tuple of ints, or an int; "
                        f"got {type(x).__name__}")
    items = [x] if isinstance(x, int) else list(x)
    for i in items:
        if isinstance(i, bool) or not isinstance(i, int):
            raise TypeError(f"{name}: expected ints; got an entry {i!r} of type {type(i).__name__}")
    return torch.tensor(items, dtype=torch.long).reshape(()) if isinstance(x, int) else \
        torch.tensor(items, dtype=torch.long).reshape(len(items))


def lengths_tensor(x: Any, name: str, batch: int, high: int, what: str, device: torch.device,
                   *, unbatched: bool = False) -> Tensor:
    """``(B,)`` long lengths in ``[0, high]`` from a tensor, list, tuple, int or ``None``."""
    if x is None:
        return torch.full((batch,), high, dtype=torch.long, device=device)
    x = _integer_tensor(x, name)
    if unbatched and x.dim() == 0:
        x = x.reshape(1)
    if tuple(x.shape) != (batch,):
        shape = "() or (1,)" if unbatched else f"({batch},)"
        raise ValueError(f"{name}: expected shape {shape} (one length per sequence); got "
                         f"{tuple(x.shape)}")
    x = x.to(device=device, dtype=torch.long)
    lo, hi = (int(e) for e in torch.aminmax(x)) if x.numel() else (0, 0)
    if lo < 0 or hi > high:
        raise ValueError(f"{name}: expected values in [0, {high}] ({what}); got min {lo}, max {hi}")
    return x


def _padded_targets(targets: Tensor, target_lengths: Any, batch: int, unbatched: bool,
                    device: torch.device) -> tuple[Tensor, Tensor]:
    """``(B, S)`` targets and ``(B,)`` lengths from padded or concatenated input."""
    if targets.dim() == 2 and not unbatched:
        if targets.shape[0] != batch:
            raise ValueError(f"targets (padded (B, S)): expected shape ({batch}, *); got "
                             f"{tuple(targets.shape)}")
        s = targets.shape[1]
        return targets.to(device), lengths_tensor(target_lengths, "target_lengths", batch, s,
                                                  "S = targets.shape[1]", device)
    if targets.dim() != 1:
        want = "(S,) for unbatched log_probs" if unbatched else "(B, S) padded or 1-D concatenated"
        raise ValueError(f"targets: expected shape {want}; got {tuple(targets.shape)}")
    n = targets.shape[0]
    if unbatched:
        lengths = lengths_tensor(target_lengths, "target_lengths", 1, n, "S = targets.shape[0]",
                                 device, unbatched=True)
        return targets.to(device).unsqueeze(0), lengths
    if target_lengths is None:
        if batch != 1:
            raise ValueError(f"target_lengths: required with 1-D (concatenated) targets and B = "
                             f"{batch} sequences; got None")
        return targets.to(device).unsqueeze(0), torch.full((1,), n, dtype=torch.long, device=device)
    lengths = lengths_tensor(target_lengths, "target_lengths", batch, n,
                             "targets.shape[0] of the concatenated targets", device)
    if int(lengths.sum()) != n:
        raise ValueError(f"target_lengths: expected to sum to targets.shape[0] = {n} (1-D "
                         f"concatenated targets); got sum {int(lengths.sum())}")
    width = int(lengths.max())
    start = torch.cumsum(lengths, 0) - lengths
    pos = start.unsqueeze(1) + torch.arange(width, device=device)
    valid = torch.arange(width, device=device) < lengths.unsqueeze(1)
    flat = targets.to(device)
    padded = flat[pos.clamp(max=max(n - 1, 0))] if n else flat.new_zeros(batch, 0)
    return torch.where(valid, padded, 0), lengths


def prepare(log_probs: Any, targets: Any, input_lengths: Any, target_lengths: Any,
            blank: Any) -> CTCInputs:
    """Check and normalise the arguments of a CTC function (see the module docstring)."""
    if isinstance(log_probs, Tensor) and log_probs.dim() not in (2, 3):
        raise ValueError(f"log_probs: expected shape (T, B, V) or unbatched (T, V) (time-major, "
                         f"as torch ctc_loss); got {tuple(log_probs.shape)}")
    unbatched = isinstance(log_probs, Tensor) and log_probs.dim() == 2
    lp = check_log_probs(log_probs, blank)
    t, b, v = lp.shape
    dev = lp.device
    check_tensor(targets, "targets")
    if targets.is_floating_point() or targets.is_complex() or targets.dtype == torch.bool:
        raise TypeError(f"targets: expected an integer tensor; got dtype {targets.dtype}")
    labels, lengths = _padded_targets(targets, target_lengths, b, unbatched, dev)
    il = lengths_tensor(input_lengths, "input_lengths", b, t, "T = log_probs.shape[0]", dev,
                        unbatched=unbatched)
    s = labels.shape[1]
    valid = torch.arange(s, device=dev) < lengths.unsqueeze(1)
    labels = labels.to(torch.long)
    used = labels[valid]
    if bool((used == blank).any()):
        raise ValueError(f"targets: expected no blank ({blank}) within target_lengths; "
                         f"got {int((used == blank).sum())} blank entries")
    if used.numel() and (int(used.min()) < 0 or int(used.max()) >= v):
        raise ValueError(f"targets: expected labels in [0, {v}) (V = log_probs.shape[-1]) within "
                         f"target_lengths; got min {int(used.min())}, max {int(used.max())}")
    has_neginf = not bool(torch.isfinite(lp.sum())) and bool(torch.isneginf(lp).any())
    return CTCInputs(lp, torch.where(valid, labels, blank), il, lengths, int(blank), unbatched,
                     has_neginf)

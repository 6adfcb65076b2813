"""Argument handling shared by the CTC functions: ``torch.nn.functional.ctc_loss``'s input forms.

Accepted (as torch does):

* ``log_probs``: ``(T, B, V)`` batched or ``(T, V)`` unbatched, float, no NaN or ``+inf``
  (``-inf``, an impossible symbol, is allowed);
* ``targets``: ``(B, S)`` padded (entries past ``target_lengths`` ignored), or 1-D
  ``(sum(target_lengths),)`` concatenated; ``(S,)`` for unbatched input;
* ``input_lengths`` / ``target_lengths``: an integer tensor, a list or tuple of ints, a plain int
  (unbatched), or ``None`` (``T`` / ``S``; for concatenated targets ``target_lengths`` is
  required unless ``B = 1``).

:func:`check_normalized` checks that the frames of ``log_probs`` within ``input_lengths`` are
normalised distributions over the classes (on up to 32 evenly spaced frames per sequence; the
losses that read ``log_probs`` as log-probabilities call it).

Everything is returned as :class:`CTCInputs` with ``(T, B, V)`` log-probs, ``(B, S)`` padded
targets (padding replaced by the blank) and ``(B,)`` long lengths, or a one-line
``ValueError``/``TypeError`` naming the argument, the expectation and the value received.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ebms._checks import check_int, check_tensor

__all__ = [
    "CHECKED_FRAMES",
    "CTCInputs",
    "check_log_probs",
    "check_normalized",
    "lengths_tensor",
    "normalization_tolerance",
    "prepare",
]


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
    return _checked_log_probs(log_probs, blank, allow_unbatched)[0]


def _checked_log_probs(log_probs: Any, blank: Any, allow_unbatched: bool) -> tuple[Tensor, bool]:
    """:func:`check_log_probs`, and whether every entry is finite (no ``-inf`` either)."""
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
    if math.isfinite(float(log_probs.detach().sum())):  # no NaN, no inf: one reduction in the common case
        return log_probs, True
    bad = torch.isnan(log_probs) | torch.isposinf(log_probs)
    if bool(bad.any()):
        raise ValueError(f"log_probs: expected no NaN or +inf entries (-inf is allowed); "
                         f"got {int(bad.sum())} in shape {tuple(log_probs.shape)}")
    return log_probs, False


def normalization_tolerance(dtype: torch.dtype, n_classes: int) -> float:
    r"""Largest ``|logsumexp_v lp_t(v)|`` that :func:`check_normalized` accepts for ``V`` classes.

    ``max(sqrt(eps), 4 eps (1 + log V))`` with ``eps`` the machine epsilon of ``dtype``. A
    ``log_softmax`` output stored in ``dtype`` has entries of size about ``log V`` rounded to
    ``eps/2`` relative, so its frame total is off by about ``eps log V``: measured at most
    ``8 eps`` in float32 and ``80 eps`` in float64 (``V`` up to 50,000, logit scales 0.01 to
    1,000), ``6 eps`` in bfloat16 and ``4 eps`` in float16. The bound leaves a margin of 8 or more
    over those in every dtype (about ``3.5e-4`` in float32, ``1.5e-8`` in float64), while raw
    logits, probabilities or a temperature applied after the ``log_softmax`` are off by far more.
    """
    eps = torch.finfo(dtype).eps
    return max(math.sqrt(eps), 4.0 * eps * (1.0 + math.log(max(n_classes, 1))))


#: frames per sequence that :func:`check_normalized` reads (evenly spaced; every frame of shorter inputs)
CHECKED_FRAMES = 32


def check_normalized(log_probs: Tensor, input_lengths: Tensor, name: str = "log_probs") -> Tensor:
    """``log_probs (T, B, V)`` holds normalised frames: ``|logsumexp_v log_probs[t, b, v]|`` is at most
    :func:`normalization_tolerance` on :data:`CHECKED_FRAMES` evenly spaced frames ``t`` (the first
    included; every frame when ``T`` is smaller) of every sequence, within its input length.

    The misuses this catches show in every frame (logits or probabilities passed as log-probabilities, a
    temperature applied after the ``log_softmax``, a ``log_softmax`` over the wrong axis), so a sample of
    frames finds them while costing ``O(min(T, 32) B V)``: a few percent of a CTC forward-backward at
    most, where reading every frame would cost up to a quarter of it for ``V`` in the thousands. Frames
    past a sequence's length are padding and are not read. One host sync, no autograd; float32 for
    half types.

    Raises:
        ValueError: naming ``name``, the worst frame read, its total and the tolerance, and the fix
            (``log_softmax(-1)``, or ``normalized=False`` where the loss offers it).
    """
    t, b, v = log_probs.shape
    with torch.no_grad():
        frames = _checked_frames(t, log_probs.device)
        lp = log_probs.detach().index_select(0, frames)
        if lp.dtype in (torch.float16, torch.bfloat16):
            lp = lp.float()
        lse = torch.logsumexp(lp, dim=-1)  # (F, B); -inf for a frame of -inf only
        live = frames.unsqueeze(1) < input_lengths.to(lse.device).unsqueeze(0)
        off = torch.where(live, lse.abs(), 0.0).reshape(-1)
        most, where = off.max(0) if off.numel() else (off.new_zeros(()), off.new_zeros((), dtype=torch.long))
        worst, flat = float(most), int(where)
    tol = normalization_tolerance(log_probs.dtype, v)
    if not worst <= tol:  # NaN-proof
        row, seq = divmod(flat, b)
        raise ValueError(
            f"{name}: expected log-probabilities normalised over the last axis (logsumexp 0 within {tol:.2g} "
            f"in {log_probs.dtype}, frames within input_lengths); got logsumexp {float(lse[row, seq]):.6g} "
            f"at frame {int(frames[row])} of sequence {seq}; apply log_softmax(-1) to the scores, or pass "
            "normalized=False to have it applied"
        )
    return log_probs


@functools.lru_cache(maxsize=64)
def _checked_frames(t: int, device: torch.device) -> Tensor:
    """The frames :func:`check_normalized` reads: :data:`CHECKED_FRAMES` evenly spaced in ``[0, t)``."""
    return torch.linspace(0, t - 1, min(t, CHECKED_FRAMES), device=device).round().long()


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
    lo, hi = torch.stack(torch.aminmax(x)).tolist() if x.numel() else (0, 0)
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
    lp, finite = _checked_log_probs(log_probs, blank, True)
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
    blanks, lo, hi = torch.stack([(used == blank).sum(), *torch.aminmax(used)]).tolist() if used.numel() else (0, 0, 0)
    if blanks:
        raise ValueError(f"targets: expected no blank ({blank}) within target_lengths; "
                         f"got {blanks} blank entries")
    if lo < 0 or hi >= v:
        raise ValueError(f"targets: expected labels in [0, {v}) (V = log_probs.shape[-1]) within "
                         f"target_lengths; got min {lo}, max {hi}")
    has_neginf = not finite and bool(torch.isneginf(lp).any())
    return CTCInputs(lp, torch.where(valid, labels, blank), il, lengths, int(blank), unbatched,
                     has_neginf)

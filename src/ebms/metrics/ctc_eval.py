r"""Test figures of a CTC acoustic model: decode a test set, then count label errors.

An acoustic model is any module whose ``model(features (B, t, F), lengths (B,))`` returns
``(log_probs (t', B, V), out_lengths (B,))``: per-frame log-probabilities over ``V`` symbols,
time-major as :func:`torch.nn.functional.ctc_loss` takes them, blank ``0``, and the frames each
utterance keeps (e.g. :class:`ebms.nets.acoustic.ConvBiLSTM`, which subsamples time).
:func:`ctc_transcripts` runs it over a test set in batches of ``batch_size`` utterances (each
cut to its own longest one) with the model in eval mode, and decodes every batch

* by best path (:func:`ebms.structured.ctc.greedy_decode`: per-frame argmax, repeats merged,
  blanks dropped; Graves et al., 2006), and
* with a ``den_graph`` also by the label n-gram of a CTC-CRF (Xiang & Ou, 2019):
  :func:`ebms.structured.ctc_crf.ctc_crf_decode`, prefix beam search on the CPU.

:func:`evaluate_ctc` scores them against the reference label lists with
:func:`ebms.metrics.error_rate.error_rate` (Levenshtein counts summed over the corpus). Cost: one
forward per batch, ``O(t' B V)`` for best path, ``O(t' beam V)`` Python steps per utterance for
the n-gram beam search, ``O(n m)`` per pair for the edit distances.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from ebms._checks import check_int, check_tensor
from ebms.metrics.error_rate import error_rate
from ebms.structured.ctc import greedy_decode
from ebms.structured.ctc_crf import ctc_crf_decode
from ebms.structured.den_graph import DenominatorGraph

__all__ = ["ctc_transcripts", "evaluate_ctc"]


def _model_device(model: nn.Module) -> torch.device:
    for t in (*model.parameters(), *model.buffers()):
        return t.device
    return torch.device("cpu")


def ctc_transcripts(model: nn.Module, features: Tensor, lengths: Tensor, *, den_graph: DenominatorGraph | None = None,
                    batch_size: int = 64) -> tuple[list[list[int]], list[list[int]] | None]:
    """Best-path transcripts of every utterance and, with ``den_graph``, the n-gram decoder's.

    Args:
        model: the acoustic model (module docstring); put in eval mode while decoding, its mode
            restored afterwards. Batches are moved to the device of its first parameter.
        features: ``(N, T, F)`` floating point, padded past ``lengths``.
        lengths: ``(N,)`` integer frame counts in ``[1, T]``.
        den_graph: the CTC-CRF denominator graph (label n-gram); ``None``: best path only.
        batch_size: utterances per forward.

    Returns:
        ``(greedy, with_lm)``: one label list per utterance each; ``with_lm`` is ``None``
        without ``den_graph``.

    Raises:
        TypeError, ValueError: features or lengths of the wrong type or shape, a bad
            ``batch_size`` or ``den_graph``.
    """
    check_tensor(features, "features", floating=True)
    if features.dim() != 3:
        raise ValueError(f"features: expected shape (N, T, F); got {tuple(features.shape)}")
    check_tensor(lengths, "lengths")
    n, t = int(features.shape[0]), int(features.shape[1])
    if lengths.dim() != 1 or lengths.shape[0] != n or lengths.is_floating_point():
        raise ValueError(f"lengths: expected a ({n},) integer tensor (one per utterance); "
                         f"got {tuple(lengths.shape)} {lengths.dtype}")
    if n and (int(lengths.min()) < 1 or int(lengths.max()) > t):
        raise ValueError(f"lengths: expected frame counts in [1, {t}] (features.shape[1]); "
                         f"got min {int(lengths.min())}, max {int(lengths.max())}")
    check_int(batch_size, "batch_size", minimum=1)
    if den_graph is not None and not isinstance(den_graph, DenominatorGraph):
        raise TypeError(f"den_graph: expected an ebms.structured.den_graph.DenominatorGraph or None; "
                        f"got {type(den_graph).__name__}")
    device = _model_device(model)
    greedy: list[list[int]] = []
    with_lm: list[list[int]] = []
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for i in range(0, n, batch_size):
                ln = lengths[i:i + batch_size]
                x = features[i:i + batch_size, :int(ln.max())].to(device)
                log_probs, out_lengths = model(x, ln.to(device))
                greedy += greedy_decode(log_probs, out_lengths).sequences()
                if den_graph is not None:
                    with_lm += ctc_crf_decode(log_probs.cpu(), out_lengths.cpu(), den_graph).sequences()
    finally:
        model.train(was_training)
    return greedy, (with_lm if den_graph is not None else None)


def evaluate_ctc(model: nn.Module, features: Tensor, lengths: Tensor, refs: Sequence[Sequence[Hashable]], *,
                 den_graph: DenominatorGraph | None = None, batch_size: int = 64) -> dict[str, Any]:
    """Label error figures of the model's transcripts against ``refs`` (module docstring).

    Args:
        model, features, lengths, den_graph, batch_size: as :func:`ctc_transcripts`.
        refs: the reference label list of every utterance.

    Returns:
        ``ler`` (label error rate, percent, best path), ``substitutions``, ``deletions``,
        ``insertions`` (int counts), ``ser`` (sentence error rate, percent), ``ref_labels`` and
        ``utterances`` (ints), then with ``den_graph`` ``ler_lm`` (percent, n-gram decoding).

    Raises:
        ValueError: ``refs`` not one list per utterance (from
            :func:`~ebms.metrics.error_rate.error_rate`), or no reference label at all.
    """
    greedy, with_lm = ctc_transcripts(model, features, lengths, den_graph=den_graph, batch_size=batch_size)
    er = error_rate(refs, greedy)
    figures: dict[str, Any] = {
        "ler": er.percent, "substitutions": er.substitutions, "deletions": er.deletions,
        "insertions": er.insertions, "ser": 100.0 * er.sentence_error_rate, "ref_labels": er.ref_length,
        "utterances": er.sentences,
    }
    if with_lm is not None:
        figures["ler_lm"] = error_rate(refs, with_lm).percent
    return figures

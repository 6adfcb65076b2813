r"""Test figures of a CRF tagger: Viterbi-decode a test set, then score it.

A tagger is any module whose ``model(*inputs, lengths, **model_kwargs)`` returns a distribution
over tag sequences with ``argmax (B, t)``, the best tags (Viterbi), e.g. a
:class:`~ebms.structured.LinearChainCRF` as :class:`ebms.models.NeuralCRFTagger` (inputs ``words
(B, t)`` and optionally ``chars (B, t, L)``; pass ``model_kwargs={"constrained": True}`` for
BIO-constrained decoding) and :class:`ebms.models.FeatureCRF` (inputs ``ids, values (B, t, F)``)
return. :func:`decode_tags` runs it over a test set in length-sorted chunks (each chunk cut to its
own longest sentence, so short sentences carry little padding) with the model in eval mode (no
dropout), and :func:`evaluate_tagger` scores the decoded tags against the gold ones:

* ``precision``, ``recall``, ``f1``: chunk scores of :func:`ebms.metrics.chunking.conlleval`
  (percent), ``accuracy``: token accuracy (percent);
* ``token_f1`` (with ``token_f1_labels``): the support-weighted token F1 over those labels
  (:func:`ebms.metrics.tagging.token_f1`), in percent; over every tag but ``O`` it is 100 x the
  sklearn-crfsuite tutorial's NER figure.

The test inputs are either padded tensors ``(N, T, ...)`` sharing their first axis, or an
:class:`~ebms.structured.features.EncodedCorpus` (feature-CRF attributes without padding; each
chunk is padded on its own). Cost: one forward and one Viterbi pass ``O(N T C^2)`` in chunks of
``chunk_size`` sentences, then ``O(tokens)`` for the scores.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from ebms._checks import check_int, check_tensor
from ebms.metrics.chunking import conlleval
from ebms.metrics.tagging import token_f1
from ebms.structured.features import EncodedCorpus

__all__ = ["decode_tags", "evaluate_tagger"]

TaggerInputs = tuple[Tensor, ...] | EncodedCorpus


def _model_device(model: nn.Module) -> torch.device:
    for t in (*model.parameters(), *model.buffers()):
        return t.device
    return torch.device("cpu")


def _check_inputs(inputs: Any, lengths: Any) -> int:
    check_tensor(lengths, "lengths")
    if lengths.dim() != 1 or lengths.is_floating_point():
        raise ValueError(f"lengths: expected a (N,) integer tensor; got {tuple(lengths.shape)} {lengths.dtype}")
    n = int(lengths.shape[0])
    if n and int(lengths.min()) < 1:
        raise ValueError(f"lengths: expected every sentence to have at least 1 token; got min {int(lengths.min())}")
    if isinstance(inputs, EncodedCorpus):
        if len(inputs) != n or not torch.equal(inputs.lengths, lengths.to(inputs.lengths.device)):
            raise ValueError(f"lengths: expected the corpus's {len(inputs)} sentence lengths; got {n} lengths "
                             f"that differ from them")
        return n
    if not isinstance(inputs, (tuple, list)) or not inputs:
        raise TypeError(f"inputs: expected a non-empty tuple of padded (N, T, ...) tensors or an EncodedCorpus; "
                        f"got {type(inputs).__name__}")
    t = int(lengths.max()) if n else 0
    for i, x in enumerate(inputs):
        check_tensor(x, f"inputs[{i}]", min_dim=2)
        if x.shape[0] != n or x.shape[1] < t:
            raise ValueError(f"inputs[{i}]: expected shape ({n}, >= {t}, ...) (lengths: {n} sentences, the longest "
                             f"{t}); got {tuple(x.shape)}")
    return n


def _chunk_inputs(inputs: TaggerInputs, idx: Tensor, t: int, device: torch.device) -> list[Tensor]:
    if isinstance(inputs, EncodedCorpus):
        rows = list(inputs.padded(idx.to(inputs.lengths.device))[:2])
    else:
        rows = [x[idx.to(x.device), :t] for x in inputs]
    return [x.to(device) for x in rows]


def decode_tags(model: nn.Module, inputs: TaggerInputs, lengths: Tensor, tag_names: Sequence[str], *,
                chunk_size: int = 512, model_kwargs: Mapping[str, Any] | None = None) -> list[list[str]]:
    """The best tags of every sentence, as names: ``out[i]`` has ``lengths[i]`` entries.

    Args:
        model: the tagger (module docstring); put in eval mode while decoding, its mode restored
            afterwards. Chunks are moved to the device of its first parameter.
        inputs: padded tensors ``(N, T, ...)`` or an :class:`~ebms.structured.features.EncodedCorpus`.
        lengths: ``(N,)`` integer sentence lengths ``>= 1``.
        tag_names: the name of each tag id.
        chunk_size: sentences per length-sorted chunk.
        model_kwargs: keywords of every model call, e.g. ``{"constrained": True}``.

    Raises:
        TypeError, ValueError: inputs or lengths of the wrong type or shape (naming the argument).
    """
    n = _check_inputs(inputs, lengths)
    check_int(chunk_size, "chunk_size", minimum=1)
    names = list(tag_names)
    if not names:
        raise ValueError("tag_names: expected at least one tag name; got none")
    kw = dict(model_kwargs or {})
    device = _model_device(model)
    lengths = lengths.cpu().long()
    pred: list[list[str]] = [[] for _ in range(n)]
    was_training = model.training
    model.eval()  # no dropout while decoding
    try:
        with torch.no_grad():
            for idx in torch.argsort(lengths, stable=True).split(chunk_size):
                ln = lengths[idx]
                t = int(ln.max())
                best = model(*_chunk_inputs(inputs, idx, t, device), ln.to(device), **kw).argmax
                for row, i, k in zip(best.tolist(), idx.tolist(), ln.tolist()):
                    pred[i] = [names[c] for c in row[:k]]
    finally:
        model.train(was_training)
    return pred


def evaluate_tagger(model: nn.Module, inputs: TaggerInputs, lengths: Tensor, gold: Sequence[Sequence[str]],
                    tag_names: Sequence[str], *, token_f1_labels: Sequence[str] | None = None,
                    chunk_size: int = 512, model_kwargs: Mapping[str, Any] | None = None) -> dict[str, float]:
    """Chunk and token figures (percent) of the tagger on a test set (module docstring).

    Args:
        model, inputs, lengths, tag_names, chunk_size, model_kwargs: as :func:`decode_tags`.
        gold: the true tag names of every sentence (IOB1 or IOB2 as ``conlleval`` reads them).
        token_f1_labels: the labels of ``token_f1`` (e.g. every tag but ``"O"``); ``None``: no
            ``token_f1``.

    Returns:
        ``{"precision", "recall", "f1", "accuracy"}`` and, with ``token_f1_labels``,
        ``"token_f1"``, in that order.

    Raises:
        ValueError: ``gold`` not one tag list per sentence of the right lengths (from
            :func:`~ebms.metrics.chunking.conlleval`), empty ``token_f1_labels``.
    """
    pred = decode_tags(model, inputs, lengths, tag_names, chunk_size=chunk_size, model_kwargs=model_kwargs)
    scores = conlleval(gold, pred)
    out = {"precision": scores.precision, "recall": scores.recall, "f1": scores.f1, "accuracy": scores.accuracy}
    if token_f1_labels is not None:
        out["token_f1"] = 100.0 * float(token_f1(gold, pred, labels=list(token_f1_labels), average="weighted"))
    return out

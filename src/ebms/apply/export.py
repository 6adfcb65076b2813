"""Trained models as :func:`torch.export.export` programs, and as ONNX files where the operator set allows.

An exported program holds the weights and the graph, runs without ebms (``torch.export.load(path).module()``)
and is what deployment tools (ExecuTorch, AOTInductor, ONNX) start from. Three kinds of model are exported,
each through a module whose inputs and outputs are plain tensors:

* an energy ``E(x)`` (:func:`export_energy`): ``x (B, *event) -> (B,)``, the batch size free;
* a neural language model (:func:`export_lm`): :class:`SentenceLogProb`, padded token ids ``(B, T)`` and
  lengths ``(B,)`` -> ``log p(y)`` with ``</s>`` ``(B,)``, ``T`` fixed at export (an LSTM is unrolled over
  it), the batch size free;
* a CRF's Viterbi decoding (:func:`export_viterbi`): :class:`ViterbiDecoder`, emissions ``(B, T, C)`` and
  lengths ``(B,)`` -> tags ``(B, T)`` (``-1`` beyond each length) and best scores ``(B,)``, ``T`` fixed.

:func:`to_onnx` writes any of these modules as an ONNX file (the optional packages ``onnx`` and
``onnxscript``: ``pip install 'ebms[export]'``). Each is round-tripped in ``tests/apply/test_export.py``:
the exported program, saved and loaded again, gives the model's own outputs, and ONNX Runtime those
outputs within float32 rounding.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.export import Dim, ExportedProgram

from ebms._checks import check_int
from ebms.models.crf_tagger import NeuralCRFTagger
from ebms.models.lm import AutoregressiveLM
from ebms.structured import CRF, viterbi_tags

__all__ = ["SentenceLogProb", "ViterbiDecoder", "export_energy", "export_lm", "export_viterbi", "to_onnx"]

#: the largest batch an exported program accepts (torch.export needs a bound for a free dimension).
MAX_BATCH = 1 << 20


def _batch() -> Any:
    return Dim("batch", min=1, max=MAX_BATCH)


def _eval_copy_check(model: nn.Module, name: str) -> None:
    if not isinstance(model, nn.Module):
        raise TypeError(f"{name}: expected a torch.nn.Module; got {type(model).__name__}")
    if model.training:
        raise ValueError(f"{name}: the module is in training mode (dropout and batch statistics would be traced as "
                         f"they are now); call .eval() first")


def export_energy(energy: nn.Module, example: Tensor) -> ExportedProgram:
    """The program of ``energy``'s forward ``x (B, *event) -> (B,)``, the batch size free.

    Args:
        energy: an energy (any module whose forward takes one tensor), in eval mode.
        example: an input ``(B, *event)`` with ``B >= 2`` (torch.export treats a size of 1 as fixed).

    Raises:
        ValueError: the module is in training mode, or ``example`` has fewer than 2 rows.
    """
    _eval_copy_check(energy, "energy")
    if not isinstance(example, Tensor) or example.dim() < 1 or example.shape[0] < 2:
        raise ValueError(f"example: expected a tensor (B, *event) with B >= 2; got "
                         f"{tuple(example.shape) if isinstance(example, Tensor) else type(example).__name__}")
    return torch.export.export(energy, (example,), dynamic_shapes=({0: _batch()},))


class SentenceLogProb(nn.Module):
    """``log p(y)`` of padded sentences under an autoregressive LM, tensors in and out (for export).

    The same figure as :meth:`ebms.models.lm.AutoregressiveLM.log_prob` (``</s>`` included), computed
    without host synchronisation: ``tokens (B, T)`` long (entries beyond a length are ignored),
    ``lengths (B,)`` long in ``[0, T]`` -> ``(B,)``.

    Args:
        lm: the language model (``forward(inputs) -> (logits, state)``), in eval mode.
    """

    def __init__(self, lm: AutoregressiveLM) -> None:
        super().__init__()
        if not isinstance(lm, AutoregressiveLM):
            raise TypeError(f"lm: expected an ebms.models.lm.AutoregressiveLM; got {type(lm).__name__}")
        self.lm = lm

    def forward(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        width = tokens.shape[1]
        pos = torch.arange(width + 1, device=tokens.device)
        bos = self.lm.boundary
        y = tokens.masked_fill(pos[:width] >= lengths[:, None], bos)
        logits = self.lm(F.pad(y, (1, 0), value=bos))[0]  # (B, T + 1, V)
        targets = F.pad(y, (0, 1), value=bos)
        per = logits.log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # ONNX-friendly, = cross-entropy
        return torch.where(pos <= lengths[:, None], per, per.new_zeros(())).sum(-1)


def export_lm(lm: AutoregressiveLM, length: int) -> ExportedProgram:
    """The program of :class:`SentenceLogProb` for sentences padded to ``length`` tokens, the batch size free.

    Args:
        lm: the language model, in eval mode.
        length: ``T``, the padded width every call must have (shorter sentences pass their ``lengths``);
            at most the model's ``max_length`` when it has one.

    Raises:
        ValueError: the model is in training mode, or ``length`` is out of range.
    """
    scorer = SentenceLogProb(lm)
    _eval_copy_check(lm, "lm")
    check_int(length, "length", minimum=1)
    if lm.max_length is not None and length + 1 > lm.max_length:
        raise ValueError(f"length: this model reads at most max_length={lm.max_length} positions (<s> and "
                         f"{lm.max_length - 1} tokens); got {length}")
    tokens = torch.ones(2, length, dtype=torch.long)
    lengths = torch.tensor([length, max(length - 1, 0)])
    return torch.export.export(scorer, (tokens, lengths), dynamic_shapes=({0: _batch()}, {0: _batch()}))


class ViterbiDecoder(nn.Module):
    """Viterbi decoding of a CRF as a module of tensors (for export): emissions ``(B, T, C)`` and lengths
    ``(B,)`` in ``[1, T]`` -> tags ``(B, T)`` long (``-1`` beyond each length) and best scores ``(B,)``.

    Args:
        crf: a :class:`ebms.structured.CRF` layer (its ``batch_first`` is ignored: emissions are
            ``(B, T, C)``), or a :class:`ebms.models.crf_tagger.NeuralCRFTagger` (its potentials, with its
            ``allowed`` masks when ``constrained``: the decoding ``ebms eval`` and ``ebms tag`` use).
        constrained: apply a tagger's BIO masks.
    """

    transitions: Tensor
    start: Tensor | None
    end: Tensor | None

    def __init__(self, crf: CRF | NeuralCRFTagger, *, constrained: bool = True) -> None:
        super().__init__()
        if isinstance(crf, CRF):
            self.transitions, self.start, self.end = crf.transitions, crf.start_transitions, crf.end_transitions
            return
        if not isinstance(crf, NeuralCRFTagger):
            raise TypeError(f"crf: expected an ebms.structured.CRF or a NeuralCRFTagger; got {type(crf).__name__}")
        tr: Tensor = crf.transitions
        start: Tensor | None = crf.start
        if constrained and crf.allowed is not None:
            tr = tr.masked_fill(~crf.allowed, float("-inf"))
        if constrained and crf.allowed_start is not None:
            start = (torch.zeros_like(tr[0]) if start is None else start).masked_fill(~crf.allowed_start, float("-inf"))
        self.transitions = nn.Parameter(tr.detach().clone(), requires_grad=False)
        self.start = None if start is None else nn.Parameter(start.detach().clone(), requires_grad=False)
        self.end = crf.end

    def forward(self, emissions: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        dtype = torch.promote_types(emissions.dtype, self.transitions.dtype)
        cast = (lambda p: None if p is None else p.to(dtype))
        return viterbi_tags(emissions.to(dtype), self.transitions.to(dtype), lengths, cast(self.start),
                            cast(self.end))


def export_viterbi(crf: CRF | NeuralCRFTagger, length: int, *, constrained: bool = True) -> ExportedProgram:
    """The program of :class:`ViterbiDecoder` for emissions of ``length`` steps, the batch size free.

    Raises:
        ValueError: ``length`` < 1.
    """
    decoder = ViterbiDecoder(crf, constrained=constrained).eval()
    check_int(length, "length", minimum=1)
    c = decoder.transitions.shape[0]
    em = torch.zeros(2, length, c, dtype=decoder.transitions.dtype)
    lengths = torch.tensor([length, 1])
    return torch.export.export(decoder, (em, lengths), dynamic_shapes=({0: _batch()}, {0: _batch()}))


def to_onnx(program: ExportedProgram, path: str | os.PathLike[str]) -> Path:
    """Write an exported program (from this module's ``export_*``) as an ONNX file.

    Needs the optional packages ``onnx`` and ``onnxscript`` (``pip install 'ebms[export]'``); run the file
    with ONNX Runtime. The batch size stays free.

    Raises:
        ImportError: ``onnxscript`` or ``onnx`` is not installed (the message says how to install them).
    """
    try:
        import onnx  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError:
        raise ImportError("to_onnx needs the onnx and onnxscript packages: pip install 'ebms[export]'") from None
    out = Path(path)
    onnx_program = torch.onnx.export(program, dynamo=True)
    assert onnx_program is not None
    onnx_program.save(str(out))
    return out

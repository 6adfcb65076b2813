r"""A length-conditional proposal from an autoregressive LM, for per-length :math:`\log Z_l` estimation.

An autoregressive LM ``p`` (LSTM, Transformer: ``lm(inputs, state) -> (logits, state)``, the
:class:`~ebms.models.lm.AutoregressiveLM` contract; or an n-gram with ``next_log_probs(prefixes)``,
e.g. :class:`~ebms.distributions.BackoffNGram`) is a law over all lengths. At a fixed length
:math:`l` the proposal takes its next-token law with ``</s>`` removed:

.. math::  q(x \mid l) = \prod_{t=1}^{l} \frac{p(x_t \mid x_{<t})}{1 - p(\texttt{</s>} \mid x_{<t})},

which is normalised over :math:`\{1..V-1\}^l` for every :math:`l`, is sampled token by token with
the boundary logit masked, and keeps the LM's shape inside a sentence (a good importance proposal
when the LM is close to the TRF). It is not :math:`p(x \mid |x| = l)`, which would need the mass of
all completions of each prefix; it does not need to be: any normalised :math:`q(\cdot \mid l)`
gives unbiased :math:`\hat Z_l`.

Cost: ``log_prob`` one LM pass over ``B`` sentences; ``sample`` one incremental LM step per
position (``max(lengths)`` steps for the whole batch). An n-gram scores the ``V`` outcomes after
every prefix: ``O(B T V)`` time for both, in ``max(lengths)`` calls of ``(B, V)`` each.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from ebms._checks import check_int
from ebms.capabilities import HasVocabSize, SupportsNextLogProbs
from ebms.distributions import sample_categorical
from ebms.sequences import Sequences

#: largest (rows x positions x words) block of logits ``LengthConditionalLM.log_prob`` scores at once.
_CHUNK = 1 << 22


class LengthConditionalLM:
    r"""Length-conditional proposal :math:`q(x \mid l)` from an autoregressive LM (module docstring).

    Args:
        lm: an autoregressive LM with ``vocab_size`` and ``lm(inputs (B, S), state) -> (logits (B, S, V),
            state)`` (e.g. :class:`~ebms.models.lm.LSTMLM`, :class:`~ebms.models.lm.TransformerLM`),
            used in its current mode (call ``eval()`` first for its law without dropout); or an
            n-gram with ``vocab_size`` and ``next_log_probs(prefixes: Sequences) -> (B, V)``
            (:class:`~ebms.distributions.BackoffNGram`).
        boundary: the id of ``<s>``/``</s>`` (0 by the token contract).

    Example:
        >>> import torch
        >>> from ebms.models.lm import LSTMLM
        >>> from ebms.sequences import Sequences
        >>> q = LengthConditionalLM(LSTMLM(5, embedding_dim=4, hidden_size=8).eval())
        >>> x = q.sample(3, lengths=torch.tensor([1, 2, 4]), generator=torch.Generator().manual_seed(0))
        >>> x.lengths.tolist(), bool((x.tokens[x.mask()] > 0).all()), q.log_prob(x).shape
        ([1, 2, 4], True, torch.Size([3]))
    """

    conditional_on_length = True

    def __init__(self, lm: Any, *, boundary: int = 0) -> None:
        self.ngram = isinstance(lm, SupportsNextLogProbs)
        if not (callable(lm) or self.ngram) or not (isinstance(lm, HasVocabSize) and isinstance(lm.vocab_size, int)):
            raise TypeError(f"lm: expected an autoregressive LM with vocab_size and lm(inputs, state) -> (logits, "
                            f"state), or an n-gram with vocab_size and next_log_probs; got {type(lm).__name__}")
        self.lm: Any = lm
        self.vocab_size: int = lm.vocab_size
        self.boundary = check_int(boundary, "boundary", minimum=0)
        if self.boundary >= self.vocab_size:
            raise ValueError(f"boundary: expected an id in [0, {self.vocab_size - 1}]; got {boundary}")

    def _device(self) -> torch.device:
        if isinstance(self.lm, nn.Module):
            for p in (*self.lm.parameters(), *self.lm.buffers()):
                return p.device
        return torch.device("cpu")

    def _ngram_next(self, tokens: Tensor, rows: Tensor, t: int) -> Tensor:
        """Next-token log-probabilities without ``</s>`` after the prefixes ``tokens[rows, :t]``, ``(R, V)``."""
        prefix = tokens[rows, : max(t, 1)] if t > 0 else tokens.new_zeros(rows.numel(), 1)
        lengths = torch.full((rows.numel(),), t, dtype=torch.long, device=tokens.device)
        return self._log_softmax(self.lm.next_log_probs(Sequences(prefix, lengths, validate=False)))

    def _log_softmax(self, logits: Tensor) -> Tensor:
        """Next-token log-probabilities without ``</s>``, float64 ``(..., V)``."""
        z = logits.double().clone()
        z[..., self.boundary] = -math.inf
        return torch.log_softmax(z, -1)

    def log_prob(self, x: Sequences) -> Tensor:
        r""":math:`\log q(x \mid |x|)`, float64 ``(B,)`` (one LM pass over the positions up to the longest
        sentence, in row chunks of at most ``2^22`` logits)."""
        x = Sequences.coerce(x, name="x", pairs=False, expected="an ebms.sequences.Sequences")
        x.check_vocabulary(self.vocab_size, "x", boundary=self.boundary, where="sequence", expected=(
            f"expected token ids in [0, {self.vocab_size}) other than the boundary {self.boundary} within lengths"))
        real = x.mask()
        tok = (x.tokens * real).to(self._device())
        if tok.shape[1] == 0:
            return torch.zeros(x.batch_size, dtype=torch.float64, device=tok.device)
        if self.ngram:
            out = torch.zeros(x.batch_size, dtype=torch.float64, device=tok.device)
            lengths = x.lengths.to(tok.device)
            with torch.no_grad():
                for t in range(tok.shape[1]):
                    rows = (lengths > t).nonzero().squeeze(1)
                    lp = self._ngram_next(tok, rows, t).to(out.device)
                    out[rows] += lp.gather(1, tok[rows, t].unsqueeze(1)).squeeze(1)
            return out
        # only up to the longest real length, and in row chunks of at most _CHUNK (row, position, word)
        # entries: a padded (B, T, V) float64 log-softmax of a long batch takes gigabytes
        width = int(x.lengths.max())
        tok, real = tok[:, :width], real[:, :width].to(tok.device)
        start = torch.full((x.batch_size, 1), self.boundary, dtype=torch.long, device=tok.device)
        inputs = torch.cat([start, tok[:, :-1]], 1)
        chunk = max(1, _CHUNK // max(1, width * self.vocab_size))
        parts: list[Tensor] = []
        with torch.no_grad():
            for i in range(0, x.batch_size, chunk):
                logits, _ = self.lm(inputs[i:i + chunk], None)
                lp = self._log_softmax(logits).gather(-1, tok[i:i + chunk].unsqueeze(-1)).squeeze(-1)
                parts.append(torch.where(real[i:i + chunk], lp, lp.new_zeros(())).sum(1))
        return torch.cat(parts)

    def sample(self, n: int, generator: torch.Generator | None = None, *, lengths: int | Tensor) -> Sequences:
        """``n`` draws of :math:`q(\\cdot \\mid l)`, ``lengths`` an int or an integer tensor ``(n,)``."""
        check_int(n, "n", minimum=1)
        dev = self._device()
        if isinstance(lengths, Tensor):
            if lengths.dtype.is_floating_point or lengths.dtype == torch.bool or tuple(lengths.shape) != (n,):
                raise ValueError(f"lengths: expected an int or an integer tensor ({n},); got {lengths.dtype} "
                                 f"{tuple(lengths.shape)}")
            ls = lengths.to(dev, torch.long)
        else:
            ls = torch.full((n,), check_int(lengths, "lengths", minimum=0), dtype=torch.long, device=dev)
        if int(ls.min()) < 0:
            raise ValueError(f"lengths: expected values >= 0; got min {int(ls.min())}")
        T = int(ls.max())
        tokens = torch.zeros(n, T, dtype=torch.long, device=dev)
        w = torch.full((n,), self.boundary, dtype=torch.long, device=dev)
        state = None
        if self.ngram:
            with torch.no_grad():
                for t in range(T):
                    rows = (ls > t).nonzero().squeeze(1)
                    tokens[rows, t] = sample_categorical(self._ngram_next(tokens, rows, t), generator).to(dev)
            return Sequences(tokens, ls, validate=False)
        with torch.no_grad():
            for t in range(T):
                logits, state = self.lm(w.unsqueeze(1), state)
                w = sample_categorical(self._log_softmax(logits[:, -1]), generator)
                tokens[:, t] = torch.where(t < ls, w, 0)
        return Sequences(tokens, ls, validate=False)

    def __repr__(self) -> str:
        return f"LengthConditionalLM({type(self.lm).__name__}, vocab_size={self.vocab_size})"

r"""LSTM language model (word or character level).

.. math::  e_t = E[y_{t-1}], \quad h_t = \mathrm{LSTM}(e_t, h_{t-1}), \quad
           p(y_t = v \mid y_{<t}) = \mathrm{softmax}(W\, \mathrm{drop}(h_t) + b)_v,

with ``y_0 = <s>`` (id 0) and ``</s>`` (id 0) as the last outcome (see :mod:`ebms.models.lm`).
Dropout (Zaremba, Sutskever & Vinyals 2014, *Recurrent neural network regularization*) acts on the
embeddings, between LSTM layers and on the top layer's output, in training mode only. Tied weights
(Press & Wolf 2017, *Using the output embedding to improve language models*; Inan, Khosravi & Socher
2017, *Tying word vectors and word classifiers*) use the embedding matrix ``E`` as ``W``; when
``hidden_size != embedding_dim`` a bias-free projection ``H -> embedding_dim`` comes first.

Running text (truncated back-propagation through time, Williams & Peng 1990): ``forward(chunk,
state)`` continues from the :class:`LSTMState` of the previous chunk; detach it between chunks
(:class:`ebms.objectives.AutoregressiveNLL` with ``carry_state=True`` does).

Cost per token: ``O(layers (E H + H^2) + H V)``; sampling carries the hidden state, so a draw
of length ``L`` costs ``L + 1`` such steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence

from ebms._checks import check_bool, check_int, check_probability
from ebms.data.text import unigram_probs
from ebms.models.lm._base import AutoregressiveLM, LMState
from ebms.sequences import Sequences

__all__ = ["LSTMLM", "LSTMState"]


@dataclass(frozen=True)
class LSTMState(LMState):
    """Hidden and cell states, each ``(num_layers, B, hidden_size)``."""

    h: Tensor
    c: Tensor

    @property
    def batch_size(self) -> int:
        return int(self.h.shape[1])

    def detach(self) -> LSTMState:
        return LSTMState(self.h.detach(), self.c.detach())

    def select(self, index: Tensor) -> LSTMState:
        return LSTMState(self.h[:, index], self.c[:, index])


class LSTMLM(AutoregressiveLM):
    """LSTM sentence LM over ids ``0 .. V-1`` (id 0 = ``<s>``/``</s>``; see the module docstring).

    Args:
        vocab_size: ``V >= 2`` (the boundary id included).
        embedding_dim: width ``E`` of the input embeddings.
        hidden_size: LSTM width ``H``.
        num_layers: stacked LSTM layers.
        dropout: dropout probability in ``[0, 1)`` (training mode only).
        tie_weights: share the input embedding with the output layer.

    Parameters: ``embedding (V, E)``, ``lstm``, ``projection`` (``H -> E``, only when tied with
    ``H != E``), ``decoder`` (``Linear(E or H, V)``; its weight *is* ``embedding.weight`` when tied).
    Initialisation: embedding and decoder weights uniform in ``[-0.1, 0.1]``, decoder bias 0.

    Example:
        >>> import torch
        >>> lm = LSTMLM(5, embedding_dim=8, hidden_size=8, num_layers=1).eval()
        >>> y = lm.sample(3, generator=torch.Generator().manual_seed(0))
        >>> lm.log_prob(y).shape
        torch.Size([3])
    """

    def __init__(self, vocab_size: int, *, embedding_dim: int = 256, hidden_size: int = 256, num_layers: int = 2,
                 dropout: float = 0.0, tie_weights: bool = False) -> None:
        super().__init__()
        self.vocab_size = check_int(vocab_size, "vocab_size", minimum=2)
        self.embedding_dim = check_int(embedding_dim, "embedding_dim", minimum=1)
        self.hidden_size = check_int(hidden_size, "hidden_size", minimum=1)
        self.num_layers = check_int(num_layers, "num_layers", minimum=1)
        self.dropout = check_probability(dropout, "dropout", open_high=True)
        self.tie_weights = check_bool(tie_weights, "tie_weights")
        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        self.lstm = nn.LSTM(embedding_dim, hidden_size, num_layers, batch_first=True,
                            dropout=self.dropout if num_layers > 1 else 0.0)
        self.drop = nn.Dropout(self.dropout)
        self.projection = (nn.Linear(hidden_size, embedding_dim, bias=False)
                           if tie_weights and hidden_size != embedding_dim else None)
        self.decoder = nn.Linear(embedding_dim if tie_weights else hidden_size, vocab_size)
        nn.init.uniform_(self.embedding.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        if tie_weights:
            self.decoder.weight = self.embedding.weight
        else:
            nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    @classmethod
    def unigram_noise(cls, corpus: Sequences, vocab_size: int, hidden_size: int, *, seed: int) -> LSTMLM:
        """DNCE's noise LM at its start: one LSTM layer of ``hidden_size`` units (embedding as wide),
        initialised from ``seed`` (the global generator's state is left as it was), its output bias set
        to the unigram law of ``corpus`` with ``</s>`` (:meth:`init_unigram`)."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(check_int(seed, "seed"))
            lm = cls(vocab_size, embedding_dim=hidden_size, hidden_size=hidden_size, num_layers=1)
        lm.init_unigram(unigram_probs(corpus, vocab_size, end=True))
        return lm

    def init_unigram(self, probs: Tensor) -> None:
        r"""Set the output bias to a unigram law, :math:`b_w = \log p_w` (the law the model has while the
        decoder weights are 0; DNCE's usual start for its noise LM: with a zero bias the first draws run
        for about ``V`` tokens before they end).

        Args:
            probs: ``(V,)`` positive probabilities summing to 1, entry 0 that of ``</s>`` (e.g.
                :func:`ebms.data.text.unigram_probs` with ``end=True``).
        """
        ok = isinstance(probs, Tensor) and probs.shape == (self.vocab_size,) and bool((probs > 0).all())
        if not ok or abs(float(probs.double().sum()) - 1.0) > 1e-6:
            got = tuple(probs.shape) if isinstance(probs, Tensor) else type(probs).__name__
            raise ValueError(f"probs: expected positive probabilities ({self.vocab_size},) summing to 1 (add-one "
                             f"counts for unseen words, normalised); got {got}"
                             + (f" summing to {float(probs.double().sum()):.6g}" if ok else ""))
        with torch.no_grad():
            self.decoder.bias.copy_(probs.log())

    def _output(self, h: Tensor) -> Tensor:
        h = self.drop(h)
        if self.projection is not None:
            h = self.projection(h)
        return self.decoder(h)

    def forward(self, inputs: Tensor, state: LMState | None = None) -> tuple[Tensor, LSTMState]:
        """Logits ``(B, S, V)`` after each of ``inputs (B, S)`` and the state after the last input
        (``state``: an :class:`LSTMState` from the previous chunk, or ``None`` for zeros)."""
        self._check_inputs(inputs)
        if state is not None and not isinstance(state, LSTMState):
            raise TypeError(f"state: expected an LSTMState or None; got {type(state).__name__}")
        out, (h, c) = self.lstm(self.drop(self.embedding(inputs)), None if state is None else (state.h, state.c))
        return self._output(out), LSTMState(h, c)

    def _encode(self, histories: Tensor, lengths: Tensor) -> tuple[Tensor, LSTMState]:
        packed = pack_padded_sequence(self.drop(self.embedding(histories)), lengths.cpu(), batch_first=True,
                                      enforce_sorted=False)
        _, (h, c) = self.lstm(packed)  # the final states sit at each row's own length
        return self._output(h[-1]), LSTMState(h, c)

    def extra_repr(self) -> str:
        return f"vocab_size={self.vocab_size}, tie_weights={self.tie_weights}"


r"""What every autoregressive sentence LM shares: scoring, continuation scores and sampling.

A sentence :math:`y = (y_1, \dots, y_L)` of token ids ``>= 1`` has the exact probability

.. math::  \log p(y) = \sum_{t=1}^{L} \log p(y_t \mid \texttt{<s>}, y_{<t})
                       + \log p(\texttt{</s>} \mid \texttt{<s>}, y),

a law over all finite sentences. Id 0 is the boundary: fed as ``<s>`` before the first token,
predicted as ``</s>`` after the last (``ISSUE11`` contract, as :class:`ebms.distributions.NGram`
with ``boundary=0``). A subclass supplies the network — ``forward(inputs, state)`` returning the
next-token logits after every input and the state after the last — and ``_encode`` for a batch
of histories of different lengths; this base turns them into :meth:`AutoregressiveLM.logits`,
:meth:`~AutoregressiveLM.token_log_probs`, :meth:`~AutoregressiveLM.log_prob`,
:meth:`~AutoregressiveLM.continuation_log_prob` and :meth:`~AutoregressiveLM.sample`.

Modes: every method uses the module's current mode. In training mode dropout is active and
``log_prob`` is a random quantity; call ``eval()`` for the model's law (sampling, scoring,
perplexity, use as NCE noise or importance proposal).
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from ebms._checks import check_int
from ebms.distributions import Distribution, sample_categorical
from ebms.models.lm import _steps
from ebms.models.lm._filter import check_filter, filter_logits
from ebms.sequences import Sequences

__all__ = ["AutoregressiveLM", "LMState"]

#: longest draw of ``sample`` when neither the call nor the model bounds it (as ``NGram.sample``)
DEFAULT_MAX_LENGTH = 1024


class LMState(abc.ABC):
    """The recurrent state after a batch of histories (LSTM hidden state, Transformer key/value cache)."""

    @property
    @abc.abstractmethod
    def batch_size(self) -> int:
        """Rows ``B`` the state holds."""

    @abc.abstractmethod
    def detach(self) -> LMState:
        """The same state cut from the autograd graph (truncated BPTT carries it across chunks)."""

    @abc.abstractmethod
    def select(self, index: Tensor) -> LMState:
        """The state of the rows ``index`` (``(B',)`` int64), in that order."""


class AutoregressiveLM(Distribution):
    r"""Base class of the autoregressive sentence LMs (see the module docstring).

    Subclasses set ``vocab_size`` and ``max_length`` (the longest sentence they can score, ``None``
    when unbounded) and implement ``forward`` and ``_encode``.

    Shapes: ``B`` sentences, padded width ``T``, vocabulary ``V`` (id 0 = ``<s>``/``</s>``).
    """

    boundary: ClassVar[int] = 0
    #: declared capability: ``sample(n, prefix=c, per_prefix=m)`` encodes each prefix once for its ``m`` draws
    per_prefix_sampling: ClassVar[bool] = True
    vocab_size: int
    max_length: int | None = None

    # --- what a subclass supplies -------------------------------------------------------------
    @abc.abstractmethod
    def forward(self, inputs: Tensor, state: LMState | None = None) -> tuple[Tensor, LMState]:
        """Next-token logits after each input and the state after the last one.

        Args:
            inputs: ``(B, S)`` int64 ids (``0`` is ``<s>`` at the start of a sentence, or ``</s>``
                followed by the next sentence in running text).
            state: the state returned by the previous call (``None``: start afresh).

        Returns:
            ``(B, S, V)`` logits (position ``s`` gives ``p(next | inputs[:, :s+1], state)``) and the
            new state.
        """

    @abc.abstractmethod
    def _encode(self, histories: Tensor, lengths: Tensor) -> tuple[Tensor, LMState]:
        """Logits ``(B, V)`` after the last real input of each history ``(B, S)`` (``lengths >= 1``)
        and a state from which ``forward`` continues each row after its own last input."""

    # --- helpers ------------------------------------------------------------------------------
    def _dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    def _device(self) -> torch.device:
        return next(self.parameters()).device

    def _sequences(self, x: Any, name: str) -> Sequences:
        """``x`` as validated :class:`Sequences` (a ``(B, T)`` integer tensor is read as full length)."""
        x = Sequences.coerce(x, name=name, pairs=False, tensors=True,
                             expected="an ebms.sequences.Sequences (or an integer tensor (B, T))")
        V = self.vocab_size
        x.check_vocabulary(V, name, boundary=self.boundary, where="sequence", expected=(
            f"expected token ids in [1, {V - 1}] within lengths (id 0 is the boundary <s>/</s>)"))
        return x.to(self._device())

    @staticmethod
    def _check_inputs(inputs: Any, name: str = "inputs") -> Tensor:
        """``inputs`` is a 2-D integer tensor of ids (no host sync: the values are not checked)."""
        if not isinstance(inputs, torch.Tensor):
            raise TypeError(f"{name}: expected an integer tensor (B, S) of token ids; got {type(inputs).__name__}")
        if inputs.dtype.is_floating_point or inputs.is_complex() or inputs.dtype == torch.bool:
            raise TypeError(f"{name}: expected an integer tensor (B, S) of token ids; got dtype {inputs.dtype} "
                            "(ids are never rounded)")
        if inputs.dim() != 2:
            raise ValueError(f"{name}: expected shape (B, S); got {tuple(inputs.shape)}")
        return inputs

    def _check_width(self, longest: int, name: str) -> None:
        if self.max_length is not None and longest > self.max_length:
            raise ValueError(f"{name}: the longest sequence has {longest} tokens; this model scores at most "
                             f"max_length={self.max_length}")

    @staticmethod
    def _real(x: Sequences, width: int) -> Tensor:
        """``(B, width)`` tokens with the padding set to the boundary id."""
        return x.tokens[:, :width].masked_fill(~x.mask()[:, :width], 0)

    # --- scoring ------------------------------------------------------------------------------
    def logits(self, x: Sequences | Tensor) -> Tensor:
        """Next-token logits ``(B, T + 1, V)`` of ``<s> y_1 .. y_T``: position ``t`` scores ``y_{t+1}``
        (``</s>`` at ``t = L``). Positions after ``L`` mean nothing (those beyond the longest sentence are
        0). Cost: one teacher-forced pass."""
        seqs = self._sequences(x, "x")
        B, T = seqs.tokens.shape
        if B == 0:
            return torch.zeros(0, T + 1, self.vocab_size, dtype=self._dtype(), device=self._device())
        width = int(seqs.lengths.max())
        self._check_width(width, "x")
        logits = self(F.pad(self._real(seqs, width), (1, 0), value=self.boundary))[0]
        return F.pad(logits, (0, 0, 0, T - width))

    def token_log_probs(self, x: Sequences | Tensor, *, temperature: float = 1.0, top_k: int | None = None,
                        top_p: float | None = None) -> Tensor:
        r"""Per-position log-probabilities ``(B, T + 1)`` in the model's dtype.

        Position ``t < L``: :math:`\log p(y_{t+1} \mid y_{\le t})`; position ``L``:
        :math:`\log p(\texttt{</s>} \mid y)`; positions after ``L``: 0. With ``temperature``,
        ``top_k`` or ``top_p``, the log-probabilities of the restricted law that :meth:`sample`
        draws from with the same settings (``-inf`` off its support; see
        :func:`~ebms.models.lm.filter_logits`). The padded width ``T`` does not change the values.
        """
        temperature, top_k, top_p = check_filter(temperature, top_k, top_p)
        seqs = self._sequences(x, "x")
        B, T = seqs.tokens.shape
        if B == 0:
            return torch.zeros(0, T + 1, dtype=self._dtype(), device=self._device())
        width = int(seqs.lengths.max())
        self._check_width(width, "x")
        y = self._real(seqs, width)
        logits = self(F.pad(y, (1, 0), value=self.boundary))[0]  # (B, width + 1, V)
        targets = F.pad(y, (0, 1), value=self.boundary)
        if temperature != 1.0 or top_k is not None or top_p is not None:
            logits = filter_logits(logits, temperature=temperature, top_k=top_k, top_p=top_p)
            per = logits.log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        else:  # fused log-softmax and pick: no second (B, T, V) tensor
            per = -F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                   reduction="none").view(targets.shape)
        keep = torch.arange(width + 1, device=per.device) <= seqs.lengths.unsqueeze(1)
        per = torch.where(keep, per, per.new_zeros(()))
        return F.pad(per, (0, T - width))

    def log_prob(self, x: Sequences | Tensor, *, temperature: float = 1.0, top_k: int | None = None,
                 top_p: float | None = None) -> Tensor:
        """Exact ``log p(y)`` of each sentence, ``</s>`` included, ``(B,)`` (restricted law with the
        keywords, as :meth:`token_log_probs`). One host sync (the token check) and one pass."""
        return self.token_log_probs(x, temperature=temperature, top_k=top_k, top_p=top_p).sum(-1)

    def continuation_token_log_probs(self, prefix: Sequences | Tensor, x: Sequences | Tensor, *,
                                     temperature: float = 1.0, top_k: int | None = None,
                                     top_p: float | None = None) -> Tensor:
        r"""``(B, T_x + 1)``: position ``j < L_x`` holds :math:`\log p(x_{j+1} \mid c, x_{\le j})`,
        position ``L_x`` holds :math:`\log p(\texttt{</s>} \mid c, x)`, later positions 0, for the
        prefix ``c`` (row ``b`` of ``prefix``, any length, ``<s>`` implied before it).

        Cost: one teacher-forced pass over ``<s> c x`` (the prefix is recomputed, not cached).
        """
        c, s = self._sequences(prefix, "prefix"), self._sequences(x, "x")
        if c.batch_size != s.batch_size:
            raise ValueError(f"prefix: expected one prefix per continuation ({s.batch_size}); got {c.batch_size}")
        B, T = s.tokens.shape
        if B == 0:
            return torch.zeros(0, T + 1, dtype=self._dtype(), device=self._device())
        joint = int((c.lengths + s.lengths).max())
        if self.max_length is not None and joint > self.max_length:
            raise ValueError(f"prefix, x: a prefix and its continuation have {joint} tokens together; this model "
                             f"scores at most max_length={self.max_length}")
        pw, xw = int(c.lengths.max()), int(s.lengths.max())
        ctok = F.pad(self._real(c, pw), (0, 1))  # one spare column: gathers stay in range
        xtok = F.pad(self._real(s, xw), (0, 1))
        idx = torch.arange(pw + xw, device=s.device)
        P = c.lengths.unsqueeze(1)
        joined = torch.where(idx < P, ctok[:, idx.clamp(max=pw)], xtok.gather(1, (idx - P).clamp(0, xw)))
        whole = self.token_log_probs(Sequences(joined, c.lengths + s.lengths, validate=False),
                                     temperature=temperature, top_k=top_k, top_p=top_p)
        j = torch.arange(xw + 1, device=s.device)
        per = whole.gather(1, P + j)
        per = torch.where(j <= s.lengths.unsqueeze(1), per, per.new_zeros(()))
        return F.pad(per, (0, T - xw))

    def continuation_log_prob(self, prefix: Sequences | Tensor, x: Sequences | Tensor, *, end: bool = True,
                              temperature: float = 1.0, top_k: int | None = None,
                              top_p: float | None = None) -> Tensor:
        r"""``log p(x | c)`` of each continuation, ``(B,)``: the sum of
        :meth:`continuation_token_log_probs`, with the final :math:`\log p(\texttt{</s>} \mid c, x)`
        when ``end`` (the sentence stops after ``x``) and without it otherwise (``x`` is the start of
        a longer continuation, as the fixed-length continuations of residual EBMs).

        ``log_prob(c + x) = continuation_log_prob(empty, c, end=False) + continuation_log_prob(c, x)``.
        """
        per = self.continuation_token_log_probs(prefix, x, temperature=temperature, top_k=top_k, top_p=top_p)
        if not end:
            lengths = x.lengths if isinstance(x, Sequences) else torch.full((per.shape[0],), per.shape[1] - 1)
            last = lengths.to(per.device).unsqueeze(1)
            per = per.scatter(1, last, per.new_zeros(()).expand_as(last))
        return per.sum(-1)

    # --- sampling -----------------------------------------------------------------------------
    def sample(self, n: int, generator: torch.Generator | None = None, *, max_length: int | None = None,
               temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
               prefix: Sequences | Tensor | None = None, truncate: bool = False, per_prefix: int = 1) -> Sequences:
        r"""``n`` sentences drawn ancestrally until ``</s>``, as :class:`~ebms.sequences.Sequences`
        on the model's device (padding 0).

        Exact draws from ``p`` at ``temperature=1`` without top-k/top-p; otherwise from the
        restricted law whose log-probability :meth:`log_prob` gives with the same keywords.

        Args:
            n: number of draws (0 gives an empty batch).
            generator: the only source of randomness (on the model's device).
            max_length: the longest draw; default the model's ``max_length`` less the longest prefix,
                or 1024. A draw still running after it raises, unless ``truncate``.
            temperature, top_k, top_p: see :func:`~ebms.models.lm.filter_logits`.
            prefix: ``n`` prefixes ``c`` (Sequences of ``n`` rows); the draws are continuations
                ``x ~ p(x | c)`` (without the prefix).
            truncate: return unfinished draws cut at ``max_length`` (no longer draws from the law).
            per_prefix: ``m >= 1`` draws per prefix row: ``prefix`` then has ``n / m`` rows, and draws
                ``b m .. b m + m - 1`` continue prefix ``b``. Each prefix is encoded once and its state
                repeated (as many draws from ``n`` copies of the prefixes, without the copies' encoding).

        Cost: the prefixes in one pass, then one incremental step per generated position for
        the rows still running (finished rows leave the batch): the LSTM carries its hidden state
        (``O(H^2)`` per token), the Transformer its key/value cache (``O(t d)`` per token at
        position ``t``, cache memory ``2 L_layers B t d``). One host sync per step.
        """
        n = check_int(n, "n", minimum=0)
        per_prefix = check_int(per_prefix, "per_prefix", minimum=1)
        if per_prefix > 1 and prefix is None:
            raise ValueError(f"per_prefix: {per_prefix} draws per prefix needs prefix=; got no prefix")
        temperature, top_k, top_p = check_filter(temperature, top_k, top_p)
        device = self._device()
        if prefix is None:
            hist, hist_len = torch.zeros(n, 1, dtype=torch.long, device=device), torch.ones(n, dtype=torch.long,
                                                                                             device=device)
        else:
            c = self._sequences(prefix, "prefix")
            if c.batch_size * per_prefix != n:
                want = (f"n={n} prefixes (one per draw)" if per_prefix == 1 else
                        f"n / per_prefix = {n} / {per_prefix} prefixes (per_prefix draws each)")
                raise ValueError(f"prefix: expected {want}; got {c.batch_size}")
            pw = int(c.lengths.max()) if n else 0
            hist, hist_len = F.pad(self._real(c, pw), (1, 0), value=self.boundary), c.lengths + 1
        longest_prefix = hist.shape[1] - 1
        if max_length is None:
            limit = DEFAULT_MAX_LENGTH if self.max_length is None else self.max_length - longest_prefix
        else:
            limit = check_int(max_length, "max_length", minimum=0)
        if self.max_length is not None and longest_prefix + limit > self.max_length:
            raise ValueError(f"max_length: a prefix of {longest_prefix} tokens plus {limit} drawn tokens exceeds "
                             f"the model's max_length={self.max_length}")
        if limit < 0:
            raise ValueError(f"prefix: the longest prefix has {longest_prefix} tokens; the model's max_length is "
                             f"{self.max_length}")
        if n == 0:
            return Sequences(torch.zeros(0, 0, dtype=torch.long, device=device),
                             torch.zeros(0, dtype=torch.long, device=device), validate=False)
        with torch.no_grad():
            return self._draw(hist, hist_len, limit, generator, (temperature, top_k, top_p), truncate, per_prefix)

    # --- step by step: the EARMModel capability (E-ARM, exposure bias) ---------------------------
    def teacher_forced(self, batch: Sequences | tuple[Tensor, Tensor], *,
                       max_length: int | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """``(logits (B, K, V), targets (B, K) int64, mask (B, K) bool)`` of one pass over ``batch``
        (:class:`~ebms.sequences.Sequences` or ``(tokens, lengths)``), ``K`` one more than its longest
        sentence: step ``k < L`` predicts token ``k + 1``, step ``L`` predicts ``</s>``. Rows longer
        than the horizon (``max_length``, else the LM's own) are cut there, without a ``</s>`` step
        (:class:`~ebms.models.lm.LMAdapter` explains the horizon)."""
        return _steps.teacher_forced(self, batch, _steps.horizon(self, max_length))

    def draw(self, batch: Sequences | tuple[Tensor, Tensor], generator: torch.Generator | None, *,
             max_length: int | None = None) -> Any:
        """One draw of the LM's law per row of ``batch``, in ``batch``'s type, in evaluation mode and
        without gradient, cut at ``max_length`` when given, else one token past the batch's longest
        sentence (at most the LM's ``max_length``): what E-ARM compares with the data."""
        return _steps.draw(self, batch, generator, max_length, _steps.horizon(self, max_length))

    def _draw(self, hist: Tensor, hist_len: Tensor, limit: int, generator: torch.Generator | None,
              law: tuple[float, int | None, float | None], truncate: bool, per_prefix: int = 1) -> Sequences:
        logits, state = self._encode(hist, hist_len)

        def advance(w: Tensor, state: Any) -> tuple[Tensor, Any]:
            step_logits, state = self(w.unsqueeze(1), state)
            return step_logits[:, 0], state

        return self._draw_loop(logits, state, limit, truncate, per_prefix,
                               lambda out: sample_categorical(filter_logits(out, temperature=law[0], top_k=law[1],
                                                                            top_p=law[2]), generator),
                               advance)

    def _draw_loop(self, out: Tensor, state: Any, limit: int, truncate: bool, per_prefix: int,
                   draw: Callable[[Tensor], Tensor], advance: Callable[[Tensor, Any], tuple[Tensor, Any]]) -> Sequences:
        """The ancestral loop shared by every model: ``draw(out) -> w (A,)`` picks each running row's next
        token from the model's output for its history (``out (A, ...)``: logits, or a hidden state),
        ``advance(w, state) -> (out, state)`` feeds the tokens in; finished rows leave the batch
        (``state.select``). ``out`` and ``state`` hold one row per prefix, repeated ``per_prefix`` times."""
        device = out.device
        n = out.shape[0] * per_prefix
        tokens = torch.zeros(n, limit, dtype=torch.long, device=device)
        lengths = torch.full((n,), limit, dtype=torch.long, device=device)
        rows = torch.arange(n, device=device)  # the draw each running row belongs to
        if per_prefix > 1:  # each prefix encoded once, its state repeated for its draws
            copies = torch.arange(out.shape[0], device=device).repeat_interleave(per_prefix)
            out, state = out[copies], state.select(copies)
        for t in range(limit + 1):
            if t == limit and truncate:
                break
            w = draw(out)
            ended = w == self.boundary
            lengths[rows[ended]] = t
            if t == limit:
                running = int((~ended).sum())
                if running:
                    raise ValueError(f"max_length: {running} of {n} draws had not ended after {limit} tokens; "
                                     "raise max_length, or pass truncate=True to keep them cut")
                break
            tokens[rows, t] = w
            if truncate and t == limit - 1:  # the next output would only decide a cut draw's </s>
                break
            if bool(ended.any()):
                keep = (~ended).nonzero().squeeze(1)
                if keep.numel() == 0:
                    break
                rows, w, state = rows[keep], w[keep], state.select(keep)
            out, state = advance(w, state)
        width = int(lengths.max())
        return Sequences(tokens[:, :width], lengths, validate=False)

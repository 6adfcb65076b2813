r"""Private: exact enumeration for residual LMs on tiny vocabularies, and an n-gram as a base LM.

The horizon law of a continuation (see :mod:`ebms.models.residual_lm`) with horizon ``K`` over
tokens ``1 .. V-1`` has support: every string of length ``l < K`` (followed by ``</s>``) and every
string of length ``K`` (cut there),

.. math::  N = \sum_{l=0}^{K} (V - 1)^l

continuations, listed by :func:`enumerate_continuations` by length, then lexicographically.
:func:`exact_log_z` and :func:`exact_joint_log_probs` score all of them for every prefix in
float64: ``P N`` base and energy evaluations, so keep ``N`` in the thousands.

:class:`NGramContinuations` gives a dense :class:`~ebms.distributions.NGram` (``end=True``) the
continuation methods a residual LM reads from its base (``continuation_token_log_probs`` and
``sample(n, prefix=..., max_length=..., truncate=...)``), so an n-gram with exactly known
probabilities can serve as the base LM or the data law in tests and toy studies.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from ebms._checks import check_int
from ebms._progress import progress_bar
from ebms.distributions import NGram, sample_categorical
from ebms.models.lm import filter_logits
from ebms.sequences import Sequences

if TYPE_CHECKING:
    from ebms.models.residual_lm import ResidualLM

__all__ = ["NGramContinuations", "enumerate_continuations", "exact_joint_log_probs", "exact_log_z"]

#: the most continuations the exact helpers enumerate per prefix.
MAX_ENUMERATION = 200_000


def enumerate_continuations(vocab_size: int, horizon: int) -> Sequences:
    """Every continuation of the horizon law: all strings of length ``< horizon`` and of length
    ``horizon`` over the tokens ``1 .. V-1``, ``(N, horizon)`` padded with 0, by length then
    lexicographically.

    Raises:
        ValueError: ``vocab_size < 2``, ``horizon < 1``, or more than 200 000 continuations.
    """
    V = check_int(vocab_size, "vocab_size", minimum=2)
    K = check_int(horizon, "horizon", minimum=1)
    count = sum((V - 1) ** length for length in range(K + 1))
    if count > MAX_ENUMERATION:
        raise ValueError(f"horizon: {count} continuations over {V - 1} tokens exceed the enumeration limit "
                         f"{MAX_ENUMERATION}; use a smaller vocabulary or horizon")
    rows = [list(w) for length in range(K + 1) for w in itertools.product(range(1, V), repeat=length)]
    return Sequences.from_lists(rows).pad_to(K)


def _scores(model: ResidualLM, prefix: Sequences, batch_size: int, progress: bool = False) -> Tensor:
    """``(P, N)`` float64 ``log p_LM(x | c) - E(c, x)`` over the enumeration, ``batch_size`` rows per call
    (``progress``: a progress bar over the calls)."""
    prefix = Sequences.coerce(prefix, name="prefix", pairs=False, expected="an ebms.sequences.Sequences")
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    if model.horizon is None:
        raise ValueError("model: exact enumeration needs a finite horizon; got horizon=None")
    xs = enumerate_continuations(model.vocab_size, model.horizon)
    P, N = prefix.batch_size, xs.batch_size
    rep = Sequences(prefix.tokens.repeat_interleave(N, 0), prefix.lengths.repeat_interleave(N), validate=False)
    tiled = Sequences(xs.tokens.repeat(P, 1), xs.lengths.repeat(P), validate=False)
    parts = []
    starts = range(0, P * N, batch_size)
    for start in progress_bar(starts, desc="exact log Z", enabled=progress, leave=False, unit="call"):
        c, x = rep[start:start + batch_size], tiled[start:start + batch_size]
        parts.append(model.base_log_prob(c, x).double() - model.energy(c, x).double())
    out = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)
    return out.view(P, N)


def exact_log_z(model: ResidualLM, prefix: Sequences, *, batch_size: int = 65536, progress: bool = False) -> Tensor:
    r"""``(P,)`` float64 :math:`\log Z(c) = \log\sum_x p_{LM}(x \mid c)\, e^{-E(c, x)}` by enumeration
    (differentiable in the energy's parameters). Cost: ``P N`` scores in calls of ``batch_size`` rows,
    ``N`` as in :func:`enumerate_continuations`; ``progress``: a progress bar over the calls."""
    return torch.logsumexp(_scores(model, prefix, batch_size, progress), 1)


def exact_joint_log_probs(model: ResidualLM, prefix: Sequences, *, batch_size: int = 65536,
                          progress: bool = False) -> Tensor:
    r"""``(P, N)`` float64 :math:`\log p_\theta(x \mid c)` of every enumerated continuation
    (:func:`enumerate_continuations` order); each row's exponentials sum to 1."""
    s = _scores(model, prefix, batch_size, progress)
    return s - torch.logsumexp(s, 1, keepdim=True)


class NGramContinuations:
    """Continuation scores and prefix-conditioned draws of a dense ``end=True``
    :class:`~ebms.distributions.NGram` (reads its table at every call; holds no tensors).

    Cost: scoring ``O(B (T_c + T_x) n)``; sampling one table lookup per step, ``O(n_draws V)``.
    """

    #: declared (:class:`~ebms.capabilities.SupportsContinuations`): no ``per_prefix=`` form of ``sample``
    per_prefix_sampling: ClassVar[bool] = False

    def __init__(self, ngram: NGram) -> None:
        if not ngram.end or ngram.boundary != 0 or not ngram.normalised:
            raise ValueError("base: an NGram base must be a normalised sentence law with boundary=0 and end=True; "
                             f"got {ngram!r}")
        self.ngram = ngram
        self.vocab_size = int(ngram.vocab_size)

    def _check(self, s: Sequences, name: str) -> Sequences:
        s = Sequences.coerce(s, name=name, pairs=False, expected="an ebms.sequences.Sequences")
        return s.check_vocabulary(self.vocab_size, name, boundary=0, where="row").to(self.ngram.table.device)

    def continuation_token_log_probs(self, prefix: Sequences, x: Sequences) -> Tensor:
        r"""``(B, T_x + 1)`` as :meth:`AutoregressiveLM.continuation_token_log_probs`: position ``j < L_x``
        is :math:`\log p(x_{j+1} \mid c, x_{\le j})`, position ``L_x`` is :math:`\log p(\texttt{</s>} \mid c, x)`."""
        c, s = self._check(prefix, "prefix"), self._check(x, "x")
        if c.batch_size != s.batch_size:
            raise ValueError(f"prefix: expected one prefix per continuation ({s.batch_size}); got {c.batch_size}")
        n, V = self.ngram.order, self.vocab_size
        B, T = s.tokens.shape
        joined = torch.cat([c.tokens.masked_fill(~c.mask(), 0), s.tokens.new_zeros(B, T + 1)], 1)
        P = c.lengths.unsqueeze(1)
        j = torch.arange(T + 1, device=s.device)
        xtok = F.pad(s.tokens.masked_fill(~s.mask(), 0), (0, 1))  # the </s> outcome at L_x (and padding) is 0
        target_pos = P + j  # where x_{j+1} sits in ``c x``
        joined = joined.scatter(1, target_pos, xtok)
        padded = F.pad(joined, (n - 1, 0))  # <s> history before the prefix
        h = torch.zeros(B, T + 1, dtype=torch.long, device=s.device)
        for i in range(n - 1):
            h = h * V + padded.gather(1, target_pos + i)
        table = self.ngram.table.reshape(-1)
        per = table[h * V + xtok]
        return torch.where(j <= s.lengths.unsqueeze(1), per, per.new_zeros(()))

    def sample(self, n: int, generator: torch.Generator | None = None, *, max_length: int | None = None,
               temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
               prefix: Sequences | None = None, truncate: bool = False) -> Sequences:
        """``n`` continuations of ``prefix`` (``n`` rows) drawn ancestrally, as
        :meth:`AutoregressiveLM.sample` (``truncate``: draws still running at ``max_length`` are cut)."""
        n = check_int(n, "n", minimum=0)
        if prefix is None:
            prefix = Sequences(torch.zeros(n, 0, dtype=torch.long))
        c = self._check(prefix, "prefix")
        if c.batch_size != n:
            raise ValueError(f"prefix: expected n={n} prefixes (one per draw); got {c.batch_size}")
        limit = 1024 if max_length is None else check_int(max_length, "max_length", minimum=0)
        order, V, dev = self.ngram.order, self.vocab_size, c.device
        padded = F.pad(c.tokens.masked_fill(~c.mask(), 0), (order - 1, 0))
        h = torch.zeros(n, dtype=torch.long, device=dev)
        for i in range(order - 1):
            h = h * V + padded.gather(1, (c.lengths + i).unsqueeze(1)).squeeze(1)
        rows = self.ngram.table.reshape(-1, V)
        H = rows.shape[0]
        tokens = torch.zeros(n, limit, dtype=torch.long, device=dev)
        lengths = torch.full((n,), limit, dtype=torch.long, device=dev)
        alive = torch.ones(n, dtype=torch.bool, device=dev)
        for t in range(limit + 1):
            if t == limit and truncate:
                break
            w = sample_categorical(filter_logits(rows[h], temperature=temperature, top_k=top_k, top_p=top_p),
                                   generator)
            ended = alive & (w == 0)
            lengths = torch.where(ended, t, lengths)
            alive = alive & ~ended
            if not bool(alive.any()):
                break
            if t == limit:
                raise ValueError(f"max_length: {int(alive.sum())} of {n} draws had not ended after {limit} tokens; "
                                 "raise max_length, or pass truncate=True to keep them cut")
            tokens[:, t] = torch.where(alive, w, 0)
            h = torch.where(alive, (h * V + w) % H if order > 1 else h, h)
        width = int(lengths.max()) if n else 0
        return Sequences(tokens[:, :width], lengths, validate=False)

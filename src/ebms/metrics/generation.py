r"""Figures of generated text: n-gram diversity, repetition, pairwise oracle preference, log-prob gap.

Inputs are generated token sequences, as :class:`~ebms.sequences.Sequences` (padding dropped) or
lists of token lists (any hashable tokens: ids or words). An ``n``-gram never crosses two
sequences. With :math:`G_n(s)` the multiset of ``n``-grams of sequence ``s`` (``L - n + 1`` of them):

* :func:`distinct_n` — corpus level, Li et al. (2016):
  :math:`|\bigcup_s \operatorname{set} G_n(s)| \,/\, \sum_s |G_n(s)|`.
* :func:`unique_ngram_fraction` — within each sequence, then averaged over the sequences with at
  least ``n`` tokens: :math:`\frac{1}{|S|}\sum_s |\operatorname{set} G_n(s)| / |G_n(s)|`
  (``1 - seq-rep-n`` of Welleck et al. 2020). ×100 is the "% unique n-grams" of a continuation
  that Deng et al. (2020, Fig. 2 right) report for n = 1..4: repetition inside a passage.
* :func:`repetition_rate` — share of tokens that repeat one of the previous ``window`` tokens of the
  same sequence (all earlier ones by default), pooled over all tokens (``rep/l`` of Welleck et al.).
* :func:`oracle_preference` — paired comparison of two systems by a score (an oracle
  log-likelihood, a constraint check...), the analogue of the paper's human evaluation (Table 2):
  share of items where ``b`` scores strictly higher, ties, and the exact one-sided binomial test
  of "b wins more than half of the items".
* :func:`log_prob_gap` — mean model log-probability of the model's own samples minus that of real
  data (Fig. 3: 21.64 for the base LM, 6.20 for the joint model; smaller = better matched).

Undefined figures (no ``n``-gram at all, an empty score list) raise ``ValueError``; nothing
returns NaN.

References: Li, Galley, Brockett, Gao, Dolan (2016), "A Diversity-Promoting Objective Function for
Neural Conversation Models", NAACL; Welleck, Kulikov, Roller, Dinan, Cho, Weston (2020), "Neural
Text Generation with Unlikelihood Training", ICLR; Deng, Bakhtin, Ott, Szlam, Ranzato (2020),
"Residual Energy-Based Models for Text Generation", ICLR.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ebms._checks import check_int
from ebms.sequences import Sequences

__all__ = [
    "LogProbGap",
    "PreferenceTest",
    "binomial_upper_tail",
    "distinct_n",
    "log_prob_gap",
    "oracle_preference",
    "repetition_rate",
    "unique_ngram_fraction",
]

TokenLists = Sequences | Iterable[Sequence[Hashable]]


def _token_lists(sequences: Any, name: str = "sequences") -> list[list[Hashable]]:
    if isinstance(sequences, Sequences):
        return sequences.tolist()  # type: ignore[return-value]
    if isinstance(sequences, (str, bytes, Tensor)) or not isinstance(sequences, Iterable):
        raise TypeError(f"{name}: expected ebms.sequences.Sequences or a list of token lists; "
                        f"got {type(sequences).__name__}")
    rows = []
    for i, row in enumerate(sequences):
        if isinstance(row, (str, bytes)) or not isinstance(row, Iterable):
            raise TypeError(f"{name}: expected each item to be a list of tokens; item {i} is "
                            f"{type(row).__name__} (split text into tokens first)")
        rows.append([t.item() if isinstance(t, Tensor) else t for t in row])
    return rows


def _grams(row: list[Hashable], n: int) -> list[tuple[Hashable, ...]]:
    return [tuple(row[i:i + n]) for i in range(len(row) - n + 1)]


def distinct_n(sequences: TokenLists, n: int) -> float:
    """Distinct ``n``-grams over all ``n``-gram occurrences of the corpus, in ``(0, 1]`` (module docstring).

    Example:
        >>> distinct_n([[1, 2, 1, 2], [1, 2, 3]], 2)  # ab ba ab | ab bc: 3 distinct of 5
        0.6
    """
    n = check_int(n, "n", minimum=1)
    grams = [g for row in _token_lists(sequences) for g in _grams(row, n)]
    if not grams:
        raise ValueError(f"sequences: distinct-{n} needs at least one sequence of {n} or more tokens; got none")
    return len(set(grams)) / len(grams)


def unique_ngram_fraction(sequences: TokenLists, n: int) -> float:
    """Mean over sequences (with ``>= n`` tokens) of their share of unique ``n``-grams, in ``(0, 1]``."""
    n = check_int(n, "n", minimum=1)
    shares = [len(set(g)) / len(g) for g in (_grams(row, n) for row in _token_lists(sequences)) if g]
    if not shares:
        raise ValueError(f"sequences: the unique {n}-gram fraction needs a sequence of {n} or more tokens; got none")
    return sum(shares) / len(shares)


def repetition_rate(sequences: TokenLists, *, window: int | None = None) -> float:
    """Share of all tokens equal to a token among the previous ``window`` (default: all earlier) of their sequence."""
    if window is not None:
        window = check_int(window, "window", minimum=1)
    repeats = total = 0
    for row in _token_lists(sequences):
        total += len(row)
        for t, tok in enumerate(row):
            start = 0 if window is None else max(0, t - window)
            repeats += tok in row[start:t]
    if total == 0:
        raise ValueError("sequences: the repetition rate needs at least one token; got only empty sequences")
    return repeats / total


def binomial_upper_tail(k: int, n: int) -> float:
    r""":math:`P(X \ge k)` for :math:`X \sim \mathrm{Binomial}(n, 1/2)`, exactly (integer sums; ``n`` up to ~10^4)."""
    n = check_int(n, "n", minimum=0)
    k = check_int(k, "k")
    if k <= 0:
        return 1.0
    return sum(math.comb(n, i) for i in range(k, n + 1)) / 2**n


@dataclass(frozen=True)
class PreferenceTest:
    """Paired preference of system ``b`` over system ``a`` (see :func:`oracle_preference`).

    Attributes:
        wins, losses, ties: items where ``b`` scores higher, lower, the same. n: items.
        rate: ``wins / n`` (the paper's "<" rate). rate_not_worse: ``(wins + ties) / n`` ("<=").
        p_value: one-sided exact binomial :math:`P(X \\ge wins)`, :math:`X \\sim B(n, 1/2)`.
        p_value_not_worse: the same for ``wins + ties``.
    """

    wins: int
    losses: int
    ties: int
    n: int
    rate: float
    rate_not_worse: float
    p_value: float
    p_value_not_worse: float


def _scores(x: Any, name: str) -> Tensor:
    try:
        t = x.detach() if isinstance(x, Tensor) else torch.as_tensor(x)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"{name}: expected a non-empty 1-D list or tensor of real scores; got "
                        f"{type(x).__name__} {str(x)[:60]}") from None
    if t.dtype == torch.bool or t.is_complex() or t.dim() != 1 or t.numel() == 0:
        raise ValueError(f"{name}: expected a non-empty 1-D list or tensor of real scores; got "
                         f"{t.dtype} of shape {tuple(t.shape)}")
    t = t.double()
    bad = int((~torch.isfinite(t)).sum())
    if bad:
        raise ValueError(f"{name}: expected finite scores; got {bad} NaN/Inf of {t.numel()}")
    return t


def oracle_preference(scores_a: Tensor | Sequence[float], scores_b: Tensor | Sequence[float]) -> PreferenceTest:
    r"""How often system ``b`` beats system ``a`` item by item (higher score = preferred).

    Items ``i`` pair the two systems' outputs for the same prefix. ``b`` wins item ``i`` iff
    ``scores_b[i] > scores_a[i]``. Null hypothesis: each item is a fair coin,
    ``wins ~ Binomial(n, 1/2)`` with ties counted as non-wins (conservative, as in Table 2 of
    Deng et al.); the one-sided p-value is :math:`\sum_{k \ge wins} \binom{n}{k} 2^{-n}`, exact.

    Args:
        scores_a, scores_b: ``(n,)`` finite scores, same length (never broadcast).
    """
    a, b = _scores(scores_a, "scores_a"), _scores(scores_b, "scores_b")
    if a.shape != b.shape:
        raise ValueError(f"scores_b: expected one score per item of scores_a, shape {tuple(a.shape)}; "
                         f"got {tuple(b.shape)}")
    n = a.numel()
    wins, losses = int((b > a).sum()), int((b < a).sum())
    ties = n - wins - losses
    return PreferenceTest(wins, losses, ties, n, wins / n, (wins + ties) / n, binomial_upper_tail(wins, n),
                          binomial_upper_tail(wins + ties, n))


@dataclass(frozen=True)
class LogProbGap:
    """Mean score of the model's samples minus that of real data (see :func:`log_prob_gap`).

    Attributes:
        gap: ``mean_samples - mean_data``. stderr: Welch's :math:`\\sqrt{s_1^2/n_1 + s_2^2/n_2}`.
        mean_samples, mean_data: the two means. n_samples, n_data: the two counts.
    """

    gap: float
    stderr: float
    mean_samples: float
    mean_data: float
    n_samples: int
    n_data: int


def log_prob_gap(sample_scores: Tensor | Sequence[float], data_scores: Tensor | Sequence[float]) -> LogProbGap:
    """Difference of mean log-probabilities (under one model) of its samples and of real data, Fig. 3.

    Args:
        sample_scores: ``(n_1,)`` scores of the model's generations, ``n_1 >= 2``.
        data_scores: ``(n_2,)`` scores of real continuations of the same kind, ``n_2 >= 2``.
    """
    s, d = _scores(sample_scores, "sample_scores"), _scores(data_scores, "data_scores")
    for name, t in (("sample_scores", s), ("data_scores", d)):
        if t.numel() < 2:
            raise ValueError(f"{name}: expected at least 2 scores for a standard error; got {t.numel()}")
    stderr = math.sqrt(float(s.var()) / s.numel() + float(d.var()) / d.numel())
    ms, md = float(s.mean()), float(d.mean())
    return LogProbGap(ms - md, stderr, ms, md, s.numel(), d.numel())

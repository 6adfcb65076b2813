r"""A synthetic tagging task whose labels depend on the label ``lag`` steps away.

Generative rule (monograph digest, section 7 fixture 4). Tag *classes* are ``0..K-1``; the
vocabulary has ``K * words_per_tag`` *plain* words (word ``1 + c * words_per_tag + r`` belongs to
class ``c``) and ``n_ambiguous_words`` *copy* words (ids after the plain ones; id ``0`` is
padding). For each sentence, with length ``L ~ Uniform{min_length..max_length}``, and position
``i`` (0-based):

* with probability ``p_ambiguous``, if the source position ``s = i - lag`` (``direction="past"``)
  or ``s = i + lag`` (``direction="future"``) lies inside the sentence, the word is a copy word
  (uniform among them) and the tag **copies the class** of ``y_s``: ``y_i = class(y_s)``, or
  ``y_i = K + class(y_s)`` with ``copy_tags=True`` (``2 K`` tags, so a tag also says "this was a
  copy"); ``class(y) = y mod K``;
* otherwise the tag is a uniform class and the word is a plain word of that class.

So ``y`` is a deterministic function of ``x`` (the Bayes tag accuracy given the whole sentence is
100 %), but at a copy word the tag is only known through the tag ``lag`` positions away, which
may itself be a copy.

What a first-order chain can capture. A linear-chain CRF couples ``y_i`` with ``y_{i-1}`` only.
With an encoder that sees the whole sentence (a BiLSTM) it can still be exact, because the answer
is a function of ``x``; the encoder then has to learn to follow the chain of copy words. With an
encoder whose receptive field is ``r`` words either side and ``lag > r + 1``, the decision at a
copy position depends on ``y_s`` only through the tags in between; when those are plain words
tagged correctly they carry no information about ``y_s`` (it is independent of them), so such a
model is right at these copy positions with probability ``1/K``. ``first_order_ceiling`` is the
resulting expected test accuracy ``(#plain + #copy / K) / #tags`` of a local first-order chain
that tags every plain word right (an expectation over the copied classes, so a run can land a
little above it). A model with the whole label history (CRF transducer, aligned RNN-T) can reach
100 % with the same local encoder on ``direction="past"``: the source tag is in its history.
``direction="future"`` with ``copy_tags=True`` needs the later evidence to revise an earlier
choice, which a globally normalised model can do (the score at ``s`` sees the copy tag chosen at
``i``) and a locally normalised one can only do through how ``p(y_s | y_{<s}, x)`` spreads its
mass (label bias, monograph section 4.1.2).

Example:
    >>> data = lag_copy_tagging(n_train=8, n_test=4, seed=0)
    >>> words, tags, lengths = data.train
    >>> words.shape == tags.shape and lengths.shape == (8,)
    True
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from ebms._checks import check_bool, check_int, check_probability

__all__ = ["SyntheticTagging", "lag_copy_tagging"]


@dataclass(frozen=True)
class SyntheticTagging:
    """Train and test splits of :func:`lag_copy_tagging`.

    Attributes:
        train, test: ``(words (N, T) long, tags (N, T) long, lengths (N,) long)``, padded with
            word ``0`` and tag ``0`` beyond each length.
        vocab_size: word ids ``0..vocab_size-1`` (``0`` = padding).
        n_tags: ``K``.
        copy_words: ids of the copy words.
        first_order_ceiling: the test-set accuracy bound of a local first-order chain (see the
            module docstring).
        settings: the generator's arguments.
    """

    train: tuple[Tensor, Tensor, Tensor]
    test: tuple[Tensor, Tensor, Tensor]
    vocab_size: int
    n_tags: int
    copy_words: tuple[int, ...]
    first_order_ceiling: float
    settings: dict[str, object] = field(default_factory=dict)


def _split(n: int, g: torch.Generator, k: int, lag: int, p: float, wpt: int, n_amb: int,
           lo: int, hi: int, future: bool, copy_tags: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    lengths = torch.randint(lo, hi + 1, (n,), generator=g)
    copy = torch.rand(n, hi, generator=g) < p
    pos = torch.arange(hi)
    copy &= pos < (lengths - lag)[:, None] if future else pos >= lag
    fresh = torch.randint(0, k, (n, hi), generator=g)
    plain = torch.randint(0, wpt, (n, hi), generator=g)
    amb = torch.randint(0, n_amb, (n, hi), generator=g)
    tags = fresh.clone()
    steps = range(hi - 1 - lag, -1, -1) if future else range(lag, hi)
    for i in steps:
        source = tags[:, i + lag] if future else tags[:, i - lag]
        tags[:, i] = torch.where(copy[:, i], source % k + (k if copy_tags else 0), fresh[:, i])
    words = torch.where(copy, 1 + k * wpt + amb, 1 + fresh * wpt + plain)
    valid = pos < lengths[:, None]
    return words.masked_fill(~valid, 0), tags.masked_fill(~valid, 0), lengths, copy & valid


def lag_copy_tagging(n_train: int = 2000, n_test: int = 500, *, n_tags: int = 4, lag: int = 3,
                     p_ambiguous: float = 0.3, words_per_tag: int = 5, n_ambiguous_words: int = 3,
                     min_length: int = 6, max_length: int = 20, direction: str = "past",
                     copy_tags: bool = False, seed: int = 0) -> SyntheticTagging:
    """Draw the lag-copy tagging task (see the module docstring); deterministic given ``seed``.

    Args:
        n_train, n_test: sentences per split (``>= 1``).
        n_tags: tags ``K >= 2``.
        lag: the copy distance ``>= 1``.
        p_ambiguous: probability of a copy word at positions ``i >= lag``.
        words_per_tag: plain words per tag; ``n_ambiguous_words``: copy words.
        min_length, max_length: sentence lengths, ``1 <= min_length <= max_length``.
        direction: ``"past"`` (copy from ``i - lag``) or ``"future"`` (copy from ``i + lag``).
        copy_tags: give copy positions their own tags ``K + class`` (``2 K`` tags in all).
        seed: seed of the ``torch.Generator`` that draws everything (train first, then test).
    """
    check_int(n_train, "n_train", minimum=1)
    check_int(n_test, "n_test", minimum=1)
    k = check_int(n_tags, "n_tags", minimum=2)
    check_int(lag, "lag", minimum=1)
    p = check_probability(p_ambiguous, "p_ambiguous")
    check_int(words_per_tag, "words_per_tag", minimum=1)
    check_int(n_ambiguous_words, "n_ambiguous_words", minimum=1)
    check_int(min_length, "min_length", minimum=1)
    if check_int(max_length, "max_length", minimum=1) < min_length:
        raise ValueError(f"max_length: expected an int >= min_length ({min_length}); got {max_length}")
    if direction not in ("past", "future"):
        raise ValueError(f"direction: expected 'past' or 'future'; got {direction!r}")
    check_bool(copy_tags, "copy_tags")
    check_int(seed, "seed")
    g = torch.Generator().manual_seed(seed)
    args = (k, lag, p, words_per_tag, n_ambiguous_words, min_length, max_length, direction == "future", copy_tags)
    *train, _ = _split(n_train, g, *args)
    *test, copy = _split(n_test, g, *args)
    n_copy = int(copy.sum())
    total = int(test[2].sum())
    ceiling = (total - n_copy + n_copy / k) / total
    first_copy = 1 + k * words_per_tag
    settings: dict[str, object] = dict(n_train=n_train, n_test=n_test, n_tags=k, lag=lag, p_ambiguous=p, words_per_tag=words_per_tag,
                    n_ambiguous_words=n_ambiguous_words, min_length=min_length, max_length=max_length,
                    direction=direction, copy_tags=copy_tags, seed=seed)
    return SyntheticTagging(train=tuple(train), test=tuple(test),  # type: ignore[arg-type]
                            vocab_size=first_copy + n_ambiguous_words, n_tags=2 * k if copy_tags else k,
                            copy_words=tuple(range(first_copy, first_copy + n_ambiguous_words)),
                            first_order_ceiling=ceiling, settings=settings)

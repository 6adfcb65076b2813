r"""Multi-digit addition as character-level sentences: a controlled task for residual EBMs.

A sentence is ``a+b=s``: operands ``a, b`` uniform on ``[0, 10^d)`` written with exactly ``d``
digits (leading zeros kept) and their sum ``s = a + b`` written with exactly ``d + 1`` digits
(leading zero kept), e.g. for ``d = 3``: ``"123+456=0579"``, ``"007+046=0053"``. Fixed widths make
every sentence ``3d + 3`` characters long and split it at one place: the prefix ``"a+b="``
(``2d + 2`` characters) and the continuation ``s`` (``d + 1`` characters), the ``(c, x)`` pair of a
residual EBM (Deng et al. 2020, *Residual energy-based models for text generation*). With
``reverse_sum=True`` the sum is written least-significant digit first (``"123+456=9750"``), the
order in which carries are computed, which small autoregressive models learn far more easily
(Lee et al. 2023, *Teaching arithmetic to small transformers*).

Token ids follow the language-data contract (:mod:`ebms.data.text`): ``0`` is the boundary
(``<s>``/``</s>``), ``1`` is ``<unk>`` (never produced here), then ``'0'..'9'`` are ids ``2..11``,
``'+'`` is ``12`` and ``'='`` is ``13`` (``V = 14``, :attr:`AdditionTask.vocabulary`).

The data law is known exactly, so oracle figures need no estimate. With error rate
:math:`\varepsilon` (:func:`corrupted_corpus`; :func:`addition_corpus` is :math:`\varepsilon = 0`)
a sentence is drawn as: operands uniform, the true sum, then with probability
:math:`\varepsilon` one of its ``d + 1`` digits (uniform) replaced by one of the 9 other digits
(uniform). Hence, with ``m`` the number of digits where ``s`` differs from the true sum,

.. math::  p(a{+}b{=}s) = 10^{-2d}\Big[(1-\varepsilon)\,[m = 0]
            + \frac{\varepsilon}{9(d+1)}\,[m = 1]\Big],

and :math:`p(s \mid a, b)` is the bracket alone (:meth:`AdditionTask.log_prob`,
:meth:`AdditionTask.continuation_log_prob`). A base LM trained on a corrupted corpus is imperfect
in a controlled way: the residual energy's ideal is :math:`-\log` of the ratio of the two laws.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import overload

import torch
from torch import Tensor

from ebms._checks import check_bool, check_int, check_probability
from ebms.data.text import Vocabulary
from ebms.sequences import Sequences

__all__ = ["CHARACTERS", "MAX_DIGITS", "AdditionTask", "addition_corpus", "corrupted_corpus"]

#: the characters of the task, in id order (ids 2, 3, ...)
CHARACTERS = "0123456789+="
#: the widest operands (sums stay below 2**63)
MAX_DIGITS = 18
_PLUS, _EQUALS, _ZERO = 12, 13, 2


class AdditionTask:
    """Fixed-width addition sentences ``a+b=s`` with ``d``-digit operands (see the module docstring).

    Args:
        digits: ``d`` in ``[1, 18]``, the width of each operand.
        reverse_sum: write the sum least-significant digit first.

    Attributes:
        vocabulary: the character :class:`~ebms.data.text.Vocabulary` (``V = 14``).
        vocab_size: ``14``. length: ``3d + 3``. prefix_length: ``2d + 2``. continuation_length: ``d + 1``.

    Inputs named ``x`` are strings or :class:`~ebms.sequences.Sequences` of these ids; strings with
    other characters are refused. Sentences that are not of the form ``a+b=s`` (any length or
    layout) are valid inputs: they are never correct and have probability 0.

    Example:
        >>> task = AdditionTask(2)
        >>> x = task.encode(["12+34=046", "12+34=047"])
        >>> task.is_correct(x).tolist(), task.split(["12+34=046"])
        ([True, False], (['12+34='], ['046']))
    """

    def __init__(self, digits: int = 3, *, reverse_sum: bool = False) -> None:
        self.digits = check_int(digits, "digits", minimum=1)
        if digits > MAX_DIGITS:
            raise ValueError(f"digits: expected an int in [1, {MAX_DIGITS}]; got {digits}")
        self.reverse_sum = check_bool(reverse_sum, "reverse_sum")
        self.vocabulary = Vocabulary(list(CHARACTERS), level="char")
        self.vocab_size = len(self.vocabulary)
        self.length, self.prefix_length, self.continuation_length = 3 * digits + 3, 2 * digits + 2, digits + 1

    def __repr__(self) -> str:
        return f"AdditionTask(digits={self.digits}, reverse_sum={self.reverse_sum})"

    # --- drawing --------------------------------------------------------------------------------
    def sample_ids(self, n: int, *, generator: torch.Generator | None = None, error_rate: float = 0.0) -> Sequences:
        """``n`` sentences of the law with error rate ``error_rate``, as ``Sequences (n, 3d + 3)``.

        Cost: ``O(n d)`` tensor work; the randomness comes from ``generator`` only (on the CPU).
        """
        n = check_int(n, "n", minimum=0)
        error_rate = check_probability(error_rate, "error_rate")
        ab = torch.randint(0, 10**self.digits, (n, 2), generator=generator)
        return self._corrupted(self._sentences(ab[:, 0], ab[:, 1]), error_rate, generator)

    def _sentences(self, a: Tensor, b: Tensor) -> Sequences:
        """The correct sentences ``a+b=s`` of operand vectors ``a``, ``b``."""
        n = a.numel()
        tokens = torch.cat([self._operand_digits(a), torch.full((n, 1), _PLUS - _ZERO), self._operand_digits(b),
                            torch.full((n, 1), _EQUALS - _ZERO), self._sum_digits(a, b)], 1) + _ZERO
        return Sequences(tokens, torch.full((n,), self.length), validate=False)

    def _corrupted(self, x: Sequences, error_rate: float, generator: torch.Generator | None) -> Sequences:
        """:meth:`corrupt` without the checks (``x`` well formed, ``error_rate`` checked)."""
        n, d = x.batch_size, self.digits
        flip = torch.rand(n, generator=generator, dtype=torch.float64) < error_rate
        where = torch.randint(0, d + 1, (n,), generator=generator)
        shift = torch.randint(1, 10, (n,), generator=generator)
        rows = flip.nonzero().squeeze(1)
        tokens = x.tokens[:, :self.length].clone()
        pos = self.prefix_length + where[rows]
        tokens[rows, pos] = (tokens[rows, pos] - _ZERO + shift[rows]) % 10 + _ZERO
        return Sequences(tokens, x.lengths.clone(), validate=False)

    def disjoint_samples(self, sizes: Sequence[int], *, generator: torch.Generator | None = None) -> list[Sequences]:
        """Correct sentences in groups of ``sizes`` whose operand pairs are all distinct (drawn without
        replacement), e.g. ``train, test = task.disjoint_samples([4000, 500])``: no test prefix is a
        training prefix, so test figures measure generalisation, not recall.

        Cost: a permutation of the ``10^{2d}`` pairs when there are at most a million, else uniform
        draws with duplicates redrawn.

        Raises:
            ValueError: a negative size, or more sentences than the ``10^{2d}`` operand pairs.
        """
        sizes = [check_int(n, "sizes", minimum=0) for n in sizes]
        total, half = sum(sizes), 10 ** self.digits
        if total > half * half:
            raise ValueError(f"sizes: {total} sentences with distinct operands asked; {self.digits}-digit "
                             f"operands give only {half * half} pairs")
        if half * half <= 10**6:
            ids = torch.randperm(half * half, generator=generator)[:total]
            a, b = ids // half, ids % half
        else:
            seen: dict[tuple[int, int], None] = {}
            while len(seen) < total:
                ab = torch.randint(0, half, (total - len(seen), 2), generator=generator)
                seen.update(dict.fromkeys(map(tuple, ab.tolist())))
            a, b = torch.tensor(list(seen), dtype=torch.long).reshape(-1, 2).unbind(1)
        x = self._sentences(a, b)
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        return [x[s:s + n] for s, n in zip(starts, sizes)]

    def corrupt(self, x: Sequences, error_rate: float, *, generator: torch.Generator | None = None) -> Sequences:
        """``x`` with each sum, with probability ``error_rate``, given one wrong digit (position uniform
        among the ``d + 1``, new digit uniform among the 9 others): the corruption of
        :meth:`sample_ids`, applied to given sentences (e.g. the training half of
        :meth:`disjoint_samples`) to train a base LM that is imperfect in a known way.

        Raises:
            ValueError: a row that is not ``a+b=s`` with ``d``-digit operands and a ``d + 1``-digit sum.
        """
        error_rate = check_probability(error_rate, "error_rate")
        ids = self._ids(x, "x")
        bad = self._mismatches(ids) < 0
        if bool(bad.any()):
            raise ValueError(f"x: row {int(bad.nonzero()[0])} is not a+b=s with {self.digits}-digit operands")
        return self._corrupted(ids, error_rate, generator)

    def corpus(self, n: int, *, generator: torch.Generator | None = None, error_rate: float = 0.0) -> list[str]:
        """The same draws as :meth:`sample_ids`, as strings."""
        return self.decode(self.sample_ids(n, generator=generator, error_rate=error_rate))

    def _operand_digits(self, a: Tensor) -> Tensor:
        """``(B, d)`` digits of ``a``, most significant first."""
        powers = 10 ** torch.arange(self.digits - 1, -1, -1)
        return torch.div(a.unsqueeze(1), powers, rounding_mode="floor") % 10

    def _sum_digits(self, a: Tensor, b: Tensor) -> Tensor:
        """``(B, d + 1)`` digits of ``a + b`` in the written order."""
        powers = 10 ** torch.arange(self.digits, -1, -1)
        digits = torch.div((a + b).unsqueeze(1), powers, rounding_mode="floor") % 10
        return digits.flip(1) if self.reverse_sum else digits

    # --- encoding -------------------------------------------------------------------------------
    def encode(self, strings: Sequence[str]) -> Sequences:
        """Strings -> ``Sequences`` of ids (padding 0). Cost: one dict lookup per character.

        Raises:
            ValueError: a character outside ``'0123456789+='`` (named with its string and position).
        """
        if isinstance(strings, str):
            raise TypeError("strings: expected a sequence of strings; got a single str (wrap it in a list)")
        allowed = set(CHARACTERS)
        for i, s in enumerate(strings):
            if not isinstance(s, str):
                raise TypeError(f"strings: expected str items; got {type(s).__name__} at index {i}")
            bad = next((j for j, ch in enumerate(s) if ch not in allowed), None)
            if bad is not None:
                raise ValueError(f"strings: expected characters from {CHARACTERS!r}; string {i} ({s!r}) has "
                                 f"{s[bad]!r} at position {bad}")
        return self.vocabulary.encode(strings)

    def decode(self, x: Sequences) -> list[str]:
        """``Sequences`` -> strings (``<unk>``, id 1, decodes as ``'<unk>'``)."""
        return self.vocabulary.to_text(x)

    def _ids(self, x: Sequence[str] | Sequences, name: str) -> Sequences:
        if isinstance(x, Sequences):
            return x.check_vocabulary(self.vocab_size, name).to("cpu")
        return self.encode(x)

    @overload
    def split(self, x: Sequences) -> tuple[Sequences, Sequences]: ...
    @overload
    def split(self, x: Sequence[str]) -> tuple[list[str], list[str]]: ...

    def split(self, x: Sequence[str] | Sequences) -> tuple[Sequences, Sequences] | tuple[list[str], list[str]]:
        """``(prefixes "a+b=", continuations)``: each sentence cut after its first ``2d + 2`` characters,
        as strings for strings and as ``Sequences`` for ``Sequences``.

        Raises:
            ValueError: a sentence whose first ``2d + 2`` characters are not ``a+b=`` with ``d``-digit operands.
        """
        ids = self._ids(x, "x")
        ok = self._prefix_ok(ids)
        if not bool(ok.all()):
            b = int((~ok).nonzero()[0])
            raise ValueError(f"x: sentence {b} does not start with 'a+b=' and {self.digits}-digit operands "
                             f"(expected {self.prefix_length} characters such as '{'1' * self.digits}+"
                             f"{'2' * self.digits}=')")
        P = self.prefix_length
        prefix = Sequences(ids.tokens[:, :P], torch.full_like(ids.lengths, P), validate=False)
        width = max(ids.max_length - P, 0)
        cont = Sequences(ids.tokens[:, P:P + width], ids.lengths - P, validate=False)
        if isinstance(x, Sequences):
            return prefix.to(x.device), cont.to(x.device)
        return self.decode(prefix), self.decode(cont)

    # --- the exact law --------------------------------------------------------------------------
    def _prefix_ok(self, ids: Sequences) -> Tensor:
        """``(B,)`` bool: the first ``2d + 2`` ids are ``a+b=`` with ``d``-digit operands."""
        d, P = self.digits, self.prefix_length
        tok = torch.nn.functional.pad(ids.tokens, (0, max(P - ids.max_length, 0)))[:, :P]
        want_digit = torch.ones(P, dtype=torch.bool)
        want_digit[[d, P - 1]] = False
        digit = (tok >= _ZERO) & (tok < _ZERO + 10)
        layout = torch.where(want_digit, digit, False)
        layout[:, d], layout[:, P - 1] = tok[:, d] == _PLUS, tok[:, P - 1] == _EQUALS
        return (ids.lengths >= P) & layout.all(1)

    def _mismatches(self, ids: Sequences) -> Tensor:
        """``(B,)`` int64: sum digits differing from the true sum; ``-1`` for malformed sentences."""
        d, P = self.digits, self.prefix_length
        ok = self._prefix_ok(ids) & (ids.lengths == self.length)
        tok = torch.nn.functional.pad(ids.tokens, (0, max(self.length - ids.max_length, 0)))[:, :self.length]
        tail = tok[:, P:] - _ZERO
        ok &= ((tail >= 0) & (tail < 10)).all(1)
        powers = 10 ** torch.arange(d - 1, -1, -1)
        value = (tok - _ZERO).clamp(0, 9)
        a, b = (value[:, :d] * powers).sum(1), (value[:, d + 1:P - 1] * powers).sum(1)
        m = (tail != self._sum_digits(a, b)).sum(1)
        return torch.where(ok, m, -1)

    def is_correct(self, x: Sequence[str] | Sequences) -> Tensor:
        """``(B,)`` bool: the sentence is ``a+b=s`` with ``d``-digit operands and the right ``d + 1``-digit sum."""
        return self._mismatches(self._ids(x, "x")) == 0

    def _bracket(self, m: Tensor, error_rate: float) -> Tensor:
        eps = check_probability(error_rate, "error_rate")
        right = math.log1p(-eps) if eps < 1 else -math.inf
        wrong = math.log(eps / (9 * (self.digits + 1))) if eps > 0 else -math.inf
        out = torch.full(m.shape, -math.inf, dtype=torch.float64)
        return out.masked_fill(m == 0, right).masked_fill(m == 1, wrong)

    def log_prob(self, x: Sequence[str] | Sequences, *, error_rate: float = 0.0) -> Tensor:
        r"""Exact ``log p(x)`` of each sentence under the data law with error rate ``error_rate``
        (module docstring), ``(B,)`` float64; ``-inf`` off the support. Cost ``O(B d)``."""
        m = self._mismatches(self._ids(x, "x"))
        return self._bracket(m, error_rate) - 2 * self.digits * math.log(10.0)

    def continuation_log_prob(self, prefix: Sequence[str] | Sequences, x: Sequence[str] | Sequences, *,
                              error_rate: float = 0.0) -> Tensor:
        r"""Exact ``log p(s | a, b)`` of each continuation ``x`` after its prefix ``"a+b="``, ``(B,)`` float64
        (the bracket of the module docstring; ``-inf`` for a continuation that is not ``d + 1`` digits).

        Raises:
            ValueError: a prefix that is not ``a+b=`` with ``d``-digit operands, or row counts that differ.
        """
        c, s = self._ids(prefix, "prefix"), self._ids(x, "x")
        if c.batch_size != s.batch_size:
            raise ValueError(f"prefix: expected one prefix per continuation ({s.batch_size}); got {c.batch_size}")
        bad = ~(self._prefix_ok(c) & (c.lengths == self.prefix_length))
        if bool(bad.any()):
            raise ValueError(f"prefix: row {int(bad.nonzero()[0])} is not 'a+b=' with {self.digits}-digit operands")
        width = max(s.max_length, 0)
        joined = torch.cat([c.tokens[:, :self.prefix_length], s.tokens[:, :width]], 1)
        m = self._mismatches(Sequences(joined, s.lengths + self.prefix_length, validate=False))
        return self._bracket(m, error_rate)


def addition_corpus(n: int, *, digits: int = 3, generator: torch.Generator | None = None,
                    reverse_sum: bool = False) -> list[str]:
    """``n`` correct sentences ``a+b=s`` (operands uniform on ``[0, 10^digits)``, zero-padded to
    ``digits``; the sum zero-padded to ``digits + 1``): :meth:`AdditionTask.corpus` with no errors."""
    return AdditionTask(digits, reverse_sum=reverse_sum).corpus(n, generator=generator)


def corrupted_corpus(n: int, error_rate: float, *, digits: int = 3, generator: torch.Generator | None = None,
                     reverse_sum: bool = False) -> list[str]:
    """``n`` sentences whose sum, with probability ``error_rate`` each, has one digit (uniform among the
    ``digits + 1``) replaced by another digit (uniform among the 9 others): the corrupted law whose
    exact probabilities :meth:`AdditionTask.log_prob` gives with the same ``error_rate``."""
    return AdditionTask(digits, reverse_sum=reverse_sum).corpus(n, generator=generator, error_rate=error_rate)

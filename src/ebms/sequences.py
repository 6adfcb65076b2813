"""Batches of variable-length token sequences.

A batch of ``B`` sentences is two integer tensors: ``tokens`` of shape ``(B, T)`` (padded on the
right to the longest, ``T``) and ``lengths`` of shape ``(B,)``. :class:`Sequences` holds the pair,
checks it once at the boundary, and moves, slices, concatenates and pads it. Token ids are
stored as integers, never one-hot: a ``(64, 50)`` batch over any vocabulary costs
``64 * 50 * 8`` bytes of tokens plus ``64 * 8`` of lengths.

Two checks serve every consumer: :meth:`Sequences.coerce` turns a batch argument (a
``Sequences``, a ``(tokens, lengths)`` tuple, or a ``(B, T)`` integer tensor where the caller
takes one) into ``Sequences``, and :meth:`Sequences.check_vocabulary` refuses a real token outside
``[0, V)`` or equal to the boundary id. :meth:`ebms.spaces.TokenSequences.check` adds the length
range of a space.

Contract: entries at positions ``t >= lengths[b]`` are padding. Every consumer (energies,
samplers, objectives) must ignore them; :meth:`Sequences.canonical` sets them to ``pad_id`` so
that two batches holding the same sentences compare equal.

:func:`length_buckets` groups sequence indices into batches of similar length, which keeps the
padding (and so the wasted work) of recurrent or attention energies small.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch import Tensor

from ebms._checks import check_int

__all__ = ["Sequences", "length_buckets", "token_id_row"]

_INT_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


class Sequences:
    """A batch of token sequences: ``tokens (B, T)`` int64 and ``lengths (B,)`` int64.

    Args:
        tokens: integer tensor ``(B, T)``; entries at ``t >= lengths[b]`` are padding.
        lengths: integer tensor ``(B,)`` with ``0 <= lengths[b] <= T``; ``None`` means every
            sequence has length ``T``.
        validate: check dtypes, shapes, devices and the length range (one host sync). Internal
            code that builds a batch from a valid one passes ``False``.

    Raises:
        TypeError: a non-tensor or non-integer ``tokens``/``lengths``.
        ValueError: wrong dimensions, mismatched batch sizes or devices, negative tokens,
            lengths outside ``[0, T]``.

    Example:
        >>> s = Sequences.from_lists([[3, 1], [2], []])
        >>> s.tokens.shape, s.lengths.tolist()
        (torch.Size([3, 2]), [2, 1, 0])
    """

    __slots__ = ("lengths", "tokens")

    def __init__(self, tokens: Tensor, lengths: Tensor | None = None, *, validate: bool = True) -> None:
        if validate:
            tokens, lengths = _validated(tokens, lengths)
        elif lengths is None:
            lengths = torch.full((tokens.shape[0],), tokens.shape[1], dtype=torch.long, device=tokens.device)
        self.tokens: Tensor = tokens
        self.lengths: Tensor = lengths

    # --- construction -------------------------------------------------------------------------
    @classmethod
    def coerce(cls, batch: Any, *, name: str = "batch", pairs: bool = True, tensors: bool = False,
               empty: bool = True, expected: str | None = None) -> Sequences:
        """``batch`` as a :class:`Sequences`: the one converter of a sentence-batch argument.

        Accepted forms:

        * a ``Sequences``, returned as is;
        * with ``pairs`` (the default): a ``(tokens (B, T), lengths (B,))`` tuple of integer tensors,
          checked by the constructor (a data loader's batch);
        * with ``tensors``: an integer tensor ``tokens (B, T)``, every sequence of full length ``T``.

        The token ids are not compared with a vocabulary here (see :meth:`check_vocabulary` and
        :meth:`ebms.spaces.TokenSequences.check`). No host sync unless the constructor runs.

        Args:
            batch: the argument.
            name: its name in messages.
            pairs: accept a ``(tokens, lengths)`` tuple.
            tensors: accept a ``(B, T)`` integer tensor.
            empty: accept a batch of ``B = 0`` sequences.
            expected: the accepted forms as the ``TypeError`` names them (default: from ``pairs``
                and ``tensors``, e.g. ``"Sequences or a (tokens (B, T), lengths (B,)) tuple"``).

        Returns:
            ``Sequences`` with ``tokens (B, T)`` and ``lengths (B,)``, int64.

        Raises:
            TypeError: ``{name}: expected {expected}; got {type}`` (a tensor where none is accepted
                is told to be wrapped); with ``tensors``, a tensor that is not 2-D integer; a pair of
                non-integer tensors (the constructor's message).
            ValueError: ``{name}: expected at least one sentence; got an empty batch`` when not
                ``empty``; a malformed pair (the constructor's messages).

        Example:
            >>> Sequences.coerce((torch.tensor([[3, 1], [2, 0]]), torch.tensor([2, 1]))).lengths.tolist()
            [2, 1]
            >>> Sequences.coerce(torch.tensor([[3, 1]]), name="x", tensors=True).lengths.tolist()
            [2]
        """
        if isinstance(batch, Sequences):
            seqs = batch
        elif pairs and isinstance(batch, tuple) and len(batch) == 2 and all(isinstance(t, Tensor) for t in batch):
            seqs = cls(batch[0], batch[1])
        elif tensors and isinstance(batch, Tensor):
            if batch.dim() != 2 or batch.dtype not in _INT_DTYPES:
                raise TypeError(f"{name}: expected Sequences or an integer tensor (B, T) of token ids; got "
                                f"{batch.dtype} tensor of shape {tuple(batch.shape)}")
            seqs = cls(batch)
        else:
            hint = " (wrap token ids as Sequences(tokens, lengths))" if isinstance(batch, Tensor) else ""
            raise TypeError(f"{name}: expected {expected or _forms(pairs, tensors)}; got {type(batch).__name__}{hint}")
        if not empty and seqs.batch_size == 0:
            raise ValueError(f"{name}: expected at least one sentence; got an empty batch {seqs!r}")
        return seqs

    @classmethod
    def from_lists(cls, seqs: Iterable[Sequence[int]], *, pad_id: int = 0,
                   device: torch.device | str | None = None) -> Sequences:
        """Pack Python lists of token ids, padding on the right with ``pad_id``.

        Each id must be an integer (``int``, a NumPy integer, an integer 0-d tensor); a float
        (``2.0``, ``1.7``) raises ``TypeError`` naming the sequence and position, never truncated
        to an id.
        """
        if isinstance(seqs, (str, bytes, Tensor)):
            raise TypeError(f"seqs: expected lists of integer token ids; got {type(seqs).__name__}"
                            + (" (use Sequences(tokens, lengths) for a tensor)" if isinstance(seqs, Tensor) else ""))
        rows = [token_id_row(s, i) for i, s in enumerate(seqs)]
        width = max((len(r) for r in rows), default=0)
        tokens = torch.full((len(rows), width), pad_id, dtype=torch.long)
        for i, r in enumerate(rows):
            if r:
                tokens[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        lengths = torch.tensor([len(r) for r in rows], dtype=torch.long)
        return cls(tokens.to(device), lengths.to(device))

    @staticmethod
    def cat(batches: Sequence[Sequences], *, pad_id: int = 0) -> Sequences:
        """Concatenate along the batch, padding every part to the widest ``T``."""
        if not batches:
            raise ValueError("Sequences.cat: expected at least one batch; got an empty list")
        width = max(b.max_length for b in batches)
        parts = [b.pad_to(width, pad_id=pad_id) for b in batches]
        return Sequences(torch.cat([p.tokens for p in parts]), torch.cat([p.lengths for p in parts]),
                         validate=False)

    # --- views --------------------------------------------------------------------------------
    @property
    def batch_size(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def max_length(self) -> int:
        """``T``, the padded width (at least the longest length)."""
        return int(self.tokens.shape[1])

    @property
    def device(self) -> torch.device:
        return self.tokens.device

    @property
    def nbytes(self) -> int:
        """Bytes held by ``tokens`` and ``lengths``."""
        return self.tokens.element_size() * self.tokens.numel() + self.lengths.element_size() * self.lengths.numel()

    def __len__(self) -> int:
        return self.batch_size

    def mask(self) -> Tensor:
        """``(B, T)`` bool: True at real tokens, False at padding."""
        return torch.arange(self.max_length, device=self.device) < self.lengths[:, None]

    def __getitem__(self, index: Any) -> Sequences:
        """Select sequences; ``T`` is kept.

        An integer (``int``, NumPy or 0-d tensor) selects one sequence and keeps the batch
        dimension (``B = 1``); it must lie in ``[-B, B)``, else ``IndexError`` (which also ends a
        ``for`` loop over the batch). Slices follow Python's rules (out-of-range ends are clipped);
        index tensors and bool masks follow torch's (an out-of-range index raises).
        """
        if not isinstance(index, (slice, Tensor)) or (isinstance(index, Tensor) and index.dim() == 0):
            try:
                i = operator.index(index)
            except TypeError:
                i = None
            if i is not None and not isinstance(index, bool):
                B = self.batch_size
                if not -B <= i < B:
                    raise IndexError(f"index: sequence {i} is out of range for a batch of {B} (valid: {-B} to {B - 1})")
                i %= B
                index = slice(i, i + 1)
        tokens, lengths = self.tokens[index], self.lengths[index]
        if tokens.dim() != 2 or lengths.dim() != 1:
            raise TypeError(f"index: expected an int, a slice, an index tensor or a bool mask over the batch; got "
                            f"{type(index).__name__} (selecting tokens of shape {tuple(tokens.shape)})")
        return Sequences(tokens, lengths, validate=False)

    def to(self, *args: Any, **kwargs: Any) -> Sequences:
        """Move both tensors (same arguments as :meth:`torch.Tensor.to`; dtype changes are refused)."""
        tokens = self.tokens.to(*args, **kwargs)
        if tokens.dtype != torch.long:
            raise TypeError(f"Sequences.to: token ids stay int64; got a request for {tokens.dtype}")
        return Sequences(tokens, self.lengths.to(tokens.device), validate=False)

    def clone(self) -> Sequences:
        return Sequences(self.tokens.clone(), self.lengths.clone(), validate=False)

    def with_tokens(self, tokens: Tensor) -> Sequences:
        """Same lengths, new ``tokens`` of the same shape, int64, on the same device (e.g. after a Gibbs
        update). No host sync: the ids themselves are not checked."""
        if not isinstance(tokens, Tensor) or tokens.dtype != torch.long:
            raise TypeError(f"tokens: expected an int64 tensor of token ids; got "
                            f"{getattr(tokens, 'dtype', type(tokens).__name__)}")
        if tokens.shape != self.tokens.shape:
            raise ValueError(f"tokens: expected shape {tuple(self.tokens.shape)}; got {tuple(tokens.shape)}")
        if tokens.device != self.tokens.device:
            raise ValueError(f"tokens: expected device {self.tokens.device}; got {tokens.device}")
        return Sequences(tokens, self.lengths, validate=False)

    def canonical(self, *, pad_id: int = 0) -> Sequences:
        """Padding set to ``pad_id`` and ``T`` trimmed to the longest length."""
        width = int(self.lengths.max()) if self.batch_size else 0
        tokens = self.tokens[:, :width].masked_fill(~self.mask()[:, :width], pad_id)
        return Sequences(tokens, self.lengths, validate=False)

    def pad_to(self, width: int, *, pad_id: int = 0) -> Sequences:
        """Widen (never narrow below the longest length) to ``T = width``."""
        width = check_int(width, "width", minimum=0)
        longest = int(self.lengths.max()) if self.batch_size else 0
        if width < longest:
            raise ValueError(f"width: must be at least the longest length {longest}; got {width}")
        if width <= self.max_length:
            return Sequences(self.tokens[:, :width], self.lengths, validate=False)
        extra = self.tokens.new_full((self.batch_size, width - self.max_length), pad_id)
        return Sequences(torch.cat([self.tokens, extra], dim=1), self.lengths, validate=False)

    def tolist(self) -> list[list[int]]:
        """The real tokens of each sequence, padding dropped."""
        return [row[:n] for row, n in zip(self.tokens.tolist(), self.lengths.tolist())]

    def equal(self, other: Sequences) -> bool:
        """Same lengths and same real tokens (padding ignored)."""
        return self.tolist() == other.tolist()

    def check_vocabulary(self, vocab_size: int, name: str = "tokens", *, boundary: int | None = None,
                         where: str = "at", expected: str | None = None) -> Sequences:
        """Raise unless every real token (``t < lengths[b]``) is an id in ``[0, vocab_size)`` other
        than ``boundary``: the one token-range check of a batch (one host sync; padding is not
        looked at).

        The message names the first offending entry, ``{name}: {expected}; {where}``. By default
        ``expected`` states the rule: ``token ids must be below the vocabulary size V`` (or ``must
        be non-negative``) without a boundary, the ids the boundary leaves with one (``expected
        token ids in [1, V-1] (id 0 is the boundary)``, ``in [0, V-2] (id V-1 is the boundary)``,
        ``in [0, V-1] other than the boundary id k``). ``where`` is ``"at"`` (``got 7 at sequence 1,
        position 2``), ``"sequence"`` (``within lengths; sequence 1 has 7 at position 2``) or
        ``"row"`` (``within lengths; row 1 has 7 at position 2``).

        Args:
            vocab_size: ``V``.
            name: the argument's name in the message.
            boundary: an id that may not occur inside a sequence (``<s>``/``</s>``), or ``None``.
            where: how the message locates the offending token (above).
            expected: the rule as the message states it (default above).

        Returns:
            ``self``.

        Raises:
            ValueError: a real token outside ``[0, V)`` or equal to ``boundary``.
        """
        if where not in _WHERE:
            raise ValueError(f"where: expected one of {tuple(_WHERE)}; got {where!r}")
        tok = self.tokens
        out = (tok < 0) | (tok >= vocab_size)
        bad = self.mask() & (out if boundary is None else out | (tok == boundary))
        if bool(bad.any()):
            b, t = (int(i) for i in bad.nonzero()[0])
            value = int(tok[b, t])
            if expected is None:
                expected = _token_rule(vocab_size, boundary, value) + ("" if where == "at" else " within lengths")
            raise ValueError(f"{name}: {expected}; {_WHERE[where].format(value=value, b=b, t=t)}")
        return self

    def __repr__(self) -> str:
        return f"Sequences(batch={self.batch_size}, max_length={self.max_length}, device={self.device})"


#: how :meth:`Sequences.check_vocabulary` locates the offending token in its message.
_WHERE = {"at": "got {value} at sequence {b}, position {t}", "sequence": "sequence {b} has {value} at position {t}",
          "row": "row {b} has {value} at position {t}"}


def _forms(pairs: bool, tensors: bool) -> str:
    """The accepted forms of :meth:`Sequences.coerce`, as its ``TypeError`` names them."""
    forms = [f for f, on in (("a (tokens (B, T), lengths (B,)) tuple", pairs), ("an integer tensor (B, T)", tensors))
             if on]
    return "Sequences or " + " or ".join(forms) if forms else "an ebms.sequences.Sequences (tokens (B, T), lengths (B,))"


def _token_rule(vocab_size: int, boundary: int | None, value: int) -> str:
    """The rule :meth:`Sequences.check_vocabulary` states when ``value`` breaks it: the ids a
    sequence may hold, ``boundary`` (if any) excluded."""
    if boundary is None:
        return ("token ids must be non-negative" if value < 0
                else f"token ids must be below the vocabulary size {vocab_size}")
    if boundary == 0:
        return f"expected token ids in [1, {vocab_size - 1}] (id 0 is the boundary)"
    if boundary == vocab_size - 1:
        return f"expected token ids in [0, {vocab_size - 2}] (id {boundary} is the boundary)"
    return f"expected token ids in [0, {vocab_size - 1}] other than the boundary id {boundary}"


def token_id_row(row: Any, i: int) -> list[int]:
    """``row`` (the ``i``-th sequence) as a list of int token ids; a float or non-number raises
    ``TypeError`` naming its place (``seqs[i][t]``): ids are never rounded."""
    if isinstance(row, (str, bytes)):
        raise TypeError(f"seqs[{i}]: expected a list of integer token ids; got {type(row).__name__} {row!r}")
    try:
        items = list(row)
    except TypeError:
        raise TypeError(f"seqs[{i}]: expected a list of integer token ids; got {type(row).__name__} {row!r}") from None
    try:
        return list(map(operator.index, items))
    except TypeError:
        pass
    for t, v in enumerate(items):
        try:
            operator.index(v)
        except TypeError:
            raise TypeError(f"seqs[{i}][{t}]: expected an integer token id; got {v!r} ({type(v).__name__}); ids "
                            "are never rounded: convert them explicitly") from None
    raise TypeError(f"seqs[{i}]: expected a list of integer token ids; got {type(row).__name__}")


def _validated(tokens: Any, lengths: Any) -> tuple[Tensor, Tensor]:
    for name, t in (("tokens", tokens), ("lengths", lengths)):
        if t is None and name == "lengths":
            continue
        if not isinstance(t, Tensor):
            raise TypeError(f"{name}: expected an integer torch.Tensor; got {type(t).__name__}")
        if t.dtype not in _INT_DTYPES:
            raise TypeError(f"{name}: expected an integer tensor (token ids, not one-hot); got dtype {t.dtype}")
    if tokens.dim() != 2:
        raise ValueError(f"tokens: expected shape (B, T); got {tuple(tokens.shape)}")
    tokens = tokens.long()
    if lengths is None:
        lengths = torch.full((tokens.shape[0],), tokens.shape[1], dtype=torch.long, device=tokens.device)
    if lengths.shape != (tokens.shape[0],):
        raise ValueError(f"lengths: expected shape ({tokens.shape[0]},) to match tokens {tuple(tokens.shape)}; "
                         f"got {tuple(lengths.shape)}")
    if lengths.device != tokens.device:
        raise ValueError(f"lengths: expected device {tokens.device} like tokens; got {lengths.device}")
    lengths = lengths.long()
    if lengths.numel():
        lo, hi = int(lengths.min()), int(lengths.max())
        if lo < 0 or hi > tokens.shape[1]:
            raise ValueError(f"lengths: expected values in [0, {tokens.shape[1]}] (T = tokens.shape[1]); "
                             f"got min {lo}, max {hi}")
    if tokens.numel() and int(tokens.min()) < 0:
        raise ValueError(f"tokens: token ids must be non-negative; got minimum {int(tokens.min())}")
    return tokens, lengths


def length_buckets(lengths: Tensor, batch_size: int, *, shuffle: bool = True,
                   generator: torch.Generator | None = None) -> list[Tensor]:
    """Split ``range(B)`` into batches of similar length.

    Indices are sorted by length (ties broken at random when ``shuffle``), cut into consecutive
    batches of ``batch_size`` (the last may be smaller), and the batch order is shuffled. Each
    index appears exactly once. Cost: one sort, ``O(B log B)``.

    Args:
        lengths: ``(B,)`` integer lengths.
        batch_size: sequences per batch (>= 1).
        shuffle: randomise tie order and batch order (from ``generator``).

    Returns:
        A list of ``(b_i,)`` int64 index tensors with ``sum b_i = B``.
    """
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    if not isinstance(lengths, Tensor):
        raise TypeError(f"lengths: expected a 1-D integer tensor; got {type(lengths).__name__}")
    if lengths.dim() != 1:
        raise ValueError(f"lengths: expected a 1-D tensor; got shape {tuple(lengths.shape)}")
    n = lengths.shape[0]
    if shuffle:
        perm = torch.randperm(n, generator=generator)
        order = perm[torch.sort(lengths.cpu()[perm], stable=True).indices]
    else:
        order = torch.sort(lengths.cpu(), stable=True).indices
    batches = list(torch.split(order, batch_size))
    if shuffle:
        batches = [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]
    return batches

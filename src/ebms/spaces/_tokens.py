r"""Variable-length token sequences in index form: :class:`TokenSequences`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

from ebms._checks import check_int
from ebms.sequences import Sequences
from ebms.spaces._base import MAX_EXACT_STATES

__all__ = ["TokenSequences"]

_INT64_MAX = (1 << 63) - 1


class TokenSequences:
    r"""Sequences over the vocabulary ``{0, ..., V-1}`` with lengths in ``[min_length, max_length]``.

    Points are :class:`~ebms.sequences.Sequences` batches: ``tokens`` ``(B, T)`` int64, padded on
    the right (entries at ``t >= lengths[b]`` are padding and ignored), and ``lengths`` ``(B,)``.
    Token ids are integers, never one-hot: a batch costs ``8 (B T + B)`` bytes whatever ``V`` is.
    Energies over the space map ``Sequences -> (B,)``.

    The space holds :math:`\sum_{L = L_{min}}^{L_{max}} V^L` sequences (:attr:`num_states`).

    * :meth:`check` (also :meth:`validate`, the space contract's name): type, length range,
      vocabulary range and, for sentences, the boundary id; messages naming the argument.
    * :meth:`random`: uniform lengths (or given ones) and uniform tokens.
    * :meth:`enumerate` and :meth:`state_index`: every sequence of a tiny space, for exact tests
      (refused above :data:`~ebms.spaces.MAX_EXACT_STATES`).
    * :meth:`position_variants`: the ``V`` sequences that differ from each chain's at one
      position, stacked into one batch — what a Gibbs update over positions evaluates in one
      energy call (:class:`~ebms.samplers.Gibbs`; :class:`~ebms.samplers.MetropolisHastings`
      changes one position at a time).

    Args:
        vocab_size: ``V >= 1``.
        max_length: the longest allowed length, ``>= max(1, min_length)``.
        min_length: the shortest allowed length, ``>= 0`` (0 allows the empty sequence); default 1.

    Raises:
        TypeError: a non-int argument.
        ValueError: a size out of range, or ``min_length > max_length``.

    Example:
        >>> import torch
        >>> space = TokenSequences(3, max_length=4)
        >>> x = space.random(5, generator=torch.Generator().manual_seed(0))
        >>> x.tokens.shape, space.num_states
        (torch.Size([5, 4]), 120)
    """

    def __init__(self, vocab_size: int, max_length: int, *, min_length: int = 1) -> None:
        self.vocab_size = check_int(vocab_size, "vocab_size", minimum=1)
        self.max_length = check_int(max_length, "max_length", minimum=1)
        self.min_length = check_int(min_length, "min_length", minimum=0)
        if self.min_length > self.max_length:
            raise ValueError(
                f"min_length: expected at most max_length={self.max_length}; got min_length={self.min_length}"
            )

    @property
    def num_states(self) -> int:
        """Number of sequences in the space, :math:`\\sum_L V^L` (an exact Python int)."""
        return sum(self.vocab_size**n for n in range(self.min_length, self.max_length + 1))

    def __repr__(self) -> str:
        return (
            f"TokenSequences(vocab_size={self.vocab_size}, min_length={self.min_length}, "
            f"max_length={self.max_length})"
        )

    # --- validation ---------------------------------------------------------------------------
    def check(self, x: Any, name: str = "x", *, boundary: int | None = None) -> Sequences:
        """Check ``x`` is a :class:`~ebms.sequences.Sequences` batch of this space (two host syncs,
        three with ``boundary``): the check of every sentence argument against its space.

        In order: ``x`` is ``Sequences`` (:meth:`Sequences.coerce <ebms.sequences.Sequences.coerce>`,
        no other form); its lengths lie in ``[min_length, max_length]``; every real token is in
        ``[0, V)`` (:meth:`~ebms.sequences.Sequences.check_vocabulary`); with ``boundary`` (``</s>``
        / ``<s>``, 0 by the LM token contract), that id occurs inside no sequence. The padding is
        not looked at, and the padded width ``T`` may exceed ``max_length``. An empty batch passes.

        Args:
            x: the batch, ``tokens (B, T)`` and ``lengths (B,)``.
            name: its name in messages (``x.lengths: ...``, ``x.tokens: ...``).
            boundary: an id refused inside a sentence (a sentence model's input), or ``None``.

        Returns:
            ``x`` itself.

        Raises:
            TypeError: ``x`` is not a ``Sequences`` (e.g. a tensor of token ids: wrap it first,
                ``Sequences(tokens, lengths)``).
            ValueError: a length, a token id or a boundary out of place, naming the first
                offending entry.
        """
        x = Sequences.coerce(x, name=name, pairs=False)
        if x.batch_size == 0:
            return x
        lo, hi = (int(v) for v in torch.aminmax(x.lengths))
        if lo < self.min_length or hi > self.max_length:
            raise ValueError(
                f"{name}.lengths: expected lengths in [{self.min_length}, {self.max_length}]; got min {lo}, max {hi}"
            )
        V = self.vocab_size
        x.check_vocabulary(V, f"{name}.tokens", expected=f"expected token ids in [0, {V - 1}] (vocab_size {V})")
        if boundary is not None:
            inside = x.mask() & (x.tokens == boundary)
            if bool(inside.any()):
                b, t = (int(i) for i in inside.nonzero()[0])
                raise ValueError(f"{name}.tokens: id {boundary} is the sentence boundary and cannot occur inside a "
                                 f"sentence; got it at sequence {b}, position {t}")
        return x

    #: the :class:`~ebms.spaces.Space` contract's name of :meth:`check` (samplers call ``space.validate``).
    validate = check

    # --- random starts ------------------------------------------------------------------------
    def random(
        self,
        n: int,
        *,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
        lengths: int | Tensor | None = None,
    ) -> Sequences:
        """``n`` random sequences, padded to width ``max_length`` with token 0.

        Lengths are uniform on ``[min_length, max_length]`` unless ``lengths`` gives them (an int
        for all, or an integer tensor ``(n,)``); tokens are uniform on ``[0, V)``, independently.
        Random draws, in order: the lengths (when drawn), then a ``(n, max_length)`` block of tokens.

        Args:
            n: number of sequences ``>= 0`` (0 gives an empty batch).
            generator: the source of randomness.
            device: where to put the batch (default: that of a ``lengths`` tensor, else the CPU).
            lengths: optional fixed lengths, within ``[min_length, max_length]``.

        Returns:
            A ``Sequences`` with ``tokens (n, max_length)`` and ``lengths (n,)``.
        """
        check_int(n, "n", minimum=0)
        lo, hi = self.min_length, self.max_length
        if lengths is None:
            lens = torch.randint(lo, hi + 1, (n,), generator=generator, device=device)
        elif isinstance(lengths, Tensor):
            if lengths.dtype.is_floating_point or lengths.dtype.is_complex or lengths.dtype == torch.bool:
                raise TypeError(f"lengths: expected an integer tensor ({n},); got dtype {lengths.dtype}")
            if tuple(lengths.shape) != (n,):
                raise ValueError(f"lengths: expected shape ({n},); got {tuple(lengths.shape)}")
            if n and not (lo <= int(lengths.min()) and int(lengths.max()) <= hi):
                raise ValueError(
                    f"lengths: expected values in [{lo}, {hi}]; got min {int(lengths.min())}, max {int(lengths.max())}"
                )
            lens = lengths.to(device=lengths.device if device is None else device, dtype=torch.long)
        elif isinstance(lengths, bool) or not isinstance(lengths, int) or not lo <= lengths <= hi:
            raise ValueError(f"lengths: expected an int in [{lo}, {hi}] or an integer tensor ({n},); got {lengths!r}")
        else:
            lens = torch.full((n,), lengths, dtype=torch.long, device=device)
        tokens = torch.randint(self.vocab_size, (n, hi), generator=generator, device=lens.device)
        tokens.masked_fill_(torch.arange(hi, device=lens.device) >= lens[:, None], 0)
        return Sequences(tokens, lens, validate=False)

    # --- exact enumeration --------------------------------------------------------------------
    def enumerate(self, chunk_size: int = 1 << 16, *, device: torch.device | str | None = None) -> Iterator[Sequences]:
        """Every sequence of the space, in blocks of at most ``chunk_size``.

        Order: by length (shortest first), then lexicographic with position 0 most significant,
        so the sequence with tokens ``x_0 .. x_{L-1}`` comes at
        ``sum_{l < L} V^l + sum_t x_t V^(L-1-t)`` (counting lengths from ``min_length``; see
        :meth:`state_index`). A block holds sequences of one length ``L`` and has width ``T = L``
        (no padding).

        Raises:
            ValueError: the space has more than :data:`~ebms.spaces.MAX_EXACT_STATES` sequences.
        """
        check_int(chunk_size, "chunk_size", minimum=1)
        n = self.num_states
        if n > MAX_EXACT_STATES:
            raise ValueError(
                f"enumerate: {self!r} has {n} sequences, more than the exact-enumeration limit "
                f"MAX_EXACT_STATES = {MAX_EXACT_STATES} (2**25); enumerate only tiny spaces "
                "(a smaller vocab_size or max_length) and sample larger ones"
            )
        return self._blocks(chunk_size, device)

    def _blocks(self, chunk_size: int, device: torch.device | str | None) -> Iterator[Sequences]:
        V = self.vocab_size
        for L in range(self.min_length, self.max_length + 1):
            powers = V ** torch.arange(L - 1, -1, -1, device=device, dtype=torch.int64)
            for start in range(0, V**L, chunk_size):
                s = torch.arange(start, min(start + chunk_size, V**L), device=device, dtype=torch.int64)
                tokens = (s.unsqueeze(1) // powers) % V  # (n, L), digit t of s in base V
                yield Sequences(tokens, torch.full((s.shape[0],), L, dtype=torch.long, device=device), validate=False)

    def state_index(self, x: Sequences) -> Tensor:
        """Position of each sequence in :meth:`enumerate` order, ``LongTensor (B,)`` (no validation).

        ``x`` must lie in the space (see :meth:`check`); padding is ignored.

        Raises:
            ValueError: the space has more than ``2^63 - 1`` sequences (no 64-bit index).
        """
        if self.num_states > _INT64_MAX:
            raise ValueError(f"state_index: {self!r} has more than 2^63 - 1 sequences; no 64-bit index fits")
        V, dev = self.vocab_size, x.device
        offsets = [0] * (self.max_length + 1)  # offsets[L]: sequences shorter than L
        for L in range(self.min_length + 1, self.max_length + 1):
            offsets[L] = offsets[L - 1] + V ** (L - 1)
        t = torch.arange(x.max_length, device=dev)
        lengths = x.lengths[:, None]
        powers = torch.pow(V, (lengths - 1 - t).clamp(min=0)) * (t < lengths)  # (B, T), 0 at padding
        return (x.tokens * powers).sum(1) + torch.tensor(offsets, device=dev)[x.lengths]

    # --- single-position variants (Gibbs) -----------------------------------------------------
    def position_variants(self, x: Sequences, position: int | Tensor, *, out: Tensor | None = None) -> Sequences:
        """All ``V`` sequences equal to each of ``x``'s except at ``position``, as one batch of ``B*V``.

        Row ``b * V + v`` is sequence ``b`` with token ``v`` at ``position`` and the lengths of
        ``x`` (repeated ``V`` times). Chains whose length is at most ``position`` get ``V`` copies
        that differ only in padding, so all share the energy of ``x[b]``. Cost: one
        ``(B, V, T)`` copy and one scatter; no host sync.

        Args:
            x: ``B`` sequences of padded width ``T``.
            position: one position ``int`` in ``[0, T)``, or one per chain, ``LongTensor (B,)``
                (values not checked: no host sync).
            out: optional contiguous int64 buffer of ``B*V*T`` elements to write the tokens into
                (a position-by-position sampler reuses one for every position).

        Returns:
            ``Sequences`` with ``tokens (B*V, T)`` and ``lengths (B*V,)``.
        """
        B, T, V = x.batch_size, x.max_length, self.vocab_size
        if isinstance(position, Tensor):
            if position.dtype != torch.long or tuple(position.shape) != (B,):
                raise ValueError(
                    f"position: expected an int or a LongTensor ({B},); got {position.dtype} {tuple(position.shape)}"
                )
        elif isinstance(position, bool) or not isinstance(position, int) or not 0 <= position < T:
            raise ValueError(f"position: expected an int in [0, {T}) (T = x.max_length) or a LongTensor (B,); "
                             f"got {position!r}")
        src = x.tokens.unsqueeze(1).expand(B, V, T)
        if out is None:
            buf = src.clone()
        else:
            buf = out.view(B, V, T)
            buf.copy_(src)
        values = torch.arange(V, device=x.device)
        if isinstance(position, Tensor):
            buf.scatter_(2, position.view(B, 1, 1).expand(B, V, 1), values.view(1, V, 1).expand(B, V, 1))
        else:
            buf[:, :, position] = values
        return Sequences(buf.view(B * V, T), x.lengths.repeat_interleave(V), validate=False)

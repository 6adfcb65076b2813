"""Private: batching encoded text (re-exported by :mod:`ebms.data.text`)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ebms._checks import check_int
from ebms.sequences import Sequences, length_buckets

__all__ = ["bptt_batches", "continuation_pairs", "length_windows", "replace_one_token", "sentence_batches",
           "unigram_probs"]


def sentence_batches(data: Sequences, batch_size: int, *, shuffle: bool = True,
                     generator: torch.Generator | None = None) -> list[Sequences]:
    """Cut encoded sentences into length-bucketed batches (:func:`~ebms.sequences.length_buckets`).

    Sentences are sorted by length (ties in random order when ``shuffle``), cut into runs of
    ``batch_size``, and the runs are put in random order (from ``generator``), so each batch
    holds sentences of similar length and carries little padding. Each batch is trimmed to its
    longest sentence with padding set to ``0`` (:meth:`~ebms.sequences.Sequences.canonical`).
    Every sentence appears in exactly one batch; the same generator seed gives the same batches.
    Cost: one sort, ``O(B log B)``, and one copy of the data.

    Args:
        data: all the sentences, ``(B, T)``.
        batch_size: sentences per batch (the last of a length run may be smaller).
        shuffle: randomise tie order and batch order; ``False`` gives shortest-first batches.
        generator: the source of randomness (CPU).

    Returns:
        A list of :class:`~ebms.sequences.Sequences` batches.
    """
    data = Sequences.coerce(data, name="data", pairs=False, expected="a Sequences batch (Vocabulary.encode)")
    check_int(batch_size, "batch_size", minimum=1)
    groups = length_buckets(data.lengths, batch_size, shuffle=shuffle, generator=generator)
    return [data[idx.to(data.device)].canonical() for idx in groups]


def bptt_batches(ids: Tensor, batch_size: int, bptt: int, *, drop_last: bool = False) -> list[tuple[Tensor, Tensor]]:
    r"""Cut one token stream into ``(inputs, targets)`` batches for truncated back-propagation through time.

    The classic contiguous-stream layout (Zaremba, Sutskever & Vinyals, 2014; batch first): the
    stream of ``N`` ids is cut into ``B = batch_size`` rows of ``C = N // B`` consecutive ids
    (the last ``N mod B`` ids are dropped), ``rows[b] = ids[b C : (b + 1) C]``. Batch ``k``
    holds columns ``[k T, k T + t_k)`` of the rows as inputs and the same columns shifted by one
    as targets, with ``T = bptt`` and ``t_k = min(T, C - 1 - k T)``:

    .. math:: x_k[b, j] = \mathrm{ids}[b C + k T + j], \qquad y_k[b, j] = \mathrm{ids}[b C + k T + j + 1].

    Row ``b`` of batch ``k + 1`` continues row ``b`` of batch ``k``, so a recurrent state carried
    (detached) across batches sees one unbroken text per row. Every id except each row's first is
    a target exactly once. The batches are views of one ``(B, C)`` tensor (no copy).

    Args:
        ids: ``(N,)`` integer token stream (e.g. ``Vocabulary.encode_stream``).
        batch_size: ``B``, the number of parallel rows.
        bptt: ``T``, the columns per batch (the truncation length).
        drop_last: drop a final batch shorter than ``T``.

    Returns:
        A list of ``(inputs, targets)``, each ``(B, t_k)`` int64.

    Raises:
        ValueError: a stream too short for two columns (``N < 2 B``), or bad sizes.
        TypeError: a non-integer or non-tensor ``ids``.

    Example:
        >>> [(x.tolist(), y.tolist()) for x, y in bptt_batches(torch.arange(10), 2, 3)]
        [([[0, 1, 2], [5, 6, 7]], [[1, 2, 3], [6, 7, 8]]), ([[3], [8]], [[4], [9]])]
    """
    if not isinstance(ids, Tensor) or ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise TypeError(f"ids: expected an integer tensor of token ids; got {getattr(ids, 'dtype', type(ids).__name__)}")
    if ids.dim() != 1:
        raise ValueError(f"ids: expected a 1-D stream (N,); got shape {tuple(ids.shape)}")
    check_int(batch_size, "batch_size", minimum=1)
    check_int(bptt, "bptt", minimum=1)
    cols = ids.shape[0] // batch_size
    if cols < 2:
        raise ValueError(f"ids: a stream of {ids.shape[0]} tokens is too short for batch_size={batch_size} (needs at "
                         f"least {2 * batch_size}: two columns per row); use a smaller batch_size")
    rows = ids[: cols * batch_size].long().view(batch_size, cols)
    out = []
    for start in range(0, cols - 1, bptt):
        width = min(bptt, cols - 1 - start)
        if drop_last and width < bptt:
            break
        out.append((rows[:, start:start + width], rows[:, start + 1:start + 1 + width]))
    return out


def length_windows(x: Sequences, seed: int) -> Callable[[int, torch.Generator], tuple[Tensor, Tensor]]:
    """Batches for the :class:`~ebms.train.Trainer`: ``batch_size`` sentences of similar length, cut
    to the longest of them, as ``(tokens, lengths)``.

    The sentences are ordered by length (ties in a random order fixed by ``seed``); a batch is the
    cyclic window of ``batch_size`` consecutive sentences from a start drawn uniformly from the
    trainer's generator, so every sentence is in a batch with probability ``B / N`` and a resumed run
    draws the same batches. Padding is about ``mean length / longest in a random batch`` of the work
    of uniform batches (half on PTB).

    Raises:
        TypeError: ``x`` is not a :class:`~ebms.sequences.Sequences`, or ``seed`` not an int.
        ValueError: no sentences.
    """
    x = Sequences.coerce(x, name="x", pairs=False, expected="a Sequences batch (Vocabulary.encode)")
    if x.batch_size == 0:
        raise ValueError("x: expected at least one sentence to draw batches from; got none")
    check_int(seed, "seed")
    order = torch.randperm(x.batch_size, generator=torch.Generator().manual_seed(seed))
    order = order[torch.argsort(x.lengths[order], stable=True)]
    tokens, lengths, n = x.tokens[order], x.lengths[order], x.batch_size

    def draw(batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        start = int(torch.randint(n, (1,), generator=generator, device=generator.device))
        rows = (start + torch.arange(batch_size)) % n
        width = int(lengths[rows].max())
        return tokens[rows, :width], lengths[rows]

    return draw


def unigram_probs(x: Sequences, vocab_size: int, *, end: bool = False) -> Tensor:
    """Token frequencies of ``x``, ``(vocab_size,)`` float64, with every token counted once more
    (add-one) and the boundary id ``0`` at probability 0: the token proposal of the
    trans-dimensional sampler. ``end=True``: the boundary counts as ``</s>``, once per sentence
    (plus one), the unigram law of an LM that ends sentences (e.g. the start of a DNCE noise LM).

    Raises:
        ValueError: a token id at or above ``vocab_size`` (the result would be longer than ``V``).
    """
    x = Sequences.coerce(x, name="x", pairs=False, expected="a Sequences batch (Vocabulary.encode)")
    check_int(vocab_size, "vocab_size", minimum=2)
    x.check_vocabulary(vocab_size, "x")
    counts = torch.bincount(x.tokens[x.mask()], minlength=vocab_size).double() + 1.0
    counts[0] = x.batch_size + 1.0 if end else 0.0
    return counts / counts.sum()


def continuation_pairs(x: Sequences, prefix_length: int, horizon: int) -> tuple[Sequences, Sequences]:
    """``(prefixes, continuations)`` of the sentences of ``x`` longer than ``prefix_length``: each
    prefix is the first ``prefix_length`` tokens, its continuation the next at most ``horizon``
    (shorter where the sentence ends sooner): the ``(c, x)`` pairs of a residual EBM with horizon
    ``K`` (:class:`~ebms.models.ResidualLM`), e.g. held-out text to score or training positives.

    Raises:
        ValueError: ``prefix_length`` or ``horizon`` below 1.
    """
    x = Sequences.coerce(x, name="x", pairs=False, expected="a Sequences batch (Vocabulary.encode)")
    P, K = check_int(prefix_length, "prefix_length", minimum=1), check_int(horizon, "horizon", minimum=1)
    rows = (x.lengths > P).nonzero().squeeze(1)
    tokens, lengths = x.tokens[rows], x.lengths[rows]
    cont_len = (lengths - P).clamp(max=K)
    cont = torch.nn.functional.pad(tokens, (0, P + K))[:, P:P + K]
    cont = cont.masked_fill(torch.arange(K, device=cont.device) >= cont_len.unsqueeze(1), 0)
    return Sequences(tokens[:, :P].contiguous(), torch.full_like(cont_len, P)), Sequences(cont, cont_len)


def replace_one_token(x: Sequences, vocab_size: int, *, generator: torch.Generator | None = None) -> Sequences:
    """``x`` with one token of each sentence replaced: the position uniform over the sentence, the new
    token uniform over the ``V - 2`` other ids of ``1 .. V-1`` (a one-token corruption, to test whether a
    scorer prefers the real sentence). Draws: ``rand(B)`` for the positions, then ``randint(B)``.

    Raises:
        ValueError: an empty sentence (nothing to replace) or ``vocab_size < 3``.
    """
    V = check_int(vocab_size, "vocab_size", minimum=3)
    x = Sequences.coerce(x, name="x", pairs=False, expected="a Sequences batch (Vocabulary.encode)")
    x.check_vocabulary(V, "x")
    if x.batch_size and int(x.lengths.min()) == 0:
        raise ValueError(f"x: sentence {int((x.lengths == 0).nonzero()[0])} is empty; it has no token to replace")
    rows = torch.arange(x.batch_size)
    pos = (torch.rand(x.batch_size, generator=generator) * x.lengths).long()
    shift = torch.randint(1, V - 1, (x.batch_size,), generator=generator)
    tokens = x.tokens.clone()
    tokens[rows, pos] = (tokens[rows, pos] - 1 + shift) % (V - 1) + 1
    return Sequences(tokens, x.lengths.clone(), validate=False)

"""The trainer's batch streams of :mod:`ebms.data.batch_streams`: what each draw holds, and its seeds."""

from __future__ import annotations

import pytest
import torch

from ebms.data import NegativeCache, nce_batches, tagged_batches
from ebms.sequences import Sequences

PREFIX = Sequences.from_lists([[1, 2], [3], [2, 2, 2]])
CONT = Sequences.from_lists([[4], [5, 6], [7]])


class _Echo:
    """A base LM whose draw for prefix ``p`` is ``[p's first token + 10]``, one per prefix row (as the cache calls it)."""

    per_prefix_sampling = False  # declared: no per_prefix= form (ebms.capabilities.SupportsPrefixSampling)

    def sample(self, n: int, *, prefix: Sequences, **_: object) -> Sequences:
        return Sequences((prefix.tokens[:, 0] + 10).unsqueeze(1), torch.ones(n, dtype=torch.long))


def _cache() -> NegativeCache:
    return NegativeCache.build(_Echo(), PREFIX, 3, horizon=1, generator=torch.Generator().manual_seed(0), progress=False)


def test_nce_batches_pair_each_drawn_prefix_with_its_continuation_and_its_own_negatives():
    stream = nce_batches(_cache(), PREFIX, CONT, 2)
    prefix, cont, neg = stream(5, torch.Generator().manual_seed(1))
    i = torch.randint(3, (5,), generator=torch.Generator().manual_seed(1))  # the rows come first from the generator
    assert prefix.tolist() == [PREFIX.tolist()[k] for k in i.tolist()]
    assert cont.tolist() == [CONT.tolist()[k] for k in i.tolist()]
    assert neg.batch_size == 10 and neg.tolist() == [[PREFIX.tokens[k, 0].item() + 10] for k in i.repeat_interleave(2).tolist()]
    packed = nce_batches(_cache(), PREFIX, CONT, 2, pack=lambda *rows: tuple(r.batch_size for r in rows))
    assert packed(5, torch.Generator().manual_seed(1)) == (5, 5, 10)
    with pytest.raises(ValueError, match="^nu: "):
        nce_batches(_cache(), PREFIX, CONT, 0)
    with pytest.raises(ValueError, match="^continuation: expected one row per prefix"):
        nce_batches(_cache(), PREFIX, CONT[torch.arange(2)], 1)


def test_tagged_batches_draw_tagged_rows_cut_to_the_longest_and_half_unlabelled_when_given():
    words = torch.tensor([[1, 2, 0, 0], [3, 0, 0, 0], [4, 5, 6, 0]])
    tags = torch.tensor([[1, 2, 0, 0], [1, 0, 0, 0], [2, 2, 1, 0]])
    lengths = torch.tensor([2, 1, 3])
    w, y, n = tagged_batches(words, tags, lengths)(4, torch.Generator().manual_seed(0))
    i = torch.randint(3, (4,), generator=torch.Generator().manual_seed(0))
    assert torch.equal(n, lengths[i]) and w.shape[1] == int(lengths[i].max())
    assert torch.equal(w, words[i, : w.shape[1]]) and torch.equal(y, tags[i, : w.shape[1]])
    u_words, u_lengths = torch.tensor([[7, 7, 7, 7], [8, 0, 0, 0]]), torch.tensor([4, 1])
    w, y, n = tagged_batches(words, tags, lengths, unlabelled=(u_words, u_lengths))(5, torch.Generator().manual_seed(3))
    assert w.shape[0] == 5 and bool((y[3:] == -1).all()) and bool((y[:3] >= 0).all())  # 5 - 5 // 2 tagged first
    assert set(w[3:, 0].tolist()) <= {7, 8} and set(w[:3, 0].tolist()) <= {1, 3, 4}
    with pytest.raises(ValueError, match="^tags: expected one row per sentence"):
        tagged_batches(words, tags[:2], lengths)

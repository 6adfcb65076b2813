"""``check_batch``: floating batches by default; integer tensors and token sequences on request."""

import pytest
import torch

from ebms.objectives._base import check_batch
from ebms.sequences import Sequences


def test_floating_batches_are_returned_detached():
    x = torch.ones(3, 2, requires_grad=True)
    out = check_batch(x)
    assert not out.requires_grad and torch.equal(out, x)


def test_integer_and_sequence_batches_pass_when_the_objective_allows_them():
    idx = torch.tensor([[0, 2], [1, 1]])
    assert check_batch(idx, integer=True) is not None and check_batch(idx, integer=True).dtype == torch.long
    seqs = Sequences.from_lists([[1, 2], [3]])
    assert check_batch(seqs, integer=True) is seqs
    x = torch.ones(2, 2)
    assert torch.equal(check_batch(x, integer=True), x)  # floats stay accepted


def test_check_batch_messages_name_argument_and_value():
    with pytest.raises(TypeError, match=r"batch: expected a floating-point tensor; got dtype torch.int64"):
        check_batch(torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(TypeError, match=r"batch: expected a floating-point tensor; got Sequences"):
        check_batch(Sequences.from_lists([[1]]))
    with pytest.raises(TypeError, match=r"batch: expected a floating-point or integer tensor; got dtype torch.bool"):
        check_batch(torch.zeros(2, 2, dtype=torch.bool), integer=True)
    with pytest.raises(ValueError, match=r"batch: expected at least one sequence; got an empty batch"):
        check_batch(Sequences(torch.zeros(0, 3, dtype=torch.long)), integer=True)
    with pytest.raises(ValueError, match=r"batch: expected at least one row; got shape \(0, 2\)"):
        check_batch(torch.zeros(0, 2, dtype=torch.long), integer=True)
    with pytest.raises(ValueError, match=r"batch: expected a finite tensor; got 1 NaN"):
        check_batch(torch.tensor([[float("nan"), 0.0]]), integer=True)
    with pytest.raises(TypeError, match=r"batch: expected a torch.Tensor; got list"):
        check_batch([[1.0]])

"""The feature CRF's full-batch pass on its observed weights (kept (A, C) tables, no dense table per pass)
against the pass on the dense weights (``effective_weights``), bit for bit, and against enumeration."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn

from ebms.fit import fit_feature_crf
from ebms.models.feature_crf import FeatureCRF
from ebms.objectives.feature_crf import FeatureCRFLikelihood
from ebms.structured.features import observed_pairs, observed_transitions

A, C = 9, 4


class _DenseOnly(nn.Module):
    """The model seen through ``effective_weights`` only: the objective takes its plain path."""

    def __init__(self, model: FeatureCRF) -> None:
        super().__init__()
        self.model = model

    def effective_weights(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.model.effective_weights()


def _data(n=7, t=6, f=3, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, A, (n, t, f), generator=g)
    w = (torch.rand(n, t, f, generator=g) * 2).to(dtype)
    lengths = torch.randint(1, t + 1, (n,), generator=g)
    lengths[0], lengths[1] = t, 1  # a full sentence and a one-token one
    tags = torch.randint(0, C, (n, t), generator=g)
    return ids, w, lengths, tags


def _model(ids, lengths, tags, masked, dtype, seed=1):
    kw = {}
    if masked:
        kw = {"observed": observed_pairs(ids, tags, lengths, A, C),
              "observed_transitions": observed_transitions(tags, lengths, C)}
    m = FeatureCRF(A, C, dtype=dtype, **kw)
    with torch.no_grad():
        g = torch.Generator().manual_seed(seed)
        m.state_values.copy_(torch.randn(m.state_values.shape, generator=g, dtype=dtype))
        m.transition_values.copy_(torch.randn(m.transition_values.shape, generator=g, dtype=dtype))
    return m


def _pass(objective, model, grads_of, n):
    for p in grads_of.parameters():
        p.grad = None
    loss = objective(model, torch.arange(n)).loss
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in grads_of.parameters()]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("masked", [True, False])
def test_full_batch_pass_on_observed_weights_equals_the_dense_pass_bit_for_bit(dtype, masked):
    ids, w, lengths, tags = _data(dtype=dtype)
    m = _model(ids, lengths, tags, masked, dtype)
    fast = FeatureCRFLikelihood.from_padded(ids, w, lengths, tags, n_attributes=A, l2=0.3, reduction="sum",
                                            bucket_size=3)
    plain = FeatureCRFLikelihood.from_padded(ids, w, lengths, tags, n_attributes=A, l2=0.3, reduction="sum",
                                             bucket_size=3)
    for step in range(3):  # the kept tables are reused: new weights each time
        loss_f, grads_f = _pass(fast, m, m, len(lengths))
        loss_p, grads_p = _pass(plain, _DenseOnly(m), m, len(lengths))
        assert loss_f.dtype == dtype
        assert torch.equal(loss_f, loss_p)
        assert all(torch.equal(a, b) for a, b in zip(grads_f, grads_p))
        with torch.no_grad():
            m.state_values.add_(0.25 * (step + 1))
    if masked:
        assert fast.corpus is not None and set(fast.corpus._tables) == {"weights", "gradient"}
        table = fast.corpus._tables["weights"][1]  # zero off the observed entries
        off = ~m.state_mask
        assert bool((table[off] == 0).all())


def test_full_batch_loss_equals_enumeration():
    ids, w, lengths, tags = _data(n=3, t=4)
    m = _model(ids, lengths, tags, True, torch.float64)
    objective = FeatureCRFLikelihood.from_padded(ids, w, lengths, tags, n_attributes=A, reduction="sum")
    em = m.emissions(ids, w)
    tr = m.transitions
    want = torch.zeros((), dtype=torch.float64)
    for b in range(3):
        n = int(lengths[b])

        def score(y, b=b):
            return sum(em[b, i, y[i]] for i in range(len(y))) + sum(tr[y[i - 1], y[i]] for i in range(1, len(y)))

        log_z = torch.logsumexp(torch.stack([score(y) for y in itertools.product(range(C), repeat=n)]), 0)
        want = want + log_z - score(tags[b, :n].tolist())
    torch.testing.assert_close(objective(m, torch.arange(3)).loss, want, rtol=1e-12, atol=1e-12)


def test_a_new_mask_gets_new_tables_and_a_new_index():
    ids, w, lengths, tags = _data()
    m = _model(ids, lengths, tags, True, torch.float64)
    objective = FeatureCRFLikelihood.from_padded(ids, w, lengths, tags, n_attributes=A, reduction="sum")
    _pass(objective, m, m, len(lengths))
    first = m.compact_weights()[1]
    # a checkpoint whose mask differs: the module takes its mask and sizes (see FeatureCRF's load hooks)
    other = FeatureCRF(A, C, observed=torch.rand(A, C, generator=torch.Generator().manual_seed(5)) < 0.5,
                       observed_transitions=m.transition_mask)
    with torch.no_grad():
        other.state_values.normal_(generator=torch.Generator().manual_seed(6))
        other.transition_values.copy_(m.transition_values)
    m.load_state_dict(other.state_dict())
    assert not torch.equal(m.compact_weights()[1], first)
    loss_f, grads_f = _pass(objective, m, m, len(lengths))
    plain = FeatureCRFLikelihood.from_padded(ids, w, lengths, tags, n_attributes=A, reduction="sum")
    loss_p, grads_p = _pass(plain, _DenseOnly(m), m, len(lengths))
    assert torch.equal(loss_f, loss_p) and all(torch.equal(a, b) for a, b in zip(grads_f, grads_p))


def test_the_index_follows_an_in_place_change_of_the_mask():
    ids, w, lengths, tags = _data()
    m = _model(ids, lengths, tags, True, torch.float64)
    before = m.compact_weights()[1]
    assert m.compact_weights()[1] is before  # kept while the mask is unchanged
    with torch.no_grad():
        m.state_mask.copy_(m.state_mask.flip(0))
    after = m.compact_weights()[1]
    assert torch.equal(after, m.state_mask.reshape(-1).nonzero().squeeze(1))


def test_lbfgs_fit_is_unchanged_by_the_fast_pass():
    ids, w, lengths, tags = _data(n=12, seed=3)
    results = []
    for hide in (False, True):
        m = _model(ids, lengths, tags, True, torch.float64)
        with torch.no_grad():
            m.state_values.zero_()
            m.transition_values.zero_()
        if hide:  # the plain path: a model class without compact_weights
            m.compact_weights = None  # type: ignore[method-assign]
        res = fit_feature_crf(m, ids, w, lengths, tags, c1=0.0, c2=1.0, max_iterations=8, progress=False)
        results.append((res.loss, m.state_values.detach().clone()))
    assert results[0][0] == results[1][0]
    assert torch.equal(results[0][1], results[1][1])

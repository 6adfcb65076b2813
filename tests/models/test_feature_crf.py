"""Tests for ebms.models.feature_crf and its trainer ebms.fit.fit_feature_crf: exact log Z, gradients, masks, training, crfsuite objective."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from ebms.fit import fit_feature_crf
from ebms.models.feature_crf import FeatureCRF
from ebms.objectives.feature_crf import corpus_from_padded
from ebms.structured.features import AttributeVocabulary, observed_pairs, observed_transitions

A, C = 6, 3


def _data(seed: int = 0, n: int = 4, t: int = 4, f: int = 3):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, A, (n, t, f), generator=g)
    w = torch.rand(n, t, f, generator=g, dtype=torch.float64) * 2
    w[ids == 0] = 0.0
    lengths = torch.randint(1, t + 1, (n,), generator=g)
    lengths[0] = t
    tags = torch.randint(0, C, (n, t), generator=g)
    return ids, w, lengths, tags


def _random_model(seed: int = 1, **kw) -> FeatureCRF:
    m = FeatureCRF(A, C, **kw)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        m.set_weights(torch.randn(A, C, generator=g, dtype=torch.float64),
                      torch.randn(C, C, generator=g, dtype=torch.float64))
    return m


def _brute_log_z(m: FeatureCRF, ids, w, lengths) -> torch.Tensor:
    em = m.emissions(ids, w)
    out = []
    for b in range(ids.shape[0]):
        n = int(lengths[b])
        scores = []
        for y in itertools.product(range(C), repeat=n):
            s = sum(em[b, i, y[i]] for i in range(n))
            s = s + sum(m.transitions[y[i - 1], y[i]] for i in range(1, n))
            scores.append(s)
        out.append(torch.logsumexp(torch.stack(scores), 0))
    return torch.stack(out)


def test_log_partition_equals_enumeration_and_emissions_equal_the_attribute_sum():
    ids, w, lengths, _ = _data()
    m = _random_model()
    crf = m(ids, w, lengths)
    torch.testing.assert_close(crf.log_partition, _brute_log_z(m, ids, w, lengths))
    manual = (w.unsqueeze(-1) * m.state_weights[ids]).sum(2)
    torch.testing.assert_close(crf.emissions, manual)


def test_nll_gradient_matches_finite_differences():
    ids, w, lengths, tags = _data(seed=3)
    m = _random_model(seed=4)

    def nll(sw: torch.Tensor, tr: torch.Tensor) -> torch.Tensor:
        m.set_weights(sw.detach(), tr.detach())
        # functional version: emissions from sw directly so gradcheck sees the inputs
        em = (w.unsqueeze(-1) * sw[ids]).sum(2)
        from ebms.structured.linear_chain import LinearChainCRF
        return -LinearChainCRF(em, tr, lengths).log_prob(tags).sum()

    sw = m.state_weights.detach().clone().requires_grad_()
    tr = m.transitions.detach().clone().requires_grad_()
    assert torch.autograd.gradcheck(nll, (sw, tr))
    # the model's own path (embedding_bag) has the same gradient
    loss = -m(ids, w, lengths).log_prob(tags).sum()
    loss.backward()
    g_sw, g_tr = torch.autograd.grad(nll(sw, tr), (sw, tr))
    torch.testing.assert_close(m.state_values.grad.view(A, C), g_sw)
    torch.testing.assert_close(m.transition_values.grad.view(C, C), g_tr)


@pytest.mark.parametrize("bucket_size", [1, 3, 100])
@pytest.mark.parametrize("masked", [False, True])
def test_bucketed_full_batch_nll_and_gradient_equal_the_model_nll(bucket_size, masked):
    ids, w, lengths, tags = _data(seed=5, n=7)
    kw = {}
    if masked:
        kw = {"observed": observed_pairs(ids, tags, lengths, A, C), "observed_transitions": observed_transitions(tags, lengths, C)}
    m = _random_model(seed=6, **kw)
    params = (m.state_values, m.transition_values)
    loss = -m(ids, w, lengths).log_prob(tags).sum()
    g_ref = torch.autograd.grad(loss, params)
    corpus = corpus_from_padded(ids, w, lengths, tags, A, bucket_size, torch.float64)
    fast = corpus.nll(*m.effective_weights())
    g_fast = torch.autograd.grad(fast, params)
    torch.testing.assert_close(fast, loss)
    torch.testing.assert_close(g_fast, g_ref)


def test_parameters_are_the_observed_weights_only_and_set_weights_round_trips():
    ids, w, lengths, tags = _data(seed=8, n=6)
    obs, obs_t = observed_pairs(ids, tags, lengths, A, C), observed_transitions(tags, lengths, C)
    m = FeatureCRF(A, C, observed=obs, observed_transitions=obs_t)
    assert m.state_values.shape == (int(obs.sum()),) and m.transition_values.shape == (int(obs_t.sum()),)
    dense = torch.randn(A, C, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    m.set_weights(dense)
    assert torch.equal(m.state_weights, torch.where(obs, dense, 0.0))  # observed kept, others exactly 0
    assert torch.equal(m.state_values, dense[obs])  # row-major order of the mask
    with pytest.raises(ValueError, match=r"transitions: expected shape \(3, 3\)"):
        m.set_weights(transitions=torch.zeros(C, C + 1, dtype=torch.float64))


def test_a_checkpoint_of_dense_weights_loads_into_the_compact_model():
    ids, w, lengths, tags = _data(seed=8, n=6)
    obs, obs_t = observed_pairs(ids, tags, lengths, A, C), observed_transitions(tags, lengths, C)
    m = FeatureCRF(A, C, observed=obs, observed_transitions=obs_t)
    g = torch.Generator().manual_seed(1)
    dense_w = torch.where(obs, torch.randn(A, C, dtype=torch.float64, generator=g), 0.0)
    dense_a = torch.where(obs_t, torch.randn(C, C, dtype=torch.float64, generator=g), 0.0)
    old = {"state_weights": dense_w, "transitions": dense_a, "state_mask": obs, "transition_mask": obs_t}
    m.load_state_dict(old)  # the layout written before parameters were compact
    assert torch.equal(m.state_weights, dense_w) and torch.equal(m.transitions, dense_a)
    assert set(m.state_dict()) == {"state_values", "transition_values", "state_mask", "transition_mask"}


def test_encoded_corpus_gives_the_same_full_batch_objective_as_padded_tensors():
    from ebms.objectives.feature_crf import BucketedCorpus

    xs = [[{f"a{(i * 7 + j * 3 + k) % 11}": 1.0 + k for k in range(1 + (i + j) % 4)} for j in range(1 + i % 5)]
          for i in range(9)]
    ys = [[f"y{(i + j) % C}" for j in range(len(x))] for i, x in enumerate(xs)]
    vocab = AttributeVocabulary.fit(xs, ys)
    ids, w, lengths = vocab.encode(xs)
    tags = vocab.encode_tags(ys)
    flat = AttributeVocabulary([]).encode_flat(iter(xs), grow=True)
    m = FeatureCRF(len(vocab), C)
    m.set_weights(torch.randn(len(vocab), C, dtype=torch.float64, generator=torch.Generator().manual_seed(2)))
    ref = corpus_from_padded(ids, w, lengths, tags, len(vocab), 4, torch.float64).nll(*m.effective_weights())
    got = BucketedCorpus(lambda b: flat.padded(b)[:2], flat.lengths, tags, len(vocab), 4, torch.float64)
    torch.testing.assert_close(got.nll(*m.effective_weights()), ref)


def test_lbfgs_final_loss_is_the_crfsuite_objective():
    ids, w, lengths, tags = _data(seed=7, n=6)
    m = FeatureCRF(A, C)
    c1, c2 = 0.3, 0.5
    res = fit_feature_crf(m, ids, w, lengths, tags, c1=c1, c2=c2, max_iterations=30,
                          progress=False)
    with torch.no_grad():
        nll = -m(ids, w, lengths).log_prob(tags).sum()
        params = torch.cat([m.state_weights.flatten(), m.transitions.flatten()])
        f = nll + c1 * params.abs().sum() + c2 * (params * params).sum()
    assert res.loss == pytest.approx(float(f), rel=1e-12)
    assert len(res.log) == res.iterations and res.stop_reason in ("epsilon", "delta",
                                                                 "max_iterations")


@pytest.mark.parametrize("method,c1", [("lbfgs", 0.0), ("lbfgs", 0.2), ("adam", 0.1), ("sgd", 0.0)])
def test_unobserved_weights_stay_exactly_zero_after_training(method, c1):
    ids, w, lengths, tags = _data(seed=8, n=6)
    obs = observed_pairs(ids, tags, lengths, A, C)
    obs_t = observed_transitions(tags, lengths, C)
    assert not bool(obs.all()) and not bool(obs_t.all())
    m = FeatureCRF(A, C, observed=obs, observed_transitions=obs_t)
    fit_feature_crf(m, ids, w, lengths, tags, method=method, c1=c1, c2=0.1, max_iterations=5,
                    lr=0.1, batch_size=2, progress=False, generator=torch.Generator().manual_seed(0))
    assert bool((m.state_weights[~obs] == 0).all()) and bool((m.transitions[~obs_t] == 0).all())
    assert bool((m.state_weights[obs] != 0).any())


def test_tiny_dataset_is_learned_to_full_training_accuracy():
    sents = [(["the", "cat", "sat"], ["D", "N", "V"]), (["a", "dog", "ran"], ["D", "N", "V"]),
             (["dogs", "sat"], ["N", "V"]), (["the", "dog"], ["D", "N"]), (["cat", "ran"], ["N", "V"])]
    xs = [[{f"w={word}": 1.0, "bias": 1.0} for word in words] for words, _ in sents]
    ys = [tags for _, tags in sents]
    v = AttributeVocabulary.fit(xs, ys)
    ids, w, lengths = v.encode(xs)
    tags = v.encode_tags(ys)
    m = FeatureCRF(len(v), len(v.tags or []))
    fit_feature_crf(m, ids, w, lengths, tags, c2=0.01, max_iterations=50, progress=False)
    assert v.decode_tags(m.decode(ids, w, lengths, batch_size=2), lengths) == ys


def test_objective_and_fit_match_python_crfsuite():
    pycrfsuite = pytest.importorskip("pycrfsuite")
    ids, w, lengths, tags = _data(seed=9, n=8, t=5)
    xs = [[{f"a{int(a)}": float(x) for a, x in zip(ids[i, j], w[i, j]) if a > 0}
           for j in range(int(lengths[i]))] for i in range(len(ids))]
    ys = [[f"y{int(c)}" for c in tags[i, : int(lengths[i])]] for i in range(len(ids))]
    trainer = pycrfsuite.Trainer(verbose=False)
    for x, y in zip(xs, ys):
        trainer.append(x, y)
    trainer.set_params({"c1": 0.0, "c2": 1.0, "max_iterations": 200, "epsilon": 1e-8})
    trainer.train("/dev/null")
    theirs = trainer.logparser.iterations[-1]["loss"]
    v = AttributeVocabulary.fit(xs, ys)
    i2, w2, l2 = v.encode(xs)
    t2 = v.encode_tags(ys)
    n_tags = len(v.tags or [])
    m = FeatureCRF(len(v), n_tags, observed=observed_pairs(i2, t2, l2, len(v), n_tags),
                   observed_transitions=observed_transitions(t2, l2, n_tags))
    res = fit_feature_crf(m, i2, w2, l2, t2, c2=1.0, max_iterations=200, epsilon=1e-8,
                          progress=False)
    # crfsuite logs its optimum to 6 decimals
    assert res.loss == pytest.approx(theirs, abs=2e-6 + 1e-6 * abs(theirs))


def test_bad_inputs_name_the_argument():
    ids, w, lengths, tags = _data()
    m = FeatureCRF(A, C)
    with pytest.raises(TypeError, match="ids: expected a long tensor"):
        m(ids.int(), w, lengths)
    with pytest.raises(ValueError, match=r"ids: expected a non-empty shape \(B, T, F\)"):
        m(ids[0], w, lengths)
    with pytest.raises(ValueError, match=r"ids: expected values in \[0, 5\]"):
        m(ids + A, w, lengths)
    with pytest.raises(ValueError, match=r"weights \(as ids\): expected shape"):
        m(ids, w[:, :, :1], lengths)
    with pytest.raises(ValueError, match=r"lengths \(B = ids.shape\[0\]\): expected shape"):
        m(ids, w, lengths[:2])
    with pytest.raises(ValueError, match="lengths: expected values in"):
        m(ids, w, lengths + 5)
    with pytest.raises(TypeError, match="observed: expected a bool tensor"):
        FeatureCRF(A, C, observed=torch.zeros(A, C))
    with pytest.raises(ValueError, match=r"observed_transitions: expected a bool tensor of shape \(3, 3\); got shape \(3, 4\)"):
        FeatureCRF(A, C, observed_transitions=torch.zeros(C, C + 1, dtype=torch.bool))
    with pytest.raises(ValueError, match="n_tags: expected an int >= 1"):
        FeatureCRF(A, 0)
    with pytest.raises(ValueError, match="method: expected 'lbfgs', 'sgd' or 'adam'"):
        fit_feature_crf(m, ids, w, lengths, tags, method="newton", progress=False)
    with pytest.raises(ValueError, match=r"tags \(as ids.shape\[:2\]\): expected shape"):
        fit_feature_crf(m, ids, w, lengths, tags[:, :2], progress=False)
    with pytest.raises(ValueError, match="c2: expected a finite number >= 0"):
        fit_feature_crf(m, ids, w, lengths, tags, c2=-1.0, progress=False)
    assert math.isfinite(float(m(ids, w, lengths).log_partition.sum().detach()))


@pytest.mark.parametrize("method", ["lbfgs", "adam"])
def test_fit_on_an_encoded_corpus_equals_the_fit_on_padded_tensors(method):
    xs = [[{f"a{(i * 5 + j * 2 + k) % 9}": 1.0 for k in range(1 + (i + j) % 3)} for j in range(1 + i % 6)]
          for i in range(10)]
    ys = [[f"y{(i * j) % C}" for j in range(len(x))] for i, x in enumerate(xs)]
    vocab = AttributeVocabulary.fit(xs, ys)
    ids, w, lengths = vocab.encode(xs)
    tags = vocab.encode_tags(ys)
    flat = AttributeVocabulary([]).encode_flat(iter(xs), grow=True)
    kw = dict(method=method, c1=0.1, c2=0.5, max_iterations=8, lr=0.1, batch_size=3, progress=False)
    fits = []
    for args in ((ids, w, lengths), (flat, None, None)):
        m = FeatureCRF(len(vocab), len(vocab.tags or []), observed=observed_pairs(ids, tags, lengths, len(vocab), C))
        res = fit_feature_crf(m, *args, tags, generator=torch.Generator().manual_seed(0), **kw)
        fits.append((res.loss, m.state_values.detach().clone()))
    assert fits[0][0] == pytest.approx(fits[1][0], rel=1e-12)
    torch.testing.assert_close(fits[0][1], fits[1][1], rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match=r"weights, lengths: expected None with an EncodedCorpus"):
        fit_feature_crf(FeatureCRF(len(vocab), C), flat, w, None, tags, progress=False)


# -- the objective and the driver -------------------------------------------------------------------


@pytest.mark.parametrize("masked", [False, True])
def test_the_objective_is_the_same_loss_on_the_whole_corpus_and_on_any_batch_of_it(masked):
    from ebms.objectives.feature_crf import FeatureCRFLikelihood

    ids, w, lengths, tags = _data(seed=5, n=7)
    kw = {}
    if masked:
        kw = {"observed": observed_pairs(ids, tags, lengths, A, C), "observed_transitions": observed_transitions(tags, lengths, C)}
    m = _random_model(seed=6, **kw)
    params = (m.state_values, m.transition_values)
    l2 = 0.3
    ref = -m(ids, w, lengths).log_prob(tags).sum() + l2 * sum((p * p).sum() for p in params)
    g_ref = torch.autograd.grad(ref, params)
    for reduction, scale in (("sum", 1.0), ("mean", 7.0)):
        obj = FeatureCRFLikelihood.from_padded(ids, w, lengths, tags, n_attributes=A, l2=l2 / scale,
                                               reduction=reduction, bucket_size=3)
        full = obj(m, torch.randperm(7, generator=torch.Generator().manual_seed(0)))  # any order: cached CSR pass
        assert obj.corpus is not None
        torch.testing.assert_close(full.loss * scale, ref)
        torch.testing.assert_close([g * scale for g in torch.autograd.grad(full.loss, params)], list(g_ref))
        half = obj(m, (torch.tensor([0, 2, 4]), None))  # a tuple batch: its first element holds the ids
        nll3 = -m(ids[[0, 2, 4]], w[[0, 2, 4]], lengths[[0, 2, 4]]).log_prob(tags[[0, 2, 4]]).sum().detach()
        want = (nll3 if reduction == "sum" else nll3 / 3) + l2 / scale * sum((p * p).sum() for p in params)
        torch.testing.assert_close(half.loss, want)
        assert half.metrics["nll"] == pytest.approx(float(nll3) / 3)
        assert half.metrics["nll_token"] == pytest.approx(float(nll3) / float(lengths[[0, 2, 4]].sum()))


def test_the_objective_names_bad_arguments():
    from ebms.objectives.feature_crf import FeatureCRFLikelihood

    ids, w, lengths, tags = _data()
    with pytest.raises(ValueError, match=r"reduction: expected 'mean' or 'sum'; got 'max'"):
        FeatureCRFLikelihood.from_padded(ids, w, lengths, tags, n_attributes=A, reduction="max")
    with pytest.raises(ValueError, match=r"tags: expected shape \(4, >= 4\); got \(4, 2\)"):
        FeatureCRFLikelihood.from_padded(ids, w, lengths, tags[:, :2], n_attributes=A)
    with pytest.raises(ValueError, match=r"l2: expected a finite number >= 0"):
        FeatureCRFLikelihood.from_padded(ids, w, lengths, tags, n_attributes=A, l2=-1.0)
    obj = FeatureCRFLikelihood.from_padded(ids, w, lengths, tags, n_attributes=A)
    with pytest.raises(ValueError, match=r"batch: expected sentence ids, a non-empty 1-d long tensor"):
        obj(FeatureCRF(A, C), torch.tensor([0.0, 1.0]))


def test_fit_feature_crf_runs_the_trainer_in_memory_and_writes_nothing(tmp_path, monkeypatch):
    from ebms.train import Trainer

    monkeypatch.chdir(tmp_path)
    made = []
    real_init = Trainer.__init__

    def spy(self, *args, **kw):
        made.append(kw)
        real_init(self, *args, **kw)

    monkeypatch.setattr(Trainer, "__init__", spy)
    ids, w, lengths, tags = _data(seed=8, n=6)
    state = torch.random.get_rng_state()
    for method in ("lbfgs", "adam"):
        fit_feature_crf(FeatureCRF(A, C), ids, w, lengths, tags, method=method, max_iterations=3, batch_size=2,
                        progress=False, generator=torch.Generator().manual_seed(0))
    assert [kw["run_dir"] for kw in made] == [None, None] and [kw["batch_size"] for kw in made] == [6, None]
    assert torch.equal(torch.random.get_rng_state(), state)  # the caller's global RNG is left alone
    assert list(tmp_path.iterdir()) == []


def test_minibatch_epochs_log_the_size_weighted_mean_objective():
    from ebms.objectives.feature_crf import FeatureCRFLikelihood

    ids, w, lengths, tags = _data(seed=8, n=6)
    m = FeatureCRF(A, C)
    losses = []
    res = fit_feature_crf(m, ids, w, lengths, tags, method="sgd", c2=0.2, lr=0.0, max_iterations=2, batch_size=4,
                          progress=False, callback=lambda e: losses.append(e["loss"]))
    # lr = 0: the weights stay at 0, so each epoch's mean is the objective of the whole set at w = 0
    obj = FeatureCRFLikelihood.from_padded(ids, w, lengths, tags, n_attributes=A, l2=0.2 / 6)
    want = float(obj(m, torch.arange(6)).loss.detach())
    assert losses == pytest.approx([want, want], rel=1e-12) and res.loss == pytest.approx(want, rel=1e-12)
    assert res.iterations == 2 and res.stop_reason == "max_iterations" and len(res.log) == 2

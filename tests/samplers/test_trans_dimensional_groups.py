"""TransDimensional's chain groups and worker processes: the chains depend on ``groups`` and the seed only,
never on ``workers`` (bit for bit, also when the target's weights move in place or its storage is replaced
between steps); grouped chains still follow the exact law; errors and bad settings are named."""

from __future__ import annotations

import copy
import os
import pickle

import pytest
import torch
from _token_targets import V, tv_and_bound
from test_trans_dimensional import TWO_CLASSES, Field, class_kernels, exact

from ebms.models.trf import TRF, DiscreteFeatures, WordClasses, feature_templates
from ebms.samplers import TransDimensional
from ebms.sequences import Sequences


class ChildFails(TRF):
    """A TRF whose energy raises in any process but the one that built it."""

    def __init__(self, trf: TRF) -> None:
        super().__init__(trf.field, trf.length_probs, trf.vocab_size)
        self.parent = os.getpid()

    def energy(self, x: Sequences) -> torch.Tensor:
        if os.getpid() != self.parent:
            raise ValueError("only in the worker")
        return super().energy(x)


def tiny_trf(seed: int = 0) -> tuple[TRF, Sequences, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    vocab = 9
    corpus = Sequences.from_lists([torch.randint(1, vocab, (int(n),), generator=g).tolist()
                                   for n in torch.randint(1, 7, (40,), generator=g)])
    classes = WordClasses.fit(corpus, vocab, 3).classes
    feats = DiscreteFeatures.fit(corpus, vocab, feature_templates(("w", "c", "ws"), 3), classes=classes, eos=True)
    with torch.no_grad():
        feats.weight.normal_(generator=g)
    return TRF.from_corpus(feats, corpus, vocab, max_length=8, smoothing=1.0), corpus, classes


def run_chains(trf: TRF, start: Sequences, classes: torch.Tensor, *, groups: int, workers: int, steps: int = 4,
               between=None) -> list[tuple[torch.Tensor, ...]]:
    sampler = TransDimensional(classes=classes, token_probs=torch.tensor([0.0] + [1.0] * 8), groups=groups,
                               workers=workers)
    g = torch.Generator().manual_seed(5)
    state = sampler.init(trf, start)
    out = []
    for t in range(steps):
        state, info = sampler.step(trf, state, generator=g)
        out.append((state.x.tokens.clone(), state.x.lengths.clone(), state.energy.clone(), info.accept_prob.clone(),
                    info.jumped.clone(), info.move_accept_prob.clone()))
        if between is not None:
            between(t)
            state = sampler.init(trf, state.x)  # the target changed: the cached energies are refreshed
    if sampler._pool is not None:
        sampler._pool.close()
    return out


def assert_same(a: list[tuple[torch.Tensor, ...]], b: list[tuple[torch.Tensor, ...]]) -> None:
    for step_a, step_b in zip(a, b, strict=True):
        for u, v in zip(step_a, step_b, strict=True):
            assert torch.equal(u, v)


def test_workers_do_not_change_a_number_of_the_chains():
    trf, corpus, classes = tiny_trf()
    start = corpus[torch.arange(11) % corpus.batch_size]  # 11 chains: blocks of unequal sizes
    for groups in (2, 3):
        one = run_chains(trf, start, classes, groups=groups, workers=1)
        assert_same(one, run_chains(trf, start, classes, groups=groups, workers=groups))
        assert_same(one, run_chains(trf, start, classes, groups=groups, workers=2))
    grouped = run_chains(trf, start, classes, groups=2, workers=1)
    single = run_chains(trf, start, classes, groups=1, workers=1)
    assert any(not torch.equal(a[0], b[0]) for a, b in zip(grouped, single))  # groups do change the streams


def test_in_place_weight_updates_and_replaced_storage_reach_the_workers():
    def moves(trf: TRF):
        def between(t: int) -> None:
            with torch.no_grad():
                trf.field.weight.mul_(-1.5)  # in place, as an optimizer's step
                trf.log_z.add_(0.25)
            if t == 1:  # new storage: the workers must be forked again
                trf.field.load_state_dict(copy.deepcopy(trf.field.state_dict()))
                trf.field.weight.data = trf.field.weight.data.clone()
        return between

    results = []
    for workers in (1, 2):
        trf, corpus, classes = tiny_trf(1)
        results.append(run_chains(trf, corpus[:10], classes, groups=2, workers=workers, steps=4, between=moves(trf)))
    assert_same(*results)


def test_grouped_chains_follow_the_exact_law():
    """Each chain of a block moves by the same kernel with its own generator: after N steps from length 1 the
    S chains are S exact draws of mu_0 P^N (P enumerated by the scripted kernel); z = 4.3 as the ungrouped test."""
    field, S, N = Field(), 20000, 30
    states, pi = exact(field)
    P_jump, P_sweep = class_kernels()
    P = P_jump @ P_sweep
    mu = (states.lengths == 1).double() / V
    mu_n = mu @ torch.linalg.matrix_power(P, N)
    g = torch.Generator().manual_seed(1)
    x0 = field.space.random(S, generator=g, lengths=torch.ones(S, dtype=torch.long))
    x = TransDimensional(space=field.space, classes=TWO_CLASSES, groups=4).sample(field, x0, N, generator=g)
    tv, bound = tv_and_bound(x, mu_n, field.space)
    assert tv < bound, f"TV to the exact N-step law {tv:.4f} exceeds its sampling bound {bound:.4f}"


def test_errors_of_groups_and_workers_are_named():
    with pytest.raises(ValueError, match="workers: expected at most groups=2 processes"):
        TransDimensional(groups=2, workers=3)
    with pytest.raises(ValueError, match="groups"):
        TransDimensional(groups=0)
    field = Field()
    x0 = field.space.random(4, generator=torch.Generator().manual_seed(0))
    sampler = TransDimensional(space=field.space, groups=2, workers=2)
    with pytest.raises(TypeError, match="workers: stepping chains in other processes needs an nn.Module target"):
        sampler.step(field, sampler.init(field, x0))
    trf, corpus, classes = tiny_trf()
    failing = ChildFails(trf)
    sampler = TransDimensional(classes=classes, token_probs=torch.tensor([0.0] + [1.0] * 8), groups=2, workers=2)
    with pytest.raises(RuntimeError, match="TransDimensional worker 1 failed:\nValueError: only in the worker"):
        sampler.step(failing, sampler.init(failing, corpus[:6]))
    sampler._pool.close()


def test_a_copied_or_pickled_sampler_leaves_its_workers_behind():
    trf, corpus, classes = tiny_trf()
    sampler = TransDimensional(classes=classes, token_probs=torch.tensor([0.0] + [1.0] * 8), groups=2, workers=2)
    sampler.step(trf, sampler.init(trf, corpus[:6]))
    assert sampler._pool is not None
    assert copy.deepcopy(sampler)._pool is None and pickle.loads(pickle.dumps(sampler))._pool is None
    assert "groups=2, workers=2" in repr(sampler)
    sampler._pool.close()


def test_the_trainer_process_leaves_a_cpu_to_each_worker(monkeypatch: pytest.MonkeyPatch):
    from ebms.samplers._chain_groups import fit_threads, usable_cpus

    before = torch.get_num_threads()
    cpus = usable_cpus()
    try:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        torch.set_num_threads(cpus)
        if cpus > 1:
            with pytest.warns(UserWarning, match=rf"^workers: 2 processes on {cpus} CPUs: this process's torch "
                                                 rf"threads lowered from {cpus} to {cpus - 1} \(each worker uses 1\)"):
                fit_threads(2)
            assert torch.get_num_threads() == cpus - 1
        torch.set_num_threads(cpus)
        monkeypatch.setenv("OMP_NUM_THREADS", str(cpus))  # the user's choice stands
        fit_threads(cpus + 4)
        assert torch.get_num_threads() == cpus
        monkeypatch.delenv("OMP_NUM_THREADS")
        torch.set_num_threads(1)
        fit_threads(cpus + 4)  # one thread is never lowered
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)

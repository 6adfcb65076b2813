"""Trans-dimensional sampler: exact transition matrices by enumeration, invariance in distribution,
the protocol/callable/token-logits routes, edges and validation.

Exact kernels. Every random choice of the kernel goes through two module functions, ``_draw`` (one
category per row) and ``_accept`` (the MH decision). A *scripted* replacement returns chosen options
and records their probabilities, so running one step on a batch that holds every state of a tiny
space once per combination of choices gives the exact transition matrix ``P`` of the code itself
(a choice of probability 0 is replaced by a valid one and its branch weighs 0). Then: rows of ``P``
sum to 1, ``π P = π`` for the exact target ``π``, and reversible kernels (a jump, one position)
satisfy detailed balance ``π_s P_st = π_t P_ts``, to 1e-12 in float64.

In distribution. ``S = 20000`` independent chains start at length 1; after ``N`` steps each final
state is one exact draw from ``μ_N = μ_0 P^N`` (``P`` enumerated as above; the chains share nothing,
so the effective sample size is ``S``). The empirical joint of (length, tokens) is compared with
``μ_N`` and with ``π`` by the total-variation bound of ``_token_targets`` (``z = 4.3``, failure rate
below 1e-4 for exact draws), the latter widened by the exact bias ``TV(μ_N, π)`` (< 1e-3 here).
"""

from __future__ import annotations

import functools
import itertools
import math

import pytest
import torch
from _token_targets import MAX_LENGTH, V, tv_and_bound

import ebms.samplers.trans_dimensional as td
from ebms.samplers.trans_dimensional import (
    SupportsTokenLogits,
    TransDimensional,
    TransDimensionalInfo,
    TransDimensionalTarget,
)
from ebms.sequences import Sequences
from ebms.spaces import TokenSequences

TWO_CLASSES = torch.tensor([0, 0, 1])
ONE_CLASS = torch.zeros(V, dtype=torch.long)


class Field:
    """``E(x) = sum_t u[t, x_t] + sum_t W[x_{t-1}, x_t]`` (float64), length log weights ``a_l = -c[l]``."""

    def __init__(self, scale: float = 1.0, seed: int = 3, max_length: int = MAX_LENGTH) -> None:
        g = torch.Generator().manual_seed(seed)
        self.u = torch.randn(MAX_LENGTH, V, generator=g, dtype=torch.float64) * scale
        self.w = torch.randn(V, V, generator=g, dtype=torch.float64) * scale
        self.c = torch.tensor([0.4, 0.0, 0.6, -0.2, 0.3], dtype=torch.float64)[: max_length + 1] * scale
        self.space = TokenSequences(V, max_length)

    def energy(self, x: Sequences) -> torch.Tensor:
        real = x.mask()
        tok = x.tokens * real
        e = (self.u[torch.arange(x.max_length), tok] * real).sum(1)
        if x.max_length > 1:
            e = e + (self.w[tok[:, :-1], tok[:, 1:]] * real[:, 1:]).sum(1)
        return e

    def length_log_weights(self) -> torch.Tensor:
        return torch.cat([torch.tensor([-math.inf], dtype=torch.float64), -self.c[1:]])

    def joint(self, x: Sequences) -> torch.Tensor:
        return self.energy(x) - self.length_log_weights()[x.lengths]


class LocalField(Field):
    """Offers ``token_logits`` with a deliberate per-row constant (the sampler must calibrate it)."""

    def token_logits(self, x: Sequences, position: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
        B, K = candidates.shape
        tok = x.tokens.unsqueeze(1).expand(B, K, x.max_length).clone()
        tok.scatter_(2, position.view(B, 1, 1).expand(B, K, 1), candidates.clamp(min=0).unsqueeze(2))
        e = self.energy(Sequences(tok.view(B * K, -1), x.lengths.repeat_interleave(K), validate=False)).view(B, K)
        return -e + 0.37 * x.lengths[:, None] + 1.1 * x.tokens[:, :1]


class FlatField(LocalField):
    """Also offers ``token_logits_flat`` (the flat route of class proposals), with the same per-row constant."""

    def token_logits_flat(self, x: Sequences, position: torch.Tensor, row: torch.Tensor,
                          candidates: torch.Tensor) -> torch.Tensor:
        sub = Sequences(x.tokens[row], x.lengths[row], validate=False)
        return self.token_logits(sub, position[row], candidates[:, None])[:, 0]


class RangedField(FlatField):
    """Declares its interaction range (the bigram ``W``: 1; ``declared`` overrides it, for negative controls)."""

    def __init__(self, *args, declared: int | None = 1, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.declared = declared

    def interaction_range(self) -> int | None:
        return self.declared


class PlainRangedField(Field):
    """Whole-sentence energies only, with the interaction range (the generic scoring route)."""

    def interaction_range(self) -> int:
        return 1


def exact(field: Field) -> tuple[Sequences, torch.Tensor]:
    """Every state of the field's space and its exact probability (enumeration order)."""
    states = Sequences.cat(list(field.space.enumerate()))
    return states, torch.softmax(-field.joint(states), 0)


class Script:
    """Scripted ``_draw``/``_accept``: option ``choices[:, d]`` at the ``d``-th decision, probabilities logged.

    A decision over ``k`` times the ``batch`` rows (``scan="colored"`` moves ``k`` positions of each chain
    in one call, rows ``p * batch + b``) is ``k`` decisions per chain, ``choices[:, d + p]`` for row ``p``.
    """

    def __init__(self, choices: torch.Tensor | None, batch: int) -> None:
        self.choices, self.batch, self.d, self.logp, self.options = choices, batch, 0, None, []

    def _take(self, logp: torch.Tensor) -> torch.Tensor:
        k = logp.shape[0] // self.batch
        assert k * self.batch == logp.shape[0] and k >= 1, "a decision over rows that are not whole chains"
        self.options.extend([logp.shape[1]] * k)
        if self.choices is None:  # dry run: record the number of options
            return logp.argmax(1)
        c = self.choices[:, self.d:self.d + k].T.reshape(-1)
        self.d += k
        lp = logp.gather(1, c[:, None]).squeeze(1)
        assert not bool(torch.isnan(lp).any()), "a scripted decision met NaN probabilities"
        per_chain = lp.view(k, self.batch).sum(0)
        self.logp = per_chain if self.logp is None else self.logp + per_chain
        return torch.where(lp > -math.inf, c, logp.argmax(1))  # impossible choices: a valid stand-in

    def draw(self, logits: torch.Tensor, generator) -> torch.Tensor:
        return self._take(torch.log_softmax(logits.double(), 1))

    def draw_word(self, s: torch.Tensor, first: torch.Tensor, length: torch.Tensor, act: torch.Tensor, B: int,
                  width: int, generator) -> torch.Tensor:
        """The flat route's within-class draw, padded to ``(B, width)`` (rows that do not move: one option)."""
        cols = torch.arange(width)
        logits = torch.full((B, width), -math.inf, dtype=torch.float64)
        logits[:, 0] = 0.0
        inside = cols < length[:, None]
        logits[act] = torch.where(inside, s.double()[(first[:, None] + cols).clamp(max=s.numel() - 1)], -math.inf)
        return first + self._take(torch.log_softmax(logits, 1))[act]

    def accept(self, log_ratio: torch.Tensor, generator) -> tuple[torch.Tensor, torch.Tensor]:
        prob = torch.exp(torch.nan_to_num(log_ratio.double(), nan=-math.inf).clamp(max=0.0))
        taken = self._take(torch.stack([torch.log1p(-prob), prob.log()], 1))
        return taken == 1, prob.to(log_ratio.dtype)


def _run(script: Script, sampler: TransDimensional, target, x: Sequences):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(td, "_draw", script.draw)
        mp.setattr(td, "_accept", script.accept)
        mp.setattr(td, "_draw_word", script.draw_word)
        return sampler.step(target, sampler.init(target, x))[0]


def kernel(sampler: TransDimensional, target, states: Sequences) -> torch.Tensor:
    """The exact transition matrix ``(N, N)`` of one ``sampler.step`` over ``states`` (all of a space)."""
    dry = Script(None, states.batch_size)
    _run(dry, sampler, target, states)
    branches = torch.tensor(list(itertools.product(*[range(k) for k in dry.options])), dtype=torch.long)
    N, nb = states.batch_size, branches.shape[0]
    script = Script(branches.repeat(N, 1), N * nb)
    out = _run(script, sampler, target, states[torch.arange(N).repeat_interleave(nb)])
    assert script.d == len(dry.options)  # the same decisions as the dry run
    dst = sampler.token_space.state_index(out.x)
    P = torch.zeros(N, N, dtype=torch.float64)
    P.index_put_((torch.arange(N).repeat_interleave(nb), dst), script.logp.exp(), accumulate=True)
    return P


@functools.cache
def class_kernels() -> tuple[torch.Tensor, torch.Tensor]:
    """``(P_jump, P_sweep)`` of the two-class proposal on the V = 3, L <= 4 field (computed once)."""
    field = Field()
    states, _ = exact(field)
    return (kernel(TransDimensional(space=field.space, sweeps=0, classes=TWO_CLASSES), field, states),
            kernel(TransDimensional(space=field.space, jump=False, classes=TWO_CLASSES), field, states))


def check_invariant(P: torch.Tensor, pi: torch.Tensor, *, reversible: bool) -> None:
    torch.testing.assert_close(P.sum(1), torch.ones_like(pi), atol=1e-12, rtol=0)
    torch.testing.assert_close(pi @ P, pi, atol=1e-12, rtol=0)
    if reversible:
        flow = pi[:, None] * P
        torch.testing.assert_close(flow, flow.T, atol=1e-12, rtol=0)


JUMP_KERNELS = {
    "uniform": dict(),
    "unigram-mtm3": dict(token_probs=torch.tensor([0.2, 0.5, 0.3]), trials=3),
    "classes": dict(classes=TWO_CLASSES),
    "classes-mtm2": dict(classes=TWO_CLASSES, trials=2),
    "gibbs-proposal": dict(classes=ONE_CLASS),
}


@pytest.mark.parametrize("name", JUMP_KERNELS)
def test_length_jump_satisfies_detailed_balance_exactly(name):
    field = Field()
    states, pi = exact(field)
    P = kernel(TransDimensional(space=field.space, sweeps=0, **JUMP_KERNELS[name]), field, states)
    check_invariant(P, pi, reversible=True)
    assert float(P.diagonal().min()) < 1  # the jump does move


def test_token_logits_route_is_calibrated_to_the_exact_energy():
    """A target whose token scores carry an arbitrary per-row constant gives the same exact jump kernel."""
    field, local = Field(), LocalField()
    assert isinstance(local, SupportsTokenLogits) and not isinstance(field, SupportsTokenLogits)
    states, pi = exact(field)
    for kw in (dict(classes=TWO_CLASSES, trials=2), dict(trials=2)):
        P_local = kernel(TransDimensional(space=field.space, sweeps=0, **kw), local, states)
        P_plain = kernel(TransDimensional(space=field.space, sweeps=0, **kw), field, states)
        torch.testing.assert_close(P_local, P_plain, atol=1e-12, rtol=0)
        check_invariant(P_local, pi, reversible=True)
    short, short_local = Field(max_length=3), LocalField(max_length=3)
    states, pi = exact(short)
    sweep = dict(classes=TWO_CLASSES, jump=False)
    P_local = kernel(TransDimensional(space=short.space, **sweep), short_local, states)
    P_plain = kernel(TransDimensional(space=short.space, **sweep), short, states)
    torch.testing.assert_close(P_local, P_plain, atol=1e-12, rtol=0)
    check_invariant(P_local, pi, reversible=False)


@pytest.mark.parametrize(("kw", "max_length"), [(dict(classes=TWO_CLASSES), 2), (dict(classes=TWO_CLASSES, trials=2), 2),
                                               (dict(classes=ONE_CLASS), 2),
                                               pytest.param(dict(classes=TWO_CLASSES), 3, marks=pytest.mark.slow)],
                         ids=["classes", "classes-mtm2", "gibbs", "classes-3"])
def test_flat_route_of_class_proposals_gives_the_padded_routes_exact_kernels(kw, max_length):
    """Class members scored as a flat list (``token_logits_flat``, only the moving rows) give the same exact
    jump, sweep and full-step kernels as whole-sentence energies."""
    field, flat = Field(max_length=max_length), FlatField(max_length=max_length)
    assert isinstance(flat, td.SupportsFlatTokenLogits) and not isinstance(field, td.SupportsFlatTokenLogits)
    states, pi = exact(field)
    steps = (dict(sweeps=0), dict(jump=False)) if kw.get("trials") else (dict(sweeps=0), dict(jump=False), dict())
    for opts in steps:  # MTM's full step has too many branches to enumerate; it is jump @ sweep (above)
        P_flat = kernel(TransDimensional(space=field.space, **opts, **kw), flat, states)
        P_plain = kernel(TransDimensional(space=field.space, **opts, **kw), field, states)
        torch.testing.assert_close(P_flat, P_plain, atol=1e-12, rtol=0)
        check_invariant(P_flat, pi, reversible="sweeps" in opts)


def test_flat_draw_follows_the_softmax_inside_each_segment_and_draws_one_uniform_per_batch_row():
    s = torch.tensor([0.3, -1.0, 2.0, -math.inf, 0.5, 0.0, 1.5, 0.7], dtype=torch.float32)
    first, length = torch.tensor([0, 4, 7]), torch.tensor([4, 3, 1])
    act, B, n = torch.tensor([0, 2, 5]), 7, 20000
    g, ref = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    counts = torch.zeros(s.numel())
    for _ in range(n):
        k = td.draw_in_segments(s, first, length, act, B, 4, g)
        counts.index_add_(0, k, torch.ones(3))
        torch.rand((B, 1), generator=ref)
    assert torch.equal(g.get_state(), ref.get_state())  # the generator advances as sample_categorical's
    for f, m in zip(first.tolist(), length.tolist()):
        p = torch.softmax(s[f:f + m].double(), 0)
        se = (p * (1 - p) / n).sqrt()
        assert bool(((counts[f:f + m] / n - p).abs() <= 4.5 * se + 1e-12).all())  # z = 4.5 per cell
    assert counts[3] == 0  # probability 0 is never drawn


@pytest.mark.parametrize("kw", [dict(classes=ONE_CLASS), dict(classes=TWO_CLASSES), dict(trials=1)],
                         ids=["gibbs", "classes", "independent"])
def test_within_length_sweep_leaves_the_target_invariant(kw):
    field = Field()
    states, pi = exact(field)
    if "classes" in kw and kw["classes"] is TWO_CLASSES:
        P = class_kernels()[1]
    else:
        P = kernel(TransDimensional(space=field.space, jump=False, **kw), field, states)
    check_invariant(P, pi, reversible=False)
    lengths = states.lengths
    assert bool((P[lengths[:, None] != lengths[None, :]] == 0).all())  # lengths stay fixed


def test_multiple_trial_position_move_satisfies_detailed_balance():
    """One position (max_length 1) is one MTM update: reversible; two positions: a sweep, invariant."""
    for max_length in (1, 2):
        field = Field(max_length=max_length)
        states, pi = exact(field)
        for kw in (dict(classes=TWO_CLASSES, trials=2), dict(trials=3)):
            P = kernel(TransDimensional(space=field.space, jump=False, **kw), field, states)
            check_invariant(P, pi, reversible=max_length == 1)


@pytest.mark.parametrize(("target", "scan"), [(Field, "sequential"), (RangedField, "colored")])
def test_full_step_is_the_jump_then_the_sweep(target, scan):
    field = target(max_length=3)
    states, pi = exact(field)
    kw = dict(classes=TWO_CLASSES, scan=scan)
    P = kernel(TransDimensional(space=field.space, **kw), field, states)
    P_jump = kernel(TransDimensional(space=field.space, sweeps=0, **kw), field, states)
    P_sweep = kernel(TransDimensional(space=field.space, jump=False, **kw), field, states)
    torch.testing.assert_close(P, P_jump @ P_sweep, atol=1e-12, rtol=0)
    check_invariant(P, pi, reversible=False)


def test_chains_match_the_exact_law_in_distribution():
    field, S, N = Field(), 20000, 30
    states, pi = exact(field)
    kw = dict(classes=TWO_CLASSES)
    P_jump, P_sweep = class_kernels()
    P = P_jump @ P_sweep
    mu = (states.lengths == 1).double() / V  # start: length 1, uniform token
    mu_n = mu @ torch.linalg.matrix_power(P, N)
    bias = 0.5 * float((mu_n - pi).abs().sum())
    assert bias < 1e-3
    g = torch.Generator().manual_seed(0)
    x0 = field.space.random(S, generator=g, lengths=torch.ones(S, dtype=torch.long))
    x = TransDimensional(space=field.space, **kw).sample(field, x0, N, generator=g)
    tv, bound = tv_and_bound(x, mu_n, field.space)
    assert tv < bound, f"TV to the exact N-step law {tv:.4f} exceeds its sampling bound {bound:.4f}"
    tv_pi, bound_pi = tv_and_bound(x, pi, field.space)
    assert tv_pi < bound_pi + bias


def test_check_rejects_chains_of_a_wrong_target():
    """Chains targeting 1.5 E fail the comparison with E (a negative control for the bound)."""
    field, wrong, S = Field(), Field(scale=1.5), 20000
    _, pi = exact(field)
    g = torch.Generator().manual_seed(1)
    x0 = field.space.random(S, generator=g, lengths=torch.ones(S, dtype=torch.long))
    x = TransDimensional(space=field.space, classes=TWO_CLASSES).sample(wrong, x0, 15, generator=g)
    tv, bound = tv_and_bound(x, pi, field.space)
    assert tv > bound


def test_protocol_target_and_joint_energy_callable_give_the_same_chain():
    field = Field()
    assert isinstance(field, TransDimensionalTarget)
    x0 = field.space.random(64, generator=torch.Generator().manual_seed(2))
    runs = []
    for target in (field, field.joint):
        sampler = TransDimensional(space=field.space, classes=TWO_CLASSES, trials=2)
        runs.append(sampler.sample(target, x0, 10, generator=torch.Generator().manual_seed(3)))
    assert runs[0].equal(runs[1])


def test_cached_energy_matches_a_fresh_evaluation_and_lengths_stay_in_range():
    field = LocalField()
    sampler = TransDimensional(space=field.space, classes=TWO_CLASSES, trials=2)
    g = torch.Generator().manual_seed(4)
    state = sampler.init(field, field.space.random(200, generator=g))
    for _ in range(5):
        state, info = sampler.step(field, state, generator=g)
    torch.testing.assert_close(state.energy, field.joint(state.x), atol=1e-10, rtol=0)
    assert state.x.tokens.shape == (200, MAX_LENGTH)
    assert int(state.x.lengths.min()) >= 1 and int(state.x.lengths.max()) <= MAX_LENGTH
    assert isinstance(info, TransDimensionalInfo) and state.t == 5
    for f in (info.accept_prob, info.jump_accept_prob, info.move_accept_prob, info.energy):
        assert f.shape == (200,) and bool(((f >= 0) | (f == info.energy)).all())
    assert 0 < float(info.jump_accept_prob.mean()) < 1 and bool(info.jumped.any())


def test_same_generator_same_chain_and_x0_left_untouched():
    field = Field()
    x0 = field.space.random(32, generator=torch.Generator().manual_seed(5))
    before = x0.tokens.clone()
    a = TransDimensional(space=field.space).sample(field, x0, 5, generator=torch.Generator().manual_seed(6))
    b = TransDimensional(space=field.space).sample(field, x0, 5, generator=torch.Generator().manual_seed(6))
    assert a.equal(b) and torch.equal(x0.tokens, before)


def test_fixed_length_space_makes_no_jump():
    field = Field()
    space = TokenSequences(V, 3, min_length=3)
    sampler = TransDimensional(space=space)
    state, info = sampler.step(field.joint, sampler.init(field.joint, space.random(16)))
    assert bool((state.x.lengths == 3).all()) and not bool(info.jumped.any())


def test_zero_proposal_tokens_are_never_proposed_and_refused_at_the_start():
    field = Field()
    probs = torch.tensor([0.0, 1.0, 1.0])
    sampler = TransDimensional(space=field.space, token_probs=probs, classes=TWO_CLASSES)
    g = torch.Generator().manual_seed(7)
    x0 = Sequences(torch.ones(50, 1, dtype=torch.long))
    x = sampler.sample(field, x0, 20, generator=g)
    assert bool((x.tokens[x.mask()] != 0).all())
    with pytest.raises(ValueError, match=r"x0: token 0 at sequence 0, position 0 has proposal probability 0"):
        sampler.init(field, Sequences(torch.zeros(2, 1, dtype=torch.long)))


def test_nonfinite_proposals_are_rejected_and_flagged():
    field = Field()

    def energy(x: Sequences) -> torch.Tensor:  # NaN on every sentence longer than 1
        e = field.joint(x)
        return torch.where(x.lengths > 1, torch.full_like(e, math.nan), e)

    sampler = TransDimensional(space=field.space, trials=2)
    state = sampler.init(energy, Sequences(torch.ones(100, 1, dtype=torch.long)))
    state, info = sampler.step(energy, state, generator=torch.Generator().manual_seed(8))
    assert bool((state.x.lengths == 1).all()) and bool(info.nonfinite.any())
    assert not bool(torch.isnan(state.energy).any())


@pytest.mark.parametrize(("kw", "target", "max_length"),
                         [(dict(classes=ONE_CLASS), RangedField, 4), (dict(classes=TWO_CLASSES), RangedField, 4),
                          (dict(trials=1), RangedField, 4), (dict(classes=TWO_CLASSES), PlainRangedField, 3)],
                         ids=["gibbs", "classes", "independent", "classes-whole-sentence"])
def test_colored_sweep_leaves_the_target_invariant(kw, target, max_length):
    """Colours {0, 2} and {1, 3} of the bigram field (range 1; {0, 2} and {1} up to length 3), each moved
    in one call: exact kernel, invariant."""
    field = target(max_length=max_length)
    states, pi = exact(field)
    P = kernel(TransDimensional(space=field.space, jump=False, scan="colored", **kw), field, states)
    check_invariant(P, pi, reversible=False)
    assert bool((P[states.lengths[:, None] != states.lengths[None, :]] == 0).all())


def test_colored_sweep_with_a_range_too_short_is_caught():
    """Negative control: declaring range 0 for the bigram field moves neighbours at once, and the exact
    kernel is no longer invariant (so the invariance check above can fail)."""
    field = RangedField(declared=0)
    states, pi = exact(field)
    P = kernel(TransDimensional(space=field.space, jump=False, scan="colored", classes=ONE_CLASS), field, states)
    torch.testing.assert_close(P.sum(1), torch.ones_like(pi), atol=1e-12, rtol=0)
    assert float((pi @ P - pi).abs().max()) > 1e-3


def test_colored_sweep_with_one_position_per_colour_is_the_sequential_sweep():
    """A range as long as the sentences leaves one position per colour: the sequential kernel exactly."""
    field = RangedField(max_length=3, declared=2)  # colours {0}, {1}, {2}
    states, _ = exact(field)
    for kw in (dict(classes=TWO_CLASSES),):
        P_col = kernel(TransDimensional(space=field.space, jump=False, scan="colored", **kw), field, states)
        P_seq = kernel(TransDimensional(space=field.space, jump=False, **kw), field, states)
        torch.testing.assert_close(P_col, P_seq, atol=1e-12, rtol=0)


@pytest.mark.slow  # the exact kernels above decide it; this one checks the sampler's public loop end to end
def test_colored_chains_match_the_exact_law_in_distribution():
    field, S, N = RangedField(), 20000, 30
    states, pi = exact(field)
    g = torch.Generator().manual_seed(2)
    x0 = field.space.random(S, generator=g, lengths=torch.ones(S, dtype=torch.long))
    sampler = TransDimensional(space=field.space, classes=TWO_CLASSES, scan="colored")
    x = sampler.sample(field, x0, N, generator=g)
    tv, bound = tv_and_bound(x, pi, field.space)
    assert tv < bound + 1e-3, f"TV to the exact law {tv:.4f} exceeds its sampling bound {bound:.4f}"
    state = sampler.init(field, x)  # the cached energies still match a fresh evaluation
    stepped, info = sampler.step(field, state, generator=g)
    torch.testing.assert_close(stepped.energy, field.joint(stepped.x), atol=1e-10, rtol=0)
    assert bool((info.move_accept_prob <= 1).all()) and bool((info.accept_prob >= 0).all())


def test_colored_scan_needs_a_bounded_interaction_range():
    field = Field()
    with pytest.raises(ValueError, match="scan: 'colored' needs a target whose terms read positions a bounded "
                                         "distance apart .* Field declares none: use scan='sequential'"):
        TransDimensional(space=field.space, scan="colored").sample(field, field.space.random(2), 1)
    with pytest.raises(ValueError, match="scan: 'colored' needs .* RangedField declares none"):
        TransDimensional(space=field.space, scan="colored").sample(RangedField(declared=None), field.space.random(2), 1)


def test_empty_batch_steps():
    field = Field()
    sampler = TransDimensional(space=field.space)
    state, info = sampler.step(field, sampler.init(field, field.space.random(0)))
    assert state.x.batch_size == 0 and info.accept_prob.shape == (0,)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(trials=0), ValueError, "trials"),
        (dict(sweeps=-1), ValueError, "sweeps"),
        (dict(jump=1), TypeError, "jump: expected a bool; got int"),
        (dict(scan="random"), ValueError, "scan: expected one of 'sequential', 'colored'; got 'random'"),
        (dict(space=object()), TypeError, "space: expected an ebms.spaces.TokenSequences or None; got object"),
        (dict(token_probs=torch.tensor([1.0, -1.0, 1.0])), ValueError, "token_probs: expected finite non-negative"),
        (dict(token_probs=torch.ones(2, 2)), ValueError, r"token_probs: expected a 1-D tensor \(V,\); got shape"),
        (dict(classes=torch.zeros(3)), TypeError, "classes: expected a LongTensor"),
        (dict(classes=torch.tensor([0, -1, 1])), ValueError, "classes: expected indices >= 0; got -1"),
        (dict(token_probs=torch.ones(3), classes=torch.zeros(4, dtype=torch.long)), ValueError,
         r"classes: expected shape \(3,\) like token_probs; got \(4,\)"),
    ],
)
def test_bad_configuration_messages(kwargs, error, match):
    with pytest.raises(error, match=match):
        TransDimensional(**kwargs)


def test_bad_inputs_messages():
    field = Field()
    with pytest.raises(ValueError, match=r"token_probs: expected 3 entries \(the space's vocab_size\); got 4"):
        TransDimensional(space=field.space, token_probs=torch.ones(4)).init(field, field.space.random(2))
    with pytest.raises(TypeError, match="x0: expected an ebms.sequences.Sequences batch; got Tensor"):
        TransDimensional(space=field.space).init(field, torch.zeros(2, 3, dtype=torch.long))

    class Short(Field):
        def length_log_weights(self) -> torch.Tensor:
            return torch.zeros(3)

    with pytest.raises(ValueError, match=r"length_log_weights\(\): expected shape \(5,\)"):
        TransDimensional(space=field.space).init(Short(), field.space.random(2))

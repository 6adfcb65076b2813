"""COLD decoding: the Langevin step against its formula and the AR(1) closed form, guided top-k
discretisation on hand cases, the noise schedule, and bad inputs."""

from __future__ import annotations

import math

import pytest
import torch

from ebms.samplers.cold import cold_decode, cold_langevin, guided_discretise, noise_schedule


def test_one_noiseless_step_is_a_gradient_step():
    m = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    y0 = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)

    def energy(y):
        return 0.5 * ((y - m) ** 2).sum((1, 2))

    y1, trace = cold_langevin(energy, y0, step_size=0.3, noise=[0.0])
    assert torch.allclose(y1, y0 - 0.3 * (y0 - m), atol=1e-14)
    assert trace.shape == (1,) and trace[0].item() == pytest.approx(float(energy(y0).mean()))


def test_the_noisy_chain_reaches_the_ar1_stationary_variance():
    # E = |y|^2 / 2: y' = (1 - eta) y + sigma eps, stationary variance sigma^2 / (1 - (1 - eta)^2)
    eta, sigma = 0.2, 0.5
    y, _ = cold_langevin(lambda y: 0.5 * (y**2).sum((1, 2)), torch.zeros(4000, 2, 5, dtype=torch.float64),
                         step_size=eta, noise=[sigma] * 80, generator=torch.Generator().manual_seed(0))
    want = sigma**2 / (1 - (1 - eta) ** 2)
    n = y.numel()
    # the sample variance of n normals has standard error want * sqrt(2 / n); 5 of them
    assert abs(float(y.var()) - want) < 5 * want * math.sqrt(2 / n)


def test_guided_discretisation_picks_the_best_soft_token_among_the_models_top_k():
    # V = 4, T = 2. Soft logits prefer token 3, then 2; the model's top-2 is {1, 2} first, then {0, 3}
    logits = torch.tensor([[[0.0, 1.0, 2.0, 3.0], [0.0, 1.0, 2.0, 3.0]]])

    def next_logits(prefix):
        table = torch.tensor([[0.0, 5.0, 4.0, 1.0], [5.0, 0.0, 1.0, 4.0]])
        return table[prefix.shape[1]].expand(prefix.shape[0], 4)

    assert guided_discretise(logits, next_logits, top_k=2).tolist() == [[2, 3]]
    assert guided_discretise(logits, next_logits, top_k=1).tolist() == [[1, 0]]
    assert guided_discretise(logits).tolist() == [[3, 3]]  # no model: the plain argmax
    allowed = torch.tensor([True, True, True, False])
    assert guided_discretise(logits, next_logits, top_k=2, allowed=allowed).tolist() == [[2, 2]]


def test_the_model_reads_the_prompt_and_the_chosen_tokens():
    seen = []

    def next_logits(prefix):
        seen.append(prefix.tolist())
        return torch.zeros(prefix.shape[0], 3)

    logits = torch.tensor([[[0.0, 2.0, 1.0], [3.0, 0.0, 0.0]]])
    out = guided_discretise(logits, next_logits, top_k=2, prefix=torch.tensor([[7, 8]]))
    assert out.tolist() == [[1, 0]] and seen == [[[7, 8]], [[7, 8, 1]]]


def test_cold_decode_runs_both_stages():
    target = torch.tensor([2, 0, 1])

    def energy(y):  # the soft constraint: -log softmax(y_t)[target_t]
        return -y.log_softmax(-1)[:, torch.arange(3), target].sum(1)

    res = cold_decode(energy, torch.zeros(5, 3, 3), step_size=1.0, noise=noise_schedule(30),
                      generator=torch.Generator().manual_seed(0))
    assert res.tokens.shape == (5, 3) and res.logits.shape == (5, 3, 3) and res.energy.shape == (30,)
    assert (res.tokens == target).all()


def test_noise_schedule_is_piecewise_constant():
    assert noise_schedule(10, (1.0, 0.5, 0.1), (0.0, 0.2, 0.5)) == [1.0, 1.0, 0.5, 0.5, 0.5, 0.1, 0.1, 0.1, 0.1, 0.1]
    assert noise_schedule(0) == []


@pytest.mark.parametrize("call, error, words", [
    (lambda: cold_langevin(lambda y: y.sum((1, 2)), torch.zeros(2, 3), step_size=0.1, noise=[0.0]),
     ValueError, "init"),
    (lambda: cold_langevin(lambda y: y.sum((1, 2)), torch.zeros(2, 3, 4), step_size=0.0, noise=[0.0]),
     ValueError, "step_size"),
    (lambda: cold_langevin(lambda y: y.sum((1, 2)), torch.zeros(2, 3, 4), step_size=0.1, noise=[-1.0]),
     ValueError, r"noise\[0\]"),
    (lambda: cold_langevin(lambda y: y.sum(), torch.zeros(2, 3, 4), step_size=0.1, noise=[0.0]),
     ValueError, r"energy\(y\)"),
    (lambda: guided_discretise(torch.zeros(1, 2, 3), top_k=0), ValueError, "top_k"),
    (lambda: guided_discretise(torch.zeros(1, 2, 3), allowed=torch.ones(4, dtype=torch.bool)), ValueError, "allowed"),
    (lambda: guided_discretise(torch.zeros(1, 2, 3), lambda p: torch.zeros(1, 4), top_k=2), ValueError,
     "next_logits"),
    (lambda: guided_discretise(torch.zeros(1, 2, 3), prefix=torch.zeros(2, 1, dtype=torch.long)), ValueError,
     "prefix"),
    (lambda: noise_schedule(5, (1.0,), (0.0, 0.5)), ValueError, "levels"),
    (lambda: noise_schedule(5, (1.0, 0.5), (0.1, 0.5)), ValueError, "at"),
])
def test_bad_inputs_are_refused(call, error, words):
    with pytest.raises(error, match=words):
        call()

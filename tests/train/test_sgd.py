"""LeanSGD: torch.optim.SGD's numbers bit for bit, its state_dict layout, and the trainer driving it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _train_helpers import GaussianML, NoisyNCE, make_trainer, metric_lines
from torch import Tensor

from ebms.nets import GaussianEnergy
from ebms.train import LeanSGD, OptimizerLike

# (group options, per-group overrides of the second group): every option, alone and together
CONFIGS = [
    ({"lr": 0.1}, {}),
    ({"lr": 0.1, "momentum": 0.9}, {}),
    ({"lr": 0.05, "momentum": 0.8, "dampening": 0.3}, {}),
    ({"lr": 0.1, "weight_decay": 0.01}, {}),
    ({"lr": 0.1, "momentum": 0.9, "weight_decay": 0.01, "nesterov": True}, {}),
    ({"lr": 0.1, "momentum": 0.5, "maximize": True, "weight_decay": 0.02}, {}),
    ({"lr": 0.1, "momentum": 0.9, "weight_decay": 0.01}, {"weight_decay": 0.0, "lr": 0.3, "momentum": 0.0}),
]


def _params(seed: int = 0) -> list[Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(5, 3, generator=g).requires_grad_(), torch.randn(3, generator=g).requires_grad_(),
            torch.randn(4, generator=g).requires_grad_()]


def _groups(params: list[Tensor], second: dict) -> list[dict]:
    return [{"params": params[:2]}, {"params": params[2:], **second}]


def _run(opt, params: list[Tensor], steps: range, seed: int = 1) -> None:
    """Steps with fixed pseudo-random gradients (step ``i`` always gets the same ones); parameter 1
    has no gradient on odd steps (skipped, as torch.optim.SGD skips it)."""
    for i in steps:
        g = torch.Generator().manual_seed(seed * 1000 + i)
        for j, p in enumerate(params):
            p.grad = None if (j == 1 and i % 2) else torch.randn(p.shape, generator=g)
        opt.step()


@pytest.mark.parametrize("foreach", [False, True])
@pytest.mark.parametrize(("opts", "second"), CONFIGS)
def test_lean_sgd_equals_torch_sgd_bit_for_bit(opts: dict, second: dict, foreach: bool) -> None:
    ours, theirs = _params(), _params()
    lean = LeanSGD(_groups(ours, second), **opts)
    ref = torch.optim.SGD(_groups(theirs, second), foreach=foreach, **opts)
    _run(lean, ours, range(6))
    _run(ref, theirs, range(6))
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b)
    for a, b in zip(ours, theirs):  # the momentum buffers too
        if b in ref.state and "momentum_buffer" in ref.state[b]:
            assert torch.equal(lean.state[a]["momentum_buffer"], ref.state[b]["momentum_buffer"])
        else:
            assert a not in lean.state


@pytest.mark.parametrize(("opts", "second"), CONFIGS)
def test_state_dict_round_trip_continues_exactly(opts: dict, second: dict) -> None:
    # 3 steps, state_dict -> a fresh LeanSGD on copies of the parameters -> 3 more steps
    # == 6 uninterrupted steps of torch.optim.SGD
    ours, theirs = _params(), _params()
    lean = LeanSGD(_groups(ours, second), **opts)
    ref = torch.optim.SGD(_groups(theirs, second), **opts)
    _run(lean, ours, range(3))
    state = lean.state_dict()
    copies = [p.detach().clone().requires_grad_() for p in ours]
    resumed = LeanSGD(_groups(copies, {}), lr=1.0)  # options come from the state dict
    resumed.load_state_dict(state)
    _run(resumed, copies, range(3, 6))
    _run(ref, theirs, range(6))
    for a, b in zip(copies, theirs):
        assert torch.equal(a, b)


def test_state_dict_has_torch_sgd_layout_and_loads_torch_sgd_state() -> None:
    opts = {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.01}
    ours, theirs = _params(), _params()
    lean, ref = LeanSGD(ours, **opts), torch.optim.SGD(theirs, **opts)
    _run(lean, ours, range(2))
    _run(ref, theirs, range(2))
    mine, torch_sd = lean.state_dict(), ref.state_dict()
    assert mine["state"].keys() == torch_sd["state"].keys() == {0, 1, 2}
    for k in mine["state"]:
        assert torch.equal(mine["state"][k]["momentum_buffer"], torch_sd["state"][k]["momentum_buffer"])
    assert mine["param_groups"][0]["params"] == torch_sd["param_groups"][0]["params"] == [0, 1, 2]
    copies = [p.detach().clone().requires_grad_() for p in theirs]
    switched = LeanSGD(copies, lr=1.0)
    switched.load_state_dict(torch_sd)  # a torch.optim.SGD checkpoint continues under LeanSGD
    _run(switched, copies, range(2, 5))
    _run(ref, theirs, range(2, 5))
    for a, b in zip(copies, theirs):
        assert torch.equal(a, b)


def test_loaded_state_is_a_copy() -> None:
    ours = _params()
    lean = LeanSGD(ours, lr=0.1, momentum=0.9)
    _run(lean, ours, range(1))
    sd = lean.state_dict()
    other = LeanSGD([p.detach().clone().requires_grad_() for p in ours], lr=0.1, momentum=0.9)
    other.load_state_dict(sd)
    sd["state"][0]["momentum_buffer"].add_(1.0)
    assert not torch.equal(other.state_dict()["state"][0]["momentum_buffer"], sd["state"][0]["momentum_buffer"])


def test_zero_grad_and_no_momentum_state() -> None:
    ours = _params()
    lean = LeanSGD(ours, lr=0.1)
    _run(lean, ours, range(2))
    assert lean.state == {} and lean.state_dict()["state"] == {}
    lean.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not p.grad.any() for p in ours if p.grad is not None)
    lean.zero_grad()
    assert all(p.grad is None for p in ours)


def test_gradients_are_left_unchanged() -> None:
    ours = _params()
    lean = LeanSGD(ours, lr=0.1, momentum=0.9, weight_decay=0.1, nesterov=True, maximize=True)
    for p in ours:
        p.grad = torch.ones_like(p)
    lean.step()
    lean.step()
    assert all(torch.equal(p.grad, torch.ones_like(p)) for p in ours)


def test_step_runs_the_closure_with_grad_enabled() -> None:
    w = torch.tensor([1.0, -2.0], requires_grad=True)
    lean = LeanSGD([w], lr=0.25)

    def closure() -> Tensor:
        lean.zero_grad()
        loss = (w**2).sum()
        loss.backward()
        return loss

    with torch.no_grad():
        loss = lean.step(closure)
    assert float(loss.detach()) == 5.0
    assert torch.equal(w.detach(), torch.tensor([0.5, -1.0]))
    assert torch.is_grad_enabled()


def test_validation_messages() -> None:
    w = torch.zeros(2, requires_grad=True)
    with pytest.raises(ValueError, match=r"lr: expected a finite number >= 0; got -0.1"):
        LeanSGD([w], lr=-0.1)
    with pytest.raises(TypeError, match=r"momentum: expected a Python number; got str '0.9'"):
        LeanSGD([w], momentum="0.9")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"dampening: expected a finite number >= 0 and <= 1.0; got 2.0"):
        LeanSGD([w], dampening=2.0)
    with pytest.raises(ValueError, match=r"nesterov: expected momentum > 0 and dampening = 0 with nesterov=True; "
                                         r"got momentum=0.0, dampening=0.0"):
        LeanSGD([w], nesterov=True)
    with pytest.raises(TypeError, match=r"maximize: expected a bool; got 1"):
        LeanSGD([w], maximize=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"params\[0\].weight_decay: expected a finite number >= 0; got -1.0"):
        LeanSGD([{"params": [w], "weight_decay": -1.0}])
    with pytest.raises(ValueError, match=r"params\[0\]: unknown option\(s\) \['betas'\]"):
        LeanSGD([{"params": [w], "betas": (0.9, 0.99)}])
    with pytest.raises(ValueError, match=r"params: expected at least one tensor; got an empty list"):
        LeanSGD([])
    with pytest.raises(TypeError, match=r"params: expected an iterable of tensors.*got a Tensor"):
        LeanSGD(w)
    with pytest.raises(ValueError, match=r"params\[1\]\[0\]: a parameter appears in more than one place"):
        LeanSGD([{"params": [w]}, {"params": [w]}])
    with pytest.raises(TypeError, match=r"params\[0\]\[0\]: expected a leaf tensor; got Tensor"):
        LeanSGD([w * 2])
    lean = LeanSGD([w], lr=0.1)
    lean.param_groups[0]["lr"] = torch.tensor(0.1)
    w.grad = torch.ones(2)
    with pytest.raises(TypeError, match=r"lr: LeanSGD takes learning rates as Python numbers; got a Tensor"):
        lean.step()
    e = torch.nn.Embedding(3, 2, sparse=True)
    e(torch.tensor([1])).sum().backward()
    with pytest.raises(ValueError, match=r"LeanSGD: sparse gradients are not supported"):
        LeanSGD(e.parameters(), lr=0.1).step()


def test_load_state_dict_mismatch_messages() -> None:
    a, b = _params(), _params()
    sd = LeanSGD([{"params": a[:2]}, {"params": a[2:]}], lr=0.1).state_dict()
    with pytest.raises(ValueError, match=r"state_dict: has 2 parameter group\(s\); this optimizer has 1"):
        LeanSGD(b, lr=0.1).load_state_dict(sd)
    with pytest.raises(ValueError, match=r"state_dict: parameter group 0 has 2 parameter\(s\); this optimizer's has 1"):
        LeanSGD([{"params": b[:1]}, {"params": b[1:]}], lr=0.1).load_state_dict(sd)
    lean = LeanSGD(b, lr=0.1, momentum=0.9)
    bad = {"state": {0: {"momentum_buffer": torch.zeros(2)}}, "param_groups": lean.state_dict()["param_groups"]}
    with pytest.raises(ValueError, match=r"momentum_buffer of parameter 0: expected a tensor of shape \(5, 3\); got \(2,\)"):
        lean.load_state_dict(bad)
    bad = {"state": {7: {"momentum_buffer": torch.zeros(2)}}, "param_groups": lean.state_dict()["param_groups"]}
    with pytest.raises(ValueError, match=r"state_dict: state for parameter 7, which no group holds"):
        lean.load_state_dict(bad)


def test_lean_sgd_follows_the_optimizer_protocol() -> None:
    assert isinstance(LeanSGD(_params(), lr=0.1), OptimizerLike)
    assert isinstance(torch.optim.SGD(_params(), lr=0.1), OptimizerLike)
    assert not isinstance(object(), OptimizerLike)


# ----------------------------------------------------------------------------- under the trainer


def test_trainer_with_lean_sgd_equals_trainer_with_torch_sgd(tmp_path: Path) -> None:
    # a stochastic objective with a learned log Z (two parameter groups), momentum and weight decay
    kw = dict(steps=30, guard=None)
    one = make_trainer(NoisyNCE(), None, optimizer=lambda g: torch.optim.SGD(g, lr=0.05, momentum=0.9,
                                                                             weight_decay=0.01), **kw)
    two = make_trainer(NoisyNCE(), None, optimizer=lambda g: LeanSGD(g, lr=0.05, momentum=0.9, weight_decay=0.01),
                       **kw)
    one.fit()
    two.fit()
    for a, b in zip([*one.model.parameters(), *one.objective.parameters()],
                    [*two.model.parameters(), *two.objective.parameters()]):
        assert torch.equal(a, b)


def test_trainer_resume_with_lean_sgd_reproduces_uninterrupted_run(tmp_path: Path) -> None:
    def opt(groups: list[dict]) -> LeanSGD:
        return LeanSGD(groups, lr=0.05, momentum=0.9, nesterov=True)

    kw = dict(log_every=5, checkpoint_every=10, optimizer=opt)
    one = make_trainer(NoisyNCE(), tmp_path / "one", steps=40, **kw)
    one.fit()
    make_trainer(NoisyNCE(), tmp_path / "two", steps=20, **kw).fit()
    two = make_trainer(NoisyNCE(), tmp_path / "two", steps=40, **kw)
    two.fit(resume=True)
    assert metric_lines(tmp_path / "one") == metric_lines(tmp_path / "two")
    for a, b in zip(one.model.state_dict().values(), two.model.state_dict().values()):
        assert torch.equal(a, b)
    assert isinstance(two.optimizer, LeanSGD) and two.optimizer.state  # momentum buffers restored


def test_trainer_rejects_an_object_that_is_not_an_optimizer(tmp_path: Path) -> None:
    class NoState:
        param_groups: list = []

        def step(self, closure=None):
            return None

        def zero_grad(self, set_to_none=True):
            return None

    with pytest.raises(TypeError, match=r"optimizer factory: expected a torch.optim.Optimizer or an object with "
                                        r"param_groups, step, zero_grad, state_dict and load_state_dict.*got NoState"):
        make_trainer(GaussianML(), tmp_path, optimizer=lambda g: NoState(), model=GaussianEnergy(2))

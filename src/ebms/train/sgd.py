r"""Stochastic gradient descent with momentum, without ``torch.optim.Optimizer``'s per-step overhead.

Per parameter ``p`` with gradient ``g`` (``-g`` when ``maximize``), in order:

.. math::
    g &\leftarrow g + \lambda p                         &&\text{(weight decay } \lambda\text{)}\\
    u &\leftarrow \mu u + (1 - \tau) g                 &&\text{(momentum } \mu\text{, dampening } \tau\text{; } u = g \text{ at the first step)}\\
    g &\leftarrow g + \mu u \text{ (Nesterov) or } g \leftarrow u\\
    p &\leftarrow p - \eta g

(Sutskever, Martens, Dahl & Hinton, 2013, "On the importance of initialization and momentum in
deep learning", for the Nesterov form). This is ``torch.optim.SGD``'s rule, operation for
operation, so the two give the same numbers (bit for bit on the CPU; the test compares them), and
:class:`LeanSGD`'s ``state_dict`` has ``torch.optim.SGD``'s layout (``{"state": {i:
{"momentum_buffer": u}}, "param_groups": [...]}``; no state without momentum).

Why it exists: ``torch.optim.Optimizer.step`` wraps every call in a profiler record and runs the
step hooks, about 35 µs of Python per step on a desktop CPU, which is most of an update of a small
model (an RBM at batch size 10: :class:`ebms.fit.RBMEstimator`). Here a step is a few
``torch._foreach_*`` calls per parameter group (one dispatch for all of the group's tensors) and
nothing else: no hooks, no profiler record, no ``differentiable``/``fused``/``foreach`` variants,
no sparse gradients (a ``ValueError``), learning rates as Python floats only. The gradients are
read, never modified; parameters without a gradient are skipped. Cost per step: one pass over the
parameters, plus one over the momentum buffers, plus one per option in use (weight decay, Nesterov,
maximize), each a temporary of the parameters' size.

:class:`ebms.train.Trainer` drives it like any optimizer (it follows
:class:`ebms.train.protocols.OptimizerLike`): checkpoints, the divergence guard's restore and the
learning-rate schedule work through ``param_groups``, ``state_dict`` and ``load_state_dict``.

Example:
    >>> w = torch.tensor([1.0, -2.0], requires_grad=True)
    >>> opt = LeanSGD([w], lr=0.1, momentum=0.9)
    >>> for _ in range(3):
    ...     opt.zero_grad()
    ...     (w**2).sum().backward()
    ...     opt.step()
    >>> w.detach()
    tensor([ 0.0620, -0.1240])
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import Tensor

__all__ = ["LeanSGD"]

_OPTIONS = ("lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize")


def _real(value: Any, name: str, *, upper: float = math.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: expected a Python number; got {type(value).__name__} {value!r}")
    value = float(value)
    if not (math.isfinite(value) and 0.0 <= value <= upper):
        bound = "" if math.isinf(upper) else f" and <= {upper}"
        raise ValueError(f"{name}: expected a finite number >= 0{bound}; got {value}")
    return value


def _check_group(group: Mapping[str, Any], where: str) -> None:
    """Check one parameter group's options (the trainer and callers may rewrite them between steps)."""
    _real(group["lr"], f"{where}lr")
    _real(group["momentum"], f"{where}momentum")
    _real(group["dampening"], f"{where}dampening", upper=1.0)
    _real(group["weight_decay"], f"{where}weight_decay")
    for flag in ("nesterov", "maximize"):
        if not isinstance(group[flag], bool):
            raise TypeError(f"{where}{flag}: expected a bool; got {group[flag]!r}")
    if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
        raise ValueError(f"{where}nesterov: expected momentum > 0 and dampening = 0 with nesterov=True; got "
                         f"momentum={group['momentum']}, dampening={group['dampening']}")


class LeanSGD:
    """SGD with momentum, weight decay and Nesterov, updating in place with foreach ops (module docstring).

    Args:
        params: tensors, or parameter groups (dicts with ``"params"`` and any of the options below,
            which override the defaults for that group).
        lr: learning rate ``eta >= 0``.
        momentum: ``mu >= 0`` (``0``: no buffers).
        dampening: ``tau`` in [0, 1] (applies from the second step, as in ``torch.optim.SGD``).
        weight_decay: L2 coefficient ``lambda >= 0`` added to the gradient.
        nesterov: Nesterov momentum (needs ``momentum > 0`` and ``dampening = 0``).
        maximize: ascend instead of descend.

    Attributes:
        param_groups: list of dicts, ``"params"`` (a list of tensors) plus the options; a caller
            (the trainer's schedule) may change ``"lr"`` or any option between steps.
        state: ``{parameter: {"momentum_buffer": u}}`` (parameters that have taken a momentum step).
    """

    def __init__(self, params: Iterable[Tensor] | Iterable[dict[str, Any]], lr: float = 1e-3, *,
                 momentum: float = 0.0, dampening: float = 0.0, weight_decay: float = 0.0,
                 nesterov: bool = False, maximize: bool = False) -> None:
        defaults = {"lr": lr, "momentum": momentum, "dampening": dampening, "weight_decay": weight_decay,
                    "nesterov": nesterov, "maximize": maximize}
        _check_group(defaults, "")
        if isinstance(params, Tensor):
            raise TypeError("params: expected an iterable of tensors or of parameter-group dicts; got a Tensor "
                            "(wrap it in a list)")
        items = list(params)
        if not items:
            raise ValueError("params: expected at least one tensor; got an empty list")
        raw = items if all(isinstance(g, dict) for g in items) else [{"params": items}]
        self.defaults = defaults
        self.param_groups: list[dict[str, Any]] = []
        self.state: dict[Tensor, dict[str, Tensor]] = {}
        seen: set[int] = set()
        for i, g in enumerate(raw):
            if not isinstance(g, dict) or "params" not in g:
                raise TypeError(f"params[{i}]: expected a dict with 'params' (all items groups, or all tensors); got {g!r}")
            tensors = [g["params"]] if isinstance(g["params"], Tensor) else list(g["params"])
            for j, p in enumerate(tensors):
                if not isinstance(p, Tensor) or not p.is_leaf:
                    raise TypeError(f"params[{i}][{j}]: expected a leaf tensor; got {type(p).__name__}")
                if id(p) in seen:
                    raise ValueError(f"params[{i}][{j}]: a parameter appears in more than one place")
                seen.add(id(p))
            unknown = sorted(set(g) - {"params", *_OPTIONS, "initial_lr"})
            if unknown:
                raise ValueError(f"params[{i}]: unknown option(s) {unknown}; expected any of {list(_OPTIONS)}")
            group = {**defaults, **g, "params": tensors}
            _check_group(group, f"params[{i}].")
            self.param_groups.append(group)

    def __repr__(self) -> str:
        groups = ", ".join("{" + ", ".join(f"{k}={g[k]}" for k in _OPTIONS) + f", n_params={len(g['params'])}}}"
                           for g in self.param_groups)
        return f"LeanSGD([{groups}])"

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One update of every parameter that has a ``.grad`` (see the module docstring).

        ``closure`` (optional) re-evaluates the loss first, with gradients enabled; its value is returned.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        grad_mode = torch.is_grad_enabled()
        torch.set_grad_enabled(False)  # cheaper than a no_grad context per call
        try:
            # groups with the same options share one set of foreach calls (the RBM's two groups
            # differ only in weight decay, often 0 for both)
            same: dict[tuple[Any, ...], tuple[dict[str, Any], list[Tensor], list[Tensor]]] = {}
            for group in self.param_groups:
                key = (group["lr"], group["momentum"], group["dampening"], group["weight_decay"], group["nesterov"],
                       group["maximize"])
                entry = same.get(key)
                if entry is None:
                    entry = same[key] = (group, [], [])
                _, params, grads = entry
                for p in group["params"]:
                    g = p.grad
                    if g is not None:
                        if g.is_sparse:
                            raise ValueError("LeanSGD: sparse gradients are not supported (use torch.optim.SGD)")
                        params.append(p)
                        grads.append(g)
            for group, params, grads in same.values():
                if params:
                    self._update(group, params, grads)
        finally:
            torch.set_grad_enabled(grad_mode)
        return loss

    def _update(self, group: dict[str, Any], params: list[Tensor], grads: list[Tensor] | tuple[Tensor, ...]) -> None:
        lr, mu, wd = group["lr"], group["momentum"], group["weight_decay"]
        if isinstance(lr, Tensor):
            raise TypeError("lr: LeanSGD takes learning rates as Python numbers; got a Tensor")
        if group["maximize"]:
            grads = torch._foreach_neg(grads)
        if wd != 0:
            grads = torch._foreach_add(grads, params, alpha=wd)
        if mu != 0:
            state = self.state
            bufs: list[Tensor] = []
            old_bufs: list[Tensor] = []
            old_grads: list[Tensor] = []
            for p, g in zip(params, grads):
                entry = state.get(p)
                if entry is None:  # the first momentum step of p: u = g
                    buf = g.detach().clone()
                    state[p] = {"momentum_buffer": buf}
                else:
                    buf = entry["momentum_buffer"]
                    old_bufs.append(buf)
                    old_grads.append(g)
                bufs.append(buf)
            if old_bufs:
                torch._foreach_mul_(old_bufs, mu)
                torch._foreach_add_(old_bufs, old_grads, alpha=1 - group["dampening"])
            grads = torch._foreach_add(grads, bufs, alpha=mu) if group["nesterov"] else bufs
        torch._foreach_add_(params, grads, alpha=-lr)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear every parameter's ``.grad`` (``None``, or zero-filled when ``set_to_none=False``)."""
        for group in self.param_groups:
            for p in group["params"]:
                if set_to_none:
                    p.grad = None
                elif p.grad is not None:
                    p.grad.detach_().zero_()

    def state_dict(self) -> dict[str, Any]:
        """``{"state": {index: {"momentum_buffer": u}}, "param_groups": [{options, "params": [index]}]}``,
        parameters numbered in group order (``torch.optim.SGD``'s layout); the buffers are not copied."""
        index: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            ids = []
            for p in group["params"]:
                index[id(p)] = len(index)
                ids.append(index[id(p)])
            groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": ids})
        state = {index[id(p)]: dict(s) for p, s in self.state.items() if id(p) in index}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Load a :meth:`state_dict` (buffers copied to each parameter's device and dtype).

        Raises:
            ValueError: the number of groups or of parameters per group differs, or an option is invalid.
        """
        groups, saved = state_dict["param_groups"], state_dict["state"]
        if len(groups) != len(self.param_groups):
            raise ValueError(f"state_dict: has {len(groups)} parameter group(s); this optimizer has "
                             f"{len(self.param_groups)}")
        index: dict[int, Tensor] = {}
        for i, (mine, theirs) in enumerate(zip(self.param_groups, groups)):
            if len(theirs["params"]) != len(mine["params"]):
                raise ValueError(f"state_dict: parameter group {i} has {len(theirs['params'])} parameter(s); "
                                 f"this optimizer's has {len(mine['params'])}")
            index.update(zip(theirs["params"], mine["params"]))
        new_groups = []
        for i, (mine, theirs) in enumerate(zip(self.param_groups, groups)):
            group = {**{k: v for k, v in theirs.items() if k != "params"}, "params": mine["params"]}
            missing = [k for k in _OPTIONS if k not in group]
            if missing:
                raise ValueError(f"state_dict: parameter group {i} lacks option(s) {missing}")
            _check_group(group, f"state_dict.param_groups[{i}].")
            new_groups.append(group)
        state: dict[Tensor, dict[str, Tensor]] = {}
        for key, entry in saved.items():
            if key not in index:
                raise ValueError(f"state_dict: state for parameter {key!r}, which no group holds")
            p = index[key]
            buf = entry["momentum_buffer"]
            if not isinstance(buf, Tensor) or buf.shape != p.shape:
                raise ValueError(f"state_dict: momentum_buffer of parameter {key}: expected a tensor of shape "
                                 f"{tuple(p.shape)}; got {tuple(buf.shape) if isinstance(buf, Tensor) else type(buf).__name__}")
            state[p] = {"momentum_buffer": buf.detach().to(device=p.device, dtype=p.dtype, copy=True)}
        self.param_groups, self.state = new_groups, state

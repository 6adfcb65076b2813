"""What the trainer may be told about an optimizer or an objective, declared as typed protocols.

The :class:`~ebms.train.Trainer` takes any optimizer following :class:`OptimizerLike` (every
``torch.optim.Optimizer``, and lean ones such as :class:`ebms.train.LeanSGD` that skip
``torch.optim``'s per-step hooks) and any objective ``objective(model, batch, generator=g) ->
LossOutput``. A few of them need to be driven differently; they say so by *declaring* an
attribute, which the trainer reads through an ``isinstance`` check against one of these
:func:`typing.runtime_checkable` protocols, once, when it is built:

* :class:`ClosureOptimizer`: ``needs_closure = True`` (a class attribute) — ``step`` takes a
  closure that re-evaluates the loss (L-BFGS-type line searches). ``torch.optim.LBFGS`` is
  recognised by its type. The trainer then evaluates the objective only through that closure
  and skips ``grad_clip`` (see :func:`needs_closure`).
* :class:`ReportsStep`: an ``info`` mapping the optimizer rewrites after each ``step`` — its own
  account of the point it kept (``loss``: the full objective there, e.g. OWL-QN's with its L1
  term; optional ``grad_norm``; ``linesearch_failed``). The trainer logs ``info["loss"]`` instead
  of its last closure value (which may be a rejected line-search trial) and stops when the line
  search failed.
* :class:`GradientObjective`: ``sets_gradients = True`` — the objective fills the ``.grad`` of
  the parameters it trains itself, during its call (analytic gradients, e.g.
  :class:`ebms.objectives.rbm_cd.RBMContrastiveDivergence`); the trainer then calls no
  ``backward()``, and the returned loss needs no graph. The trainer sets every ``.grad`` to
  ``None`` before calling the objective, so the objective may assign or accumulate.
* :class:`SecondOrderObjective`: ``differentiates_twice = True`` — the loss holds an input
  gradient of the energy built with ``create_graph=True`` (score matching, a differentiable
  sampler step), so the parameters' gradient is a double backward through the energy. The
  trainer refuses ``compile=True`` for it: ``torch.compile`` (AOTAutograd) has no double backward.

Nothing here is discovered by ``hasattr`` at every step: a class that lacks the attribute is
simply an ordinary optimizer or objective.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import torch

__all__ = ["ClosureOptimizer", "GradientObjective", "OptimizerLike", "ReportsStep", "SecondOrderObjective",
           "differentiates_twice", "needs_closure", "sets_gradients", "unanchored_metrics"]


@runtime_checkable
class OptimizerLike(Protocol):
    """What the trainer needs from an optimizer (``torch.optim.Optimizer`` has all of it).

    * ``param_groups``: a list of dicts, each with ``"params"`` (a list of tensors) and ``"lr"``
      (a number); the trainer adds ``"initial_lr"`` and rewrites ``"lr"`` (schedule, divergence
      guard), and the optimizer must read ``"lr"`` afresh at every ``step``;
    * ``step(closure=None)``: update the parameters from their ``.grad`` (a quasi-Newton optimizer,
      :class:`ClosureOptimizer`, gets a closure);
    * ``zero_grad(set_to_none=True)``;
    * ``state_dict()`` / ``load_state_dict(state)``: the complete state (options and buffers) as
      tensors, numbers, strings, lists, tuples and dicts, which checkpoints and the guard's
      snapshots store and load back.
    """

    param_groups: list[dict[str, Any]]

    # loose signatures, so that torch.optim's own (overloaded, differently annotated) methods match
    def step(self, *args: Any, **kwargs: Any) -> Any: ...
    def zero_grad(self, *args: Any, **kwargs: Any) -> Any: ...
    def state_dict(self, *args: Any, **kwargs: Any) -> Any: ...
    def load_state_dict(self, *args: Any, **kwargs: Any) -> Any: ...


@runtime_checkable
class ClosureOptimizer(Protocol):
    """An optimizer whose ``step(closure)`` re-evaluates the loss (declares ``needs_closure``)."""

    needs_closure: bool


@runtime_checkable
class ReportsStep(Protocol):
    """An optimizer reporting on its last step in ``info`` (``loss``, ``grad_norm``, ``linesearch_failed``)."""

    info: Mapping[str, Any]


@runtime_checkable
class GradientObjective(Protocol):
    """An objective that fills parameter ``.grad`` itself (declares ``sets_gradients``)."""

    sets_gradients: bool


def needs_closure(optimizer: OptimizerLike) -> bool:
    """Whether ``optimizer.step`` must be given a closure: L-BFGS-type optimizers, which
    re-evaluate the loss during their line search (``torch.optim.LBFGS``, or any optimizer
    declaring ``needs_closure = True``: :class:`ClosureOptimizer`). The trainer then evaluates
    the objective only through a closure over the current batch and skips ``grad_clip`` (a line
    search needs the true gradient)."""
    if isinstance(optimizer, torch.optim.LBFGS):
        return True
    return isinstance(optimizer, ClosureOptimizer) and bool(optimizer.needs_closure)


@runtime_checkable
class SecondOrderObjective(Protocol):
    """An objective whose loss is differentiated twice through the energy (declares ``differentiates_twice``)."""

    differentiates_twice: bool


def differentiates_twice(objective: object) -> bool:
    """Whether ``objective`` needs a double backward through the energy (:class:`SecondOrderObjective`)."""
    return isinstance(objective, SecondOrderObjective) and bool(objective.differentiates_twice)


def sets_gradients(objective: object) -> bool:
    """Whether ``objective`` fills parameter ``.grad`` itself (:class:`GradientObjective`)."""
    return isinstance(objective, GradientObjective) and bool(objective.sets_gradients)


def unanchored_metrics(objective: object) -> tuple[str, ...]:
    """The metrics whose level ``objective`` leaves free (its ``unanchored_metrics`` attribute; none by default).

    An objective that constrains only the energy's input gradient and energy differences (energy matching's flow
    and CD terms) leaves the energy's additive constant free, so the mean energies it reports (``e_pos``,
    ``e_neg``) may drift by orders of magnitude with no fault: the divergence guard does not watch them.
    """
    keys = getattr(objective, "unanchored_metrics", ())
    if isinstance(keys, str) or not all(isinstance(k, str) for k in keys):
        raise TypeError(f"objective.unanchored_metrics: expected a tuple of metric names; got {keys!r}")
    return tuple(keys)

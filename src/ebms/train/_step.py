"""Private: pieces of one trainer step: the objective's output checked, host numbers, the
learning-rate schedule, the step's record, and the quasi-Newton step (one L-BFGS-type iteration
through a closure)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ebms.objectives import LossOutput
from ebms.train._data import Batch
from ebms.train._recovery import healthy
from ebms.train.protocols import ReportsStep

if TYPE_CHECKING:
    from ebms.train.trainer import Trainer


def check_output(out: Any, sets_gradients: bool) -> tuple[Tensor, dict[str, Any]]:
    """The loss and the raw metrics (numbers or one-element tensors; made host numbers only on
    steps that need them, :func:`metric_numbers`)."""
    if not isinstance(out, LossOutput) or not isinstance(out.loss, Tensor) or not isinstance(out.metrics, Mapping):
        raise TypeError(f"objective: expected a LossOutput(loss, metrics, negatives); got {type(out).__name__}")
    loss, metrics = out.loss, out.metrics
    if loss.dim() != 0:
        raise ValueError(f"objective: expected LossOutput.loss to be a 0-d tensor; got shape {tuple(loss.shape)}")
    if not loss.requires_grad and not sets_gradients:
        raise ValueError("objective: LossOutput.loss does not require grad (computed under no_grad or detached?)")
    raw: dict[str, Any] = {}
    for k, v in metrics.items():
        if isinstance(v, Tensor) and v.numel() == 1:
            raw[k] = v.detach().clone()  # the value now, not after the optimizer step (a parameter's)
        elif isinstance(v, numbers.Real):
            raw[k] = v
        else:
            raise TypeError(f"objective: metric {k!r} must be a number; got {v!r}")
    return loss, raw


def metric_numbers(raw: Mapping[str, Any]) -> dict[str, float]:
    return {str(k): float(v.detach()) if isinstance(v, Tensor) else float(v) for k, v in raw.items()}


def grad_norm(grads: list[Tensor]) -> Tensor:
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.detach().float()) for g in grads]))


def quasi_newton_step(t: Trainer, batch: Batch) -> bool:
    """One L-BFGS-type iteration on ``batch``.

    The objective is evaluated only through the optimizer's closure (start point and
    line-search trials); the guard and the log see the last evaluation (for
    :class:`~ebms.train.owlqn.OWLQN`, the accepted point). No ``grad_clip``: a line search
    needs the true gradient.
    """
    last: dict[str, Any] = {}

    def closure() -> Tensor:
        with torch.enable_grad():
            loss, metrics = t._evaluate(batch)
        last.update(loss=loss.detach(), metrics=metrics)
        return loss.detach()

    apply_lr_schedule(t)
    t.optimizer.step(closure)
    if not last:  # the optimizer reused its cached point and found it stationary
        closure()
    grads = [p.grad for p in t._params if p.grad is not None]
    norm = grad_norm(grads) if grads else torch.zeros((), device=t.device)
    loss_f, metrics, gnorm = t._health(last["loss"], last["metrics"], norm)
    info = t.optimizer.info if isinstance(t.optimizer, ReportsStep) else None
    if info is not None and "loss" in info:
        # the optimizer's own account of the point it kept: its full objective (OWL-QN: with
        # the L1 term) there, not the last line-search trial, which may have been rejected
        metrics = {**metrics, "smooth_loss": loss_f}
        loss_f = float(info["loss"])
        gnorm = float(info.get("grad_norm", gnorm))
    failed = info is not None and bool(info.get("linesearch_failed", False))
    if not healthy(t, loss_f, metrics, gnorm):
        return False
    finish_step(t, (loss_f, metrics, gnorm))
    if failed:  # no trial step decreased the objective: converged to rounding, or a bad direction
        t.log_event("linesearch_failed", loss=loss_f)
        t.request_stop(f"line search found no decrease at step {t.step} (loss {loss_f:.6g}): "
                       f"converged to numerical precision, or the objective is not smooth")
    return True


def apply_lr_schedule(t: Trainer) -> None:
    if t.lr_schedule is not None:
        scale = float(t.lr_schedule(t.step))
        if not (math.isfinite(scale) and scale >= 0):
            raise ValueError(f"lr_schedule: expected a finite multiplier >= 0 at step {t.step}; got {scale}")
        for g in t.optimizer.param_groups:
            g["lr"] = g["initial_lr"] * scale


def finish_step(t: Trainer, host: tuple[float, dict[str, float], float] | None) -> None:
    """Count the step (and move the weight average, if any); with its ``host`` numbers (loss, metrics, grad
    norm), record them."""
    if t.ema is not None:
        t.ema.update(t.model)
    t.step += 1
    if host is None:
        return
    loss_f, metrics, gnorm = host
    lr = float(t.optimizer.param_groups[0]["lr"])
    t._record = {"step": t.step, "loss": loss_f, "grad_norm": gnorm, "lr": lr, "metrics": metrics}
    if len(t.optimizer.param_groups) > 1:
        t._record["lr_groups"] = [float(g["lr"]) for g in t.optimizer.param_groups]
    t.metrics = {**metrics, "loss": loss_f, "grad_norm": gnorm, "lr": lr}

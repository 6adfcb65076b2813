"""Private: what :class:`~ebms.train.Trainer` checks and builds once, when it is constructed.

The run settings (``config``, ``identity``, callbacks), the trainer's ``torch.Generator``, the
batch source (:mod:`ebms.train._data`) and the optimizer: built from a factory, or a ready one
checked to cover exactly the trainable parameters of model and objective, with every group's
learning rate checked and ``initial_lr`` (what a schedule scales) recorded.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from ebms.train._data import Batch, StreamBatches, TensorBatches, mix_seed
from ebms.train.callbacks import Callback
from ebms.train.distributed import DistributedContext
from ebms.train.protocols import OptimizerLike

OptimizerSpec = OptimizerLike | Callable[[list[dict[str, Any]]], OptimizerLike] | None


def json_settings(value: Mapping[str, Any] | None, name: str, what: str) -> dict[str, Any]:
    """A strict-JSON copy of the mapping ``value`` (``None``: empty), for checkpoints."""
    try:
        return json.loads(json.dumps(dict(value or {}), allow_nan=False))
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name}: expected {what}; {err}") from None


def check_callbacks(callbacks: Sequence[Callback]) -> list[Callback]:
    out = list(callbacks)
    for i, cb in enumerate(out):
        if not isinstance(cb, Callback):
            raise TypeError(f"callbacks[{i}]: expected an object with on_step_end/on_fit_start/on_fit_end: "
                            f"an ebms.train.Callback (subclass it; its hooks are no-ops); got {cb!r}")
    return out


def make_generator(generator: torch.Generator | None, device: torch.device, seed: int, rank: int) -> torch.Generator:
    """The given generator (checked to be on ``device``), else a new one seeded from ``seed`` and ``rank``."""
    if generator is None:
        out = torch.Generator(device=device)
        out.manual_seed(seed if rank == 0 else mix_seed(seed, rank))
        return out
    if not isinstance(generator, torch.Generator) or generator.device != device:
        got = f"one on {generator.device}" if isinstance(generator, torch.Generator) else type(generator).__name__
        raise TypeError(f"generator: expected a torch.Generator on {device} or None; got {got}")
    return generator


def make_batches(data: Batch | Callable[[Any, torch.Generator], Batch], batch_size: int | None, seed: int,
                 dist: DistributedContext, generator: torch.Generator) -> TensorBatches | StreamBatches:
    if isinstance(data, (Tensor, tuple)):
        if batch_size is None:
            raise ValueError("batch_size: expected an int >= 1 with tensor data (None is for a data stream "
                             "that picks its batch sizes); got None")
        return TensorBatches(data, batch_size, seed=seed, rank=dist.rank, world_size=dist.world_size)
    if callable(data):
        return StreamBatches(data, batch_size, generator)
    raise TypeError(f"data: expected a Tensor, a tuple of Tensors or a callable (batch_size, generator); got {type(data).__name__}")


def build_optimizer(model: nn.Module, objective: Any, spec: OptimizerSpec) -> OptimizerLike:
    named = [(f"model.{n}", p) for n, p in model.named_parameters() if p.requires_grad]
    seen = {id(p) for _, p in named}
    obj = []
    if isinstance(objective, nn.Module):
        obj = [(f"objective.{n}", p) for n, p in objective.named_parameters() if p.requires_grad and id(p) not in seen]
    if not named and not obj:
        raise ValueError("model/objective: no trainable parameters (requires_grad=True) to optimise")
    if isinstance(spec, OptimizerLike):
        held = {id(p) for g in spec.param_groups for p in g["params"]}
        ours = {id(p) for _, p in named + obj}
        missing = [n for n, p in named + obj if id(p) not in held]
        if missing or held - ours:
            raise ValueError(
                f"optimizer: expected exactly the trainable parameters of model and objective; "
                f"missing {missing}, {len(held - ours)} foreign parameter(s). Pass a factory "
                "(groups -> optimizer) to have the trainer build it"
            )
        return spec
    groups = [{"params": [p for _, p in part]} for part in (named, obj) if part]
    if spec is None:
        return torch.optim.Adam(groups, lr=1e-3)
    if not callable(spec):
        raise TypeError(f"optimizer: expected an optimizer (a torch.optim.Optimizer or an "
                        f"ebms.train.protocols.OptimizerLike) or a factory (groups -> optimizer); "
                        f"got {type(spec).__name__}")
    built = spec(groups)
    if not isinstance(built, OptimizerLike):
        raise TypeError(f"optimizer factory: expected a torch.optim.Optimizer or an object with param_groups, "
                        f"step, zero_grad, state_dict and load_state_dict (ebms.train.protocols.OptimizerLike); "
                        f"got {type(built).__name__}")
    return built


def check_optimizer(optimizer: OptimizerLike, closure: bool, batches: TensorBatches | StreamBatches,
                    batch_size: int | None, world_size: int) -> None:
    """A quasi-Newton optimizer gets the whole training set; every group's lr is a finite number >= 0;
    each group's ``initial_lr`` is set (to its lr) unless the optimizer state already has one."""
    if closure:
        n = batches.n if isinstance(batches, TensorBatches) else None
        if n is None or batch_size is None or batch_size * world_size != n:
            raise ValueError(
                f"batch_size: a quasi-Newton optimizer ({type(optimizer).__name__}) steps on the whole "
                f"training set (its line search compares losses of one fixed objective, and OWL-QN carries "
                f"the last gradient over to the next step); expected batch_size = "
                f"{'the number of rows of data' if n is None else n // max(world_size, 1)} "
                f"with tensor data; got {batch_size}"
                + (" and a data stream" if n is None else "")
            )
    for i, group in enumerate(optimizer.param_groups):
        lr = group.get("lr")
        lr_f = float(lr) if isinstance(lr, (int, float, Tensor)) and not isinstance(lr, bool) else math.nan
        if lr is not None and not (math.isfinite(lr_f) and lr_f >= 0):
            raise ValueError(
                f"optimizer: parameter group {i} has lr={lr!r}; expected a finite number >= 0 "
                "(`ebms train`: train.lr)"
            )
    for group in optimizer.param_groups:  # the schedule scales this; saved with the optimizer state
        group.setdefault("initial_lr", group["lr"])

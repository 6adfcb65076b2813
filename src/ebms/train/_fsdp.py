"""Private: the trainer's FSDP2 option (``Trainer(shard="fsdp")``, ``train.shard = "fsdp"``).

:func:`shard_model` wraps the energy with ``torch.distributed.fsdp.fully_shard`` (FSDP2) as one
unit: between evaluations every rank holds ``1 / world_size`` of each parameter, of its gradient
and of the optimizer state (a DTensor sharded on dimension 0); each call of the energy's
``forward`` (or of a method such as ``energy_and_grad`` or ``log_partition``, registered with
``register_fsdp_forward_method``) gathers the full parameters for that call, and ``backward``
reduce-scatters the gradients, averaged over ranks, into the shards. The objective's own
parameters (a learned log Z) stay whole on every rank and are averaged as under the default
data parallelism.

**State dicts stay full.** The model's ``state_dict()`` and the optimizer's ``state_dict()``
return whole tensors (gathered with ``full_tensor()``: a collective every rank takes part in, as
every rank takes the same steps), and their ``load_state_dict`` accept whole tensors (each rank
keeps its shard; nothing is communicated). So a checkpoint of a sharded run has the keys and
shapes of any other run: ``ebms eval``, ``sample`` and the apply commands read it as they read
one trained in one process, and a sharded run resumes from it (with the same world size, as
every resume).

**One unit.** The whole energy is one FSDP unit: energies in this package evaluate their layers
through their own code (``MLPEnergy`` calls its weights directly, not its ``nn.Linear``
children), so only the root's ``forward`` is certain to be the entry point. Peak memory during
an evaluation is therefore the full parameters; between evaluations (the optimizer step, the
checkpoint's tensors aside) it is the shard.

Refused (one line each): one process (nothing to shard), a weight average (``ema``: its copy of
the weights would be whole again), and quasi-Newton optimizers (their line search and history
work on whole parameter vectors).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import Tensor, nn

from ebms.train.distributed import DistributedContext

#: the methods of energies that evaluate parameters outside ``forward`` (registered when present)
FORWARD_METHODS = ("energy", "energy_and_grad", "log_partition", "log_prob", "score", "token_logits",
                   "token_logits_flat", "single_token_energies", "log_density")

SHARDS = ("ddp", "fsdp")


def check_shard(value: Any) -> str:
    if value not in SHARDS:
        raise ValueError(f"shard: expected one of {list(SHARDS)}; got {value!r}")
    return str(value)


def is_dtensor(t: Any) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(t, DTensor)


def shard_model(model: nn.Module, ctx: DistributedContext, device: torch.device, *, ema: bool) -> None:
    """Make rank 0's weights everyone's, then ``fully_shard`` ``model`` in place (module docstring)."""
    if not ctx.enabled:
        raise ValueError("shard: 'fsdp' shards the energy over the ranks of a torchrun job; this is one process "
                         "(launch with torchrun --nproc_per_node N, N >= 2, or use shard='ddp')")
    if ema:
        raise ValueError("shard: 'fsdp' cannot keep a weight average (ema): it would hold the whole weights on "
                         "every rank; train without ema, or with shard='ddp'")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method

    ctx.broadcast_([*model.parameters(), *model.buffers()])  # the shards of one set of weights
    mesh = init_device_mesh(device.type, (ctx.world_size,))
    fully_shard(model, mesh=mesh)
    for name in FORWARD_METHODS:
        if callable(getattr(type(model), name, None)):
            register_fsdp_forward_method(model, name)
    model.register_state_dict_post_hook(_full_module_state)
    model.register_load_state_dict_pre_hook(_shard_module_state)


def _full(value: Any) -> Any:
    return value.full_tensor() if is_dtensor(value) else value


def _full_module_state(module: nn.Module, state: dict[str, Any], prefix: str, local_metadata: Any) -> None:
    for key, value in list(state.items()):
        if is_dtensor(value):
            state[key] = value.detach().full_tensor()


def _like(value: Tensor, current: Any) -> Tensor:
    """``value`` (whole) as a DTensor laid out like ``current``, each rank keeping its part."""
    from torch.distributed.tensor import distribute_tensor

    if is_dtensor(value) or not is_dtensor(current):
        return value
    local = value.to(device=current.device, dtype=current.dtype)
    return distribute_tensor(local, current.device_mesh, current.placements, src_data_rank=None)


def _shard_module_state(module: nn.Module, state: dict[str, Any], prefix: str, *args: Any) -> None:
    if prefix:  # the hook is registered on the root only; any nested call leaves the state alone
        return
    params = dict(module.named_parameters())
    for key, value in list(state.items()):
        p = params.get(key)
        if p is not None and isinstance(value, Tensor) and tuple(value.shape) == tuple(p.shape):
            state[key] = _like(value, p)


def hook_optimizer(optimizer: Any, closure: bool) -> None:
    """Whole tensors in and out of ``optimizer``'s state dict (see the module docstring); ``closure``: a
    quasi-Newton optimizer, refused."""
    if closure:
        raise ValueError("shard: 'fsdp' does not drive quasi-Newton optimizers (L-BFGS, OWL-QN): their line "
                         "search works on whole parameter vectors; use Adam or SGD, or shard='ddp'")
    if not hasattr(optimizer, "register_state_dict_post_hook"):
        raise ValueError(f"shard: 'fsdp' needs a torch.optim.Optimizer (its state-dict hooks keep checkpoints "
                         f"whole); got {type(optimizer).__name__}")
    params: list[Tensor] = [p for g in optimizer.param_groups for p in g["params"]]

    def full_state(opt: Any, state: dict[str, Any]) -> dict[str, Any]:
        state["state"] = {k: {n: _full(v) for n, v in s.items()} for k, s in state["state"].items()}
        return state

    def sharded_state(opt: Any, state: dict[str, Any]) -> dict[str, Any]:
        out = dict(state)
        out["state"] = {k: {n: _like(v, params[int(k)]) if isinstance(v, Tensor) and v.dim() > 0 else v
                            for n, v in s.items()} for k, s in state["state"].items()}
        return out

    optimizer.register_state_dict_post_hook(full_state)
    optimizer.register_load_state_dict_pre_hook(sharded_state)


def split_params(params: Sequence[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
    """``(sharded, whole)``: the DTensor parameters (FSDP reduces their gradients) and the rest."""
    sharded = [p for p in params if is_dtensor(p)]
    return sharded, [p for p in params if not is_dtensor(p)]


def grad_norm(grads: Sequence[Tensor], ctx: DistributedContext) -> Tensor:
    """The global 2-norm of ``grads``: the squares of the sharded ones summed over ranks, the whole ones
    (equal on every rank) counted once."""
    local = [cast(Any, g).to_local() for g in grads if is_dtensor(g)]
    whole = [g for g in grads if not is_dtensor(g)]
    ref = (local or whole)[0]
    sq = torch.zeros((), dtype=torch.float32, device=ref.device)
    for g in local:
        sq = sq + g.detach().float().pow(2).sum()
    if ctx.enabled and local:
        dist.all_reduce(sq)
    for g in whole:
        sq = sq + g.detach().float().pow(2).sum()
    return sq.sqrt()


def local_grads(grads: Sequence[Tensor]) -> list[Tensor]:
    """Tensors to scale in place for clipping: each DTensor's local shard, the others themselves."""
    return [cast(Any, g).to_local() if is_dtensor(g) else g for g in grads]

"""Private: capture and apply the complete training state (snapshots and checkpoints).

The state of a run is: model, objective and optimizer ``state_dict``s (and the weight average's, with
``ema``), every
RNG stream (:func:`~ebms.train._state.capture_rng`), the data position, the
step counter and the callbacks' ``state_dict``s. In-memory snapshots (for the
divergence guard) and on-disk checkpoints share this code, so the resume test
also exercises the restore path the guard uses.

Under ``torchrun`` a checkpoint additionally gathers each rank's RNG states and
each rank's objective buffers (e.g. a replay buffer of negatives), stored as
``objective@<rank>/<name>``; parameters are identical on all ranks and are
stored once.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from ebms.errors import CheckpointError
from ebms.train._state import capture_rng, decode_blobs, encode_blobs, flatten_state, restore_rng, unflatten_state
from ebms.train.checkpoint import Checkpoint

if TYPE_CHECKING:
    from ebms.train.trainer import Trainer


@dataclass(frozen=True)
class Snapshot:
    """A complete local training state; tensors are private CPU copies, or, with ``path``, the tensors
    and their skeleton are those of the checkpoint written at this step (read back by :func:`read_back`)."""

    step: int
    skeleton: Any
    tensors: dict[str, Tensor]
    rng: dict[str, bytes]
    data: dict[str, Any]
    callbacks: list[dict[str, Any]]
    log_offset: int = 0  # bytes of metrics.jsonl written when the snapshot was taken
    guard: dict[str, list[float]] | None = None  # the divergence guard's recent healthy values
    path: Path | None = None  # the checkpoint record holding ``skeleton`` and ``tensors`` (then None and {})


def _tree(t: Trainer) -> dict[str, Any]:
    tree: dict[str, Any] = {"model": t.model.state_dict(), "optimizer": t.optimizer.state_dict()}
    if isinstance(t.objective, nn.Module):
        tree["objective"] = t.objective.state_dict()
    if t.ema is not None:
        tree["ema"] = t.ema.state_dict()
    return tree


def capture(t: Trainer, *, on_disk: Path | None = None, copy: bool = True) -> Snapshot:
    """Copy the current local state; with ``on_disk`` (a checkpoint record of this very state, see
    :func:`ebms.train._recovery.checkpoint_of_now`) the model, objective and optimizer tensors are not
    copied but read back from it if a restore needs them (a copy of a large model's state, kept all
    run long, is memory the run does not otherwise need). ``copy=False``: the tensors are the live ones
    where they are contiguous CPU tensors (:func:`checkpoint_payload`, written before the state moves on)."""
    skeleton, tensors = (None, {}) if on_disk is not None else flatten_state(_tree(t), "", copy=copy)
    cbs = [{"type": type(cb).__name__, "state": cb.state_dict()} for cb in t.callbacks]
    try:
        cbs = json.loads(json.dumps(cbs, allow_nan=False))
    except (TypeError, ValueError) as err:
        raise ValueError(f"callbacks: state_dict() must return strict JSON data; {err}") from None
    return Snapshot(
        t.step, skeleton, tensors, capture_rng(t.generator), dict(t._batches.state_dict()), cbs, t._log.offset(),
        {k: list(v) for k, v in t._guard_history.items()}, on_disk,
    )


def read_back(t: Trainer, snap: Snapshot) -> Snapshot:
    """``snap`` with the tensors and skeleton of its checkpoint (``snap`` itself when it holds them)."""
    if snap.path is None:
        return snap
    assert t.store is not None
    ckpt = t.store.load(snap.path, identity=t.identity)
    if ckpt.step != snap.step:
        raise CheckpointError(f"{ckpt.path}: expected the checkpoint of step {snap.step} to restore after a "
                              f"divergence; it holds step {ckpt.step}")
    return replace(snap, skeleton=ckpt.meta["state"], tensors=dict(ckpt.tensors), path=None)


def load_module(module: nn.Module, state: Mapping[str, Tensor], what: str, where: str) -> None:
    """``module.load_state_dict`` with key and shape checks that name the file.

    Buffers created on first use (persistent chains, replay memories: an empty
    placeholder until the first step fills it) may differ in shape between the
    state and the module when one side is still the placeholder: a buffer that
    is currently empty (``numel() == 0``) takes the stored shape, and an empty
    stored buffer (a snapshot or checkpoint taken before the first step) makes
    the module's buffer empty again, so the objective creates it afresh on its
    next call exactly as it did then. Other shape differences are errors.
    """
    current = module.state_dict()
    missing = sorted(set(current) - set(state))
    unexpected = sorted(set(state) - set(current))
    if missing or unexpected:
        raise CheckpointError(f"{where}: {what} state does not match: missing keys {missing}, unexpected keys {unexpected}")
    buffers = dict(module.named_buffers())
    for key, value in state.items():
        have = current[key]
        if tuple(have.shape) == tuple(value.shape):
            continue
        if key in buffers and (have.numel() == 0 or value.numel() == 0):
            owner, _, name = key.rpartition(".")
            module.get_submodule(owner)._buffers[name] = torch.empty(value.shape, dtype=have.dtype, device=have.device)
            continue
        raise CheckpointError(
            f"{where}: {what}.{key}: shape mismatch: checkpoint has {tuple(value.shape)}, "
            f"current {what} has {tuple(have.shape)}"
        )
    module.load_state_dict(state)


def apply(t: Trainer, snap: Snapshot, where: str, *, copy: bool = True) -> None:
    """Put ``snap`` back into the trainer (tensors are copied, the snapshot stays intact; ``copy=False``
    for tensors loaded for this one restore, which the trainer may then own: no second copy of the state)."""
    tensors = {k: v.clone() for k, v in snap.tensors.items()} if copy else dict(snap.tensors)
    tree = unflatten_state(snap.skeleton, tensors, where)
    if not isinstance(tree, dict) or "model" not in tree or "optimizer" not in tree:
        raise CheckpointError(f"{where}: state lacks 'model' or 'optimizer'")
    if t.ema is not None and "ema" not in tree:
        raise CheckpointError(f"{where}: state holds no weight average (trained without ema); this trainer "
                              f"keeps one (ema={t.ema.decay}): resume without ema, or start a new run")
    if t.ema is None and "ema" in tree:
        raise CheckpointError(f"{where}: state holds a weight average (trained with ema); resume with the run's "
                              "ema so that it is kept")
    load_module(t.model, tree["model"], "model", where)
    if isinstance(t.objective, nn.Module):
        load_module(t.objective, tree.get("objective", {}), "objective", where)
    if t.ema is not None:
        t.ema.load_state_dict(tree["ema"], where)
    try:
        t.optimizer.load_state_dict(tree["optimizer"])
    except (ValueError, KeyError, TypeError) as err:
        raise CheckpointError(f"{where}: optimizer state does not fit this optimizer ({err})") from None
    restore_rng(snap.rng, t.generator, where)
    try:
        t._batches.load_state_dict(snap.data)
    except (ValueError, KeyError, TypeError) as err:
        raise CheckpointError(f"{where}: {err}") from None
    for cb, saved in zip(t.callbacks, snap.callbacks):
        if saved.get("type") == type(cb).__name__ and saved.get("state") is not None:
            cb.load_state_dict(saved["state"])
    if snap.guard is not None:
        t._guard_history = {k: list(v) for k, v in snap.guard.items()}
    t.step = snap.step


def checkpoint_payload(t: Trainer) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """Tensors and JSON record of a checkpoint (a collective call under torchrun)."""
    snap = capture(t, copy=False)
    tensors = dict(snap.tensors)
    blob = json.dumps(encode_blobs(snap.rng)).encode()
    rngs = [json.loads(part) for part in t.dist.gather_bytes(blob, t.device)]
    rank_buffers: list[str] = []
    if t.dist.enabled and isinstance(t.objective, nn.Module):
        state = t.objective.state_dict()
        rank_buffers = [n for n, _ in t.objective.named_buffers() if n in state]
        for name in rank_buffers:
            for r, part in enumerate(t.dist.gather_tensor(state[name])):
                if r > 0:
                    tensors[f"objective@{r}/{name}"] = part.detach().cpu()
    meta = {
        "config": t.config_dict(),
        "state": snap.skeleton,
        "rng": rngs,
        "rank_buffers": rank_buffers,
        "trainer": {
            "step": snap.step, "data": snap.data, "callbacks": snap.callbacks, "stop_reason": t._stop_reason,
            "guard_history": snap.guard,
        },
    }
    return tensors, meta


def apply_checkpoint(t: Trainer, ckpt: Checkpoint) -> None:
    """Restore a loaded checkpoint after checking it was made by a compatible run (the trainer may keep
    ``ckpt``'s tensors: the caller drops ``ckpt`` afterwards)."""
    where, meta = str(ckpt.path), ckpt.meta
    try:
        cfg, tr, rngs, skeleton = meta["config"], meta["trainer"], meta["rng"], meta["state"]
        step, data, cbs = tr["step"], tr["data"], tr["callbacks"]
    except (KeyError, TypeError) as err:
        raise CheckpointError(f"{where}: malformed record: missing field {err}") from None
    if step != ckpt.step:
        raise CheckpointError(f"{where}: malformed record: trainer step {step!r} differs from the record's step {ckpt.step}")
    guard = _guard_history(tr.get("guard_history"), where)
    mine = t.config_dict()
    for key in ("batch_size", "seed", "world_size", "data"):
        if cfg.get(key) != mine[key]:
            raise CheckpointError(
                f"{where}: checkpoint has {key}={cfg.get(key)!r} but this trainer has {key}={mine[key]!r}; "
                "an exact resume needs the same value"
            )
    if not isinstance(rngs, list) or len(rngs) != t.dist.world_size:
        raise CheckpointError(f"{where}: expected RNG states for {t.dist.world_size} rank(s)")
    rng = decode_blobs(rngs[t.dist.rank], where)
    apply(t, Snapshot(step, skeleton, ckpt.tensors, rng, data, cbs, guard=guard), where, copy=False)
    if t.dist.rank > 0 and isinstance(t.objective, nn.Module):
        for name in meta.get("rank_buffers", []):
            key = f"objective@{t.dist.rank}/{name}"
            if key not in ckpt.tensors:
                raise CheckpointError(f"{where}: missing per-rank buffer {key!r}")
            t.objective.get_buffer(name).copy_(ckpt.tensors[key])


def _guard_history(value: Any, where: str) -> dict[str, list[float]]:
    """The guard history of a record (``{}`` when absent), checked to be ``{name: [finite numbers]}``."""
    if value is None:
        return {}
    ok = isinstance(value, dict) and all(
        isinstance(v, list)
        and all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in v)
        for v in value.values()
    )
    if not ok:
        raise CheckpointError(f"{where}: malformed record: trainer.guard_history must map names to lists of numbers")
    return {str(k): [float(x) for x in v] for k, v in value.items()}


def sync_tensors(t: Trainer) -> list[Tensor]:
    """What rank 0 broadcasts at the start of ``fit``: model parameters and buffers, objective
    parameters, the weight average (with ``ema``). Objective buffers stay per rank (each rank keeps its own negatives)."""
    out = [*t.model.parameters(), *t.model.buffers()]
    if isinstance(t.objective, nn.Module):
        out += list(t.objective.parameters())
    if t.ema is not None:  # made from each rank's initial weights, before this broadcast
        out += list(t.ema.state_dict().values())
    return out

"""Private: a residual run's base run (``generation.base_run`` / ``residual.base_run``).

A residual EBM is trained against samples of a frozen base LM, the newest checkpoint of another
run folder (:func:`open_base`). The residual run records that checkpoint in its run file
``base.json`` (:func:`base_record`: file name, step, sha256 of the weights and of the
checkpoint's identity, which holds the base's settings and run files such as its vocabulary), and
a resume, ``eval`` or ``sample`` of the residual run refuses a base trained again since
(:func:`check_base`): the energy was fitted to the old base's samples, and the negatives would
silently be redrawn from the new one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch import nn

from ebms.cli.config import Config, ConfigError, load_config
from ebms.errors import CheckpointError, RunFolderError
from ebms.train.run_files import stored_json

__all__ = ["BASE_FILE", "base_record", "base_run_config", "check_base", "open_base"]

#: the run file of a residual run's base, and its format.
BASE_FILE, BASE_FORMAT = "base.json", "ebms-base-run"


def base_run_config(run: str | None, key: str = "generation.base_run", data: str = "data.name='addition'") -> Config:
    path = Path(str(run)) / "config.toml"
    if not path.is_file():
        raise ConfigError(f"{key}: {str(run)!r} is not a run folder (no config.toml); train a base first "
                          f"(model.kind = 'transformer' or 'lstm' on {data})")
    return load_config(path, stored=True)


def open_base(run: str | None, key: str) -> tuple[Config, nn.Module, Any, Any]:
    """Config, model (its newest valid checkpoint, with the base run's own stored files), data and
    :class:`~ebms.train.checkpoint.Checkpoint` of the base run folder ``run``; ``key`` names it in errors."""
    from ebms.cli.run import open_run  # the run module imports the task registry

    try:
        return open_run(str(run))
    except (RunFolderError, CheckpointError) as e:
        raise ConfigError(f"{key}: {e}") from None


def base_record(ckpt: Any) -> dict[str, Any]:
    """What a residual run records of its base (``base.json``): the checkpoint file and step, the sha256
    of its weights and of its identity (the settings and run files, e.g. the vocabulary, it was trained with)."""
    identity = json.dumps(ckpt.identity, sort_keys=True, separators=(",", ":"))
    return {"format": BASE_FORMAT, "version": 1, "checkpoint": ckpt.path.name, "step": ckpt.step,
            "weights_sha256": ckpt.meta.get("weights", {}).get("sha256"),
            "identity_sha256": hashlib.sha256(identity.encode()).hexdigest()}


def check_base(stored: Mapping[str, bytes], now: Mapping[str, Any], key: str, run: str | None) -> None:
    """Refuse a base run whose newest checkpoint is not the one a residual run was trained against.

    Raises:
        ConfigError: naming ``key``, both checkpoints and what to do.
        ebms.errors.CheckpointError: the stored ``base.json`` is unreadable.
    """
    was = stored_json(stored, BASE_FILE, BASE_FORMAT)
    if all(was.get(k) == now[k] for k in ("step", "weights_sha256", "identity_sha256")):
        return  # the same base (a run trained again to the same weights is the same base)
    same = " (the same step, other weights or settings)" if was.get("step") == now["step"] else ""
    raise ConfigError(f"{key}: the base run {str(run)!r} changed since this run was trained: its newest checkpoint is "
                      f"{now['checkpoint']} (step {now['step']}), this run was trained against {was.get('checkpoint')} "
                      f"(step {was.get('step')}){same}; the energy was fitted to that base's samples, so resuming, "
                      f"evaluating or sampling would mix two models: restore the base run, or train this run again "
                      f"(--overwrite)")

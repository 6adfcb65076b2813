"""Load a run folder made by ``ebms train`` back into Python in one call.

::

    import ebms.runs

    run = ebms.runs.load_run("runs/demo")
    run.model                   # the trained energy (nn.Module, eval mode), newest valid checkpoint
    run.step, run.checkpoint    # the step it was saved at, and its JSON record
    x = run.sample(500)         # fresh chains of the configured sampler, (500, D)
    run.data.sample(500)        # the data set the run was trained on (toy / point cloud / images)
    run.config.train.lr         # the configuration (config.toml, with any overrides)

The folder's ``config.toml`` rebuilds the data set and the model; the weights
come from the newest checkpoint that verifies (a damaged one is skipped with a
warning), and that checkpoint must have been trained under the same settings
of role ``model`` (:data:`ebms.cli.run.KEY_ROLES`: the model, its data and objective, the task
section's keys that change the weights), else :class:`~ebms.errors.CheckpointError` names the keys
that differ. Evaluation settings (``eval.*``, ``vision.ood``, ...) and the sampler may be overridden.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

__all__ = ["Run", "load_run"]


@dataclass(frozen=True)
class Run:
    """A trained run, as :func:`load_run` returns it.

    Attributes:
        path: the run folder.
        config: the :class:`ebms.cli.config.Config` the run was trained with
            (plus the overrides given to :func:`load_run`).
        model: the trained model in eval mode.
        data: the data set (a toy distribution, a point cloud with ``train``/``test``
            tensors, binary images, or a structured task's data).
        sampler: the configured sampler, with its exact Langevin noise for
            continuous data (``None`` for conditional tasks, which have no
            unconditional samples).
        step: the training step of the checkpoint.
        checkpoint: the checkpoint's JSON record.
    """

    path: Path
    config: Any
    model: nn.Module
    data: Any
    sampler: Any
    step: int
    checkpoint: Path

    def sample(self, n: int, *, steps: int | None = None, seed: int | None = None) -> torch.Tensor:
        """``n`` chains from a uniform start over the data's space after ``steps`` sampler steps.

        The same draw as ``ebms sample --n n --steps steps --seed seed``
        (defaults: ``eval.sample_steps`` and a seed derived from ``run.seed``).

        Raises:
            ValueError: the run is a conditional task (no unconditional samples).
        """
        from ebms.cli.run import serving_task

        return serving_task(self.config).sample(self.config, self.model, self.data, n=n, steps=steps, seed=seed)


def load_run(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Run:
    """The trained model, data, sampler, config and step of a run folder made by ``ebms train``.

    Args:
        path: the run folder (``<run.out_dir>/<run.name>``).
        overrides: ``section.key=value`` strings applied to the folder's
            ``config.toml`` (e.g. ``["eval.sample_steps=100"]``); settings that
            change what was trained (role ``model`` in :data:`ebms.cli.run.KEY_ROLES`) are refused.

    Raises:
        ebms.errors.RunFolderError: no ``config.toml`` or no checkpoint in ``path``.
        ebms.errors.CheckpointError: no checkpoint verifies, or it was trained
            under other settings.
        ebms.errors.ConfigError: ``config.toml`` or an override is invalid.
    """
    from ebms.cli.run import open_run, serving_task

    cfg, model, data, ckpt = open_run(path, tuple(overrides))
    sampler = serving_task(cfg).sampler(cfg, data)  # as `ebms sample`: SGLD with its exact noise sqrt(2 step)
    return Run(path=Path(path), config=cfg, model=model, data=data, sampler=sampler, step=ckpt.step,
               checkpoint=ckpt.path)

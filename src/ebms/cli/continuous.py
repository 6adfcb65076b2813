"""Continuous data on the command line: the seeded 2-D toy sets and a user's file of points.

* :class:`ToyTask` (``data.name`` = a toy set; section ``[toy]``: ``scale``, ``noise``): batches
  are fresh draws, the test set ``data.n_test`` draws from a seed the training stream never uses.
* :class:`PointFileTask` (``data.path`` = a ``.npy``/``.safetensors``/``.csv``/``.txt`` file of
  ``(N, D)`` points, ``data.key``, ``data.test_fraction``, ``data.max_mb``): train on a seeded
  split, shuffled each epoch.

Chains start uniformly in a box holding the data. In 2-D, ``eval`` normalises the energy on an
``eval.resolution`` grid and prints the test NLL beside the true density's where the toy set has
one; in more dimensions it prints the mean test and train energies (an overfitting check, not a
likelihood): :func:`ebms.estimators.evaluation.grid_evaluation`. The grid's memory grows as
``eval.resolution^2``: a grid this machine cannot hold is refused before training (and before
``eval``), in one line naming ``eval.resolution``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from ebms.cli._config_rules import NONNEG, POS, Rule
from ebms.cli.build import build, build_sampler, building
from ebms.cli.config import Config, ConfigError
from ebms.cli.energy import EnergyTask
from ebms.cli.tasks import S, register
from ebms.data import TOY_NAMES, PointCloud, ToyDataset, get_toy, load_points
from ebms.data.binary_images import IMAGE_SETS
from ebms.estimators.evaluation import GridEvalReport, grid_evaluation
from ebms.samplers import Sampler
from ebms.spaces import Box

__all__ = ["TEST_SEED_OFFSET", "PointFileTask", "ToySettings", "ToyTask"]

#: seed offset for the held-out toy draws, so they never overlap the training stream.
TEST_SEED_OFFSET = 1_000_003
#: bytes one cell of the 2-D evaluation grid takes at the peak: its coordinates in float64 (meshgrid
#: and stacked), in float32, and its energy in float32 and float64.
GRID_CELL_BYTES = 2 * 8 * 2 + 2 * 4 + 4 + 8 + 8


class _ContinuousTask(EnergyTask[S]):
    """Points in ``R^D``: a box for chains, the grid evaluator in 2-D, scatter plots."""

    trained: ClassVar[tuple[str, ...]] = ("mlp",)  #: the kinds it trains (it serves ``rbm`` to refuse it)

    def check_kind(self, cfg: Config) -> None:
        if cfg.model.kind not in self.trained:
            raise ConfigError(f"model.kind: {cfg.model.kind!r} is a Bernoulli RBM for binary data (data.name = one of "
                              f"{', '.join(IMAGE_SETS)}); {self.describe(cfg)} is continuous; expected 'mlp'")

    def chain_space(self, data: ToyDataset | PointCloud) -> Box:
        """A box holding the data (the widest of its per-dimension bounds)."""
        lows, highs = zip(*data.bounds)
        return Box(data.dim, low=min(lows), high=max(highs))

    def sampler(self, cfg: Config, data: ToyDataset | PointCloud) -> Sampler:
        """The configured kernel in the data's box; SGLD with its exact Langevin noise
        (``noise_scale = sqrt(2 step_size)``), so the chains target ``exp(-E)`` rather than the
        colder law used for training negatives."""
        exact = replace(cfg, sampler=replace(cfg.sampler, noise_scale=None))
        return build_sampler(exact, self.chain_space(data))

    def eval_memory(self, cfg: Config, data: ToyDataset | PointCloud) -> list[tuple[str, str, float]]:
        """:meth:`EnergyTask.eval_memory` and, in 2-D, the grid: ``eval.resolution^2`` cells, each
        with its point (float64, then float32) and energy (float32, then float64)."""
        parts = super().eval_memory(cfg, data)
        if data.dim == 2:
            n = cfg.eval.resolution
            parts.append(("eval.resolution", f"evaluating on a grid of {n} x {n} cells", n * n * GRID_CELL_BYTES))
        return parts

    def report(self, cfg: Config, model: nn.Module, data: ToyDataset | PointCloud, step: int, *,
               use_ais: bool = False) -> GridEvalReport:
        """The grid evaluation (:func:`~ebms.estimators.evaluation.grid_evaluation`) of ``data.n_test``
        test points, after its memory was checked."""
        self.check_eval_memory(cfg, data)
        keys = ("eval.resolution", "data.n_test") if data.dim == 2 else ("data.n_test",)
        with building("evaluating the test points" + (" on the grid" if data.dim == 2 else ""), *keys,
                      device=cfg.run.device):
            return grid_evaluation(model, self.test_points(cfg, data), data.bounds, x_train=self.fit_points(data),
                                   resolution=cfg.eval.resolution, step=step, density=self.density(data))

    def density(self, data: Any) -> ToyDataset | None:
        """The data's own law, where its density is known (its NLL goes beside the model's)."""
        return None

    def plot(self, x: Tensor, data: ToyDataset | PointCloud, title: str, ax: Any = None) -> Any:
        """A scatter in 2-D (the first two coordinates above), a histogram in 1-D."""
        from ebms.viz import plot_points

        return plot_points(x, data.bounds, ax=ax, title=title)

    def more_plots(self, run_dir: Path, model: nn.Module, data: ToyDataset | PointCloud) -> list[Path]:
        """``energy.png`` for 2-D data: the energy and the normalised density."""
        from ebms.viz import plot_energy_and_density, save_figure

        if data.dim != 2:
            return []
        return [save_figure(plot_energy_and_density(model, data.bounds), run_dir / "energy.png")]


@dataclass
class ToySettings:
    """``[toy]``: the toy sets' own keys."""

    scale: float | None = None
    noise: float | None = None


class ToyTask(_ContinuousTask[ToySettings]):
    """The seeded 2-D toy sets of :func:`ebms.data.get_toy`."""

    data_names = tuple(sorted(TOY_NAMES))
    what = "a toy set"
    section = "toy"
    settings_type = ToySettings
    rules: ClassVar[dict[str, Rule]] = {"scale": POS, "noise": NONNEG}
    moved: ClassVar[dict[str, str]] = {"data.scale": "scale", "data.noise": "noise"}

    def load(self, cfg: Config) -> ToyDataset:
        s = self.settings(cfg)
        kw = {k: v for k, v in (("scale", s.scale), ("noise", s.noise)) if v is not None}
        return build("toy", s, get_toy, cfg.data.name, **kw)

    def fit_points(self, data: ToyDataset) -> Tensor:
        return data.sample(10000, generator=torch.Generator().manual_seed(12345))

    def test_points(self, cfg: Config, data: ToyDataset) -> Tensor:
        return data.sample(cfg.data.n_test, generator=torch.Generator().manual_seed(cfg.run.seed + TEST_SEED_OFFSET))

    def training_data(self, cfg: Config, data: ToyDataset) -> Any:
        def source(n: int, g: torch.Generator) -> Tensor:
            return data.sample(n, generator=g)

        return source

    def density(self, data: ToyDataset) -> ToyDataset:
        return data


class PointFileTask(_ContinuousTask[None]):
    """A user's file of ``(N, D)`` points (:func:`ebms.data.load_points`), selected by ``data.path``."""

    what = "points"

    def describe(self, cfg: Config) -> str:
        return f"data.path={cfg.data.path!r} (points)"

    def load(self, cfg: Config) -> PointCloud:
        d = cfg.data
        limit: dict[str, Any] = {} if d.max_mb is None else {"max_bytes": d.max_mb << 20}
        return build("data", d, load_points, d.path, test_fraction=d.test_fraction, seed=cfg.run.seed, key=d.key,
                     **limit)

    def data_label(self, cfg: Config) -> str:
        return str(cfg.data.path)


register(ToyTask())
register(PointFileTask(), path=True)

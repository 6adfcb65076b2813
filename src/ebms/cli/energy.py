"""The base of the unconditional tasks: learn an energy ``E(x)`` of the data itself.

Toy densities, point files and binary images share the energy network (``[model]``), the
sampler (``[sampler]``) and the objective (``[objective]``) tables of :mod:`ebms.cli.build`; an
:class:`EnergyTask` says only where chains live, which points fit an objective's auxiliary model
and which points are held out, and the rest (objective, samples, the ``samples.png`` plot) follows.
"""

from __future__ import annotations

import abc
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from ebms.cli.build import OBJECTIVES, build, build_mlp, build_sampler, resolve
from ebms.cli.config import Config
from ebms.cli.tasks import S, Task, check_batch_size
from ebms.samplers import Sampler
from ebms.spaces import Space

__all__ = ["SAMPLE_SEED_OFFSET", "EnergyTask"]

#: seed offset of the chains ``ebms sample`` and the plots draw (``--seed`` replaces it).
SAMPLE_SEED_OFFSET = 7


class EnergyTask(Task[S]):
    """A task that learns ``p(x) ∝ exp(-E(x))`` with a sampler-based, score or NCE objective."""

    #: an RBM is for binary data: a continuous task refuses it in :meth:`~ebms.cli.tasks.Task.check`
    #: with a message saying so.
    model_kinds: ClassVar[tuple[str, ...]] = ("mlp", "rbm")
    objective_kinds: ClassVar[tuple[str, ...]] = tuple(OBJECTIVES)
    #: show the sampler's progress bar while drawing samples (long discrete chains).
    show_progress: ClassVar[bool] = False

    @abc.abstractmethod
    def chain_space(self, data: Any) -> Space:
        """Where chains start: a replay buffer's restarts and the samples' uniform start."""

    def training_space(self, data: Any) -> Space | None:
        """The space the training kernel moves in (``None``: unconstrained)."""
        return None

    # The defaults below serve data sets with fixed splits (``data.train``, ``data.test``): point
    # files and binary images. A task that draws its data (the toys) overrides all three.
    def fit_points(self, data: Any) -> Tensor:
        """Points to fit auxiliary models on (NCE's noise): the training split."""
        return data.train

    def test_points(self, cfg: Config, data: Any) -> Tensor:
        """The held-out points: the test split."""
        return data.test

    def training_data(self, cfg: Config, data: Any) -> Any:
        """The training split, after checking ``train.batch_size`` against its size."""
        check_batch_size(cfg, data.train.shape[0], f"training points of {self.data_label(cfg)}")
        return data.train

    def data_label(self, cfg: Config) -> str:
        """How messages name the data set."""
        return str(cfg.data.name)

    def build_model(self, cfg: Config, data: Any) -> nn.Module:
        return build_mlp(cfg, (data.dim,))

    def build_objective(self, cfg: Config, data: Any) -> nn.Module:
        sampler = build_sampler(cfg, self.training_space(data))
        factory = resolve(OBJECTIVES, cfg.objective.kind, "objective.kind")
        return build("objective", cfg.objective, factory, cfg.objective, sampler, self.chain_space(data),
                     lambda: self.fit_points(data))

    def sampler(self, cfg: Config, data: Any) -> Sampler:
        return build_sampler(cfg, self.chain_space(data))

    def sample(self, cfg: Config, model: nn.Module, data: Any, *, n: int | None = None, steps: int | None = None,
               seed: int | None = None, start: Tensor | None = None) -> Tensor:
        """Chains of :meth:`sampler` from a uniform start in :meth:`chain_space` (or ``start``):
        ``n = eval.n_samples`` chains, ``eval.sample_steps`` steps, seeded ``run.seed + 7``."""
        n = cfg.eval.n_samples if n is None else n
        steps = cfg.eval.sample_steps if steps is None else steps
        g = torch.Generator().manual_seed(cfg.run.seed + SAMPLE_SEED_OFFSET if seed is None else seed)
        x0 = self.chain_space(data).random(n, generator=g) if start is None else start
        kw = {"progress": cfg.run.progress} if self.show_progress else {}
        return self.sampler(cfg, data).sample(model, x0, steps, generator=g, **kw)

    def write_plots(self, run_dir: Path, cfg: Config, model: nn.Module, data: Any) -> list[Path]:
        """``samples.png`` (test data beside model samples), then :meth:`more_plots`."""
        from ebms.viz import new_figure, save_figure

        samples = self.sample(cfg, model, data)
        ref = self.test_points(cfg, data)[: samples.shape[0]]
        fig = new_figure(figsize=(9, 4.5))
        ax_d, ax_m = fig.subplots(1, 2)
        self.plot(ref, data, f"test data ({data.name})", ax=ax_d)
        self.plot(samples, data, f"model samples ({cfg.sampler.kind})", ax=ax_m)
        save_figure(fig, run_dir / "samples.png")
        return [run_dir / "samples.png", *self.more_plots(run_dir, model, data)]

    def more_plots(self, run_dir: Path, model: nn.Module, data: Any) -> list[Path]:
        """Further plots of a trained model (none by default)."""
        return []

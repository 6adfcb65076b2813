"""The base of the unconditional tasks: learn an energy ``E(x)`` of the data itself.

Toy densities, point files and binary images share the energy network (``[model]``), the
sampler (``[sampler]``) and the objective (``[objective]``) tables of :mod:`ebms.cli.build`; an
:class:`EnergyTask` says only where chains live, which points fit an objective's auxiliary model
and which points are held out, and the rest (objective, samples, the ``samples.png`` plot) follows.

Before training, the memory the run will need is estimated from its settings and refused in one
line naming the key when this machine cannot give it (:func:`ebms.cli.build.check_memory`):
the weights with their gradients, Adam's two moments and the divergence guard's snapshot
(``model.hidden``), the replay buffer (``objective.buffer_size``), a batch's activations
(``train.batch_size``), NCE's noise (``objective.nu``), and what the evaluation after training
allocates (:meth:`EnergyTask.eval_memory`). ``eval`` and ``sample`` check their own part again.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from ebms.cli.build import (
    FLOAT_BYTES,
    OBJECTIVES,
    build,
    build_mlp,
    build_sampler,
    building,
    check_memory,
    check_replay_buffer,
    mlp_weights,
    resolve,
)
from ebms.cli.config import Config
from ebms.cli.tasks import S, Task, check_batch_size
from ebms.samplers import Sampler
from ebms.spaces import Space

__all__ = ["OBJECTIVE_MEMORY", "REPLAY_OBJECTIVES", "SAMPLE_SEED_OFFSET", "EnergyTask"]

#: seed offset of the chains ``ebms sample`` and the plots draw (``--seed`` replaces it).
SAMPLE_SEED_OFFSET = 7
#: copies of the weights training holds: weights, gradients, Adam's two moments, the guard's snapshot.
TRAINING_COPIES = 5
#: bytes per unit of a layer's activations in a step that also differentiates the energy in its
#: input (the forward values, their gradients and the double backward's), per float.
ACTIVATION_COPIES = 4
REPLAY_OBJECTIVES = ("pcd",)  #: objectives whose chains come from a replay buffer (a batch at most its slots)
#: what an objective allocates beyond the weights and a batch, ``(objective section, batch size, dimension,
#: a row's units) -> [(key, what, bytes)]``: PCD's replay buffer, NCE's noise samples.
OBJECTIVE_MEMORY: dict[str, Callable[[Any, int, int, int], list[tuple[str, str, float]]]] = {
    "pcd": lambda o, b, d, w: [("objective.buffer_size", "the replay buffer", o.buffer_size * d * FLOAT_BYTES)],
    "nce": lambda o, b, d, w: [("objective.nu", "the noise samples",
                                math.ceil(o.nu * b) * w * FLOAT_BYTES * ACTIVATION_COPIES)]}


class EnergyTask(Task[S]):
    """A task that learns ``p(x) ∝ exp(-E(x))`` with a sampler-based, score or NCE objective."""

    #: an RBM is for binary data: a continuous task takes the name to refuse it in :meth:`check_kind`
    #: with a message saying so.
    model_kinds: ClassVar[tuple[str, ...]] = ("mlp", "rbm")
    objective_kinds: ClassVar[tuple[str, ...]] = tuple(OBJECTIVES)
    #: show the sampler's progress bar while drawing samples (long discrete chains).
    show_progress: ClassVar[bool] = False
    size_key: ClassVar[str] = "model.hidden"  #: the key that sizes the model (the MLP energy's widths)

    def check(self, cfg: Config) -> None:
        """:meth:`check_kind`, then a replay buffer that can give each batch its chains."""
        self.check_kind(cfg)
        if cfg.objective.kind in REPLAY_OBJECTIVES:
            check_replay_buffer(cfg)

    def check_kind(self, cfg: Config) -> None:
        """This kind's combinations of the shared keys."""

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

    def sizes(self, cfg: Config) -> dict[str, tuple[str, ...]]:
        """The keys that size what training and evaluation allocate (:func:`ebms.cli.build.size_keys`)."""
        ais = ("eval.ais_chains",) if self.supports_ais else ()
        return {"train": (self.size_key, "train.batch_size", "objective.buffer_size"),
                "eval": ("data.n_test", "eval.n_samples", *ais)}

    def _width(self, cfg: Config, data: Any) -> int:
        """Units of one example's activations: its inputs and the model's hidden units."""
        return int(data.dim) + sum(cfg.model.hidden)

    def weights(self, cfg: Config, data: Any) -> int:
        """The model's number of weights (the MLP's; sized by :attr:`size_key`)."""
        return mlp_weights(int(data.dim), cfg.model.hidden)

    def training_memory(self, cfg: Config, data: Any) -> list[tuple[str, str, float]]:
        """The estimate of what training allocates, ``(key, what, bytes)`` per part."""
        o, b, width = cfg.objective, cfg.train.batch_size, self._width(cfg, data)
        objective = OBJECTIVE_MEMORY.get(o.kind, lambda *_: [])(o, b, int(data.dim), width)
        return [(self.size_key, "weights, gradients, Adam's moments and a snapshot",
                 self.weights(cfg, data) * FLOAT_BYTES * TRAINING_COPIES),
                ("train.batch_size", "a step's activations (data and negatives)",
                 2 * b * width * FLOAT_BYTES * ACTIVATION_COPIES), *objective]

    def eval_memory(self, cfg: Config, data: Any) -> list[tuple[str, str, float]]:
        """The estimate of what the evaluation allocates, ``(key, what it does, bytes)`` per part; the
        parts are allocated one after the other (the test points, then the chains of the plots)."""
        n, m = cfg.data.n_test, cfg.eval.n_samples
        split = getattr(data, "test", None)  # a fixed test split caps data.n_test; the toys draw n_test points
        n = min(n, int(split.shape[0])) if isinstance(split, Tensor) else n
        return [("data.n_test", f"evaluating {n} test points", n * (int(data.dim) + 4) * 8),
                ("eval.n_samples", f"drawing {m} samples", m * self._width(cfg, data) * FLOAT_BYTES * ACTIVATION_COPIES)]

    def check_eval_memory(self, cfg: Config, data: Any) -> None:
        """Refuse, in one line naming the key, an evaluation part this machine cannot hold."""
        for key, doing, nbytes in self.eval_memory(cfg, data):
            check_memory([(key, "", nbytes)], doing, device=cfg.run.device)

    def build_objective(self, cfg: Config, data: Any) -> nn.Module:
        """The configured objective, after the memory of training and of the evaluation that
        follows it was checked (``ebms train`` alone builds an objective)."""
        check_memory(self.training_memory(cfg, data), "training", device=cfg.run.device)
        self.check_eval_memory(cfg, data)
        sampler = build_sampler(cfg, self.training_space(data))
        factory = resolve(OBJECTIVES, cfg.objective.kind, "objective.kind")
        with building(f"building the {cfg.objective.kind} objective", "objective.buffer_size", device=cfg.run.device):
            return build("objective", cfg.objective, factory, cfg.objective, sampler, self.chain_space(data),
                         lambda: self.fit_points(data))

    def sampler(self, cfg: Config, data: Any) -> Sampler:
        return build_sampler(cfg, self.chain_space(data))

    def sample(self, cfg: Config, model: nn.Module, data: Any, *, n: int | None = None, steps: int | None = None,
               seed: int | None = None, start: Tensor | None = None) -> Tensor:
        """Chains of :meth:`sampler` from a uniform start in :meth:`chain_space` (or ``start``):
        ``n = eval.n_samples`` chains, ``eval.sample_steps`` steps, seeded ``run.seed + 7``."""
        key = "eval.n_samples" if n is None else "--n"
        n = cfg.eval.n_samples if n is None else n
        steps = cfg.eval.sample_steps if steps is None else steps
        check_memory([(key, "", n * self._width(cfg, data) * FLOAT_BYTES * ACTIVATION_COPIES)],
                     f"drawing {n} samples", device=cfg.run.device)
        g = torch.Generator().manual_seed(cfg.run.seed + SAMPLE_SEED_OFFSET if seed is None else seed)
        with building(f"drawing {n} samples", key, device=cfg.run.device):
            x0 = self.chain_space(data).random(n, generator=g) if start is None else start
            progress = bool(cfg.run.progress) if self.show_progress else False
            return self.sampler(cfg, data).sample(model, x0, steps, generator=g, progress=progress)

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

"""Binary images on the command line: binarised MNIST, Fashion-MNIST and scikit-learn digits.

``data.name`` picks the set (:func:`ebms.data.binary_images.load_binary_images`); the section
``[images]`` holds the keys only these sets use: ``binarize`` (``stochastic``/``threshold``) and
``binarize_seed`` name the bits and are written to the run's config, so a run can always be
regenerated; ``download`` allows fetching MNIST with checksum checks; ``limit`` keeps the first N
training images; ``rbm_hidden`` is the hidden layer of ``model.kind = "rbm"``. ``data.root``,
``data.test_fraction`` (digits) and ``data.max_mb`` are shared keys.

``model.kind``: ``mlp`` (a deep binary EBM, ``model.hidden``) or ``rbm``
(:class:`~ebms.models.BernoulliRBM`, visible biases started at the data's log-odds). Chains use
the discrete kernels of ``sampler.kind``. ``eval`` reports the test log-likelihood with an exact
log Z where one is feasible (:func:`ebms.estimators.evaluation.exact_log_z`) and by AIS along
:func:`~ebms.estimators.evaluation.ais_path` with ``ebms eval --ais``
(:func:`~ebms.estimators.evaluation.binary_log_likelihood`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, cast

import torch
from torch import Tensor, nn

from ebms.cli._config_rules import COUNT, SEED, Rule
from ebms.cli.build import build, build_sampler
from ebms.cli.config import Config, ConfigError, ModelConfig
from ebms.cli.energy import EnergyTask
from ebms.cli.tasks import register
from ebms.data.binary_images import IMAGE_SETS, BinaryImages, load_binary_images
from ebms.distributions import IndependentBernoulli
from ebms.estimators.evaluation import DiscreteEvalReport, ais_path, ais_schedule, binary_log_likelihood, exact_log_z
from ebms.models import BernoulliRBM
from ebms.models.rbm import marginal_logits
from ebms.spaces import Binary

__all__ = ["ImagesSettings", "ImagesTask", "RBMImagesTask"]

LAYERED_SAMPLERS = ("block_gibbs",)  #: the kernels that need a model with layer conditionals (an RBM)
#: seed offsets of the AIS chains and of the model chains that start reverse AIS.
AIS_SEED_OFFSET, REVERSE_SEED_OFFSET = 11, 13


@dataclass
class ImagesSettings:
    """``[images]``: the binary image sets' own keys."""

    binarize: str = "stochastic"
    binarize_seed: int = 0
    download: bool = False
    limit: int | None = None
    rbm_hidden: int = 16


class ImagesTask(EnergyTask[ImagesSettings]):
    """An energy of binary images (module docstring): ``model.kind = "mlp"`` (and :class:`RBMImagesTask`'s base)."""

    data_names = IMAGE_SETS
    what = "a binary image set"
    section = "images"
    settings_type = ImagesSettings
    rules: ClassVar[dict[str, Rule]] = {"binarize": Rule(choices=("stochastic", "threshold")), "binarize_seed": SEED,
                                        "download": Rule(), "limit": COUNT, "rbm_hidden": COUNT}
    moved: ClassVar[dict[str, str]] = {"data.binarize": "binarize", "data.binarize_seed": "binarize_seed",
                                       "data.download": "download", "data.limit": "limit"}
    model_kinds = ("mlp",)
    show_progress = True
    supports_ais = True

    def check_kind(self, cfg: Config) -> None:
        if cfg.sampler.kind in LAYERED_SAMPLERS:
            raise ConfigError(
                f"sampler.kind: 'block_gibbs' needs a model with layer conditionals (model.kind = 'rbm') or a "
                f"colouring; model.kind = {cfg.model.kind!r} has neither; expected one of gibbs, gwg, mh"
            )

    def load(self, cfg: Config) -> BinaryImages:
        s, d = self.settings(cfg), cfg.data
        return build("images", s, load_binary_images, d.name, binarize=s.binarize, binarize_seed=s.binarize_seed,
                     test_fraction=d.test_fraction, split_seed=cfg.run.seed, root=d.root, download=s.download,
                     limit=s.limit, max_bytes=None if d.max_mb is None else d.max_mb << 20)

    def chain_space(self, data: BinaryImages) -> Binary:
        return data.space

    def training_space(self, data: BinaryImages) -> Binary:
        return data.space

    def report(self, cfg: Config, model: nn.Module, data: BinaryImages, step: int, *,
               use_ais: bool = False) -> DiscreteEvalReport:
        """Test log-likelihood of ``data.n_test`` test images: exact log Z when feasible, AIS when
        asked for (``eval.ais_chains``, ``eval.ais_temperatures``; with ``eval.reverse_ais`` a
        reverse-AIS bracket from model chains started at test images)."""
        x_test = data.test[: cfg.data.n_test]
        path: Any = None
        reverse_from = None
        if use_ais:  # an RBM's own path (hidden units summed out) starts at the data's log-odds
            path = ais_path(model, IndependentBernoulli.from_data(data.train), build_sampler(cfg, data.space),
                            own_path_args=(marginal_logits(data.train),))
            if cfg.eval.reverse_ais:
                n_rev = min(cfg.eval.ais_chains, x_test.shape[0])
                with torch.no_grad():
                    reverse_from = self.sample(cfg, model, data, n=n_rev, start=x_test[:n_rev],
                                               seed=cfg.run.seed + REVERSE_SEED_OFFSET)
        return binary_log_likelihood(
            model, x_test, step=step, exact=exact_log_z(model, data.space, progress=cfg.run.progress), path=path,
            betas=ais_schedule(cfg.eval.ais_temperatures), chains=cfg.eval.ais_chains, reverse_from=reverse_from,
            generator=torch.Generator().manual_seed(cfg.run.seed + AIS_SEED_OFFSET), progress=cfg.run.progress)

    def plot(self, x: Tensor, data: BinaryImages, title: str, ax: Any = None) -> Any:
        """The first 100 images of ``x`` in a 10-column grid."""
        from ebms.viz import image_grid

        k = min(x.shape[0], 100)
        return image_grid(x[:k].reshape(k, 1, *data.image_shape), ax=ax, title=title, nrow=10)


class RBMImagesTask(ImagesTask):
    """``model.kind = "rbm"``: a :class:`~ebms.models.BernoulliRBM` of ``images.rbm_hidden`` units."""

    model_kinds = ("rbm",)
    size_key = "images.rbm_hidden"

    def check_kind(self, cfg: Config) -> None:
        if cfg.model.hidden != ModelConfig().hidden:
            raise ConfigError(f"model.hidden: the MLP's hidden widths; an RBM's hidden units are images.rbm_hidden "
                              f"(renamed); got model.hidden={cfg.model.hidden}")

    def build_model(self, cfg: Config, data: BinaryImages) -> nn.Module:
        rbm = build("images", self.settings(cfg), BernoulliRBM, data.dim, self.settings(cfg).rbm_hidden)
        rbm.init_visible_bias_from_data(data.train)  # log-odds of the pixel marginals (Hinton's practical guide)
        return cast(nn.Module, rbm)

    def _width(self, cfg: Config, data: BinaryImages) -> int:
        return int(data.dim) + int(self.settings(cfg).rbm_hidden)

    def weights(self, cfg: Config, data: BinaryImages) -> int:  # D H + D + H
        d, h = int(data.dim), int(self.settings(cfg).rbm_hidden)
        return d * h + d + h


register(ImagesTask())
register(RBMImagesTask())

"""Private: the TRF kinds of the language task (:mod:`ebms.cli.language`): ``trf`` (discrete n-gram
features) and ``trf-cnn`` / ``trf-bilstm`` (neural energies), trained by AugSA (``ml``), NCE against a
KN n-gram (``nce``) or dynamic NCE against an LSTM (``dnce``); see the language module's docstring
for their keys.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from ebms.cli._language_data import LanguageData
from ebms.cli._language_eval import trf_report
from ebms.cli.config import Config, ConfigError
from ebms.cli.language import _NET, NOISE_SEED_OFFSET, LanguageTask, _ngram
from ebms.cli.tasks import register
from ebms.data.text import unigram_probs
from ebms.fit import start_from_ngram
from ebms.models.lm import LSTMLM
from ebms.models.trf import TRF, DiscreteFeatures, Hidden2Scalar, feature_templates
from ebms.models.trf.moments import feature_moments
from ebms.models.trf.templates import source_cutoffs
from ebms.objectives import SAGain
from ebms.objectives.trf_augsa import AugSA
from ebms.objectives.trf_nce import TRFNCE, DynamicNCE
from ebms.samplers.trans_dimensional import TransDimensional

__all__ = ["NeuralTRFTask", "TRFTask"]


class NeuralTRFTask(LanguageTask):
    """``trf-cnn``, ``trf-bilstm``: a :class:`~ebms.models.trf.TRF` on a neural energy
    (:class:`~ebms.models.trf.Hidden2Scalar`), trained by AugSA (``ml``), NCE or dynamic NCE."""

    model_kinds: ClassVar[tuple[str, ...]] = ("trf-cnn", "trf-bilstm")
    trained_by = ("ml", "nce", "dnce")
    keys: ClassVar[tuple[str, ...]] = (*_NET, "trials", "logz_samples")
    objective_keys: ClassVar[dict[str, tuple[str, ...]]] = {
        "ml": ("chains", "chain_groups", "workers", "zeta_tc", "zeta_beta", "zeta_t0"),
        "nce": ("noise_order", "smoothing", "discounts"), "dnce": ("noise_hidden",)}
    objective_note = " (a TRF)"
    positions = sampled = True
    no_ais = ""
    #: the energy of each kind.
    energies: ClassVar[dict[str, Callable[..., nn.Module]]] = {"trf-cnn": Hidden2Scalar.cnn,
                                                               "trf-bilstm": Hidden2Scalar.bilstm}

    def energy(self, cfg: Config, data: LanguageData) -> nn.Module:
        s = self.settings(cfg)
        return self.energies[cfg.model.kind](len(data.vocab), s.embedding_dim, s.hidden, layers=s.layers,
                                             dropout=s.dropout)

    def build_model(self, cfg: Config, data: LanguageData) -> TRF:
        # add-one over lengths 1..L: a held-out length unseen in training keeps a probability > 0
        return TRF.from_corpus(self.energy(cfg, data), data.train, len(data.vocab), max_length=data.max_length,
                               smoothing=1.0)

    def kernel(self, cfg: Config, data: LanguageData, *, jump: bool = True) -> TransDimensional:
        """The trans-dimensional sampler of the TRF runs (unigram proposals, class proposals with classes)."""
        s = self.settings(cfg)
        return TransDimensional(token_probs=unigram_probs(data.train, len(data.vocab)),
                                classes=self.classes(cfg, data), trials=s.trials, sweeps=cfg.sampler.sweeps,
                                jump=jump, groups=s.chain_groups, workers=s.workers, scan=s.scan)

    def build_objective(self, cfg: Config, data: LanguageData) -> nn.Module:
        return {"ml": self._augsa, "nce": self._nce, "dnce": self._dnce}[cfg.objective.kind](cfg, data)

    def _augsa(self, cfg: Config, data: LanguageData) -> nn.Module:
        s = self.settings(cfg)
        return AugSA(self.kernel(cfg, data), chains=s.chains, zeta_gain=SAGain(s.zeta_tc, s.zeta_beta, s.zeta_t0))

    def _nce(self, cfg: Config, data: LanguageData) -> nn.Module:
        s = self.settings(cfg)
        return TRFNCE(_ngram(data, s.noise_order, s.smoothing, "noise_order", s.discounts), nu=cfg.objective.nu)

    def _dnce(self, cfg: Config, data: LanguageData) -> nn.Module:
        s = self.settings(cfg)
        V = len(data.vocab)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.run.seed + NOISE_SEED_OFFSET)
            lstm = LSTMLM(V, embedding_dim=s.noise_hidden, hidden_size=s.noise_hidden, num_layers=1)
        lstm.init_unigram(unigram_probs(data.train, V, end=True))  # a zero bias draws ~V tokens before an end
        return DynamicNCE(lstm, nu=cfg.objective.nu)

    def evaluate(self, cfg: Config, model: nn.Module, data: LanguageData, step: int, *, use_ais: bool) -> Any:
        if "test" not in data.held_out:
            raise ConfigError("language.test_path: a TRF is evaluated on a test set; set language.test_path=FILE")
        return trf_report(cfg, model, data, step, kernel=self.kernel(cfg, data, jump=False), use_ais=use_ais)

    def draw(self, cfg: Config, model: Any, data: LanguageData, n: int, steps: int | None,
             g: torch.Generator) -> Tensor:
        """``steps`` trans-dimensional steps of the TRF from training sentences."""
        with torch.no_grad():
            start = data.train[torch.arange(n) % data.size].canonical().pad_to(model.max_length)
            x = self.kernel(cfg, data).sample(model, start, cfg.eval.sample_steps if steps is None else steps,
                                              generator=g)
        return x.canonical().tokens


class TRFTask(NeuralTRFTask):
    """``trf``: a :class:`~ebms.models.trf.TRF` on discrete n-gram features (module docstring), with
    word classes, the source's feature cutoffs, a KN start and variance-scaled SGD as options."""

    model_kinds = ("trf",)
    #: the colored sweep needs the features' bounded interaction range (a neural energy has none)
    objective_keys = {**NeuralTRFTask.objective_keys, "ml": (*NeuralTRFTask.objective_keys["ml"], "scan")}
    keys = ("order", "features", "feature_cutoffs", "feature_boundaries", "trf_init", "classes", "trials",
            "logz_samples", "feature_scaling")
    scales_features = True

    def check_kind(self, cfg: Config) -> None:
        super().check_kind(cfg)
        s = self.settings(cfg)
        class_groups = [g for g in s.features if g.startswith("c")]
        if class_groups and s.classes == 0:
            raise ConfigError(f"language.features: the class templates {', '.join(class_groups)} need word "
                              f"classes; set language.classes >= 1 or drop them")

    def reads(self, cfg: Config) -> set[str]:
        s = self.settings(cfg)
        return {*super().reads(cfg), *(("step_clip",) if s.feature_scaling else ()),
                *(("smoothing", "discounts") if s.trf_init == "kn" else ())}

    def class_count(self, cfg: Config) -> int:
        return int(self.settings(cfg).classes)

    def energy(self, cfg: Config, data: LanguageData) -> nn.Module:
        s, classes = self.settings(cfg), self.classes(cfg, data)
        groups = s.features or [g for g in ("w", "c", "ws", "cs", "wsh", "csh") if classes is not None or g[0] == "w"]
        templates = feature_templates(groups, s.order)
        cuts = source_cutoffs(templates) if s.feature_cutoffs == "source" else 1
        energy = DiscreteFeatures.fit(data.train, len(data.vocab), templates, classes=classes, eos=True,
                                      boundaries=s.feature_boundaries, min_count=cuts)
        data.cache["features"] = energy  # build_optimizer's feature variances
        return energy

    def build_model(self, cfg: Config, data: LanguageData) -> TRF:
        s, trf = self.settings(cfg), super().build_model(cfg, data)
        if s.trf_init == "kn" and data.stored is None:  # KN start of a new run (a stored one loads its checkpoint)
            start_from_ngram(trf, _ngram(data, s.order, s.smoothing, "order", s.discounts),
                             generator=torch.Generator().manual_seed(cfg.run.seed + NOISE_SEED_OFFSET))
        return trf

    def _augsa(self, cfg: Config, data: LanguageData) -> nn.Module:
        s = self.settings(cfg)  # the source's update (feature_scaling): the whole training set's data term
        return AugSA(self.kernel(cfg, data), chains=s.chains, zeta_gain=SAGain(s.zeta_tc, s.zeta_beta, s.zeta_t0),
                     data_mean=self._moments(data)[0] if s.feature_scaling else None)

    @staticmethod
    def _moments(data: LanguageData) -> tuple[Tensor, Tensor]:
        """Mean and within-length variance of the discrete TRF's features on the training sentences (once)."""
        if "moments" not in data.cache:
            data.cache["moments"] = feature_moments(data.cache["features"], data.train)
        return data.cache["moments"]  # type: ignore[no-any-return]

    def build_optimizer(self, cfg: Config, data: LanguageData) -> Callable[[list[dict[str, Any]]], torch.optim.Optimizer] | None:
        """With ``language.feature_scaling``: :class:`~ebms.train.ScaledSGD` on the discrete TRF's weights,
        each feature's step divided by its within-length variance on the training sentences
        (:func:`~ebms.models.trf.feature_moments`), L2 ``train.weight_decay`` (added to the gradient and
        to the variance, as in the source), steps clipped to ``language.step_clip``."""
        s = self.settings(cfg)
        if not s.feature_scaling:
            return None
        feats, (_, variance), t = data.cache["features"], self._moments(data), cfg.train

        def make(groups: list[dict[str, Any]]) -> torch.optim.Optimizer:
            from ebms.train import ScaledSGD

            return ScaledSGD(groups, lr=t.lr, scales={feats.weight: variance}, l2=t.weight_decay, clip=s.step_clip)

        return make


register(TRFTask())
register(NeuralTRFTask())

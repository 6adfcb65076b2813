"""Private: the TRF kinds of the language task (:mod:`ebms.cli.language`): ``trf`` (discrete n-gram
features) and ``trf-cnn`` / ``trf-bilstm`` (neural energies), trained by AugSA (``ml``), NCE against a
KN n-gram (``nce``) or dynamic NCE against an LSTM (``dnce``); their keys are the ``[trf]`` section
(:class:`TRFSettings`; see the language module's docstring), and a KN n-gram they fit (``trf``'s KN
start, the ``nce`` noise) takes ``[ngram]``'s smoothing and discounts at the TRF's own orders
(``trf.order``, ``trf.noise_order``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

import torch
from torch import Tensor, nn

from ebms.cli._config_rules import COUNT, NONNEG, POS, Rule
from ebms.cli._language_data import LanguageData
from ebms.cli._language_eval import trf_report
from ebms.cli.config import Config, ConfigError
from ebms.cli.language import (
    FEATURE_BOUNDARIES,
    FEATURE_CUTOFFS,
    NET_RULES,
    NGRAM,
    NOISE_SEED_OFFSET,
    LanguageTask,
    _ngram,
    net_keys,
)
from ebms.cli.tasks import Section, register
from ebms.data.text import unigram_probs
from ebms.fit import start_from_ngram
from ebms.models.lm import LSTMLM
from ebms.models.trf import TEMPLATE_GROUPS, TRF, DiscreteFeatures, Hidden2Scalar, feature_templates
from ebms.models.trf.moments import feature_moments
from ebms.models.trf.templates import source_cutoffs
from ebms.objectives import SAGain
from ebms.objectives.trf_augsa import AugSA
from ebms.objectives.trf_nce import TRFNCE, DynamicNCE
from ebms.samplers.trans_dimensional import SCANS, TransDimensional

__all__ = ["TRF_SECTION", "NeuralTRFTask", "TRFSettings", "TRFTask"]


@dataclass
class TRFSettings:
    """``[trf]``: the keys of the TRF kinds (``trf``, ``trf-cnn``, ``trf-bilstm``): the discrete features
    (``trf``), the neural energy's sizes (``trf-cnn``, ``trf-bilstm``), AugSA's chains and gain (``ml``), the
    noise of ``nce`` (a KN n-gram of ``noise_order``) and ``dnce`` (an LSTM of ``noise_hidden`` units), and
    the normaliser estimate of ``eval`` (``logz_samples``)."""

    order: int = 3
    features: list[str] = field(default_factory=list)
    feature_cutoffs: str = "none"
    feature_boundaries: str = "all"
    trf_init: str = "zero"
    classes: int = 0
    embedding_dim: int = 256
    hidden: int = 256
    layers: int = 2
    dropout: float = 0.0
    chains: int = 100
    chain_groups: int = 1
    workers: int = 1
    scan: str = "sequential"
    trials: int = 1
    noise_order: int = 2
    noise_hidden: int = 200
    logz_samples: int = 1000
    feature_scaling: bool = False
    step_clip: float = 1.0
    zeta_tc: float = 0.0
    zeta_beta: float = 0.6
    zeta_t0: int = 500


TRF_SECTION = Section(TRFSettings, {
    "order": COUNT,
    "features": Rule(text=f"a list of TRF feature template groups ({', '.join(TEMPLATE_GROUPS)}); empty: the "
                          "default ones", check=lambda v: all(g in TEMPLATE_GROUPS for g in v)),
    "feature_cutoffs": Rule(choices=FEATURE_CUTOFFS), "feature_boundaries": Rule(choices=FEATURE_BOUNDARIES),
    "trf_init": Rule(choices=("zero", "kn")), "classes": NONNEG,
    **{k: r for k, r in NET_RULES.items() if k != "heads"},
    "chains": COUNT, "chain_groups": COUNT, "workers": COUNT, "scan": Rule(choices=SCANS),
    "trials": COUNT, "noise_order": COUNT, "noise_hidden": COUNT, "logz_samples": Rule(low=2),
    "feature_scaling": Rule(), "step_clip": POS, "zeta_tc": NONNEG, "zeta_beta": Rule(low=0, high=1),
    "zeta_t0": NONNEG})


def trf_settings(cfg: Config) -> TRFSettings:
    """The ``[trf]`` section of ``cfg``."""
    return cast(TRFSettings, cfg.sections["trf"])


class NeuralTRFTask(LanguageTask):
    """``trf-cnn``, ``trf-bilstm``: a :class:`~ebms.models.trf.TRF` on a neural energy
    (:class:`~ebms.models.trf.Hidden2Scalar`), trained by AugSA (``ml``), NCE or dynamic NCE."""

    model_kinds: ClassVar[tuple[str, ...]] = ("trf-cnn", "trf-bilstm")
    trained_by = ("ml", "nce", "dnce")
    more_sections: ClassVar[dict[str, Section]] = {"trf": TRF_SECTION, "ngram": NGRAM}
    keys: ClassVar[tuple[str, ...]] = (*net_keys("trf"), "trf.trials", "trf.logz_samples")
    objective_keys: ClassVar[dict[str, tuple[str, ...]]] = {
        "ml": ("trf.chains", "trf.chain_groups", "trf.workers", "trf.zeta_tc", "trf.zeta_beta", "trf.zeta_t0"),
        "nce": ("trf.noise_order", "ngram.smoothing", "ngram.discounts"), "dnce": ("trf.noise_hidden",)}
    objective_note = " (a TRF)"
    positions = sampled = True
    no_ais = ""
    #: the energy of each kind.
    energies: ClassVar[dict[str, Callable[..., nn.Module]]] = {"trf-cnn": Hidden2Scalar.cnn,
                                                               "trf-bilstm": Hidden2Scalar.bilstm}

    def check_kind(self, cfg: Config) -> None:
        super().check_kind(cfg)
        s, kind, obj = trf_settings(cfg), cfg.model.kind, cfg.objective.kind
        if s.feature_scaling and (not self.scales_features or cfg.train.optimizer != "sgd" or cfg.train.momentum != 0):
            raise ConfigError(f"trf.feature_scaling: the source's variance-scaled steps are for the discrete TRF "
                              f"with plain SGD; expected model.kind='trf', train.optimizer='sgd' and train.momentum=0; "
                              f"got model.kind={kind!r}, train.optimizer={cfg.train.optimizer!r}, "
                              f"train.momentum={cfg.train.momentum}")
        if s.trf_init == "kn" and (obj != "ml" or (s.features and "w" not in s.features)):
            raise ConfigError(f"trf.trf_init: 'kn' starts AugSA ('ml') at a backoff LM's word n-gram weights; got "
                              f"objective.kind={obj!r}, features {s.features}: use 'ml' and 'w', or trf_init='zero'")
        if s.workers > s.chain_groups:  # each process steps whole blocks of chains
            raise ConfigError(f"trf.workers: expected at most trf.chain_groups={s.chain_groups} processes; "
                              f"got {s.workers} (raise chain_groups, which changes the chains' random streams)")

    def ngram_order(self, cfg: Config, read: set[str]) -> tuple[int, str]:
        """The noise's order (``nce``: ``trf.noise_order``), else the KN start's (``trf.order``)."""
        s = trf_settings(cfg)
        return (s.noise_order, "trf.noise_order") if "trf.noise_order" in read else (s.order, "trf.order")

    def energy(self, cfg: Config, data: LanguageData) -> nn.Module:
        s = trf_settings(cfg)
        return self.energies[cfg.model.kind](len(data.vocab), s.embedding_dim, s.hidden, layers=s.layers,
                                             dropout=s.dropout)

    def build_model(self, cfg: Config, data: LanguageData) -> TRF:
        # add-one over lengths 1..L: a held-out length unseen in training keeps a probability > 0
        return TRF.from_corpus(self.energy(cfg, data), data.train, len(data.vocab), max_length=data.max_length,
                               smoothing=1.0)

    def kernel(self, cfg: Config, data: LanguageData, *, jump: bool = True) -> TransDimensional:
        """The trans-dimensional sampler of the TRF runs (unigram proposals, class proposals with classes)."""
        s = trf_settings(cfg)
        return TransDimensional(token_probs=unigram_probs(data.train, len(data.vocab)),
                                classes=self.classes(cfg, data), trials=s.trials, sweeps=cfg.sampler.sweeps,
                                jump=jump, groups=s.chain_groups, workers=s.workers, scan=s.scan)

    def build_objective(self, cfg: Config, data: LanguageData) -> nn.Module:
        return {"ml": self._augsa, "nce": self._nce, "dnce": self._dnce}[cfg.objective.kind](cfg, data)

    def _augsa(self, cfg: Config, data: LanguageData) -> nn.Module:
        s = trf_settings(cfg)
        return AugSA(self.kernel(cfg, data), chains=s.chains, zeta_gain=SAGain(s.zeta_tc, s.zeta_beta, s.zeta_t0))

    def _nce(self, cfg: Config, data: LanguageData) -> nn.Module:
        order = trf_settings(cfg).noise_order
        return TRFNCE(_ngram(data, order, "trf.noise_order", cfg.sections["ngram"]), nu=cfg.objective.nu)

    def _dnce(self, cfg: Config, data: LanguageData) -> nn.Module:
        lstm = LSTMLM.unigram_noise(data.train, len(data.vocab), trf_settings(cfg).noise_hidden,
                                    seed=cfg.run.seed + NOISE_SEED_OFFSET)
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
    objective_keys = {**NeuralTRFTask.objective_keys, "ml": (*NeuralTRFTask.objective_keys["ml"], "trf.scan")}
    keys = ("trf.order", "trf.features", "trf.feature_cutoffs", "trf.feature_boundaries", "trf.trf_init",
            "trf.classes", "trf.trials", "trf.logz_samples", "trf.feature_scaling")
    optional_keys: ClassVar[dict[str, str]] = {"trf.step_clip": "trf.feature_scaling = true",
                                               "ngram.smoothing": "model.kind = trf with trf.trf_init = 'kn'",
                                               "ngram.discounts": "model.kind = trf with trf.trf_init = 'kn'"}
    scales_features = True

    def check_kind(self, cfg: Config) -> None:
        super().check_kind(cfg)
        s = trf_settings(cfg)
        class_groups = [g for g in s.features if g.startswith("c")]
        if class_groups and s.classes == 0:
            raise ConfigError(f"trf.features: the class templates {', '.join(class_groups)} need word "
                              f"classes; set trf.classes >= 1 or drop them")

    def reads(self, cfg: Config) -> set[str]:
        s = trf_settings(cfg)
        return {*super().reads(cfg), *(("trf.step_clip",) if s.feature_scaling else ()),
                *(("ngram.smoothing", "ngram.discounts") if s.trf_init == "kn" else ())}

    def class_count(self, cfg: Config) -> int:
        return int(trf_settings(cfg).classes)

    def energy(self, cfg: Config, data: LanguageData) -> nn.Module:
        s, classes = trf_settings(cfg), self.classes(cfg, data)
        groups = s.features or [g for g in ("w", "c", "ws", "cs", "wsh", "csh") if classes is not None or g[0] == "w"]
        templates = feature_templates(groups, s.order)
        cuts = source_cutoffs(templates) if s.feature_cutoffs == "source" else 1
        energy = DiscreteFeatures.fit(data.train, len(data.vocab), templates, classes=classes, eos=True,
                                      boundaries=s.feature_boundaries, min_count=cuts)
        data.cache["features"] = energy  # build_optimizer's feature variances
        return energy

    def build_model(self, cfg: Config, data: LanguageData) -> TRF:
        s, trf = trf_settings(cfg), super().build_model(cfg, data)
        if s.trf_init == "kn" and data.stored is None:  # KN start of a new run (a stored one loads its checkpoint)
            start_from_ngram(trf, _ngram(data, s.order, "trf.order", cfg.sections["ngram"]),
                             generator=torch.Generator().manual_seed(cfg.run.seed + NOISE_SEED_OFFSET))
        return trf

    def _augsa(self, cfg: Config, data: LanguageData) -> nn.Module:
        s = trf_settings(cfg)  # the source's update (feature_scaling): the whole training set's data term
        return AugSA(self.kernel(cfg, data), chains=s.chains, zeta_gain=SAGain(s.zeta_tc, s.zeta_beta, s.zeta_t0),
                     data_mean=self._moments(data)[0] if s.feature_scaling else None)

    @staticmethod
    def _moments(data: LanguageData) -> tuple[Tensor, Tensor]:
        """Mean and within-length variance of the discrete TRF's features on the training sentences (once)."""
        if "moments" not in data.cache:
            data.cache["moments"] = feature_moments(data.cache["features"], data.train)
        return data.cache["moments"]  # type: ignore[no-any-return]

    def build_optimizer(self, cfg: Config, data: LanguageData) -> Callable[[list[dict[str, Any]]], torch.optim.Optimizer] | None:
        """With ``trf.feature_scaling``: :class:`~ebms.train.ScaledSGD` on the discrete TRF's weights,
        each feature's step divided by its within-length variance on the training sentences
        (:func:`~ebms.models.trf.feature_moments`), L2 ``train.weight_decay`` (added to the gradient and
        to the variance, as in the source), steps clipped to ``trf.step_clip``."""
        s = trf_settings(cfg)
        if not s.feature_scaling:
            return None
        feats, (_, variance), t = data.cache["features"], self._moments(data), cfg.train

        def make(groups: list[dict[str, Any]]) -> torch.optim.Optimizer:
            from ebms.train import ScaledSGD

            return ScaledSGD(groups, lr=t.lr, scales={feats.weight: variance}, l2=t.weight_decay, clip=s.step_clip)

        return make


register(TRFTask())
register(NeuralTRFTask())

"""``ebms train`` for sentence language models: n-gram, LSTM, Transformer and TRF (issue 11).

``data.name``: ``ptb`` (Penn Treebank, Mikolov's splits, under ``data.root`` or ``$EBMS_DATA/ptb``),
``tiny-shakespeare`` (one sentence per non-blank line, 90/5/5 split) or ``text`` (your files:
``language.train_path``, optional ``valid_path`` and ``test_path``, one sentence per line or running
text with ``language.sentence_split``). Tokens are words or characters (``language.level``); the
vocabulary keeps training tokens seen ``language.min_count`` times (at most ``max_vocab``), else ``<unk>``. ``language.max_length`` leaves longer training sentences out and bounds the TRF's
lengths and the Transformer's positions (unset: the longest training sentence, refused above
1,024 tokens for the kinds that grow with it: :data:`ebms.cli._language_data.DEFAULT_MAX_LENGTH`).

``model.kind`` and ``objective.kind``:

* ``kn``: :class:`~ebms.distributions.BackoffNGram` of order ``language.order`` with ``language.smoothing``,
  fitted by counting (no optimizer steps; ``objective.kind = "ml"``); the run folder gets ``model.arpa``
  (SRILM/KenLM format; whitespace tokens written ``<U+0020>``, as :meth:`BackoffNGram.to_arpa` does) and
  ``vocab.txt``. Kneser–Ney's discounts come from the counts-of-counts unless ``language.discounts``
  gives them: one per order, or three (``D1, D2, D3+``) per order for modified KN, lowest order first.
* ``lstm`` / ``transformer``: :class:`~ebms.models.lm.LSTMLM` (``embedding_dim``, ``hidden`` units,
  ``layers``, ``dropout``, ``tie_weights``) / :class:`~ebms.models.lm.TransformerLM` (width
  ``embedding_dim``, ``heads``, ``layers``, feed-forward ``hidden``), trained with
  :class:`~ebms.objectives.AutoregressiveNLL` (``ml``) under the Trainer.
* ``trf`` (discrete n-gram features of ``language.features`` up to ``language.order`` over ``<s> x </s>``,
  every observed one, or with ``language.feature_cutoffs = "source"`` the source's (word 4-grams and
  word skip features seen twice: :func:`~ebms.models.trf.templates.source_cutoffs`; ``feature_boundaries =
  "source"``: only n-gram windows read ``<s>``/``</s>``, never both); exchange word classes when
  ``language.classes > 0``), ``trf-cnn`` / ``trf-bilstm`` (:class:`~ebms.models.trf.Hidden2Scalar`
  with ``embedding_dim``, ``hidden``, ``layers``): a :class:`~ebms.models.trf.TRF` trained by AugSA
  (``ml``: ``language.chains`` chains of the trans-dimensional sampler, ``trials`` trials,
  ``sampler.sweeps`` sweeps, in ``chain_groups`` seeded blocks stepped by ``workers`` processes: a
  speed setting), NCE (``nce``: noise a KN n-gram of order ``language.noise_order``, ``objective.nu``
  draws per sentence) or dynamic NCE (``dnce``: noise an LSTM of ``language.noise_hidden`` units).
  AugSA's :math:`\\zeta` moves at ``SAGain(language.zeta_tc, zeta_beta, zeta_t0)`` (default ``(0, 0.6, 500)``).
  ``language.feature_scaling`` (``trf``, ``train.optimizer = "sgd"``; recipe ``trf-ptb``): the authors' update,
  the whole training set's feature means as AugSA's data term, :class:`~ebms.train.ScaledSGD` (gradients over each
  feature's within-length variance, ``train.weight_decay`` as L2, steps of at most ``language.step_clip``).

``lstm``/``transformer`` with ``earm``: :class:`~ebms.objectives.EARM` (``language.earm_weight``, ``earm_start``,
``earm_truncate``). ``residual``, ``electric``: residual EBMs and Electric (:mod:`ebms.cli._generation_text`).

Every run keeps its vocabulary (``vocab.json``, with ``L`` and ``trf``'s word classes) for ``eval``, ``sample``,
a resume and a residual run; changed training text is refused (:mod:`ebms.cli._language_data`). A key of ``[language]`` set away from its default that the
configured ``model.kind``/``objective.kind`` does not read is refused (:mod:`ebms.cli._language_keys`).

``eval``: exact perplexity of the normalised models; a TRF's with training :math:`\\zeta` and re-estimated,
with its interval (:mod:`ebms.cli._language_eval`). ``sample``: sentences, printed and written as text
(AR models: ancestral draws; TRF: ``--steps`` sampler steps from training sentences).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from ebms.cli import _generation_text as gen
from ebms.cli._config_rules import COUNT, DROPOUT, FRACTION, NONNEG, POS, Rule
from ebms.cli._language_data import VOCAB_FILE, LanguageData, load_language_data, vocabulary_file
from ebms.cli._language_eval import normalised_report, trf_report
from ebms.cli._language_keys import KIND_KEYS, TRF_KINDS, check_discounts, readers, reads
from ebms.cli._unread_keys import refuse_unread
from ebms.cli.config import Config, ConfigError, ModelConfig
from ebms.cli.tasks import Task, check_batch_size, register
from ebms.data.text import length_windows, unigram_probs
from ebms.distributions import BackoffNGram
from ebms.errors import CheckpointError, DiscountError
from ebms.fit import start_from_ngram
from ebms.models.lm import LSTMLM, TransformerLM
from ebms.models.trf import TEMPLATE_GROUPS, TRF, DiscreteFeatures, Hidden2Scalar, WordClasses, feature_templates
from ebms.models.trf.moments import feature_moments
from ebms.models.trf.templates import source_cutoffs
from ebms.objectives import EARM, AutoregressiveNLL, SAGain
from ebms.objectives.trf_augsa import AugSA
from ebms.objectives.trf_nce import TRFNCE, DynamicNCE
from ebms.samplers.trans_dimensional import TransDimensional
from ebms.sequences import Sequences

__all__ = ["KIND_KEYS", "LanguageSettings", "LanguageTask"]

AR_KINDS = ("kn", "lstm", "transformer")
SMOOTHINGS = ("modified_kneser_ney", "kneser_ney", "witten_bell", "add_k")
#: ``language.feature_cutoffs`` / ``feature_boundaries``: every observed feature / window, or the source's.
FEATURE_CUTOFFS, FEATURE_BOUNDARIES = ("none", "source"), ("all", "source")
#: seed offsets of the noise LM's initial weights (dnce) and of training chains for ``sample``.
NOISE_SEED_OFFSET = 19
#: longest draw of an autoregressive model in ``ebms sample`` (longer draws are cut).
SAMPLE_LIMIT = 1024


def _path(v: str) -> bool:
    return v.strip() != "" and "\0" not in v


@dataclass
class LanguageSettings:
    """``[language]``: the language task's own keys (module docstring)."""

    level: str = "word"
    lower: bool = False
    sentence_split: bool = False
    train_path: str | None = None
    valid_path: str | None = None
    test_path: str | None = None
    limit: int | None = None
    min_count: int = 1
    max_vocab: int | None = None
    max_length: int | None = None
    order: int = 3
    smoothing: str = "modified_kneser_ney"
    embedding_dim: int = 256
    hidden: int = 256
    layers: int = 2
    heads: int = 4
    dropout: float = 0.0
    tie_weights: bool = False
    discounts: list[float] = field(default_factory=list)
    classes: int = 0
    features: list[str] = field(default_factory=list)
    feature_cutoffs: str = "none"
    feature_boundaries: str = "all"
    trf_init: str = "zero"
    chains: int = 100
    chain_groups: int = 1
    workers: int = 1
    trials: int = 1
    noise_order: int = 2
    noise_hidden: int = 200
    logz_samples: int = 1000
    feature_scaling: bool = False
    step_clip: float = 1.0
    zeta_tc: float = 0.0
    zeta_beta: float = 0.6
    zeta_t0: int = 500
    earm_weight: float = 1.0
    earm_start: int = 0
    earm_truncate: int = 2
    base_run: str | None = None
    prefix_length: int = 10
    horizon: int = 6
    energy: str = "bilstm"
    negatives: int = 16
    joint_samples: int = 100
    mask_rate: float = 0.15


PATH = Rule(text="a file path (not empty)", check=_path)


def _discounts(values: list[float], order: int, smoothing: str) -> list[float] | list[list[float]] | None:
    """``language.discounts`` as :meth:`BackoffNGram.fit` takes them: one per order, or ``(D1, D2, D3+)`` per order."""
    if not values:
        return None
    if len(values) == order:
        return list(values)
    return [values[3 * m: 3 * m + 3] for m in range(order)]  # 3 x order values (LanguageTask.check)


#: KenLM's discounts when its estimate fails, ``(D1, D2, D3+)``: the values a message suggests.
FALLBACK_DISCOUNTS = (0.5, 1.0, 1.5)


def _ngram(data: LanguageData, order: int, smoothing: str, key: str, discounts: list[float]) -> BackoffNGram:
    """The backoff n-gram of the training sentences; a corpus too small for the smoothing is a config error
    naming the orders whose discounts cannot be estimated and the ``language.discounts`` to set."""
    try:
        return BackoffNGram.fit(data.train, len(data.vocab), order=order, smoothing=smoothing,
                                discounts=_discounts(discounts, order, smoothing))
    except DiscountError as e:
        per_order = FALLBACK_DISCOUNTS if smoothing == "modified_kneser_ney" else FALLBACK_DISCOUNTS[:1]
        example = ", ".join(f"{d:g}" for _ in range(order) for d in per_order)
        lower = f"language.{key} below {min(e.orders)}, " if min(e.orders) > 1 else ""
        orders = f"order{'s' * (len(e.orders) > 1)} {', '.join(map(str, e.orders))}"
        raise ConfigError(f"language.smoothing: {smoothing!r} cannot estimate its discounts at {orders} of this "
                          f"training text ({'; '.join(e.reasons)}): the estimate needs n-grams of adjusted count 1, "
                          f"2 and 3 at every order{', which even the word types (order 1) lack' if min(e.orders) == 1 else ''}; set "
                          f"language.discounts=[{example}] (KenLM's fallback, {len(per_order)} per order, lowest "
                          f"first), {lower}or use language.smoothing='witten_bell'") from None
    except ValueError as e:  # language.discounts out of range: "discounts[i]: ..."
        if not (text := str(e)).startswith("discounts["):
            raise
        raise ConfigError(f"language.discounts: {text.split(': ', 1)[1]} (entry {text[10:text.index(']')]}, "
                          f"order 1 first)") from None


class LanguageTask(Task[LanguageSettings]):
    """Sentence language models on PTB, Tiny Shakespeare or your text (module docstring)."""

    data_names = ("ptb", "tiny-shakespeare", "text")
    what = "a language corpus"
    section = "language"
    settings_type = LanguageSettings
    model_kinds = (*AR_KINDS, *TRF_KINDS, *gen.KINDS)
    objective_kinds = ("ml", "nce", "dnce", "earm")
    rules: ClassVar[dict[str, Rule]] = {
        "level": Rule(choices=("word", "char")), "lower": Rule(), "sentence_split": Rule(),
        "train_path": PATH, "valid_path": PATH, "test_path": PATH, "limit": COUNT, "min_count": COUNT,
        "max_vocab": Rule(low=2), "max_length": COUNT, "order": COUNT, "smoothing": Rule(choices=SMOOTHINGS),
        "embedding_dim": COUNT, "hidden": COUNT, "layers": COUNT, "heads": COUNT, "dropout": DROPOUT,
        "tie_weights": Rule(), "classes": NONNEG,
        "discounts": Rule(low=0, text="Kneser-Ney discounts, lowest order first: one per order, or three (D1, D2, "
                                       "D3+) per order for modified Kneser-Ney, each D_k in [0, k]; empty: estimated",
                          check=lambda v: all(x >= 0 for x in v)),
        "features": Rule(text=f"a list of TRF feature template groups ({', '.join(TEMPLATE_GROUPS)}); empty: the "
                              "default ones", check=lambda v: all(g in TEMPLATE_GROUPS for g in v)),
        "feature_cutoffs": Rule(choices=FEATURE_CUTOFFS), "feature_boundaries": Rule(choices=FEATURE_BOUNDARIES),
        "trf_init": Rule(choices=("zero", "kn")),
        "chains": COUNT, "chain_groups": COUNT, "workers": COUNT,
        "trials": COUNT, "noise_order": COUNT, "noise_hidden": COUNT, "logz_samples": Rule(low=2),
        "feature_scaling": Rule(), "step_clip": POS, "zeta_tc": NONNEG, "zeta_beta": Rule(low=0, high=1),
        "zeta_t0": NONNEG, "earm_weight": POS, "earm_start": NONNEG, "earm_truncate": COUNT,
        "base_run": PATH, "prefix_length": COUNT, "horizon": COUNT, "energy": Rule(choices=("bilstm", "transformer")),
        "negatives": COUNT, "joint_samples": COUNT, "mask_rate": FRACTION,
    }
    defaults: ClassVar[dict[str, Any]] = {"eval.n_samples": 10, "eval.ais_temperatures": 200}
    supports_ais = True
    sample_format = "txt"

    # -- configuration ------------------------------------------------------------------------
    def check(self, cfg: Config) -> None:
        s, kind, obj = self.settings(cfg), cfg.model.kind, cfg.objective.kind
        if cfg.model.hidden != ModelConfig().hidden:
            raise ConfigError(f"model.hidden: the MLP's hidden widths; a language model's sizes are "
                              f"language.embedding_dim and language.hidden; got model.hidden={cfg.model.hidden}")
        paths = {"train_path": s.train_path, "valid_path": s.valid_path, "test_path": s.test_path}
        given = [k for k, v in paths.items() if v is not None]
        if cfg.data.name == "text" and s.train_path is None:
            raise ConfigError("language.train_path: data.name='text' trains on your own file; expected a text file "
                              "(one sentence per line); got none: set language.train_path=FILE")
        if cfg.data.name != "text" and given:
            raise ConfigError(f"language.{given[0]}: your own files are read with data.name='text'; "
                              f"data.name={cfg.data.name!r} has its own splits: drop it or set data.name=text")
        if kind in gen.KINDS:
            gen.KINDS[kind].check(cfg)
        elif (kind in AR_KINDS and obj not in ("ml", "earm")) or (obj == "earm" and kind not in ("lstm", "transformer")):
            what = "an lstm or transformer LM" if obj == "earm" else f"a TRF (model.kind = {', '.join(TRF_KINDS)})"
            want = {"kn": "'ml'", "lstm": "'ml' or 'earm'", "transformer": "'ml' or 'earm'"}.get(kind, "'ml', 'nce' or 'dnce'")
            raise ConfigError(f"objective.kind: {obj!r} trains {what}; model.kind={kind!r} is trained by {want}")
        if kind == "transformer" and s.embedding_dim % s.heads:
            raise ConfigError(f"language.heads: expected a divisor of language.embedding_dim={s.embedding_dim}; "
                              f"got {s.heads}")
        class_groups = [g for g in s.features if g.startswith("c")]
        if kind == "trf" and class_groups and s.classes == 0:
            raise ConfigError(f"language.features: the class templates {', '.join(class_groups)} need word "
                              f"classes; set language.classes >= 1 or drop them")
        if s.feature_scaling and (kind != "trf" or cfg.train.optimizer != "sgd" or cfg.train.momentum != 0):
            raise ConfigError(f"language.feature_scaling: the source's variance-scaled steps are for the discrete TRF "
                              f"with plain SGD; expected model.kind='trf', train.optimizer='sgd' and train.momentum=0; "
                              f"got model.kind={kind!r}, train.optimizer={cfg.train.optimizer!r}, "
                              f"train.momentum={cfg.train.momentum}")
        if kind in TRF_KINDS and cfg.train.optimizer == "lbfgs":
            raise ConfigError("train.optimizer: TRF objectives draw fresh samples at every evaluation, so a line "
                              "search would compare different objectives; expected 'adam' or 'sgd'; got 'lbfgs'")
        if obj == "earm" and s.earm_start >= cfg.train.steps:
            raise ConfigError(f"language.earm_start: E-ARM is switched on after {s.earm_start} steps but the run stops "
                              f"at train.steps={cfg.train.steps}, so it would never start; expected language.earm_start "
                              f"below train.steps (or objective.kind='ml')")
        if s.trf_init == "kn" and (obj != "ml" or (s.features and "w" not in s.features)):
            raise ConfigError(f"language.trf_init: 'kn' starts AugSA ('ml') at a backoff LM's word n-gram weights; got "
                              f"objective.kind={obj!r}, features {s.features}: use 'ml' and 'w', or trf_init='zero'")
        if s.workers > s.chain_groups:  # each process steps whole blocks of chains
            raise ConfigError(f"language.workers: expected at most language.chain_groups={s.chain_groups} processes; "
                              f"got {s.workers} (raise chain_groups, which changes the chains' random streams)")
        check_discounts(cfg)
        refuse_unread("language", s, reads(cfg), f"model.kind={kind!r} with objective.kind={obj!r}", readers)

    def fitted(self, cfg: Config) -> bool:
        return cfg.model.kind == "kn"

    # -- data, model, objective ----------------------------------------------------------------
    def load(self, cfg: Config, *, stored: Mapping[str, bytes] | None = None) -> LanguageData:
        """The run's sentences; with ``stored`` (a trained run's files) its vocabulary, ``L`` and word classes."""
        self.check(cfg)
        residual = cfg.model.kind == "residual"
        data: LanguageData = gen.KINDS["residual"].load(cfg, stored) if residual else load_language_data(cfg, stored)
        n, V = self.settings(cfg).classes, len(data.vocab)
        if cfg.model.kind == "trf" and n > V - 1:
            raise ConfigError(f"language.classes: exchange clustering sorts the vocabulary's {V - 1} token ids (<unk> "
                              f"and the {V - 2} kept tokens) into classes; expected at most {V - 1}; got {n}")
        if data.stored is not None and data.stored.get("classes") is not None:
            classes = torch.tensor(data.stored["classes"], dtype=torch.long)
            if classes.shape != (V,) or self._classes_key(cfg) is None:
                raise CheckpointError(f"{VOCAB_FILE}: word classes for {classes.numel()} ids with language.classes="
                                      f"{n} and a vocabulary of {V}; train the run again (--overwrite)")
            data.cache[self._classes_key(cfg)] = classes
        return data

    def run_files(self, cfg: Config, data: LanguageData) -> dict[str, bytes]:
        """``vocab.json`` (the vocabulary, ``L``, the training fingerprint, the word classes of a ``trf``)
        and, for a residual run, its base run's identity (``base.json``)."""
        classes = self._classes(cfg, data)
        files = {VOCAB_FILE: vocabulary_file(data, **({} if classes is None else {"classes": classes.tolist()}))}
        if cfg.model.kind in gen.KINDS:
            files.update(gen.KINDS[cfg.model.kind].run_files(cfg, data))
        return files

    def _classes_key(self, cfg: Config) -> tuple[str, int] | None:
        n = self.settings(cfg).classes
        return None if n == 0 or cfg.model.kind != "trf" else ("classes", n)

    def _classes(self, cfg: Config, data: LanguageData) -> Tensor | None:
        key = self._classes_key(cfg)
        if key is None:
            return None
        if key not in data.cache:
            data.cache[key] = WordClasses.fit(data.train, len(data.vocab), key[1]).classes
        return data.cache[key]

    def build_model(self, cfg: Config, data: LanguageData) -> nn.Module:
        s, kind, V = self.settings(cfg), cfg.model.kind, len(data.vocab)
        if kind == "kn":
            return _ngram(data, s.order, s.smoothing, "order", s.discounts)
        if kind in gen.KINDS:
            return gen.KINDS[kind].build_model(cfg, data)
        if kind == "lstm":
            return LSTMLM(V, embedding_dim=s.embedding_dim, hidden_size=s.hidden, num_layers=s.layers,
                          dropout=s.dropout, tie_weights=s.tie_weights)
        if kind == "transformer":
            return TransformerLM(V, d_model=s.embedding_dim, num_heads=s.heads, num_layers=s.layers,
                                 dim_feedforward=s.hidden, dropout=s.dropout, max_length=data.max_length,
                                 tie_weights=s.tie_weights)
        energy: nn.Module
        if kind == "trf":
            classes = self._classes(cfg, data)
            groups = s.features or [g for g in ("w", "c", "ws", "cs", "wsh", "csh") if classes is not None or g[0] == "w"]
            templates = feature_templates(groups, s.order)
            cuts = source_cutoffs(templates) if s.feature_cutoffs == "source" else 1
            energy = DiscreteFeatures.fit(data.train, V, templates, classes=classes, eos=True,
                                          boundaries=s.feature_boundaries, min_count=cuts)
            data.cache["features"] = energy  # build_optimizer's feature variances
        else:
            make = Hidden2Scalar.cnn if kind == "trf-cnn" else Hidden2Scalar.bilstm
            energy = make(V, s.embedding_dim, s.hidden, layers=s.layers, dropout=s.dropout)
        # add-one over lengths 1..L: a held-out length unseen in training keeps a probability > 0
        trf = TRF.from_corpus(energy, data.train, V, max_length=data.max_length, smoothing=1.0)
        if kind == "trf" and s.trf_init == "kn" and data.stored is None:  # KN start of a new run (a stored one loads its checkpoint)
            start_from_ngram(trf, _ngram(data, s.order, s.smoothing, "order", s.discounts),
                             generator=torch.Generator().manual_seed(cfg.run.seed + NOISE_SEED_OFFSET))
        return trf

    def kernel(self, cfg: Config, data: LanguageData, *, jump: bool = True) -> TransDimensional:
        """The trans-dimensional sampler of the TRF runs (unigram proposals, class proposals with classes)."""
        s = self.settings(cfg)
        return TransDimensional(token_probs=unigram_probs(data.train, len(data.vocab)), classes=self._classes(cfg, data),
                                trials=s.trials, sweeps=cfg.sampler.sweeps, jump=jump, groups=s.chain_groups,
                                workers=s.workers)

    def build_objective(self, cfg: Config, data: LanguageData) -> nn.Module:
        s, obj, V = self.settings(cfg), cfg.objective.kind, len(data.vocab)
        if cfg.model.kind in gen.KINDS:
            return gen.KINDS[cfg.model.kind].build_objective(cfg, data)  # type: ignore[no-any-return]
        if cfg.model.kind in AR_KINDS:
            return EARM(weight=s.earm_weight, start_step=s.earm_start, truncate=s.earm_truncate) if obj == "earm" \
                else AutoregressiveNLL()
        if obj == "ml":  # the source's update (feature_scaling): the whole training set's data term
            return AugSA(self.kernel(cfg, data), chains=s.chains, zeta_gain=SAGain(s.zeta_tc, s.zeta_beta, s.zeta_t0),
                         data_mean=self._moments(data)[0] if s.feature_scaling else None)
        if obj == "nce":
            return TRFNCE(_ngram(data, s.noise_order, s.smoothing, "noise_order", s.discounts), nu=cfg.objective.nu)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.run.seed + NOISE_SEED_OFFSET)
            lstm = LSTMLM(V, embedding_dim=s.noise_hidden, hidden_size=s.noise_hidden, num_layers=1)
        lstm.init_unigram(unigram_probs(data.train, V, end=True))  # a zero bias draws ~V tokens before an end
        return DynamicNCE(lstm, nu=cfg.objective.nu)

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

    def training_data(self, cfg: Config, data: LanguageData) -> Callable[[int, torch.Generator], tuple[Tensor, ...]]:
        """Batches of sentences of similar length (:func:`~ebms.data.text.length_windows`)."""
        if cfg.model.kind in gen.KINDS:
            return gen.KINDS[cfg.model.kind].training_data(cfg, data)  # type: ignore[no-any-return]
        check_batch_size(cfg, data.size, f"training sentences of {cfg.data.name}")
        return length_windows(data.train, cfg.run.seed)

    # -- files, figures, samples ---------------------------------------------------------------
    def write_model_files(self, run_dir: Path, cfg: Config, model: nn.Module, data: LanguageData) -> list[Path]:
        """``vocab.txt`` and, for ``kn``, ``model.arpa`` (a whitespace token written ``<U+0020>``)."""
        out = [data.vocab.save(run_dir / "vocab.txt")]
        if isinstance(model, BackoffNGram):
            model.to_arpa(run_dir / "model.arpa", data.vocab.tokens)
            out.append(run_dir / "model.arpa")
        return out

    def report(self, cfg: Config, model: nn.Module, data: LanguageData, step: int, *,
               use_ais: bool = False) -> Any:
        if use_ais and cfg.model.kind not in TRF_KINDS:
            why = "is normalised and its perplexity exact" if cfg.model.kind in AR_KINDS else "has no per-length normalisers"
            raise ConfigError(f"--ais: AIS estimates the normalisers of a TRF; model.kind={cfg.model.kind!r} {why}: drop --ais")
        if not data.held_out:
            raise ConfigError("language.test_path: nothing to evaluate: data.name='text' without valid_path or "
                              "test_path; set language.test_path=FILE")
        if cfg.model.kind in gen.KINDS:
            return gen.KINDS[cfg.model.kind].report(cfg, model, data, step)
        longest = max(int(x.lengths.max()) for x in data.held_out.values())
        if cfg.model.kind in ("transformer", *TRF_KINDS) and longest > data.max_length:
            raise ConfigError(f"language.max_length: the held-out text has a sentence of {longest} tokens; this "
                              f"{cfg.model.kind} covers lengths up to {data.max_length} (the longest training sentence "
                              f"unless language.max_length says more): train with language.max_length >= {longest}")
        if cfg.model.kind in AR_KINDS:
            return normalised_report(cfg, model, data, step)
        if "test" not in data.held_out:
            raise ConfigError("language.test_path: a TRF is evaluated on a test set; set language.test_path=FILE")
        return trf_report(cfg, model, data, step, kernel=self.kernel(cfg, data, jump=False), use_ais=use_ais)

    def sample(self, cfg: Config, model: nn.Module, data: LanguageData, *, n: int | None = None,
               steps: int | None = None, seed: int | None = None) -> Tensor:
        """``n`` sentences as token ids ``(n, T)``, padding 0: ancestral draws of a normalised model (cut at
        :data:`SAMPLE_LIMIT` tokens), or ``steps`` trans-dimensional steps of a TRF from training sentences."""
        n = cfg.eval.n_samples if n is None else n
        g = torch.Generator().manual_seed(cfg.run.seed if seed is None else seed)
        if cfg.model.kind in gen.KINDS:
            return gen.KINDS[cfg.model.kind].sample(cfg, model, data, n, g)  # type: ignore[no-any-return]
        with torch.no_grad():
            if isinstance(model, BackoffNGram):
                x = model.sample(n, g, max_length=SAMPLE_LIMIT)
            elif isinstance(model, (LSTMLM, TransformerLM)):
                limit = min(SAMPLE_LIMIT, model.max_length or SAMPLE_LIMIT)
                x = model.sample(n, g, max_length=limit, truncate=True)
            else:  # the TRF's sampler from training sentences
                start = data.train[torch.arange(n) % data.size].canonical().pad_to(model.max_length)  # type: ignore[arg-type]
                x = self.kernel(cfg, data).sample(model, start, cfg.eval.sample_steps if steps is None else steps, generator=g)
        return x.canonical().tokens

    def sample_text(self, x: Tensor, data: LanguageData) -> list[str]:
        """The sentences of ``x`` (token ids, padding 0) as text."""
        return data.vocab.to_text(Sequences(x, (x > 0).sum(1)))


register(LanguageTask())

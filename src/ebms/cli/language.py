"""``ebms train`` for sentence language models: n-gram, LSTM, Transformer and TRF (issue 11).

``data.name``: ``ptb`` (Penn Treebank, Mikolov's splits, under ``data.root`` or ``$EBMS_DATA/ptb``),
``tiny-shakespeare`` (one sentence per non-blank line, 90/5/5 split) or ``text`` (your files:
``language.train_path``, optional ``valid_path`` and ``test_path``, one sentence per line or running
text with ``language.sentence_split``). Tokens are words, characters or subword units (``language.level``;
``subword``: ``language.subword_units`` BPE or unigram units, ``language.subword_model``, fitted on the training
words, or the file ``language.tokenizer``: :mod:`ebms.data.subword`, kept in the run as ``tokenizer.json``); the
vocabulary keeps training tokens seen ``language.min_count`` times (at most ``max_vocab``), else ``<unk>``. ``language.max_length`` leaves longer training sentences out and bounds the TRF's
lengths and the Transformer's positions (unset: the longest training sentence, refused above
1,024 tokens for the kinds that grow with it: :data:`ebms.cli._language_data.DEFAULT_MAX_LENGTH`).
Those keys (:data:`DATA_KEYS`) are the ``[language]`` section; each ``model.kind`` reads its own section
beside it (issue 25): ``[ngram]`` (``kn``), ``[lm]`` (``lstm``, ``transformer``), ``[trf]`` (the TRFs, which
also read ``[ngram]``'s smoothing and discounts for the KN n-grams they fit), ``[residual]``, ``[electric]``.
A key spelled ``language.KEY`` as before is refused naming the kind's new key (:meth:`LanguageTask.kind_moves`,
:func:`ebms.cli.tasks.moved_message`); a run folder's ``config.toml`` written before is read in the new
spelling (:func:`ebms.cli.tasks.stored_spelling`).

``model.kind`` and ``objective.kind``:

* ``kn``: :class:`~ebms.distributions.BackoffNGram` of order ``ngram.order`` with ``ngram.smoothing``,
  fitted by counting (no optimizer steps; ``objective.kind = "ml"``); the run folder gets ``model.arpa``
  (SRILM/KenLM format; whitespace tokens written ``<U+0020>``, as :meth:`BackoffNGram.to_arpa` does) and
  ``vocab.txt``. Kneser–Ney's discounts come from the counts-of-counts unless ``ngram.discounts``
  gives them: one per order, or three (``D1, D2, D3+``) per order for modified KN, lowest order first.
* ``lstm`` / ``transformer``: :class:`~ebms.models.lm.LSTMLM` (``lm.embedding_dim``, ``hidden`` units,
  ``layers``, ``dropout``, ``tie_weights``) / :class:`~ebms.models.lm.TransformerLM` (width
  ``embedding_dim``, ``heads``, ``layers``, feed-forward ``hidden``), trained with
  :class:`~ebms.objectives.AutoregressiveNLL` (``ml``) under the Trainer.
* ``trf`` (discrete n-gram features of ``trf.features`` up to ``trf.order`` over ``<s> x </s>``,
  every observed one, or with ``trf.feature_cutoffs = "source"`` the source's (word 4-grams and
  word skip features seen twice: :func:`~ebms.models.trf.templates.source_cutoffs`; ``feature_boundaries =
  "source"``: only n-gram windows read ``<s>``/``</s>``, never both); exchange word classes when
  ``trf.classes > 0``), ``trf-cnn`` / ``trf-bilstm`` (:class:`~ebms.models.trf.Hidden2Scalar`
  with ``trf.embedding_dim``, ``hidden``, ``layers``): a :class:`~ebms.models.trf.TRF` trained by AugSA
  (``ml``: ``trf.chains`` chains of the trans-dimensional sampler, ``trials`` trials,
  ``sampler.sweeps`` sweeps, in ``chain_groups`` seeded blocks stepped by ``workers`` processes: a
  speed setting; ``trf`` only: ``trf.scan = "colored"`` moves the positions farther apart than the
  features reach in one call), NCE (``nce``: noise a KN n-gram of order ``trf.noise_order``, ``objective.nu``
  draws per sentence) or dynamic NCE (``dnce``: noise an LSTM of ``trf.noise_hidden`` units).
  AugSA's :math:`\\zeta` moves at ``SAGain(trf.zeta_tc, zeta_beta, zeta_t0)`` (default ``(0, 0.6, 500)``).
  ``trf.feature_scaling`` (``trf``, ``train.optimizer = "sgd"``; recipe ``trf-ptb``): the authors' update,
  the whole training set's feature means as AugSA's data term, :class:`~ebms.train.ScaledSGD` (gradients over each
  feature's within-length variance, ``train.weight_decay`` as L2, steps of at most ``trf.step_clip``).

``lstm``/``transformer`` with ``earm``: :class:`~ebms.objectives.EARM` (``lm.earm_weight``, ``earm_start``,
``earm_truncate``). ``residual``, ``electric``: residual EBMs and Electric (:mod:`ebms.cli._generation_text`).
Each ``model.kind`` is a :class:`LanguageTask` subclass registered for it: :class:`NGramTask`, :class:`LSTMTask`,
:class:`TransformerTask` here, the TRFs in :mod:`ebms.cli._language_trf`, residual and Electric in
:mod:`ebms.cli._generation_text`.

Every run keeps its vocabulary (``vocab.json``, with ``L`` and ``trf``'s word classes) for ``eval``, ``sample``,
a resume and a residual run; changed training text is refused (:mod:`ebms.cli._language_data`). A key of the kind's sections set away from its
default that the configured ``model.kind``/``objective.kind`` does not read is refused (each kind's
:attr:`LanguageTask.keys`); a key of another kind's section, as any other task's (:func:`ebms.cli.build.validate_config`).

``eval``: exact perplexity of the normalised models; a TRF's with training :math:`\\zeta` and re-estimated,
with its interval (:mod:`ebms.cli._language_eval`). ``sample``: sentences, printed and written as text
(AR models: ancestral draws; TRF: ``--steps`` sampler steps from training sentences).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, cast

import torch
from torch import Tensor, nn

from ebms.cli._config_rules import COUNT, DROPOUT, NONNEG, POS, Rule
from ebms.cli._language_data import VOCAB_FILE, LanguageData, applied_language_data, language_files, load_language_data
from ebms.cli._language_eval import normalised_report
from ebms.cli._unread_keys import refuse_unread
from ebms.cli.config import Config, ConfigError, ModelConfig
from ebms.cli.tasks import Section, Task, check_batch_size, register, registered
from ebms.data.subword import SUBWORD_MODELS
from ebms.data.text import length_windows
from ebms.distributions import BackoffNGram
from ebms.errors import CheckpointError, DiscountError
from ebms.models.lm import LSTMLM, TransformerLM
from ebms.models.trf import WordClasses
from ebms.objectives import EARM, AutoregressiveNLL
from ebms.sequences import Sequences

__all__ = ["DATA_KEYS", "LM", "LMSettings", "LSTMTask", "LanguageSettings", "LanguageTask", "NET_RULES", "NGRAM",
           "NGramSettings", "NGramTask", "TransformerTask", "net_keys", "readers"]

SMOOTHINGS = ("modified_kneser_ney", "kneser_ney", "witten_bell", "add_k")
#: ``trf.feature_cutoffs`` / ``feature_boundaries``: every observed feature / window, or the source's.
FEATURE_CUTOFFS, FEATURE_BOUNDARIES = ("none", "source"), ("all", "source")
KN_SMOOTHINGS = ("modified_kneser_ney", "kneser_ney")
#: ``[language]`` keys every kind reads: the text, its vocabulary and ``L``.
DATA_KEYS = ("level", "lower", "sentence_split", "train_path", "valid_path", "test_path", "limit", "min_count",
             "max_vocab", "max_length", "subword_units", "subword_model", "tokenizer")
#: the ``[language]`` keys of subword units (``level = "subword"``), with what each is.
SUBWORD_KEYS = {"subword_units": "the number of subword units fitted", "subword_model": "the subword model fitted",
                "tokenizer": "a tokenizer file"}


def net_keys(section: str, *names: str) -> tuple[str, ...]:
    """The dotted keys ``section.name`` of a neural kind's sizes (default: width, hidden, layers, dropout)."""
    return tuple(f"{section}.{n}" for n in names or ("embedding_dim", "hidden", "layers", "dropout"))

#: seed offsets of the noise LM's initial weights (dnce) and of training chains for ``sample``.
NOISE_SEED_OFFSET = 19
#: longest draw of an autoregressive model in ``ebms sample`` (longer draws are cut).
SAMPLE_LIMIT = 1024


def _path(v: str) -> bool:
    return v.strip() != "" and "\0" not in v


@dataclass
class LanguageSettings:
    """``[language]``: the keys every language kind reads: the text, its vocabulary and ``L``."""

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
    subword_units: int = 4000
    subword_model: str = "bpe"
    tokenizer: str | None = None


@dataclass
class NGramSettings:
    """``[ngram]``: the backoff n-gram of ``kn``; a ``trf``'s KN start and a TRF's ``nce`` noise are fitted
    with its ``smoothing`` and ``discounts`` (their orders are the TRF's: ``trf.order``, ``trf.noise_order``)."""

    order: int = 3
    smoothing: str = "modified_kneser_ney"
    discounts: list[float] = field(default_factory=list)


@dataclass
class LMSettings:
    """``[lm]``: the sizes of ``lstm`` and ``transformer``, and E-ARM's keys (``objective.kind = "earm"``)."""

    embedding_dim: int = 256
    hidden: int = 256
    layers: int = 2
    heads: int = 4
    dropout: float = 0.0
    tie_weights: bool = False
    earm_weight: float = 1.0
    earm_start: int = 0
    earm_truncate: int = 2
    earm_clip: float | None = None


#: the keys ``[language]`` held before issue 25 split it by kind: only these have a ``language.*`` spelling to
#: migrate (a key added to a kind's section since never had one).
OLD_LANGUAGE_KEYS = frozenset(
    "base_run chain_groups chains classes discounts dropout earm_start earm_truncate earm_weight embedding_dim "
    "energy feature_boundaries feature_cutoffs feature_scaling features heads hidden horizon joint_samples layers "
    "level limit logz_samples lower mask_rate max_length max_vocab min_count negatives noise_hidden noise_order "
    "order prefix_length scan sentence_split smoothing step_clip test_path tie_weights train_path trf_init trials "
    "valid_path workers zeta_beta zeta_t0 zeta_tc".split())

PATH = Rule(text="a file path (not empty)", check=_path)
#: the rules of the network sizes every neural kind's section has.
NET_RULES: dict[str, Rule] = {"embedding_dim": COUNT, "hidden": COUNT, "layers": COUNT, "heads": COUNT,
                              "dropout": DROPOUT}
NGRAM = Section(NGramSettings, {
    "order": COUNT, "smoothing": Rule(choices=SMOOTHINGS),
    "discounts": Rule(low=0, text="Kneser-Ney discounts, lowest order first: one per order, or three (D1, D2, "
                                   "D3+) per order for modified Kneser-Ney, each D_k in [0, k]; empty: estimated",
                      check=lambda v: all(x >= 0 for x in v))})
LM = Section(LMSettings, {**NET_RULES, "tie_weights": Rule(), "earm_weight": POS, "earm_start": NONNEG,
                          "earm_truncate": COUNT, "earm_clip": POS})


def _discounts(values: list[float], order: int, smoothing: str) -> list[float] | list[list[float]] | None:
    """``ngram.discounts`` as :meth:`BackoffNGram.fit` takes them: one per order, or ``(D1, D2, D3+)`` per order."""
    if not values:
        return None
    if len(values) == order:
        return list(values)
    return [values[3 * m: 3 * m + 3] for m in range(order)]  # 3 x order values (LanguageTask.check)


#: KenLM's discounts when its estimate fails, ``(D1, D2, D3+)``: the values a message suggests.
FALLBACK_DISCOUNTS = (0.5, 1.0, 1.5)


def _ngram(data: LanguageData, order: int, key: str, n: NGramSettings) -> BackoffNGram:
    """The backoff n-gram of order ``order`` (the dotted ``key``) of the training sentences with ``[ngram]``'s
    smoothing and discounts; a corpus too small for the smoothing is a config error naming the orders whose
    discounts cannot be estimated and the ``ngram.discounts`` to set."""
    smoothing, discounts = n.smoothing, n.discounts
    try:
        return BackoffNGram.fit(data.train, len(data.vocab), order=order, smoothing=smoothing,
                                discounts=_discounts(discounts, order, smoothing))
    except DiscountError as e:
        per_order = FALLBACK_DISCOUNTS if smoothing == "modified_kneser_ney" else FALLBACK_DISCOUNTS[:1]
        example = ", ".join(f"{d:g}" for _ in range(order) for d in per_order)
        lower = f"{key} below {min(e.orders)}, " if min(e.orders) > 1 else ""
        orders = f"order{'s' * (len(e.orders) > 1)} {', '.join(map(str, e.orders))}"
        raise ConfigError(f"ngram.smoothing: {smoothing!r} cannot estimate its discounts at {orders} of this "
                          f"training text ({'; '.join(e.reasons)}): the estimate needs n-grams of adjusted count 1, "
                          f"2 and 3 at every order{', which even the word types (order 1) lack' if min(e.orders) == 1 else ''}; set "
                          f"ngram.discounts=[{example}] (KenLM's fallback, {len(per_order)} per order, lowest "
                          f"first), {lower}or use ngram.smoothing='witten_bell'") from None
    except ValueError as e:  # ngram.discounts out of range: "discounts[i]: ..."
        if not (text := str(e)).startswith("discounts["):
            raise
        raise ConfigError(f"ngram.discounts: {text.split(': ', 1)[1]} (entry {text[10:text.index(']')]}, "
                          f"order 1 first)") from None


def _alternatives(names: tuple[str, ...]) -> str:
    """``'ml'``, ``'ml' or 'earm'``, ``'ml', 'nce' or 'dnce'``."""
    quoted = [repr(n) for n in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


class LanguageTask(Task[LanguageSettings]):
    """Sentence language models on PTB, Tiny Shakespeare or your text (module docstring): the keys,
    data, checks and files every kind shares. Each ``model.kind`` is a subclass registered for it."""

    data_names = ("ptb", "tiny-shakespeare", "text")
    what = "a language corpus"
    section = "language"
    settings_type = LanguageSettings
    objective_kinds = ("ml", "nce", "dnce", "earm")
    rules: ClassVar[dict[str, Rule]] = {
        "level": Rule(choices=("word", "char", "subword")), "lower": Rule(), "sentence_split": Rule(),
        "train_path": PATH, "valid_path": PATH, "test_path": PATH, "limit": COUNT, "min_count": COUNT,
        "max_vocab": Rule(low=2), "max_length": COUNT, "subword_units": Rule(low=2),
        "subword_model": Rule(choices=SUBWORD_MODELS), "tokenizer": PATH,
    }
    defaults: ClassVar[dict[str, Any]] = {"eval.n_samples": 10, "eval.ais_temperatures": 200}
    supports_ais = True
    sample_format = "txt"
    applies: ClassVar[tuple[str, ...]] = ("score",)  # and `ebms rescore`: ebms.apply.text
    #: the ``objective.kind`` values this kind trains by, the keys it reads beyond :data:`DATA_KEYS` (dotted:
    #: those of its own sections, :attr:`~ebms.cli.tasks.Task.more_sections`), those each of its objectives reads
    #: (``readers`` names it with ``objective_note``), and those it reads only with another key's value (the
    #: condition in words).
    trained_by: ClassVar[tuple[str, ...]] = ("ml",)
    keys: ClassVar[tuple[str, ...]] = ()
    objective_keys: ClassVar[dict[str, tuple[str, ...]]] = {}
    objective_note: ClassVar[str] = ""
    optional_keys: ClassVar[dict[str, str]] = {}
    #: its size or cost grows with ``L`` (:data:`~ebms.cli._language_data.DEFAULT_MAX_LENGTH` bounds an unset one).
    bounded_length: ClassVar[bool] = True
    #: it covers only the lengths up to ``L`` (positions, per-length normalisers): longer held-out text is refused.
    positions: ClassVar[bool] = False
    #: its objectives draw fresh samples at every evaluation (no line search), and the source's
    #: variance-scaled SGD applies to it (``trf.feature_scaling``).
    sampled: ClassVar[bool] = False
    scales_features: ClassVar[bool] = False
    #: why ``--ais`` does not apply (``""``: it does, a TRF's per-length normalisers).
    no_ais: ClassVar[str] = "has no per-length normalisers"

    # -- configuration ------------------------------------------------------------------------
    def readable(self) -> set[str]:
        """Every dotted key this kind reads with some objective or value: :attr:`keys`, every objective's
        and :attr:`optional_keys` (beyond :data:`DATA_KEYS`)."""
        return {*self.keys, *(k for keys in self.objective_keys.values() for k in keys), *self.optional_keys}

    def kind_moves(self) -> dict[str, str]:
        """``language.KEY`` -> the key of this kind's own section that holds ``KEY`` now (issue 25), for the keys
        of :data:`OLD_LANGUAGE_KEYS`."""
        return {f"language.{name}": key for key in sorted(self.readable())
                if (name := key.split(".", 1)[1]) in OLD_LANGUAGE_KEYS}

    def check(self, cfg: Config) -> None:
        s, kind, obj = self.settings(cfg), cfg.model.kind, cfg.objective.kind
        if cfg.model.hidden != ModelConfig().hidden:
            sizes = [k for k in sorted(self.readable()) if k.endswith((".embedding_dim", ".hidden"))]
            raise ConfigError(f"model.hidden: the MLP's hidden widths; the sizes of model.kind={kind!r} are "
                              f"{' and '.join(sizes) or 'keys of its own section'}; got model.hidden={cfg.model.hidden}")
        paths = {"train_path": s.train_path, "valid_path": s.valid_path, "test_path": s.test_path}
        given = [k for k, v in paths.items() if v is not None]
        if cfg.data.name == "text" and s.train_path is None:
            raise ConfigError("language.train_path: data.name='text' trains on your own file; expected a text file "
                              "(one sentence per line); got none: set language.train_path=FILE")
        if cfg.data.name != "text" and given:
            raise ConfigError(f"language.{given[0]}: your own files are read with data.name='text'; "
                              f"data.name={cfg.data.name!r} has its own splits: drop it or set data.name=text")
        self.check_units(cfg)
        self.check_kind(cfg)
        if self.sampled and cfg.train.optimizer == "lbfgs":
            raise ConfigError("train.optimizer: TRF objectives draw fresh samples at every evaluation, so a line "
                              "search would compare different objectives; expected 'adam' or 'sgd'; got 'lbfgs'")
        self.check_discounts(cfg)
        read, context = self.reads(cfg), f"model.kind={kind!r} with objective.kind={obj!r}"
        for name in self.sections():
            refuse_unread(name, cfg.section(name), {k.split(".", 1)[1] for k in read if k.startswith(f"{name}.")},
                          context, partial(readers, name))

    def check_units(self, cfg: Config) -> None:
        """``language.level`` and the subword keys (:data:`SUBWORD_KEYS`): read with ``level = "subword"`` only,
        ``subword_units``/``subword_model`` (a fitted tokenizer) or ``tokenizer`` (a file), ``tokenizers``
        installed."""
        s, default = self.settings(cfg), LanguageSettings()
        given = [k for k in SUBWORD_KEYS if getattr(s, k) != getattr(default, k)]
        if s.level != "subword":
            if given:
                raise ConfigError(f"language.{given[0]}: {SUBWORD_KEYS[given[0]]} for subword units, read with "
                                  f"language.level='subword'; got language.level={s.level!r}: set language.level="
                                  f"subword or drop language.{given[0]}")
            return
        if s.tokenizer is not None and len(given) > 1:
            other = next(k for k in given if k != "tokenizer")
            raise ConfigError(f"language.{other}: language.tokenizer gives the units (its file), so nothing is "
                              f"fitted; drop language.{other}, or drop language.tokenizer to fit units on the "
                              f"training text")
        if s.max_vocab is not None:
            raise ConfigError(f"language.max_vocab: with language.level='subword' the vocabulary is the units of the "
                              f"training text (language.subword_units={s.subword_units} are fitted); drop "
                              f"language.max_vocab, or set language.subword_units")
        if importlib.util.find_spec("tokenizers") is None:
            raise ConfigError("language.level: 'subword' units need the tokenizers package: pip install "
                              "'ebms[subword]'; or use language.level='word' or 'char'")

    def check_kind(self, cfg: Config) -> None:
        """This kind's own combinations: its objectives (and its sizes, in subclasses)."""
        obj = cfg.objective.kind
        if obj not in self.trained_by:
            trfs = [k for t in registered() if isinstance(t, LanguageTask) and t.sampled for k in t.model_kinds]
            what = "an lstm or transformer LM" if obj == "earm" else f"a TRF (model.kind = {', '.join(trfs)})"
            raise ConfigError(f"objective.kind: {obj!r} trains {what}; model.kind={cfg.model.kind!r} is trained by "
                              f"{_alternatives(self.trained_by)}")

    def reads(self, cfg: Config) -> set[str]:
        """The dotted keys a run of ``cfg`` reads: :data:`DATA_KEYS`, :attr:`keys` and its objective's."""
        return {*(f"language.{k}" for k in DATA_KEYS), *self.keys, *self.objective_keys.get(cfg.objective.kind, ())}

    def ngram_order(self, cfg: Config, read: set[str]) -> tuple[int, str]:
        """The order of the n-gram this run fits with ``[ngram]``'s smoothing, and its dotted key: ``ngram.order``."""
        return cfg.sections["ngram"].order, "ngram.order"

    def check_discounts(self, cfg: Config) -> None:
        """``ngram.discounts`` of the Kneser–Ney n-gram this run fits (``kn``, a TRF's ``nce`` noise, a
        TRF's KN start): one per order, or three per order for modified Kneser–Ney (ranges are checked by
        the n-gram itself).

        Raises:
            ConfigError: discounts with another smoothing, or of another length.
        """
        read = self.reads(cfg)
        if "ngram.smoothing" not in read or not cfg.sections["ngram"].discounts:
            return  # unread: refused as such
        n = cfg.sections["ngram"]
        order, key = self.ngram_order(cfg, read)
        if n.smoothing not in KN_SMOOTHINGS:
            raise ConfigError(f"ngram.discounts: only Kneser-Ney smoothing takes discounts; ngram.smoothing="
                              f"{n.smoothing!r}: drop them or use 'modified_kneser_ney' / 'kneser_ney'")
        sizes = (order, 3 * order) if n.smoothing == "modified_kneser_ney" else (order,)
        if len(n.discounts) not in sizes:
            what = " or three (D1, D2, D3+) per order" if len(sizes) == 2 else ""
            raise ConfigError(f"ngram.discounts: expected one discount per order{what}, lowest order first: "
                              f"{' or '.join(map(str, sizes))} values for {key}={order}; got "
                              f"{len(n.discounts)} ({n.discounts})")

    # -- data, files ---------------------------------------------------------------------------
    def load(self, cfg: Config, *, stored: Mapping[str, bytes] | None = None) -> LanguageData:
        """The run's sentences; with ``stored`` (a trained run's files) its vocabulary, ``L`` and word classes."""
        self.check(cfg)
        return self._with_classes(cfg, self.read(cfg, stored))

    def load_applied(self, cfg: Config, stored: dict[str, bytes]) -> LanguageData | None:
        """The stored vocabulary, ``L`` and word classes, no sentence (:func:`applied_language_data`); ``None``: a
        ``trf`` whose file holds no classes."""
        data, n = self._with_classes(cfg, applied_language_data(cfg, stored)), self.class_count(cfg)
        return None if n and ("classes", n) not in data.cache else data

    def _with_classes(self, cfg: Config, data: LanguageData) -> LanguageData:
        n, V = self.class_count(cfg), len(data.vocab)
        if n > V - 1:
            raise ConfigError(f"trf.classes: exchange clustering sorts the vocabulary's {V - 1} token ids (<unk> "
                              f"and the {V - 2} kept tokens) into classes; expected at most {V - 1}; got {n}")
        if data.stored is not None and data.stored.get("classes") is not None:
            classes = torch.tensor(data.stored["classes"], dtype=torch.long)
            if classes.shape != (V,) or n == 0:
                raise CheckpointError(f"{VOCAB_FILE}: word classes for {classes.numel()} ids with trf.classes="
                                      f"{n} and a vocabulary of {V}; train the run again (--overwrite)")
            data.cache[("classes", n)] = classes
        return data

    def read(self, cfg: Config, stored: Mapping[str, bytes] | None) -> LanguageData:
        """The sentences encoded with a new vocabulary (or the stored one)."""
        return load_language_data(cfg, stored)

    def class_count(self, cfg: Config) -> int:
        """The number of word classes this kind fits (``trf.classes`` of a ``trf``; else 0)."""
        return 0

    def classes(self, cfg: Config, data: LanguageData) -> Tensor | None:
        """The exchange word classes of :meth:`class_count` (fitted once; ``None`` for 0)."""
        n = self.class_count(cfg)
        if n == 0:
            return None
        if ("classes", n) not in data.cache:
            data.cache[("classes", n)] = WordClasses.fit(data.train, len(data.vocab), n).classes
        return data.cache[("classes", n)]  # type: ignore[no-any-return]

    def run_files(self, cfg: Config, data: LanguageData) -> dict[str, bytes]:
        """``vocab.json``: the vocabulary, ``L``, the training fingerprint and the word classes of a ``trf``; with
        subword units ``tokenizer.json`` too."""
        classes = self.classes(cfg, data)
        return language_files(data, **({} if classes is None else {"classes": classes.tolist()}))

    def training_data(self, cfg: Config, data: LanguageData) -> Callable[[int, torch.Generator], tuple[Tensor, ...]]:
        """Batches of sentences of similar length (:func:`~ebms.data.text.length_windows`)."""
        check_batch_size(cfg, data.size, f"training sentences of {cfg.data.name}")
        return length_windows(data.train, cfg.run.seed)

    def write_model_files(self, run_dir: Path, cfg: Config, model: nn.Module, data: LanguageData) -> list[Path]:
        """``vocab.txt``."""
        return [data.vocab.save(run_dir / "vocab.txt")]

    # -- figures, samples ----------------------------------------------------------------------
    def report(self, cfg: Config, model: nn.Module, data: LanguageData, step: int, *,
               use_ais: bool = False) -> Any:
        if use_ais and self.no_ais:
            raise ConfigError(f"--ais: AIS estimates the normalisers of a TRF; model.kind={cfg.model.kind!r} "
                              f"{self.no_ais}: drop --ais")
        if not data.held_out:
            raise ConfigError("language.test_path: nothing to evaluate: data.name='text' without valid_path or "
                              "test_path; set language.test_path=FILE")
        longest = max(int(x.lengths.max()) for x in data.held_out.values())
        if self.positions and longest > data.max_length:
            raise ConfigError(f"language.max_length: the held-out text has a sentence of {longest} tokens; this "
                              f"{cfg.model.kind} covers lengths up to {data.max_length} (the longest training sentence "
                              f"unless language.max_length says more): train with language.max_length >= {longest}")
        return self.evaluate(cfg, model, data, step, use_ais=use_ais)

    def evaluate(self, cfg: Config, model: nn.Module, data: LanguageData, step: int, *, use_ais: bool) -> Any:
        """The figures of a normalised model: exact perplexity of each held-out split."""
        return normalised_report(cfg, model, data, step)

    def sample(self, cfg: Config, model: nn.Module, data: LanguageData, *, n: int | None = None,
               steps: int | None = None, seed: int | None = None) -> Tensor:
        """``n`` sentences as token ids ``(n, T)``, padding 0 (:meth:`draw`)."""
        n = cfg.eval.n_samples if n is None else n
        g = torch.Generator().manual_seed(cfg.run.seed if seed is None else seed)
        return self.draw(cfg, model, data, n, steps, g)

    def draw(self, cfg: Config, model: Any, data: LanguageData, n: int, steps: int | None,
             g: torch.Generator) -> Tensor:
        """Ancestral draws of a normalised model, cut at :data:`SAMPLE_LIMIT` tokens."""
        with torch.no_grad():
            limit = min(SAMPLE_LIMIT, model.max_length or SAMPLE_LIMIT)
            return model.sample(n, g, max_length=limit, truncate=True).canonical().tokens  # type: ignore[no-any-return]

    def sample_text(self, x: Tensor, data: LanguageData) -> list[str]:
        """The sentences of ``x`` (token ids, padding 0) as text."""
        return data.vocab.to_text(Sequences(x, (x > 0).sum(1)))

    def applier(self, command: str, cfg: Config, model: nn.Module, data: LanguageData) -> Any:
        """``score``: :func:`ebms.apply.text.sentence_scorer` with the run's vocabulary and tokens."""
        from ebms.apply.text import sentence_scorer

        return sentence_scorer(model, data.vocab, kind=cfg.model.kind, lower=self.settings(cfg).lower,
                               progress=cfg.run.progress)


def readers(section: str, name: str) -> list[str]:
    """The configurations that read the key ``section.name`` of a language kind, in words (for the message of
    an unread key)."""
    key = f"{section}.{name}"
    tasks = [t for t in registered() if isinstance(t, LanguageTask)]
    kinds = [k for t in tasks if key in t.keys for k in t.model_kinds]
    out = [f"model.kind = {', '.join(kinds)}"] if kinds else []
    notes = {obj: t.objective_note for t in tasks for obj, keys in t.objective_keys.items() if key in keys}
    out += [f"objective.kind = {obj!r}{note}" for obj, note in notes.items()]
    return out + list(dict.fromkeys(t.optional_keys[key] for t in tasks if key in t.optional_keys))


class NGramTask(LanguageTask):
    """``kn``: a backoff n-gram fitted by counting (module docstring)."""

    model_kinds = ("kn",)
    more_sections: ClassVar[dict[str, Section]] = {"ngram": NGRAM}
    keys = ("ngram.order", "ngram.smoothing", "ngram.discounts")
    bounded_length = False
    no_ais = "is normalised and its perplexity exact"

    def fitted(self, cfg: Config) -> bool:
        return True

    def build_model(self, cfg: Config, data: LanguageData) -> nn.Module:
        n = cfg.sections["ngram"]  # applied from the stored files (no sentence): the checkpoint holds the tables
        return _ngram(data, n.order, "ngram.order", n) if data.size else BackoffNGram.uniform(len(data.vocab), n.order)

    def build_objective(self, cfg: Config, data: LanguageData) -> nn.Module:
        return AutoregressiveNLL()

    def write_model_files(self, run_dir: Path, cfg: Config, model: nn.Module, data: LanguageData) -> list[Path]:
        """``vocab.txt`` and ``model.arpa`` (a whitespace token written ``<U+0020>``)."""
        out = super().write_model_files(run_dir, cfg, model, data)
        assert isinstance(model, BackoffNGram)
        model.to_arpa(run_dir / "model.arpa", data.vocab.tokens)
        return [*out, run_dir / "model.arpa"]

    def draw(self, cfg: Config, model: Any, data: LanguageData, n: int, steps: int | None,
             g: torch.Generator) -> Tensor:
        with torch.no_grad():
            return model.sample(n, g, max_length=SAMPLE_LIMIT).canonical().tokens  # type: ignore[no-any-return]


def autoregressive_objective(objective: str, s: Any) -> nn.Module:
    """The objective named ``objective`` (``ml`` or ``earm``) of an autoregressive LM whose section ``s`` holds
    ``earm_weight``, ``earm_start``, ``earm_truncate`` and ``earm_clip`` (the language and addition tasks)."""
    if objective == "earm":
        return EARM(weight=s.earm_weight, start_step=s.earm_start, truncate=s.earm_truncate, clip=s.earm_clip)
    return AutoregressiveNLL()


class LSTMTask(LanguageTask):
    """``lstm``: :class:`~ebms.models.lm.LSTMLM` trained by ``ml`` or ``earm``."""

    model_kinds = ("lstm",)
    trained_by = ("ml", "earm")
    more_sections: ClassVar[dict[str, Section]] = {"lm": LM}
    keys: ClassVar[tuple[str, ...]] = (*net_keys("lm"), "lm.tie_weights")
    objective_keys: ClassVar[dict[str, tuple[str, ...]]] = {"earm": ("lm.earm_weight", "lm.earm_start",
                                                                     "lm.earm_truncate", "lm.earm_clip")}
    no_ais = "is normalised and its perplexity exact"

    @staticmethod
    def lm(cfg: Config) -> LMSettings:
        """The ``[lm]`` section of ``cfg``."""
        return cast(LMSettings, cfg.sections["lm"])

    def check_kind(self, cfg: Config) -> None:
        super().check_kind(cfg)
        m = self.lm(cfg)
        if "lm.earm_start" in self.reads(cfg) and m.earm_start >= cfg.train.steps:
            raise ConfigError(f"lm.earm_start: E-ARM is switched on after {m.earm_start} steps but the run stops "
                              f"at train.steps={cfg.train.steps}, so it would never start; expected lm.earm_start "
                              f"below train.steps (or objective.kind='ml')")

    def build_model(self, cfg: Config, data: LanguageData) -> nn.Module:
        s = self.lm(cfg)
        return LSTMLM(len(data.vocab), embedding_dim=s.embedding_dim, hidden_size=s.hidden, num_layers=s.layers,
                      dropout=s.dropout, tie_weights=s.tie_weights)

    def build_objective(self, cfg: Config, data: LanguageData) -> nn.Module:
        return autoregressive_objective(cfg.objective.kind, self.lm(cfg))


class TransformerTask(LSTMTask):
    """``transformer``: :class:`~ebms.models.lm.TransformerLM` trained by ``ml`` or ``earm``."""

    model_kinds = ("transformer",)
    keys = (*net_keys("lm"), "lm.heads", "lm.tie_weights")
    positions = True

    def check_kind(self, cfg: Config) -> None:
        super().check_kind(cfg)
        s = self.lm(cfg)
        if s.embedding_dim % s.heads:
            raise ConfigError(f"lm.heads: expected a divisor of lm.embedding_dim={s.embedding_dim}; got {s.heads}")

    def build_model(self, cfg: Config, data: LanguageData) -> nn.Module:
        s = self.lm(cfg)
        return TransformerLM(len(data.vocab), d_model=s.embedding_dim, num_heads=s.heads, num_layers=s.layers,
                             dim_feedforward=s.hidden, dropout=s.dropout, max_length=data.max_length,
                             tie_weights=s.tie_weights)


for _task in (NGramTask(), LSTMTask(), TransformerTask()):
    register(_task)

"""``ebms train`` for sequence tagging: CoNLL-2000 chunking and CoNLL-2002 NER with CRF taggers.

``data.name``: ``conll2000`` (train on ``train.txt``, test on ``test.txt``), ``conll2002-esp`` and
``conll2002-ned`` (train on ``*.train``, test on ``*.testb``; ``*.testa`` is reported too, as
``testa_*``). ``data.root`` is passed to the loaders. The section ``[tagging]`` holds the keys only
these tasks use: ``limit`` keeps the first ``limit`` sentences of every split (for quick runs),
and the model and regularisation keys below.

``model.kind``:

* ``bilstm-crf`` / ``cnn-crf``: :class:`ebms.models.crf_tagger.NeuralCRFTagger` with
  ``tagging.embedding_dim``, ``tagging.hidden = H`` (per LSTM direction / CNN channels),
  ``tagging.layers``, ``tagging.dropout`` and a character CNN when ``tagging.char_dim > 0``. Word
  ids: :class:`ebms.data.vocab.WordVocabulary` (training words seen at least twice, digits mapped
  to ``0``; every other word is ``<unk>``). Decoding is Viterbi under the BIO constraints
  (``I-X`` only after ``B-X``/``I-X``).
* ``feature-crf``: :class:`ebms.models.feature_crf.FeatureCRF` on the attributes of
  ``tagging.features`` (``crfsuite-chunking`` for CoNLL-2000, ``crfsuite-ner`` for CoNLL-2002 when
  empty), state weights only for observed attribute-tag pairs; transitions for the observed tag
  bigrams on CoNLL-2000 (CRFsuite's default) and for every tag pair on CoNLL-2002 (the
  sklearn-crfsuite tutorial's ``all_possible_transitions=True``). Attributes are extracted one
  sentence at a time into an :class:`~ebms.structured.features.EncodedCorpus` (no padding); the
  trainer's data are row ids into it. A full batch with ``objective.kind = crf`` (the recipes'
  L-BFGS / OWL-QN) takes the compact path of :func:`~ebms.fit.fit_feature_crf`
  (one cached CSR design matrix; the parameters are the observed weights only).

``objective.kind``: ``crf`` (conditional ML, :class:`~ebms.objectives.ConditionalML`)
or ``crf-nce`` (:class:`~ebms.objectives.ConditionalNCE` with ``objective.nu`` noise
sequences from the tag-bigram chain of the training tags). Regularisation follows CRFsuite's
corpus objective ``sum_i -log p(y_i|x_i) + c1 ||w||_1 + c2 ||w||^2`` divided by the ``N`` training
sentences (``tagging.c1``, ``tagging.c2``): the loss carries ``(c2 / N) ||w||^2``; ``c1 > 0`` needs
``train.optimizer = "lbfgs"``,
which then runs OWL-QN with ``l1 = c1 / N`` (one trainer step = one quasi-Newton iteration; use
``train.batch_size`` = all sentences for CRFsuite's full-batch training).

A run keeps the maps it fitted to the training sentences in ``vocab.json`` (the tag list, and the
word and character lists of the neural taggers or the attribute list of the feature CRF, with the
sha256 of the training set as encoded); ``eval`` and a resume use them, and refuse training files
that no longer encode to the recorded sentences (``data.root``: restore them, or train a new run).
A ``[tagging]`` key set away from its default that the model kind does not read is refused
(``features`` is the feature CRF's, the network sizes the neural taggers').

Test figures (``eval.json``): chunk ``precision``, ``recall``, ``f1`` (conlleval, percent) and
token ``accuracy`` (percent); for NER also ``token_f1``: the support-weighted token F1 over the
training tags but ``O`` (:func:`ebms.metrics.tagging.token_f1`), in percent, i.e. 100 x the
sklearn-crfsuite tutorial's figure (:func:`ebms.metrics.tagger_eval.evaluate_tagger`).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from ebms.cli._config_rules import COUNT, DROPOUT, NONNEG, Rule
from ebms.cli._unread_keys import refuse_unread
from ebms.cli.build import resolve
from ebms.cli.config import Config, ConfigError, ModelConfig
from ebms.cli.tasks import StructuredTask, TaskData, register, registered
from ebms.data.conll import CONLL_NAMES, MAX_CONLL_BYTES, Sentence, load_conll, tag_names, to_iob2
from ebms.data.vocab import WordVocabulary
from ebms.metrics.tagger_eval import evaluate_tagger
from ebms.models.crf_tagger import NeuralCRFTagger
from ebms.models.crf_transducer import POTENTIALS, CRFTransducer
from ebms.objectives import BeamEarlyUpdate, ConditionalML, ConditionalNCE, MonteCarloNLL, TagBigramNoise
from ebms.objectives.conditional_rows import CorpusRowsObjective
from ebms.objectives.feature_crf import FeatureCRFLikelihood
from ebms.objectives.transducer import PROPOSALS
from ebms.structured.features import AttributeVocabulary, EncodedCorpus
from ebms.structured.linear_chain import bio_allowed_transitions
from ebms.train.owlqn import OWLQN
from ebms.train.run_files import (
    changed_data,
    dump_json,
    fingerprint,
    stored_json,
    stored_strings,
    stored_word_vocabulary,
)

__all__ = ["FeatureCRFTask", "NeuralTaggingTask", "TaggingSettings", "TaggingTask", "TransducerTaggingTask"]

#: each ``objective.kind``: does it draw noise (``crf-nce``: a whole ``nu``, no line search, no L1/L2 terms)?
DRAWS_NOISE = {"crf": False, "crf-nce": True}
#: the CRF transducer's ``objective.kind`` values: beam search with early updates, Monte Carlo NLL.
TRANSDUCER_OBJECTIVES = ("early-update", "monte-carlo")
DEFAULT_FEATURES = {"conll2000": "crfsuite-chunking", "conll2002-esp": "crfsuite-ner", "conll2002-ned": "crfsuite-ner"}
#: sentences per length-sorted chunk in a full-batch (L-BFGS) pass: fewer, larger chunks pay the
#: per-call cost of the model (e.g. FeatureCRF's masked weights) less often; 2048 halved the time
#: of a CoNLL-2000 pass against 512.
FULL_BATCH_CHUNK = 2048
#: sentences per length-sorted chunk when decoding.
DECODE_CHUNK = 512
#: the run file of the fitted maps (module docstring).
VOCAB_FILE, VOCAB_FORMAT = "vocab.json", "ebms-tagging-vocabulary"


@dataclass
class _Split:
    """A test split: padded inputs ``(N, T, ...)`` (neural taggers), or the attribute vectors
    without padding (feature CRF; padded per decoding chunk), with the lengths and gold tags."""

    inputs: tuple[Tensor, ...] | EncodedCorpus
    lengths: Tensor
    gold: list[list[str]]


def _split(sents: list[Sentence], inputs: tuple[Tensor, ...] | EncodedCorpus) -> _Split:
    return _Split(inputs, torch.tensor([len(s) for s in sents], dtype=torch.long), [s.tags for s in sents])


def _load_split(cfg: Config, split: str, limit: int | None) -> list[Sentence]:
    max_bytes = MAX_CONLL_BYTES if cfg.data.max_mb is None else int(cfg.data.max_mb * 2**20)
    try:
        sents = load_conll(cfg.data.name, split, cfg.data.root, max_bytes=max_bytes)
    except FileNotFoundError as e:
        raise ConfigError(f"data.name={cfg.data.name!r}: {e}") from None
    return sents if limit is None else sents[:limit]


@dataclass
class TaggingSettings:
    """``[tagging]``: the CoNLL tasks' own keys."""

    features: str = ""
    limit: int | None = None
    embedding_dim: int = 100
    char_dim: int = 0
    hidden: int = 100
    layers: int = 1
    dropout: float = 0.0
    c1: float = 0.0
    c2: float = 0.0
    beam: int = 8
    mc_samples: int = 8
    mc_proposal: str = "model"
    potentials: str = "raw"


class TaggingTask(StructuredTask[TaggingSettings]):
    """CRF taggers on CoNLL-2000 / CoNLL-2002 (module docstring): what every kind shares; each ``model.kind``
    is a subclass (:class:`NeuralTaggingTask`, :class:`FeatureCRFTask`)."""

    data_names = CONLL_NAMES
    objective_kinds = tuple(DRAWS_NOISE)
    applies = ("tag",)
    keys: ClassVar[tuple[str, ...]] = ()  #: the ``[tagging]`` keys this kind reads
    reads: ClassVar[tuple[str, ...]] = ("word",)  #: the columns of a token its encoding reads
    section = "tagging"
    settings_type = TaggingSettings
    rules: ClassVar[dict[str, Rule]] = {
        "features": Rule(names="'' (the data set's usual template) or an attribute template name of "
                               "ebms.structured.features"),
        "limit": COUNT, "embedding_dim": COUNT, "char_dim": NONNEG, "hidden": COUNT, "layers": COUNT,
        "dropout": DROPOUT, "c1": NONNEG, "c2": NONNEG, "beam": COUNT, "mc_samples": COUNT,
        "mc_proposal": Rule(names="'model' (the transducer's step-wise softmax) or 'uniform'"),
        "potentials": Rule(names="'raw' (design 1) or 'log_softmax' (design 2)"),
    }
    moved: ClassVar[dict[str, str]] = {
        "data.features": "features", "data.limit": "limit", "model.embedding_dim": "embedding_dim",
        "model.char_dim": "char_dim", "model.layers": "layers", "model.dropout": "dropout",
        "objective.c1": "c1", "objective.c2": "c2",
    }

    # -- configuration ------------------------------------------------------------------------
    def check_names(self, cfg: Config) -> None:
        s = self.settings(cfg)
        if s.features:
            from ebms.structured.features import FEATURE_SETS

            resolve(FEATURE_SETS, s.features, "tagging.features")
        resolve(dict.fromkeys(PROPOSALS), s.mc_proposal, "tagging.mc_proposal")
        resolve(dict.fromkeys(POTENTIALS), s.potentials, "tagging.potentials")

    def check(self, cfg: Config) -> None:
        s, o = self.settings(cfg), cfg.objective
        _refuse_model_hidden(cfg)
        noise = DRAWS_NOISE[o.kind]
        if noise and not (o.nu >= 1 and float(o.nu).is_integer()):
            raise ConfigError(f"objective.nu: expected a whole number >= 1 of noise sequences per sentence; got {o.nu}")
        if noise and cfg.train.optimizer == "lbfgs":
            raise ConfigError("train.optimizer: crf-nce draws fresh noise sequences at every evaluation, so a "
                              "line search would compare different objectives; expected 'adam' or 'sgd'; "
                              "got 'lbfgs'")
        if noise and (s.c1 > 0 or s.c2 > 0):
            raise ConfigError(f"tagging.c1/c2: the L1/L2 terms belong to the crf objective; crf-nce takes "
                              f"none (use train.weight_decay); got c1={s.c1}, c2={s.c2}")
        if s.c1 > 0 and cfg.train.optimizer != "lbfgs":
            raise ConfigError(f"tagging.c1: an L1 term needs train.optimizer='lbfgs' (OWL-QN); "
                              f"got train.optimizer={cfg.train.optimizer!r}")
        refuse_unread("tagging", s, self.keys, f"model.kind={cfg.model.kind!r}", _readers)

    # -- StructuredTask -----------------------------------------------------------------------
    def load(self, cfg: Config, *, stored: Mapping[str, bytes] | None = None) -> TaskData:
        """Training tensors and test splits; with ``stored`` (a trained run's files) the tag, word,
        character or attribute lists it was trained with, the training set checked against them."""
        s = self.settings(cfg)
        was = stored_json(stored, VOCAB_FILE, VOCAB_FORMAT) if stored else None
        self.check_names(cfg)
        self.check(cfg)
        train = _load_split(cfg, "train", s.limit)
        if not train:
            raise ConfigError(f"tagging.limit: expected at least 1 training sentence; got {s.limit}")
        splits = {"test": _load_split(cfg, "test" if cfg.data.name == "conll2000" else "testb", s.limit)}
        if cfg.data.name != "conll2000":
            splits["testa"] = _load_split(cfg, "testa", s.limit)
        gold_train = [to_iob2(s.tags) for s in train]
        tags = tag_names(gold_train) if was is None else stored_strings(was, "tags", VOCAB_FILE)
        lengths = torch.tensor([len(s) for s in train], dtype=torch.long)
        try:
            y = AttributeVocabulary([], tags).encode_tags(gold_train)  # (N, max length), padded with 0
        except ValueError:  # a training tag the stored list lacks
            raise changed_data("data.root", f"the {cfg.data.name} training sentences", VOCAB_FILE) from None
        info: dict[str, Any] = {"tags": tags, "n_train": len(train)}
        x, encode = self.encoder(cfg, was, train, y, lengths, info)
        info["encode"] = encode  # the test split's encoding, also that of `ebms tag`
        if was is not None and was.get("train_sha256") != info["train_sha256"]:  # no longer the recorded sentences
            raise changed_data("data.root", f"the {cfg.data.name} training sentences", VOCAB_FILE)
        test = {k: _split(v, encode(v)) for k, v in splits.items() if v}
        return TaskData(train=(*x, y, lengths), test=test, info=info, name=cfg.data.name)

    def load_applied(self, cfg: Config, stored: dict[str, bytes]) -> TaskData:
        """The stored maps and the encoding of :meth:`encoder` with no training sentence (``ebms tag``)."""
        was, none = stored_json(stored, VOCAB_FILE, VOCAB_FORMAT), torch.zeros(0, dtype=torch.long)
        info: dict[str, Any] = {"tags": stored_strings(was, "tags", VOCAB_FILE), "n_train": 0}
        info["encode"] = self.encoder(cfg, was, [], none.view(0, 0), none, info)[1]
        return TaskData(train=(), test={}, info=info, name=cfg.data.name)

    @abc.abstractmethod
    def encoder(self, cfg: Config, was: Any, train: list[Sentence], y: Tensor, lengths: Tensor, info: dict[str, Any]
                ) -> tuple[tuple[Tensor, ...], Callable[[list[Sentence]], Any]]:
        """The training inputs and how to encode test sentences, with the maps fitted to ``train`` (or stored
        in ``was``) and ``train_sha256`` written to ``info``."""

    def run_files(self, cfg: Config, data: TaskData) -> dict[str, bytes]:
        """``vocab.json``: the tag list, the word and character (or attribute) lists, the training fingerprint."""
        return {VOCAB_FILE: dump_json({"format": VOCAB_FORMAT, "version": 1, **data.info["maps"],
                                       "train_sha256": data.info["train_sha256"]})}

    def inner_objective(self, cfg: Config, data: TaskData, chunk: int | None) -> nn.Module:
        """Conditional ML (``crf``, with the L2 term ``c2 / N``) or conditional NCE (``crf-nce``) of padded rows."""
        s, info = self.settings(cfg), data.info
        if DRAWS_NOISE[cfg.objective.kind]:
            *_, y, lengths = data.train
            return ConditionalNCE(TagBigramNoise.fit(y, lengths, len(info["tags"])), nu=int(cfg.objective.nu),
                                  chunk_size=chunk)
        return ConditionalML(l2=s.c2 / data.size, chunk_size=chunk)

    def build_optimizer(self, cfg: Config,
                        data: TaskData) -> Callable[[list[dict[str, Any]]], torch.optim.Optimizer] | None:
        return partial(OWLQN, l1=self.settings(cfg).c1 / data.size) if cfg.train.optimizer == "lbfgs" else None

    def decoding(self, cfg: Config, model: nn.Module) -> dict[str, Any]:
        """The keywords of the model's decoding calls: BIO-constrained Viterbi for the neural taggers."""
        return {"constrained": True} if isinstance(model, NeuralCRFTagger) else {}

    def applier(self, command: str, cfg: Config, model: nn.Module, data: TaskData) -> Any:
        """``ebms tag``: :class:`ebms.apply.tagging.SentenceTagger` with the run's maps and ``eval``'s decoding."""
        from ebms.apply.tagging import SentenceTagger

        return SentenceTagger(model, data.info["tags"], data.info["encode"], reads=self.reads,
                              what=f"model.kind={cfg.model.kind!r}", model_kwargs=self.decoding(cfg, model),
                              batch_size=DECODE_CHUNK, progress=cfg.run.progress)

    def evaluate(self, cfg: Config, model: nn.Module, data: TaskData) -> dict[str, float]:
        tags = data.info["tags"]
        labels = None if cfg.data.name == "conll2000" else [t for t in tags if t != "O"]
        kw = self.decoding(cfg, model)
        out: dict[str, float] = {}
        for name, split in data.test.items():
            prefix = "" if name == "test" else f"{name}_"
            figures = evaluate_tagger(model, split.inputs, split.lengths, split.gold, tags, token_f1_labels=labels,
                                      chunk_size=DECODE_CHUNK, model_kwargs=kw)
            out.update({f"{prefix}{k}": v for k, v in figures.items()})
        return out


class NeuralTaggingTask(TaggingTask):
    """``bilstm-crf`` / ``cnn-crf``: :class:`~ebms.models.crf_tagger.NeuralCRFTagger` on word (and character) ids."""

    model_kinds: ClassVar[tuple[str, ...]] = ("bilstm-crf", "cnn-crf")
    keys: ClassVar[tuple[str, ...]] = ("limit", "embedding_dim", "char_dim", "hidden", "layers", "dropout", "c1", "c2")
    encoders: ClassVar[dict[str, str]] = {"bilstm-crf": "bilstm", "cnn-crf": "cnn"}  #: each kind's encoder

    def encoder(self, cfg: Config, was: Any, train: list[Sentence], y: Tensor, lengths: Tensor, info: dict[str, Any]
                ) -> tuple[tuple[Tensor, ...], Callable[[list[Sentence]], Any]]:
        words = WordVocabulary(train) if was is None else stored_word_vocabulary(was, VOCAB_FILE, chars=True)
        use_chars = self.settings(cfg).char_dim > 0
        info.update(vocab_size=len(words.words), char_vocab_size=len(words.chars) if use_chars else None)
        x = words.encode(train, chars=use_chars)
        info["maps"] = {"tags": info["tags"], "words": words.words, "chars": words.chars}
        info["train_sha256"] = fingerprint(*x, y, lengths)
        return x, lambda sents: words.encode(sents, chars=use_chars)

    def build_model(self, cfg: Config, data: TaskData) -> nn.Module:
        s, info = self.settings(cfg), data.info
        allowed, allowed_start = bio_allowed_transitions(info["tags"])
        return NeuralCRFTagger(info["vocab_size"], len(info["tags"]), embedding_dim=s.embedding_dim, hidden=s.hidden,
                               encoder=self.encoders[cfg.model.kind], layers=s.layers, dropout=s.dropout,
                               char_vocab_size=info["char_vocab_size"], char_dim=max(s.char_dim, 1),
                               allowed=allowed, allowed_start=allowed_start)

    def build_objective(self, cfg: Config, data: TaskData) -> nn.Module:
        return self.inner_objective(cfg, data, FULL_BATCH_CHUNK if cfg.train.optimizer == "lbfgs" else None)


class FeatureCRFTask(TaggingTask):
    """``feature-crf``: :class:`~ebms.models.feature_crf.FeatureCRF` on the attributes of ``tagging.features``."""

    model_kinds = ("feature-crf",)
    keys = ("features", "limit", "c1", "c2")
    reads = ("word", "POS")  # both attribute templates read the word and its POS tag

    def applier(self, command: str, cfg: Config, model: nn.Module, data: TaskData) -> Any:
        tagger = super().applier(command, cfg, model, data)
        tagger.what += f" (tagging.features={self.settings(cfg).features or DEFAULT_FEATURES[cfg.data.name]!r})"
        return tagger

    def encoder(self, cfg: Config, was: Any, train: list[Sentence], y: Tensor, lengths: Tensor, info: dict[str, Any]
                ) -> tuple[tuple[Tensor, ...], Callable[[list[Sentence]], Any]]:
        """Row ids into the unpadded attribute corpus (one sentence at a time); test sentences as their own."""
        from ebms.structured.features import FEATURE_SETS, observed_transitions

        s, tags = self.settings(cfg), info["tags"]
        extract: Callable[[Sentence], list[dict[str, float]]] = FEATURE_SETS[
            s.features or DEFAULT_FEATURES[cfg.data.name]]
        # One pass, one sentence at a time: the attribute dicts are never all held in memory,
        # and the corpus is kept without padding (see CorpusRowsObjective).
        vocab = AttributeVocabulary([] if was is None else stored_strings(was, "attributes", VOCAB_FILE)[1:])
        corpus = vocab.encode_flat((extract(s) for s in train), grow=was is None)
        info.update(n_attributes=len(vocab), observed=corpus.observed_pairs(y, len(vocab), len(tags)),
                    observed_transitions=(observed_transitions(y, lengths, len(tags))
                                          if cfg.data.name == "conll2000" else None),
                    corpus=corpus)
        info["maps"] = {"tags": tags, "attributes": vocab.attributes}
        info["train_sha256"] = fingerprint(corpus.ids, corpus.values, corpus.offsets, corpus.lengths, y, lengths)
        return (torch.arange(len(train)),), lambda sents: vocab.encode_flat(extract(s) for s in sents)

    def build_model(self, cfg: Config, data: TaskData) -> nn.Module:
        from ebms.models.feature_crf import FeatureCRF

        info = data.info
        return FeatureCRF(info["n_attributes"], len(info["tags"]), observed=info["observed"],
                          observed_transitions=info["observed_transitions"])

    def build_objective(self, cfg: Config, data: TaskData) -> nn.Module:
        """``crf``: the likelihood of the whole corpus (one cached CSR pass); else padded rows per batch."""
        s, info = self.settings(cfg), data.info
        if not DRAWS_NOISE[cfg.objective.kind]:
            return FeatureCRFLikelihood.from_corpus(info["corpus"], data.train[1], n_attributes=info["n_attributes"],
                                                    l2=s.c2 / data.size, bucket_size=FULL_BATCH_CHUNK)
        chunk = FULL_BATCH_CHUNK if cfg.train.optimizer == "lbfgs" else None
        return CorpusRowsObjective(info["corpus"], self.inner_objective(cfg, data, chunk))


class TransducerTaggingTask(NeuralTaggingTask):
    """``crf-transducer``: :class:`~ebms.models.CRFTransducer` (unbounded tag history, no dynamic program) on
    word (and character) ids, trained by beam search with early updates (``early-update``,
    :class:`~ebms.objectives.BeamEarlyUpdate` of width ``tagging.beam``) or by the Monte Carlo NLL
    (``monte-carlo``, :class:`~ebms.objectives.MonteCarloNLL` with ``tagging.mc_samples`` draws from
    ``tagging.mc_proposal``); decoded by beam search of width ``tagging.beam`` under the BIO mask."""

    model_kinds = ("crf-transducer",)
    objective_kinds = TRANSDUCER_OBJECTIVES
    keys = ("limit", "embedding_dim", "char_dim", "hidden", "layers", "dropout", "beam", "mc_samples", "mc_proposal",
            "potentials")

    def check(self, cfg: Config) -> None:
        s = self.settings(cfg)
        _refuse_model_hidden(cfg)
        if cfg.objective.kind == "monte-carlo" and cfg.train.optimizer == "lbfgs":
            raise ConfigError("train.optimizer: monte-carlo draws fresh tag sequences at every evaluation, so a "
                              "line search would compare different objectives; expected 'adam' or 'sgd'; got 'lbfgs'")
        unread = ("mc_samples", "mc_proposal") if cfg.objective.kind == "early-update" else ()
        refuse_unread("tagging", s, tuple(k for k in self.keys if k not in unread),
                      f"model.kind={cfg.model.kind!r} with objective.kind={cfg.objective.kind!r}", _readers)

    def build_model(self, cfg: Config, data: TaskData) -> nn.Module:
        s, info = self.settings(cfg), data.info
        allowed, allowed_start = bio_allowed_transitions(info["tags"])
        return CRFTransducer(info["vocab_size"], len(info["tags"]), potentials=s.potentials,
                             embedding_dim=s.embedding_dim, hidden=s.hidden, kind="bilstm", layers=s.layers,
                             dropout=s.dropout, char_vocab_size=info["char_vocab_size"], char_dim=max(s.char_dim, 1),
                             allowed=allowed, allowed_start=allowed_start)

    def build_objective(self, cfg: Config, data: TaskData) -> nn.Module:
        s = self.settings(cfg)
        if cfg.objective.kind == "monte-carlo":
            return MonteCarloNLL(s.mc_samples, proposal=s.mc_proposal)
        return BeamEarlyUpdate(s.beam)

    def decoding(self, cfg: Config, model: nn.Module) -> dict[str, Any]:
        """Beam search of width ``tagging.beam`` (the BIO mask is the model's own)."""
        return {"beam": self.settings(cfg).beam}


def _refuse_model_hidden(cfg: Config) -> None:
    """``model.hidden`` is the MLP's; every CoNLL tagger takes ``tagging.hidden``."""
    if cfg.model.hidden != ModelConfig().hidden:
        raise ConfigError(f"model.hidden: the MLP's hidden widths; the CoNLL taggers' width is tagging.hidden "
                          f"(renamed); got model.hidden={cfg.model.hidden}")


def _readers(key: str) -> list[str]:
    kinds = (k for t in registered() if isinstance(t, TaggingTask) and key in t.keys for k in t.model_kinds)
    monte_carlo = " and objective.kind = monte-carlo" if key.startswith("mc_") else ""
    return [f"model.kind = {', '.join(kinds)}{monte_carlo}"]


register(NeuralTaggingTask())
register(FeatureCRFTask())
register(TransducerTaggingTask())

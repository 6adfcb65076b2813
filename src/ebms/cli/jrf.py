"""``ebms train`` for semi-supervised chunking with a joint random field (JRF) on CoNLL-2000.

``data.name = "conll2000"`` with ``model.kind = "jrf"`` is served here (the other CoNLL-2000
models are :mod:`ebms.cli.tagging`'s). A seeded draw (``run.seed``) keeps the tags of
``jrf.label_fraction`` of the training sentences; the others keep their words only. ``jrf.limit``
keeps the first N sentences of each split (quick runs). Word ids:
:class:`~ebms.data.vocab.WordVocabulary` over the training words (``jrf.min_count`` occurrences for an
own id, digits mapped to ``0``; id 0 is the padding and the noise LM's sentence boundary).

The model (:class:`~ebms.models.jrf.JRF`): word embedding ``jrf.embed``, a BiLSTM of ``jrf.hidden``
units per direction, linear node potentials and transitions; its length law is the training
sentences' length counts + 0.5 (a length of no training sentence keeps some mass, so a noise draw of
that length is not an impossible positive).

``objective.kind``:

* ``jrf`` (:class:`~ebms.objectives.jrf.JRFObjective`): every step draws ``train.batch_size``
  sentences (at least 2), ``batch_size - batch_size // 2`` labelled and ``batch_size // 2`` unlabelled
  ones (with replacement, from the trainer's generator); loss =
  CRF NLL on the labelled ones + ``jrf.alpha`` x dynamic NCE on the unlabelled ones, with
  ``objective.nu`` noise sentences per sentence from an :class:`~ebms.models.lm.LSTMLM`
  (``jrf.noise_hidden`` units) that is first fitted by likelihood to the unlabelled text for
  ``jrf.noise_steps`` steps (:func:`~ebms.fit.pretrain_noise_lm`) and then trained with the
  JRF. :math:`\\zeta` starts where the marginal matches the noise on 2000 unlabelled sentences
  (:func:`~ebms.fit.init_log_z`) and is learned at ``jrf.zeta_lr`` (the rest at ``train.lr``).
* ``crf``: the supervised baseline, the same network trained by the CRF's likelihood on
  ``train.batch_size`` labelled sentences per step (``JRFObjective(None, alpha=0)``).

A run keeps its word and tag lists in ``vocab.json`` with the counts of its length law and the sha256
of the training set as encoded; ``eval`` and a resume use them and refuse training files that no
longer encode to the recorded sentences (``data.root``); ``ebms tag`` builds the model from them
alone (a run written before the counts were kept reads its training files). A training sentence longer than :data:`MAX_SENTENCE` tokens is
refused (the length law and the noise draws grow with the longest sentence: a file without the
blank lines between sentences reads as one). A ``[jrf]`` key set away from its default that the
objective does not read is refused (``alpha``, ``noise_*``, ``zeta_lr`` are the JRF objective's).

``eval``: chunk precision, recall, F1 (conlleval) and token accuracy of the JRF's CRF on the test
set (Viterbi), in percent; the final model is scored (no development-set selection: see
``benchmarks/jrf_conll.py`` for that, and for self-training).

``ebms score`` and ``ebms rescore`` take a JRF run as a language model (:func:`ebms.apply.text.sentence_scorer`):
its marginal over tag sequences :math:`\\log\\pi_l - E(x) - \\zeta_l`, with the :math:`\\zeta_l` that DNCE learned
(the TRF's "training zeta"), the words normalised as in training (digits to ``0``, case kept; an unknown word is
``<unk>``), lengths ``1..L`` (``L`` the longest training sentence). A run of ``objective.kind = "crf"`` never
trains :math:`\\zeta` (no log Z_l table: it stays at its initial value) and is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from ebms.cli._config_rules import COUNT, FRACTION, NONNEG, POS, Rule
from ebms.cli._unread_keys import refuse_unread
from ebms.cli.config import Config, ConfigError, ModelConfig
from ebms.cli.tasks import StructuredTask, TaskData, register
from ebms.data.batch_streams import tagged_batches
from ebms.data.conll import MAX_CONLL_BYTES, Sentence, load_conll2000, tag_names
from ebms.data.vocab import WordVocabulary
from ebms.errors import DataError
from ebms.fit import init_log_z, pretrain_noise_lm
from ebms.metrics.tagger_eval import evaluate_tagger
from ebms.models.jrf import JRF
from ebms.models.lm import LSTMLM
from ebms.objectives.jrf import JRFObjective
from ebms.sequences import Sequences
from ebms.train.run_files import (
    changed_data,
    dump_json,
    fingerprint,
    stored_json,
    stored_strings,
    stored_word_vocabulary,
)

__all__ = ["JRFSettings", "JRFTask"]

#: unlabelled sentences :func:`~ebms.fit.init_log_z` averages over.
ZETA_INIT_SENTENCES = 2000
#: sentences decoded at once in ``eval``.
DECODE_CHUNK = 512
#: the longest training sentence the JRF takes (its length law and noise draws grow with it).
MAX_SENTENCE = 1024
#: the run file of the word and tag lists (module docstring).
VOCAB_FILE, VOCAB_FORMAT = "vocab.json", "ebms-jrf-vocabulary"
#: the ``[jrf]`` keys each objective reads.
COMMON_KEYS = ("label_fraction", "limit", "min_count", "embed", "hidden")
OBJECTIVE_KEYS = {"jrf": (*COMMON_KEYS, "alpha", "noise_hidden", "noise_steps", "zeta_lr"), "crf": COMMON_KEYS}
#: each ``objective.kind`` and whether it also learns from unlabelled sentences (``jrf``: half of each batch).
SEMI_SUPERVISED = {"jrf": True, "crf": False}


@dataclass
class JRFSettings:
    """``[jrf]``: the semi-supervised JRF task's own keys."""

    label_fraction: float = 0.1
    limit: int | None = None
    min_count: int = 2
    embed: int = 50
    hidden: int = 64
    alpha: float = 1.0
    noise_hidden: int = 64
    noise_steps: int = 200
    zeta_lr: float = 0.05


def _load(cfg: Config, split: str, limit: int | None) -> list[Sentence]:
    max_bytes = MAX_CONLL_BYTES if cfg.data.max_mb is None else int(cfg.data.max_mb * 2**20)
    try:
        sents = load_conll2000(split, cfg.data.root, max_bytes=max_bytes)
    except FileNotFoundError as e:
        raise ConfigError(f"data.name={cfg.data.name!r}: {e}") from None
    return sents if limit is None else sents[:limit]


def _tag_ids(sents: list[Sentence], names: list[str], width: int) -> Tensor:
    index = {t: i for i, t in enumerate(names)}
    y = torch.zeros(len(sents), width, dtype=torch.long)
    for i, s in enumerate(sents):
        y[i, : len(s)] = torch.tensor([index[t] for t in s.tags], dtype=torch.long)
    return y


class JRFTask(StructuredTask[JRFSettings]):
    """Semi-supervised chunking with a JRF on CoNLL-2000 (see the module docstring)."""

    data_names = ("conll2000",)
    model_kinds = ("jrf",)
    objective_kinds = tuple(SEMI_SUPERVISED)
    applies = ("tag", "score")
    routes_by_kind = True
    section = "jrf"
    settings_type = JRFSettings
    rules: ClassVar[dict[str, Rule]] = {
        "label_fraction": FRACTION, "limit": COUNT, "min_count": COUNT, "embed": COUNT, "hidden": COUNT,
        "alpha": POS, "noise_hidden": COUNT, "noise_steps": NONNEG, "zeta_lr": NONNEG,
    }
    defaults: ClassVar[dict[str, Any]] = {"train.batch_size": 64, "train.lr": 5e-3, "train.grad_clip": 5.0,
                                          "train.steps": 1000}

    def check(self, cfg: Config) -> None:
        if cfg.model.hidden != ModelConfig().hidden:
            raise ConfigError(f"model.hidden: the MLP's hidden widths; the JRF's BiLSTM width is jrf.hidden; "
                              f"got model.hidden={cfg.model.hidden}")
        if cfg.train.optimizer == "lbfgs":
            raise ConfigError("train.optimizer: the JRF task draws fresh batches (and noise) at every step, so a "
                              "line search would compare different objectives; expected 'adam' or 'sgd'; got 'lbfgs'")
        if SEMI_SUPERVISED[cfg.objective.kind] and not (cfg.objective.nu >= 1 and float(cfg.objective.nu).is_integer()):
            raise ConfigError(f"objective.nu: expected a whole number >= 1 of noise sentences per sentence; "
                              f"got {cfg.objective.nu}")
        refuse_unread("jrf", self.settings(cfg), OBJECTIVE_KEYS.get(cfg.objective.kind, ()),
                      f"objective.kind={cfg.objective.kind!r}",
                      lambda key: [f"objective.kind = {', '.join(k for k, keys in OBJECTIVE_KEYS.items() if key in keys)}"])

    # -- data ---------------------------------------------------------------------------------
    def load(self, cfg: Config, *, stored: Mapping[str, bytes] | None = None) -> TaskData:
        """Labelled and unlabelled training rows and the test split; with ``stored`` (a trained run's
        files) its word and tag lists, the training set checked against them."""
        s = self.settings(cfg)
        self.check(cfg)
        was = stored_json(stored, VOCAB_FILE, VOCAB_FORMAT) if stored else None
        train, test = _load(cfg, "train", s.limit), _load(cfg, "test", s.limit)
        longest = max((len(x) for x in train), default=0)
        if longest > MAX_SENTENCE:
            raise DataError(f"data.root: the longest {cfg.data.name} training sentence has {longest} tokens; the JRF "
                            f"takes at most {MAX_SENTENCE} (its length law and noise draws grow with it): is the blank "
                            f"line between sentences missing? (jrf.limit keeps the first N sentences)")
        n_lab = round(s.label_fraction * len(train))
        semi = SEMI_SUPERVISED[cfg.objective.kind]
        if n_lab < 1 or (semi and n_lab >= len(train)):
            raise ConfigError(f"jrf.label_fraction: {s.label_fraction} of {len(train)} training sentences labels "
                              f"{n_lab}; expected at least 1 labelled"
                              + (" and 1 unlabelled (objective.kind = 'jrf')" if semi else "")
                              + " sentence: raise jrf.limit or change jrf.label_fraction")
        names = tag_names(s.tags for s in train) if was is None else stored_strings(was, "tags", VOCAB_FILE)
        vocab = WordVocabulary(train, min_count=s.min_count) if was is None else stored_word_vocabulary(was, VOCAB_FILE, chars=False)
        (words,) = vocab.encode(train, chars=False)
        lengths = torch.tensor([len(x) for x in train], dtype=torch.long)
        try:
            tags = _tag_ids(train, names, words.shape[1])
        except KeyError:  # a training tag the stored list lacks
            raise changed_data("data.root", f"the {cfg.data.name} training sentences", VOCAB_FILE) from None
        train_sha256 = fingerprint(words, tags, lengths)
        if was is not None and was.get("train_sha256") != train_sha256:
            raise changed_data("data.root", f"the {cfg.data.name} training sentences", VOCAB_FILE)
        perm = torch.randperm(len(train), generator=torch.Generator().manual_seed(cfg.run.seed))
        lab, unl = perm[:n_lab].sort().values, perm[n_lab:].sort().values
        (test_words,) = vocab.encode(test, chars=False)
        test_split = {"words": test_words, "lengths": torch.tensor([len(x) for x in test], dtype=torch.long),
                      "gold": [x.tags for x in test]}
        counts = torch.bincount(lengths, minlength=int(lengths.max()) + 1)[1:]
        maps = {"tags": names, "words": vocab.words, "train_sha256": train_sha256}
        if was is None or "length_counts" in was:  # a run from before the stored length law keeps its file
            maps["length_counts"] = counts.tolist()
        info = {"tags": names, "words": vocab.words, "vocab_size": len(vocab.words), "max_length": int(lengths.max()),
                "length_counts": counts, "n_train": len(train), "unlabelled": (words[unl], lengths[unl]),
                "encode": lambda sents: vocab.encode(sents, chars=False),  # the test split's, also `ebms tag`'s
                "maps": maps}
        return TaskData(train=(words[lab], tags[lab], lengths[lab]), test=test_split, info=info, name=cfg.data.name)

    def load_applied(self, cfg: Config, stored: dict[str, bytes]) -> TaskData | None:
        """The stored word and tag lists and length law, no sentence read (``ebms tag``); ``None``: a run whose
        file predates the length law (the JRF's ``L`` is its longest training sentence)."""
        was = stored_json(stored, VOCAB_FILE, VOCAB_FORMAT)
        if not isinstance(counts := was.get("length_counts"), list) or not counts:
            return None
        vocab = stored_word_vocabulary(was, VOCAB_FILE, chars=False)
        info = {"tags": stored_strings(was, "tags", VOCAB_FILE), "words": vocab.words, "vocab_size": len(vocab.words),
                "max_length": len(counts), "length_counts": torch.tensor(counts, dtype=torch.long), "n_train": 0,
                "encode": lambda sents: vocab.encode(sents, chars=False)}
        return TaskData(train=(), test={}, info=info, name=cfg.data.name)

    def run_files(self, cfg: Config, data: TaskData) -> dict[str, bytes]:
        """``vocab.json``: the tag and word lists, the training sentences' length counts (lengths ``1..L``) and the
        training fingerprint."""
        return {VOCAB_FILE: dump_json({"format": VOCAB_FORMAT, "version": 1, **data.info["maps"]})}

    def training_data(self, cfg: Config, data: TaskData) -> Callable[[int, torch.Generator], Any]:
        """Tagged sentences (``crf``), or half of them unlabelled (``jrf``): :func:`~ebms.data.tagged_batches`."""
        if not SEMI_SUPERVISED[cfg.objective.kind]:
            return tagged_batches(*data.train)
        if cfg.train.batch_size < 2:
            raise ConfigError(f"train.batch_size: objective.kind = 'jrf' splits each batch into labelled and "
                              f"unlabelled halves; expected at least 2; got {cfg.train.batch_size}")
        return tagged_batches(*data.train, unlabelled=data.info["unlabelled"])

    # -- model and objective ------------------------------------------------------------------
    def build_model(self, cfg: Config, data: TaskData) -> nn.Module:
        s, info = self.settings(cfg), data.info
        counts = info["length_counts"].double() + 0.5
        model = JRF(info["vocab_size"], len(info["tags"]), max_length=info["max_length"], length_probs=counts,
                    embed=s.embed, hidden=s.hidden)
        info["model"] = model  # build_objective fits zeta to its noise LM
        return model

    def build_objective(self, cfg: Config, data: TaskData) -> nn.Module:
        s, info = self.settings(cfg), data.info
        if not SEMI_SUPERVISED[cfg.objective.kind]:  # the supervised baseline: the CRF's likelihood alone
            return JRFObjective(None, alpha=0.0)
        u_words, u_lengths = info["unlabelled"]
        unlabelled = Sequences(u_words, u_lengths)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.run.seed + 1)
            noise = LSTMLM(info["vocab_size"], embedding_dim=s.noise_hidden, hidden_size=s.noise_hidden, num_layers=1)
        g = torch.Generator().manual_seed(cfg.run.seed + 2)
        pretrain_noise_lm(noise, unlabelled, steps=s.noise_steps, batch_size=cfg.train.batch_size, lr=cfg.train.lr,
                          generator=g)
        pick = torch.randperm(unlabelled.batch_size, generator=g)[:ZETA_INIT_SENTENCES]
        init_log_z(info["model"], noise, unlabelled[pick])
        return JRFObjective(noise, alpha=s.alpha, nu=cfg.objective.nu,
                            sample_options={"max_length": info["max_length"] + 1, "truncate": True})

    def build_optimizer(self, cfg: Config, data: TaskData) -> Callable[[list[dict[str, Any]]], torch.optim.Optimizer]:
        """``train.optimizer`` with :math:`\\zeta` (``log_z``) in a group of its own at ``jrf.zeta_lr`` (no weight decay)."""
        zeta_lr, t = self.settings(cfg).zeta_lr, cfg.train
        log_z = data.info["model"].log_z

        def make(groups: list[dict[str, Any]]) -> torch.optim.Optimizer:
            rest = [{"params": [p for p in g["params"] if p is not log_z]} for g in groups]
            split = [g for g in rest if g["params"]] + [{"params": [log_z], "lr": zeta_lr, "weight_decay": 0.0}]
            if t.optimizer == "sgd":
                return torch.optim.SGD(split, lr=t.lr, momentum=t.momentum, weight_decay=t.weight_decay)
            return torch.optim.Adam(split, lr=t.lr, weight_decay=t.weight_decay)

        return make

    # -- evaluation and application -------------------------------------------------------------
    def applier(self, command: str, cfg: Config, model: nn.Module, data: TaskData) -> Any:
        """``ebms tag``: the JRF's CRF (:class:`ebms.apply.tagging.SentenceTagger`) decoded as ``eval`` decodes it;
        ``ebms score`` / ``rescore``: its marginal as a language model (module docstring)."""
        from ebms.apply.tagging import SentenceTagger

        assert isinstance(model, JRF)
        if command == "score":
            return self._scorer(cfg, model, data)
        return SentenceTagger(model.tagger, data.info["tags"], data.info["encode"], what="model.kind='jrf'",
                              batch_size=DECODE_CHUNK, progress=cfg.run.progress)

    def _scorer(self, cfg: Config, model: JRF, data: TaskData) -> Any:
        """The JRF's marginal :math:`\\log\\pi_l - E(x) - \\zeta_l` as a sentence scorer; refused without trained zeta."""
        from ebms.apply.text import sentence_scorer
        from ebms.data.text import Vocabulary

        if not SEMI_SUPERVISED[cfg.objective.kind]:
            raise ConfigError(f"RUN: {cfg.run.name!r} is a JRF run of objective.kind={cfg.objective.kind!r} (the CRF "
                              f"likelihood alone): its zeta was never trained, so it has no log Z_l table and no "
                              f"sentence log-probability; score with a run of objective.kind = 'jrf'")
        return sentence_scorer(model, Vocabulary(data.info["words"][2:]), kind="jrf", progress=cfg.run.progress,
                               normalise=WordVocabulary.normalise)

    def evaluate(self, cfg: Config, model: nn.Module, data: TaskData) -> dict[str, float]:
        assert isinstance(model, JRF)
        test = data.test
        return evaluate_tagger(model.tagger, (test["words"],), test["lengths"], test["gold"], data.info["tags"],
                               chunk_size=DECODE_CHUNK)


register(JRFTask())

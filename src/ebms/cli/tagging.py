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
  L-BFGS / OWL-QN) takes the compact path of :func:`~ebms.models.feature_crf.fit_feature_crf`
  (one cached CSR design matrix; the parameters are the observed weights only).

``objective.kind``: ``crf`` (conditional ML, :class:`~ebms.objectives.ConditionalML`)
or ``crf-nce`` (:class:`~ebms.objectives.ConditionalNCE` with ``objective.nu`` noise
sequences from the tag-bigram chain of the training tags). Regularisation follows CRFsuite's
corpus objective ``sum_i -log p(y_i|x_i) + c1 ||w||_1 + c2 ||w||^2`` divided by the ``N`` training
sentences (``tagging.c1``, ``tagging.c2``): the loss carries ``(c2 / N) ||w||^2``; ``c1 > 0`` needs
``train.optimizer = "lbfgs"``,
which then runs OWL-QN with ``l1 = c1 / N`` (one trainer step = one quasi-Newton iteration; use
``train.batch_size`` = all sentences for CRFsuite's full-batch training).

Test figures (``eval.json``): chunk ``precision``, ``recall``, ``f1`` (conlleval, percent) and
token ``accuracy`` (percent); for NER also ``token_f1``: the support-weighted token F1 over the
training tags but ``O`` (:func:`ebms.metrics.tagging.token_f1`), in percent, i.e. 100 x the
sklearn-crfsuite tutorial's figure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from ebms.cli._config_rules import COUNT, DROPOUT, NONNEG, Rule
from ebms.cli.build import resolve
from ebms.cli.config import Config, ConfigError, ModelConfig
from ebms.cli.tasks import StructuredTask, TaskData, register
from ebms.data.conll import (
    MAX_CONLL_BYTES,
    Sentence,
    bio_to_spans,
    load_conll2000,
    load_conll2002,
    spans_to_tags,
)
from ebms.data.vocab import WordVocabulary
from ebms.metrics.chunking import conlleval
from ebms.models.crf_tagger import NeuralCRFTagger
from ebms.objectives import ConditionalML, ConditionalNCE, LossOutput, TagBigramNoise, scalar_metrics
from ebms.objectives.feature_crf import FeatureCRFLikelihood
from ebms.structured.features import EncodedCorpus
from ebms.structured.linear_chain import bio_allowed_transitions

__all__ = ["TaggingSettings", "TaggingTask"]

DATA_NAMES = ("conll2000", "conll2002-esp", "conll2002-ned")
MODEL_KINDS = ("bilstm-crf", "cnn-crf", "feature-crf")
OBJECTIVE_KINDS = ("crf", "crf-nce")
DEFAULT_FEATURES = {"conll2000": "crfsuite-chunking", "conll2002-esp": "crfsuite-ner", "conll2002-ned": "crfsuite-ner"}
#: sentences per length-sorted chunk in a full-batch (L-BFGS) pass: fewer, larger chunks pay the
#: per-call cost of the model (e.g. FeatureCRF's masked weights) less often; 2048 halved the time
#: of a CoNLL-2000 pass against 512.
FULL_BATCH_CHUNK = 2048
#: sentences per length-sorted chunk when decoding.
DECODE_CHUNK = 512
@dataclass
class _Split:
    """A test split: padded inputs ``(N, T, ...)`` (neural taggers), or the attribute vectors
    without padding (feature CRF; padded per decoding chunk)."""

    inputs: tuple[Tensor, ...] | EncodedCorpus
    lengths: Tensor
    gold: list[list[str]]

    def rows(self, idx: Tensor, t: int) -> list[Tensor]:
        if isinstance(self.inputs, EncodedCorpus):
            return list(self.inputs.padded(idx)[:2])
        return [x[idx, :t] for x in self.inputs]


class _FeatureRows(nn.Module):
    """The feature CRF's objective over training rows: ``objective(model, (rows, tags, lengths))``.

    The trainer's data are ``(rows (N,), tags (N, T), lengths (N,))``, where ``rows`` index the
    training set's :class:`~ebms.structured.features.EncodedCorpus` (attribute vectors without
    padding: the corpus is never padded to its longest sentence). A batch holding every row once
    (full-batch L-BFGS / OWL-QN) with ``objective.kind = crf`` takes the path of
    :func:`ebms.models.feature_crf.fit_feature_crf`: one cached CSR design matrix over
    length-sorted buckets, emissions ``X @ W`` and their gradient ``X^T G`` as two sparse products
    per pass, no per-call masking of the ``(A, C)`` weights. Any other batch is padded to its
    own longest sentence and passed to ``inner`` (:class:`ConditionalML` or
    :class:`ConditionalNCE`, a submodule), as before. Both give the same loss:
    ``sum -log p / B + l2 ||w||^2``.
    """

    def __init__(self, corpus: EncodedCorpus, tags: Tensor, inner: nn.Module, *,
                 full_batch_ml: bool, l2: float, n_attributes: int) -> None:
        super().__init__()
        self.corpus, self.tags, self.inner, self.full_batch_ml = corpus, tags, inner, full_batch_ml
        self.l2, self.n_attributes = l2, n_attributes
        self._full: Any = None

    def forward(self, model: nn.Module, batch: Any, *, generator: torch.Generator | None = None) -> LossOutput:
        rows, tags, lengths = batch
        n = len(self.corpus)
        if self.full_batch_ml and rows.shape[0] == n and bool((torch.bincount(rows, minlength=n) == 1).all()):
            return self._full_batch(model, lengths)
        ids, values, _ = self.corpus.padded(rows)
        return self.inner(model, (ids, values, tags[:, : ids.shape[1]], lengths), generator=generator)

    def _full_batch(self, model: nn.Module, lengths: Tensor) -> LossOutput:
        from ebms.models.feature_crf import BucketedCorpus, FeatureCRF

        if not isinstance(model, FeatureCRF):
            raise TypeError(f"model: expected a FeatureCRF; got {type(model).__name__}")
        if self._full is None:  # built once: the rows of a full batch are always the whole set
            c = self.corpus
            self._full = BucketedCorpus(lambda b: c.padded(b)[:2], c.lengths, self.tags, self.n_attributes,
                                 FULL_BATCH_CHUNK, model.state_values.dtype)
        nll = self._full.nll(*model.effective_weights())
        n = len(self.corpus)
        loss = nll / n
        if self.l2:
            loss = loss + self.l2 * sum((p * p).sum() for p in model.parameters() if p.requires_grad)
        return LossOutput(loss, scalar_metrics(nll=nll.detach() / n, nll_token=nll.detach() / lengths.sum()))


def _iob2(tags: list[str]) -> list[str]:
    """Tags rewritten as strict IOB2 with the chunks conlleval reads from them."""
    return spans_to_tags(bio_to_spans(tags), len(tags), scheme="iob")


def _load_split(cfg: Config, split: str, limit: int | None) -> list[Sentence]:
    name, root, max_mb = cfg.data.name, cfg.data.root, cfg.data.max_mb
    max_bytes = MAX_CONLL_BYTES if max_mb is None else int(max_mb * 2**20)
    try:
        if name == "conll2000":
            sents = load_conll2000(split, root, max_bytes=max_bytes)
        else:
            sents = load_conll2002(name.split("-")[1], split, root, max_bytes=max_bytes)
    except FileNotFoundError as e:
        raise ConfigError(f"data.name={name!r}: {e}") from None
    return sents if limit is None else sents[:limit]


def _tag_tensor(tag_lists: list[list[str]], index: dict[str, int], t: int) -> Tensor:
    out = torch.zeros(len(tag_lists), t, dtype=torch.long)
    for i, tags in enumerate(tag_lists):
        out[i, : len(tags)] = torch.tensor([index[x] for x in tags])
    return out


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


class TaggingTask(StructuredTask[TaggingSettings]):
    """CRF taggers on CoNLL-2000 / CoNLL-2002 (see the module docstring)."""

    data_names = DATA_NAMES
    model_kinds = MODEL_KINDS
    objective_kinds = OBJECTIVE_KINDS
    section = "tagging"
    settings_type = TaggingSettings
    rules: ClassVar[dict[str, Rule]] = {
        "features": Rule(names="'' (the data set's usual template) or an attribute template name of "
                               "ebms.structured.features"),
        "limit": COUNT, "embedding_dim": COUNT, "char_dim": NONNEG, "hidden": COUNT, "layers": COUNT,
        "dropout": DROPOUT, "c1": NONNEG, "c2": NONNEG,
    }
    moved: ClassVar[dict[str, str]] = {
        "data.features": "features", "data.limit": "limit", "model.embedding_dim": "embedding_dim",
        "model.char_dim": "char_dim", "model.layers": "layers", "model.dropout": "dropout",
        "objective.c1": "c1", "objective.c2": "c2",
    }

    # -- configuration ------------------------------------------------------------------------
    def check_names(self, cfg: Config) -> None:
        features = self.settings(cfg).features
        if features:
            from ebms.structured.features import FEATURE_SETS

            resolve(FEATURE_SETS, features, "tagging.features")

    def check(self, cfg: Config) -> None:
        s, o = self.settings(cfg), cfg.objective
        if cfg.model.hidden != ModelConfig().hidden:
            raise ConfigError(f"model.hidden: the MLP's hidden widths; the CoNLL taggers' width is tagging.hidden "
                              f"(renamed); got model.hidden={cfg.model.hidden}")
        if o.kind == "crf-nce" and not (o.nu >= 1 and float(o.nu).is_integer()):
            raise ConfigError(f"objective.nu: expected a whole number >= 1 of noise sequences per sentence; got {o.nu}")
        if o.kind == "crf-nce" and cfg.train.optimizer == "lbfgs":
            raise ConfigError("train.optimizer: crf-nce draws fresh noise sequences at every evaluation, so a "
                              "line search would compare different objectives; expected 'adam' or 'sgd'; "
                              "got 'lbfgs'")
        if o.kind == "crf-nce" and (s.c1 > 0 or s.c2 > 0):
            raise ConfigError(f"tagging.c1/c2: the L1/L2 terms belong to the crf objective; crf-nce takes "
                              f"none (use train.weight_decay); got c1={s.c1}, c2={s.c2}")
        if s.c1 > 0 and cfg.train.optimizer != "lbfgs":
            raise ConfigError(f"tagging.c1: an L1 term needs train.optimizer='lbfgs' (OWL-QN); "
                              f"got train.optimizer={cfg.train.optimizer!r}")

    # -- StructuredTask -----------------------------------------------------------------------
    def load(self, cfg: Config) -> TaskData:
        s = self.settings(cfg)
        self.check_names(cfg)
        self.check(cfg)
        train = _load_split(cfg, "train", s.limit)
        if not train:
            raise ConfigError(f"tagging.limit: expected at least 1 training sentence; got {s.limit}")
        splits = {"test": _load_split(cfg, "test" if cfg.data.name == "conll2000" else "testb", s.limit)}
        if cfg.data.name != "conll2000":
            splits["testa"] = _load_split(cfg, "testa", s.limit)
        gold_train = [_iob2(s.tags) for s in train]
        tags = sorted({t for g in gold_train for t in g}, key=lambda t: (t != "O", t))
        index = {t: i for i, t in enumerate(tags)}
        lengths = torch.tensor([len(s) for s in train], dtype=torch.long)
        y = _tag_tensor(gold_train, index, int(lengths.max()))
        info: dict[str, Any] = {"tags": tags, "n_train": len(train)}
        if cfg.model.kind == "feature-crf":
            from ebms.structured.features import FEATURE_SETS, AttributeVocabulary, observed_transitions

            extract: Callable[[Sentence], list[dict[str, float]]] = FEATURE_SETS[
                s.features or DEFAULT_FEATURES[cfg.data.name]]
            # One pass, one sentence at a time: the attribute dicts are never all held in memory,
            # and the corpus is kept without padding (see _FeatureRows).
            vocab = AttributeVocabulary([])
            corpus = vocab.encode_flat((extract(s) for s in train), grow=True)
            info.update(n_attributes=len(vocab), observed=corpus.observed_pairs(y, len(vocab), len(tags)),
                        observed_transitions=(observed_transitions(y, lengths, len(tags))
                                              if cfg.data.name == "conll2000" else None),
                        corpus=corpus)
            x: tuple[Tensor, ...] = (torch.arange(len(train)),)
            test = {k: _Split(vocab.encode_flat(extract(s) for s in v),
                              torch.tensor([len(s) for s in v], dtype=torch.long), [s.tags for s in v])
                    for k, v in splits.items() if v}
            return TaskData(train=(*x, y, lengths), test=test, info=info, name=cfg.data.name)
        words = WordVocabulary(train)
        use_chars = s.char_dim > 0
        info.update(vocab_size=len(words.words), char_vocab_size=len(words.chars) if use_chars else None)
        x = words.encode(train, chars=use_chars)

        def encode(sents: list[Sentence]) -> tuple[Tensor, ...]:
            return words.encode(sents, chars=use_chars)

        test = {k: _Split(encode(v), torch.tensor([len(s) for s in v], dtype=torch.long), [s.tags for s in v])
                for k, v in splits.items() if v}
        return TaskData(train=(*x, y, lengths), test=test, info=info, name=cfg.data.name)

    def build_model(self, cfg: Config, data: TaskData) -> nn.Module:
        s, info = self.settings(cfg), data.info
        if cfg.model.kind == "feature-crf":
            from ebms.models.feature_crf import FeatureCRF

            return FeatureCRF(info["n_attributes"], len(info["tags"]), observed=info["observed"],
                              observed_transitions=info["observed_transitions"])
        allowed, allowed_start = bio_allowed_transitions(info["tags"])
        return NeuralCRFTagger(info["vocab_size"], len(info["tags"]), embedding_dim=s.embedding_dim, hidden=s.hidden,
                               encoder=cfg.model.kind.split("-")[0], layers=s.layers, dropout=s.dropout,
                               char_vocab_size=info["char_vocab_size"], char_dim=max(s.char_dim, 1),
                               allowed=allowed, allowed_start=allowed_start)

    def build_objective(self, cfg: Config, data: TaskData) -> nn.Module:
        chunk = FULL_BATCH_CHUNK if cfg.train.optimizer == "lbfgs" else None
        inner: nn.Module
        if cfg.objective.kind == "crf-nce":
            *_, y, lengths = data.train
            noise = TagBigramNoise.fit(y, lengths, len(data.info["tags"]))
            inner = ConditionalNCE(noise, nu=int(cfg.objective.nu), chunk_size=chunk)
        else:
            inner = ConditionalML(l2=self.settings(cfg).c2 / data.size, chunk_size=chunk)
        if cfg.model.kind != "feature-crf":
            return inner
        if cfg.objective.kind == "crf":  # the library's feature-CRF likelihood (full batch: cached CSR pass)
            return FeatureCRFLikelihood.from_corpus(data.info["corpus"], data.train[1],
                                                    n_attributes=data.info["n_attributes"],
                                                    l2=self.settings(cfg).c2 / data.size, bucket_size=FULL_BATCH_CHUNK)
        return _FeatureRows(data.info["corpus"], data.train[1], inner, full_batch_ml=cfg.objective.kind == "crf",
                            l2=self.settings(cfg).c2 / data.size, n_attributes=data.info["n_attributes"])

    def build_optimizer(self, cfg: Config,
                        data: TaskData) -> Callable[[list[dict[str, Any]]], torch.optim.Optimizer] | None:
        if cfg.train.optimizer != "lbfgs":
            return None
        l1 = self.settings(cfg).c1 / data.size

        def make(params: Any) -> torch.optim.Optimizer:
            from ebms.train.owlqn import OWLQN

            return OWLQN(params, l1=l1)

        return make

    def evaluate(self, cfg: Config, model: nn.Module, data: TaskData) -> dict[str, float]:
        tags = data.info["tags"]
        out: dict[str, float] = {}
        was_training = model.training
        model.eval()  # no dropout while decoding
        try:
            preds = {name: _decode(model, split, tags) for name, split in data.test.items()}
        finally:
            model.train(was_training)
        for name, split in data.test.items():
            pred = preds[name]
            scores = conlleval(split.gold, pred)
            prefix = "" if name == "test" else f"{name}_"
            out.update({f"{prefix}precision": scores.precision, f"{prefix}recall": scores.recall,
                        f"{prefix}f1": scores.f1, f"{prefix}accuracy": scores.accuracy})
            if cfg.data.name != "conll2000":
                token_f1 = _token_f1(split.gold, pred, [t for t in tags if t != "O"])
                if token_f1 is not None:
                    out[f"{prefix}token_f1"] = token_f1
        return out


def _decode(model: nn.Module, split: _Split, tags: list[str]) -> list[list[str]]:
    """Viterbi tag names of a split, in length-sorted chunks (BIO-constrained for neural taggers)."""
    lengths = split.lengths
    pred: list[list[str]] = [[] for _ in range(lengths.shape[0])]
    with torch.no_grad():
        for idx in torch.argsort(lengths, stable=True).split(DECODE_CHUNK):
            ln = lengths[idx]
            t = int(ln.max())
            inputs = split.rows(idx, t)
            kw = {"constrained": True} if isinstance(model, NeuralCRFTagger) else {}
            best = model(*inputs, ln, **kw).argmax
            for row, i, n in zip(best.tolist(), idx.tolist(), ln.tolist()):
                pred[i] = [tags[k] for k in row[:n]]
    return pred


def _token_f1(gold: list[list[str]], pred: list[list[str]], labels: list[str]) -> float | None:
    """Support-weighted token F1 over ``labels`` in percent (the sklearn-crfsuite tutorial's score x 100)."""
    try:
        from ebms.metrics.tagging import token_f1
    except ImportError:
        return None
    return 100.0 * float(token_f1(gold, pred, labels=labels, average="weighted"))


register(TaggingTask())

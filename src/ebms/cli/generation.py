"""``ebms train`` for text generation with energies, on addition strings (issue 12).

``data.name = "addition"``: sentences ``a+b=s`` with ``generation.digits``-digit operands
(:class:`~ebms.data.AdditionTask`), the prefix ``a+b=`` and the continuation the ``d + 1`` sum
digits, so a generated sum is exactly right or wrong. ``generation.n_train`` training and
``data.n_test`` test sentences have distinct operand pairs (no test prefix is seen in training);
they depend on the digits and the two sizes only, not on ``run.seed``, so a residual run and its
base run share them.

``model.kind`` and ``objective.kind``:

* ``transformer`` / ``lstm``: the base LM (:class:`~ebms.models.lm.TransformerLM` of width
  ``generation.dim``, ``heads``, ``layers``, feed-forward ``hidden``; or
  :class:`~ebms.models.lm.LSTMLM` with ``dim``-wide embeddings and ``hidden`` units), trained on the
  training sentences with a share ``generation.error_rate`` of their sums given one wrong digit:
  imperfect by construction (the "deliberately imperfect base" of the issue). ``ml``:
  :class:`~ebms.objectives.AutoregressiveNLL`; ``earm``: :class:`~ebms.objectives.EARM` (surrogate
  weight ``generation.earm_weight``, switched on after ``generation.earm_start`` steps, gradient
  through the last ``generation.earm_truncate`` conditionals, its own gradient clipped to norm
  ``generation.earm_clip`` when set).
* ``residual``: :class:`~ebms.models.ResidualLM` on the base of the run folder
  ``generation.base_run`` (frozen; a path as given, relative to the current folder) with a :class:`~ebms.nets.TextEnergy` (``generation.energy``:
  ``transformer`` or ``bilstm``, same sizes), horizon ``d + 1``, trained by
  :class:`~ebms.objectives.ResidualNCE` (``nce``) on the clean training sentences against
  ``objective.nu`` negatives per prefix from a :class:`~ebms.data.NegativeCache` of
  ``generation.negatives`` base draws per training prefix (drawn from ``run.seed`` when training
  starts or resumes).

``eval``: the share of correct sums from one base draw per test prefix, the base's exact perplexity
of the true sums; for ``residual`` also the share from top-k joint sampling (Algorithm 1 of Deng et
al. 2020, ``generation.joint_samples`` base draws, ``generation.top_k`` restricting them; 0: none),
the joint model's exact perplexity (``log Z`` by enumerating every continuation, when the ``13^(d+1)``
digit strings are at most :data:`EXACT_LIMIT`: ``d <= 2``) and the ``[lower, upper]`` interval from ``joint_samples``
base draws per prefix. ``sample``: test prefixes completed by the model, each marked right or wrong.

A run keeps ``vocab.json`` (the addition vocabulary and the sha256 of its training and test
sentences, refused when this ebms draws other ones) and a residual run ``base.json``: the base
run's checkpoint it was trained against (file, step, sha256 of its weights and identity). A
resume, ``eval`` or ``sample`` of a residual run whose base run was trained again since (to
other weights or another step) is refused with one line naming ``generation.base_run`` (or
``residual.base_run``): the energy was fitted against the old base's samples
(:mod:`ebms.cli._base_run`). A key of ``[generation]`` set away from its default that the
configured kind does not read is refused (each kind's :attr:`GenerationTask.keys`). Each ``model.kind`` is
a :class:`GenerationTask` subclass registered for it: :class:`TransformerAdditionTask`,
:class:`LSTMAdditionTask` (the base LMs, :class:`BaseLMTask`) and :class:`ResidualAdditionTask`;
``controlled`` (controlled generation: mix-and-match and COLD) lives in :mod:`ebms.cli._generation_control`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from ebms.cli._base_run import BASE_FILE, base_record, base_run_config, check_base, open_base
from ebms.cli._config_rules import COUNT, DROPOUT, NONNEG, POS, Rule, _is_path
from ebms.cli._unread_keys import refuse_unread
from ebms.cli.config import Config, ConfigError, ModelConfig
from ebms.cli.language import autoregressive_objective
from ebms.cli.tasks import Task, check_batch_size, register, registered, task_for
from ebms.data.addition import MAX_DIGITS, AdditionTask
from ebms.data.batch_streams import nce_batches
from ebms.data.negative_cache import NegativeCache
from ebms.energy import ZeroEnergy
from ebms.errors import CheckpointError
from ebms.estimators.residual_log_z import residual_perplexity
from ebms.models.lm import LSTMLM, TransformerLM
from ebms.models.residual_lm import ResidualLM, exact_log_z
from ebms.nets.text_energy import TextEnergy
from ebms.objectives.residual_nce import ResidualNCE
from ebms.samplers.joint_resampling import join_rows, top_k_joint_sample
from ebms.sequences import Sequences
from ebms.train.run_files import dump_json, fingerprint, stored_json

__all__ = ["EXACT_LIMIT", "AdditionData", "BaseLMTask", "GenerationReport", "GenerationSettings", "GenerationTask",
           "LSTMAdditionTask", "ResidualAdditionTask", "TransformerAdditionTask"]

#: the joint model's perplexity is exact when ``13^(d+1)`` is at most this (``d <= 2``).
EXACT_LIMIT = 5000
#: the seed of the training/test sentences (a fixed data set, as PTB's splits are).
SPLIT_SEED = 1234
#: offsets from ``run.seed``: the corruption of the base's sums, the negative cache, eval draws.
CORRUPT_SEED_OFFSET, CACHE_SEED_OFFSET, EVAL_SEED_OFFSET = 23, 29, 31
#: the run files: the vocabulary with the data's fingerprint, and a residual run's base run.
VOCAB_FILE, VOCAB_FORMAT = "vocab.json", "ebms-addition-vocabulary"
#: the ``[generation]`` keys of ``objective.kind = "earm"``.
EARM_KEYS = ("earm_weight", "earm_start", "earm_truncate", "earm_clip")


@dataclass
class GenerationSettings:
    """``[generation]``: the addition task's own keys (module docstring)."""

    digits: int = 2
    n_train: int = 4000
    error_rate: float = 0.3
    dim: int = 64
    hidden: int = 128
    layers: int = 2
    heads: int = 4
    dropout: float = 0.0
    base_run: str | None = None
    energy: str = "transformer"
    negatives: int = 16
    joint_samples: int = 100
    top_k: int = 0
    earm_weight: float = 1.0
    earm_start: int = 0
    earm_truncate: int = 2
    earm_clip: float | None = None
    mm_alpha: float = 6.0
    mm_epochs: int = 10
    cold_lambda: float = 3.0
    cold_steps: int = 100
    cold_step_size: float = 0.3
    cold_top_k: int = 3


@dataclass
class AdditionData:
    """The sentences of one run: ``train`` and ``test`` (clean), and the task that reads them."""

    task: AdditionTask
    train: Sequences
    test: Sequences
    cache: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def size(self) -> int:
        return self.train.batch_size


@dataclass(frozen=True)
class GenerationReport:
    """``eval`` of an addition run (``eval.json``): shares of correct test sums and perplexities of the true sums."""

    step: int
    task: str
    figures: dict[str, float]
    joint_samples: int = 0

    def lines(self) -> list[str]:
        f, n = self.figures, self.joint_samples
        lm = "base LM" if "joint_correct" in f else "LM"
        right = f"correct test sums, step {self.step}: {lm} {f['base_correct']:.3f} (one draw per prefix)"
        ppl = f"perplexity of the true sums: {lm} {f['base_ppl']:.4f} (exact)"
        if "joint_correct" in f:
            right += f", joint model {f['joint_correct']:.3f} (top-k joint sampling, n = {n}, median ESS {f['ess_median']:.1f})"
            exact = f" {f['joint_ppl_exact']:.4f} (exact)," if "joint_ppl_exact" in f else ""
            ppl += f", joint model{exact} [{f['joint_ppl_lower']:.4f}, {f['joint_ppl_upper']:.4f}] from n = {n} base draws"
        return [f"{self.task}: {right}", f"{self.task}: {ppl}"]


class GenerationTask(Task[GenerationSettings]):
    """Base LMs, E-ARM and residual EBMs on addition strings (module docstring): the keys, sentences,
    checks and figures every kind shares. Each ``model.kind`` is a subclass registered for it."""

    data_names = ("addition",)
    what = "a text-generation task"
    section = "generation"
    settings_type = GenerationSettings
    objective_kinds = ("ml", "earm", "nce")
    rules: ClassVar[dict[str, Rule]] = {
        "digits": Rule(low=1, high=MAX_DIGITS), "n_train": COUNT, "error_rate": Rule(low=0, high=1),
        "dim": COUNT, "hidden": COUNT, "layers": COUNT, "heads": COUNT, "dropout": DROPOUT,
        "base_run": Rule(text="a run folder path (not empty)", check=_is_path),
        "energy": Rule(choices=("transformer", "bilstm")), "negatives": COUNT, "joint_samples": COUNT,
        "top_k": NONNEG, "earm_weight": POS, "earm_start": NONNEG, "earm_truncate": COUNT, "earm_clip": POS,
        "mm_alpha": NONNEG, "mm_epochs": COUNT, "cold_lambda": NONNEG, "cold_steps": COUNT,
        "cold_step_size": POS, "cold_top_k": COUNT,
    }
    defaults: ClassVar[dict[str, Any]] = {"data.n_test": 300, "eval.n_samples": 10}
    sample_format = "txt"
    #: the ``objective.kind`` values this kind trains by (and how a message says so), the ``[generation]``
    #: keys it reads, and those each of its objectives reads.
    trained_by: ClassVar[tuple[str, ...]] = ("ml", "earm")
    trained_by_text: ClassVar[str] = "'ml' or 'earm'"
    keys: ClassVar[tuple[str, ...]] = ()
    objective_keys: ClassVar[dict[str, tuple[str, ...]]] = {"earm": EARM_KEYS}

    # -- configuration ------------------------------------------------------------------------
    def check(self, cfg: Config) -> None:
        s, kind, obj = self.settings(cfg), cfg.model.kind, cfg.objective.kind
        if cfg.model.hidden != ModelConfig().hidden:
            raise ConfigError(f"model.hidden: the MLP's hidden widths; this task's sizes are generation.dim and "
                              f"generation.hidden; got model.hidden={cfg.model.hidden}")
        pairs = 10 ** (2 * s.digits)
        if s.n_train + cfg.data.n_test > pairs:
            raise ConfigError(f"generation.n_train: {s.n_train} training + data.n_test={cfg.data.n_test} test sentences "
                              f"need distinct operand pairs; {s.digits}-digit operands give {pairs}: ask for fewer")
        if obj not in self.trained_by:
            raise ConfigError(f"objective.kind: model.kind={kind!r} is trained by {self.trained_by_text}; got {obj!r}")
        self.check_kind(cfg)
        if "earm_start" in self.reads(cfg) and s.earm_start >= cfg.train.steps:
            raise ConfigError(f"generation.earm_start: E-ARM is switched on after {s.earm_start} steps but the run "
                              f"stops at train.steps={cfg.train.steps}, so it would never start; expected "
                              f"generation.earm_start below train.steps (or objective.kind='ml')")
        refuse_unread("generation", s, self.reads(cfg), f"model.kind={kind!r} with objective.kind={obj!r}", _readers)

    def check_kind(self, cfg: Config) -> None:
        """This kind's combinations: a base LM reads no base run; ``heads`` divides the Transformer's width."""
        s = self.settings(cfg)
        if s.base_run is not None:
            raise ConfigError(f"generation.base_run: only model.kind='residual' reads a base run; model.kind="
                              f"{cfg.model.kind!r} is a base itself: drop it")
        self.check_heads(cfg)

    def check_heads(self, cfg: Config) -> None:
        s = self.settings(cfg)
        if "heads" in self.reads(cfg) and s.dim % s.heads:
            raise ConfigError(f"generation.heads: expected a divisor of generation.dim={s.dim}; got {s.heads}")

    def reads(self, cfg: Config) -> set[str]:
        """The ``[generation]`` keys a run of ``cfg`` reads: :attr:`keys` and its objective's."""
        return {*self.keys, *self.objective_keys.get(cfg.objective.kind, ())}

    # -- data, model, objective ----------------------------------------------------------------
    def load(self, cfg: Config, *, stored: Mapping[str, bytes] | None = None) -> AdditionData:
        """The sentences; with ``stored`` (a trained run's files) the vocabulary and sentences must be the
        recorded ones."""
        self.check(cfg)
        s = self.settings(cfg)
        task = AdditionTask(s.digits)
        train, test = task.disjoint_samples([s.n_train, cfg.data.n_test],
                                            generator=torch.Generator().manual_seed(SPLIT_SEED))
        data = AdditionData(task, train, test)
        if stored:
            was = stored_json(stored, VOCAB_FILE, VOCAB_FORMAT)
            if was.get("tokens") != list(task.vocabulary.tokens) or was.get("data_sha256") != _data_fingerprint(data):
                raise CheckpointError(f"{VOCAB_FILE}: the run was trained with another vocabulary or other sentences "
                                      f"than this ebms draws for generation.digits={s.digits}, generation.n_train="
                                      f"{s.n_train}, data.n_test={cfg.data.n_test} (written by another version?); "
                                      f"train the run again (--overwrite)")
        return data

    def run_files(self, cfg: Config, data: AdditionData) -> dict[str, bytes]:
        """``vocab.json`` (the vocabulary and the sentences' sha256) and, for ``residual``, ``base.json``."""
        files = {VOCAB_FILE: dump_json({"format": VOCAB_FORMAT, "version": 1, "tokens": list(data.task.vocabulary.tokens),
                                        "data_sha256": _data_fingerprint(data)})}
        if "base_record" in data.cache:
            files[BASE_FILE] = dump_json(data.cache["base_record"])
        return files

    def training_data(self, cfg: Config, data: AdditionData) -> Any:
        """Rows of the training sentences, a share ``generation.error_rate`` of their sums corrupted."""
        check_batch_size(cfg, data.size, "training sentences of addition")
        train = data.task.corrupt(data.train, self.settings(cfg).error_rate,
                                  generator=torch.Generator().manual_seed(cfg.run.seed + CORRUPT_SEED_OFFSET))
        return train.tokens, train.lengths

    def build_objective(self, cfg: Config, data: AdditionData) -> nn.Module:
        return autoregressive_objective(cfg.objective.kind, self.settings(cfg))

    # -- figures and samples -------------------------------------------------------------------
    def _joint(self, model: nn.Module, data: AdditionData) -> ResidualLM:
        """The model as a :class:`ResidualLM` (a base LM with ``E = 0``; like every base, it is frozen
        in the wrapper: this is only called to evaluate or sample)."""
        if isinstance(model, ResidualLM):
            return model
        return ResidualLM(model, ZeroEnergy(), horizon=data.task.continuation_length)

    def _correct(self, data: AdditionData, prefix: Sequences, cont: Sequences) -> Tensor:
        return data.task.is_correct(join_rows(prefix, cont))

    def report(self, cfg: Config, model: nn.Module, data: AdditionData, step: int, *,
               use_ais: bool = False) -> GenerationReport:
        s, joint = self.settings(cfg), self._joint(model, data)
        prefix, truth = data.task.split(data.test)
        g = torch.Generator().manual_seed(cfg.run.seed + EVAL_SEED_OFFSET)
        tokens = truth.batch_size * data.task.continuation_length
        with torch.no_grad():
            base_lp = joint.base_log_prob(prefix, truth).double()
            figures = {"base_correct": float(self._correct(data, prefix, joint.sample_base(prefix, 1, generator=g))
                                             .double().mean()),
                       "base_ppl": math.exp(-float(base_lp.sum()) / tokens)}
            if isinstance(model, ResidualLM):
                n, top_k = s.joint_samples, s.top_k or None
                draw = top_k_joint_sample(model, prefix, n, generator=g, top_k=top_k, progress=cfg.run.progress)
                figures["joint_correct"] = float(self._correct(data, prefix, draw.continuations).double().mean())
                figures["ess_median"] = float(draw.ess.median())
                if (data.task.vocab_size - 1) ** data.task.continuation_length <= EXACT_LIMIT:
                    log_z = exact_log_z(model, prefix, progress=cfg.run.progress)
                    joint_lp = base_lp - model.energy(prefix, truth).double() - log_z
                    figures["joint_ppl_exact"] = math.exp(-float(joint_lp.sum()) / tokens)
                bounds = residual_perplexity(model, prefix, truth, n, generator=g, progress=cfg.run.progress)
                figures["joint_ppl_lower"], figures["joint_ppl_upper"] = bounds.lower, bounds.upper
        return GenerationReport(step, f"addition ({data.task.digits}-digit)", figures, s.joint_samples)

    def sample(self, cfg: Config, model: nn.Module, data: AdditionData, *, n: int | None = None,
               steps: int | None = None, seed: int | None = None) -> Tensor:
        """``n`` test prefixes (cycled) completed by one base draw, or by top-k joint sampling for a
        residual model: token ids ``(n, 3d + 3)``."""
        n = cfg.eval.n_samples if n is None else n
        g = torch.Generator().manual_seed(cfg.run.seed if seed is None else seed)
        prefix, _ = data.task.split(data.test[torch.arange(n) % data.test.batch_size])
        s = self.settings(cfg)
        with torch.no_grad():
            if isinstance(model, ResidualLM):
                cont = top_k_joint_sample(model, prefix, s.joint_samples, generator=g, top_k=s.top_k or None,
                                          progress=False).continuations
            else:
                cont = self._joint(model, data).sample_base(prefix, 1, generator=g)
        return join_rows(prefix, cont).pad_to(data.task.length).tokens

    def sample_text(self, x: Tensor, data: AdditionData) -> list[str]:
        """Each sentence, then ``right`` or ``wrong``."""
        seqs = Sequences(x, (x > 0).sum(1))
        return [f"{text}  {'right' if ok else 'wrong'}"
                for text, ok in zip(data.task.decode(seqs), data.task.is_correct(seqs).tolist())]


class BaseLMTask(GenerationTask):
    """A base LM of addition strings (the ``transformer`` and ``lstm`` kinds), by ``ml`` or ``earm``."""

    applies: ClassVar[tuple[str, ...]] = ("score",)

    def load_applied(self, cfg: Config, stored: dict[str, bytes]) -> AdditionData | None:
        """The addition vocabulary (the stored one), no sentence drawn: what the LM and its scorer read."""
        task, none = AdditionTask(self.settings(cfg).digits), Sequences.from_lists([])
        was = stored_json(stored, VOCAB_FILE, VOCAB_FORMAT)
        return AdditionData(task, none, none) if was.get("tokens") == list(task.vocabulary.tokens) else None

    def applier(self, command: str, cfg: Config, model: nn.Module, data: AdditionData) -> Any:
        """``score``: :func:`ebms.apply.text.sentence_scorer` on characters (``12+34=046``)."""
        from ebms.apply.text import sentence_scorer

        return sentence_scorer(model, data.task.vocabulary, kind=cfg.model.kind, progress=cfg.run.progress)


class TransformerAdditionTask(BaseLMTask):
    """``transformer``: :class:`~ebms.models.lm.TransformerLM` of width ``generation.dim``."""

    model_kinds = ("transformer",)
    keys = ("digits", "n_train", "error_rate", "dim", "hidden", "layers", "heads", "dropout")

    def build_model(self, cfg: Config, data: AdditionData) -> nn.Module:
        s = self.settings(cfg)
        return TransformerLM(data.task.vocab_size, d_model=s.dim, num_heads=s.heads, num_layers=s.layers,
                             dim_feedforward=s.hidden, dropout=s.dropout, max_length=data.task.length + 1)


class LSTMAdditionTask(BaseLMTask):
    """``lstm``: :class:`~ebms.models.lm.LSTMLM` with ``generation.dim``-wide embeddings."""

    model_kinds = ("lstm",)
    keys = ("digits", "n_train", "error_rate", "dim", "hidden", "layers", "dropout")

    def build_model(self, cfg: Config, data: AdditionData) -> nn.Module:
        s = self.settings(cfg)
        return LSTMLM(data.task.vocab_size, embedding_dim=s.dim, hidden_size=s.hidden, num_layers=s.layers,
                      dropout=s.dropout)


class ResidualAdditionTask(GenerationTask):
    """``residual``: a :class:`~ebms.models.ResidualLM` on the frozen base of ``generation.base_run``."""

    model_kinds = ("residual",)
    trained_by = ("nce",)
    trained_by_text = "nce"
    keys: ClassVar[tuple[str, ...]] = ("digits", "n_train", "base_run", "energy", "dim", "layers", "dropout",
                                       "negatives", "joint_samples", "top_k")
    objective_keys: ClassVar[dict[str, tuple[str, ...]]] = {}

    def check_kind(self, cfg: Config) -> None:
        if self.settings(cfg).base_run is None:
            raise ConfigError("generation.base_run: a residual model corrects a trained base LM; expected its run "
                              "folder (e.g. runs/addition-base); got none")
        self.check_heads(cfg)
        if cfg.objective.nu != int(cfg.objective.nu):
            raise ConfigError(f"objective.nu: expected a whole number >= 1 of negatives per prefix; got {cfg.objective.nu}")

    def reads(self, cfg: Config) -> set[str]:
        """:attr:`keys`, and ``heads`` with a Transformer energy."""
        return {*super().reads(cfg), *(("heads",) if self.settings(cfg).energy == "transformer" else ())}

    def _check_base(self, cfg: Config) -> None:
        """The base run is an addition base LM on the same sentences."""
        s = self.settings(cfg)
        b = base_run_config(s.base_run)
        if not isinstance(task_for(b), BaseLMTask):
            raise ConfigError(f"generation.base_run: {s.base_run!r} holds a {b.model.kind!r} run on "
                              f"data.name={b.data.name!r}; expected a base LM (model.kind = 'transformer' or "
                              f"'lstm') on data.name='addition'")
        bs = b.sections["generation"]
        for key, mine, theirs in (("generation.digits", s.digits, bs.digits), ("generation.n_train", s.n_train,
                                  bs.n_train), ("data.n_test", cfg.data.n_test, b.data.n_test)):
            if mine != theirs:
                raise ConfigError(f"{key}: the base run {s.base_run!r} has {key}={theirs}; got {mine}: the residual "
                                  f"model is trained and tested on the base's sentences, set {key} = {theirs}")

    def load(self, cfg: Config, *, stored: Mapping[str, bytes] | None = None) -> AdditionData:
        """The sentences and the base run, unchanged since this run was trained when ``stored`` is given."""
        data, s = super().load(cfg, stored=stored), self.settings(cfg)
        self._check_base(cfg)
        _, base, _, ckpt = open_base(s.base_run, "generation.base_run")
        data.cache["base"], data.cache["base_record"] = base, base_record(ckpt)
        if stored:
            check_base(stored, data.cache["base_record"], "generation.base_run", s.base_run)
        return data

    def build_model(self, cfg: Config, data: AdditionData) -> nn.Module:
        s = self.settings(cfg)
        energy = TextEnergy(data.task.vocab_size, kind=s.energy, dim=s.dim, layers=s.layers, heads=s.heads,
                            dropout=s.dropout)
        return ResidualLM(data.cache["base"], energy, horizon=data.task.continuation_length)

    def build_objective(self, cfg: Config, data: AdditionData) -> nn.Module:
        return ResidualNCE(nu=int(cfg.objective.nu))

    def training_data(self, cfg: Config, data: AdditionData) -> Any:
        """``ResidualNCE.pack`` batches of training (prefix, sum) pairs with ``objective.nu`` cached base
        draws of each prefix (:func:`residual_batches`)."""
        check_batch_size(cfg, data.size, "training sentences of addition")
        prefix, cont = data.task.split(data.train)
        return residual_batches(cfg, data.cache["base"], prefix, cont, self.settings(cfg).negatives,
                                data.task.continuation_length)


def residual_batches(cfg: Config, base: nn.Module, prefix: Sequences, cont: Sequences, negatives: int,
                     horizon: int) -> Any:
    """The trainer's batches of a residual run (:func:`~ebms.data.nce_batches`, packed by
    :meth:`ResidualNCE.pack`) from a :class:`~ebms.data.NegativeCache` of ``negatives`` base continuations
    per prefix, drawn from ``run.seed`` when training starts or resumes."""
    cache = NegativeCache.build(base, prefix, negatives, horizon=horizon, progress=cfg.run.progress,
                                generator=torch.Generator().manual_seed(cfg.run.seed + CACHE_SEED_OFFSET))
    return nce_batches(cache, prefix, cont, int(cfg.objective.nu), pack=ResidualNCE.pack)


def _data_fingerprint(data: AdditionData) -> str:
    return fingerprint(data.train.tokens, data.train.lengths, data.test.tokens, data.test.lengths)


def _readers(key: str) -> list[str]:
    kinds = [k for t in registered() if isinstance(t, GenerationTask) and key in t.keys for k in t.model_kinds]
    out = [f"model.kind = {', '.join(kinds)}"] if kinds else []
    if key in EARM_KEYS:
        out.append("objective.kind = 'earm'")
    if key == "heads":
        out.append("model.kind = residual with generation.energy = 'transformer'")
    return out


for _task in (TransformerAdditionTask(), LSTMAdditionTask(), ResidualAdditionTask()):
    register(_task)

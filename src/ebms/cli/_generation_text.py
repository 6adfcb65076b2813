"""Private: the text-generation kinds of the language task (:mod:`ebms.cli.language`), on a corpus:
:class:`TextResidualTask` and :class:`TextElectricTask`, registered for their ``model.kind``.

* ``model.kind = "residual"`` (``objective.kind = "nce"``): a residual EBM
  (:class:`~ebms.models.ResidualLM`) on the frozen base LM of the run folder ``residual.base_run``
  (an ``lstm`` or ``transformer`` run on the same text; the residual run encodes its sentences
  with the base run's stored vocabulary, and records the base's checkpoint in ``base.json``: a
  base trained again since is refused, :func:`ebms.cli._base_run.check_base`), a :class:`~ebms.nets.TextEnergy`
  or, for ``residual.energy = "bert" | "roberta"``, a :class:`~ebms.nets.HFTextEnergy` built from a config
  (``residual.energy``, width ``embedding_dim``, ``layers``, ``heads``), horizon ``residual.horizon``.
  Each sentence longer than ``residual.prefix_length`` gives a (prefix, continuation) pair
  (:func:`~ebms.data.text.continuation_pairs`); training is :class:`~ebms.objectives.ResidualNCE`
  against ``objective.nu`` of ``residual.negatives`` cached base draws per prefix. ``eval``: per
  held-out split, the base's exact perplexity of the true continuations and the joint model's
  ``[lower, upper]`` from ``residual.joint_samples`` base draws per prefix; ``sample``: held-out
  prefixes continued by top-k joint sampling.
* ``model.kind = "electric"`` (``objective.kind = "nce"``): the Electric cloze model
  (:class:`~ebms.models.ElectricCloze`, width ``embedding_dim``, ``layers``, ``heads``) with a
  :class:`~ebms.nets.TwoTowerCloze` noise of the same sizes trained jointly by
  :class:`~ebms.objectives.ElectricNCE` (``electric.mask_rate``, ``uniform_mix``, ``positions``;
  ``noise_steps = n``: the noise is trained for the first ``n`` steps only, then frozen). ``eval``:
  per held-out split, the one-pass pseudo-log-likelihood per token (a score: the model is only trained
  towards self-normalisation), the noise's (normalised) one, and how often the model prefers each sentence
  over the same sentence with one token replaced at random (:func:`~ebms.data.text.replace_one_token`);
  it draws no samples.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import torch
from torch import Tensor, nn

from ebms.cli._base_run import BASE_FILE, base_record, base_run_config, check_base, open_base
from ebms.cli._config_rules import COUNT, DROPOUT, FRACTION, NONNEG, Rule
from ebms.cli._language_data import LanguageData, load_language_data
from ebms.cli.config import Config, ConfigError
from ebms.cli.generation import EVAL_SEED_OFFSET, residual_batches
from ebms.cli.language import NET_RULES, PATH, LanguageTask, LSTMTask, net_keys
from ebms.cli.tasks import Section, check_batch_size, register, task_for
from ebms.data.text import continuation_pairs, replace_one_token
from ebms.estimators.residual_log_z import residual_perplexity
from ebms.models.electric import ElectricCloze
from ebms.models.residual_lm import ResidualLM
from ebms.nets.hf_text_energy import HF_KINDS, HFTextEnergy
from ebms.nets.text_energy import TextEnergy
from ebms.nets.two_tower import TwoTowerCloze
from ebms.objectives.electric import POSITIONS, ElectricNCE
from ebms.objectives.residual_nce import ResidualNCE
from ebms.samplers.joint_resampling import join_rows, top_k_joint_sample
from ebms.sequences import Sequences
from ebms.train.run_files import dump_json

__all__ = ["ELECTRIC", "RESIDUAL", "SAME_VOCABULARY", "ElectricReport", "ElectricSettings", "ResidualSettings",
           "TextElectricTask", "TextResidualReport", "TextResidualTask"]


@dataclass
class ResidualSettings:
    """``[residual]``: a residual EBM on a corpus: its base run, pairs, energy and negatives (module docstring)."""

    base_run: str | None = None
    prefix_length: int = 10
    horizon: int = 6
    energy: str = "bilstm"
    embedding_dim: int = 256
    layers: int = 2
    heads: int = 4
    dropout: float = 0.0
    negatives: int = 16
    joint_samples: int = 100


@dataclass
class ElectricSettings:
    """``[electric]``: the Electric cloze model's sizes and its noise (module docstring)."""

    embedding_dim: int = 256
    layers: int = 2
    heads: int = 4
    dropout: float = 0.0
    mask_rate: float = 0.15
    uniform_mix: float = 0.0
    positions: str = "fixed"
    noise_steps: int | None = None


_NET_RULES = {k: r for k, r in NET_RULES.items() if k != "hidden"}  # a text energy's width is embedding_dim
RESIDUAL = Section(ResidualSettings, {"base_run": PATH, "prefix_length": COUNT, "horizon": COUNT,
                                      "energy": Rule(choices=("bilstm", "transformer", *HF_KINDS)), **_NET_RULES,
                                      "negatives": COUNT, "joint_samples": COUNT})
ELECTRIC = Section(ElectricSettings, {**_NET_RULES, "mask_rate": FRACTION, "uniform_mix": DROPOUT,
                                      "positions": Rule(choices=POSITIONS), "noise_steps": NONNEG})

#: keys that fix a language run's vocabulary: a residual run must have its base run's values.
SAME_VOCABULARY = ("data.name", "data.root", "language.level", "language.lower", "language.sentence_split",
                   "language.train_path", "language.limit", "language.min_count", "language.max_vocab",
                   "language.subword_units", "language.subword_model", "language.tokenizer")


def _value(cfg: Config, key: str) -> Any:
    section, name = key.split(".")
    return getattr(cfg.section(section), name)


class _NCETextTask(LanguageTask):
    """A text kind trained by ``nce`` alone, with a Transformer that needs ``heads`` to divide its width."""

    trained_by = ("nce",)
    #: its own section: ``"residual"`` or ``"electric"``.
    own: ClassVar[str] = ""

    def own_settings(self, cfg: Config) -> Any:
        """Its own section of ``cfg`` (``[residual]``, ``[electric]``)."""
        return cfg.sections[self.own]

    def check_kind(self, cfg: Config) -> None:
        s, own = self.own_settings(cfg), self.own
        if cfg.objective.kind not in self.trained_by:
            raise ConfigError(f"objective.kind: model.kind={cfg.model.kind!r} is trained by 'nce'; got "
                              f"{cfg.objective.kind!r}")
        if f"{own}.heads" in self.reads(cfg) and s.embedding_dim % s.heads:
            raise ConfigError(f"{own}.heads: expected a divisor of {own}.embedding_dim={s.embedding_dim}; got {s.heads}")


@dataclass(frozen=True)
class TextResidualReport:
    """``eval`` of a residual run on a corpus: perplexity of each held-out split's continuations."""

    step: int
    figures: dict[str, dict[str, float]]

    def lines(self) -> list[str]:
        return [f"{split} continuation perplexity, step {self.step}: base LM {f['base']:.3f} (exact), joint model "
                f"[{f['lower']:.3f}, {f['upper']:.3f}] from n = {int(f['n'])} base draws  [{int(f['tokens'])} tokens "
                f"of {int(f['pairs'])} prefixes]" for split, f in self.figures.items()]


class TextResidualTask(_NCETextTask):
    """``model.kind = "residual"`` on a corpus (module docstring)."""

    model_kinds = ("residual",)
    own = "residual"
    more_sections: ClassVar[dict[str, Section]] = {"residual": RESIDUAL}
    keys = ("residual.base_run", "residual.prefix_length", "residual.horizon", "residual.energy",
            *net_keys("residual", "embedding_dim", "layers", "dropout"), "residual.negatives", "residual.joint_samples")
    optional_keys: ClassVar[dict[str, str]] = {"residual.heads": "model.kind = residual with residual.energy = "
                                                                 "'transformer', 'bert' or 'roberta'"}
    bounded_length = False

    def own_settings(self, cfg: Config) -> ResidualSettings:
        return cast(ResidualSettings, cfg.sections["residual"])

    def applier(self, command: str, cfg: Config, model: nn.Module, data: LanguageData) -> Any:
        raise ConfigError(f"{command}: model.kind='residual' corrects its base LM by an energy whose normaliser (one "
                          f"per prefix) is unknown, so it has no sentence log-probability: score its base run "
                          f"{self.own_settings(cfg).base_run!r} instead (`ebms eval` bounds the residual's perplexity)")

    def reads(self, cfg: Config) -> set[str]:
        """:attr:`keys`, and ``heads`` with a Transformer energy."""
        return {*super().reads(cfg), *(("residual.heads",) if self.own_settings(cfg).energy != "bilstm" else ())}

    def check_kind(self, cfg: Config) -> None:
        s = self.own_settings(cfg)
        super().check_kind(cfg)
        if s.energy in HF_KINDS and importlib.util.find_spec("transformers") is None:
            raise ConfigError(f"residual.energy: {s.energy!r} is a Hugging Face encoder and needs the transformers "
                              f"package; install it (pip install 'ebms[text]') or use 'transformer'")
        if s.base_run is None:
            raise ConfigError("residual.base_run: a residual model corrects a trained base LM; expected its run "
                              "folder (e.g. runs/char-lstm-shakespeare); got none")
        if cfg.objective.nu != int(cfg.objective.nu):
            raise ConfigError(f"objective.nu: expected a whole number >= 1 of negatives per prefix; got "
                              f"{cfg.objective.nu}")
        b = base_run_config(s.base_run, "residual.base_run", "data.name = ptb, tiny-shakespeare or text")
        if not isinstance(task_for(b), LSTMTask):  # an lstm or transformer on a language corpus
            raise ConfigError(f"residual.base_run: {s.base_run!r} holds a {b.model.kind!r} run on data.name="
                              f"{b.data.name!r}; expected an 'lstm' or 'transformer' run on a language corpus")
        for key in SAME_VOCABULARY:
            if _value(cfg, key) != _value(b, key):
                raise ConfigError(f"{key}: the base run {s.base_run!r} has {key}={_value(b, key)!r}; got "
                                  f"{_value(cfg, key)!r}: the residual model needs the base's vocabulary, set it "
                                  f"the same")

    def load_applied(self, cfg: Config, stored: dict[str, bytes]) -> None:
        """``None``: the full load (its applier refuses, naming the base run to score instead)."""
        return None

    def read(self, cfg: Config, stored: Mapping[str, bytes] | None) -> LanguageData:
        """The base run (its newest checkpoint, unchanged since this run was trained when ``stored`` is
        given) and this run's sentences encoded with the base run's vocabulary (or the stored one)."""
        s = self.own_settings(cfg)
        _, base, base_data, ckpt = open_base(s.base_run, "residual.base_run")
        record = base_record(ckpt)
        if stored:
            check_base(stored, record, "residual.base_run", s.base_run)
        data = load_language_data(cfg, stored, vocab=base_data.vocab)
        if data.vocab != base_data.vocab:
            raise ConfigError(f"residual.base_run: the base run {s.base_run!r} has a vocabulary of "
                              f"{len(base_data.vocab)} tokens, this run's stored one has {len(data.vocab)}: the energy "
                              f"and the base would read token ids differently; train this run again (--overwrite)")
        data.cache["base"], data.cache["base_record"] = base, record
        return data

    def run_files(self, cfg: Config, data: LanguageData) -> dict[str, bytes]:
        """``vocab.json`` and ``base.json``: the base run's checkpoint this run is trained against."""
        return {**super().run_files(cfg, data), BASE_FILE: dump_json(data.cache["base_record"])}

    def build_model(self, cfg: Config, data: Any) -> ResidualLM:
        s = self.own_settings(cfg)
        base = data.cache["base"]  # loaded by load()
        longest = getattr(base, "max_length", None)
        if longest is not None and s.prefix_length + s.horizon > longest:
            raise ConfigError(f"residual.horizon: the base covers {longest} tokens; residual.prefix_length="
                              f"{s.prefix_length} + residual.horizon={s.horizon} is more: lower them")
        sizes: dict[str, Any] = {"dim": s.embedding_dim, "layers": s.layers, "heads": s.heads, "dropout": s.dropout}
        energy = (HFTextEnergy.from_config(s.energy, len(data.vocab), max_length=s.prefix_length + s.horizon, **sizes)
                  if s.energy in HF_KINDS else TextEnergy(len(data.vocab), kind=s.energy, **sizes))
        return ResidualLM(base, energy, horizon=s.horizon)

    def build_objective(self, cfg: Config, data: Any) -> nn.Module:
        return ResidualNCE(nu=int(cfg.objective.nu))

    def _pairs(self, cfg: Config, x: Sequences, what: str) -> tuple[Sequences, Sequences]:
        s = self.own_settings(cfg)
        prefix, cont = continuation_pairs(x, s.prefix_length, s.horizon)
        if prefix.batch_size == 0:
            raise ConfigError(f"residual.prefix_length: no {what} sentence is longer than {s.prefix_length} tokens; "
                              f"lower it")
        return prefix, cont

    def training_data(self, cfg: Config, data: Any) -> Any:
        """``ResidualNCE.pack`` batches of training pairs with ``objective.nu`` cached base draws of each prefix."""
        s = self.own_settings(cfg)
        prefix, cont = self._pairs(cfg, data.train, "training")
        check_batch_size(cfg, prefix.batch_size, f"training sentences longer than residual.prefix_length="
                                                 f"{s.prefix_length}")
        return residual_batches(cfg, data.cache["base"], prefix, cont, s.negatives, s.horizon)

    def evaluate(self, cfg: Config, model: Any, data: Any, step: int, *, use_ais: bool) -> TextResidualReport:
        s, out = self.own_settings(cfg), {}
        g = torch.Generator().manual_seed(cfg.run.seed + EVAL_SEED_OFFSET)
        for split, x in data.held_out.items():
            prefix, cont = self._pairs(cfg, x, split)
            with torch.no_grad():
                r = residual_perplexity(model, prefix, cont, s.joint_samples, generator=g, progress=cfg.run.progress)
            out[split] = {"base": r.base, "lower": r.lower, "upper": r.upper, "n": s.joint_samples,
                          "tokens": r.tokens, "pairs": prefix.batch_size}
        return TextResidualReport(step, out)

    def draw(self, cfg: Config, model: Any, data: Any, n: int, steps: int | None, generator: torch.Generator) -> Tensor:
        """``n`` held-out prefixes (cycled) each continued by top-k joint sampling, as token rows."""
        s = self.own_settings(cfg)
        x = data.held_out.get("test", data.held_out.get("valid", data.train))
        prefix, _ = self._pairs(cfg, x, "held-out")
        prefix = prefix[torch.arange(n) % prefix.batch_size]
        with torch.no_grad():
            cont = top_k_joint_sample(model, prefix, s.joint_samples, generator=generator, progress=False).continuations
        return join_rows(prefix, cont).canonical().tokens


@dataclass(frozen=True)
class ElectricReport:
    """``eval`` of an Electric run: per held-out split, PLL per token and the corruption test."""

    step: int
    figures: dict[str, dict[str, float]]

    def lines(self) -> list[str]:
        return [f"{split} pseudo-log-likelihood per token, step {self.step}: Electric {f['pll']:.3f} (one pass, "
                f"unnormalised), two-tower noise {f['noise_pll']:.3f}; prefers the sentence over a one-token "
                f"corruption: Electric {f['prefers']:.3f}, noise {f['noise_prefers']:.3f}  [{int(f['tokens'])} "
                f"tokens, {int(f['sentences'])} sentences]" for split, f in self.figures.items()]


def _noise_pll(noise: TwoTowerCloze, x: Sequences) -> Tensor:
    """``(B,)`` the two-tower cloze model's pseudo-log-likelihood (its conditionals are normalised)."""
    lp = noise.log_probs(x).gather(2, x.tokens.unsqueeze(2)).squeeze(2)
    return lp.masked_fill(~x.mask(), 0.0).sum(1)


#: float elements of one ``(rows, width, V)`` score table in :func:`_by_chunks` (256 MiB in float32)
CHUNK_ELEMENTS = 1 << 26


def _by_chunks(score: Any, x: Sequences, vocab_size: int) -> Tensor:
    """``score(x)`` (a ``(B,)`` per-sentence figure) over chunks of rows whose ``(rows, width, V)`` tables stay under
    :data:`CHUNK_ELEMENTS` (PTB's test split at once needs ~12 GB), concatenated in order."""
    rows = max(1, CHUNK_ELEMENTS // (max(int(x.tokens.shape[1]), 1) * vocab_size))
    return torch.cat([score(x[i:i + rows]) for i in range(0, x.batch_size, rows)]) if x.batch_size else score(x)


class TextElectricTask(_NCETextTask):
    """``model.kind = "electric"`` on a corpus (module docstring)."""

    model_kinds = ("electric",)
    own = "electric"
    more_sections: ClassVar[dict[str, Section]] = {"electric": ELECTRIC}
    keys = net_keys("electric", "embedding_dim", "layers", "heads", "dropout", "mask_rate", "uniform_mix", "positions",
                    "noise_steps")

    def own_settings(self, cfg: Config) -> ElectricSettings:
        return cast(ElectricSettings, cfg.sections["electric"])

    def build_model(self, cfg: Config, data: Any) -> ElectricCloze:
        s, V = self.own_settings(cfg), len(data.vocab)
        noise = TwoTowerCloze(V, dim=s.embedding_dim, layers=s.layers, heads=s.heads, dropout=s.dropout)
        return ElectricCloze(V, dim=s.embedding_dim, layers=s.layers, heads=s.heads, dropout=s.dropout,
                             max_length=data.max_length, noise=noise)

    def build_objective(self, cfg: Config, data: Any) -> nn.Module:
        s = self.own_settings(cfg)
        return ElectricNCE(mask_rate=s.mask_rate, uniform_mix=s.uniform_mix, positions=s.positions,
                           noise_steps=s.noise_steps)

    def evaluate(self, cfg: Config, model: Any, data: Any, step: int, *, use_ais: bool) -> ElectricReport:
        g, out, V = torch.Generator().manual_seed(cfg.run.seed + EVAL_SEED_OFFSET), {}, len(data.vocab)
        for split, x in data.held_out.items():
            longest = int(x.lengths.max()) if x.batch_size else 0
            if longest > data.max_length:
                raise ConfigError(f"language.max_length: the {split} text has a sentence of {longest} tokens; this "
                                  f"electric model covers up to {data.max_length}: train with language.max_length >= "
                                  f"{longest}")
            x = x[x.lengths > 0]  # an empty line has no token to replace
            bad = replace_one_token(x, V, generator=g)
            with torch.no_grad():
                pll, pll_bad = (_by_chunks(model.pseudo_log_likelihood, s, V) for s in (x, bad))
                noise, noise_bad = (_by_chunks(lambda r: _noise_pll(model.noise, r), s, V) for s in (x, bad))
            tokens = int(x.lengths.sum())
            out[split] = {"pll": float(pll.sum()) / tokens, "noise_pll": float(noise.sum()) / tokens,
                          "prefers": float((pll > pll_bad).double().mean()),
                          "noise_prefers": float((noise > noise_bad).double().mean()),
                          "tokens": tokens, "sentences": x.batch_size}
        return ElectricReport(step, out)

    def draw(self, cfg: Config, model: Any, data: Any, n: int, steps: int | None, generator: torch.Generator) -> Tensor:
        raise ConfigError("sample: model.kind='electric' is a cloze model that scores sentences (pseudo-log-"
                          "likelihood); it draws none: use `ebms eval`")


register(TextResidualTask())
register(TextElectricTask())

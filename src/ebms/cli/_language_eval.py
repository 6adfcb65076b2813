"""Private: what ``ebms eval`` prints for a language model (see :mod:`ebms.cli.language`).

* Normalised models (``kn``, ``lstm``, ``transformer``, ``huggingface``): exact perplexity of every held-out
  split, :func:`ebms.models.lm.perplexity` (``</s>`` counted as a token).
* Subword units (``language.level = "subword"``, ``huggingface``): the perplexity above is per unit; beside it
  ``perplexity_per_word`` is :math:`\\exp(-\\log p / (\\text{words} + \\text{sentences}))` of the same total log
  probability, the denominator of a word-level run on the same text (:func:`per_word`), so the two compare;
  ``unit`` says which unit ``perplexity`` counts (``"subword"``; absent: the run's ``language.level``).
* TRFs: :func:`ebms.metrics.trf_perplexity` on the test split, with the normalisers estimated in
  training (:math:`\\zeta`) and re-estimated now for the test set's lengths, by importance sampling
  (:func:`ebms.estimators.importance_log_z_per_length`, ``trf.logz_samples`` draws per length)
  or, with ``--ais``, by AIS (:func:`ebms.estimators.ais_log_z_per_length`, ``eval.ais_chains``
  chains per length, ``eval.ais_temperatures`` linear steps, the training kernel without jumps);
  the proposal is the training unigram at each length (``NGram(order=1, end=False)``). When the
  sentences of lengths ``1..L`` number at most :data:`EXACT_LIMIT`, the exact :math:`\\log Z_l`
  (enumeration) is printed too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ebms.cli._language_data import LanguageData
from ebms.cli.config import Config
from ebms.data.text import sentence_batches
from ebms.distributions import NGram
from ebms.estimators import ais_log_z_per_length, importance_log_z_per_length, linear_betas
from ebms.metrics import PerplexityRow, trf_perplexity
from ebms.models.lm import perplexity
from ebms.models.trf import exact_log_z

__all__ = ["EXACT_LIMIT", "LanguageReport", "normalised_report", "per_word", "trf_report"]

#: largest number of sentences (all lengths 1..L) enumerated for the exact log Z_l.
EXACT_LIMIT = 200_000
#: sentences per scoring batch.
EVAL_BATCH = 64
#: seed offset of the re-estimation draws (never the training stream).
LOGZ_SEED_OFFSET = 17


@dataclass(frozen=True)
class LanguageReport:
    """Held-out figures of a language model (``eval.json``): ``figures[split]`` per split."""

    step: int
    task: str
    model: str
    figures: dict[str, Any]
    text: list[str]

    def lines(self) -> list[str]:
        return list(self.text)


def per_word(log_prob: float, words: int, sentences: int) -> float:
    """``exp(-log_prob / (words + sentences))``: the per-word perplexity of a total log-probability (``</s>``
    counted once per sentence, as a word-level run counts it); ``inf`` for a total of ``-inf``."""
    return math.exp(-log_prob / (words + sentences)) if math.isfinite(log_prob) else math.inf


def normalised_report(cfg: Config, model: nn.Module, data: LanguageData, step: int) -> LanguageReport:
    """Exact perplexity of every held-out split (and per word, for subword units)."""
    figures: dict[str, dict[str, Any]] = {}
    text: list[str] = []
    for split, x in data.held_out.items():
        p = perplexity(model, sentence_batches(x, EVAL_BATCH, shuffle=False))
        figures[split] = {"perplexity": p.perplexity, "nll": p.nll, "tokens": p.tokens, "sentences": p.sentences}
        if split in data.words:
            w = data.words[split]
            figures[split].update(unit="subword", log_prob=p.log_prob, words=w,
                                  perplexity_per_word=per_word(p.log_prob, w, p.sentences))
            text.append(f"{split} perplexity, step {step}: {p.perplexity:.2f} per subword unit, "
                        f"{figures[split]['perplexity_per_word']:.2f} per word  [{cfg.model.kind}: exact; {p.tokens} "
                        f"units with </s>, {w} words, {p.sentences} sentences]")
            continue
        text.append(f"{split} perplexity, step {step}: {p.perplexity:.2f}  [{cfg.model.kind}: exact; {p.tokens} tokens "
                    f"with </s>, {p.sentences} sentences]")
    return LanguageReport(step, cfg.data.name, cfg.model.kind, figures, text)


def _row(r: PerplexityRow, words: int | None = None, sentences: int = 0) -> dict[str, Any]:
    iv = r.interval()
    out = {"label": r.label, "perplexity": r.perplexity, "nll": r.nll, "stderr": r.stderr,
           "interval95": None if iv is None else list(iv), "exact": r.exact}
    if words is not None:
        out["perplexity_per_word"] = per_word(r.log_prob, words, sentences)
    return out


def trf_report(cfg: Config, model: Any, data: LanguageData, step: int, *, kernel: Any, use_ais: bool) -> LanguageReport:
    """The test perplexity of a TRF with training and re-estimated normalisers (module docstring)."""
    s = cfg.sections["trf"]
    x = data.held_out["test"]
    batches = sentence_batches(x, EVAL_BATCH, shuffle=False)
    V, L = len(data.vocab), model.max_length
    lengths = sorted(set(x.lengths.tolist()))
    proposal = NGram.fit(data.train, V, order=1, end=False)
    g = torch.Generator().manual_seed(cfg.run.seed + LOGZ_SEED_OFFSET)
    with torch.no_grad():
        if use_ais:
            est = ais_log_z_per_length(model, proposal, cfg.eval.ais_chains, linear_betas(cfg.eval.ais_temperatures),
                                       lengths=lengths, kernel=kernel, generator=g, progress=cfg.run.progress)
        else:
            est = importance_log_z_per_length(model, proposal, s.logz_samples, lengths=lengths, generator=g,
                                              batch_size=EVAL_BATCH * 32, progress=cfg.run.progress)
        result = trf_perplexity(model, batches, log_z=est)
        exact = None
        if sum((V - 1) ** n for n in range(1, L + 1)) <= EXACT_LIMIT:
            exact = trf_perplexity(model, batches, log_z=exact_log_z(model, V, L)).reestimated
    assert result.reestimated is not None
    how = (f"AIS, {cfg.eval.ais_chains} chains x {cfg.eval.ais_temperatures} steps per length" if use_ais
           else f"importance sampling, {s.logz_samples} unigram draws per length")
    text = [f"test, step {step}: {cfg.model.kind} with objective.kind={cfg.objective.kind!r}; log Z_l re-estimated "
            f"for the {len(lengths)} test lengths by {how}", *str(result).splitlines()]
    words, n = data.words.get("test"), result.sentences
    figures: dict[str, Any] = {"sentences": n, "tokens": result.tokens,
                               "training_zeta": _row(result.training, words, n),
                               "reestimated": _row(result.reestimated, words, n),
                               "low_ess_lengths": list(result.low_ess_lengths)}
    if words is not None:
        figures.update(unit="subword", words=words)
        text.append(f"subword units: {result.tokens} units with </s>, {words} words, {n} sentences; per word: "
                    f"training zeta {figures['training_zeta']['perplexity_per_word']:.2f}, re-estimated "
                    f"{figures['reestimated']['perplexity_per_word']:.2f}")
    if exact is not None:
        figures["exact"] = _row(exact, words, n)
        text.append(f"{'exact log Z_l (enumeration)':<{len(result.reestimated.label) + 2}}{exact.perplexity:>10.2f}")
    if math.isfinite(result.reestimated.perplexity) and math.isfinite(result.training.perplexity):
        text.append(f"re-estimated / training-zeta perplexity: x{result.reestimated.perplexity / result.training.perplexity:.3f}")
    return LanguageReport(step, cfg.data.name, cfg.model.kind, {"test": figures}, text)

r"""A trained language model applied to new text: per-sentence log-probabilities (``ebms score``) and
n-best rescoring with one or several models (``ebms rescore``).

**Scoring.** :func:`sentence_scorer` wraps a trained model and its run's vocabulary in a
:class:`SentenceScorer`; called on sentences it returns :class:`SentenceScores`, per sentence ``i``:

* ``log_prob[i]``: the natural-log probability of the sentence *and* its end, ``log p(x_1 .. x_l </s>)``,
  as ``ebms eval`` counts it, so that :math:`\exp(-\sum_i \log p_i / \sum_i n_i)` over a test file is
  ``ebms eval``'s perplexity;
* ``tokens[i]``: ``n_i = l + 1`` scored tokens (``</s>`` included);
* ``oov[i]``: tokens scored as ``<unk>`` (not in the run's vocabulary, or ``<unk>`` itself).

What ``log_prob`` is, by model:

* ``kn`` (:class:`~ebms.distributions.BackoffNGram`), ``lstm``, ``transformer``
  (:class:`~ebms.models.lm.AutoregressiveLM`): exact, the model is normalised.
* TRFs (:class:`~ebms.models.trf.TRF`: ``trf``, ``trf-cnn``, ``trf-bilstm``):
  :math:`\log\pi_l - E(x) - \zeta_l`, with the per-length normalisers :math:`\zeta_l` *estimated in training* and
  stored in the run (the "training zeta" row of ``ebms eval``; an estimate of :math:`\log Z_l`, not the exact value,
  so the figure is exact only as far as :math:`\zeta` is). Lengths ``1..L`` only: the model puts no mass elsewhere.
* JRFs (:class:`~ebms.models.jrf.JRF`, ``model.kind = "jrf"``): the marginal over tag sequences,
  :math:`\log\pi_l - E(x) - \zeta_l` with :math:`E(x) = -\log\sum_y e^{U(x, y)}` (the CRF's forward algorithm) and
  the :math:`\zeta_l` learned by DNCE in training, as for a TRF; words normalised as the run's training words were
  (``normalise``: digits to ``0``). A JRF trained by the CRF likelihood alone has no trained :math:`\zeta`: its run
  is refused (:mod:`ebms.cli.jrf`). Re-estimated :math:`\log Z_l` (e.g.
  :func:`~ebms.estimators.importance_log_z_per_length`) go into ``model.log_z`` before scoring.
* Electric (:class:`~ebms.models.ElectricCloze`): the one-pass **pseudo**-log-likelihood
  :math:`\sum_t \log\hat p(x_t \mid x_{\setminus t})` (Salazar et al. 2020 call its per-token exponent the
  pseudo-perplexity), a score, not a log-probability: ``measure`` says so and ``tokens`` counts no ``</s>``.

**Subword units** (a run of ``language.level = "subword"``, or ``model.kind = "huggingface"``: a
:class:`~ebms.data.subword.SubwordVocabulary`): a line's words are split into the run's units as in training;
``tokens`` counts units (and ``</s>``) and ``perplexity`` is per unit, while ``words[i]`` counts the sentence's
words and ``perplexity_per_word`` is :math:`\exp(-\log p_i / (w_i + 1))`, the figure a word-level run gives the
same text (:func:`ebms.cli._language_eval.per_word` of ``ebms eval``).

A sentence outside the lengths a model scores (a TRF beyond ``L``, a Transformer beyond its positions, an empty
sentence for a TRF or Electric) is refused by :meth:`SentenceScorer.__call__` with one line naming it; rescoring
gives such a hypothesis ``-inf`` instead (:meth:`SentenceScorer.log_probs`).

**Rescoring.** :func:`rescore` scores every hypothesis of an :class:`~ebms.data.nbest.NBest` with each model (each
with its own vocabulary and tokens) and picks per utterance the hypothesis of highest

.. math::  S(h) = \log p_{AM}(\text{audio} \mid h) + s \sum_k w_k \log p_k(h) + \beta |h|,

the log-linear interpolation of :func:`ebms.metrics.rescoring.combined_scores` with ``lm_weight`` :math:`s w_k`
(``lm_scale`` :math:`s`, ``weights`` :math:`w_k`, ``length_penalty`` :math:`\beta`, a per-word bonus when positive).
The n-best file's own first-pass LM score is not used (it is replaced). Ties go to the better first-pass rank.

References: Ou (2024), "Energy-Based Models with Applications to Speech and Language Processing", §3.3;
Salazar, Liang, Nguyen, Kirchhoff (2020), "Masked Language Model Scoring", ACL.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ebms._progress import progress_bar
from ebms.data.nbest import NBest
from ebms.data.subword import SubwordVocabulary
from ebms.data.text import Vocabulary
from ebms.distributions import BackoffNGram
from ebms.errors import DataError
from ebms.metrics.error_rate import ErrorRate, error_rate
from ebms.metrics.rescoring import combined_scores
from ebms.models import JRF, TRF, ElectricCloze
from ebms.models.lm import AutoregressiveLM
from ebms.sequences import Sequences

__all__ = ["MEASURES", "Rescored", "SentenceScorer", "SentenceScores", "check_references", "rescore", "sentence_scorer"]

#: sentences per model call.
BATCH_SIZE = 64
#: what each ``measure`` is, in words.
MEASURES = {"log_prob": "exact log-probability (natural log)",
            "log_prob_training_zeta": "log-probability with the normalisers log Z_l estimated in training and stored "
                                      "in the run (the training zeta of `ebms eval`), not re-estimated",
            "pseudo_log_likelihood": "pseudo-log-likelihood, a score and not a log-probability"}
#: word-level tokens that are the sentence boundary (id 0), never a token inside a sentence.
MARKERS = (Vocabulary.BOUNDARY_TOKEN, Vocabulary.START_TOKEN)


@dataclass(frozen=True)
class SentenceScores:
    """Per-sentence scores of ``N`` sentences (module docstring).

    Attributes:
        log_prob: ``(N,)`` float64 natural-log score of each sentence (``measure`` says which).
        tokens: ``(N,)`` int64 scored tokens (``</s>`` included unless ``measure`` is a pseudo-log-likelihood).
        oov: ``(N,)`` int64 tokens scored as ``<unk>``.
        measure: ``"log_prob"`` (exact), ``"log_prob_training_zeta"`` (a TRF with its stored normalisers) or
            ``"pseudo_log_likelihood"`` (Electric: a score, not a log-probability).
        kind: the model's kind (``"kn"``, ``"trf"``, ...), for messages.
        words: ``(N,)`` int64 words of each sentence when ``tokens`` counts subword units (``None``: tokens are
            the words or characters themselves).
    """

    log_prob: Tensor
    tokens: Tensor
    oov: Tensor
    measure: str
    kind: str = ""
    words: Tensor | None = None

    def perplexity(self) -> Tensor:
        """``(N,)`` float64 ``exp(-log_prob / tokens)`` of each sentence (a pseudo-perplexity for Electric)."""
        return torch.exp(-self.log_prob / self.tokens.double())

    def total_perplexity(self) -> float:
        """``exp(-Σ log_prob / Σ tokens)`` over all sentences: ``ebms eval``'s perplexity of the same text."""
        return math.exp(-float(self.log_prob.sum()) / int(self.tokens.sum()))

    def _ends(self) -> int:
        return 0 if self.measure == "pseudo_log_likelihood" else 1

    def perplexity_per_word(self) -> Tensor:
        """``(N,)`` float64 ``exp(-log_prob / (words + 1))`` of each sentence of subword units (``</s>`` once).

        Raises:
            ValueError: the tokens are not subword units (:attr:`words` is ``None``): :meth:`perplexity` is per word.
        """
        if self.words is None:
            raise ValueError("words: these tokens are not subword units; perplexity() is the per-token figure")
        return torch.exp(-self.log_prob / (self.words + self._ends()).double())

    def total_perplexity_per_word(self) -> float:
        """``exp(-Σ log_prob / (Σ words + sentences))``: ``ebms eval``'s ``perplexity_per_word`` of the same text."""
        if self.words is None:
            raise ValueError("words: these tokens are not subword units; total_perplexity() is the per-token figure")
        return math.exp(-float(self.log_prob.sum()) / (int(self.words.sum()) + self._ends() * len(self.words)))

    @property
    def perplexity_name(self) -> str:
        """The column name of :meth:`perplexity`: ``perplexity``, ``perplexity_training_zeta``, ``pseudo_perplexity``."""
        return {"log_prob": "perplexity", "log_prob_training_zeta": "perplexity_training_zeta"}.get(
            self.measure, "pseudo_perplexity")

    def tsv(self, texts: Sequence[str], lines: Sequence[int] | None = None) -> list[str]:
        """Tab-separated lines, a header first: ``line``, :attr:`measure` (natural log), ``tokens``, ``oov``,
        :attr:`perplexity_name`, ``sentence`` (``texts[i]``, tabs as spaces); ``lines``: the input line numbers
        (default ``1..N``). Subword units: ``tokens`` counts units, and ``words`` and ``perplexity_per_word``
        come before ``sentence``."""
        numbers = range(1, len(texts) + 1) if lines is None else lines
        rows = zip(numbers, self.log_prob.tolist(), self.tokens.tolist(), self.oov.tolist(), self.perplexity().tolist(),
                   texts)
        head = f"line\t{self.measure}\ttokens\toov\t{self.perplexity_name}"
        if self.words is None:
            return [f"{head}\tsentence",
                    *(f"{n}\t{lp:.6f}\t{t}\t{u}\t{p:.4f}\t{x.replace(chr(9), ' ')}" for n, lp, t, u, p, x in rows)]
        pw = zip(self.words.tolist(), self.perplexity_per_word().tolist())
        return [f"{head}\twords\t{self.perplexity_name}_per_word\tsentence",
                *(f"{n}\t{lp:.6f}\t{t}\t{u}\t{p:.4f}\t{w}\t{q:.4f}\t{x.replace(chr(9), ' ')}"
                  for (n, lp, t, u, p, x), (w, q) in zip(rows, pw))]

    def summary(self) -> str:
        """One line: sentences, tokens, ``<unk>`` tokens, the total and the perplexity over all, what they are."""
        ends = " with </s>" if self.measure != "pseudo_log_likelihood" else ""
        if self.words is not None:
            return (f"{len(self.tokens)} sentences, {int(self.words.sum())} words, {int(self.tokens.sum())} subword "
                    f"units{ends}, {int(self.oov.sum())} scored as <unk>; {self.measure} "
                    f"{float(self.log_prob.sum()):.4f}, {self.perplexity_name} {self.total_perplexity():.4f} per "
                    f"unit, {self.total_perplexity_per_word():.4f} per word [{self.kind}: {MEASURES[self.measure]}]")
        return (f"{len(self.tokens)} sentences, {int(self.tokens.sum())} tokens{ends}, {int(self.oov.sum())} scored "
                f"as <unk>; {self.measure} {float(self.log_prob.sum()):.4f}, {self.perplexity_name} "
                f"{self.total_perplexity():.4f} [{self.kind}: {MEASURES[self.measure]}]")


class SentenceScorer:
    """Scores sentences with one trained language model (built by :func:`sentence_scorer`).

    Args:
        score: ``score(Sequences) -> (B,)`` the model's per-sentence figure on token ids of ``vocabulary``.
        vocabulary: the run's :class:`~ebms.data.text.Vocabulary` (its ``level`` decides the tokens).
        kind: the model's kind, for messages and :attr:`SentenceScores.kind`.
        measure: see :attr:`SentenceScores.measure`.
        lengths: ``(shortest, longest)`` sentence in tokens the model scores (``longest`` ``None``: no bound).
        what: the bound in words for messages (e.g. ``"language.max_length"``).
        lower: lower-case text first, as the run's training text was (``language.lower``).
        normalise: applied to every word before it is looked up (a JRF run's: digits to ``0``); ``None``: none.
        batch_size: sentences per call. progress: a progress bar over more than one batch.
        device: where the encoded batches go (the model's device).
    """

    def __init__(self, score: Callable[[Sequences], Tensor], vocabulary: Vocabulary, *, kind: str, measure: str,
                 lengths: tuple[int, int | None], what: str = "", lower: bool = False, batch_size: int = BATCH_SIZE,
                 progress: bool = False, device: torch.device | None = None,
                 normalise: Callable[[str], str] | None = None) -> None:
        self.score, self.vocabulary, self.kind, self.measure = score, vocabulary, kind, measure
        self.lengths, self.what, self.lower, self.normalise = lengths, what, bool(lower), normalise
        self.batch_size, self.progress, self.device = int(batch_size), bool(progress), device

    def tokenize(self, text: str) -> list[str]:
        """The tokens of one line as the run's training text had them: whitespace-separated words, the
        characters with each run of whitespace one space, or the words' subword units (``lower``: lower-cased
        first)."""
        words = (text.lower() if self.lower else text).split()
        if self.normalise is not None:
            words = [self.normalise(w) for w in words]
        if isinstance(self.vocabulary, SubwordVocabulary):
            return self.vocabulary.tokenizer.units(words)
        return words if self.vocabulary.level == "word" else list(" ".join(words))

    def _words(self, sentences: Sequence[str | Sequence[str]]) -> list[list[str]]:
        return [(s.lower() if self.lower else s).split() if isinstance(s, str) else list(s) for s in sentences]

    def _tokens(self, sentences: Sequence[str | Sequence[str]]) -> list[list[str]]:
        if isinstance(self.vocabulary, SubwordVocabulary):  # a token list is words here, split like a line's
            return self.vocabulary.split(self._words(sentences))
        if self.normalise is not None:
            return [self.tokenize(s) if isinstance(s, str) else [self.normalise(w) for w in s] for s in sentences]
        return [self.tokenize(s) if isinstance(s, str) else list(s) for s in sentences]

    def _raw(self, toks: list[list[str]], ok: list[int]) -> Tensor:
        """``(N,)`` float64 scores of the sentences ``ok`` of ``toks`` (``-inf`` elsewhere), in length-sorted batches."""
        out = torch.full((len(toks),), -math.inf, dtype=torch.float64)
        order = sorted(ok, key=lambda i: len(toks[i]))
        bar = progress_bar(total=len(order), desc=f"score ({self.kind})", unit="sentence", leave=False,
                           enabled=self.progress and len(order) > self.batch_size)
        with torch.no_grad(), bar:
            for start in range(0, len(order), self.batch_size):
                idx = order[start:start + self.batch_size]
                x = self.vocabulary.encode([toks[i] for i in idx])
                out[idx] = self.score(x if self.device is None else x.to(self.device)).detach().double().cpu()
                bar.update(len(idx))
        return out

    def _problem(self, tokens: list[str]) -> str | None:
        """Why the model has no score for a sentence of ``tokens`` (``None``: it has one)."""
        low, high = self.lengths
        if not low <= len(tokens) or (high is not None and len(tokens) > high):
            span = f"{low}..{high}" if high is not None else f"at least {low}"
            return (f"a sentence of {len(tokens)} tokens; this {self.kind} run scores sentences of {span} tokens"
                    f"{f' ({self.what})' if self.what else ''}, so it has no {self._figure} for it")
        if self.vocabulary.level == "word" and any(w in MARKERS for w in tokens):
            return (f"the sentence holds the boundary marker {next(w for w in tokens if w in MARKERS)!r}, which "
                    f"never appears inside a sentence (the end is scored by itself)")
        return None

    @property
    def _figure(self) -> str:
        return "score" if self.measure == "pseudo_log_likelihood" else "log-probability"

    def __call__(self, sentences: Sequence[str | Sequence[str]], *, names: Sequence[str] | None = None
                 ) -> SentenceScores:
        """Scores of ``N`` sentences: token lists, or lines of text (tokenised by :meth:`tokenize`).

        Args:
            sentences: the ``N`` sentences.
            names: how a message names sentence ``i`` (default ``sentences[i]``; the command line: ``FILE:line``).

        Raises:
            ebms.errors.DataError: a sentence of a length the model does not score (naming the first and how many).
        """
        toks = self._tokens(sentences)
        problems = [self._problem(t) for t in toks]
        bad = [i for i, p in enumerate(problems) if p is not None]
        if bad:
            name = names[bad[0]] if names is not None else f"sentences[{bad[0]}]"
            raise DataError(f"{name}: {problems[bad[0]]} ({len(bad)} of {len(toks)} sentences have none); change or "
                            f"leave out those sentences")
        scores = self._raw(toks, list(range(len(toks))))
        lengths = torch.tensor([len(t) for t in toks], dtype=torch.long)
        ends = 0 if self.measure == "pseudo_log_likelihood" else 1
        v = self.vocabulary
        if isinstance(v, SubwordVocabulary):
            unk = torch.tensor([v.unknown(t) for t in toks], dtype=torch.long)
            words = torch.tensor([len(w) for w in self._words(sentences)], dtype=torch.long)
            return SentenceScores(scores, lengths + ends, unk, self.measure, self.kind, words)
        unk = torch.tensor([sum(v.index.get(w, 1) == 1 for w in t) for t in toks], dtype=torch.long)
        return SentenceScores(scores, lengths + ends, unk, self.measure, self.kind)

    def log_probs(self, sentences: Sequence[str | Sequence[str]]) -> Tensor:
        """``(N,)`` float64 scores as :meth:`__call__`, ``-inf`` for a sentence the model has no score for (a length
        it does not score, a boundary marker inside)."""
        toks = self._tokens(sentences)
        return self._raw(toks, [i for i, t in enumerate(toks) if self._problem(t) is None])


def _device(model: nn.Module) -> torch.device:
    tensor = next(iter([*model.parameters(), *model.buffers()]), None)
    return torch.device("cpu") if tensor is None else tensor.device


def sentence_scorer(model: nn.Module, vocabulary: Vocabulary, *, kind: str = "", lower: bool = False,
                    batch_size: int = BATCH_SIZE, progress: bool = False,
                    normalise: Callable[[str], str] | None = None) -> SentenceScorer:
    """The :class:`SentenceScorer` of a trained language model (module docstring says what each one scores).

    Args:
        model: a :class:`~ebms.distributions.BackoffNGram`, an :class:`~ebms.models.lm.AutoregressiveLM`, a
            :class:`~ebms.models.trf.TRF`, a :class:`~ebms.models.jrf.JRF` (its marginal over tags, with its
            ``log_z``) or an :class:`~ebms.models.ElectricCloze`, in eval mode.
        vocabulary: the vocabulary its token ids come from.
        kind: its name in messages (a run's ``model.kind``). lower, batch_size, progress, normalise: see
            :class:`SentenceScorer`.

    Raises:
        TypeError: another model (no sentence log-probability or score).
    """
    kind = kind or type(model).__name__
    common: dict[str, Any] = {"kind": kind, "lower": lower, "batch_size": batch_size, "progress": progress,
                              "device": _device(model), "normalise": normalise}
    model.eval()
    if isinstance(model, (BackoffNGram, AutoregressiveLM)):
        longest = getattr(model, "max_length", None)
        return SentenceScorer(model.log_prob, vocabulary, measure="log_prob", lengths=(0, longest),
                              what="its positions, language.max_length", **common)
    if isinstance(model, TRF):
        return SentenceScorer(model.log_prob, vocabulary, measure="log_prob_training_zeta",
                              lengths=(1, model.max_length), what="the lengths 1..L of the TRF, language.max_length",
                              **common)
    if isinstance(model, JRF):
        return SentenceScorer(model.log_prob, vocabulary, measure="log_prob_training_zeta",
                              lengths=(1, model.max_length),
                              what="the lengths 1..L of the JRF, L its longest training sentence", **common)
    if isinstance(model, ElectricCloze):
        return SentenceScorer(model.pseudo_log_likelihood, vocabulary, measure="pseudo_log_likelihood",
                              lengths=(1, model.max_length), what="its positions, language.max_length", **common)
    raise TypeError(f"model: expected a BackoffNGram, an AutoregressiveLM, a TRF, a JRF or an ElectricCloze; got "
                    f"{type(model).__name__}")


@dataclass(frozen=True)
class Rescored:
    """What :func:`rescore` chose.

    Attributes:
        best: ``(U,)`` int64 flat index into the n-best of each utterance's chosen hypothesis.
        hypotheses: the ``U`` chosen word sequences.
        combined: ``(N,)`` float64 :math:`S(h)`; ``-inf`` where a model of positive weight has no score.
        scores: each model's ``(N,)`` float64 scores by name (``-inf``: a length it does not score).
        weights: each model's ``lm_weight`` :math:`s w_k` by name.
        unscored: each model's number of hypotheses it has no score for.
    """

    best: Tensor
    hypotheses: list[tuple[str, ...]]
    combined: Tensor
    scores: dict[str, Tensor]
    weights: dict[str, float]
    unscored: dict[str, int]

    def error_rates(self, nbest: NBest, references: Mapping[str, Sequence[str]], *,
                    source: str = "references") -> tuple[ErrorRate, ErrorRate]:
        """``(first pass, rescored)`` word error rates (:func:`ebms.metrics.error_rate`) of the rank-1 and the
        chosen hypotheses against ``references`` (``{utt: words}``).

        Raises:
            ebms.errors.DataError: an utterance without a reference (``source`` names where they came from).
        """
        check_references(nbest, references, source=source)
        refs = [list(references[u]) for u in nbest.utt_ids]
        first = [list(nbest.hypotheses[i]) for i in nbest.first().tolist()]
        return error_rate(refs, first), error_rate(refs, [list(h) for h in self.hypotheses])


def check_references(nbest: NBest, references: Mapping[str, Sequence[str]], *, source: str = "references") -> None:
    """Every utterance of ``nbest`` has a reference in ``references`` (``{utt: words}``).

    Raises:
        ebms.errors.DataError: one lacks it (``source`` names where the references came from).
    """
    missing = [u for u in nbest.utt_ids if u not in references]
    if missing:
        raise DataError(f"{source}: no reference for utterance {missing[0]!r} ({len(missing)} of "
                        f"{nbest.num_utterances} utterances have none); give one 'utt word word ...' line each")


def rescore(nbest: NBest, scorers: Mapping[str, SentenceScorer], weights: Mapping[str, float], *,
            lm_scale: float = 1.0, length_penalty: float = 0.0) -> Rescored:
    r"""Rescore ``nbest`` with the log-linear interpolation of ``scorers`` (module docstring).

    Args:
        nbest: the n-best lists (``N`` hypotheses of ``U`` utterances; acoustic log-likelihoods).
        scorers: ``{name: scorer}``; each hypothesis's words go through the scorer's own tokens and vocabulary.
        weights: ``{name: w_k}``, finite and ``>= 0``, one per scorer.
        lm_scale: :math:`s`, multiplying every weight (finite, ``>= 0``).
        length_penalty: :math:`\beta` per word.

    Raises:
        ValueError: weights not one per scorer, or negative or not finite.
    """
    if set(weights) != set(scorers) or not scorers:
        raise ValueError(f"weights: expected one per scorer {sorted(scorers)}; got {sorted(weights)}")
    lam = {k: float(lm_scale) * float(weights[k]) for k in scorers}
    if not all(math.isfinite(v) and v >= 0 for v in (*lam.values(), float(lm_scale))):
        raise ValueError(f"weights, lm_scale: expected finite values >= 0; got {dict(weights)}, {lm_scale}")
    text = [" ".join(h) for h in nbest.hypotheses]
    scores = {k: s.log_probs(text) for k, s in scorers.items()}
    finite = {k: v.masked_fill(~torch.isfinite(v), 0.0) for k, v in scores.items()}
    combined = combined_scores(nbest, finite, lm_weight=lam, length_penalty=length_penalty)
    for k, v in scores.items():
        if lam[k] > 0:
            combined = combined.masked_fill(~torch.isfinite(v), -math.inf)
    best = nbest.first() + nbest.padded(combined, -math.inf).argmax(-1)  # the first maximum: the better rank
    return Rescored(best, [nbest.hypotheses[i] for i in best.tolist()], combined, scores, lam,
                    {k: int((~torch.isfinite(v)).sum()) for k, v in scores.items()})

r"""Self-training for sequence labelling: the classic semi-supervised baseline of JRF experiments.

Round 0 trains a tagger on the labelled set :math:`D_{lab}`. Each later round labels the sentences
still in the unlabelled pool with the current tagger's Viterbi tags :math:`y^* = \arg\max_y
p(y \mid x)`, moves those whose confidence reaches ``threshold`` into the pseudo-labelled set
:math:`D_{ps}` (with their tags, kept from then on), and trains a fresh tagger (from
``tagger_factory``) on :math:`D_{lab} \cup D_{ps}`. It stops after ``rounds`` rounds, or early when
a round adds nothing. Confidence of a sentence (both in ``[0, 1]``):

* ``"sequence"``: the posterior of the decoded path, :math:`p(y^* \mid x) = e^{U(x, y^*) - U(x)}`;
* ``"min_marginal"``: the least token marginal along it, :math:`\min_t p(y_t = y^*_t \mid x)`
  (at least the sequence posterior).

``max_add`` caps a round's additions at the most confident sentences (ties: lower index first).
``score(tagger) -> float`` (higher is better, e.g. development F1), when given, is called on every
trained tagger, round 0's included, and the result keeps the best one (the earliest on ties) instead
of the last: later rounds can drift as wrong pseudo-labels accumulate.
The tagger and its training are the caller's: ``tagger_factory() -> nn.Module`` and
``train(tagger, sentences, tags)`` (in place); ``conditional(tagger, sentences)`` gives the
:class:`~ebms.structured.linear_chain.LinearChainCRF` of :math:`p(y \mid x)` (default
``tagger(x.tokens, x.lengths)``, as :class:`~ebms.models.crf_tagger.NeuralCRFTagger`; for a
:class:`~ebms.models.jrf.JRF` pass ``lambda m, x: m.crf(x)``). Tags are ``(N, T)`` long, padded
with 0 beyond each length. Cost per round: one training run plus a Viterbi and a forward pass
(forward-backward for ``"min_marginal"``) over the pool, in chunks of ``batch_size``.

References:
    Yarowsky, D. (1995). "Unsupervised word sense disambiguation rivaling supervised methods." ACL.
    McClosky, D., Charniak, E. & Johnson, M. (2006). "Effective self-training for parsing." NAACL.
    Song, Y., Ou, Z., Liu, Z. & Yang, S. (2020). "Upgrading CRFs to JRFs and its benefits to sequence
    modeling and labeling." ICASSP (self-training as the baseline of JRF semi-supervised labelling).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ebms._checks import check_int, check_probability, check_shape, check_tensor
from ebms.sequences import Sequences
from ebms.structured.linear_chain import LinearChainCRF

__all__ = ["CONFIDENCES", "SelfTrainingResult", "SelfTrainingRound", "self_train"]

#: confidence measures :func:`self_train` accepts.
CONFIDENCES = ("sequence", "min_marginal")


@dataclass(frozen=True)
class SelfTrainingRound:
    """One labelling round: ``added`` sentences moved (indices into the unlabelled set, int64
    ``(n,)``), their ``confidence`` (float ``(n,)``), and ``pool`` sentences that were labelled."""

    added: Tensor
    confidence: Tensor
    pool: int


@dataclass(frozen=True)
class SelfTrainingResult:
    """The chosen tagger, the pseudo-labelled set and the rounds.

    Attributes:
        tagger: the tagger trained last (on the labelled plus all pseudo-labelled sentences), or with
            ``score`` the best-scoring one (training run ``best_run``).
        pseudo_index: indices into the unlabelled set of the pseudo-labelled sentences, ``(P,)`` int64,
            in the order they were added.
        pseudo_tags: their tags ``(P, T)`` long (0 beyond each length).
        rounds: one :class:`SelfTrainingRound` per labelling round run.
        scores: ``score`` of each training run in order (run 0 on the labelled set alone); empty
            without ``score``.
        best_run: the training run ``tagger`` comes from (0: the supervised tagger).
    """

    tagger: nn.Module
    pseudo_index: Tensor
    pseudo_tags: Tensor
    rounds: tuple[SelfTrainingRound, ...]
    scores: tuple[float, ...] = ()
    best_run: int = 0


def _default_conditional(tagger: nn.Module, x: Sequences) -> LinearChainCRF:
    return tagger(x.tokens, x.lengths)  # type: ignore[no-any-return]


def _pad(tags: Tensor, width: int) -> Tensor:
    return torch.nn.functional.pad(tags, (0, width - tags.shape[1])) if tags.shape[1] < width else tags


def _cat(x: Sequences, y: Tensor, x2: Sequences, y2: Tensor) -> tuple[Sequences, Tensor]:
    both = Sequences.cat([x, x2])
    w = both.tokens.shape[1]
    return both, torch.cat([_pad(y, w), _pad(y2, w)])


@torch.no_grad()
def _label(tagger: nn.Module, conditional: Callable[[nn.Module, Sequences], LinearChainCRF], x: Sequences,
           confidence: str, batch_size: int) -> tuple[Tensor, Tensor]:
    """Viterbi tags ``(N, T)`` (0 padding) and confidences ``(N,)`` of the sentences ``x``."""
    tags = torch.zeros_like(x.tokens)
    conf = torch.zeros(x.batch_size, dtype=torch.float64, device=x.tokens.device)
    for lo in range(0, x.batch_size, batch_size):
        part = x[torch.arange(lo, min(lo + batch_size, x.batch_size), device=x.tokens.device)]
        crf = conditional(tagger, part)
        if not isinstance(crf, LinearChainCRF):
            raise TypeError(f"conditional(tagger, x): expected a LinearChainCRF; got {type(crf).__name__}")
        best = crf.argmax
        if confidence == "sequence":
            c = (crf.max_score - crf.log_partition).exp()
        else:
            m = crf.marginals.gather(-1, best.clamp(min=0).unsqueeze(-1)).squeeze(-1)
            c = m.masked_fill(best < 0, 1.0).amin(1)
        t = best.shape[1]
        tags[lo: lo + part.batch_size, :t] = best.clamp(min=0)
        conf[lo: lo + part.batch_size] = c.double().clamp(0.0, 1.0)
    return tags, conf


def self_train(tagger_factory: Callable[[], nn.Module],
               train: Callable[[nn.Module, Sequences, Tensor], object],
               labelled: tuple[Sequences, Tensor], unlabelled: Sequences, *, rounds: int = 3,
               threshold: float = 0.9, confidence: str = "sequence", max_add: int | None = None,
               conditional: Callable[[nn.Module, Sequences], LinearChainCRF] | None = None,
               batch_size: int = 256, score: Callable[[nn.Module], float] | None = None) -> SelfTrainingResult:
    """Self-training (module docstring).

    Args:
        tagger_factory: makes a fresh untrained tagger (called once per training run).
        train: trains a tagger in place on ``(sentences, tags)`` (its return value is ignored).
        labelled: ``(sentences (N,), tags (N, T))`` with ``T`` the sentences' padded width.
        unlabelled: the pool ``(M,)`` of untagged sentences.
        rounds: labelling rounds ``>= 0`` (0: the supervised tagger only).
        threshold: confidence in ``[0, 1]`` a sentence needs to be added.
        confidence: ``"sequence"`` or ``"min_marginal"``.
        max_add: at most this many sentences per round (the most confident); ``None``: no cap.
        conditional: ``(tagger, sentences) -> LinearChainCRF``; default ``tagger(tokens, lengths)``.
        batch_size: sentences per labelling chunk.
        score: ``tagger -> float``, higher is better (e.g. F1 on held-out sentences); when given,
            the best-scoring tagger over all training runs is returned. ``None``: the last one.

    Raises:
        TypeError: ``labelled``/``unlabelled`` of the wrong types.
        ValueError: an unknown ``confidence``, bad ``rounds``/``threshold``/``max_add``/``batch_size``,
            tags not shaped like the labelled sentences, a ``score`` that is not finite.
    """
    if not (isinstance(labelled, tuple) and len(labelled) == 2 and isinstance(labelled[0], Sequences)):
        raise TypeError(f"labelled: expected a (Sequences, tags (N, T)) tuple; got {type(labelled).__name__}")
    x_lab, y_lab = labelled
    check_tensor(y_lab, "labelled tags")
    check_shape(y_lab, tuple(x_lab.tokens.shape), "labelled tags")
    unlabelled = Sequences.coerce(unlabelled, name="unlabelled", pairs=False, expected="an ebms.sequences.Sequences")
    rounds = check_int(rounds, "rounds", minimum=0)
    threshold = check_probability(threshold, "threshold")
    if confidence not in CONFIDENCES:
        raise ValueError(f"confidence: expected one of {', '.join(CONFIDENCES)}; got {confidence!r}")
    cap = None if max_add is None else check_int(max_add, "max_add", minimum=1)
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    cond = conditional or _default_conditional
    if score is not None and not callable(score):
        raise TypeError(f"score: expected a callable tagger -> float or None; got {type(score).__name__}")
    y_lab = y_lab.long().masked_fill(~x_lab.mask(), 0)
    scores: list[float] = []
    best: tuple[float, nn.Module, int] | None = None  # score, tagger, training run
    runs = 0

    def fitted(tagger: nn.Module) -> None:
        nonlocal best, runs
        runs += 1
        if score is not None:
            s = float(score(tagger))
            if not math.isfinite(s):
                raise ValueError(f"score(tagger) of training run {runs - 1}: expected a finite number; got {s}")
            scores.append(s)
            if best is None or s > best[0]:
                best = (s, tagger, runs - 1)

    tagger = tagger_factory()
    train(tagger, x_lab, y_lab)
    fitted(tagger)
    dev = unlabelled.tokens.device
    pool = torch.arange(unlabelled.batch_size, device=dev)
    index = torch.zeros(0, dtype=torch.long, device=dev)
    tags = torch.zeros(0, unlabelled.tokens.shape[1], dtype=torch.long, device=dev)
    history: list[SelfTrainingRound] = []
    for _ in range(rounds):
        if pool.numel() == 0:
            break
        new_tags, conf = _label(tagger, cond, unlabelled[pool], confidence, batch_size)
        keep = (conf >= threshold).nonzero().squeeze(1)
        if cap is not None and keep.numel() > cap:
            order = torch.sort(-conf[keep], stable=True).indices[:cap]
            keep = keep[order.sort().values]
        history.append(SelfTrainingRound(pool[keep], conf[keep], int(pool.numel())))
        if keep.numel() == 0:
            break
        index = torch.cat([index, pool[keep]])
        tags = torch.cat([tags, new_tags[keep]])
        left = torch.ones(pool.numel(), dtype=torch.bool, device=dev)
        left[keep] = False
        pool = pool[left]
        x_all, y_all = _cat(x_lab, y_lab, unlabelled[index], tags)
        tagger = tagger_factory()
        train(tagger, x_all, y_all)
        fitted(tagger)
    _, chosen, run = best if best is not None else (None, tagger, runs - 1)
    return SelfTrainingResult(chosen, index, tags, tuple(history), tuple(scores), run)

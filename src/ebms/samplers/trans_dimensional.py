r"""Trans-dimensional sampling over (length, tokens): local length jumps plus moves within a length.

Target, over sentences :math:`x` of length :math:`l = |x|` in ``[min_length, max_length]`` of a
:class:`~ebms.spaces.TokenSequences` space,

.. math::  p(l, x) \propto \exp\big(a_l - E(x)\big),

where the *target* is either a :class:`~ebms.capabilities.TransDimensionalTarget` (``energy(x)`` and
per-length log weights ``length_log_weights()[l] = a_l``, e.g. :math:`\log\pi_l - \zeta_l` of a TRF) or
any callable ``E(Sequences) -> (B,)`` (then :math:`a = 0`: the callable is the joint energy). One step is one
*local jump* then ``sweeps`` sweeps of *within-length moves* over the positions (the trans-dimensional
mixture sampling of Wang, Ou & Tan 2018, monograph §3.3 and §2.8.1 of the digest).

**Token proposal** :math:`g(y \mid x_{\setminus i})` for the token at a position ``i`` (the new last
token of a jump, or an existing one), from ``token_probs`` :math:`q` (default uniform; tokens with
:math:`q = 0`, e.g. a boundary id, are never proposed) and optional ``classes``:

* without classes: :math:`g(y) = q(y)` (uniform or unigram);
* with classes: draw a class :math:`c \sim Q(c) = \sum_{w \in c} q(w)`, then the word from the exact
  conditional inside the class, :math:`g(y) = Q(c)\,e^{-E(x^{i \to y})} / S_c`, with
  :math:`S_c = \sum_{w \in c,\, q(w) > 0} e^{-E(x^{i \to w})}`. One class holding every token makes
  the within-length move an exact Gibbs update.

Every candidate token's score :math:`-E(x^{i \to w})` (up to a per-row constant) comes from the
target's ``token_logits(x, position, candidates)`` when it offers it
(:class:`~ebms.capabilities.SupportsTokenLogits`: local features only, e.g. n-gram feature energies),
else from one energy call over the variants.

**Moves** (``trials`` :math:`= m`; multiple-trial Metropolis, Liu, Liang & Wong 2000, with
independent trials :math:`y_1..y_m \sim g` and weights :math:`w(y) = \tilde p(y) / g(y)`):

* *within a length*, position ``i``: pick :math:`y_s \propto w`; accept with
  :math:`\min\{1, \sum_j w(y_j) / (\sum_j w(y_j) - w(y_s) + w(x_i))\}` (:math:`m = 1`: plain MH;
  class proposals give :math:`\frac{Q(c_i) S_{c'}}{Q(c') S_{c_i}}`, the monograph's MH-within-Gibbs).
* *jump* from length :math:`k` to :math:`j = k \pm 1` with :math:`\Gamma(k, j) = 1/2` (1 at the
  ends of the length range): growing appends :math:`y_s` and accepts with
  :math:`\min\{1, \frac{\Gamma(j,k)\, \frac1m \sum_i p(j, x y_i)/g(y_i)}{\Gamma(k,j)\, p(k, x)}\}`;
  shrinking drops the last token :math:`y` and accepts with the inverse ratio, the average taken over
  :math:`y` and :math:`m - 1` fresh trials. With :math:`m = 1` these are the ratios of Algorithm 1
  of Wang, Ou & Tan.

Each move satisfies detailed balance with respect to :math:`p`, so a step leaves it invariant
(``tests/samplers/test_trans_dimensional.py`` builds the exact transition matrix by enumeration).

**Scan order.** ``scan="sequential"`` (default) sweeps the positions ``0, 1, ..., T - 1`` one call
each. ``scan="colored"`` needs a target whose terms read positions at most ``d`` apart
(:class:`~ebms.capabilities.SupportsInteractionRange`; an order-4 TRF with the ``tied`` group: 9):
positions ``d + 1`` or more apart are conditionally independent given the others, so the positions
``i = c mod (d + 1)`` of colour ``c`` are moved in one call, colours ``0, 1, ..., d`` in turn. Moving
independent positions at once is moving them one after the other, so a colored sweep is the
sequential sweep in the order ``0, d + 1, 2(d + 1), ..., 1, d + 2, ...``: the same moves and
invariant law, in ``min(d + 1, T)`` calls instead of ``T``, and other chains than the sequential
scan's for the same seed (Gelfand & Smith 1990 on Gibbs sampling of conditionally independent sites;
the chequerboard update of Ising models is the case ``d = 1``).

**Cost per step** (``B`` chains, ``T`` the longest length, ``K`` the candidates of a trial: 1
without classes, the class size with classes, ``V`` for exact Gibbs): one jump = one score call over
about ``B (m + 1) K`` candidates and one energy call of ``B`` rows; one sweep = ``T`` score calls
(``min(d + 1, T)`` with ``scan="colored"``, each over the rows of its positions)
(``token_logits`` when offered, else one energy call over the substituted sentences). A few host
syncs per step (the longest length bounds the sweep; ragged classes are gathered with
``nonzero``). ``state.energy`` caches the *joint* energy
:math:`E(x) - a_{|x|}`; after the model's parameters or :math:`\zeta` change, call :meth:`init`
again on ``state.x`` (one energy call) before stepping.

References:
    Wang, Ou & Tan (2018), "Learning trans-dimensional random fields with applications to language
    modeling", IEEE TPAMI 40(4).
    Green (1995), "Reversible jump Markov chain Monte Carlo computation and Bayesian model
    determination", Biometrika 82(4).
    Liu, Liang & Wong (2000), "The multiple-try method and local optimization in Metropolis
    sampling", JASA 95(449).
    Ou (2024), "Energy-Based Models with Applications to Speech and Language Processing", §3.2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import Tensor

from ebms._checks import check_energy_output, check_int, check_tensor
from ebms.capabilities import (
    SupportsFlatTokenLogits,
    SupportsInteractionRange,
    SupportsTokenLogits,
    TransDimensionalTarget,
    supports,
)
from ebms.distributions import sample_categorical
from ebms.energy import EnergyLike
from ebms.samplers._base import ChainState, StepInfo, _check_start, mh_accept
from ebms.samplers._chain_groups import _INFO, ChainWorkers, block_generators, blocks
from ebms.samplers._discrete import DiscreteSampler, resolve_token_space
from ebms.samplers._trans_flat import class_trials_flat, draw_in_segments
from ebms.sequences import Sequences
from ebms.spaces import TokenSequences

#: the protocols live in :mod:`ebms.capabilities`; re-exported here for the sampler's users
__all__ = ["SupportsTokenLogits", "TransDimensional", "TransDimensionalInfo", "TransDimensionalTarget"]


@dataclass(frozen=True)
class TransDimensionalInfo(StepInfo):
    """:class:`~ebms.samplers.StepInfo` plus the jump's own figures.

    ``accept_prob`` averages every MH decision of the step for a chain (its jump and its position
    moves). Attributes: ``jump_accept_prob`` ``(B,)``; ``jumped`` bool ``(B,)`` (the length changed);
    ``move_accept_prob`` ``(B,)``, mean over the chain's within-length moves (1 when it had none).
    """

    jump_accept_prob: Tensor
    jumped: Tensor
    move_accept_prob: Tensor


#: the scan orders of the within-length sweep (module docstring)
SCANS = ("sequential", "colored")


class _Tables(NamedTuple):
    log_q: Tensor  # (V,) log proposal probabilities (-inf off the support)
    class_of: Tensor | None  # (V,) class index in [0, C)
    words: Tensor | None  # (C, K) support words of each class, padded with 0
    real: Tensor | None  # (C, K) bool, a real entry of `words`
    slot: Tensor | None  # (V,) index of each token inside its class row
    log_class: Tensor | None  # (C,) log Q(c)
    members: Tensor | None  # (M,) the support words ordered by class, then id (the rows of `words`, unpadded)
    class_start: Tensor | None  # (C,) where each class's words start in `members`
    class_size: Tensor | None  # (C,) how many support words each class has


def _draw(logits: Tensor, generator: torch.Generator | None) -> Tensor:
    """Every random choice of the kernel: one category per row of ``logits (B, K)``."""
    return sample_categorical(logits, generator)


def _draw_word(s: Tensor, first: Tensor, length: Tensor, act: Tensor, B: int, width: int,
               generator: torch.Generator | None) -> Tensor:
    """Every within-class word draw of the flat route (:func:`~ebms.samplers._trans_flat.draw_in_segments`)."""
    return draw_in_segments(s, first, length, act, B, width, generator)


def _accept(log_ratio: Tensor, generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
    """Every MH decision of the kernel (``(accepted, accept_prob)``)."""
    return mh_accept(log_ratio, generator)


def _pick(t: Tensor, index: Tensor) -> Tensor:
    """``t[b, index[b]]`` for ``t (B, K)``."""
    return t.gather(1, index[:, None]).squeeze(1)


class TransDimensional(DiscreteSampler):
    """Trans-dimensional MH sampler over (length, tokens); see the module docstring for the moves.

    Args:
        space: the :class:`~ebms.spaces.TokenSequences` (vocabulary and length range); ``None``
            means ``energy.space``.
        token_probs: proposal weights ``(V,)`` over tokens, non-negative (normalised here); zero
            entries are never proposed and may not occur in the chains. Default: uniform.
        classes: optional class index per token ``LongTensor (V,)`` in ``[0, C)``; turns on class
            proposals (class from :math:`Q`, word from the exact within-class conditional).
        trials: multiple-trial count ``m >= 1``.
        sweeps: within-length sweeps per step (``>= 0``).
        jump: make the local length jump (``False``: fixed lengths).
        groups: split the chains into this many blocks of rows, each stepped with its own generator
            seeded from the caller's (:mod:`ebms.samplers._chain_groups`); 1: one generator for all.
        workers: processes that step the blocks (``<= groups``; 1: this one); a speed setting only:
            the chains do not depend on it. CPU chains and an ``nn.Module`` target only.
        scan: ``"sequential"`` (one position per call) or ``"colored"`` (positions farther apart than
            the target's ``interaction_range()`` in one call; see the module docstring).

    Example:
        >>> import torch
        >>> from ebms.spaces import TokenSequences
        >>> space = TokenSequences(5, max_length=6)
        >>> table = torch.randn(5, generator=torch.Generator().manual_seed(0))
        >>> unigram = lambda s: (table[s.tokens] * s.mask()).sum(-1) + 0.5 * s.lengths
        >>> g = torch.Generator().manual_seed(1)
        >>> x = TransDimensional(space=space).sample(unigram, space.random(8, generator=g), 20, generator=g)
        >>> x.tokens.shape
        torch.Size([8, 6])
    """

    accepts_sequences = True

    def __init__(self, *, space: TokenSequences | None = None, token_probs: Tensor | None = None,
                 classes: Tensor | None = None, trials: int = 1, sweeps: int = 1, jump: bool = True,
                 groups: int = 1, workers: int = 1, scan: str = "sequential") -> None:
        if space is not None and not isinstance(space, TokenSequences):
            raise TypeError(f"space: expected an ebms.spaces.TokenSequences or None; got {type(space).__name__}")
        super().__init__(space=space)
        self.trials = check_int(trials, "trials", minimum=1)
        self.sweeps = check_int(sweeps, "sweeps", minimum=0)
        if not isinstance(jump, bool):
            raise TypeError(f"jump: expected a bool; got {type(jump).__name__}")
        self.jump = jump
        self.groups = check_int(groups, "groups", minimum=1)
        self.workers = check_int(workers, "workers", minimum=1)
        if self.workers > self.groups:
            raise ValueError(f"workers: expected at most groups={self.groups} processes (one block each at least); "
                             f"got {self.workers}")
        if scan not in SCANS:
            raise ValueError(f"scan: expected one of {', '.join(map(repr, SCANS))}; got {scan!r}")
        self.scan = scan
        self._pool: ChainWorkers | None = None
        self._probs = None if token_probs is None else self._check_probs(token_probs)
        self._classes = None if classes is None else self._check_classes(classes, self._probs)
        self._memo: dict[tuple[int, str], _Tables] = {}

    @staticmethod
    def _check_probs(probs: Any) -> Tensor:
        check_tensor(probs, "token_probs", floating=True)
        if probs.dim() != 1 or probs.shape[0] < 1:
            raise ValueError(f"token_probs: expected a 1-D tensor (V,); got shape {tuple(probs.shape)}")
        if not bool(torch.isfinite(probs).all()) or float(probs.min()) < 0 or float(probs.sum()) <= 0:
            raise ValueError("token_probs: expected finite non-negative weights with a positive sum; got min "
                             f"{float(probs.min()):.4g}, sum {float(probs.sum()):.4g}")
        return probs.detach()

    @staticmethod
    def _check_classes(classes: Any, probs: Tensor | None) -> Tensor:
        check_tensor(classes, "classes")
        if classes.dtype != torch.long or classes.dim() != 1:
            raise TypeError(f"classes: expected a LongTensor (V,) of class indices; got {classes.dtype} "
                            f"{tuple(classes.shape)}")
        if probs is not None and classes.shape != probs.shape:
            raise ValueError(f"classes: expected shape {tuple(probs.shape)} like token_probs; got {tuple(classes.shape)}")
        if classes.numel() and int(classes.min()) < 0:
            raise ValueError(f"classes: expected indices >= 0; got {int(classes.min())}")
        return classes.detach()

    def _tables(self, V: int, device: torch.device) -> _Tables:
        """Proposal tables for ``V`` tokens on ``device`` (built once, remembered)."""
        key = (V, str(device))
        if key in self._memo:
            return self._memo[key]
        for name, t in (("token_probs", self._probs), ("classes", self._classes)):
            if t is not None and t.shape[0] != V:
                raise ValueError(f"{name}: expected {V} entries (the space's vocab_size); got {t.shape[0]}")
        probs = torch.ones(V, dtype=torch.float64) if self._probs is None else self._probs.double().cpu()
        log_q = (probs / probs.sum()).log()
        tables = _Tables(log_q.to(device), None, None, None, None, None, None, None, None)
        if self._classes is not None:
            cls = self._classes.cpu()
            C = int(cls.max()) + 1
            support = probs > 0
            order = torch.argsort(cls * V + torch.arange(V), stable=True)  # by class, then token id
            order = order[support[order]]
            sizes = torch.bincount(cls[order], minlength=C)
            starts = torch.cumsum(sizes, 0) - sizes
            slot = torch.zeros(V, dtype=torch.long)
            slot[order] = torch.arange(order.numel()) - starts[cls[order]]
            K = max(int(sizes.max()), 1)
            words = torch.zeros(C, K, dtype=torch.long)
            words[cls[order], slot[order]] = order
            real = torch.arange(K) < sizes[:, None]
            class_mass = torch.zeros(C, dtype=torch.float64).index_add_(0, cls, probs / probs.sum())
            tables = _Tables(log_q.to(device), cls.to(device), words.to(device), real.to(device),
                             slot.to(device), class_mass.log().to(device), order.to(device), starts.to(device),
                             sizes.to(device))
        self._memo[key] = tables
        return tables

    # -- target access ------------------------------------------------------------------------
    @staticmethod
    def _parts(energy: Any, space: TokenSequences, device: torch.device) -> tuple[Any, Tensor]:
        """``(E, a)``: the energy callable and the length log weights ``(max_length + 1,)``."""
        if supports(energy, TransDimensionalTarget):
            a = energy.length_log_weights().detach()
            if tuple(a.shape) != (space.max_length + 1,):
                raise ValueError(f"length_log_weights(): expected shape ({space.max_length + 1},) "
                                 f"(index = length, 0..max_length); got {tuple(a.shape)}")
            return energy.energy, a.to(device)
        return energy, torch.zeros(space.max_length + 1, dtype=torch.float64, device=device)

    @staticmethod
    def _scores(fn: Any, x: Sequences, pos: Tensor, cand: Tensor) -> Tensor:
        """``-E`` of ``x`` with ``pos`` set to each candidate ``(B, K)``: one energy call of ``B K`` rows."""
        B, K = cand.shape
        T = x.max_length
        tok = x.tokens.unsqueeze(1).expand(B, K, T).clone()
        tok.scatter_(2, pos.view(B, 1, 1).expand(B, K, 1), cand.unsqueeze(2))
        v = Sequences(tok.view(B * K, T), x.lengths.repeat_interleave(K), validate=False)
        return -check_energy_output(fn(v), B * K).view(B, K)

    def _scored(self, fn: Any, tl: Any, x: Sequences, pos: Tensor, cand: Tensor, real: Tensor,
                rows: Tensor | None) -> Tensor:
        """Scores ``(B, G, K)`` of ``cand (B, G, K)`` at the ``real`` entries of the ``rows`` to move
        (others: ``-inf`` off ``real``, 0 on it). ``token_logits`` gets the ragged classes with ``-1``
        for absent entries; the generic route scores one substituted sentence per wanted candidate."""
        B, G, K = cand.shape
        want = real if rows is None else real & rows[:, None, None]
        if tl is not None:
            s = tl(x, pos, cand.masked_fill(~want, -1).view(B, G * K)).view(B, G, K)
            return s.masked_fill(~want, 0.0).masked_fill(~real, -math.inf)
        if bool(want.all()):
            return self._scores(fn, x, pos, cand.view(B, G * K)).view(B, G, K)
        row, g, k = want.nonzero(as_tuple=True)
        flat = self._scores(fn, x[row], pos[row], cand[row, g, k][:, None])[:, 0]
        s = torch.zeros(cand.shape, dtype=flat.dtype, device=flat.device)
        s[row, g, k] = flat
        return s.masked_fill(~real, -math.inf)

    def _trials(self, fn: Any, tl: Any, tab: _Tables, x: Sequences, pos: Tensor, cur: Tensor,
                rows: Tensor | None, gen: Any) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """``m`` proposal trials at ``pos`` and the current token ``cur``'s weight.

        Returns ``(y (B, m), ly (B, m), lw (B, m), l_cur (B,), lw_cur (B,))``: the trial tokens, their
        scores, log weights :math:`\\log w = \\log\\tilde p - \\log g` (same per-row constant as the
        scores), and the score and log weight of ``cur``. Only the ``rows`` (bool ``(B,)``; ``None``:
        all) are scored; the draws cover every row.
        """
        B, m = x.batch_size, self.trials
        tl, flat = tl  # the padded and the flat substitution scorers (None: not offered)
        if tab.class_of is None:
            y = torch.stack([_draw(tab.log_q.expand(B, -1), gen) for _ in range(m)], 1)
            cand = torch.cat([y, cur[:, None]], 1)
            real = torch.ones(B, 1, m + 1, dtype=torch.bool, device=x.device)
            s = self._scored(fn, tl, x, pos, cand[:, None], real, rows)[:, 0]
            lq = tab.log_q[cand]
            return y, s[:, :m], s[:, :m] - lq[:, :m], s[:, m], s[:, m] - lq[:, m]
        assert tab.words is not None and tab.real is not None and tab.slot is not None and tab.log_class is not None
        C = tab.words.shape[0]
        c = torch.stack([_draw(tab.log_class.expand(B, -1), gen) for _ in range(m)], 1)  # (B, m)
        c_cur = tab.class_of[cur]
        if flat is not None:
            return class_trials_flat(flat, tab, x, pos, cur, c, c_cur, rows, gen, _draw_word)
        groups = c[:, :1] if C == 1 else torch.cat([c, c_cur[:, None]], 1)  # (B, G) classes to score
        cand = tab.words[groups]  # (B, G, K)
        s = self._scored(fn, tl, x, pos, cand, tab.real[groups], rows)
        lse = torch.logsumexp(s, 2)  # (B, G)
        at = [0] * (m + 1) if C == 1 else list(range(m + 1))  # group of trial i, then of cur
        ks = [_draw(s[:, at[i]], gen) for i in range(m)]
        y = torch.stack([_pick(cand[:, at[i]], ks[i]) for i in range(m)], 1)
        ly = torch.stack([_pick(s[:, at[i]], ks[i]) for i in range(m)], 1)
        lw = lse[:, at[:m]] - tab.log_class[c]
        l_cur = _pick(s[:, at[m]], tab.slot[cur])
        return y, ly, lw, l_cur, lse[:, at[m]] - tab.log_class[c_cur]

    # -- contract -----------------------------------------------------------------------------
    def init(self, energy: EnergyLike, x0: Any) -> ChainState:
        """Start chains at ``x0`` (padded to ``max_length``); caches the joint energy :math:`E(x) - a_{|x|}`."""
        space = resolve_token_space(self.token_space, energy)
        if not isinstance(x0, Sequences):
            raise TypeError(f"x0: expected an ebms.sequences.Sequences batch; got {type(x0).__name__}")
        x = space.validate(x0, "x0").pad_to(max(space.max_length, x0.max_length))
        x = Sequences(x.tokens[:, : space.max_length].clone(), x.lengths, validate=False)
        tab = self._tables(space.vocab_size, x.device)
        off = x.mask() & torch.isinf(tab.log_q[x.tokens])
        if bool(off.any()):
            b, t = (int(i) for i in off.nonzero()[0])
            raise ValueError(f"x0: token {int(x.tokens[b, t])} at sequence {b}, position {t} has proposal "
                             "probability 0 (token_probs), so the chain could never move it; start elsewhere")
        fn, a = self._parts(energy, space, x.device)
        with torch.no_grad():
            f = check_energy_output(fn(x), x.batch_size).detach()
            e = f - a.to(f.dtype)[x.lengths]
        _check_start(e, None)
        return ChainState(x=x, energy=e, grad=None, step_size=torch.ones((), dtype=e.dtype, device=x.device))

    @staticmethod
    def _log_gamma(k: Tensor, lo: int, hi: int, dtype: torch.dtype, *, down: bool) -> Tensor:
        """``log Γ(k, k - 1)`` (``down``) or ``log Γ(k, k + 1)``: 1/2 inside the range, 1 or 0 at its ends."""
        end, other = (hi, lo) if down else (lo, hi)
        half = torch.full(k.shape, -math.log(2.0), dtype=dtype, device=k.device)
        return torch.where(k == end, 0.0, torch.where(k == other, -math.inf, half))

    def _jump(self, fn: Any, tl: Any, tab: _Tables, a: Tensor, space: TokenSequences, x: Sequences, e: Tensor,
              gen: Any) -> tuple[Sequences, Tensor, Tensor, Tensor, Tensor]:
        """The local jump ``k -> k ± 1`` of every chain: ``(x, e, accepted, accept_prob, nonfinite)``."""
        lo, hi, k, m = space.min_length, space.max_length, x.lengths, self.trials
        log_up, log_dn = (self._log_gamma(k, lo, hi, e.dtype, down=d) for d in (False, True))
        up = _draw(torch.stack([log_dn, log_up], 1), gen) == 1
        long_len = k + up.long()  # the longer of the two sentences, with its last position `pos`
        pos = long_len - 1
        tokens = x.tokens.clone()
        filler = tab.log_q.argmax()  # a token of the support holds the new position while scoring
        last = torch.where(up, filler, _pick(tokens, pos))
        tokens.scatter_(1, pos[:, None], last[:, None])
        y, ly, lw, l_cur, lw_cur = self._trials(fn, tl, tab, Sequences(tokens, long_len, validate=False),
                                                pos, last, None, gen)
        sel = _draw(lw, gen)
        tokens.scatter_(1, pos[:, None], torch.where(up, _pick(y, sel), last)[:, None])
        new_len = torch.where(up, k + 1, k - 1).clamp(min=0)
        x_new = Sequences(tokens, new_len, validate=False)
        f_new = check_energy_output(fn(x_new), x.batch_size).detach()
        f_cur = e + a[k]
        const = torch.where(up, -f_new - _pick(ly, sel), -f_cur - l_cur)  # scores + const = -E exactly
        ref = torch.cat([lw[:, : m - 1], lw_cur[:, None]], 1)  # shrink: the dropped token + m - 1 trials
        log_long = a[long_len] + const + torch.where(up, lw.logsumexp(1), ref.logsumexp(1)) - math.log(m)
        log_short = torch.where(up, a[k] - f_cur, a[new_len] - f_new)
        log_ratio = torch.where(up, log_long - log_short + self._log_gamma(k + 1, lo, hi, e.dtype, down=True) - log_up,
                                log_short - log_long + self._log_gamma(k - 1, lo, hi, e.dtype, down=False) - log_dn)
        e_new = f_new - a[new_len]
        bad = torch.isnan(e_new) | (e_new == -math.inf)
        accepted, prob = _accept(log_ratio.masked_fill(bad, -math.inf), gen)
        x_out = Sequences(torch.where(accepted[:, None], tokens, x.tokens), torch.where(accepted, new_len, k),
                          validate=False)
        return x_out, torch.where(accepted, e_new, e), accepted, prob, bad

    def _colors(self, energy: Any, longest: int) -> int:
        """The stride between the positions of one call: ``longest`` (sequential: one position per call), or
        the target's interaction range + 1 (colored)."""
        if self.scan == "sequential":
            return max(longest, 1)
        d = energy.interaction_range() if supports(energy, SupportsInteractionRange) else None
        if d is None:
            raise ValueError(f"scan: 'colored' needs a target whose terms read positions a bounded distance apart "
                             f"(interaction_range(), e.g. a TRF over DiscreteFeatures); {type(energy).__name__} "
                             "declares none: use scan='sequential'")
        return max(int(d) + 1, 1)

    def _move(self, fn: Any, tl: Any, tab: _Tables, x: Sequences, e: Tensor, at: list[int],
              gen: Any) -> tuple[Sequences, Tensor, Tensor, Tensor, Tensor]:
        """The within-length moves at the positions ``at`` ``(P,)`` of every chain, at once (they must be
        conditionally independent: one position, or a colour of ``scan="colored"``).

        The ``P B`` moves are rows ``p B + b`` (position ``at[p]`` of chain ``b``); rows beyond a chain's
        length do not move. Returns ``(x, e, accept_prob summed, moves made, nonfinite)``, per chain ``(B,)``.
        """
        B, P = x.batch_size, len(at)
        pos = torch.tensor(at, dtype=torch.long, device=x.device).repeat_interleave(B)  # (P B,) slot-major
        xs = x if P == 1 else Sequences(x.tokens.repeat(P, 1), x.lengths.repeat(P), validate=False)
        active = xs.lengths > pos
        cur = xs.tokens.gather(1, pos[:, None]).squeeze(1)
        y, ly, lw, l_cur, lw_cur = self._trials(fn, tl, tab, xs, pos, cur, active, gen)
        sel = _draw(lw, gen)
        log_ratio = lw.logsumexp(1) - lw.scatter(1, sel[:, None], lw_cur[:, None]).logsumexp(1)
        ly_sel = _pick(ly, sel)
        e_new = e.repeat(P) + l_cur - ly_sel  # each row's move alone in its chain
        bad = active & (torch.isnan(e_new) | (e_new == -math.inf))
        accepted, prob = _accept(log_ratio.masked_fill(bad | ~active, -math.inf), gen)
        new = torch.where(accepted, _pick(y, sel), cur)
        tokens = x.tokens.clone()
        for p, i in enumerate(at):  # one position after the other: the sequential scan's running energy
            r = slice(p * B, (p + 1) * B)
            tokens[:, i] = new[r]
            e = torch.where(accepted[r], e + l_cur[r] - ly_sel[r], e)
        per_chain = (prob * active).view(P, B).sum(0), active.view(P, B).sum(0), bad.view(P, B).any(0)
        return x.with_tokens(tokens), e, *per_chain

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_pool"] = None  # worker processes stay with their parent
        return state

    def step(self, energy: EnergyLike, state: ChainState, *,
             generator: torch.Generator | None = None) -> tuple[ChainState, TransDimensionalInfo]:
        """One jump then ``sweeps`` within-length sweeps; returns ``(state, info)`` (by blocks when ``groups > 1``)."""
        B = state.x.batch_size
        if self.groups == 1 or B == 0:
            return self._step_block(energy, state, generator)
        device = state.x.device
        rows, seeds = blocks(B, self.groups), block_generators(self.groups, generator, device)
        pool = self._workers_for(energy, device) if self.workers > 1 else None
        parts: list[Any] = [None] * self.groups
        for g, r in enumerate(rows):  # blocks of the worker processes first, then this process's
            if pool is not None and g % self.workers and r.numel():
                pool.submit(g % self.workers - 1, state.x[r], state.energy[r], state.t, seeds[g])
        try:
            for g, r in enumerate(rows):
                if r.numel() and (pool is None or g % self.workers == 0):
                    gen = torch.Generator(device=device).manual_seed(seeds[g])
                    new, info = self._step_block(energy, state.replace(x=state.x[r], energy=state.energy[r]), gen)
                    parts[g] = (new.x, new.energy, {f: getattr(info, f) for f in _INFO})
        except BaseException:
            if pool is not None:  # the workers' results of this step are never read: start them afresh
                pool.close()
                self._pool = None
            raise
        for g, r in enumerate(rows):
            if pool is not None and g % self.workers and r.numel():
                parts[g] = pool.result(g % self.workers - 1, device)
        done = [p for p in parts if p is not None]
        x = Sequences.cat([p[0] for p in done])
        info = TransDimensionalInfo(**{f: torch.cat([p[2][f] for p in done]) for f in _INFO})
        return state.replace(x=x, energy=torch.cat([p[1] for p in done]), t=state.t + 1), info

    def _workers_for(self, energy: Any, device: torch.device) -> ChainWorkers:
        """The worker processes, forked (again) when the target is new or has changed storage."""
        if device.type != "cpu":
            raise ValueError(f"workers: worker processes step CPU chains only; these are on {device}: use workers=1")
        if self._pool is None or not self._pool.matches(energy):
            if self._pool is not None:
                self._pool.close()
            self._pool = None
            self._pool = ChainWorkers(self, energy, self.workers - 1)
        return self._pool

    def _step_block(self, energy: EnergyLike, state: ChainState,
                    generator: torch.Generator | None) -> tuple[ChainState, TransDimensionalInfo]:
        """One jump then ``sweeps`` within-length sweeps of every chain of ``state`` with ``generator``."""
        x, e = state.x, state.energy
        space = resolve_token_space(self.token_space, energy)
        tab = self._tables(space.vocab_size, x.device)
        fn, a = self._parts(energy, space, x.device)
        a = a.to(e.dtype)
        tl = (energy.token_logits if supports(energy, SupportsTokenLogits) else None,
              energy.token_logits_flat if supports(energy, SupportsFlatTokenLogits) else None)
        B = x.batch_size
        zeros = torch.zeros(B, dtype=e.dtype, device=x.device)
        bad = torch.zeros(B, dtype=torch.bool, device=x.device)
        jumped, jump_prob = bad.clone(), zeros
        n_dec, total = zeros.clone(), zeros.clone()
        with torch.no_grad():
            if self.jump and space.max_length > space.min_length and B:
                longest = min(int(x.lengths.max()) + 1, space.max_length)
                x, e, jumped, jump_prob, bad_j = self._jump(fn, tl, tab, a, space, x, e, generator)
                bad, n_dec, total = bad | bad_j, n_dec + 1, total + jump_prob
            else:
                longest = int(x.lengths.max()) if B else 0
            moves, move_sum = zeros.clone(), zeros.clone()
            width = self._colors(energy, longest) if self.sweeps else 1
            for _ in range(self.sweeps):
                for i in range(min(width, longest)):
                    x, e, p, active, bad_m = self._move(fn, tl, tab, x, e, list(range(i, longest, width)), generator)
                    bad, moves, move_sum = bad | bad_m, moves + active, move_sum + p
        n_dec, total = n_dec + moves, total + move_sum
        info = TransDimensionalInfo(
            accept_prob=torch.where(n_dec > 0, total / n_dec.clamp(min=1), 1.0), accepted=jumped | (moves > 0),
            energy=e, nonfinite=bad, jump_accept_prob=jump_prob, jumped=jumped,
            move_accept_prob=torch.where(moves > 0, move_sum / moves.clamp(min=1), 1.0))
        return state.replace(x=x, energy=e, t=state.t + 1), info

    def __repr__(self) -> str:
        cls = "" if self._classes is None else f", classes={int(self._classes.max()) + 1}"
        par = "" if self.groups == 1 else f", groups={self.groups}, workers={self.workers}"
        par += "" if self.scan == "sequential" else f", scan={self.scan!r}"
        return (f"TransDimensional(trials={self.trials}, sweeps={self.sweeps}, jump={self.jump}{cls}{par}, "
                f"space={self.token_space!r})")

"""Linear-chain CRF: one forward recursion over a semiring, and a distribution on top.

Score convention (log-potentials, i.e. ``score = -energy``): for a sequence of length ``L``,

    score(y) = start[y_1] + sum_{t=1..L} emissions[t, y_t] + sum_{t=2..L} transitions[y_{t-1}, y_t]
               + end[y_L],        p(y | x) = exp(score(y) - log Z),

the linear-chain CRF of Lafferty, McCallum & Pereira (2001), "Conditional random fields", Eq. 4.3
of the monograph with ``transitions = A``. Shapes: ``B`` batch, ``T`` padded length, ``C`` tags.

The recursion (forward algorithm; max gives Viterbi) is written once::

    alpha_1(k) = start[k] + emissions[1, k]
    alpha_t(k) = (+)_j alpha_{t-1}(j) (x) (transitions[j, k] + emissions[t, k])      t <= L
    total      = (+)_k alpha_L(k) (x) end[k]

with ``(+), (x)`` from :mod:`ebms.structured.semiring`; for ``t > L`` the state is carried over,
so ragged batches need no Python loop over the batch. Cost: ``O(T B C^2)`` time, ``T`` sequential
steps, ``O(T B C^2)`` memory for the edge potentials. Marginals are gradients of ``log Z`` with
respect to the potentials (Eisner, 2016, "Inside-outside and forward-backward algorithms are just
backprop"), taken with ``create_graph`` so that they stay differentiable; Viterbi and k-best paths
are read from back-pointers (k-best: the ``k`` best prefixes per tag, the parallel list Viterbi
algorithm of Seshadri & Sundberg, 1994, "List Viterbi decoding algorithms with applications"). Sequences of length
0 (and empty batches) are split off: they have one tagging, the empty one, of score 0.

Layout: the recursions are in :mod:`ebms.structured._chain_dp`, the scaled ``log Z`` with its
hand-written gradient, the marginals and the result caching in :mod:`ebms.structured._chain_grad`,
the argument checks and masks in :mod:`ebms.structured._chain_inputs`; this module holds
:class:`LinearChainCRF` and re-exports :func:`linear_chain_forward` and :func:`bio_allowed_transitions`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ebms._checks import check_bool_mask, check_int, check_shape, check_tensor
from ebms.structured._chain_dp import count_paths, ffbs, kbest_paths, linear_chain_forward, viterbi
from ebms.structured._chain_grad import GraphResults, chain_log_z, marginals_by_grad, safe_dot
from ebms.structured._chain_inputs import (
    bio_allowed_transitions,
    check_lengths,
    check_potentials,
    mask_potential,
    no_allowed,
)

__all__ = ["LinearChainCRF", "bio_allowed_transitions", "linear_chain_forward", "viterbi_tags"]

NEG_INF = float("-inf")


class LinearChainCRF(GraphResults):
    """Distribution over tag sequences ``y`` of a linear-chain CRF (see the module docstring).

    Args:
        emissions: ``(B, T, C)`` finite float node log-potentials; ``B = 0`` and ``T = 0`` allowed.
        transitions: ``(C, C)`` finite edge log-potentials, ``transitions[prev, next]``.
        lengths: ``(B,)`` integers in ``[0, T]``; ``None`` means every sequence has length ``T``.
            A sequence of length 0 has exactly one tagging, the empty one, of score 0.
        start, end: optional ``(C,)`` log-potentials of the first and last tag.
        allowed: optional ``(C, C)`` bool mask; ``False`` transitions get log-potential ``-inf``.
        allowed_start, allowed_end: optional ``(C,)`` bool masks for the first and last tag.

    Decoded tags are ``(..., B, T)`` long tensors padded with ``-1`` beyond each length.

    Gradients: every floating result (``log_partition``, ``score``, ``log_prob``, ``marginals``,
    ``pair_marginals``, ``entropy``, ``max_score``, ``kbest`` scores) is differentiable with
    respect to each of ``emissions``, ``transitions``, ``start`` and ``end`` that requires grad,
    in any combination, and is joined to all of them in the autograd graph (with an exactly zero
    gradient where it does not depend on one, e.g. ``transitions`` when every length is 1), so
    ``backward`` never fails for lack of a graph. Marginals are gradients of ``log Z`` taken with
    ``create_graph`` whenever a potential requires grad, so the entropy's gradient (second order)
    is exact. Results are computed once per object and grad mode (a result first read under
    ``torch.no_grad()`` is recomputed, not reused, when read again with gradients on).
    """

    def __init__(self, emissions: Tensor, transitions: Tensor, lengths: Tensor | None = None, *,
                 start: Tensor | None = None, end: Tensor | None = None,
                 allowed: Tensor | None = None, allowed_start: Tensor | None = None,
                 allowed_end: Tensor | None = None) -> None:
        check_potentials(emissions, transitions, start, end)
        b, t, c = emissions.shape
        ln, lo, hi = check_lengths(lengths, b, t, emissions.device)
        mask = check_bool_mask(allowed, (c, c), "allowed")
        tr = transitions if mask is None else transitions.masked_fill(~mask.to(emissions.device), NEG_INF)
        st = mask_potential(start, check_bool_mask(allowed_start, (c,), "allowed_start"), c, emissions)
        en = mask_potential(end, check_bool_mask(allowed_end, (c,), "allowed_end"), c, emissions)
        params = tuple(p for p in (emissions, transitions, start, end) if p is not None)
        self._setup(emissions, tr, ln, st, en, params, lo, hi)

    def _setup(self, emissions: Tensor, transitions: Tensor, lengths: Tensor, start: Tensor | None,
               end: Tensor | None, params: tuple[Tensor, ...], lo: int, hi: int) -> None:
        """Store checked potentials; empty sequences are split off into ``_rows`` / ``_inner``."""
        self.emissions, self.transitions, self.lengths = emissions, transitions, lengths
        self.start, self.end = start, end
        self._params = params  # the caller's potentials, before masking
        self._cache: dict[tuple[str, bool], object] = {}
        self._uses_all = hi >= 2  # every potential enters the nonempty rows' computations
        self._rows: Tensor | None = None  # indices of nonempty sequences, when some are empty
        self._inner: LinearChainCRF | None = None  # the CRF of those rows
        if lo == 0:
            self._rows = (lengths > 0).nonzero().squeeze(1)
            if hi > 0:
                inner = LinearChainCRF.__new__(LinearChainCRF)
                inner_lengths = lengths[self._rows]
                inner._setup(emissions[self._rows, :hi], transitions, inner_lengths, start, end, params,
                             int(inner_lengths.min()), hi)
                self._inner = inner

    # -- plumbing (caching per grad mode and graph joining: see GraphResults) ---------------
    def _potentials(self) -> tuple[Tensor, Tensor]:
        init = self.emissions[:, 0] if self.start is None else self.emissions[:, 0] + self.start
        edges = self.transitions + self.emissions[:, 1:].unsqueeze(-2)
        return init, edges

    def _scatter(self, full: Tensor, part: Tensor, dim: int = 0) -> Tensor:
        """``full`` with the nonempty rows (axis ``dim``) replaced by ``part``, zero-padded in T."""
        assert self._rows is not None
        if full.dim() > dim + 1 and full.shape[dim + 1] > part.shape[dim + 1]:
            pad = [0, 0] * (full.dim() - dim - 1)
            pad[-1] = full.shape[dim + 1] - part.shape[dim + 1]
            part = torch.nn.functional.pad(part, pad)
        return full.index_copy(dim, self._rows, part)

    # -- partition and probabilities --------------------------------------------------------
    @property
    def log_partition(self) -> Tensor:
        """``log Z`` per sequence, ``(B,)``. Raises if a sequence has no allowed tagging."""
        return self._memo("log_z", self._log_partition)

    def _log_partition(self) -> Tensor:
        if self._rows is not None:
            z = self.emissions.new_zeros(self.emissions.shape[0])
            return self._connect(z if self._inner is None else self._scatter(z, self._inner.log_partition))
        init = self.emissions[:, 0] if self.start is None else self.emissions[:, 0] + self.start
        log_z = chain_log_z(init, self.emissions[:, 1:], self.transitions, self.end, self.lengths)
        no_allowed(log_z)
        return self._connect(log_z)

    def score(self, tags: Tensor) -> Tensor:
        """Unnormalised log-potential ``score(y)`` of ``tags (B, T)``, ``(B,)``; entries beyond
        each length are ignored, and an empty sequence scores 0."""
        b, t, c = self.emissions.shape
        check_tensor(tags, "tags")
        if tags.is_floating_point() or tags.dtype == torch.bool:
            raise TypeError(f"tags: expected an integer tensor; got dtype {tags.dtype}")
        check_shape(tags, (b, t), "tags")
        valid = torch.arange(t, device=tags.device) < self.lengths[:, None]
        inside = tags[valid]
        if inside.numel() and (int(inside.min()) < 0 or int(inside.max()) >= c):
            raise ValueError(f"tags: expected values in [0, {c - 1}] within each length; "
                             f"got min {int(inside.min())}, max {int(inside.max())}")
        if self._rows is not None:
            s = self.emissions.new_zeros(b)
            if self._inner is not None:
                sub = tags[self._rows, : self._inner.emissions.shape[1]]
                s = self._scatter(s, self._inner._score(sub, valid[self._rows, : sub.shape[1]]))
            return self._connect(s)
        return self._connect(self._score(tags, valid))

    def _score(self, tags: Tensor, valid: Tensor) -> Tensor:
        y = tags.long().masked_fill(~valid, 0)
        s = (self.emissions.gather(-1, y.unsqueeze(-1)).squeeze(-1) * valid).sum(1)
        trans = self.transitions[y[:, :-1], y[:, 1:]]
        s = s + torch.where(valid[:, 1:], trans, trans.new_zeros(())).sum(1)
        if self.start is not None:
            s = s + self.start[y[:, 0]]
        if self.end is not None:
            s = s + self.end[y.gather(1, (self.lengths - 1)[:, None]).squeeze(1)]
        return s

    def log_prob(self, tags: Tensor) -> Tensor:
        """``log p(tags)``, ``(B,)``; entries beyond each length are ignored (``-inf`` if the
        sequence uses a disallowed transition)."""
        return self.score(tags) - self.log_partition

    def _marginals(self) -> tuple[Tensor, Tensor]:
        return self._memo("marginals", self._compute_marginals)

    def _compute_marginals(self) -> tuple[Tensor, Tensor]:
        b, t, c = self.emissions.shape
        if self._rows is not None:
            node = self.emissions.new_zeros(b, t, c)
            pair = self.emissions.new_zeros(b, max(t - 1, 0), c, c)
            if self._inner is not None:
                n_in, p_in = self._inner._marginals()
                node, pair = self._scatter(node, n_in), self._scatter(pair, p_in)
            return self._connect(node), self._connect(pair)
        graph = self._graph()
        with torch.set_grad_enabled(graph):
            init, edges = self._potentials()
        end = self.end if graph or self.end is None else self.end.detach()
        node, pair = marginals_by_grad(init, edges, end, self.lengths, create_graph=graph)
        return self._connect(node), self._connect(pair)

    @property
    def marginals(self) -> Tensor:
        """Node marginals ``p(y_t = k)``, ``(B, T, C)``; zero beyond each length."""
        return self._marginals()[0]

    @property
    def pair_marginals(self) -> Tensor:
        """Pair marginals ``p(y_{t} = j, y_{t+1} = k)``, ``(B, T-1, C, C)``; zero beyond length."""
        return self._marginals()[1]

    @property
    def entropy(self) -> Tensor:
        """``H = log Z - E[score(y)]``, ``(B,)``, from the marginals (``0 * -inf`` taken as 0).

        Absolute rounding error about ``eps * |log Z|`` (cancellation); a result rounded below 0
        is returned as 0.
        """
        return self._memo("entropy", self._entropy)

    def _entropy(self) -> Tensor:
        if self._rows is not None:
            h = self.emissions.new_zeros(self.emissions.shape[0])
            return self._connect(h if self._inner is None else self._scatter(h, self._inner.entropy))
        node, pair = self._marginals()
        init, edges = self._potentials()
        expected = safe_dot(node[:, 0], init) + safe_dot(pair, edges)
        if self.end is not None:
            last = node[torch.arange(node.shape[0], device=node.device), self.lengths - 1]
            expected = expected + safe_dot(last, self.end.expand_as(last))
        return self._connect((self.log_partition - expected).clamp_min(0.0))

    # -- decoding and sampling --------------------------------------------------------------
    def _best(self) -> tuple[Tensor, Tensor]:
        return self._memo("viterbi", self._compute_best)

    def _compute_best(self) -> tuple[Tensor, Tensor]:
        b, t, _ = self.emissions.shape
        if self._rows is not None:
            tags = torch.full((b, t), -1, dtype=torch.long, device=self.emissions.device)
            best = self.emissions.new_zeros(b)
            if self._inner is not None:
                tags_in, best_in = self._inner._best()
                tags[self._rows, : tags_in.shape[1]] = tags_in
                best = self._scatter(best, best_in)
            return tags, self._connect(best)
        tags, best = viterbi_tags(self.emissions, self.transitions, self.lengths, self.start, self.end)
        if bool(torch.isneginf(best).any()):
            self.log_partition  # noqa: B018  (raises: nothing is allowed)
        return tags, self._connect(best)

    @property
    def argmax(self) -> Tensor:
        """Viterbi tags ``(B, T)``, ``-1`` beyond each length."""
        return self._best()[0]

    @property
    def max_score(self) -> Tensor:
        """``score(argmax)``, ``(B,)``."""
        return self._best()[1]

    def kbest(self, k: int) -> tuple[Tensor, Tensor]:
        """The ``k`` highest-scoring sequences, best first: tags ``(K, B, T)``, scores ``(K, B)``.

        ``K = min(k, N)`` where ``N`` is the largest number of allowed tag sequences of any
        sequence in the batch (``C ** L`` without masks; 1 for an empty sequence), so the work is
        bounded by the number of paths however large ``k`` is: ``O(K T B C^2)`` time and
        ``O(K T B C)`` memory (back-pointers). A sequence with fewer than ``K`` taggings has score
        ``-inf`` and tags ``-1`` in the remaining slots. Ties are broken arbitrarily; the ``K``
        sequences are distinct.
        """
        check_int(k, "k", minimum=1)
        b, t, _ = self.emissions.shape
        counts = count_paths(self.transitions, self.start, self.end, self.lengths, k) if b else None
        if counts is not None and bool((counts == 0).any()):
            no_allowed(torch.where(counts == 0, NEG_INF, 0.0))
        kk = int(counts.max()) if counts is not None else 0
        dev = self.emissions.device
        if self._rows is not None:
            tags = torch.full((kk, b, t), -1, dtype=torch.long, device=dev)
            scores = self.emissions.new_full((kk, b), NEG_INF)
            if kk:  # the empty sequence is the only tagging of length 0
                scores[0] = torch.where(self.lengths == 0, 0.0, NEG_INF)
            if self._inner is not None:
                tags_in, scores_in = self._inner.kbest(kk)
                tags[: tags_in.shape[0], self._rows, : tags_in.shape[2]] = tags_in
                scores_in = torch.nn.functional.pad(scores_in, (0, 0, 0, kk - scores_in.shape[0]),
                                                    value=NEG_INF)
                scores = scores.index_copy(1, self._rows, scores_in)
            return tags, self._connect(scores)
        with torch.set_grad_enabled(self._graph()):
            init = self.emissions[:, 0] if self.start is None else self.emissions[:, 0] + self.start
            tags, scores = kbest_paths(init, self.emissions[:, 1:], self.transitions, self.end,
                                       self.lengths, kk)
        tags = tags.masked_fill(torch.isneginf(scores)[..., None], -1)
        return tags, self._connect(scores)

    def sample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """``n`` exact draws ``(n, B, T)`` by forward filtering, backward sampling
        (Carter & Kohn, 1994; Gumbel-max at each step); ``-1`` beyond each length."""
        check_int(n, "n", minimum=1)
        self.log_partition  # noqa: B018  (raises if nothing is allowed)
        b, t, _ = self.emissions.shape
        if self._rows is not None:
            out = torch.full((n, b, t), -1, dtype=torch.long, device=self.emissions.device)
            if self._inner is not None:
                draws = self._inner.sample(n, generator)
                out[:, self._rows, : draws.shape[2]] = draws
            return out
        with torch.no_grad():
            init, edges = self._potentials()
            return ffbs(init, edges, self.end, self.lengths, n, generator)


def viterbi_tags(emissions: Tensor, transitions: Tensor, lengths: Tensor, start: Tensor | None = None,
                 end: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Viterbi tags ``(B, T)`` (``-1`` beyond each length) and best scores ``(B,)`` of a batch, with no
    argument check and no host synchronisation, so that :func:`torch.export.export` can trace it.

    The same recursion as :attr:`LinearChainCRF.argmax` (which checks its arguments first): use this one
    only inside a module meant for export (:class:`ebms.apply.export.ViterbiDecoder`).

    Args:
        emissions: ``(B, T, C)`` with ``T >= 1``.
        transitions: ``(C, C)``, ``[j, k]`` scores moving from tag ``j`` to ``k``.
        lengths: ``(B,)`` integer lengths in ``[1, T]`` (not checked: an empty sequence is
            :class:`LinearChainCRF`'s business).
        start, end: optional ``(C,)`` scores of the first and last tag.
    """
    init = emissions[:, 0] if start is None else emissions[:, 0] + start
    return viterbi(init, emissions[:, 1:], transitions, end, lengths)


"""CTC-CRF denominator graph: the CTC topology composed with a label n-gram, built in Python.

The graph is a deterministic weighted automaton over the CTC symbols ``0 .. V-1`` (0 = blank)
whose paths are in one-to-one correspondence with frame labellings ``pi``, and whose path
weight is ``log p_LM(B(pi))`` (``B`` the CTC collapse, ``</s>`` in the final weight). No OpenFst:
for an order-``n`` LM the states are pairs ``(h, mode)`` with ``h`` the last ``c = max(n-1, 1)``
labels (``<s>``-padded on the left, id 0) and ``mode`` in {blank, label}:

* ``blank(h)``: the last frame was a blank (or nothing was emitted yet: ``blank(<s>...<s>)`` is
  the start state). Arcs: a self-loop on the blank with weight 0, and to ``label(h[1:] + k)`` on
  every label ``k`` with weight ``log p(k | h)``;
* ``label(h)``: the last frame was the label ``h_c``. Arcs: a self-loop on ``h_c`` with weight 0
  (a CTC repeat, no new label), to ``blank(h)`` on the blank with weight 0, and to
  ``label(h[1:] + k)`` on every ``k != h_c`` with weight ``log p(k | h)``. A repeated label
  ``k k`` therefore needs a blank in between, exactly as in CTC;
* every state is final with weight ``log p(</s> | h)``.

The symbol of an arc is a function of its destination state (``state_symbol``), which the
forward algorithm exploits: ``alpha_t(s') = lp_t(sym(s')) + lse_s(alpha_{t-1}(s) + W(s, s'))``.
Sizes: ``H = sum_{j<=c} K^j`` histories (``K = V-1``), ``2H - 1`` states, about ``(2H-1) V``
arcs. Reference: Xiang & Ou, 2019, "CRF-based single-stage acoustic modeling with CTC
topology" (ICASSP); monograph section 4.3 (Fig. 4.9).
"""

from __future__ import annotations

import itertools
import warnings
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ebms.distributions import NGram

__all__ = ["DenominatorGraph"]

_MAX_STATES = 200_000
_DENSE_MAX = 512


@dataclass
class DenominatorGraph:
    """Denominator graph stored as tensors (build it with :meth:`from_ngram`).

    Attributes:
        lm: the label n-gram it was built from.
        n_symbols: ``V`` (blank included); ``blank`` is 0.
        src, dst, symbol: ``(A,)`` long arc tables; weight ``(A,)`` float64 arc log-weights.
        start: the start state id.
        final: ``(S,)`` float64 final log-weights.
        state_symbol: ``(S,)`` long, the symbol of every arc entering the state.
        in_src, in_weight: ``(S, D)`` incoming arcs of each state padded to the largest
            in-degree ``D`` (padding: source 0, weight ``-inf``).
        histories: the ``c``-label history of each state (``<s>`` = 0).
    """

    lm: NGram
    n_symbols: int
    src: Tensor
    dst: Tensor
    symbol: Tensor
    weight: Tensor
    start: int
    final: Tensor
    state_symbol: Tensor
    in_src: Tensor
    in_weight: Tensor
    histories: list[tuple[int, ...]]
    blank: int = 0
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    def __repr__(self) -> str:
        return (f"DenominatorGraph(n_symbols={self.n_symbols}, order={self.lm.order}, "
                f"n_states={self.n_states}, n_arcs={self.n_arcs})")

    @property
    def n_states(self) -> int:
        return int(self.final.shape[0])

    @property
    def n_arcs(self) -> int:
        return int(self.src.shape[0])

    @classmethod
    def from_ngram(cls, lm: NGram) -> DenominatorGraph:
        """CTC topology composed with ``lm`` (see the module docstring). Cost ``O(S V)`` Python."""
        if not isinstance(lm, NGram) or lm.boundary != 0 or not lm.end:
            got = repr(lm) if isinstance(lm, NGram) else type(lm).__name__
            raise TypeError(f"lm: expected a LabelNGram (an ebms.distributions.NGram with boundary=0, end=True); "
                            f"got {got}")
        v, n = lm.vocab_size, lm.order
        c = max(n - 1, 1)
        n_hist = sum((v - 1) ** j for j in range(c + 1))
        if 2 * n_hist - 1 > _MAX_STATES:
            raise ValueError(f"lm: the graph would have {2 * n_hist - 1} states (n_labels={v}, "
                             f"order={n}), above the limit {_MAX_STATES}")
        labels = range(1, v)
        histories: list[tuple[int, ...]] = []
        for j in range(c + 1):
            for tail in itertools.product(labels, repeat=j):
                histories.append((0,) * (c - j) + tail)
        blank_id = {h: i for i, h in enumerate(histories)}
        label_id: dict[tuple[int, ...], int] = {}
        for h in histories:
            if h[-1] != 0:
                label_id[h] = len(histories) + len(label_id)
        n_states = len(histories) + len(label_id)
        table = lm.table.reshape(-1).tolist()

        def lm_weight(h: tuple[int, ...], w: int) -> float:
            idx = w
            for j, x in enumerate(h[c - (n - 1):] if n > 1 else ()):
                idx += x * v ** (n - 1 - j)
            return table[idx]

        src: list[int] = []
        dst: list[int] = []
        sym: list[int] = []
        wts: list[float] = []

        def arc(a: int, b: int, s: int, w: float) -> None:
            src.append(a)
            dst.append(b)
            sym.append(s)
            wts.append(w)

        final = [0.0] * n_states
        state_symbol = [0] * n_states
        state_hist: list[tuple[int, ...]] = [()] * n_states
        for h in histories:
            b_state = blank_id[h]
            final[b_state] = lm_weight(h, 0)
            state_hist[b_state] = h
            arc(b_state, b_state, 0, 0.0)
            for k in labels:
                arc(b_state, label_id[h[1:] + (k,)], k, lm_weight(h, k))
            if h in label_id:
                l_state, last = label_id[h], h[-1]
                final[l_state] = lm_weight(h, 0)
                state_symbol[l_state] = last
                state_hist[l_state] = h
                arc(l_state, l_state, last, 0.0)
                arc(l_state, b_state, 0, 0.0)
                for k in labels:
                    if k != last:
                        arc(l_state, label_id[h[1:] + (k,)], k, lm_weight(h, k))
        src_t = torch.tensor(src, dtype=torch.long)
        dst_t = torch.tensor(dst, dtype=torch.long)
        w_t = torch.tensor(wts, dtype=torch.float64)
        deg = torch.bincount(dst_t, minlength=n_states)
        order_ = torch.argsort(dst_t, stable=True)
        first = torch.cumsum(deg, 0) - deg
        slot = torch.arange(len(src)) - first[dst_t[order_]]
        in_src = torch.zeros(n_states, int(deg.max()), dtype=torch.long)
        in_w = torch.full((n_states, int(deg.max())), float("-inf"), dtype=torch.float64)
        in_src[dst_t[order_], slot] = src_t[order_]
        in_w[dst_t[order_], slot] = w_t[order_]
        return cls(lm=lm, n_symbols=v, src=src_t, dst=dst_t, symbol=torch.tensor(sym),
                   weight=w_t, start=blank_id[(0,) * c],
                   final=torch.tensor(final, dtype=torch.float64),
                   state_symbol=torch.tensor(state_symbol, dtype=torch.long),
                   in_src=in_src, in_weight=in_w, histories=state_hist)

    def transition_matrix(self, dtype: torch.dtype, device: torch.device, *,
                          transpose: bool = False) -> Tensor:
        """A matrix ``M`` such that ``x @ E`` (``x @ E^T`` with ``transpose``) is ``x @ M`` when
        ``M`` is dense and ``(M @ x^T)^T`` when ``M`` is sparse CSR; ``E = exp(W)``, ``W[s, s']``
        the arc log-weight (no arc: ``E = 0``). Dense up to ``_DENSE_MAX`` states, CSR above
        (``O(A)`` per product instead of ``O(S^2)``). Cached per dtype/device."""
        key = ("E", dtype, device, transpose)
        if key not in self._cache:
            s = self.n_states
            vals = self.weight.exp().to(dtype)
            if s <= _DENSE_MAX:
                rows, cols = (self.dst, self.src) if transpose else (self.src, self.dst)
                m = torch.zeros(s, s, dtype=dtype)
                m.index_put_((rows, cols), vals, accumulate=True)
            else:
                rows, cols = (self.src, self.dst) if transpose else (self.dst, self.src)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)
                    m = torch.sparse_coo_tensor(torch.stack([rows, cols]), vals, (s, s),
                                                check_invariants=False).coalesce()
                    m = m.to_sparse_csr()
            self._cache[key] = m.to(device)
        return self._cache[key]

    def tables(self, dtype: torch.dtype, device: torch.device) -> dict[str, Tensor]:
        """The state tables cast to ``dtype``/``device`` (cached)."""
        key = ("T", dtype, device)
        if key not in self._cache:
            self._cache[key] = {
                "state_symbol": self.state_symbol.to(device),
                "final": self.final.to(device=device, dtype=dtype),
                "in_src": self.in_src.to(device),
                "in_weight": self.in_weight.to(device=device, dtype=dtype),
            }
        return self._cache[key]

    def support(self, steps: int, *, backward: bool = False) -> Tensor:
        """Which states can carry weight, ignoring the values: ``(steps + 1, S)`` bool.

        Forward (default): row ``t`` marks the states reachable from the start in exactly ``t``
        frames along arcs of finite weight. ``backward=True``: row ``k`` marks the states from
        which a state with a finite final weight is reachable in exactly ``k`` more frames. With
        finite log-probabilities, a state outside the support has weight exactly zero and one
        inside has positive weight; the scaled forward-backward uses this to tell an underflow
        from a true zero. Cost ``O(steps A)`` once, cached (on the CPU)."""
        key = ("support", backward)
        table = self._cache.get(key)
        if table is None or table.shape[0] < steps + 1:
            live = torch.isfinite(self.weight)
            a, b = (self.dst, self.src) if backward else (self.src, self.dst)
            a, b = a[live], b[live]
            first = torch.zeros(self.n_states, dtype=torch.bool)
            if backward:
                first = torch.isfinite(self.final)
            else:
                first[self.start] = True
            rows = [first]
            for _ in range(max(steps, 2 * (table.shape[0] - 1) if table is not None else 0)):
                nxt = torch.zeros(self.n_states, dtype=torch.bool)
                nxt[b[rows[-1][a]]] = True
                rows.append(nxt)
            table = torch.stack(rows)
            self._cache[key] = table
        return table[: steps + 1]

    def ratio_bound_log(self) -> float:
        """``log R``: a bound on ``log(beta_t(s) / beta_t(s'))`` between any two states, or
        ``inf`` when the LM has ``-inf`` entries (some states cannot reach others).

        From any two states the same future frame symbols are allowed; the two collapsed label
        sequences differ in at most the first label (a CTC repeat from ``label(k)``) and in
        their histories until ``c = max(n-1, 1)`` labels have been emitted, so their weights
        differ by at most ``(c + 2) * spread``, with ``spread = max(0, max W) - min W`` over the
        LM table ``W`` (``</s>`` included)."""
        table = self.lm.table
        if not bool(torch.isfinite(table).all()):
            return float("inf")
        spread = max(0.0, float(table.max())) - float(table.min())
        return (max(self.lm.order - 1, 1) + 2) * spread

r"""Context index of :class:`~ebms.models.trf.DiscreteFeatures`: substitution scores from the observed features.

``DiscreteFeatures.token_logits`` scores ``K`` candidates at one position. Every window through that
position is a *substitution row* ``q`` (a template pattern whose slot ``j`` sits at the position); its
key is :math:`c_q + v\,s_j`, the *context* :math:`c_q` (the key with slot ``j``'s value removed) plus the
candidate's value ``v`` (its word id, or its class id for a class slot) times the slot's stride.
Looking up every candidate's key costs ``B K Q`` lookups, nearly all of absent keys. This index
stores, for every observed context of every *group* ``(template, j)``, the list of ``(v, feature)``
of the observed features with that context (a CSR layout sorted by context), so scoring needs one
context lookup per valid ``(row, q)`` and then either

- *light* context (its list at most ``ratio`` times the row's distinct targets): the list is read
  and each ``v`` matched against the row's sorted targets (``searchsorted``), or
- *heavy* context (a longer list, e.g. the unigram context, which lists every word): each of the
  row's targets is read from the context's *direct row* (``value -> feature``, built for the
  longest lists within :data:`DENSE_BYTES`), or, for a context without one, its full key is looked
  up in the feature table, as the reference does.

Both routes fill the same matrix ``(targets, q)`` of weights (0 where absent) that the reference
sums, so the result is bit-identical to it.

**Keys.** A group ``g = (t, j)`` of template ``t`` (base :math:`b_t`, slot strides :math:`s_i`, slot radix
:math:`r_j`) maps the context remainder :math:`\rho = c - b_t` to the compact
:math:`\lfloor \rho / (s_j r_j) \rfloor s_j + (\rho \bmod s_j)` (slot ``j``'s digit dropped from the mixed
radix), below :math:`|t| / r_j`; groups are laid end to end (:math:`\beta_g`), so the context key
:math:`\beta_g + \mathrm{compact}` is unique over groups and below :math:`2^{62}` (else no index is
built and the caller keeps the reference path). The distinct context keys live in a
:class:`~ebms.models.trf._table.BucketTable`.

**Cost.** Construction: one pass over the ``F`` keys per slot of their template (``E`` entries,
:math:`E = \sum_f |t(f)|`), one sort per group, one table of ``D`` distinct contexts. Scoring: at most
``B Q`` context lookups, ``sum(light list lengths)`` searchsorted steps and ``sum(heavy rows'
targets)`` direct reads or feature lookups. **Memory.** ``8 E`` bytes (int32 values and feature ids) +
``8 (D + 1)`` (int64 offsets) + ``4 D`` (direct-row starts) + the direct rows (at most
:data:`DENSE_BYTES`) + the context table's ``~24 D``.

References: Knuth (1998), *The Art of Computer Programming* vol. 3, 6.4 (hashing); Saad (2003),
*Iterative Methods for Sparse Linear Systems*, 3.4 (compressed sparse row storage); Wang & Ou (2018),
"Learning trans-dimensional random fields with applications to language modeling" (the TRF features).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ebms.models.trf._table import BucketTable

__all__ = ["ContextIndex"]

_KEY_LIMIT = 1 << 62
#: bytes of direct rows for the longest context lists (heavy contexts read them instead of hashing)
DENSE_BYTES = 32 << 20
#: a context list shorter than this gets no direct row
DENSE_MIN = 64


def _expand(start: Tensor, length: Tensor) -> tuple[Tensor, Tensor]:
    """Segment id and flat index of every element of the segments ``[start, start + length)``, ``(N,)`` each."""
    seg = torch.repeat_interleave(torch.arange(length.numel(), device=length.device), length)
    first = torch.cumsum(length, 0) - length
    return seg, start[seg] + torch.arange(seg.numel(), device=length.device) - first[seg]


class ContextIndex(nn.Module):
    r"""Observed features grouped by substitution context (see the module docstring); non-persistent buffers.

    Build it with :meth:`build` (``None`` when the context keys would not fit below :math:`2^{62}`).

    Args:
        keys: the sorted observed feature keys ``(F,)``. template_base: template blocks ``(n_t + 1,)``.
        layers: each template's slot layers (``"w"``/``"c"``). strides: each template's slot strides.
        offsets_per_template: how many offset patterns each template has (substitution rows follow
            ``DiscreteFeatures._build_tables``: template, pattern, slot). radix: ``{"w": V, "c": C + 1}``.
        ratio: a context list longer than ``ratio`` times its row's targets is scored by lookups.
        dense_bytes, dense_min: the direct rows' budget in bytes, and the shortest list that gets one.
    """

    offsets: Tensor
    values: Tensor
    feature: Tensor
    q_base: Tensor
    q_radix: Tensor
    dense_start: Tensor
    dense: Tensor

    def __init__(self, keys: Tensor, template_base: Tensor, layers: Sequence[Sequence[str]],
                 strides: Sequence[Sequence[int]], offsets_per_template: Sequence[int], radix: dict[str, int], *,
                 ratio: float = 2.0, dense_bytes: int = DENSE_BYTES, dense_min: int = DENSE_MIN) -> None:
        super().__init__()
        device, keys, tb = keys.device, keys.detach().cpu(), template_base.detach().cpu()
        self.ratio = float(ratio)
        bounds = torch.searchsorted(keys, tb).tolist()
        gbase = 0
        ctx: list[Tensor] = []
        group_base: list[int] = []  # where each group's context keys start, and its radix
        group_radix: list[int] = []
        vals: list[Tensor] = []
        fids: list[Tensor] = []
        q_base: list[int] = []
        q_radix: list[int] = []
        for ti, (lay, st) in enumerate(zip(layers, strides)):
            size, lo, hi = int(tb[ti + 1] - tb[ti]), bounds[ti], bounds[ti + 1]
            rem = keys[lo:hi] - int(tb[ti])
            bases = []
            for j, layer in enumerate(lay):
                r, s = radix[layer], st[j]
                v = rem // s % r
                c = gbase + rem // (s * r) * s + rem % s
                order = torch.argsort(c, stable=True)  # groups ascend, so concatenation stays sorted
                ctx.append(c[order])
                vals.append(v[order].int())
                fids.append((order + lo).int())
                bases.append(gbase)
                group_base.append(gbase)
                group_radix.append(r)
                gbase += size // r
                if gbase >= _KEY_LIMIT:
                    raise OverflowError("context keys need more than 62 bits")
            for _ in range(offsets_per_template[ti]):
                q_base.extend(bases)
                q_radix.extend(radix[layer] for layer in lay)
        flat = torch.cat(ctx) if ctx else torch.zeros(0, dtype=torch.long)
        uniq, counts = torch.unique_consecutive(flat, return_counts=True)
        del flat, ctx
        self.table = BucketTable(uniq.to(device))
        self.n_contexts = int(uniq.numel())
        offsets = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(counts, 0)])
        values, feature = torch.cat(vals), torch.cat(fids)
        group = torch.searchsorted(torch.tensor(group_base, dtype=torch.long), uniq, right=True) - 1
        radix_of = torch.tensor(group_radix, dtype=torch.long)[group] if group_radix else group
        dense_start, dense = self._dense_rows(offsets, counts, radix_of, values, feature, dense_bytes, dense_min)
        self.register_buffer("offsets", offsets.to(device), persistent=False)
        self.register_buffer("values", values.to(device), persistent=False)
        self.register_buffer("feature", feature.to(device), persistent=False)
        self.register_buffer("dense_start", dense_start.to(device), persistent=False)
        self.register_buffer("dense", dense.to(device), persistent=False)
        self.register_buffer("q_base", torch.tensor(q_base, dtype=torch.long, device=device), persistent=False)
        self.register_buffer("q_radix", torch.tensor(q_radix, dtype=torch.long, device=device), persistent=False)

    @staticmethod
    def _dense_rows(offsets: Tensor, counts: Tensor, radix_of: Tensor, values: Tensor, feature: Tensor,
                    budget: int, least: int) -> tuple[Tensor, Tensor]:
        """Direct rows ``value -> feature id`` (``-1``: none) for the longest context lists, longest first,
        while their int32 rows fit in ``budget`` bytes and the list holds at least ``least`` entries.

        Returns ``dense_start`` ``(D,)`` int32 (where each context's row starts; ``-1``: no row) and the
        rows end to end (int32, each as long as its group's radix).
        """
        n = counts.numel()
        dense_start = torch.full((n,), -1, dtype=torch.int32)
        if n == 0 or budget <= 0:
            return dense_start, torch.zeros(0, dtype=torch.int32)
        order = torch.argsort(counts, descending=True, stable=True)
        size = radix_of[order]
        fits = (torch.cumsum(size * 4, 0) <= budget) & (counts[order] >= least)
        chosen = order[: int(fits.long().cumprod(0).sum())]  # the longest lists, up to the first that misses
        starts = torch.cumsum(radix_of[chosen], 0) - radix_of[chosen]
        dense_start[chosen] = starts.int()
        dense = torch.full((int(radix_of[chosen].sum()),), -1, dtype=torch.int32)
        seg, e = _expand(offsets[chosen], counts[chosen])
        dense[starts[seg] + values[e].long()] = feature[e]
        return dense_start, dense

    @classmethod
    def build(cls, keys: Tensor, template_base: Tensor, layers: Sequence[Sequence[str]],
              strides: Sequence[Sequence[int]], offsets_per_template: Sequence[int],
              radix: dict[str, int]) -> ContextIndex | None:
        """The index, or ``None`` when its context keys would need more than 62 bits."""
        try:
            return cls(keys, template_base, layers, strides, offsets_per_template, radix)
        except OverflowError:
            return None

    @property
    def nbytes(self) -> int:
        """Bytes held by the index (CSR arrays and the context table)."""
        return sum(t.numel() * t.element_size() for t in (self.offsets, self.values, self.feature, self.dense_start,
                                                          self.dense)) + self.table.nbytes

    def fill(self, targets: Tensor, R: int, part: Tensor, valid: Tensor, qs: Tensor, sub_base: Tensor,
             cand_stride: Tensor, weight: Tensor, feature_table: nn.Module) -> Tensor:
        r"""Weights ``(U, len(qs))`` of the features ``part[:, i] + value * stride`` found for each target.

        Args:
            targets: sorted distinct ``row * R + value`` ``(U,)`` (value: a word id, ``R = V``, or a class
                id, ``R = C + 1``). part: context keys of the substitution rows ``qs`` ``(B, len(qs))``
                (slot zeroed, ``sub_base`` included). valid: whether each window exists ``(B, len(qs))``.
            sub_base, cand_stride: the ``sub_base`` and ``sub_cand_stride`` of all rows ``(Q,)``.
            weight: :math:`\lambda` ``(F,)``. feature_table: the full-key table (heavy contexts).

        Returns the matrix the reference sums (0 where no feature); cost in the module docstring.
        """
        B, U = part.shape[0], targets.numel()
        M = torch.zeros(U, qs.numel(), dtype=weight.dtype, device=weight.device)
        if U == 0 or qs.numel() == 0:
            return M
        rows = torch.arange(B + 1, device=targets.device) * R
        edges = torch.searchsorted(targets, rows)
        r_start, r_count = edges[:-1], edges[1:] - edges[:-1]
        r, col = (valid & (r_count > 0)[:, None]).nonzero(as_tuple=True)
        q, p = qs[col], part[r, col]
        s, rad = cand_stride[q], self.q_radix[q]
        rem = p - sub_base[q]
        ci, found = self.table(self.q_base[q] + rem // (s * rad) * s + rem % s)
        r, col, p, s, ci = r[found], col[found], p[found], s[found], ci[found]
        start = self.offsets[ci]
        length = self.offsets[ci + 1] - start
        light = length <= self.ratio * r_count[r]
        seg, e = _expand(start[light], length[light])  # light: match the list against the row's targets
        key = r[light][seg] * R + self.values[e].long()
        at = torch.searchsorted(targets, key).clamp(max=U - 1)
        hit = targets[at] == key
        flat = M.view(-1)  # one flat index per entry: cheaper than a two-index put
        flat[at[hit] * M.shape[1] + col[light][seg][hit]] = weight[self.feature[e[hit]].long()]
        h = ~light  # heavy: each of the row's targets, read from the context's direct row or looked up
        value = targets % R  # once per target, not once per expanded entry
        r, col, p, s, row_at = r[h], col[h], p[h], s[h], self.dense_start[ci[h]].long()
        d = row_at >= 0  # a direct row: one read per target
        seg, t = _expand(r_start[r[d]], r_count[r[d]])
        idx = self.dense[row_at[d][seg] + value[t]].long()
        f = idx >= 0
        flat[t[f] * M.shape[1] + col[d][seg][f]] = weight[idx[f]]
        n = ~d  # no direct row: the full key of each target in the feature table
        seg, t = _expand(r_start[r[n]], r_count[r[n]])
        idx, f = feature_table(p[n][seg] + value[t] * s[n][seg])
        flat[t[f] * M.shape[1] + col[n][seg][f]] = weight[idx[f]]
        return M

    def extra_repr(self) -> str:
        return f"contexts={self.n_contexts}, entries={self.values.numel()}, ratio={self.ratio}"

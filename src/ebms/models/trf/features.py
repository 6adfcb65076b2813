r"""Discrete n-gram feature energies of TRF / GN-ELM language models: :math:`E(x) = -\lambda^\top f(x)`.

:math:`f_i(x)` counts the occurrences in :math:`x` of one observed value of a template
(:mod:`ebms.models.trf.templates`, monograph Eq. 3.9 and Table 3.2); only features seen in the
training data exist (:meth:`DiscreteFeatures.fit`), and :math:`\lambda` is one weight per feature.

**Keys.** A feature of template ``t`` with slot values :math:`v_1..v_k` (word ids in ``[0, V)``, class
ids in ``[0, C + 1)``, 0 being the boundary's class) is the int64
:math:`b_t + \sum_j v_j s_j` (mixed radix, strides :math:`s_j`, template blocks :math:`b_t` laid end to
end). The observed keys form one sorted table (kept in ``state_dict``) and a bucketed two-choice
hash of it (:class:`~ebms.models.trf._table.BucketTable`, rebuilt from the keys at construction and
on loading; not in ``state_dict``); scoring gathers the slot values of every window with tensor
indexing, builds its key, and finds it in the hash (one bucket read per key, a second for a few
percent; no loop), vectorised over the batch, the templates and the positions.

**Boundaries.** With ``bos`` the sentence is read as ``<s> x`` (id 0 before position 0), so windows
may start at ``<s>`` (e.g. ``(<s> w0)``); with ``eos`` as ``x </s>``, so windows may end at ``</s>``
(e.g. ``(w-1 </s>)``, the GN-ELM's length information). A window always holds a real token and
never ends at ``<s>``. With ``boundaries="all"`` every template's windows may reach the boundaries and
one window may hold both (``(<s> w0 </s>)``); with ``boundaries="source"`` only the contiguous (n-gram)
templates' windows reach them and none holds both, as the source's feature tables (Wang, Ou & Tan
2018; SPMILM ``trf-feature.cpp``: ``<s> key`` and ``key </s>`` variants of the shorter orders of a
multi-order table, none for the one-order skip tables).

Cost: ``B (T + 1) P`` lookups per energy call (``P`` template patterns); ``token_logits`` scores ``K``
substitutions of one position, touching only the ``Q`` windows through it (``Q`` = slots over all
patterns): at most ``B Q`` context lookups plus work in the observed features of those contexts
(:class:`~ebms.models.trf._context.ContextIndex`, built with the table; not in ``state_dict``), where
the reference (``_token_logits_by_lookup``) makes ``B K Q`` lookups.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ebms._checks import check_int, check_tensor
from ebms.models.trf._context import ContextIndex
from ebms.models.trf._substitution import SubstitutionScores
from ebms.models.trf._table import BucketTable, ProbeTable
from ebms.models.trf.templates import DEFAULT_GROUPS, Template, feature_templates
from ebms.sequences import Sequences

__all__ = ["DiscreteFeatures"]

_KEY_LIMIT = 1 << 62


class DiscreteFeatures(SubstitutionScores, nn.Module):
    r"""Log-linear energy over observed n-gram features: :math:`E(x) = -\sum_i \lambda_i f_i(x)`.

    Args:
        templates: the feature templates (:func:`~ebms.models.trf.feature_templates`).
        keys: the observed feature keys, a sorted int64 tensor ``(F,)`` without repeats (from :meth:`fit`).
        vocab_size: ``V`` (token ids ``[0, V)``, 0 the boundary).
        classes: class index per token ``LongTensor (V,)`` (entry 0 unused), needed by class templates.
        bos: read ``<s>`` before each sentence. eos: read ``</s>`` after it.
        boundaries: ``"all"`` or ``"source"``: which windows may read ``<s>``/``</s>`` (module docstring).

    Attributes:
        weight: :math:`\lambda`, a parameter ``(F,)`` (zeros at first).
        observed_counts: training counts of every feature ``(F,)`` (float64; zeros unless built by
            :meth:`fit`), e.g. the empirical expectations of AugSA after division by the corpus size.

    Example:
        >>> import torch
        >>> from ebms.sequences import Sequences
        >>> corpus = Sequences.from_lists([[1, 2, 3], [2, 3]])
        >>> feats = DiscreteFeatures.fit(corpus, vocab_size=4, templates=feature_templates(("w",), order=2))
        >>> feats.num_features  # (1)(2)(3) (<s> 1)(1 2)(2 3)(<s> 2)
        7
        >>> with torch.no_grad():
        ...     _ = feats.weight.fill_(0.5)
        >>> feats(corpus)  # 6 and 4 observed windows
        tensor([-3., -2.], grad_fn=<NegBackward0>)
    """

    keys: Tensor
    observed_counts: Tensor
    template_base: Tensor
    table: BucketTable | ProbeTable
    context: ContextIndex | None
    pat_off: Tensor
    pat_layer: Tensor
    pat_stride: Tensor
    pat_base: Tensor
    pat_n: Tensor
    pat_bnd: Tensor  # the sub_* buffers and class_ids are annotated on SubstitutionScores

    def __init__(self, templates: Sequence[Template], keys: Tensor, vocab_size: int, *,
                 classes: Tensor | None = None, bos: bool = True, eos: bool = False,
                 boundaries: str = "all") -> None:
        super().__init__()
        self.vocab_size = check_int(vocab_size, "vocab_size", minimum=2)
        self.templates = tuple(templates)
        if not self.templates or not all(isinstance(t, Template) for t in self.templates):
            raise TypeError(f"templates: expected a non-empty sequence of Template; got {templates!r}")
        self.bos, self.eos = bool(bos), bool(eos)
        if boundaries not in ("all", "source"):
            raise ValueError(f"boundaries: expected 'all' or 'source'; got {boundaries!r}")
        self.boundaries = boundaries
        class_ids = torch.zeros(self.vocab_size, dtype=torch.long)
        if classes is not None:
            check_tensor(classes, "classes")
            if classes.dtype != torch.long or tuple(classes.shape) != (self.vocab_size,):
                raise ValueError(f"classes: expected a LongTensor ({self.vocab_size},); got {classes.dtype} "
                                 f"{tuple(classes.shape)}")
            if int(classes[1:].min()) < 0:
                raise ValueError(f"classes: expected class indices >= 0; got {int(classes[1:].min())}")
            class_ids = classes.detach().cpu() + 1
        elif any(t.uses_classes for t in self.templates):
            raise ValueError("classes: class templates ("
                             f"{', '.join(str(t) for t in self.templates if t.uses_classes)}) need a class per "
                             "token; pass classes= (e.g. WordClasses.fit(...).classes)")
        class_ids[0] = 0  # the boundary's own class
        self.register_buffer("class_ids", class_ids)
        self._n_class_ids = int(class_ids.max()) + 1  # the class slots' radix (derived once: a host sync)
        self._build_tables(self._n_class_ids)
        check_tensor(keys, "keys")
        if keys.dtype != torch.long or keys.dim() != 1:
            raise ValueError(f"keys: expected a 1-D int64 tensor; got {keys.dtype} {tuple(keys.shape)}")
        if keys.numel() and (bool((keys[1:] <= keys[:-1]).any()) or int(keys[0]) < 0
                             or int(keys[-1]) >= int(self.template_base[-1])):
            raise ValueError("keys: expected sorted distinct keys of these templates (from DiscreteFeatures.fit)")
        self.register_buffer("keys", keys.detach().cpu().clone())
        self.table = BucketTable(self.keys)
        self._build_context()
        self._single_ids: Tensor | None = None  # single_token_energies' cache
        self._last: tuple[Tensor, ...] | None = None  # forward's memo of the last batch's window lookups
        self.register_buffer("observed_counts", torch.zeros(keys.numel(), dtype=torch.float64))
        self.weight = nn.Parameter(torch.zeros(keys.numel()))

    def _build_tables(self, n_class_ids: int) -> None:
        """Slot offsets, layers and strides of every pattern ``(P, S)``, and of every substitution ``(Q, S)``."""
        radix = {"w": self.vocab_size, "c": n_class_ids}
        bases, rows, subs = [0], [], []
        self._strides: list[list[int]] = []
        S = max(len(t.layers) for t in self.templates)
        for t in self.templates:
            strides = [1] * len(t.layers)
            for j in range(len(t.layers) - 2, -1, -1):
                strides[j] = strides[j + 1] * radix[t.layers[j + 1]]
            size = strides[0] * radix[t.layers[0]]
            self._strides.append(strides)
            if bases[-1] + size >= _KEY_LIMIT:
                raise ValueError(f"templates: the feature keys need {math.log2(bases[-1] + size):.0f} bits, more "
                                 f"than int64 holds (at template {t}); use fewer or shorter templates or classes")
            bnd = int(self.boundaries == "all" or t.contiguous)  # may its windows read <s> / </s>?
            for offs in t.offsets:
                n = len(offs)
                lay = [0 if layer == "w" else 1 for layer in t.layers] + [2] * (S - n)
                row = (list(offs) + [0] * (S - n), lay, strides + [0] * (S - n), bases[-1], n, bnd)
                rows.append(row)
                for j in range(n):  # substitute slot j: offsets relative to the substituted position
                    st = [0 if i == j else s for i, s in enumerate(row[2])]
                    subs.append(([o - offs[j] for o in row[0]], lay, st, bases[-1], n, strides[j], lay[j],
                                 -offs[j], offs[0] - offs[j], (offs[-2] if n > 1 else 0), bnd))
            bases.append(bases[-1] + size)
        self.register_buffer("template_base", torch.tensor(bases, dtype=torch.long))
        for i, name in enumerate(("pat_off", "pat_layer", "pat_stride", "pat_base", "pat_n", "pat_bnd")):
            dtype = torch.bool if name.endswith("bnd") else torch.long
            self.register_buffer(name, torch.tensor([r[i] for r in rows], dtype=dtype), persistent=False)
        names = ("sub_off", "sub_layer", "sub_stride", "sub_base", "sub_n", "sub_cand_stride", "sub_cand_layer",
                 "sub_cur", "sub_min", "sub_prev", "sub_bnd")
        for i, name in enumerate(names):
            dtype = torch.bool if name.endswith("bnd") else torch.long
            self.register_buffer(name, torch.tensor([r[i] for r in subs], dtype=dtype), persistent=False)

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def fit(cls, corpus: Sequences, vocab_size: int, templates: Sequence[Template] | None = None, *,
            classes: Tensor | None = None, order: int = 4, bos: bool = True, eos: bool = False,
            boundaries: str = "all", min_count: int | Sequence[int] = 1, chunk_size: int = 512) -> DiscreteFeatures:
        """Collect the features observed in ``corpus`` with training counts ``>= min_count``; weights start at 0.

        ``templates`` default to :data:`~ebms.models.trf.templates.DEFAULT_GROUPS` at ``order`` (their
        word-only part when ``classes`` is ``None``). ``min_count`` is one minimum for every feature, or
        one per template (aligned with ``templates``): a feature (template and slot values) is kept iff
        its count over the corpus is at least its template's minimum, so 0 and 1 keep every observed
        feature (the source's cutoffs: :func:`~ebms.models.trf.templates.source_cutoffs`).

        Sentences are read ``chunk_size`` at a time; each chunk's distinct keys and counts are kept and
        merged (one sort) when they outgrow the merged set, so the memory stays a few times that set's.

        Raises:
            ValueError: ``min_count`` not an int ``>= 0`` or a sequence of them, one per template.
        """
        if not isinstance(corpus, Sequences):
            raise TypeError(f"corpus: expected an ebms.sequences.Sequences; got {type(corpus).__name__}")
        check_int(chunk_size, "chunk_size", minimum=1)
        if templates is None:
            groups = DEFAULT_GROUPS if classes is not None else tuple(g for g in DEFAULT_GROUPS if g[0] == "w")
            templates = feature_templates(groups, order)
        templates = tuple(templates)
        cuts = cls._min_counts(min_count, len(templates))
        opts = {"classes": classes, "bos": bos, "eos": eos, "boundaries": boundaries}
        probe = cls(templates, torch.zeros(0, dtype=torch.long), vocab_size, **opts)  # type: ignore[arg-type]
        corpus = corpus.to("cpu")
        probe._check(corpus, "corpus")
        parts: list[tuple[Tensor, Tensor]] = []
        pending = 0
        for start in range(0, corpus.batch_size, chunk_size):
            keys, valid = probe._window_keys(corpus[start: start + chunk_size])
            parts.append(torch.unique(keys[valid], return_counts=True))
            pending += parts[-1][0].numel()
            del keys, valid
            if pending > max(parts[0][0].numel(), cls._merge_at):  # the pending chunks outgrow the merged set
                parts = [cls._merge(parts)]
                pending = 0
        found, counts = cls._merge(parts)
        keep = counts >= torch.tensor(cuts)[torch.searchsorted(probe.template_base, found, right=True) - 1]
        out = cls(templates, found[keep], vocab_size, **opts)  # type: ignore[arg-type]
        out.observed_counts.copy_(counts[keep])
        return out

    @staticmethod
    def _min_counts(min_count: int | Sequence[int], n: int) -> list[int]:
        """``min_count`` as one minimum per template (``n`` of them), checked."""
        if isinstance(min_count, Sequence) and not isinstance(min_count, str):
            cuts = list(min_count)
            if len(cuts) != n:
                raise ValueError(f"min_count: expected an int or one per template ({n}); got {len(cuts)} values")
            return [check_int(c, f"min_count[{i}]", minimum=0) for i, c in enumerate(cuts)]
        return [check_int(min_count, "min_count", minimum=0)] * n

    _merge_at = 1 << 20  # private: merge the pending chunks once they hold more keys than this and the merged set

    @staticmethod
    def _merge(parts: list[tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor]:
        """Sorted distinct keys of the chunks' ``(keys, counts)`` and their summed counts (int64)."""
        keys = torch.cat([k for k, _ in parts]) if parts else torch.zeros(0, dtype=torch.long)
        counts = torch.cat([c for _, c in parts]) if parts else torch.zeros(0, dtype=torch.long)
        parts.clear()
        keys, order = keys.sort()
        counts = counts[order].cumsum(0)
        del order
        found, runs = torch.unique_consecutive(keys, return_counts=True)
        del keys
        ends = counts[runs.cumsum(0) - 1]
        return found, torch.diff(ends, prepend=ends.new_zeros(1))

    @property
    def num_features(self) -> int:
        return int(self.keys.numel())

    def template_sizes(self) -> list[int]:
        """Number of features of each template, in template order."""
        t = torch.searchsorted(self.template_base, self.keys, right=True) - 1
        return torch.bincount(t, minlength=len(self.templates)).tolist()

    def decode(self, ids: Tensor | Sequence[int]) -> list[tuple[str, tuple[int, ...]]]:
        """``(template, values)`` of features ``ids``: token ids for word slots (0 = boundary), class
        indices for class slots (-1 = the boundary's class)."""
        keys = self.keys[torch.as_tensor(ids, dtype=torch.long).cpu()]
        found = torch.searchsorted(self.template_base, keys, right=True) - 1
        out = []
        for key, ti in zip(keys.tolist(), found.tolist()):
            t, rem = self.templates[ti], key - int(self.template_base[ti])
            radix = [self.vocab_size if layer == "w" else self._n_class_ids for layer in t.layers]
            vals = [(rem // s) % r for s, r in zip(self._strides[ti], radix)]
            out.append((str(t), tuple(v if layer == "w" else v - 1 for v, layer in zip(vals, t.layers))))
        return out

    # -- scoring ------------------------------------------------------------------------------
    def _check(self, x: Sequences, name: str = "x") -> None:
        if not isinstance(x, Sequences):
            raise TypeError(f"{name}: expected an ebms.sequences.Sequences; got {type(x).__name__}")
        x.check_vocabulary(self.vocab_size, name)

    def _padded(self, x: Sequences) -> tuple[Tensor, Tensor]:
        """Word and class ids of ``<s> x </s> ...``: ``(B, T + 2)`` each (0 at both boundaries and padding)."""
        y = torch.nn.functional.pad(x.tokens * x.mask(), (1, 1))
        return y, self.class_ids[y]

    def _valid(self, cur: Tensor, lo: Tensor, prev: Tensor, n: Tensor, bnd: Tensor, lengths: Tensor) -> Tensor:
        """A window whose current slot is at ``cur`` (padded coordinates) and first at ``lo`` exists
        (``bnd``: its pattern may read a boundary)."""
        inner = lo >= 1  # starts at a real token
        if self.bos:
            inner = inner | ((lo == 0) & bnd)
        ok = cur <= lengths
        if self.eos:  # ends at </s>: needs a real token before it (and, for "source", no <s>)
            ends = (cur == lengths + 1) & (n > 1) & (cur + prev >= 1) & bnd
            ok = ok | (ends & (lo >= 1) if self.boundaries == "source" else ends)
        return ok & (cur >= 1) & inner

    def _window_keys(self, x: Sequences) -> tuple[Tensor, Tensor]:
        """Keys ``(B, P, T + 1)`` of every pattern at every current position, and their validity."""
        y, yc = self._padded(x)
        T = x.max_length
        cur = torch.arange(1, T + 2, device=y.device)  # (T + 1,) current slots, padded coordinates
        cols = (cur[None, :, None] + self.pat_off[:, None, :]).clamp(0, T + 1)  # (P, T + 1, S)
        flat = cols.reshape(-1)
        vals = torch.where(self.pat_layer.repeat_interleave(T + 1, 0).reshape(-1) == 0, y[:, flat], yc[:, flat])
        keys = (vals.view(x.batch_size, *cols.shape) * self.pat_stride[:, None, :]).sum(-1) + self.pat_base[:, None]
        return keys, self._window_validity(x, cur)

    def _window_validity(self, x: Sequences, cur: Tensor) -> Tensor:
        """Whether each pattern's window exists at each current slot ``cur`` ``(T + 1,)``: ``(B, P, T + 1)``."""
        first, prev = self.pat_off[:, 0], self._prev(self.pat_off, self.pat_n)
        return self._valid(cur[None, None, :], (cur[None, :] + first[:, None])[None], (prev[:, None])[None],
                           self.pat_n[None, :, None], self.pat_bnd[None, :, None], x.lengths[:, None, None])

    def _present_window_keys(self, x: Sequences) -> tuple[Tensor, Tensor]:
        """Flat positions ``(N,)`` in the ``(B, P, T + 1)`` block of :meth:`_window_keys` of the windows that
        exist, and their keys ``(N,)`` (grouped by pattern, not sorted): the same keys, computed only where a
        window exists (a batch padded to three times its mean length costs a third of the full block), each
        window's slots read by one gather from the word and class ids laid end to end."""
        y, yc = self._padded(x)
        B, T = x.batch_size, x.max_length
        valid = self._window_validity(x, torch.arange(1, T + 2, device=y.device))
        by_pattern = valid.transpose(0, 1)  # (P, B, T + 1): a pattern's windows together
        p, b, c = by_pattern.nonzero(as_tuple=True)
        counts = by_pattern.flatten(1).sum(1)
        W = T + 2  # row width of y and yc
        cols = (c[:, None] + 1 + self.pat_off.repeat_interleave(counts, 0)).clamp(0, T + 1)  # (N, S)
        layer = ((self.pat_layer != 0) * (B * W)).repeat_interleave(counts, 0)  # class slots read yc
        vals = torch.cat([y.flatten(), yc.flatten()])[cols + (b * W)[:, None] + layer]
        keys = (vals * self.pat_stride.repeat_interleave(counts, 0)).sum(-1) + self.pat_base.repeat_interleave(counts, 0)
        return b * (valid.shape[1] * (T + 1)) + p * (T + 1) + c, keys

    @staticmethod
    def _prev(off: Tensor, n: Tensor) -> Tensor:
        """The offset of each pattern's slot before the current one (0 for single slots)."""
        return off.gather(1, (n - 2).clamp(min=0)[:, None]).squeeze(1) * (n > 1)

    def interaction_range(self) -> int:
        """The longest template span (the ``tied`` group: 9): a feature reads positions at most this far
        apart, boundaries included, so positions farther apart are conditionally independent."""
        return max(t.span for t in self.templates)

    def single_token_energies(self) -> Tensor:
        """:math:`E` of the ``V - 1`` one-token sentences ``(V - 1,)``, equal to ``self(ones)``; their windows'
        feature ids are found once and cached (they depend on the keys and classes, not on the weights)."""
        if self._single_ids is None or self._single_ids.device != self.weight.device:
            ones = Sequences(torch.arange(1, self.vocab_size, device=self.weight.device)[:, None], validate=False)
            keys, valid = self._window_keys(ones)
            idx, found = self.table(keys)
            self._single_ids = torch.where(found & valid, idx, -1).flatten(1)
        ids = self._single_ids
        return -(self.weight[ids.clamp(min=0)] * (ids >= 0)).sum(1)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        # a resume loads the keys and classes this module was built with: its table and context index stay
        # (building them again would hold two of each at once, hundreds of MB at PTB scale)
        same = all(isinstance(new := state_dict.get(prefix + name), Tensor) and new.shape == have.shape
                   and torch.equal(new.to(have.device), have)
                   for name, have in (("keys", self.keys), ("class_ids", self.class_ids)))
        keys = state_dict.get(prefix + "keys")
        if isinstance(keys, Tensor) and keys.dim() == 1 and keys.shape != self.keys.shape:
            # the features are the saved model's (fitted on its training text): a module built without them (a
            # run applied from its stored files) takes their number before the copy
            n, dev = keys.numel(), self.weight.device
            self.keys = torch.empty(n, dtype=torch.long, device=self.keys.device)
            self.observed_counts = torch.empty(n, dtype=torch.float64, device=self.observed_counts.device)
            self.weight = nn.Parameter(torch.empty(n, dtype=self.weight.dtype, device=dev),
                                       requires_grad=self.weight.requires_grad)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self._single_ids = None
        self._last = None
        if same:
            return
        self._n_class_ids = int(self.class_ids.max()) + 1  # the loaded classes may differ too
        self.table = None  # type: ignore[assignment]  # free the stale table before building the new one
        self.table = BucketTable(self.keys)  # the loaded keys differ from the constructed ones
        self._build_context()

    def _build_context(self) -> None:
        """The context index of the keys (:mod:`ebms.models.trf._context`), ``None`` if it does not fit."""
        radix = {"w": self.vocab_size, "c": self._n_class_ids}
        self.context = None  # free a stale index before building the new one (peak memory)
        self.context = ContextIndex.build(self.keys, self.template_base, [t.layers for t in self.templates],
                                          self._strides, [len(t.offsets) for t in self.templates], radix)

    def feature_ids(self, x: Sequences) -> Tensor:
        """Feature index of every window ``(B, W)`` (``-1``: no window, or an unobserved value)."""
        keys, valid = self._window_keys(x)
        idx, found = self.table(keys)
        return torch.where(found & valid, idx, -1).reshape(x.batch_size, -1)

    def counts(self, x: Sequences, weights: Tensor | None = None) -> Tensor:
        r""":math:`\sum_b w_b f(x_b)`, ``(F,)`` float64 (``weights (B,)``, default 1)."""
        ids = self.feature_ids(x)
        w = torch.ones(x.batch_size, dtype=torch.float64, device=ids.device) if weights is None else weights.double()
        w = w[:, None].expand_as(ids)[ids >= 0]
        return torch.zeros(self.num_features, dtype=torch.float64, device=ids.device).index_add_(0, ids[ids >= 0], w)

    def forward(self, x: Sequences) -> Tensor:
        """:math:`E(x) = -\\lambda^\\top f(x)`, ``(B,)``; padding ignored; ids checked below ``V``."""
        self._check(x)
        at, idx, found = self._lookups(x)
        width = self.pat_off.shape[0] * (x.max_length + 1)
        w = self.weight.new_zeros(x.batch_size * width).index_put((at,), self.weight[idx] * found)
        return -w.view(x.batch_size, width).sum(1)  # summed as the (B, P (T + 1)) block: the order of before

    def _lookups(self, x: Sequences) -> tuple[Tensor, Tensor, Tensor]:
        """Positions of the present windows in the block, their feature ids and whether each was found
        (:meth:`_present_window_keys` then the table). They do not depend on the weights, so the last batch's
        are kept: a trainer that scores the same sentences again after a step (AugSA's samples, then the
        sampler's start from them) looks them up once."""
        last = self._last
        if (last is not None and last[0].shape == x.tokens.shape and last[0].device == x.tokens.device
                and torch.equal(last[0], x.tokens) and torch.equal(last[1], x.lengths)):
            return last[2], last[3], last[4]
        at, keys = self._present_window_keys(x)  # only the windows that exist (padding: none)
        idx, found = self.table(keys)
        self._last = (x.tokens.clone(), x.lengths.clone(), at, idx, found)
        return at, idx, found

    def extra_repr(self) -> str:
        return (f"vocab_size={self.vocab_size}, templates={len(self.templates)}, features={self.num_features}, "
                f"bos={self.bos}, eos={self.eos}, boundaries={self.boundaries!r}")

r"""Feature templates of discrete TRF language models (monograph Table 3.2; Wang, Ou & Tan 2018).

A *template* names a pattern of slots at offsets relative to the current position ``0`` (offsets
``<= 0``, the last one ``0``), each slot reading the word (``w``) or its class (``c``). A feature is
one observed value of a template, and :math:`f_i(x)` counts its occurrences in :math:`x` (position-
and length-independent). A template may list several offset patterns that share its features (the
``tied`` long skip-bigrams, distances 6 to 9 with one parameter each).

Groups, for an order :math:`n` (Table 3.2 is :math:`n = 4`):

========  =====================================================================  ==============
group     templates                                                              n = 4
========  =====================================================================  ==============
``w``     word n-grams of orders 1..n                                            (w0) .. (w-3 w-2 w-1 w0)
``c``     class n-grams of orders 1..n                                           (c0) .. (c-3 c-2 c-1 c0)
``ws``    skipping n-grams: both ends of a span of 3..n kept, one inner gap      (w-2 w0) (w-3 w0) (w-3 w-1 w0) (w-3 w-2 w0)
``cs``    the same over classes
``wsh``   higher-order skip bigrams at distances n and n + 1                     (w-4 w0) (w-5 w0)
``csh``   the same over classes
``cpw``   class history predicting the word, histories of 1..n-1 classes         (c-1 w0) .. (c-3 c-2 c-1 w0)
``tied``  skip bigrams at distances 6..9 sharing one feature (words; classes)    (w-9:-6 w0) (c-9:-6 c0)
========  =====================================================================  ==============
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ebms._checks import check_int

__all__ = ["DEFAULT_GROUPS", "TEMPLATE_GROUPS", "Template", "feature_templates", "source_cutoffs"]

#: every group :func:`feature_templates` knows.
TEMPLATE_GROUPS = ("w", "c", "ws", "cs", "wsh", "csh", "cpw", "tied")
#: the groups used by default (the monograph's best set without ``tied`` adds ``cpw``).
DEFAULT_GROUPS = ("w", "c", "ws", "cs", "wsh", "csh", "cpw")


@dataclass(frozen=True)
class Template:
    """One feature template.

    Attributes:
        layers: what each slot reads, ``"w"`` (word) or ``"c"`` (class), e.g. ``("c", "c", "w")``.
        offsets: one or more offset patterns (tuples as long as ``layers``, increasing, ending at 0);
            all patterns share the template's features.
    """

    layers: tuple[str, ...]
    offsets: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        if not self.layers or any(layer not in ("w", "c") for layer in self.layers):
            raise ValueError(f"layers: expected a non-empty tuple of 'w'/'c'; got {self.layers!r}")
        for pattern in self.offsets:
            if len(pattern) != len(self.layers) or pattern[-1] != 0 or any(
                    a >= b for a, b in zip(pattern, pattern[1:])):
                raise ValueError(f"offsets: expected increasing offsets ending at 0, one per layer {self.layers}; "
                                 f"got {pattern!r}")
        if not self.offsets:
            raise ValueError("offsets: expected at least one offset pattern; got none")

    @property
    def uses_classes(self) -> bool:
        return "c" in self.layers

    @property
    def contiguous(self) -> bool:
        """One offset pattern with no gap (an n-gram: ``w-2 w-1 w0``, ``c-1 w0``), not a skip or tied template."""
        return len(self.offsets) == 1 and self.offsets[0] == tuple(range(1 - len(self.layers), 1))

    @property
    def span(self) -> int:
        """How far back the template reaches (``-min offset``)."""
        return max(-p[0] for p in self.offsets)

    def __str__(self) -> str:
        if len(self.offsets) == 1:
            return " ".join(f"{layer}{o}" for layer, o in zip(self.layers, self.offsets[0]))
        first = sorted(p[0] for p in self.offsets)
        return f"{self.layers[0]}[{first[0]}:{first[-1]}] {self.layers[-1]}0"


def _ngrams(layer: str, n: int) -> list[Template]:
    return [Template((layer,) * k, (tuple(range(-k + 1, 1)),)) for k in range(1, n + 1)]


def _skips(layer: str, n: int) -> list[Template]:
    out = []
    for m in range(3, n + 1):  # span of m positions -(m-1)..0, ends kept, one contiguous inner gap
        inner = list(range(-(m - 2), 0))
        for i in range(len(inner)):
            for j in range(i, len(inner)):
                kept = (-(m - 1), *[o for o in inner if not inner[i] <= o <= inner[j]], 0)
                out.append(Template((layer,) * len(kept), (kept,)))
    return out


def feature_templates(groups: Sequence[str] = DEFAULT_GROUPS, order: int = 4) -> tuple[Template, ...]:
    """The templates of ``groups`` for n-gram ``order`` (see the module table), in group order.

    Raises:
        ValueError: an unknown group (the valid ones are listed), or ``order < 1``.

    Example:
        >>> [str(t) for t in feature_templates(("ws",), order=4)]
        ['w-2 w0', 'w-3 w-1 w0', 'w-3 w0', 'w-3 w-2 w0']
    """
    n = check_int(order, "order", minimum=1)
    if isinstance(groups, str):
        groups = (groups,)
    out: list[Template] = []
    for g in groups:
        if g not in TEMPLATE_GROUPS:
            raise ValueError(f"groups: unknown template group {g!r}; expected some of {', '.join(TEMPLATE_GROUPS)}")
        layer = "c" if g.startswith("c") and g != "cpw" else "w"
        if g in ("w", "c"):
            out += _ngrams(layer, n)
        elif g in ("ws", "cs"):
            out += _skips(layer, n)
        elif g in ("wsh", "csh"):
            out += [Template((layer, layer), ((-d, 0),)) for d in (n, n + 1)]
        elif g == "cpw":
            out += [Template(("c",) * k + ("w",), (tuple(range(-k, 1)),)) for k in range(1, n)]
        else:  # tied
            out += [Template((lay, lay), tuple((-d, 0) for d in range(6, 10))) for lay in ("w", "c")]
    return tuple(out)


def source_cutoffs(templates: Sequence[Template]) -> tuple[int, ...]:
    """The minimum training count of each template's features in the source's PTB recipe (one per template).

    The recipe's feature file (Wang, Ou & Tan 2018; SPMILM ``g4_w_c_ws_cs_wsh_csh_tied.fs``) gives each
    table cutoff digits per n-gram order (order ``k`` reads digit ``k - 1``, the last digit repeating), and
    keeps a feature iff its count is ``>= cut`` (a cut of 0 or 1 keeps every observed feature): word
    n-grams ``"0002"``, class n-grams ``"0000"``, word skip tables ``"2"``, class skip tables ``"0"``. Here:

    * a word n-gram template (word slots at contiguous offsets, one pattern) of ``k >= 4`` slots: 2;
    * a word skip template (word slots only, non-contiguous offsets or several tied patterns: the
      groups ``ws``, ``wsh`` and the word half of ``tied``): 2;
    * every other template (word n-grams of 1..3 slots, class templates, ``cpw``): 1.

    The order is the number of slots. The source adds ``<s> key`` / ``key </s>`` variants of a key shorter
    than its table's longest order, one slot longer, with the cut of that longer order; in ebms such a
    window is the same longer template with the boundary as a slot value (``<s> w0 w1 w2`` is a value of
    ``w-3 w-2 w-1 w0``), so it gets the same cut. The source's one-order skip tables have no boundary
    variants and no key holds both boundaries: ``DiscreteFeatures(boundaries="source")`` reads them so.

    Example:
        >>> source_cutoffs(feature_templates(("w", "ws"), order=4))
        (1, 1, 1, 2, 2, 2, 2, 2)
    """
    out = []
    for t in templates:
        if not isinstance(t, Template):
            raise TypeError(f"templates: expected a sequence of Template; got {type(t).__name__} ({t!r})")
        words = not t.uses_classes
        out.append(2 if words and (not t.contiguous or len(t.layers) >= 4) else 1)
    return tuple(out)

r"""Residual energy-based language model: a frozen base LM reweighted by a sequence energy.

For a prefix ``c`` and a continuation ``x`` (Deng, Bakhtin, Ott, Szlam & Ranzato 2020,
*Residual energy-based models for text generation*, ICLR, Eq. 2),

.. math::  p_\theta(x \mid c) = \frac{p_{LM}(x \mid c)\, \exp(-E_\theta(c, x))}{Z_\theta(c)}, \qquad
           Z_\theta(c) = \mathbb E_{x \sim p_{LM}(\cdot \mid c)}\big[e^{-E_\theta(c, x)}\big],

with :math:`p_{LM}` fixed (no gradient ever reaches it; it stays in eval mode) and
:math:`E_\theta` trained by conditional NCE with the base LM as noise
(:class:`ebms.objectives.residual_nce.ResidualNCE`).

**The horizon law** of :math:`p_{LM}(x \mid c)`. ``horizon=None``: continuations run to
``</s>`` (a law over all finite continuations; the ``</s>`` term is included). ``horizon=K``: the
next at most ``K`` tokens: a continuation that ends before ``K`` tokens has length ``< K`` and its
log-probability includes ``</s>``; one of length ``K`` is cut there (no ``</s>`` term). Both are
proper laws, drawn by ``base.sample(n, prefix=c, max_length=K, truncate=True)``.

**n per prefix.** :meth:`ResidualLM.sample_base` returns ``n`` continuations per prefix row with
row ``b``'s draws at rows ``b n .. b n + n - 1`` (``repeat_interleave`` order); negatives of
:class:`~ebms.objectives.residual_nce.ResidualNCE` and :class:`ebms.data.negative_cache.NegativeCache`
draws use the same layout.

Exact helpers for tiny vocabularies (from :mod:`ebms.models._residual_exact`):
:func:`enumerate_continuations`, :func:`exact_log_z` (float64), :func:`exact_joint_log_probs`.
A dense :class:`~ebms.distributions.NGram` (``end=True``) is accepted as the base and read
through :class:`NGramContinuations`.

Shapes: ``B`` rows (prefix ``c`` and continuation ``x`` each :class:`~ebms.sequences.Sequences`
of ``B`` rows), ``n`` draws per prefix, ``P`` prefixes, ``N`` enumerated continuations.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from torch import Tensor, nn

from ebms._checks import check_energy_output, check_int
from ebms.capabilities import HasVocabSize, SupportsContinuations
from ebms.distributions import NGram
from ebms.models._residual_exact import (
    NGramContinuations,
    enumerate_continuations,
    exact_joint_log_probs,
    exact_log_z,
)
from ebms.sequences import Sequences

__all__ = ["NGramContinuations", "ResidualLM", "enumerate_continuations", "exact_joint_log_probs", "exact_log_z"]


class ResidualLM(nn.Module):
    r"""The joint model :math:`p_{LM}(x \mid c)\, e^{-E_\theta(c, x)} / Z_\theta(c)` (module docstring).

    Args:
        base: the base LM, frozen here (its parameters get ``requires_grad=False`` and it is kept in
            eval mode): an :class:`~ebms.models.AutoregressiveLM`, anything with
            ``continuation_token_log_probs(c, x) -> (B, T_x + 1)`` and
            ``sample(n, generator=, max_length=, temperature=, top_k=, top_p=, prefix=, truncate=)``,
            or an ``end=True`` :class:`~ebms.distributions.NGram`.
        energy: an ``nn.Module`` called as ``energy(prefix, x) -> (B,)`` (lower = more likely), e.g.
            :class:`~ebms.nets.text_energy.TextEnergy`; when it has a ``vocab_size`` it must equal
            the base's.
        horizon: ``None`` (continuations run to ``</s>``) or ``K >= 1`` (the next at most ``K`` tokens).

    Attributes:
        base, energy_net, horizon, vocab_size (the base's ``V``).

    Example:
        >>> from ebms.models import LSTMLM
        >>> from ebms.nets.text_energy import TextEnergy
        >>> m = ResidualLM(LSTMLM(5, embedding_dim=8, hidden_size=8, num_layers=1),
        ...                TextEnergy(5, dim=8, layers=1), horizon=3)
        >>> c = Sequences.from_lists([[1, 2], [3]])
        >>> x = m.sample_base(c, 4, generator=torch.Generator().manual_seed(0))  # rows 0-3 continue c[0]
        >>> x.batch_size, [round(v, 5) for v in exact_log_z(m, c).tolist()]  # a fresh TextEnergy is 0
        (8, [0.0, 0.0])
    """

    def __init__(self, base: nn.Module, energy: nn.Module, *, horizon: int | None = None) -> None:
        super().__init__()
        if not isinstance(base, nn.Module):
            raise TypeError(f"base: expected an nn.Module language model; got {type(base).__name__}")
        if isinstance(base, NGram):
            NGramContinuations(base)  # checks that the n-gram is a sentence law
        elif not isinstance(base, SupportsContinuations):
            raise TypeError(f"base: expected an AutoregressiveLM (continuation_token_log_probs and sample(prefix=...)) "
                            f"or an NGram; got {type(base).__name__}")
        if not isinstance(energy, nn.Module):
            raise TypeError(f"energy: expected an nn.Module called as energy(prefix, x) -> (B,); "
                            f"got {type(energy).__name__}")
        self.horizon = None if horizon is None else check_int(horizon, "horizon", minimum=1)
        vocab = base.vocab_size if isinstance(base, HasVocabSize) else None
        if isinstance(vocab, bool) or not isinstance(vocab, int):
            raise TypeError(f"base: expected an integer attribute vocab_size; got {vocab!r}")
        energy_vocab = energy.vocab_size if isinstance(energy, HasVocabSize) else None
        if energy_vocab is not None and energy_vocab != vocab:
            raise ValueError(f"energy: its vocab_size is {energy_vocab!r} but the base LM's is {vocab}; the energy "
                             "scores the base's token ids, so both must use the same vocabulary (build the energy "
                             f"with vocab_size={vocab})")
        self.vocab_size = vocab
        self.base = base.requires_grad_(False).eval()
        self.energy_net = energy

    @property
    def _law(self) -> SupportsContinuations:
        """What the horizon law is read from: the base, or its n-gram continuation view."""
        return NGramContinuations(self.base) if isinstance(self.base, NGram) else cast(SupportsContinuations, self.base)

    def train(self, mode: bool = True) -> ResidualLM:
        """Set the energy's mode; the base always stays in eval mode (it is the fixed law)."""
        super().train(mode)
        self.base.eval()
        return self

    def _pair(self, prefix: Any, x: Any) -> tuple[Sequences, Sequences]:
        for name, s in (("prefix", prefix), ("x", x)):
            Sequences.coerce(s, name=name, pairs=False, expected="an ebms.sequences.Sequences")
        if prefix.batch_size != x.batch_size:
            raise ValueError(f"prefix: expected one prefix per continuation ({x.batch_size} rows); "
                             f"got {prefix.batch_size}")
        return prefix, x

    def energy(self, prefix: Sequences, x: Sequences) -> Tensor:
        r""":math:`E_\theta(c, x)`, ``(B,)`` (with gradients to the energy's parameters)."""
        prefix, x = self._pair(prefix, x)
        return check_energy_output(self.energy_net(prefix, x), x.batch_size, "energy(prefix, x)")

    def forward(self, prefix: Sequences, x: Sequences) -> Tensor:
        """Same as :meth:`energy`."""
        return self.energy(prefix, x)

    def base_log_prob(self, prefix: Sequences, x: Sequences) -> Tensor:
        r""":math:`\log p_{LM}(x \mid c)` under the horizon law, ``(B,)`` in the base's dtype, no graph.

        Position ``j < L_x`` contributes :math:`\log p(x_{j+1} \mid c, x_{\le j})`; ``</s>`` after
        ``x`` is added when ``horizon is None`` or ``L_x < K``. Cost: one teacher-forced base pass.

        Raises:
            ValueError: a continuation longer than the horizon (probability 0 under the law).
        """
        prefix, x = self._pair(prefix, x)
        if self.horizon is not None and x.batch_size and int(x.lengths.max()) > self.horizon:
            raise ValueError(f"x: continuations have at most horizon={self.horizon} tokens; got one of "
                             f"{int(x.lengths.max())}")
        self.base.eval()
        with torch.no_grad():
            per = self._law.continuation_token_log_probs(prefix, x)
        lengths = x.lengths.to(per.device).unsqueeze(1)
        j = torch.arange(per.shape[1], device=per.device)
        keep = j < lengths
        if self.horizon is None:
            keep = keep | (j == lengths)
        else:
            keep = keep | ((j == lengths) & (lengths < self.horizon))
        return torch.where(keep, per, per.new_zeros(())).sum(-1)

    def unnormalised_log_prob(self, prefix: Sequences, x: Sequences) -> Tensor:
        r""":math:`\log p_{LM}(x \mid c) - E_\theta(c, x)`, ``(B,)`` (:math:`\log p_\theta + \log Z_\theta(c)`)."""
        e = self.energy(prefix, x)
        lp = self.base_log_prob(prefix, x).to(e.device)
        return lp - e

    def sample_base(self, prefix: Sequences, n: int, *, generator: torch.Generator | None = None,
                    top_k: int | None = None, top_p: float | None = None, temperature: float = 1.0) -> Sequences:
        """``n`` base draws per prefix row under the horizon law, ``n B`` rows in the n-per-prefix
        layout (row ``b``'s draws at ``b n .. b n + n - 1``). With ``top_k``/``top_p``/``temperature``
        the draws come from the base's restricted law (Algorithm 1 of Deng et al. uses top-k).

        Cost: one base ``sample`` call of ``n B`` rows (``horizon`` steps at most).
        """
        prefix = Sequences.coerce(prefix, name="prefix", pairs=False, expected="an ebms.sequences.Sequences")
        n = check_int(n, "n", minimum=1)
        self.base.eval()
        law: dict[str, Any] = dict(generator=generator, max_length=self.horizon, temperature=temperature,
                                   top_k=top_k, top_p=top_p, truncate=self.horizon is not None)
        with torch.no_grad():
            if not self._law.per_prefix_sampling:  # e.g. an n-gram: n copies of each prefix
                rep = Sequences(prefix.tokens.repeat_interleave(n, 0), prefix.lengths.repeat_interleave(n),
                                validate=False)
                return self._law.sample(rep.batch_size, prefix=rep, **law)
            # each prefix encoded once, its state repeated for its n draws (same law as n copies)
            sample: Any = self.base.sample  # an AutoregressiveLM's (nn.Module attribute lookup hides the type)
            return sample(n * prefix.batch_size, prefix=prefix, per_prefix=n, **law)

    def extra_repr(self) -> str:
        return f"horizon={self.horizon}, vocab_size={self.vocab_size}"

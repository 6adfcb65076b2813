r"""Electric's noise-contrastive objective with a jointly trained two-tower noise (DNCE).

For a sentence ``x`` of length ``l``, ``k = ceil(mask_rate * l)`` positions ``R`` are drawn
uniformly without replacement; the noise model gives :math:`q(\cdot \mid x_{\setminus t})` from the
CLEAN sentence; the tokens at ``R`` are replaced by draws :math:`\hat x_t \sim q(\cdot \mid
x_{\setminus t})` (all at once, :math:`x^{noised}`), and ONE pass of the energy model scores every
position of :math:`x^{noised}`. The ``l - k`` untouched positions are data, the ``k`` replaced
ones noise, classified with the logit (monograph Eq. 3.18, the weights of its footnote 4)

.. math::  G_t = \log\big((l-k)\,\hat p_\theta(y_t \mid x^{noised}_{\setminus t})\big)
                 - \log\big(k\, q(y_t \mid x_{\setminus t})\big), \qquad y = x^{noised},

so the loss per sentence is

.. math::  \sum_{t \notin R} \operatorname{softplus}(-G_t) + \sum_{t \in R} \operatorname{softplus}(G_t),

i.e. :math:`-\log\frac{(l-k)\hat p}{(l-k)\hat p + k q}` for data and
:math:`-\log\frac{k q}{(l-k)\hat p + k q}` for noise, with :math:`\log\hat p = -w^\top h_t` and the
self-normalisation :math:`Z_\theta = 1` (no :math:`\zeta`). ``loss_nce`` sums it over the batch
and divides by the number of real tokens (per-token scale; a constant factor for a given batch).
A sentence with ``k = l`` (e.g. ``l = 1``) has no data positions: its noise is recognised with
certainty (:math:`G = -\infty`) and it adds 0. A draw equal to the original token stays a noise
sample (the NCE label; ELECTRA's discriminator would count it as original).

``positions="bernoulli"`` replaces each real position independently with probability ``r =
mask_rate`` instead, and the logit reads the rates: :math:`G_t = \log((1-r)\,\hat p_\theta) -
\log(r\, q)`. Then the labels of one sentence are independent, which the one-pass energy, seeing the
whole noised sentence, cannot exploit (with a fixed ``k`` it can: a visibly replaced token makes the
other positions more likely data).

The noise is trained at the same time by maximum likelihood on the gold tokens at ``R``,
``loss_noise`` :math:`= -\frac{1}{|R|}\sum_{t\in R}\log q(x_t \mid x_{\setminus t})` (nats per
masked token), so the noise follows the model class's best fit of the data (dynamic NCE). The
total is ``loss_nce + noise_weight * loss_noise``; ``q`` enters ``loss_nce`` detached (the NCE
loss does not train the noise) and the tokens are discrete (the ML loss does not reach the
energy model). ``noise_steps = n`` trains the noise for the first ``n`` training-mode calls only and then
freezes it (dropout off, no gradient, no ML term): from then on the NCE runs against one fixed noise
law of the quality it reached (``0``: the noise's initialisation; a counter ``steps`` in the state
dict, so a resumed run freezes at the same step).

At the population optimum of the unapproximated form (Eq. 3.17, ``l`` data and ``k`` noise
samples, each conditional read in its own clean context),
:math:`\log\hat p_\theta(x_t \mid x_{\setminus t}) = \log p_{data}(x_t \mid x_{\setminus t})`:
the classifier's Bayes logit is :math:`\log\frac{l\, p_{data}}{k\, q}`.

The model: an object with ``token_scores(x: Sequences) -> (B, T)`` (the energy model,
:class:`ebms.models.ElectricCloze`) and ``noise`` (its noise law, e.g.
:class:`ebms.nets.TwoTowerCloze`: ``log_probs(x) -> (B, T, V)``,
``sample_replacements(x, positions, generator=, log_probs=) -> (B, T)``); ``ElectricCloze(...,
noise=TwoTowerCloze(...))`` is that container, so one optimizer trains both.

Cost per step: one pass of each noise tower and one of the energy model (the unapproximated
Eq. 3.17 needs ``k + 1``: the clean sentence and one per replaced position), plus ``O(B T V)``
for the noise's output layer.

References:
    Clark, K., Luong, M.-T., Le, Q. V. & Manning, C. D. (2020). "Pre-training transformers as
    energy-based cloze models." EMNLP.
    Gutmann, M. & Hyvärinen, A. (2010). "Noise-contrastive estimation: a new estimation principle
    for unnormalized statistical models." AISTATS.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from ebms._checks import check_positive, check_probability, check_tensor
from ebms._numerics import softplus
from ebms.capabilities import ClozeNoise, EnergyCloze, supports
from ebms.objectives._base import LossOutput, check_batch, scalar_metrics
from ebms.sequences import Sequences

__all__ = ["POSITIONS", "ElectricNCE"]

#: how :class:`ElectricNCE` picks the replaced positions
POSITIONS = ("fixed", "bernoulli")


def _as_count(n: Tensor | float, like: Tensor, name: str) -> Tensor:
    if isinstance(n, Tensor):
        if n.shape != like.shape:
            raise ValueError(f"{name}: expected a number or a tensor of shape {tuple(like.shape)}; "
                             f"got shape {tuple(n.shape)}")
        n = n.to(like.dtype)
    else:
        n = torch.full_like(like, float(check_positive(n, name, allow_zero=True)))
    if bool((n < 0).any()):
        raise ValueError(f"{name}: expected counts >= 0; got {float(n.min())}")
    return n


class ElectricNCE(nn.Module):
    r"""Electric's binary NCE loss (Eq. 3.18) plus the noise's ML loss (see the module docstring).

    Args:
        mask_rate: fraction of each sentence replaced, in ``(0, 1]``: ``k = ceil(mask_rate * l)``
            (computed with a 1e-9 tolerance, so ``0.15 * 20`` gives 3).
        noise_weight: weight ``>= 0`` of the noise's ML loss in the total (0 freezes the noise's
            training signal).
        uniform_mix: :math:`\varepsilon \in [0, 1)`, the share of a uniform law over the tokens
            ``1 .. V-1`` in the noise: replacements are drawn from
            :math:`q_\varepsilon = (1-\varepsilon)\,q + \varepsilon/(V-1)` and ``G`` reads
            :math:`\log q_\varepsilon` (still exact NCE). A jointly trained ``q`` soon puts almost no
            mass on implausible tokens, so the energy never sees them and their scores stay
            untrained; the uniform share keeps them among the negatives. ``0``: the noise alone.
        positions: ``"fixed"`` (default; Eq. 3.18): exactly ``k = ceil(mask_rate * l)`` positions of each
            sentence are replaced and ``G`` reads the counts ``(l - k, k)``; ``"bernoulli"``: each real
            position is replaced independently with probability ``r = mask_rate`` and ``G`` reads the
            rates ``(1 - r, r)``. With a fixed count the labels of one sentence depend on each other,
            and an energy that sees the whole noised sentence in one pass can use it: once it spots one
            replaced token, the others are more likely data, so a visibly wrong token raises the scores
            of the rest of its sentence. Independent positions remove that dependence.
        noise_steps: ``None`` (default): the noise is trained throughout (dynamic NCE); an integer
            ``n >= 0``: only during the first ``n`` training-mode calls, then frozen (fixed-noise NCE
            against the noise it reached; ``loss_noise`` is still reported).

    Call: ``objective(model, batch, generator=None) -> LossOutput`` with ``batch`` Sequences of
    sentences (token ids ``>= 1``) or a ``(tokens (B, T), lengths (B,))`` tuple (what
    :class:`ebms.train.Trainer` feeds). Metrics: ``loss_nce``, ``loss_noise`` (nats per masked token),
    ``accuracy`` (real vs replaced, ``G > 0`` = real, over real tokens), ``e_pos``/``e_neg``
    (mean :math:`w^\top h_t` of data / noise positions, 0 if there are none) and
    ``gap = e_neg - e_pos``. ``negatives``: the noised token ids ``(B, T)``.

    Example:
        >>> from ebms.models.electric import ElectricCloze
        >>> from ebms.nets.two_tower import TwoTowerCloze
        >>> model = ElectricCloze(6, dim=8, layers=1, heads=2, noise=TwoTowerCloze(6, dim=8, layers=1))
        >>> out = ElectricNCE()(model, Sequences.from_lists([[1, 2, 3], [4, 5]]))
        >>> out.loss.backward()
        >>> sorted(out.metrics)
        ['accuracy', 'e_neg', 'e_pos', 'gap', 'loss_nce', 'loss_noise']
    """

    def __init__(self, *, mask_rate: float = 0.15, noise_weight: float = 1.0, uniform_mix: float = 0.0,
                 positions: str = "fixed", noise_steps: int | None = None) -> None:
        super().__init__()
        if noise_steps is not None and (isinstance(noise_steps, bool) or not isinstance(noise_steps, int)
                                        or noise_steps < 0):
            raise ValueError(f"noise_steps: expected None or an integer >= 0; got {noise_steps!r}")
        self.noise_steps = noise_steps
        self.steps: Tensor
        if noise_steps is not None:  # only then: the default's state dict stays empty (older runs load)
            self.register_buffer("steps", torch.zeros((), dtype=torch.long))
        if positions not in POSITIONS:
            raise ValueError(f"positions: expected one of {', '.join(POSITIONS)}; got {positions!r}")
        self.positions = positions
        self.mask_rate = check_probability(mask_rate, "mask_rate", open_low=True)
        self.noise_weight = check_positive(noise_weight, "noise_weight", allow_zero=True)
        self.uniform_mix = check_probability(uniform_mix, "uniform_mix", open_high=True)

    def noise_frozen(self) -> bool:
        """Whether the next training-mode call leaves the noise as it is (``noise_steps`` calls done)."""
        return self.noise_steps is not None and int(self.steps) >= self.noise_steps

    def mixed_log_probs(self, log_q: Tensor) -> Tensor:
        r"""``(B, T, V)`` :math:`\log q_\varepsilon` of the noise's ``log_q`` (column 0 stays ``-inf``;
        ``log_q`` itself when ``uniform_mix`` is 0)."""
        eps = self.uniform_mix
        if eps == 0.0:
            return log_q
        V = log_q.shape[-1]
        mixed = torch.logaddexp(log_q + math.log1p(-eps), torch.full_like(log_q, math.log(eps / (V - 1))))
        mixed[..., 0] = -math.inf  # the boundary id is never a token
        return mixed

    def replaced_counts(self, lengths: Tensor) -> Tensor:
        """``(B,)`` long ``k = ceil(mask_rate * l)`` per sentence length."""
        return torch.ceil(lengths.double() * self.mask_rate - 1e-9).clamp(min=0).long()

    def select_positions(self, x: Sequences, generator: torch.Generator | None = None) -> Tensor:
        """``(B, T)`` bool: ``k_b`` real positions of each sentence, uniform without replacement
        (``positions="fixed"``), or each real position with probability ``mask_rate`` (``"bernoulli"``).

        One ``torch.rand((B, T))`` draw from ``generator``: the ``k_b`` smallest keys among the real
        positions are chosen (fixed), or the keys below ``mask_rate`` (bernoulli)."""
        mask = x.mask()
        keys = torch.rand(x.tokens.shape, generator=generator, device=x.tokens.device).masked_fill(~mask, 2.0)
        if self.positions == "bernoulli":
            return (keys < self.mask_rate) & mask
        rank = keys.argsort(1).argsort(1)
        return (rank < self.replaced_counts(x.lengths).unsqueeze(1)) & mask

    @staticmethod
    def logits(log_model: Tensor, log_noise: Tensor, n_pos: Tensor | float, n_neg: Tensor | float) -> Tensor:
        r""":math:`G = \log\hat p + \log n_{pos} - \log n_{neg} - \log q`, shaped like ``log_model``.

        ``n_pos``/``n_neg`` (numbers or tensors of the same shape) are the data and noise counts of
        each element's sentence: ``(l - k, k)`` for Eq. 3.18, ``(l, k)`` for Eq. 3.17. An element
        with ``n_pos = 0`` gets ``-inf`` (certainly noise), one with ``n_neg = 0`` gets ``+inf``.

        Raises:
            TypeError: non-floating inputs.
            ValueError: shapes that differ, negative counts, both counts 0.
        """
        check_tensor(log_model, "log_model", floating=True)
        check_tensor(log_noise, "log_noise", floating=True)
        if log_noise.shape != log_model.shape:
            raise ValueError(f"log_noise: expected the shape of log_model {tuple(log_model.shape)}; "
                             f"got {tuple(log_noise.shape)}")
        pos, neg = _as_count(n_pos, log_model, "n_pos"), _as_count(n_neg, log_model, "n_neg")
        if bool(((pos == 0) & (neg == 0)).any()):
            raise ValueError("n_pos/n_neg: expected at least one positive or negative count per element; got both 0")
        g = log_model + (pos.log() - neg.log()) - log_noise
        return torch.where(pos == 0, -math.inf, torch.where(neg == 0, math.inf, g))

    @staticmethod
    def binary_losses(logits: Tensor, positive: Tensor) -> Tensor:
        r"""Elementwise :math:`\operatorname{softplus}(-G)` where ``positive`` (data), :math:`\operatorname{softplus}(G)`
        elsewhere (noise): :math:`-\log\sigma(\pm G)`. Infinite logits of the right sign give 0
        with a 0 gradient.

        Raises:
            TypeError: non-tensor or non-floating ``logits``.
            ValueError: a ``positive`` that is not bool or not of the shape of ``logits``, or an
                infinite logit of the wrong sign.
        """
        check_tensor(logits, "logits", floating=True)
        check_tensor(positive, "positive")
        if positive.dtype != torch.bool or positive.shape != logits.shape:
            raise ValueError(f"positive: expected a bool tensor of shape {tuple(logits.shape)}; "
                             f"got {positive.dtype} {tuple(positive.shape)}")
        if bool(((logits == -math.inf) & positive).any() | ((logits == math.inf) & ~positive).any()):
            raise ValueError("logits: an infinite logit of the wrong sign (a data sample with no data count, "
                             "or a noise sample with no noise count)")
        return torch.where(positive, softplus(-logits), softplus(logits))

    def forward(self, model: Any, batch: Sequences | tuple[Tensor, Tensor], *,
                generator: torch.Generator | None = None) -> LossOutput:
        """The loss of one batch (see the class docstring).

        Raises:
            TypeError: ``batch`` neither Sequences nor a pair of tensors; ``model`` without
                ``token_scores`` or without a ``noise`` with ``log_probs`` and ``sample_replacements``.
            ValueError: a batch without any token (and the models' token checks).
        """
        x = check_batch(Sequences.coerce(batch), integer=True)
        if not supports(model, EnergyCloze):
            raise TypeError(f"model: expected an energy cloze model with token_scores(x) (ElectricCloze); "
                            f"got {type(model).__name__}")
        noise = model.noise
        if not supports(noise, ClozeNoise):
            raise TypeError(f"model: expected a model.noise with log_probs and sample_replacements (TwoTowerCloze); "
                            f"got model.noise of type {type(noise).__name__}")
        mask = x.mask()
        n_tokens = int(mask.sum())
        if n_tokens == 0:
            raise ValueError(f"batch: expected at least one token; got {x.batch_size} empty sentences")
        replaced = self.select_positions(x, generator)
        frozen = self.noise_frozen()
        if self.noise_steps is not None and self.training:
            self.steps += 1
        if frozen:  # one fixed law: no gradient, and no dropout where the noise is a module
            module = noise if isinstance(noise, nn.Module) and noise.training else None
            if module is not None:
                module.eval()
            with torch.no_grad():
                log_q = noise.log_probs(x)
            if module is not None:
                module.train()
        else:
            log_q = noise.log_probs(x)                                                  # (B, T, V), clean context
        gold = log_q.gather(-1, x.tokens.masked_fill(~mask, 1).unsqueeze(-1)).squeeze(-1)
        loss_noise = -gold[replaced].sum() / replaced.sum().clamp(min=1)
        log_noise = self.mixed_log_probs(log_q.detach())                                 # the NCE noise law
        noised = noise.sample_replacements(x, replaced, generator=generator, log_probs=log_noise)
        scores = model.token_scores(x.with_tokens(noised))                              # log p-hat, one pass
        log_q_noised = log_noise.gather(-1, noised.masked_fill(~mask, 1).unsqueeze(-1)).squeeze(-1)
        positive = ~replaced[mask]
        n_pos: Tensor | float
        n_neg: Tensor | float
        if self.positions == "bernoulli":  # independent labels: the prior odds are the rates
            n_pos, n_neg = 1.0 - self.mask_rate, self.mask_rate
        else:
            k = replaced.sum(1, keepdim=True).expand_as(mask)
            n_pos, n_neg = (x.lengths.unsqueeze(1) - k)[mask].to(scores.dtype), k[mask].to(scores.dtype)
        g = self.logits(scores[mask], log_q_noised[mask].to(scores.dtype), n_pos, n_neg)
        loss_nce = self.binary_losses(g, positive).sum() / n_tokens
        loss = loss_nce if frozen else loss_nce + self.noise_weight * loss_noise
        energy = -scores[mask].detach()
        n_p, n_n = positive.sum().clamp(min=1), (~positive).sum().clamp(min=1)
        e_pos = (energy * positive).sum() / n_p
        e_neg = (energy * ~positive).sum() / n_n
        metrics = scalar_metrics(loss_nce=loss_nce, loss_noise=loss_noise,
                                 accuracy=((g.detach() > 0) == positive).double().mean(),
                                 e_pos=e_pos, e_neg=e_neg, gap=e_neg - e_pos)
        return LossOutput(loss, metrics, noised.detach())

    def extra_repr(self) -> str:
        return (f"mask_rate={self.mask_rate:g}, noise_weight={self.noise_weight:g}, uniform_mix={self.uniform_mix:g}, "
                f"positions={self.positions!r}" + ("" if self.noise_steps is None else f", noise_steps={self.noise_steps}"))

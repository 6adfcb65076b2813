r"""Conditional objectives for CRFs ``p(y | x)``: maximum likelihood and conditional NCE.

The model is any module whose ``forward(*inputs, lengths)`` returns a
:class:`~ebms.structured.linear_chain.LinearChainCRF` (e.g.
:class:`ebms.models.crf_tagger.NeuralCRFTagger`, :class:`ebms.models.feature_crf.FeatureCRF`).
A batch is the tuple ``(*inputs, tags, lengths)``: inputs ``(B, T, ...)``, tags ``(B, T)``
integer (any valid id beyond each length), lengths ``(B,)`` in ``[1, T]``. Every batch is cut to
its longest sentence first, and with ``chunk_size`` it is split into length-sorted chunks, each
cut to its own longest sentence (for full-batch training on a whole corpus); the loss is the
same either way.

**Conditional ML** (monograph eqs. 4.12-4.13; Lafferty, McCallum & Pereira 2001):

.. math::  \mathcal L(\theta) = \frac1B \sum_i -\log p_\theta(y_i \mid x_i)
           + \lambda_2 \lVert\theta\rVert^2, \qquad
           -\nabla \log p_\theta(y_i \mid x_i) = E_{p_\theta(y \mid x_i)}[\nabla U_\theta(x_i, y)]
           - \nabla U_\theta(x_i, y_i),

the expected minus empirical features, computed exactly by the forward-backward recursion
(autograd through ``log Z``). ``l2`` is ``lambda_2`` over every trainable parameter: CRFsuite's
corpus objective ``sum_i -log p + c2 ||w||^2`` divided by ``N`` is this loss with
``l2 = c2 / N`` on the full batch. Cost: one forward-backward, ``O(B T C^2)``.

**Conditional NCE** (Ma & Collins 2018, *Noise contrastive estimation and negative sampling for
conditional models: consistency and statistical efficiency*; monograph section 4.3.3): with the
unnormalised model :math:`\tilde p_\theta(y \mid x) = \exp U_\theta(x, y)` (no per-``x``
normaliser: the model must self-normalise), a noise law ``q(y | x)`` with exact density, and
``nu`` noise sequences :math:`y_{ij} \sim q(\cdot \mid x_i)` per example, the logit
:math:`G(x, y) = U_\theta(x, y) - \log(\nu\, q(y \mid x))` and the loss

.. math::  \mathcal L = \frac1B \sum_i \Big[\operatorname{softplus}(-G(x_i, y_i))
           + \sum_{j=1}^{\nu} \operatorname{softplus}(G(x_i, y_{ij}))\Big]

is ``-J(theta)`` of the monograph (``log(p~/(p~ + nu q)) = -softplus(-G)``,
``log(nu q/(p~ + nu q)) = -softplus(G)``; the inner ``nu E_q`` is estimated by the sum over the
``nu`` draws). As ``nu`` grows its minimiser approaches conditional ML's. Cost: ``nu + 1`` scores
``O(B T)`` plus the model's forward; no forward-backward.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from ebms._checks import check_int, check_positive, check_shape, check_tensor
from ebms._numerics import softplus
from ebms.objectives._base import LossOutput, scalar_metrics
from ebms.structured.linear_chain import LinearChainCRF

__all__ = ["ConditionalML", "ConditionalNCE", "TagBigramNoise"]


def split_batch(batch: Any) -> tuple[list[Tensor], Tensor, Tensor]:
    """``(*inputs, tags, lengths)`` checked and cut to the longest sentence."""
    if not isinstance(batch, (tuple, list)) or len(batch) < 3:
        got = f"a {type(batch).__name__} of {len(batch)}" if isinstance(batch, (tuple, list)) else type(batch).__name__
        raise ValueError(f"batch: expected a tuple (*inputs, tags, lengths) with at least one input; got {got}")
    *inputs, tags, lengths = batch
    check_tensor(lengths, "lengths")
    if lengths.dim() != 1 or lengths.shape[0] == 0 or lengths.is_floating_point():
        raise ValueError(f"lengths: expected a non-empty (B,) integer tensor; "
                         f"got {tuple(lengths.shape)} {lengths.dtype}")
    check_tensor(tags, "tags")
    if tags.is_floating_point() or tags.dim() != 2:
        raise ValueError(f"tags: expected a (B, T) integer tensor; got {tuple(tags.shape)} {tags.dtype}")
    check_shape(tags, (lengths.shape[0], None), "tags (B = lengths.shape[0])")
    t_max = int(lengths.max())
    if int(lengths.min()) < 1 or t_max > tags.shape[1]:
        raise ValueError(f"lengths: expected values in [1, {tags.shape[1]}] (tags.shape[1]); "
                         f"got min {int(lengths.min())}, max {t_max}")
    cut = [x[:, :t_max] if isinstance(x, Tensor) and x.dim() >= 2 and x.shape[1] == tags.shape[1] else x
           for x in inputs]
    return cut, tags[:, :t_max], lengths.long()


def _chunks(lengths: Tensor, chunk_size: int | None) -> Iterator[Tensor | None]:
    if chunk_size is None or lengths.shape[0] <= chunk_size:
        yield None
        return
    yield from torch.argsort(lengths, stable=True).split(chunk_size)


def _rows(x: Any, idx: Tensor | None, t: int | None) -> Any:
    if idx is None or not isinstance(x, Tensor):
        return x
    x = x[idx]
    return x[:, :t] if x.dim() >= 2 and t is not None else x


def _crf(model: nn.Module, inputs: Sequence[Any], lengths: Tensor) -> LinearChainCRF:
    crf = model(*inputs, lengths)
    if not isinstance(crf, LinearChainCRF):
        raise TypeError(f"model: expected forward(*inputs, lengths) to return a LinearChainCRF; "
                        f"got {type(crf).__name__}")
    return crf


def _check_chunk(chunk_size: int | None) -> int | None:
    return None if chunk_size is None else check_int(chunk_size, "chunk_size", minimum=1)


class ConditionalML:
    """Conditional maximum likelihood (see the module docstring).

    Args:
        l2: squared-L2 coefficient ``lambda_2 >= 0`` over the model's trainable parameters.
        chunk_size: sentences per length-sorted chunk (``None``: the batch at once).

    Metrics: ``nll`` (mean ``-log p`` per sentence) and ``nll_token`` (per token).
    """

    def __init__(self, *, l2: float = 0.0, chunk_size: int | None = None) -> None:
        self.l2 = check_positive(l2, "l2", allow_zero=True)
        self.chunk_size = _check_chunk(chunk_size)

    def __call__(self, model: nn.Module, batch: Any, *, generator: torch.Generator | None = None) -> LossOutput:
        inputs, tags, lengths = split_batch(batch)
        nll = None
        for idx in _chunks(lengths, self.chunk_size):
            ln = lengths if idx is None else lengths[idx]
            t = int(ln.max())
            crf = _crf(model, [_rows(x, idx, t) for x in inputs], ln)
            part = -crf.log_prob(_rows(tags, idx, t)).sum()
            nll = part if nll is None else nll + part
        assert nll is not None
        b = lengths.shape[0]
        loss = nll / b
        if self.l2:
            loss = loss + self.l2 * sum((p * p).sum() for p in model.parameters() if p.requires_grad)
        return LossOutput(loss, scalar_metrics(nll=nll.detach() / b, nll_token=nll.detach() / lengths.sum()))


class TagBigramNoise:
    """Noise ``q(y | x)``: a first-order Markov chain over tags, for sequences of the given length.

    ``q(y) = pi[y_1] prod_{t=2..L} P[y_{t-1}, y_t]`` (``L`` is the length of ``x``; ``q`` ignores
    the rest of ``x``). Exact ``log_prob`` (float64; the objective casts it to the model's dtype)
    and ancestral ``sample``, ``O(B T)``.

    Args:
        log_start: ``(C,)`` log initial probabilities (must sum to 1).
        log_trans: ``(C, C)`` log transition probabilities, rows summing to 1.
    """

    def __init__(self, log_start: Tensor, log_trans: Tensor) -> None:
        check_tensor(log_start, "log_start", floating=True)
        if log_start.dim() != 1 or log_start.shape[0] == 0:
            raise ValueError(f"log_start: expected a non-empty (C,) tensor; got {tuple(log_start.shape)}")
        c = log_start.shape[0]
        check_tensor(log_trans, "log_trans", floating=True)
        check_shape(log_trans, (c, c), f"log_trans (C = {c})")
        for name, x in (("log_start", log_start), ("log_trans", log_trans)):
            err = float((x.double().exp().sum(-1) - 1).abs().max())
            if not err < 1e-5:
                raise ValueError(f"{name}: expected log-probabilities summing to 1 over the last axis; "
                                 f"off by {err:.3g}")
        # float64: log q must be exact for float64 models too (float32 storage rounded it by ~1e-7)
        self.log_start, self.log_trans = log_start.detach().double(), log_trans.detach().double()

    @property
    def n_tags(self) -> int:
        return self.log_start.shape[0]

    @classmethod
    def uniform(cls, n_tags: int) -> TagBigramNoise:
        """Uniform over the ``C^L`` tag sequences of each length."""
        c = check_int(n_tags, "n_tags", minimum=1)
        return cls(torch.full((c,), -math.log(c), dtype=torch.float64),
                   torch.full((c, c), -math.log(c), dtype=torch.float64))

    @classmethod
    def fit(cls, tags: Tensor, lengths: Tensor, n_tags: int, *, smoothing: float = 1.0) -> TagBigramNoise:
        """Initial and transition frequencies of training tags, plus ``smoothing`` (add-k, ``k > 0``
        so that ``q`` covers every sequence)."""
        c = check_int(n_tags, "n_tags", minimum=1)
        k = check_positive(smoothing, "smoothing")
        _, tags, lengths = split_batch((tags, tags, lengths))
        valid = torch.arange(tags.shape[1]) < lengths[:, None]
        if int(tags[valid].min()) < 0 or int(tags[valid].max()) >= c:
            raise ValueError(f"tags: expected values in [0, {c - 1}] within each length; "
                             f"got min {int(tags[valid].min())}, max {int(tags[valid].max())}")
        start = torch.bincount(tags[:, 0], minlength=c).double() + k
        both = valid[:, 1:]
        pairs = tags[:, :-1][both] * c + tags[:, 1:][both]
        trans = torch.bincount(pairs, minlength=c * c).double().view(c, c) + k
        return cls((start / start.sum()).log(), (trans / trans.sum(-1, keepdim=True)).log())

    def _check(self, lengths: Tensor) -> Tensor:
        check_tensor(lengths, "lengths")
        if lengths.dim() != 1 or lengths.is_floating_point() or (lengths.numel() and int(lengths.min()) < 1):
            raise ValueError(f"lengths: expected a (B,) integer tensor of values >= 1; got {lengths.tolist()}")
        return lengths.long()

    def log_prob(self, tags: Tensor, lengths: Tensor) -> Tensor:
        """``log q(tags)``, ``(B,)``, for ``tags (B, T)`` up to each length."""
        lengths = self._check(lengths)
        check_shape(tags, (lengths.shape[0], None), "tags (B = lengths.shape[0])")
        c = self.n_tags
        valid = torch.arange(tags.shape[1], device=tags.device) < lengths[:, None]
        if int(tags[valid].min()) < 0 or int(tags[valid].max()) >= c:
            raise ValueError(f"tags: expected values in [0, {c - 1}] within each length (noise has "
                             f"{c} tags); got min {int(tags[valid].min())}, max {int(tags[valid].max())}")
        y = tags.long().masked_fill(~valid, 0)
        st, tr = self.log_start.to(tags.device), self.log_trans.to(tags.device)
        lp = st[y[:, 0]]
        step = tr[y[:, :-1], y[:, 1:]]
        return lp + torch.where(valid[:, 1:], step, step.new_zeros(())).sum(1)

    def sample(self, lengths: Tensor, n: int, *, generator: torch.Generator | None = None) -> Tensor:
        """``n`` draws per sequence: ``(n, B, T)`` long with ``T = max(lengths)``, 0 beyond each length."""
        lengths = self._check(lengths)
        check_int(n, "n", minimum=1)
        b, t = lengths.shape[0], int(lengths.max())
        p_start, p_trans = self.log_start.exp(), self.log_trans.exp()
        out = torch.empty(n * b, t, dtype=torch.long)
        out[:, 0] = torch.multinomial(p_start.expand(n * b, -1), 1, replacement=True, generator=generator)[:, 0]
        for i in range(1, t):
            out[:, i] = torch.multinomial(p_trans[out[:, i - 1]], 1, generator=generator)[:, 0]
        out = out.view(n, b, t).to(lengths.device)
        return out.masked_fill(torch.arange(t, device=lengths.device) >= lengths[:, None], 0)


class ConditionalNCE:
    """Conditional noise-contrastive estimation (see the module docstring).

    Args:
        noise: the noise law ``q(y | x)`` (:class:`TagBigramNoise`; anything with
            ``log_prob(tags, lengths)``, ``sample(lengths, n, generator=)`` and ``n_tags``).
        nu: noise sequences per example, an integer ``>= 1``.
        chunk_size: sentences per length-sorted chunk (``None``: the batch at once).

    Metrics: ``acc_data`` / ``acc_noise`` (fraction of data / noise sequences the logit
    classifies correctly), ``score_data`` (mean ``U(x, y)`` of the data).
    """

    def __init__(self, noise: TagBigramNoise, *, nu: int | float = 1, chunk_size: int | None = None) -> None:
        if not all(hasattr(noise, a) for a in ("log_prob", "sample", "n_tags")):
            raise TypeError(f"noise: expected a TagBigramNoise-like object (log_prob, sample, n_tags); "
                            f"got {type(noise).__name__}")
        if isinstance(nu, float) and nu.is_integer():
            nu = int(nu)
        self.nu = check_int(nu, "nu", minimum=1)
        self.noise = noise
        self.chunk_size = _check_chunk(chunk_size)

    def __call__(self, model: nn.Module, batch: Any, *, generator: torch.Generator | None = None) -> LossOutput:
        inputs, tags, lengths = split_batch(batch)
        b, nu = lengths.shape[0], self.nu
        noise_tags = self.noise.sample(lengths, nu, generator=generator)  # (nu, B, T)
        log_nu = math.log(nu)
        total = None
        sums = torch.zeros(3, device=lengths.device)  # one host sync for the metrics, after the loop
        for idx in _chunks(lengths, self.chunk_size):
            ln = lengths if idx is None else lengths[idx]
            t = int(ln.max())
            y = _rows(tags, idx, t)
            ys = noise_tags if idx is None else noise_tags[:, idx, :t]
            crf = _crf(model, [_rows(x, idx, t) for x in inputs], ln)
            if crf.emissions.shape[-1] != self.noise.n_tags:
                raise ValueError(f"noise: expected {crf.emissions.shape[-1]} tags (the model's); "
                                 f"got a noise law over {self.noise.n_tags}")
            s_data = crf.score(y)
            g_data = s_data - log_nu - self.noise.log_prob(y, ln).to(s_data.dtype)
            g_noise = torch.stack([crf.score(ys[j]) - log_nu - self.noise.log_prob(ys[j], ln).to(s_data.dtype)
                                   for j in range(nu)])
            part = softplus(-g_data).sum() + softplus(g_noise).sum()
            total = part if total is None else total + part
            sums += torch.stack([(g_data > 0).sum(), (g_noise < 0).sum(), s_data.sum()]).detach().float()
        assert total is not None
        return LossOutput(total / b, scalar_metrics(acc_data=sums[0] / b, acc_noise=sums[1] / (nu * b),
                                                    score_data=sums[2] / b))

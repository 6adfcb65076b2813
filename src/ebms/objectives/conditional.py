r"""Conditional objectives for sequence models ``p(y | x)``: maximum likelihood and conditional NCE.

Both are ``nn.Module`` objectives with the package's one call, ``out = objective(model, batch,
generator=g)`` returning a :class:`~ebms.objectives.LossOutput`. The model is any module whose
``forward(*inputs, lengths)`` returns a distribution over tag sequences offering what the
objective needs: ``log_prob(tags) -> (B,)`` for :class:`ConditionalML`
(:class:`~ebms.capabilities.SupportsLogProb`), the unnormalised ``score(tags) -> (B,)`` for
:class:`ConditionalNCE` (:class:`~ebms.capabilities.SupportsScore`). A
:class:`~ebms.structured.linear_chain.LinearChainCRF` offers both, so
:class:`ebms.models.crf_tagger.NeuralCRFTagger` and :class:`ebms.models.feature_crf.FeatureCRF`
qualify. A batch is the tuple ``(*inputs, tags, lengths)`` (or ``(*inputs, Sequences(tags,
lengths))``): inputs ``(B, T, ...)``, tags ``(B, T)`` integer (any valid id beyond each length),
lengths ``(B,)`` in ``[1, T]``. Every batch is cut to its longest sentence first, and with
``chunk_size`` it is split into length-sorted chunks, each cut to its own longest sentence (for
full-batch training on a whole corpus); the loss is the same either way.

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
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from ebms._checks import check_int, check_positive, check_shape, check_tensor
from ebms.capabilities import SupportsLogProb, SupportsScore
from ebms.distributions import Distribution, NGram
from ebms.objectives._base import LossOutput, scalar_metrics
from ebms.objectives._nce_core import nce_logits, nce_loss
from ebms.objectives._tagging_batch import check_chunk, chunks, rows, split_batch
from ebms.sequences import Sequences
from ebms.structured.linear_chain import LinearChainCRF

__all__ = ["ConditionalML", "ConditionalNCE", "TagBigramNoise"]


def _distribution(model: nn.Module, inputs: Sequence[Any], lengths: Tensor, kind: type, method: str) -> Any:
    dist = model(*inputs, lengths)
    if not isinstance(dist, kind):
        raise TypeError(f"model: expected forward(*inputs, lengths) to return a distribution over tag sequences "
                        f"with {method} (e.g. a LinearChainCRF); got {type(dist).__name__}")
    return dist


class ConditionalML(nn.Module):
    """Conditional maximum likelihood (see the module docstring).

    Args:
        l2: squared-L2 coefficient ``lambda_2 >= 0`` over the model's trainable parameters.
        chunk_size: sentences per length-sorted chunk (``None``: the batch at once).

    Call: ``objective(model, batch, generator=None)`` with ``batch = (*inputs, tags, lengths)``
    or ``(*inputs, Sequences(tags, lengths))`` and ``model(*inputs, lengths)`` returning a
    :class:`~ebms.capabilities.SupportsLogProb`. Keeps no state, draws no randomness.

    Metrics: ``nll`` (mean ``-log p`` per sentence) and ``nll_token`` (per token).
    """

    def __init__(self, *, l2: float = 0.0, chunk_size: int | None = None) -> None:
        super().__init__()
        self.l2 = check_positive(l2, "l2", allow_zero=True)
        self.chunk_size = check_chunk(chunk_size)

    def forward(self, model: nn.Module, batch: Any, *, generator: torch.Generator | None = None) -> LossOutput:
        inputs, tags, lengths = split_batch(batch)
        nll = None
        for idx in chunks(lengths, self.chunk_size):
            ln = lengths if idx is None else lengths[idx]
            t = int(ln.max())
            dist = _distribution(model, [rows(x, idx, t) for x in inputs], ln, SupportsLogProb, "log_prob(tags)")
            part = -dist.log_prob(rows(tags, idx, t)).sum()
            nll = part if nll is None else nll + part
        assert nll is not None
        b = lengths.shape[0]
        loss = nll / b
        if self.l2:
            loss = loss + self.l2 * sum((p * p).sum() for p in model.parameters() if p.requires_grad)
        return LossOutput(loss, scalar_metrics(nll=nll.detach() / b, nll_token=nll.detach() / lengths.sum()))

    def extra_repr(self) -> str:
        return f"l2={self.l2}, chunk_size={self.chunk_size}"


class TagBigramNoise(NGram):
    """Moved to :class:`ebms.distributions.NGram`: a length-conditional bigram over the tags ``0 .. C-1``.

    ``q(y | L) = pi[y_1] prod_{t=2..L} P[y_{t-1}, y_t]`` is ``NGram(C + 1, 2, table, boundary=C,
    end=False)`` with ``table[C, :C] = log pi`` and ``table[:C, :C] = log P``. This name keeps the
    old constructors (``TagBigramNoise(log_start, log_trans)``, :meth:`uniform`, :meth:`fit`) and
    the ``log_start``/``log_trans``/``n_tags`` views; sampling and scoring follow the protocol:
    ``sample(n, lengths=..., generator=)`` and ``log_prob(Sequences(tags, lengths))`` (float64).

    Args:
        log_start: ``(C,)`` log initial probabilities (summing to 1).
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
        table = torch.full((c + 1, c + 1), -math.inf, dtype=torch.float64)
        table[c, :c], table[:c, :c] = log_start.detach().double(), log_trans.detach().double()
        super().__init__(c + 1, 2, table, boundary=c, end=False)

    @property
    def n_tags(self) -> int:
        return self.vocab_size - 1

    @property
    def log_start(self) -> Tensor:
        """``(C,)`` float64 log initial probabilities."""
        return self.table[self.n_tags, : self.n_tags]

    @property
    def log_trans(self) -> Tensor:
        """``(C, C)`` float64 log transition probabilities."""
        return self.table[: self.n_tags, : self.n_tags]

    @classmethod
    def uniform(cls, n_tags: int) -> TagBigramNoise:  # type: ignore[override]
        """Uniform over the ``C^L`` tag sequences of each length."""
        c = check_int(n_tags, "n_tags", minimum=1)
        return cls(torch.full((c,), -math.log(c), dtype=torch.float64),
                   torch.full((c, c), -math.log(c), dtype=torch.float64))

    @classmethod
    def fit(cls, tags: Tensor, lengths: Tensor, n_tags: int, *,  # type: ignore[override]
            smoothing: float = 1.0) -> TagBigramNoise:
        """Initial and transition frequencies of training tags plus ``smoothing`` (add-k, ``k > 0``, so that
        ``q`` covers every sequence): ``NGram.fit(..., smoothing="add_k", boundary=C, end=False)``."""
        c = check_int(n_tags, "n_tags", minimum=1)
        k = check_positive(smoothing, "smoothing")
        _, tags, lengths = split_batch((tags, tags, lengths))
        valid = torch.arange(tags.shape[1], device=tags.device) < lengths[:, None]
        if int(tags[valid].min()) < 0 or int(tags[valid].max()) >= c:
            raise ValueError(f"tags: expected values in [0, {c - 1}] within each length; "
                             f"got min {int(tags[valid].min())}, max {int(tags[valid].max())}")
        seqs = Sequences(tags.masked_fill(~valid, 0), lengths, validate=False)
        lm = NGram.fit(seqs, c + 1, 2, smoothing="add_k", k=k, boundary=c, end=False)
        return cls(lm.table[c, :c], lm.table[:c, :c])


class ConditionalNCE(nn.Module):
    """Conditional noise-contrastive estimation (see the module docstring).

    Args:
        noise: the noise law ``q(y | x)``: any :mod:`ebms.distributions` member over tag
            :class:`~ebms.sequences.Sequences` that is conditional on length
            (``conditional_on_length``; ``sample(n, lengths=..., generator=)``), e.g.
            ``NGram.fit(Sequences(tags, lengths), C + 1, 2, boundary=C, end=False)`` or
            :class:`TagBigramNoise`.
            Its tokens are the tag ids ``0 .. C-1``. A submodule: it moves with the objective and
            its table is part of ``objective.state_dict()``.
        nu: noise sequences per example, an integer ``>= 1``.
        chunk_size: sentences per length-sorted chunk (``None``: the batch at once).

    Call: ``objective(model, batch, generator=g)`` with the batches of :class:`ConditionalML` and
    ``model(*inputs, lengths)`` returning a :class:`~ebms.capabilities.SupportsScore`. The logistic loss is
    :func:`~ebms.objectives.nce_logits` / :func:`~ebms.objectives.nce_loss` with no ``log Z`` (the
    model self-normalises). Random draws: ``noise.sample(nu * B, lengths=..., generator=generator)``.

    Metrics: ``acc_data`` / ``acc_noise`` (fraction of data / noise sequences the logit
    classifies correctly), ``score_data`` (mean ``U(x, y)`` of the data).
    """

    def __init__(self, noise: Distribution, *, nu: int | float = 1, chunk_size: int | None = None) -> None:
        super().__init__()
        if not isinstance(noise, Distribution) or not noise.conditional_on_length:
            raise TypeError(f"noise: expected an ebms.distributions model of tag sequences conditional on their "
                            f"length (e.g. NGram(..., end=False), TagBigramNoise); got {type(noise).__name__}")
        if isinstance(nu, float) and nu.is_integer():
            nu = int(nu)
        self.nu = check_int(nu, "nu", minimum=1)
        self.noise: Any = noise  # sample(n, *, lengths, generator) -> Sequences
        self.chunk_size = check_chunk(chunk_size)

    def _check_tags(self, dist: Any) -> None:
        """The noise's tag set against the model's, where the model's distribution declares it."""
        q = self.noise
        if not isinstance(dist, LinearChainCRF) or not isinstance(q, NGram):
            return  # other models check the tag range in their own score(tags)
        n_tags = dist.emissions.shape[-1]
        if q.vocab_size != n_tags + 1 or q.boundary != n_tags:
            raise ValueError(f"noise: expected {n_tags} tags (the model's): an n-gram with vocab_size {n_tags + 1} "
                             f"and boundary {n_tags}; got vocab_size {q.vocab_size}, boundary {q.boundary}")

    def _log_q(self, y: Tensor, lengths: Tensor, dtype: torch.dtype) -> Tensor:
        return self.noise.log_prob(Sequences(y, lengths, validate=False)).to(dtype)

    def forward(self, model: nn.Module, batch: Any, *, generator: torch.Generator | None = None) -> LossOutput:
        inputs, tags, lengths = split_batch(batch)
        b, nu = lengths.shape[0], self.nu
        draws = self.noise.sample(nu * b, lengths=lengths.repeat(nu), generator=generator)
        noise_tags = draws.tokens[:, : tags.shape[1]].reshape(nu, b, tags.shape[1])  # (nu, B, T)
        total = None
        sums = torch.zeros(3, device=lengths.device)  # one host sync for the metrics, after the loop
        for idx in chunks(lengths, self.chunk_size):
            ln = lengths if idx is None else lengths[idx]
            t = int(ln.max())
            y = rows(tags, idx, t)
            ys = noise_tags if idx is None else noise_tags[:, idx, :t]
            dist = _distribution(model, [rows(x, idx, t) for x in inputs], ln, SupportsScore, "score(tags)")
            self._check_tags(dist)
            s_data = dist.score(y)
            g_data = nce_logits(s_data, self._log_q(y, ln, s_data.dtype), nu=nu)
            s_noise = torch.stack([dist.score(ys[j]) for j in range(nu)])  # (nu, b)
            log_q_noise = torch.stack([self._log_q(ys[j], ln, s_data.dtype) for j in range(nu)])
            g_noise = nce_logits(s_noise, log_q_noise, nu=nu)
            part = nce_loss(g_data, g_noise, nu=nu, reduction="sum")
            total = part if total is None else total + part
            sums += torch.stack([(g_data > 0).sum(), (g_noise < 0).sum(), s_data.sum()]).detach().float()
        assert total is not None
        return LossOutput(total / b, scalar_metrics(acc_data=sums[0] / b, acc_noise=sums[1] / (nu * b),
                                                    score_data=sums[2] / b))

    def extra_repr(self) -> str:
        return f"nu={self.nu}, chunk_size={self.chunk_size}"

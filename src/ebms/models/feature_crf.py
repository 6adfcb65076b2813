"""Feature-based linear-chain CRF (CRFsuite's model).

Model (Lafferty, McCallum & Pereira, 2001; Sha & Pereira, 2003, "Shallow parsing with conditional
random fields"): a token ``t`` carries attributes ``a`` with values ``x_t(a)`` (see
:mod:`ebms.structured.features`); the score of tags ``y`` is

    score(y | x) = sum_t sum_a x_t(a) W[a, y_t] + sum_{t>=2} A[y_{t-1}, y_t],

with no start/end potentials (CRFsuite's ``crf1d`` has state and transition features only; the
template's ``__BOS__``/``__EOS__`` attributes play that role). ``p(y | x) = exp(score) / Z(x)``.
Only the attribute-tag pairs (and tag bigrams) passed as ``observed`` have weights; the others are
held at exactly 0, as CRFsuite does by default.

Training is :func:`ebms.fit.fit_feature_crf` (CRFsuite's L-BFGS / OWL-QN, or SGD / Adam) on the
loss :class:`ebms.objectives.FeatureCRFLikelihood`.

Cost: emissions by one ``embedding_bag`` over the tokens (:func:`ebms.structured.features.attribute_emissions`,
``O(tokens * F * C)``), then the forward-backward of :class:`ebms.structured.LinearChainCRF`
(``O(tokens * C^2)``). Memory: the parameters are the ``K`` observed weights only (so are an
optimiser's history and every checkpoint).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ebms._checks import check_bool_mask, check_int, check_shape, check_tensor
from ebms.structured.features import attribute_emissions
from ebms.structured.linear_chain import LinearChainCRF

__all__ = ["FeatureCRF"]


class FeatureCRF(nn.Module):
    """Linear-chain CRF over sparse attribute vectors (see the module docstring).

    Args:
        n_attributes: ``A``, attribute ids are ``0..A-1`` (``0`` is padding).
        n_tags: ``C``.
        observed: optional ``(A, C)`` bool mask of the state weights that exist.
        observed_transitions: optional ``(C, C)`` bool mask of the transition weights that exist.
        dtype: parameter dtype (float64 by default, as CRFsuite).

    Only the weights that exist are parameters: ``state_values (K,)`` holds the ``K`` observed
    state weights (row-major order of the mask) and ``transition_values (K_t,)`` the observed
    transitions, so optimiser state, checkpoints and snapshots cost ``K`` numbers, not ``A C``
    (on CoNLL-2000: 452,610 against 7.7 million). :attr:`state_weights` and :attr:`transitions`
    are the dense ``(A, C)`` and ``(C, C)`` views (differentiable; non-observed entries are
    exactly 0); :meth:`set_weights` writes dense values. Parameters start at 0 (CRFsuite's
    initial point).
    """

    def __init__(self, n_attributes: int, n_tags: int, *, observed: Tensor | None = None,
                 observed_transitions: Tensor | None = None,
                 dtype: torch.dtype = torch.float64) -> None:
        super().__init__()
        check_int(n_attributes, "n_attributes", minimum=1)
        check_int(n_tags, "n_tags", minimum=1)
        self.n_attributes, self.n_tags = n_attributes, n_tags
        obs = check_bool_mask(observed, (n_attributes, n_tags), "observed")
        obs_t = check_bool_mask(observed_transitions, (n_tags, n_tags), "observed_transitions")
        self.state_mask: Tensor | None
        self.transition_mask: Tensor | None
        self.register_buffer("state_mask", None if obs is None else obs.clone())
        self.register_buffer("transition_mask", None if obs_t is None else obs_t.clone())
        k = n_attributes * n_tags if obs is None else int(obs.sum())
        k_t = n_tags * n_tags if obs_t is None else int(obs_t.sum())
        self.state_values = nn.Parameter(torch.zeros(k, dtype=dtype))
        self.transition_values = nn.Parameter(torch.zeros(k_t, dtype=dtype))
        self.register_load_state_dict_pre_hook(_dense_checkpoint_to_compact)
        self.register_load_state_dict_pre_hook(_checkpoint_masks)

    def _index(self, mask: Tensor | None) -> Tensor | None:
        """The flat positions of ``mask``'s True entries, kept until the mask changes (every pass of a
        fit reads them; finding them anew costs a scan of the ``A C`` mask)."""
        if mask is None:
            return None
        cache: dict[int, tuple[Tensor, int, Tensor]] = self.__dict__.setdefault("_index_cache", {})
        hit = cache.get(id(mask))  # the entry holds the mask itself, so its id is not reused while cached
        if hit is None or hit[0] is not mask or hit[1] != mask._version:
            hit = (mask, mask._version, mask.reshape(-1).nonzero().squeeze(1))
            cache[id(mask)] = hit
        return hit[2]

    def _dense(self, values: Tensor, mask: Tensor | None, shape: tuple[int, int]) -> Tensor:
        if mask is None:
            return values.view(shape)
        idx = self._index(mask)
        assert idx is not None
        dense = torch.zeros(shape[0] * shape[1], dtype=values.dtype, device=values.device)
        return dense.index_copy_(0, idx, values).view(shape)  # in place: no copy of the A C zeros

    def effective_weights(self) -> tuple[Tensor, Tensor]:
        """``(W (A, C), transitions (C, C))`` with non-observed entries exactly 0 (differentiable)."""
        return (self._dense(self.state_values, self.state_mask, (self.n_attributes, self.n_tags)),
                self._dense(self.transition_values, self.transition_mask, (self.n_tags, self.n_tags)))

    def compact_weights(self) -> tuple[Tensor, Tensor | None, Tensor]:
        """``(state_values (K,), their flat positions in the row-major (A, C) table (None: every entry, in
        order), transitions (C, C))``: the state weights without building the dense table (a full-batch
        pass of :class:`~ebms.objectives.FeatureCRFLikelihood` scatters them into a table it keeps)."""
        return (self.state_values, self._index(self.state_mask),
                self._dense(self.transition_values, self.transition_mask, (self.n_tags, self.n_tags)))

    @property
    def state_weights(self) -> Tensor:
        """Dense state weights ``W (A, C)`` (a new tensor each call; see :meth:`set_weights`)."""
        return self.effective_weights()[0]

    @property
    def transitions(self) -> Tensor:
        """Dense transition weights ``(C, C)`` (a new tensor each call; see :meth:`set_weights`)."""
        return self.effective_weights()[1]

    @torch.no_grad()
    def set_weights(self, state_weights: Tensor | None = None, transitions: Tensor | None = None) -> None:
        """Copy dense ``(A, C)`` / ``(C, C)`` values into the parameters (observed entries only)."""
        for dense, values, mask, shape, name in (
                (state_weights, self.state_values, self.state_mask, (self.n_attributes, self.n_tags),
                 "state_weights"),
                (transitions, self.transition_values, self.transition_mask, (self.n_tags, self.n_tags),
                 "transitions")):
            if dense is None:
                continue
            check_tensor(dense, name, floating=True)
            check_shape(dense, shape, name)
            idx = self._index(mask)
            flat = dense.reshape(-1).to(values.dtype)
            values.copy_(flat if idx is None else flat[idx])

    def check_inputs(self, ids: Tensor, weights: Tensor, lengths: Tensor) -> None:
        """Refuse ``ids, weights (B, T, F)`` and ``lengths (B,)`` of the wrong type, shape or id range."""
        check_tensor(ids, "ids")
        if ids.dtype != torch.long:
            raise TypeError(f"ids: expected a long tensor; got dtype {ids.dtype}")
        if ids.dim() != 3 or 0 in ids.shape:
            raise ValueError(f"ids: expected a non-empty shape (B, T, F); got {tuple(ids.shape)}")
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= self.n_attributes:
            raise ValueError(f"ids: expected values in [0, {self.n_attributes - 1}] "
                             f"(n_attributes = {self.n_attributes}); got min {lo}, max {hi}")
        check_tensor(weights, "weights", floating=True)
        check_shape(weights, tuple(ids.shape), "weights (as ids)")
        check_tensor(lengths, "lengths")
        check_shape(lengths, (ids.shape[0],), "lengths (B = ids.shape[0])")

    def emissions(self, ids: Tensor, weights: Tensor) -> Tensor:
        """Node potentials ``(..., C)`` of tokens ``ids, weights (..., F)`` (no input checks)."""
        return attribute_emissions(self.effective_weights()[0], ids, weights)

    def forward(self, ids: Tensor, weights: Tensor, lengths: Tensor) -> LinearChainCRF:
        """Distribution over tags of ``ids, weights (B, T, F)`` with ``lengths (B,)``."""
        self.check_inputs(ids, weights, lengths)
        _, a = self.effective_weights()
        return LinearChainCRF(self.emissions(ids, weights), a, lengths)

    @torch.no_grad()
    def decode(self, ids: Tensor, weights: Tensor, lengths: Tensor, *,
               batch_size: int = 1024) -> Tensor:
        """Viterbi tags ``(N, T)`` (``-1`` beyond each length), in length-sorted batches."""
        self.check_inputs(ids, weights, lengths)
        check_int(batch_size, "batch_size", minimum=1)
        out = torch.full(ids.shape[:2], -1, dtype=torch.long)
        order = torch.argsort(lengths, stable=True)
        for chunk in order.split(batch_size):
            t = int(lengths[chunk].max())
            tags = self(ids[chunk, :t], weights[chunk, :t], lengths[chunk]).argmax
            out[chunk, :t] = tags
        return out


def _dense_checkpoint_to_compact(module: nn.Module, state_dict: dict[str, Any], prefix: str,
                                 *args: Any) -> None:
    """Read checkpoints written before the compact layout: dense ``state_weights (A, C)`` and
    ``transitions (C, C)`` become the observed values (the masks come with the checkpoint)."""
    assert isinstance(module, FeatureCRF)
    for dense_key, values_key, mask_key, own_mask in (
            ("state_weights", "state_values", "state_mask", module.state_mask),
            ("transitions", "transition_values", "transition_mask", module.transition_mask)):
        dense = state_dict.get(prefix + dense_key)
        if dense is None or prefix + values_key in state_dict:
            continue
        mask = state_dict.get(prefix + mask_key, own_mask)
        flat = state_dict.pop(prefix + dense_key).reshape(-1)
        if mask is not None and mask.numel() == flat.numel():
            flat = flat[mask.reshape(-1).nonzero().squeeze(1)]
        state_dict[prefix + values_key] = flat


def _checkpoint_masks(module: nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
    """The weights that exist are the checkpoint's: a saved mask of the module's shape that differs from its own
    (one built before the training data is seen, e.g. the all-false mask of a run applied from its stored files)
    replaces it, and the values are sized to its count before the copy."""
    assert isinstance(module, FeatureCRF)
    for values_key, mask_key in (("state_values", "state_mask"), ("transition_values", "transition_mask")):
        mask, own = state_dict.get(prefix + mask_key), getattr(module, mask_key)
        if (not isinstance(mask, Tensor) or own is None or mask.dtype != torch.bool or mask.shape != own.shape
                or torch.equal(mask.to(own.device), own)):
            continue
        values: nn.Parameter = getattr(module, values_key)
        setattr(module, mask_key, torch.empty_like(own))
        setattr(module, values_key, nn.Parameter(values.new_empty(int(mask.sum())), requires_grad=values.requires_grad))

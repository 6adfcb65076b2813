r"""Noise-conditional energy ``E(x, t)`` with a learned per-level modulation (FiLM).

One network serves ``T`` noise levels ``t = 0, ..., T-1`` (diffusion recovery
likelihood trains one conditional EBM per level; Gao, Song, Poole, Wu & Kingma,
2021, "Learning Energy-Based Models by Diffusion Recovery Likelihood", ICLR).
Every hidden feature map ``h`` is modulated by the level's embedding
(Perez et al., 2018, "FiLM: Visual Reasoning with a General Conditioning Layer"):

.. math::  \mathrm{FiLM}_t(h) = h \odot (1 + \gamma_t) + \beta_t, \qquad
           (\gamma_t, \beta_t) = \text{rows } t \text{ of learned tables},

initialised to ``γ = β = 0`` (every level starts as the same function).

* ``trunk="conv"``, ``x: (B, C, H, W)``: a 3x3 stem and pre-activation residual
  blocks ``u + conv f(GN(conv f(GN(u))))`` (stage ``k > 1`` halves ``H, W``;
  GroupNorm, never BatchNorm, so ``E`` is a per-sample function), FiLM after the
  stem and after every block, global mean pooling and a linear head.
* ``trunk="mlp"``, ``x: (B, D)``: ``Linear -> FiLM -> f`` per hidden layer, then a
  linear head.

Output: ``E(x, t) = w^T pool(h) + c`` of shape ``(B,)``. :meth:`at` gives the
energy of one level as an :class:`~ebms.energy.Energy` (``x -> (B,)``) for samplers.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ebms._checks import check_int, check_tensor
from ebms.energy import Energy
from ebms.nets._activations import Activation, resolve_activation
from ebms.nets.conv import _Block, _positive_ints, receptive_field

__all__ = ["NoiseConditionalEnergy"]


class _AtLevel(Energy):
    """``x -> E(x, t)`` for a fixed level ``t`` (an int, or one level per row ``(B,)``)."""

    def __init__(self, model: NoiseConditionalEnergy, t: int | Tensor) -> None:
        super().__init__()
        self.model = model
        self.t = t

    def forward(self, x: Tensor) -> Tensor:
        return self.model(x, self.t)


class NoiseConditionalEnergy(nn.Module):
    r"""``E(x, t)`` for ``t`` in ``0..T-1``: a shared trunk with per-level FiLM (module docstring).

    Args:
        event_shape: ``(C, H, W)`` for ``trunk="conv"``; ``D`` or ``(D,)`` for ``trunk="mlp"``.
        n_levels: number of levels ``T >= 1``.
        trunk: ``"conv"`` or ``"mlp"``.
        channels: conv stage widths (``trunk="conv"``); stage ``k > 1`` halves ``H, W``.
        groups: GroupNorm groups, a divisor of every entry of ``channels``.
        normalize: ``trunk="conv"``: GroupNorm in the blocks and before the pooling (default). ``False``:
            none (as in Gao et al.'s code). With it, the energy is bounded and blind to the scale of its
            input (the last GroupNorm divides it out), so it cannot learn that an over-dispersed image is
            worse: recovery likelihood's chains then drift outwards (``docs/image-ebms.md``).
        hidden: MLP hidden widths (``trunk="mlp"``).
        activation: an :class:`~ebms.nets._activations.Activation` or its name (smooth ones
            suit Langevin sampling).

    Shapes: ``x: (B, *event_shape)``, ``t``: an int or ``LongTensor (B,)`` → ``(B,)``.
    Cost: one trunk pass; input gradients by autograd.

    Example:
        >>> import torch
        >>> net = NoiseConditionalEnergy((1, 8, 8), 4, channels=(8, 16), groups=4)
        >>> net(torch.randn(3, 1, 8, 8), torch.tensor([0, 1, 3])).shape
        torch.Size([3])
    """

    def __init__(
        self,
        event_shape: int | Sequence[int],
        n_levels: int,
        *,
        trunk: str = "conv",
        channels: Sequence[int] = (32, 64),
        groups: int = 8,
        normalize: bool = True,
        hidden: Sequence[int] = (128, 128),
        activation: str | Activation = "silu",
    ) -> None:
        super().__init__()
        self.n_levels = check_int(n_levels, "n_levels", minimum=1)
        if not isinstance(normalize, bool):
            raise TypeError(f"normalize: expected True or False; got {normalize!r}")
        if trunk not in ("conv", "mlp"):
            raise ValueError(f"trunk: expected 'conv' or 'mlp'; got {trunk!r}")
        self.trunk = trunk
        shape = (event_shape,) if isinstance(event_shape, int) else event_shape
        try:
            self.event_shape = _positive_ints(shape, "event_shape")
        except ValueError:
            raise ValueError(f"event_shape: expected positive ints (an int or a tuple); got {event_shape!r}") from None
        self.activation = resolve_activation(activation)
        widths: tuple[int, ...]
        if trunk == "conv":
            if len(self.event_shape) != 3:
                raise ValueError(f"event_shape: expected (C, H, W) for trunk='conv'; got {event_shape!r}")
            widths = _positive_ints(channels, "channels")
            self.channels = widths
            check_int(groups, "groups", minimum=1)
            if any(c % groups for c in widths):
                raise ValueError(f"groups: expected a divisor of every entry of channels {widths}; got {groups}")
            self.stem: nn.Module = nn.Conv2d(self.event_shape[0], widths[0], 3, padding=1)
            blocks, c_prev = [], widths[0]
            for k, c in enumerate(widths):
                blocks.append(_Block(c_prev, c, 1 if k == 0 else 2, groups, self.activation, normalize=normalize))
                c_prev = c
            self.layers = nn.ModuleList(blocks)
            self.norm: nn.Module = nn.GroupNorm(groups, c_prev) if normalize else nn.Identity()
            film_widths = (widths[0], *widths)
        else:
            if len(self.event_shape) != 1:
                raise ValueError(f"event_shape: expected D or (D,) for trunk='mlp'; got {event_shape!r}")
            widths = _positive_ints(hidden, "hidden")
            dims = (self.event_shape[0], *widths)
            self.stem = nn.Identity()
            self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
            self.norm = nn.Identity()
            film_widths = widths
        self.film_widths = film_widths
        self.film = nn.Embedding(self.n_levels, 2 * sum(film_widths))
        nn.init.zeros_(self.film.weight)
        self.head = nn.Linear(widths[-1], 1)

    def _levels(self, t: int | Tensor, batch: int, device: torch.device) -> Tensor:
        if isinstance(t, bool) or not isinstance(t, (int, Tensor)):
            raise TypeError(f"t: expected an int or a LongTensor ({batch},); got {type(t).__name__}")
        if isinstance(t, int):
            t = torch.full((batch,), t, dtype=torch.long, device=device)
        elif t.dtype != torch.long or tuple(t.shape) != (batch,):
            raise ValueError(f"t: expected a LongTensor of shape ({batch},); got {t.dtype} {tuple(t.shape)}")
        lo, hi = torch.stack([t.min(), t.max()]).tolist() if batch else (0, 0)
        if lo < 0 or hi >= self.n_levels:
            raise ValueError(f"t: expected levels in [0, {self.n_levels - 1}]; got min {lo}, max {hi}")
        return t.to(device)

    def forward(self, x: Tensor, t: int | Tensor) -> Tensor:
        """Energies ``(B,)`` of ``x: (B, *event_shape)`` at levels ``t`` (an int or ``LongTensor (B,)``)."""
        check_tensor(x, "x", floating=True)
        if x.dim() != 1 + len(self.event_shape) or tuple(x.shape[1:]) != self.event_shape:
            raise ValueError(f"x: expected shape (B, {', '.join(map(str, self.event_shape))}); got {tuple(x.shape)}")
        levels = self._levels(t, x.shape[0], x.device)
        mods = self.film(levels).split([w for w in self.film_widths for _ in range(2)], dim=-1)
        view = (lambda m: m[:, :, None, None]) if self.trunk == "conv" else (lambda m: m)
        f = self.activation.fn

        def modulate(h: Tensor, i: int) -> Tensor:
            return h * (1.0 + view(mods[2 * i])) + view(mods[2 * i + 1])

        if self.trunk == "conv":
            h = modulate(self.stem(x), 0)
            for i, block in enumerate(self.layers, start=1):
                h = modulate(block(h), i)
            pooled = f(self.norm(h)).mean(dim=(2, 3))
        else:
            h = x
            for i, layer in enumerate(self.layers):
                h = f(modulate(layer(h), i))
            pooled = h
        return self.head(pooled).squeeze(-1)

    @property
    def receptive_field(self) -> int | None:
        """``trunk="conv"``: side of the input window one pooled location sees
        (:func:`~ebms.nets.conv.receptive_field`); ``"mlp"``: ``None`` (every unit sees the whole input)."""
        if self.trunk != "conv":
            return None
        return receptive_field(self.channels)

    def at(self, t: int | Tensor) -> Energy:
        """The energy ``x -> E(x, t)`` of level ``t`` (an int, or ``LongTensor (B,)`` for a batch of ``B``)."""
        return _AtLevel(self, t)

    def extra_repr(self) -> str:
        return f"event_shape={self.event_shape}, n_levels={self.n_levels}, trunk={self.trunk!r}"

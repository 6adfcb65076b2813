"""Any ``torch.distributions.Distribution`` as a member of the protocol.

The wrapped law's whole shape, ``batch_shape + event_shape``, becomes the event: ``log_prob``
sums over all of it and returns ``(B,)`` for ``x: (B, *batch_shape, *event_shape)`` (any other
shape is refused, never broadcast). ``rsample``/``entropy`` are present exactly when torch's law has
them (``has_rsample``, and an ``entropy`` that does not raise).

Randomness: torch's ``sample`` reads the global RNG, so with a ``generator`` the wrapper draws one
seed from it and samples under :func:`torch.random.fork_rng` seeded with that seed: the same
generator state gives the same draws, the generator advances, and the global RNG state is left as
it was. ``generator=None`` samples from the global RNG directly.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ebms._checks import check_int
from ebms.capabilities import NormalisedModel
from ebms.distributions._base import Distribution, check_event
from ebms.spaces import Binary, Reals, Space

__all__ = ["TorchDistribution", "as_distribution"]

D = torch.distributions


def _space(dist: D.Distribution, shape: tuple[int, ...]) -> Space | None:
    support = dist.support
    while isinstance(support, D.constraints.independent):
        support = support.base_constraint
    if support is D.constraints.real:
        return Reals(shape)
    if support is D.constraints.boolean and shape:
        return Binary(shape)
    return None


def _entropy_defined(dist: D.Distribution) -> bool:
    try:
        dist.entropy()
    except NotImplementedError:  # torch's way of saying a law has no closed-form entropy (not a stub here)
        return False
    return True


class TorchDistribution(Distribution):
    """A ``torch.distributions.Distribution`` behind the ebms protocol (see the module docstring).

    ``TorchDistribution(dist)`` returns an instance of the variant whose ``has_rsample`` and
    ``has_entropy`` match ``dist``. The parameters stay torch's (not buffers: ``.to()`` does not
    move them; build the torch law on the device you need).

    Args:
        dist: the law; ``log_prob`` of a ``(B, *dist.batch_shape, *dist.event_shape)`` tensor is
            summed over everything after ``B``.

    Example:
        >>> import torch
        >>> q = TorchDistribution(torch.distributions.Normal(torch.zeros(3), 1.0))
        >>> q.sample(5, generator=torch.Generator().manual_seed(0)).shape, q.has_rsample
        (torch.Size([5, 3]), True)
    """

    def __new__(cls, dist: D.Distribution | None = None) -> TorchDistribution:
        target = cls
        if cls is TorchDistribution and isinstance(dist, D.Distribution):
            target = _VARIANTS[(bool(dist.has_rsample), _entropy_defined(dist))]
        return super().__new__(target)  # copy/pickle call this with no argument: the class is kept

    def __init__(self, dist: D.Distribution) -> None:
        super().__init__()
        if not isinstance(dist, D.Distribution):
            raise TypeError(f"dist: expected a torch.distributions.Distribution; got {type(dist).__name__}")
        self.event_shape = tuple(dist.batch_shape) + tuple(dist.event_shape)
        batch_dims = len(dist.batch_shape)
        self.dist = D.Independent(dist, batch_dims) if batch_dims else dist
        self.space = _space(dist, self.event_shape)

    def _draw(self, fn: Any, n: int, generator: torch.Generator | None) -> Tensor:
        check_int(n, "n", minimum=1)
        if generator is None:
            return fn((n,))
        seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device))
        devices = []
        if torch.cuda.is_available():
            where = fn(torch.Size([0])).device  # where the law lives, without drawing
            devices = [where] if where.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.random.default_generator.manual_seed(seed)
            if devices:
                torch.cuda.manual_seed(seed)
            return fn((n,))

    def sample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """``n`` draws ``(n, *event)``."""
        return self._draw(self.dist.sample, n, generator)

    def log_prob(self, x: Tensor) -> Tensor:
        """``log q(x)`` summed over the event, ``(B,)``."""
        check_event(x, self.event_shape, floating=False)
        return self.dist.log_prob(x)

    def extra_repr(self) -> str:
        return f"{self.dist!r}"


class _WithRSample(TorchDistribution):
    has_rsample = True

    def rsample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """``n`` reparameterised draws ``(n, *event)``."""
        return self._draw(self.dist.rsample, n, generator)


class _WithEntropy(TorchDistribution):
    has_entropy = True

    def entropy(self) -> Tensor:
        """Entropy of the whole event, a 0-d tensor."""
        return self.dist.entropy()


class _WithBoth(_WithRSample, _WithEntropy):
    pass


_VARIANTS: dict[tuple[bool, bool], type[TorchDistribution]] = {
    (False, False): TorchDistribution, (True, False): _WithRSample,
    (False, True): _WithEntropy, (True, True): _WithBoth,
}


def as_distribution(obj: Any, name: str) -> Any:
    """``obj`` if it follows the protocol, a :class:`TorchDistribution` if it is a torch law, else a ``TypeError``.

    What the consumers (NCE, importance sampling, AIS paths) call on the model they are given.
    """
    if isinstance(obj, D.Distribution):
        return TorchDistribution(obj)
    if not isinstance(obj, NormalisedModel):
        raise TypeError(f"{name}: expected a normalised model with sample(n, *, generator) and log_prob(x) -> (B,) "
                        f"(an ebms.distributions member, or a torch.distributions.Distribution); "
                        f"got {type(obj).__name__}")
    return obj

"""Sample spaces: what ``x`` is.

Continuous: :class:`Reals`, :class:`Box`. Discrete (:class:`DiscreteSpace`, fixed shape):
:class:`Binary` ``{0,1}``, :class:`Spins` ``{-1,+1}``, :class:`Categorical` (one-hot, with an
index view) and :class:`CategoricalIndices` (the same states as integer indices). Variable
length: :class:`TokenSequences`, token sequences over a vocabulary in index form, whose points
are :class:`~ebms.sequences.Sequences` batches.

A space validates incoming data, draws random initial states and, for tensor spaces, projects a
proposal back into the space (``project``; e.g. clamping to a box). Samplers take an optional
``space`` and call ``space.project`` after each move. Tiny discrete spaces enumerate every
state for exact tests, up to :data:`MAX_EXACT_STATES` for token sequences.

Shapes: ``event_shape`` is the shape of one point; batches are ``(B, *event_shape)``. Token
sequences are ``tokens (B, T)`` with ``lengths (B,)``.
"""

from ebms.spaces._base import MAX_EXACT_STATES, Box, Reals, Space
from ebms.spaces._discrete import Binary, Categorical, CategoricalIndices, DiscreteSpace, Spins
from ebms.spaces._tokens import TokenSequences

__all__ = [
    "MAX_EXACT_STATES",
    "Binary",
    "Box",
    "Categorical",
    "CategoricalIndices",
    "DiscreteSpace",
    "Reals",
    "Space",
    "Spins",
    "TokenSequences",
]

"""Structured conditional models: semiring dynamic programs and linear-chain CRFs."""

from ebms.structured.linear_chain import LinearChainCRF, bio_allowed_transitions, linear_chain_forward
from ebms.structured.semiring import KMaxSemiring, LogSemiring, MaxSemiring, Semiring

__all__ = [
    "KMaxSemiring",
    "LinearChainCRF",
    "LogSemiring",
    "MaxSemiring",
    "Semiring",
    "bio_allowed_transitions",
    "linear_chain_forward",
]

"""A duck-typed residual text model with a known energy, shared by the residual estimator and sampler tests.

``energy``, ``base_log_prob`` (the horizon law), ``sample_base`` (n draws per prefix row, rows
``b n .. b n + n - 1``), ``horizon`` and ``base``: what :mod:`ebms.estimators.residual_log_z` and
:mod:`ebms.samplers.joint_resampling` ask of a model, without ``ebms.models.ResidualLM``, so those
tests check the estimators alone. The base is a small LSTM with weights tripled (a peaked law, far
from uniform); the energy adds per-token terms, a length term, a repetition term and a term pairing
the prefix's last token with the continuation's first.
"""

from __future__ import annotations

import torch

from ebms.models.lm import LSTMLM
from ebms.sequences import Sequences

V = 4


class ResidualStandIn(torch.nn.Module):
    """Duck-typed residual model over tokens ``1 .. V-1`` (see the module docstring)."""

    def __init__(self, horizon: int | None = 3, scale: float = 1.0, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.base = LSTMLM(V, embedding_dim=3, hidden_size=3, num_layers=1).eval()
        with torch.no_grad():
            for p in self.base.parameters():
                p.mul_(3.0)  # a peaked, far from uniform base law
        g = torch.Generator().manual_seed(seed + 1)
        self.unary = scale * torch.randn(V, generator=g)
        self.pair = scale * torch.randn(V, V, generator=g)
        self.rho, self.beta = 0.8 * scale, -0.3 * scale
        self.horizon = horizon

    def energy(self, prefix: Sequences, x: Sequences) -> torch.Tensor:
        mask = x.mask()
        tok = x.tokens.masked_fill(~mask, 0)
        e = (self.unary[tok] * mask).sum(-1) + self.beta * x.lengths
        e = e + self.rho * ((tok[:, 1:] == tok[:, :-1]) & mask[:, 1:]).sum(-1)
        last = torch.zeros_like(prefix.lengths)
        if prefix.max_length:
            last = prefix.tokens.gather(1, (prefix.lengths - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
            last = last * (prefix.lengths > 0)
        first = tok[:, 0] if x.max_length else torch.zeros_like(last)
        return e + self.pair[last, first]

    def base_log_prob(self, prefix: Sequences, x: Sequences) -> torch.Tensor:
        per = self.base.continuation_token_log_probs(prefix, x)
        if self.horizon is not None:  # a draw cut at the horizon has no </s> term
            cut = (x.lengths == self.horizon).unsqueeze(1) & (torch.arange(per.shape[1]) == x.lengths.unsqueeze(1))
            per = per.masked_fill(cut, 0.0)
        return per.sum(-1)

    def sample_base(self, prefix: Sequences, n: int, *, generator: torch.Generator | None,
                    top_k: int | None = None, top_p: float | None = None, temperature: float = 1.0) -> Sequences:
        c = Sequences(prefix.tokens.repeat_interleave(n, 0), prefix.lengths.repeat_interleave(n))
        return self.base.sample(c.batch_size, generator, prefix=c, max_length=self.horizon,
                                truncate=self.horizon is not None, top_k=top_k, top_p=top_p,
                                temperature=temperature)

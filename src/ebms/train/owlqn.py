"""L-BFGS, and OWL-QN for an L1 penalty, one quasi-Newton iteration per ``step(closure)``.

Minimises ``F(w) = f(w) + l1 * ||w||_1`` where ``f`` is smooth and computed (with its gradient) by
the closure. With ``l1 = 0`` this is L-BFGS (Nocedal, 1980, "Updating quasi-Newton matrices with
limited storage"; Liu & Nocedal, 1989) with a backtracking Armijo line search. With ``l1 > 0`` it
is OWL-QN (Andrew & Gao, 2007, "Scalable training of L1-regularized log-linear models"):

* pseudo-gradient ``v_i = g_i + l1 sign(w_i)`` for ``w_i != 0``; at ``w_i = 0`` it is
  ``g_i + l1`` if that is negative, ``g_i - l1`` if that is positive, else 0;
* direction ``d = -H v`` by the two-loop recursion over the last ``history`` pairs
  ``s = w_{k+1} - w_k``, ``y = grad f(w_{k+1}) - grad f(w_k)`` (smooth part only), then
  ``d_i = 0`` wherever ``d_i v_i >= 0`` (keep only descent coordinates);
* orthant ``xi_i = sign(w_i)`` (``sign(-v_i)`` where ``w_i = 0``); trial points
  ``w(t) = P_xi(w + t d)`` zero every coordinate that would leave the orthant;
* Armijo backtracking: accept ``t`` (from 1, or ``1 / ||d||`` at the first iteration; halved on
  failure) once ``F(w(t)) <= F(w) + ftol * v . (w(t) - w)``.

Parameters may be several tensors of any shapes (handled as one flat vector). Cost per iteration:
one closure call per line-search trial (usually one) and ``O(history * n)`` vector work; memory
``2 * history * n`` floats for the pairs.

Example:
    >>> w = torch.zeros(3, requires_grad=True)
    >>> opt = OWLQN([w], l1=0.5)
    >>> def closure():
    ...     opt.zero_grad()
    ...     loss = 0.5 * ((w - torch.tensor([2.0, 0.2, -1.0])) ** 2).sum()
    ...     loss.backward()
    ...     return loss
    >>> for _ in range(20):
    ...     _ = opt.step(closure)
    >>> torch.allclose(w, torch.tensor([1.5, 0.0, -0.5]), atol=1e-6)
    True
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor

from ebms._checks import check_int, check_positive

__all__ = ["OWLQN"]


class OWLQN(torch.optim.Optimizer):
    """Limited-memory quasi-Newton optimiser with optional L1 penalty (see the module docstring).

    Args:
        params: tensors (or parameter groups; one group only) to optimise.
        l1: L1 coefficient ``c1 >= 0`` applied to every parameter (``0``: plain L-BFGS).
        lr: scale of the first trial step of each line search (``1``: the quasi-Newton step; the
            trainer's schedule and divergence guard lower it).
        history: number ``m`` of correction pairs kept.
        max_linesearch: line-search trials before giving up (the iterate is then left unchanged
            and ``info["linesearch_failed"]`` is set).
        ftol: Armijo sufficient-decrease constant in ``(0, 1)``.
        backtrack: step shrink factor in ``(0, 1)``.

    After each :meth:`step`, :attr:`info` holds ``loss`` (``F`` at the new point, L1 included),
    ``start_loss`` (``F`` before the step), ``smooth_loss``, ``step`` (accepted ``t``), ``evaluations`` (closure calls this step),
    ``grad_norm`` (pseudo-gradient norm), ``param_norm`` and ``linesearch_failed``.
    """

    #: :class:`~ebms.train.Trainer` passes ``step`` a closure over the batch (one step = one iteration).
    needs_closure = True

    def __init__(self, params: Iterable[Tensor] | Iterable[dict[str, Any]], *, l1: float = 0.0,
                 lr: float = 1.0, history: int = 6, max_linesearch: int = 20, ftol: float = 1e-4,
                 backtrack: float = 0.5) -> None:
        l1 = check_positive(l1, "l1", allow_zero=True)
        lr = check_positive(lr, "lr")
        check_int(history, "history", minimum=1)
        check_int(max_linesearch, "max_linesearch", minimum=1)
        for name, v in (("ftol", ftol), ("backtrack", backtrack)):
            if not 0.0 < float(v) < 1.0:
                raise ValueError(f"{name}: expected a number in (0, 1); got {v!r}")
        defaults = dict(l1=l1, lr=lr, history=history, max_linesearch=max_linesearch, ftol=ftol,
                        backtrack=backtrack)
        super().__init__(params, defaults)
        if len(self.param_groups) != 1:
            raise ValueError(f"params: expected one parameter group; got {len(self.param_groups)}")
        self._params: list[Tensor] = self.param_groups[0]["params"]
        self.info: dict[str, Any] = {}

    # -- flat views -------------------------------------------------------------------------
    def _flat_params(self) -> Tensor:
        return torch.cat([p.detach().reshape(-1) for p in self._params])

    def _flat_grad(self) -> Tensor:
        return torch.cat([(torch.zeros_like(p) if p.grad is None else p.grad).reshape(-1)
                          for p in self._params])

    def _set_params(self, x: Tensor) -> None:
        i = 0
        with torch.no_grad():
            for p in self._params:
                n = p.numel()
                p.copy_(x[i : i + n].view_as(p))
                i += n

    def _evaluate(self, closure: Callable[[], Tensor], *, trial: bool = False) -> tuple[float, Tensor]:
        """Loss and flat gradient. A non-finite value at the start point is an error; at a
        line-search trial (``trial=True``) it is returned as ``inf`` so that the step is shortened."""
        with torch.enable_grad():
            loss = closure()
        if not isinstance(loss, Tensor) or loss.numel() != 1:
            raise ValueError(f"closure: expected a scalar loss tensor; got {loss!r}")
        f = float(loss)
        g = self._flat_grad()
        if not (math.isfinite(f) and bool(torch.isfinite(g.sum()))):
            if trial:
                return math.inf, g
            raise ValueError(f"closure: expected a finite loss and gradient; got loss {f}")
        return f, g

    @staticmethod
    def _pseudo_gradient(x: Tensor, g: Tensor, l1: float) -> Tensor:
        if l1 == 0.0:
            return g
        pg = torch.where(x > 0, g + l1, torch.where(x < 0, g - l1, torch.zeros_like(g)))
        at0 = x == 0
        pg = torch.where(at0 & (g + l1 < 0), g + l1, pg)
        return torch.where(at0 & (g - l1 > 0), g - l1, pg)

    def _direction(self, v: Tensor, state: dict[str, Any]) -> Tensor:
        """``-H v`` by the two-loop recursion (``H_0 = (s.y / y.y) I`` from the newest pair)."""
        q = v.clone()
        ss, ys, rhos = state["s"], state["y"], state["rho"]
        alphas = []
        for s, y, rho in zip(reversed(ss), reversed(ys), reversed(rhos)):
            a = rho * float(s @ q)
            q.add_(y, alpha=-a)
            alphas.append(a)
        if ss:
            q.mul_(float(ss[-1] @ ys[-1]) / float(ys[-1] @ ys[-1]))
        for s, y, rho, a in zip(ss, ys, rhos, reversed(alphas)):
            b = rho * float(y @ q)
            q.add_(s, alpha=a - b)
        return q.neg_()

    @torch.no_grad()
    def step(self, closure: Callable[[], Tensor]) -> Tensor:  # type: ignore[override]
        """One iteration: direction, line search, history update. Returns ``F`` at the new point.

        ``closure()`` must zero the gradients, compute the smooth loss ``f``, call
        ``backward()`` and return ``f``.
        """
        if closure is None:
            raise ValueError("closure: expected a callable computing the loss and its gradient")
        group = self.param_groups[0]
        l1, m = group["l1"], group["history"]
        state = self.state[self._params[0]]
        x = self._flat_params()
        evals = 0
        if "g" not in state or not torch.equal(state["x"], x):
            f, g = self._evaluate(closure)
            evals += 1
            state.update(f=f, g=g, x=x, s=[], y=[], rho=[], k=0)
        f, g = state["f"], state["g"]
        big_f = f + l1 * float(x.abs().sum())
        v = self._pseudo_gradient(x, g, l1)
        d = self._direction(v, state)
        if l1:
            d = torch.where(d * v >= 0, torch.zeros_like(d), d)
        dv = float(d @ v)
        if not dv < 0:  # not a descent direction: restart from steepest descent
            state.update(s=[], y=[], rho=[])
            d = -v
            dv = float(d @ v)
        dnorm = float(d.norm())
        info = dict(loss=big_f, start_loss=big_f, smooth_loss=f, step=0.0, evaluations=evals,
                    grad_norm=float(v.norm()), param_norm=float(x.norm()), linesearch_failed=False)
        if dnorm == 0.0:  # stationary
            self.info = info
            return torch.tensor(big_f, dtype=torch.float64)
        t = group["lr"] * (1.0 / dnorm if state["k"] == 0 and not state["s"] else 1.0)
        orthant = torch.where(x != 0, x.sign(), -v.sign())
        for _ in range(group["max_linesearch"]):
            xn = x + t * d
            if l1:
                xn = torch.where(xn * orthant <= 0, torch.zeros_like(xn), xn)
            self._set_params(xn)
            fn, gn = self._evaluate(closure, trial=True)
            evals += 1
            big_fn = fn + l1 * float(xn.abs().sum())
            if big_fn <= big_f + group["ftol"] * float(v @ (xn - x)):
                break
            t *= group["backtrack"]
        else:
            self._set_params(x)
            info.update(evaluations=evals, linesearch_failed=True)
            self.info = info
            return torch.tensor(big_f, dtype=torch.float64)
        s, y = xn - x, gn - g
        ys = float(y @ s)
        if ys > 1e-10 * float(y @ y):
            state["s"].append(s)
            state["y"].append(y)
            state["rho"].append(1.0 / ys)
            if len(state["s"]) > m:
                for key in ("s", "y", "rho"):
                    state[key].pop(0)
        state.update(f=fn, g=gn, x=xn, k=state["k"] + 1)
        vn = self._pseudo_gradient(xn, gn, l1)
        self.info = dict(loss=big_fn, start_loss=big_f, smooth_loss=fn, step=t, evaluations=evals,
                         grad_norm=float(vn.norm()), param_norm=float(xn.norm()),
                         linesearch_failed=False)
        return torch.tensor(big_fn, dtype=torch.float64)

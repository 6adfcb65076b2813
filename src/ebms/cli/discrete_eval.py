"""Evaluation and samples for runs on binary data: test log-likelihood with an honest log Z.

log Z is exact when the model allows it (an RBM's smaller layer, or enumeration of at most
2^25 states). Otherwise, or when ``ebms eval --ais`` asks for it beside the exact value, it is
estimated by annealed importance sampling — the RBM's own base-rate path (Salakhutdinov &
Murray, 2008) or a geometric path from the data's independent-pixel marginals with the
configured discrete kernel — and, with ``eval.reverse_ais``, reverse AIS from long model chains
started at the test data gives a bracket.

``eval.ais_temperatures = 14500`` is the published MNIST schedule (``salakhutdinov_betas``);
other counts use a sigmoid schedule of that many steps.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ebms.cli.config import Config
from ebms.cli.discrete_data import BinaryImages
from ebms.estimators import Estimate
from ebms.estimators.ais import GeometricPath, ais, ais_bracket, salakhutdinov_betas, sigmoid_betas
from ebms.estimators.exact import exact_log_partition
from ebms.estimators.importance import BernoulliBase
from ebms.estimators.likelihood import LogLikelihoodReport, log_likelihood_report

__all__ = ["DiscreteEvalReport", "evaluate_discrete", "exact_log_z", "sample_discrete"]

MAX_EXACT_STATES = 1 << 25


@dataclass(frozen=True)
class DiscreteEvalReport:
    """Test log-likelihood (nats per example) from an exact and/or AIS log Z."""

    step: int
    n_test: int
    dim: int
    test_ll: float | None
    test_ll_stderr: float | None
    log_z: float | None
    log_z_method: str
    exact_log_z: float | None = None
    ais_log_z: float | None = None
    ais_log_z_stderr: float | None = None
    ais_lower: float | None = None
    ais_upper: float | None = None
    ais_test_ll: float | None = None
    ais_test_ll_stderr: float | None = None
    ll_lower: float | None = None
    ll_upper: float | None = None
    settings: dict[str, Any] = field(default_factory=dict)

    def lines(self) -> list[str]:
        if self.test_ll is None:
            return [f"no exact log Z at step {self.step} ({self.dim} binary units, too many states to sum); "
                    "estimate the test log-likelihood with `ebms eval --run DIR --ais`"]
        out = [f"test log-likelihood, step {self.step}: {self.test_ll:.2f} ± {self.test_ll_stderr:.2f} nats "
               f"[n={self.n_test}, log Z {self.log_z_method}: {self.log_z:.4f}]"]
        if self.ais_log_z is not None:
            out.append(f"AIS log Z: {self.ais_log_z:.4f} ± {self.ais_log_z_stderr:.4f}"
                       + (f" (exact {self.exact_log_z:.4f}, error {self.ais_log_z - self.exact_log_z:+.4f})"
                          if self.exact_log_z is not None else ""))
            if self.ais_test_ll is not None and self.exact_log_z is not None:
                out.append(f"test log-likelihood with AIS log Z: {self.ais_test_ll:.2f} ± {self.ais_test_ll_stderr:.2f} nats")
        if self.ais_lower is not None and self.ais_upper is not None:
            a = self.settings.get("ais_settings", {})
            if "reverse" in a:
                noise = (a["forward_stderr"] ** 2 + a["reverse_stderr"] ** 2) ** 0.5
                note = ""
                if a["gap"] < -2 * noise:
                    note = (" - reverse below forward by more than 2 standard errors: the chains that start reverse "
                            "AIS are not model samples yet (raise eval.sample_steps); the upper end is not a bound")
                elif a["crossed"]:
                    note = ", crossed within noise"
                out.append(f"reverse AIS log Z: {a['reverse']:.4f} ± {a['reverse_stderr']:.4f}"
                           f" (reverse - forward = {a['gap']:+.4f}{note})")
            out.append(f"AIS/reverse-AIS log Z bracket (each end widened by {a.get('z', 2.0):g} stderr): "
                       f"[{self.ais_lower:.4f}, {self.ais_upper:.4f}]"
                       f" -> test log-likelihood in [{self.ll_lower:.2f}, {self.ll_upper:.2f}]")
        return out


def exact_log_z(model: nn.Module, data: BinaryImages) -> Estimate | None:
    """Exact log Z when feasible: the model's own ``log_partition`` or enumeration; else ``None``."""
    fn = getattr(model, "log_partition", None)
    if fn is not None:
        try:
            value = float(fn())
        except ValueError:
            return None
        return Estimate(value, exact=True, settings={"method": "exact"})
    if data.space.num_states > MAX_EXACT_STATES:
        return None
    return exact_log_partition(model, data.space)


def _betas(n: int) -> torch.Tensor:
    if n == 14500:
        return salakhutdinov_betas()
    return sigmoid_betas(n)


def _ais_path(model: nn.Module, data: BinaryImages, cfg: Config) -> Any:
    path_fn = getattr(model, "ais_path", None)
    if path_fn is not None:
        from ebms.models.rbm import marginal_logits

        return path_fn(marginal_logits(data.train))
    from ebms.cli.build import build_sampler

    kernel = build_sampler(cfg, data.space)
    return GeometricPath(model, BernoulliBase.from_data(data.train), kernel)


def sample_discrete(cfg: Config, model: nn.Module, data: BinaryImages, *, n: int | None = None,
                    steps: int | None = None, seed: int | None = None, start: torch.Tensor | None = None) -> torch.Tensor:
    """Chains of the configured discrete sampler from uniform random images (or ``start``)."""
    from ebms.cli.build import build_sampler

    n = cfg.eval.n_samples if n is None else n
    steps = cfg.eval.sample_steps if steps is None else steps
    g = torch.Generator().manual_seed(cfg.run.seed + 7 if seed is None else seed)
    x0 = data.space.random(n, generator=g) if start is None else start
    return build_sampler(cfg, data.space).sample(model, x0, steps, generator=g, progress=cfg.run.progress)


def evaluate_discrete(cfg: Config, model: nn.Module, data: BinaryImages, step: int, *, use_ais: bool = False) -> DiscreteEvalReport:
    """Test log-likelihood with exact log Z when feasible and AIS when asked for (or needed)."""
    x_test = data.test[: cfg.data.n_test]
    exact = exact_log_z(model, data)
    if exact is None and not use_ais:
        return DiscreteEvalReport(step=step, n_test=x_test.shape[0], dim=data.dim, test_ll=None,
                                  test_ll_stderr=None, log_z=None, log_z_method="none")
    est: Estimate | None = None
    settings: dict[str, Any] = {"n_test": x_test.shape[0]}
    if use_ais:
        t0 = time.perf_counter()
        g = torch.Generator().manual_seed(cfg.run.seed + 11)
        path, betas = _ais_path(model, data, cfg), _betas(cfg.eval.ais_temperatures)
        with torch.no_grad():
            if cfg.eval.reverse_ais:
                n_rev = min(cfg.eval.ais_chains, x_test.shape[0])
                x_model = sample_discrete(cfg, model, data, n=n_rev, start=x_test[:n_rev], seed=cfg.run.seed + 13)
                est = ais_bracket(path, cfg.eval.ais_chains, betas, x_model, generator=g, progress=cfg.run.progress)
            else:
                est = ais(path, cfg.eval.ais_chains, betas, generator=g, progress=cfg.run.progress).estimate
        settings.update(ais_chains=cfg.eval.ais_chains, ais_temperatures=len(betas) - 1,
                        ais_seconds=round(time.perf_counter() - t0, 2), ais_settings=_jsonable(est.settings))
    primary = exact if exact is not None else est
    assert primary is not None
    rep: LogLikelihoodReport = log_likelihood_report(model, x_test, primary)
    ais_rep = log_likelihood_report(model, x_test, est) if est is not None else None
    return DiscreteEvalReport(
        step=step, n_test=x_test.shape[0], dim=data.dim, test_ll=rep.estimate, test_ll_stderr=rep.stderr,
        log_z=primary.estimate, log_z_method="exact" if exact is not None else "AIS",
        exact_log_z=None if exact is None else exact.estimate,
        ais_log_z=None if est is None else est.estimate, ais_log_z_stderr=None if est is None else est.stderr,
        ais_lower=None if est is None else est.lower, ais_upper=None if est is None else est.upper,
        ais_test_ll=None if ais_rep is None else ais_rep.estimate,
        ais_test_ll_stderr=None if ais_rep is None else ais_rep.stderr,
        ll_lower=None if ais_rep is None else ais_rep.lower, ll_upper=None if ais_rep is None else ais_rep.upper,
        settings=settings,
    )


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if isinstance(v, (int, float, str, bool, type(None)))}

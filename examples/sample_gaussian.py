"""Sample a correlated 2-D Gaussian with ULA, MALA and HMC and compare with the exact moments.

Run:  python examples/sample_gaussian.py [--chains 500] [--seed 0]   (a few seconds on a laptop CPU)

For each kernel it prints the acceptance rate, the estimated mean and covariance with their
ESS-based standard errors, and the exact values. ULA is biased: at a large step its variances
come out inflated by about eps/4 (its stationary covariance is (P (I - eps P / 4))^-1).
"""

from __future__ import annotations

import argparse

import torch

from ebms.estimators import effective_sample_size, split_rhat
from ebms.nets import GaussianEnergy
from ebms.samplers import HMC, MALA, ULA, warmup


def moments(samples: torch.Tensor, mean: torch.Tensor) -> torch.Tensor:
    """Per-draw quantities whose averages are the mean and covariance entries: (S, C, 5)."""
    d = samples - mean
    return torch.stack([samples[..., 0], samples[..., 1], d[..., 0] ** 2, d[..., 1] ** 2, d[..., 0] * d[..., 1]], -1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chains", type=int, default=500, help="independent chains per kernel (default 500)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.chains < 2:
        parser.error(f"--chains: expected an int >= 2 (split R-hat needs chains); got {args.chains}")
    torch.set_num_threads(1)  # tiny batched kernels are fastest on one thread
    mean = torch.tensor([1.0, -1.0])
    cov = torch.tensor([[1.0, 0.6], [0.6, 1.0]])
    energy = GaussianEnergy(2, mean=mean, precision=torch.linalg.inv(cov), learnable=False)
    exact = torch.tensor([1.0, -1.0, 1.0, 1.0, 0.6])
    names = ["mean[0]", "mean[1]", "cov[0,0]", "cov[1,1]", "cov[0,1]"]

    g = torch.Generator().manual_seed(args.seed)
    x0 = 4 * (2 * torch.rand(args.chains, 2, generator=g) - 1)  # broad start, uniform on [-4, 4]^2

    runs = {}
    ula = ULA(step_size=0.2)
    runs["ULA eps=0.2 (biased)"] = ula.run(energy, x0, 1500, burn_in=300, generator=g)
    mala = MALA()
    runs["MALA (tuned)"] = mala.run(energy, warmup(mala, energy, x0, 300, generator=g), 1000, generator=g)
    hmc = HMC(n_leapfrog=5)
    runs["HMC L=5 (tuned)"] = hmc.run(energy, warmup(hmc, energy, x0, 200, generator=g), 400, generator=g)

    for label, run in runs.items():
        q = moments(run.samples, mean).double()
        ess = effective_sample_size(q)
        est = q.mean((0, 1))
        se = (q.reshape(-1, 5).var(0) / ess).sqrt()
        print(f"\n{label}: acceptance {float(run.acceptance.mean()):.3f}, "
              f"step {float(run.state.step_size):.3f}, max split R-hat {float(split_rhat(q).max()):.3f}")
        print(f"  {'':9s} {'estimate':>9s} {'± se':>8s} {'exact':>7s} {'z':>6s} {'ESS':>8s}")
        for i, name in enumerate(names):
            z = (est[i] - exact[i]) / se[i]
            print(f"  {name:9s} {float(est[i]):9.4f} {float(se[i]):8.4f} {float(exact[i]):7.3f} "
                  f"{float(z):6.2f} {float(ess[i]):8.0f}")
        if label.startswith("ULA"):
            P, eps = energy.precision, float(run.state.step_size)
            law = torch.linalg.inv(P @ (torch.eye(2) - 0.25 * eps * P))
            print(f"  ULA's own stationary covariance at this step: {[round(v, 4) for v in law.flatten().tolist()]}")


if __name__ == "__main__":
    main()

"""An RBM on binarised 8x8 digits: exact and AIS test log-likelihood side by side, filters and samples.

Run:  python examples/rbm_digits.py [--out OUT] [--hidden 16] [--epochs 30] [--temperatures 14500] [--record]
      (about ten seconds on one CPU core; writes OUT/rbm_digits_filters.png and
      OUT/rbm_digits_samples.png, default runs/examples, which git ignores; ``--out docs/img``
      regenerates the figures in docs/discrete.md; ``--record``, in a source checkout, also writes
      what it printed as the committed record ``benchmarks/records/rbm_digits_example.json``, the
      evidence for the figures docs/discrete.md quotes)

* Data: scikit-learn's 1,797 digits, thresholded at 8/16 (``ebms.data.digits.binarized_digits``),
  split 80/20 by a seeded permutation.
* Model: ``RBMEstimator`` (CD-1, scikit-learn-style), 16 hidden units, so the exact log Z is a sum
  over the 2^16 hidden configurations.
* log Z three ways: exact; forward AIS with the Salakhutdinov & Murray (2008) path from the data's
  pixel marginals (100 chains, the 14,500-temperature schedule by default); and the AIS/reverse-AIS
  bracket, reverse AIS starting from 100 long block-Gibbs chains (started at test images).
* For comparison, scikit-learn's own ``BernoulliRBM`` with the same sizes, batch and learning rate
  (it runs PCD-1): its ``score_samples`` is a one-site pseudo-likelihood estimate, not a
  log-likelihood; loading its weights into ``ebms.models.BernoulliRBM`` gives the real one.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ebms.data.digits import binarized_digits
from ebms.estimators import ais_bracket, log_likelihood_report, salakhutdinov_betas, sigmoid_betas
from ebms.fit import RBMEstimator
from ebms.models import BernoulliRBM
from ebms.models.rbm import marginal_logits
from ebms.samplers import BlockGibbs
from ebms.viz import image_grid, save_figure


def _recorder(args: argparse.Namespace) -> Any:
    """A :class:`Recorder` of ``benchmarks/_record.py`` (source checkout only) for ``--record``."""
    bench = Path(__file__).resolve().parents[1] / "benchmarks"
    if not (bench / "_record.py").is_file():
        raise SystemExit(f"--record: needs a source checkout ({bench / '_record.py'} not found)")
    sys.path.insert(0, str(bench))
    from _record import Recorder

    return Recorder("rbm_digits_example", seeds=[args.seed], settings={
        "hidden": args.hidden, "epochs": args.epochs, "learning_rate": 0.05, "batch_size": 20,
        "ais_temperatures": args.temperatures, "ais_chains": args.chains, "reverse_start_sweeps": 1000,
        "sklearn": not args.no_sklearn, "threads": 1})


def sklearn_rbm_loglik(x_train: torch.Tensor, x_test: torch.Tensor, hidden: int, epochs: int,
                       seed: int) -> dict[str, float]:
    """Fit scikit-learn's BernoulliRBM with the same settings and print its scores beside the real log-likelihood."""
    from sklearn.neural_network import BernoulliRBM as SklearnRBM

    t0 = time.perf_counter()
    sk = SklearnRBM(n_components=hidden, learning_rate=0.05, batch_size=20, n_iter=epochs, random_state=seed)
    sk.fit(x_train.numpy())
    seconds = time.perf_counter() - t0
    rbm = BernoulliRBM(x_train.shape[1], hidden)
    with torch.no_grad():  # scikit-learn stores W as (H, D)
        rbm.weight.copy_(torch.from_numpy(sk.components_.T.copy()))
        rbm.visible_bias.copy_(torch.from_numpy(sk.intercept_visible_))
        rbm.hidden_bias.copy_(torch.from_numpy(sk.intercept_hidden_))
    exact = log_likelihood_report(rbm, x_test, float(rbm.log_partition()))
    pseudo = float(np.mean(sk.score_samples(x_test.numpy())))
    print(
        f"scikit-learn BernoulliRBM (PCD-1, {seconds:.1f} s): score_samples mean {pseudo:.2f} "
        f"(one-site pseudo-likelihood); real test log-likelihood {exact}"
    )
    return {"fit_s": seconds, "score_samples_mean": pseudo, "test_ll": exact.estimate, "test_ll_stderr": exact.stderr}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="runs/examples",
                        help="folder for the two images (default runs/examples; docs/img for the docs)")
    parser.add_argument("--hidden", type=int, default=16, help="hidden units (exact log Z needs <= 25)")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument(
        "--temperatures",
        type=int,
        default=14500,
        help="AIS steps: 14500 is the published MNIST schedule; other counts use a sigmoid schedule",
    )
    parser.add_argument("--chains", type=int, default=100, help="AIS chains (and reverse-AIS chains)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-sklearn", action="store_true", help="skip the scikit-learn comparison")
    parser.add_argument("--record", action="store_true",
                        help="write the printed figures to benchmarks/records/rbm_digits_example.json (source checkout)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # small matrices: one thread is fastest
    rec = _recorder(args) if args.record else None

    x, _, settings = binarized_digits()  # (1797, 64) in {0, 1}; settings name the binarisation
    perm = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(args.seed))
    n_test = x.shape[0] // 5
    x_train, x_test = x[perm[n_test:]], x[perm[:n_test]]
    print(f"data: {settings}, {x_train.shape[0]} train / {x_test.shape[0]} test images of 64 pixels")

    t0 = time.perf_counter()
    est = RBMEstimator(args.hidden, learning_rate=0.05, batch_size=20, n_iter=args.epochs, random_state=args.seed)
    est.fit(x_train)
    fit_s, recon = time.perf_counter() - t0, est.reconstruction_error(x_test)
    print(
        f"RBMEstimator CD-1, {args.hidden} hidden, {args.epochs} epochs: {fit_s:.1f} s; "
        f"reconstruction error {recon:.4f}"
    )
    rbm = est.model_

    # 1) exact log Z: a sum over the 2^H hidden configurations
    exact_ll = est.score_samples(x_test, log_z="exact")  # real per-image log-likelihoods (n_test,)
    exact_report = log_likelihood_report(rbm, x_test, est.log_partition_estimate_)
    print(
        f"exact log Z = {est.log_partition_:.4f}; test log-likelihood {exact_report} "
        f"(score_samples mean {exact_ll.mean():.2f})"
    )

    # 2) forward AIS from independent pixels with the training data's marginals, and 3) reverse AIS
    #    from model samples (long block-Gibbs chains started at test images): ais_bracket runs both
    betas = salakhutdinov_betas() if args.temperatures == 14500 else sigmoid_betas(args.temperatures)
    path = rbm.ais_path(marginal_logits(x_train))
    g = torch.Generator().manual_seed(args.seed + 1)
    t0 = time.perf_counter()
    chains = BlockGibbs().sample(rbm, x_test[: args.chains], 1000, generator=g)
    bracket = ais_bracket(path, args.chains, betas, chains, generator=g)
    ais_s = time.perf_counter() - t0
    s = bracket.settings
    print(
        f"forward AIS log Z = {s['forward']:.4f} ± {s['forward_stderr']:.4f} (ESS {s['forward_ess']:.1f} of "
        f"{args.chains}), error {s['forward'] - est.log_partition_:+.4f}; reverse AIS {s['reverse']:.4f} ± "
        f"{s['reverse_stderr']:.4f}, error {s['reverse'] - est.log_partition_:+.4f} "
        f"({len(betas) - 1} temperatures, {ais_s:.1f} s for both)"
    )
    inside = bracket.lower <= est.log_partition_ <= bracket.upper
    print(
        f"AIS/reverse-AIS bracket, widened by z={s['z']:g} standard errors: [{bracket.lower:.4f}, "
        f"{bracket.upper:.4f}]; contains the exact log Z: {inside}"
    )
    bracket_report = log_likelihood_report(rbm, x_test, bracket)
    print(f"test log-likelihood with the bracket: {bracket_report}")

    sk = None if args.no_sklearn else sklearn_rbm_loglik(x_train, x_test, args.hidden, args.epochs, args.seed)

    out = Path(args.out)
    filters = torch.from_numpy(est.components_).reshape(-1, 8, 8)
    save_figure(
        image_grid(filters, nrow=8, title=f"{args.hidden} RBM filters (weights per hidden unit)"),
        out / "rbm_digits_filters.png",
        dpi=100,
    )
    samples = BlockGibbs().sample(rbm, rbm.space.random(64, generator=g), 1000, generator=g)
    save_figure(
        image_grid(samples.reshape(-1, 8, 8), nrow=16, title="64 samples: 1000 block-Gibbs sweeps from noise"),
        out / "rbm_digits_samples.png",
        dpi=100,
    )
    print(f"wrote {out / 'rbm_digits_filters.png'} and {out / 'rbm_digits_samples.png'}")
    if rec is not None:
        rec.write({
            "n_train": x_train.shape[0], "n_test": x_test.shape[0], "fit_s": fit_s, "reconstruction_error": recon,
            "exact": {"log_z": est.log_partition_, "test_ll": exact_report.estimate,
                      "test_ll_stderr": exact_report.stderr, "score_samples_mean": float(exact_ll.mean())},
            "ais": {"log_z_forward": s["forward"], "log_z_forward_stderr": s["forward_stderr"],
                    "log_z_forward_ess": s["forward_ess"], "forward_error": s["forward"] - est.log_partition_,
                    "log_z_reverse": s["reverse"], "log_z_reverse_stderr": s["reverse_stderr"],
                    "reverse_error": s["reverse"] - est.log_partition_, "wall_s": ais_s,
                    "log_z_bracket": [bracket.lower, bracket.upper], "bracket_contains_exact": inside,
                    "test_ll": bracket_report.estimate, "test_ll_stderr": bracket_report.stderr,
                    "test_ll_bracket": [bracket_report.lower, bracket_report.upper]},
            "sklearn": sk,
        }, notes="examples/rbm_digits.py: RBMEstimator (CD-1) on binarised sklearn digits, exact log Z (2^H hidden "
                 "states) against forward and reverse AIS; scikit-learn's BernoulliRBM (PCD-1) with the same "
                 "settings, its score_samples (a one-site pseudo-likelihood) beside its real log-likelihood.")


if __name__ == "__main__":
    main()

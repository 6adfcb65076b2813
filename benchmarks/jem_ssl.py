"""Semi-supervised learning with joint EBMs on the 8x8 digits: supervised vs pre-train + fine-tune vs JEM.

The issue's ordering check "joint < pre-train < supervised error with few labels" (monograph ch. 5, the
protocol of its Table 5.2 at toy scale):

    data        scikit-learn's 8x8 digits, ``ebms.data.load_image_splits("digits", labels_per_class=10,
                seed=s, val_fraction=0.2)``: pixels in [-1, 1]; of the 1,437 training images 287 are held
                out for validation, 100 of the other 1,150 keep their label (10 per class, drawn by seed
                ``s``), the remaining 1,050 are unlabelled (label -1); the 360 test images are fixed.
    network     one ``MLPClassifier((1, 8, 8), 10, hidden=(256, 256))`` (SiLU) for every method, freshly
                initialised from seed ``s``; ``.trunk`` (64 -> 256 -> 256) + ``.head`` (256 -> 10).
    inputs      every training input (all methods, all stages) gets Gaussian noise, std 0.03, clipped to
                [-1, 1] (JEM's noisy data, kept in the sampler's box); evaluation uses the clean images.
    chains      (pre-training and JEM alike) SGLD ``x <- clip(x - a grad E(x) + s xi, -1, 1)``, a = 1, s = 0.01,
                k = 10 steps per training step, from a 2,000-slot replay buffer with 5 % restarts; restarted
                slots start from ``ClassConditionalGaussian.fit(labelled images, labels, shrinkage=0.1)``
                (JEM++'s informative init, fitted on the 100 labelled images only, drawn as its mixture).
    1 supervised          ``CrossEntropy`` on the 100 labelled images: 300 Adam steps (lr 1e-3), 64 rows each.
    2 pre-train + tune    ``ScalarHeadEBM(clf.trunk, clf.features)`` (E(x) = -w^T trunk(x)) trained by
                          ``PersistentContrastiveDivergence`` (energy penalty 0.1) for 1,000 steps on batches of 64
                          training images (labels unused), then a new softmax head (``clf.head`` re-initialised)
                          trained by cross-entropy exactly as method 1 (300 steps); reported twice: trunk
                          frozen (linear probe on the pre-trained features) and trunk fine-tuned with the head.
    3 joint (JEM)         ``JEM(clf, 10)`` + ``JEMObjective`` (generative weight 1, linear warm-up over 200 steps,
                          energy penalty 0.1) for 1,000 steps; each batch = 64 labelled rows (cross-entropy and
                          generative term) + 64 training images with y = -1 (generative term only).
    budget      the same network, optimizer, batch sizes and input noise everywhere; pre-training and JEM get
                the same generative budget (1,000 steps x 64 chains x k = 10 SGLD steps); the supervised
                baseline and each fine-tuning get the same 300 cross-entropy steps. Seconds are wall time per
                seed (pre-train rows include the pre-training).
    metrics     test error (%) and test class-wise ECE (%, 20 bins, monograph Eq. 5.19) from
                ``ebms.metrics.calibration_report``; mean ± std (n - 1) over the label draws, seeds 0..9; and the
                paired difference to the supervised error (same label draw, same test images) with the number
                of draws where the method's error is lower.

Hyper-parameters were picked once, on seed 0 and its validation split (``--eval val``; never on the test
images), then fixed for every seed. Validation errors (287 images; the binomial standard error of a 9 %
error is 1.7 points, i.e. 5 images, so most of these differences are noise and the picks are close to the
usual JEM defaults). Supervised, 300 steps: lr 1e-3 10.1 %, lr 3e-3 9.4 %, lr 3e-4 x 1,000 steps 10.5 %,
weight decay 1e-3 10.5 %, 1,000 steps 10.8 %, noise 0 / 0.1 9.8 / 10.1 %, widths 128 / 512 9.8 / 9.1 %
(kept lr 1e-3, 300 steps, 256-256, noise 0.03). JEM, 600 steps, k = 20: default 9.1 %, generative weight
0.3 / 3 9.1 / 9.4 %, SGLD a = 0.3 9.1 %, s = 0.05 9.1 %, no warm-up 9.4 %, k = 10 9.1 %, penalty 0.1 8.7 %.
PCD pre-train + fine-tune, 600 steps: default 9.1 %, penalty 0.1 9.1 %, k = 10 8.7 %. With k = 10 the
generative steps fit 1,000 per method in the time budget: k = 10, 1,000 steps, penalty 0.1: supervised
10.1 %, pre-train + fine-tune 9.4 %, frozen 55.4 %, joint 7.3 % (without the penalty 9.1 / 57.1 / 9.4 %)
-> chosen; the penalty is shared by PCD and JEM (same chains and settings for both generative routes). The
generative budget itself (steps, k) was set by the run time, not by validation error.

Published anchor (printed beside, a different data set and network, for the ordering only): monograph
Table 5.2, CIFAR-10 with 4,000 labels: supervised 25.72 ± 0.44 %, pre-train 21.40 ± 0.38 %, joint 15.12 ± 0.36 %
error (ten label draws).

``--quick``: seeds 0 1 2, 150 cross-entropy and 200 generative steps (warm-up 40): the same code path in
about a minute. ``--eval val`` reports on the validation split instead (hyper-parameter selection).
Comparisons: joint vs supervised, pre-train + fine-tune vs supervised and joint vs pre-train + fine-tune,
each by ``ebms.metrics.compare_over_seeds`` on the error paired by label draw (95 % Student-t interval and
its verdict). Record: ``benchmarks/records/<--record>.json`` (``benchmarks/_record.py``; default ``jem_ssl``,
``jem_ssl_val`` with ``--eval val``, ``jem_ssl_quick`` with ``--quick``): settings, per-seed error / ECE /
seconds of every method, the means and the comparisons.

Run: ``python benchmarks/jem_ssl.py [--quick] [--seeds S ...] [--eval test|val] [--threads N] [--no-save]
[--record NAME]`` (every hyper-parameter above is a flag; ``--help`` lists them).
"""

from __future__ import annotations

import argparse
import copy
import resource
import statistics
import time
from collections.abc import Callable
from typing import Any

import _common as C
import torch
from _record import Recorder
from torch import Tensor, nn

from ebms.data.image_sets import ImageSplits, load_image_splits
from ebms.distributions.class_gaussian import ClassConditionalGaussian
from ebms.metrics.calibration import calibration_report
from ebms.metrics.seeds import compare_over_seeds
from ebms.models.jem import JEM, ScalarHeadEBM
from ebms.nets.classifier import MLPClassifier
from ebms.objectives.buffer import ReplayBuffer
from ebms.objectives.cd import PersistentContrastiveDivergence
from ebms.objectives.classification import CrossEntropy
from ebms.objectives.jem import JEMObjective
from ebms.samplers import SGLD
from ebms.spaces import Box
from ebms.train import Trainer
from ebms.train.guard import DivergenceGuard

BENCH = "jem_ssl"
METHODS = ("supervised", "pretrain_frozen", "pretrain_finetune", "joint")
LABELS = {"supervised": "supervised (100 labels only)",
          "pretrain_frozen": "pre-train (PCD) + head, trunk frozen",
          "pretrain_finetune": "pre-train (PCD) + fine-tune all",
          "joint": "joint (JEM, SSL)"}
#: monograph Table 5.2 (CIFAR-10, 4,000 labels; a different data set and network): test error %, mean and std
#: over ten label draws.
ANCHOR = {"supervised": (25.72, 0.44), "pretrain": (21.40, 0.38), "joint": (15.12, 0.36)}
LABELS_PER_CLASS = 10


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seeds", type=int, nargs="+", default=list(range(10)), help="label draws (default 0..9)")
    p.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    p.add_argument("--eval", choices=("test", "val"), default="test",
                   help="report on the test images (default) or the validation split (hyper-parameter selection)")
    p.add_argument("--val-fraction", type=float, default=0.2, help="validation share of the training images")
    p.add_argument("--hidden", type=int, nargs="+", default=[256, 256], help="MLP classifier widths")
    p.add_argument("--sup-steps", type=int, default=300,
                   help="cross-entropy steps of the supervised baseline and of each fine-tuning")
    p.add_argument("--gen-steps", type=int, default=1000, help="steps of PCD pre-training and of JEM training")
    p.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate (every stage)")
    p.add_argument("--weight-decay", type=float, default=0.0, help="Adam weight decay (every stage)")
    p.add_argument("--batch-labelled", type=int, default=64, help="labelled rows per step")
    p.add_argument("--batch-unlabelled", type=int, default=64, help="unlabelled rows per step (PCD, JEM)")
    p.add_argument("--data-noise", type=float, default=0.03, help="std of Gaussian noise on every training input")
    p.add_argument("--k", type=int, default=10, help="SGLD steps per training step")
    p.add_argument("--sgld-step", type=float, default=1.0, help="SGLD gradient step a")
    p.add_argument("--sgld-noise", type=float, default=0.01, help="SGLD noise scale s")
    p.add_argument("--reinit", type=float, default=0.05, help="replay-buffer restart probability")
    p.add_argument("--capacity", type=int, default=2000, help="replay-buffer slots")
    p.add_argument("--gen-weight", type=float, default=1.0, help="JEM generative weight after warm-up")
    p.add_argument("--warmup", type=int, default=200, help="JEM warm-up steps (linear ramp of the weight)")
    p.add_argument("--reg", type=float, default=0.1, help="energy-magnitude penalty alpha (PCD and JEM)")
    p.add_argument("--shrinkage", type=float, default=0.1, help="covariance shrinkage of the buffer init")
    p.add_argument("--record", default=None, help="record name: benchmarks/records/NAME.json")


# -- data streams -------------------------------------------------------------------------------------------------
def _rows(n_available: int, n: int, g: torch.Generator) -> Tensor:
    """``n`` row indices: distinct when there are enough rows, else drawn with replacement."""
    if n <= n_available:
        return torch.randperm(n_available, generator=g)[:n]
    return torch.randint(n_available, (n,), generator=g)


def _noisy(x: Tensor, sigma: float, g: torch.Generator) -> Tensor:
    """``clip(x + sigma * eps, -1, 1)``: JEM's noisy data, kept inside the sampler's box."""
    return (x + sigma * torch.randn(x.shape, generator=g)).clamp(-1.0, 1.0) if sigma > 0 else x


def labelled_stream(x: Tensor, y: Tensor, n: int, sigma: float) -> Callable[[Any, torch.Generator], Any]:
    """``(x, y)`` batches of ``n`` labelled rows (the supervised and fine-tuning data)."""
    def draw(_: Any, g: torch.Generator) -> tuple[Tensor, Tensor]:
        idx = _rows(x.shape[0], n, g)
        return _noisy(x[idx], sigma, g), y[idx]
    return draw


def unlabelled_stream(x: Tensor, n: int, sigma: float) -> Callable[[Any, torch.Generator], Tensor]:
    """Batches of ``n`` training images, labels ignored (the PCD pre-training data)."""
    def draw(_: Any, g: torch.Generator) -> Tensor:
        return _noisy(x[_rows(x.shape[0], n, g)], sigma, g)
    return draw


def joint_stream(x_l: Tensor, y_l: Tensor, x_all: Tensor, n_l: int, n_u: int,
                 sigma: float) -> Callable[[Any, torch.Generator], Any]:
    """``n_l`` labelled rows followed by ``n_u`` training images with ``y = -1`` (JEM's SSL batches)."""
    lab, unl = labelled_stream(x_l, y_l, n_l, sigma), unlabelled_stream(x_all, n_u, sigma)

    def draw(_: Any, g: torch.Generator) -> tuple[Tensor, Tensor]:
        xl, yl = lab(None, g)
        xu = unl(None, g)
        return torch.cat([xl, xu]), torch.cat([yl, torch.full((n_u,), -1, dtype=torch.long)])
    return draw


# -- the three methods --------------------------------------------------------------------------------------------
def make_classifier(args: argparse.Namespace, seed: int) -> MLPClassifier:
    torch.manual_seed(seed)
    return MLPClassifier((1, 8, 8), 10, hidden=tuple(args.hidden))


def _adam(args: argparse.Namespace) -> Callable[[list[dict[str, Any]]], torch.optim.Optimizer]:
    return lambda groups: torch.optim.Adam(groups, lr=args.lr, weight_decay=args.weight_decay)


def _fit(objective: nn.Module, model: nn.Module, data: Callable[[Any, torch.Generator], Any], steps: int,
         args: argparse.Namespace, seed: int, *, generative: bool) -> dict[str, Any]:
    guard = DivergenceGuard(snapshot_every=100) if generative else None
    t0 = time.perf_counter()
    res = Trainer(objective, model, data, optimizer=_adam(args), steps=steps, batch_size=None, run_dir=None,
                  seed=seed, progress=False, checkpoint_every=None, log_every=max(1, steps), guard=guard).fit()
    out = {k: float(v) for k, v in (res.metrics or {}).items() if isinstance(v, (int, float))}
    return {"train_s": time.perf_counter() - t0, "restores": res.restores, "final": out}


def _chains(args: argparse.Namespace, x_l: Tensor, y_l: Tensor) -> tuple[SGLD, ReplayBuffer]:
    """SGLD on the pixel box and a replay buffer restarting from a class-conditional Gaussian of the labelled images."""
    space = Box((1, 8, 8), -1.0, 1.0)
    init = ClassConditionalGaussian.fit(x_l, y_l, n_classes=10, shrinkage=args.shrinkage)
    return (SGLD(args.sgld_step, args.sgld_noise, space=space),
            ReplayBuffer(args.capacity, space, reinit_prob=args.reinit, init=init.sample))


@torch.no_grad()
def evaluate(clf: nn.Module, x: Tensor, y: Tensor) -> dict[str, float]:
    """Error and class-wise ECE (20 bins), both in %, and the NLL (nats) of ``clf`` on ``(x, y)``."""
    clf.eval()
    r = calibration_report(clf(x), y, n_bins=20)
    clf.train()
    return {"error": 100.0 * (1.0 - r.accuracy), "ece": 100.0 * r.ece_classwise, "nll": r.nll}


def one_seed(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    s: ImageSplits = load_image_splits("digits", labels_per_class=LABELS_PER_CLASS, seed=seed,
                                       val_fraction=args.val_fraction)
    lab = s.train_targets >= 0
    x_l, y_l, x_all = s.train[lab], s.train_targets[lab], s.train
    x_ev, y_ev = (s.test, s.test_targets) if args.eval == "test" else (s.val, s.val_targets)
    sup_data = labelled_stream(x_l, y_l, args.batch_labelled, args.data_noise)
    rec: dict[str, Any] = {"seed": seed, "n_labelled": int(lab.sum()), "n_train": int(x_all.shape[0]),
                           "n_eval": int(x_ev.shape[0])}

    if "supervised" in args.methods:
        clf = make_classifier(args, seed)
        fit = _fit(CrossEntropy(), clf, sup_data, args.sup_steps, args, seed, generative=False)
        rec["supervised"] = {**evaluate(clf, x_ev, y_ev), "seconds": fit["train_s"]}

    tuned = [m for m in ("pretrain_frozen", "pretrain_finetune") if m in args.methods]
    if tuned:
        clf = make_classifier(args, seed)
        sampler, buffer = _chains(args, x_l, y_l)
        ebm = ScalarHeadEBM(clf.trunk, clf.features)  # E(x) = -w^T trunk(x); the trunk object is shared with clf
        pcd = PersistentContrastiveDivergence(sampler, buffer, args.k, regularization=args.reg)
        pre = _fit(pcd, ebm, unlabelled_stream(x_all, args.batch_unlabelled, args.data_noise), args.gen_steps,
                   args, seed, generative=True)
        for m in tuned:
            ft = copy.deepcopy(clf)
            torch.manual_seed(10_000 + seed)
            ft.head.reset_parameters()  # a new softmax head W h + b
            if m == "pretrain_frozen":
                ft.trunk.requires_grad_(False)
            fit = _fit(CrossEntropy(), ft, sup_data, args.sup_steps, args, seed, generative=False)
            rec[m] = {**evaluate(ft, x_ev, y_ev), "seconds": pre["train_s"] + fit["train_s"],
                      "pretrain_s": pre["train_s"], "pretrain_restores": pre["restores"],
                      "pretrain_final": pre["final"]}

    if "joint" in args.methods:
        clf = make_classifier(args, seed)
        sampler, buffer = _chains(args, x_l, y_l)
        obj = JEMObjective(sampler, buffer, args.k, generative_weight=args.gen_weight, warmup_steps=args.warmup,
                           regularization=args.reg)
        data = joint_stream(x_l, y_l, x_all, args.batch_labelled, args.batch_unlabelled, args.data_noise)
        fit = _fit(obj, JEM(clf, 10), data, args.gen_steps, args, seed, generative=True)
        rec["joint"] = {**evaluate(clf, x_ev, y_ev), "seconds": fit["train_s"], "restores": fit["restores"],
                        "final": fit["final"]}
    return rec


# -- report -------------------------------------------------------------------------------------------------------
def _mean_std(xs: list[float]) -> tuple[float, float]:
    return statistics.mean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def summarise(recs: list[dict[str, Any]], methods: list[str]) -> dict[str, dict[str, float]]:
    out = {}
    for m in methods:
        err, ece, sec = ([r[m][key] for r in recs] for key in ("error", "ece", "seconds"))
        (em, es), (cm, cs) = _mean_std(err), _mean_std(ece)
        out[m] = {"error_mean": em, "error_std": es, "ece_mean": cm, "ece_std": cs,
                  "seconds_mean": statistics.mean(sec), "n_seeds": len(recs)}
        if m != "supervised" and "supervised" in methods:  # paired by label draw: same labels, same test set
            diff = [r[m]["error"] - r["supervised"]["error"] for r in recs]
            dm, ds = _mean_std(diff)
            out[m].update(paired_vs_supervised_mean=dm, paired_vs_supervised_std=ds,
                          seeds_below_supervised=sum(d < 0 for d in diff))
    return out


#: (a, b) pairs compared over the label draws, error a - b
PAIRS = (("joint", "supervised"), ("pretrain_finetune", "supervised"), ("joint", "pretrain_finetune"),
         ("pretrain_frozen", "supervised"))


def compare(recs: list[dict[str, Any]], methods: list[str], split: str) -> dict[str, dict[str, Any]]:
    """:data:`PAIRS` by ``compare_over_seeds`` on the error (%), paired by label draw."""
    seeds = [r["seed"] for r in recs]
    return {f"{a}_vs_{b}": compare_over_seeds([r[a]["error"] for r in recs], [r[b]["error"] for r in recs],
                                              seeds=seeds, name_a=LABELS[a], name_b=LABELS[b],
                                              metric=f"{split} error (%)", higher_is_better=False).to_dict()
            for a, b in PAIRS if a in methods and b in methods}


def main() -> None:
    args = C.parse_args(__doc__.splitlines()[0], add_args)
    if args.quick:
        args.seeds, args.sup_steps, args.gen_steps = args.seeds[:3], min(args.sup_steps, 150), min(args.gen_steps, 200)
        args.warmup = min(args.warmup, args.gen_steps // 5)
    methods = [m for m in METHODS if m in args.methods]
    args.methods = methods
    info = C.machine_info()
    name = args.record or (BENCH + ("" if args.eval == "test" else "_val") + ("_quick" if args.quick else ""))
    rec = Recorder(name, seeds=args.seeds, settings={k: v for k, v in vars(args).items()
                                                     if k not in ("no_save", "repeats", "record")})
    t_all = time.perf_counter()
    recs = []
    for seed in args.seeds:
        C.note(f"[{BENCH}] seed {seed}: {', '.join(methods)}")
        recs.append(one_seed(args, seed))
        C.note("  " + "  ".join(f"{m} {recs[-1][m]['error']:.2f}%" for m in methods))
    summ = summarise(recs, methods)
    split = f"{args.eval} error %"
    rows = []
    for m in methods:
        a = summ[m]
        anchor = ANCHOR["supervised" if m == "supervised" else "joint" if m == "joint" else "pretrain"]
        paired = ("-" if "paired_vs_supervised_mean" not in a else
                  f"{a['paired_vs_supervised_mean']:+.2f} ± {a['paired_vs_supervised_std']:.2f} "
                  f"({a['seeds_below_supervised']}/{a['n_seeds']} lower)")
        rows.append([LABELS[m], f"{a['error_mean']:.2f} ± {a['error_std']:.2f}", paired,
                     f"{a['ece_mean']:.2f} ± {a['ece_std']:.2f}", f"{a['seconds_mean']:.1f}",
                     f"{anchor[0]:.2f} ± {anchor[1]:.2f}"])
    print(f"digits 8x8, {LABELS_PER_CLASS} labels per class ({recs[0]['n_labelled']} labelled of "
          f"{recs[0]['n_train']} training images), {recs[0]['n_eval']} {args.eval} images, "
          f"seeds {' '.join(map(str, args.seeds))} (mean ± std over label draws)")
    header = [f"method (MLP {'-'.join(map(str, args.hidden))})", split, "minus supervised, paired",
              f"{args.eval} ECE % (classwise, 20 bins)",
              "seconds/seed", "anchor error % (CIFAR-10!)"]
    print(C.format_table(header, rows))
    print("anchor = monograph Table 5.2, CIFAR-10 with 4,000 of 50,000 labels and the source's own network: a "
          "DIFFERENT data set, shown for the published ordering (joint < pre-train < supervised) only, not "
          "comparable figure for figure")
    order = [m for m in ("joint", "pretrain_finetune", "supervised") if m in summ]
    ordered = all(summ[a]["error_mean"] < summ[b]["error_mean"] for a, b in zip(order, order[1:]))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    record = {"bench": BENCH, "machine": info, "settings": dict(vars(args)), "anchor_table_5_2_cifar10": ANCHOR,
              "summary": summ, "seeds": recs, "wall_s": time.perf_counter() - t_all, "peak_rss_mb": peak}
    name = ("quick/" if args.quick else "") + BENCH + ("" if args.eval == "test" else "_val")
    C.save_results(name, record, enabled=not args.no_save)
    final = {"bench": BENCH, "eval": args.eval, "seeds": len(recs)}
    for m in methods:
        final[f"{m}_error"] = round(summ[m]["error_mean"], 3)
        final[f"{m}_error_std"] = round(summ[m]["error_std"], 3)
        final[f"{m}_ece"] = round(summ[m]["ece_mean"], 3)
        if "paired_vs_supervised_mean" in summ[m]:
            final[f"{m}_minus_supervised"] = round(summ[m]["paired_vs_supervised_mean"], 3)
    final["ordering_joint_lt_pretrain_lt_supervised"] = ordered if len(order) == 3 else None
    final["wall_s"] = round(record["wall_s"], 1)
    comparisons = compare(recs, methods, args.eval)
    for c in comparisons.values():
        print(c["sentence"])
    per_seed = {f"seed{r['seed']}": {m: {k: r[m][k] for k in ("error", "ece", "nll", "seconds")} for m in methods}
                for r in recs}
    rec.write({"n_labelled": recs[0]["n_labelled"], "n_train": recs[0]["n_train"], "n_eval": recs[0]["n_eval"],
               "per_seed": per_seed, "summary": summ, "comparisons": comparisons},
              notes=f"{args.eval} error and class-wise ECE (20 bins) in %, NLL in nats, of each method per label draw "
                    "(seed); seconds: wall time per seed (pre-train rows include the pre-training). summary: mean, "
                    "std (n - 1) over the draws and the paired difference to supervised. comparisons: "
                    "compare_over_seeds on the error, paired by draw, 95 % Student-t interval. The monograph's "
                    "Table 5.2 (CIFAR-10) anchor is in the record published_joint.",
              enabled=not args.no_save)
    C.emit_final_line(final)


if __name__ == "__main__":
    main()

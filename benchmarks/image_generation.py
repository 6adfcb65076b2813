"""Do image EBMs generate digits from noise? Samples judged by a classifier trained on the data (issue 26, item 3).

Per arm (a packaged recipe with overrides) and seed, trains the run through the command line
(``ebms train``; resumed when its folder has checkpoints, kept when it has its ``eval.json``), draws
``--n`` fresh samples from noise (``ebms sample``: chains from uniform noise, from the recipe's
Gaussian restarts with ``vision.informative_init``, or recovery likelihood's progressive sampling)
and scores them with the network of the ``classifier-mnist`` run (trained once, seed 0, 1,500 steps):

* ``confident``: the share of samples the classifier puts in one class with probability >= 0.9;
* ``class_entropy``: entropy (nats) of the mean class posterior (``log 10 = 2.303``: all digits);
* ``score``: ``exp E KL(p(y|x) || p(y))``, in ``[1, 10]``;
* ``fd``: Fréchet distance of the classifier's pooled features of the samples and of ``--n`` test
  images (:func:`ebms.metrics.frechet_distance`).

The same figures of ``--n`` test images (its floor: a different test sample against the same
reference) and of uniform noise are printed beside them. Comparisons between arms are paired by
seed (:func:`ebms.metrics.compare_over_seeds`). Sample grids: each ``samples-*.png`` next to the run.

Arms (``--arms NAME ...``, default all): ``recipe`` = ``conv-ebm-mnist`` (Gaussian restarts);
``uniform`` = the same with ``vision.informative_init=false`` (the tutorial's uniform restarts);
``tutorial`` = uniform restarts at the library page's guidance (60 SGLD steps of size 0.01 with noise
0.005, batch 128, buffer 8,192, restarts 5 %, regulariser 0.01, Adam 1e-4); ``tutorial-clamp`` = that
with the image tutorials' move (step 10, each gradient element clamped to 0.03); ``uniform-nonorm`` and
``tutorial-nonorm`` = ``uniform`` and ``tutorial`` with an energy without GroupNorm (``vision.normalize=false``:
one that sees its input's contrast); ``tutorial-4stage`` = uniform restarts, the clamped move (30 steps),
buffer 2,048, 2,000 steps, an energy of four stages (it sees the whole image: ``ebms.nets.receptive_field``)
without GroupNorm; ``tutorial-4stage-groupnorm`` and ``tutorial-2stage`` = the same with GroupNorm, with the
recipe's two stages; ``uniform-nonorm-4stage`` = ``uniform`` with that energy; ``recovery-4stage-ema`` = ``recovery-4stage``
sampled with a moving average of its weights (``train.ema=0.999``, the authors' code; with ``--curve`` the trained weights
are judged too, as ``trained_weights``); ``recovery`` =
``recovery-mnist`` (the authors' protocol, an energy without GroupNorm); ``recovery-groupnorm`` = the same
energy with GroupNorm (bounded and blind to its input's scale); ``recovery-plain`` = the former recipe (the
paper's equations as written, step ``b σ² (1 − σ²)``, levels 0.02 to 0.7, GroupNorm).
``--steps`` sets ``train.steps`` of every arm (default: each recipe's). ``--curve S1 S2 ...`` trains each run in
segments instead, to ``S1`` steps, then on (resumed) to ``S2``, ..., and judges fresh samples after each segment
(written under ``<run>/curve-step<S>``): the figures as training goes on, from one run (the learning rate
schedule must not depend on ``train.steps``: the recipes' is constant). The last segment's are the run's figures.

Resumable: runs live under ``--out`` (default ``runs/image-generation``), ``<arm>/seed<s>``.
Run: ``python benchmarks/image_generation.py [--arms A ...] [--seeds 0 1 2] [--steps N] [--n 500]
[--record NAME] [--quick]``. ``--quick``: 300 images, 4 steps, 3 Langevin steps per update, 40 samples (a smoke test,
not a figure).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import _common as C
import torch
from _record import Recorder

from ebms.cli.main import main as ebms_main
from ebms.data import noise_images
from ebms.metrics import classifier_scores, compare_over_seeds, frechet_distance

ROOT = Path(__file__).resolve().parents[1]
TUTORIAL = ["vision.informative_init=false", "objective.k=60", "sampler.step_size=0.01", "sampler.noise_scale=0.005",
            "train.batch_size=128", "objective.buffer_size=8192", "objective.reinit_prob=0.05",
            "objective.regularization=0.01", "train.lr=0.0001", "vision.data_noise=0.005"]
#: uniform restarts and the image tutorials' clamped move, with an energy that sees the whole image and its contrast
#: (four stages, no GroupNorm); 30 steps per move and a buffer of 2,048 so that each chain is moved about 30 times
#: in 2,000 steps of batch 32 (the library page's 8,192 chains at batch 128 would be moved 8 times in as many steps)
FIXED = ["vision.informative_init=false", "vision.normalize=false", "vision.channels=[16,32,64,64]", "sampler.step_size=10",
         "sampler.grad_clamp=0.03", "sampler.noise_scale=0.005", "objective.k=30", "objective.buffer_size=2048",
         "train.steps=2000", "vision.data_noise=0.005"]
ARMS: dict[str, tuple[str, list[str]]] = {
    "recipe": ("conv-ebm-mnist", []),
    "uniform": ("conv-ebm-mnist", ["vision.informative_init=false"]),
    "tutorial": ("conv-ebm-mnist", TUTORIAL),
    "tutorial-clamp": ("conv-ebm-mnist", [*TUTORIAL, "sampler.step_size=10", "sampler.grad_clamp=0.03"]),
    "uniform-nonorm": ("conv-ebm-mnist", ["vision.informative_init=false", "vision.normalize=false"]),
    "tutorial-nonorm": ("conv-ebm-mnist", [*TUTORIAL, "vision.normalize=false"]),
    "tutorial-4stage": ("conv-ebm-mnist", FIXED),
    "tutorial-4stage-groupnorm": ("conv-ebm-mnist", [*FIXED, "vision.normalize=true"]),
    "tutorial-2stage": ("conv-ebm-mnist", [*FIXED, "vision.channels=[16,32]"]),
    "uniform-nonorm-4stage": ("conv-ebm-mnist", ["vision.informative_init=false", "vision.normalize=false",
                                                 "vision.channels=[16,32,64,64]"]),
    "recovery": ("recovery-mnist", []),
    "recovery-groupnorm": ("recovery-mnist", ["vision.normalize=true"]),
    "recovery-4stage": ("recovery-mnist", ["vision.channels=[16,32,64,64]"]),
    "recovery-4stage-ema": ("recovery-mnist", ["vision.channels=[16,32,64,64]", "train.ema=0.999"]),
    "recovery-plain": ("recovery-mnist", ["vision.normalize=true", "vision.recovery_protocol=plain", "vision.recovery_b=0.1",
                                          "objective.k=20", "objective.sigmas=[0.02,0.05,0.1,0.2,0.4,0.7]",
                                          "train.lr=0.0001"]),
}
FIGURES = ("confident", "class_entropy", "score", "fd")
LANDSCAPE = ("e_noise", "e_test", "grad_noise", "grad_test")


def _ebms(argv: list[str], what: str) -> None:
    code = ebms_main(argv)
    if code != 0:
        raise SystemExit(f"{what} failed with exit status {code}: ebms {' '.join(argv)}")


def trained_steps(run: Path) -> int:
    """The step of the run's newest committed checkpoint (0 without one)."""
    from ebms.train import CheckpointStore

    steps = CheckpointStore(run / "checkpoints").steps()
    return max(steps) if steps else 0


def train(folder: Path, recipe: str, overrides: list[str], steps: int | None = None) -> Path:
    """The run folder, trained (or resumed) unless its eval.json exists (and, with ``steps``, it has a checkpoint of
    that step or later)."""
    run = folder / recipe
    if not (run / "eval.json").is_file() or (steps is not None and trained_steps(run) < steps):
        resume = ["--resume"] if (run / "checkpoints").is_dir() else []
        _ebms(["train", recipe, f"run.out_dir={folder}", f"run.progress={str(sys.stderr.isatty()).lower()}",
               *overrides, *resume], f"ebms train {recipe}")
    return run


def samples(run: Path, n: int, where: Path | None = None, overrides: tuple[str, ...] = ()) -> torch.Tensor:
    """``n`` fresh samples of the run (``ebms sample``, into ``where``, default the run folder, with ``overrides``
    such as ``eval.ema=false``; written once, read back after)."""
    from safetensors.torch import load_file

    where = where or run
    found = sorted(where.glob(f"samples-n{n}-steps*-seed*.safetensors"))
    if not found:
        _ebms(["sample", str(run), "--n", str(n), *(["--out", str(where)] if where != run else []), *overrides],
              f"ebms sample {run}")
        found = sorted(where.glob(f"samples-n{n}-steps*-seed*.safetensors"))
    return load_file(str(found[0]))["samples"]


class Judge:
    """The data classifier: logits and pooled features of images in [-1, 1], and the reference test features."""

    def __init__(self, run: Path, n: int) -> None:
        from ebms.cli.run import load_run

        cfg, model, data, _ = load_run(run)
        self.net = model.eval()
        self.test = data.test[:n]
        self.train = data.train[:n]
        self.reference = self.features(self.test)

    def _batched(self, fn: Any, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return torch.cat([fn(x[i:i + 500]) for i in range(0, x.shape[0], 500)])

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self._batched(self.net.classifier.trunk, x.clamp(-1, 1)).double()

    def judge(self, x: torch.Tensor) -> dict[str, Any]:
        x = x.clamp(-1, 1)
        s = classifier_scores(self._batched(self.net.logits, x))
        return {"confident": s.confident, "class_entropy": s.class_entropy, "score": s.score, "counts": s.counts,
                "fd": frechet_distance(self.features(x), self.reference)}


def landscape(run: Path, test: torch.Tensor, n: int = 64) -> dict[str, float] | None:
    """The trained energy at ``n`` uniform-noise images and ``n`` test images: the mean energies and the mean
    L2 norm of the input gradient ``||grad E(x)||`` (a flat plateau over noise leaves a chain from noise to its
    noise term). ``None`` for energies that are not one image energy ``E(x)`` (recovery likelihood's ``E(x, t)``)."""
    from ebms.cli.run import load_run

    cfg, model, _, _ = load_run(run)
    if cfg.model.kind != "conv" or cfg.objective.kind == "recovery":
        return None
    noise = noise_images(n, tuple(test.shape[1:]), torch.Generator().manual_seed(0))
    out: dict[str, float] = {}
    for name, x in (("noise", noise), ("test", test[:n])):
        x = x.clone().requires_grad_(True)
        e = model.eval()(x)
        (grad,) = torch.autograd.grad(e.sum(), x)
        out[f"e_{name}"] = e.mean().item()
        out[f"grad_{name}"] = grad.flatten(1).norm(dim=1).mean().item()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=None, help="train.steps of every arm (default: the recipes')")
    p.add_argument("--curve", type=int, nargs="+", default=None, metavar="STEPS",
                   help="train each run in segments to these steps (ascending) and judge samples after each")
    p.add_argument("--n", type=int, default=500, help="samples per run, and test images of the reference")
    p.add_argument("--out", type=Path, default=None, help="runs folder (default runs/image-generation)")
    p.add_argument("--record", default=None, help="write benchmarks/records/NAME.json")
    p.add_argument("--quick", action="store_true", help="300 images, 4 steps, 40 samples: a smoke test")
    args = p.parse_args(argv)
    if len(set(args.seeds)) != len(args.seeds):
        raise SystemExit(f"--seeds: expected distinct seeds; got {args.seeds}")
    if args.curve is not None:
        if args.steps is not None:
            raise SystemExit("--curve: sets each segment's train.steps itself; drop --steps")
        if args.curve[0] < 1 or any(b <= a for a, b in zip(args.curve, args.curve[1:])):
            raise SystemExit(f"--curve: expected ascending step counts >= 1; got {' '.join(map(str, args.curve))}")
    small = ["vision.limit=300", "eval.sample_steps=3", "eval.n_samples=16", "vision.ood=[]",
             "data.n_test=200"] if args.quick else []
    # --quick: the arms' chains take 3 Langevin steps per update (recovery: per level), for a smoke test of minutes
    chains = ["objective.k=3"] if args.quick else []
    if args.quick:
        args.steps, args.n = (None if args.curve else 4), 40
    out = args.out or ROOT / "runs" / ("image-generation-quick" if args.quick else "image-generation")
    more = [f"train.steps={args.steps}"] if args.steps else []
    rec = Recorder(args.record, seeds=args.seeds, settings={
        "arms": {a: ARMS[a] for a in args.arms}, "steps": args.steps, "curve": args.curve, "n": args.n, "quick": args.quick,
        "judge": "classifier-mnist, seed 0", "threads": int(os.environ.get("OMP_NUM_THREADS", "0") or 0)}) \
        if args.record else None
    t0 = time.perf_counter()
    judge_run = train(out / "judge", "classifier-mnist", [*small, "train.steps=4"] if args.quick else [])
    judge = Judge(judge_run, args.n)
    floor = {"test": judge.judge(judge.train),
             "noise": judge.judge(noise_images(args.n, tuple(judge.test.shape[1:]), torch.Generator().manual_seed(0)))}
    per: dict[str, dict[int, dict[str, Any]]] = {a: {} for a in args.arms}
    curve: dict[str, dict[int, dict[int, dict[str, Any]]]] = {a: {} for a in args.arms}
    for seed in args.seeds:
        for arm in args.arms:
            recipe, overrides = ARMS[arm]
            C.note(f"[image_generation] {arm}, seed {seed}")
            t1 = time.perf_counter()
            for steps in args.curve or []:
                run = train(out / arm / f"seed{seed}", recipe, [*overrides, *small, *chains, f"train.steps={steps}",
                                                                 f"run.seed={seed}"], steps)
                curve[arm].setdefault(seed, {})[steps] = {
                    **judge.judge(samples(run, args.n, run / f"curve-step{steps}")),
                    "train_seconds": C.logged_seconds(run / "metrics.jsonl", until=steps)}
                if any(o.startswith("train.ema=") for o in overrides):  # the trained weights beside their average
                    curve[arm][seed][steps]["trained_weights"] = judge.judge(
                        samples(run, args.n, run / f"curve-step{steps}-trained", ("eval.ema=false",)))
                C.note(f"[image_generation] {arm}, seed {seed}, step {steps}: fd {curve[arm][seed][steps]['fd']:.4g}")
            if args.curve:  # the run's figures are its last segment's
                figures = {k: v for k, v in curve[arm][seed][args.curve[-1]].items() if k != "train_seconds"}
            else:
                run = train(out / arm / f"seed{seed}", recipe, [*overrides, *small, *chains, *more, f"run.seed={seed}"])
                figures = judge.judge(samples(run, args.n))
            per[arm][seed] = {**figures, "run": str(run.relative_to(ROOT) if run.is_relative_to(ROOT) else run),
                              "seconds": time.perf_counter() - t1,
                              "train_seconds": C.logged_seconds(run / "metrics.jsonl"),
                              "landscape": landscape(run, judge.test)}
    rows = [["training images", "-", *(f"{floor['test'][k]:.4g}" for k in FIGURES)],
            ["uniform noise", "-", *(f"{floor['noise'][k]:.4g}" for k in FIGURES)]]
    rows += [[a, str(s), *(f"{per[a][s][k]:.4g}" for k in FIGURES)] for a in per for s in args.seeds]
    print(C.format_table(["samples", "seed", *FIGURES], rows))
    shapes = [[a, str(s), *(f"{per[a][s]['landscape'][k]:.4g}" for k in LANDSCAPE)] for a in per for s in args.seeds
              if per[a][s]["landscape"] is not None]
    if shapes:
        print(C.format_table(["energy", "seed", *LANDSCAPE], shapes))
    if args.curve:
        print(C.format_table(["curve", "seed", "step", *FIGURES], [
            [a, str(s), str(t), *(f"{v[k]:.4g}" for k in FIGURES)]
            for a in curve for s in curve[a] for t, v in curve[a][s].items()]
            + [[f"{a} (trained weights)", str(s), str(t), *(f"{v['trained_weights'][k]:.4g}" for k in FIGURES)]
               for a in curve for s in curve[a] for t, v in curve[a][s].items() if "trained_weights" in v]))
    comparisons: dict[str, Any] = {}
    if len(args.seeds) > 1:
        first = args.arms[0]
        for arm in args.arms[1:]:
            for key, higher in (("confident", True), ("fd", False)):
                comparisons[f"{arm} - {first}: {key}"] = compare_over_seeds(
                    [per[arm][s][key] for s in args.seeds], [per[first][s][key] for s in args.seeds],
                    seeds=args.seeds, name_a=arm, name_b=first, metric=key, higher_is_better=higher).to_dict()
        for c in comparisons.values():
            print(c["sentence"])
    means = {a: {k: statistics.mean(per[a][s][k] for s in args.seeds) for k in FIGURES} for a in per}
    if rec is not None:
        rec.write({"floor": floor, "per_run": {a: {f"seed{s}": v for s, v in per[a].items()} for a in per},
                   "means": means, "comparisons": comparisons,
                   **({"curve": {a: {f"seed{s}": {str(t): v for t, v in c.items()} for s, c in curve[a].items()}
                                 for a in curve}} if args.curve else {})},
                  notes="Samples from noise of each arm's run, judged by the classifier-mnist network (seed 0): "
                        "confident = share with top class probability >= 0.9; class_entropy = entropy of the mean "
                        "posterior (nats; log 10 = 2.303 covers all digits); score = exp E KL(p(y|x) || p(y)); fd = "
                        "Fréchet distance of the classifier's pooled features against the same number of test "
                        "images; floor: training images and uniform noise judged the same way. seconds: this command's "
                        "train + sample (a run trained by an earlier command: its sampling only); train_seconds: "
                        "the training time its log records over every segment (resumes included), on a shared "
                        "2-core machine. landscape: the energy's mean and the mean L2 norm of its input gradient at 64 "
                        "uniform-noise and 64 test images (image energies E(x) only). curve (with --curve): the same figures of fresh "
                        "samples after each training segment of the same run, keyed by its step. comparisons: paired by seed, "
                        "95 % Student-t interval.")
    print(json.dumps({"bench": "image_generation", "seconds": round(time.perf_counter() - t0, 1),
                      "means": means}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

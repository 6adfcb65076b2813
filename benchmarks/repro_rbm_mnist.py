"""Binarised-MNIST RBM log-likelihoods, evaluated as in Salakhutdinov & Murray (2008).

Two models, trained here by contrastive divergence (:func:`ebms.fit.cd_update`)
on stochastically binarised MNIST (60,000 training, 10,000 test images, fixed seed):

1. **784-25 RBM, CD-1.** Test log-likelihood with the *exact* ``log Z`` (all ``2^25`` hidden
   states summed out) beside forward AIS (100 chains, the 14,500-temperature schedule, base-rate
   model from the training marginals) and reverse AIS started from *exact* model draws (taken from
   the same enumeration), which gives the AIS/reverse-AIS bracket.
2. **784-500 RBM, CD-k with k raised from 1 to 25** (the schedule of their "CD25(500)" model):
   forward AIS and reverse AIS (from long block-Gibbs chains: approximate draws).

The exact sum runs in float32 with the logsumexp in float64; the run recomputes the chunks holding
most of ``Z`` in float64 and reports the difference. AIS runs in float64 (its weight increments are
differences of nearly equal numbers).

Outputs: a table on stdout, the committed record ``benchmarks/records/repro_rbm_mnist.json``
(settings, wall times and every figure of the evaluation; :mod:`_record`), the per-epoch record
``benchmarks/results/repro_rbm_mnist.json`` (k, wall time and reconstruction error of every epoch;
not committed), the weights ``benchmarks/results/rbm_mnist_h{25,500}.safetensors`` (training record
in their metadata, so ``--eval-only`` redoes the evaluation without retraining), plots
``docs/img/rbm-mnist-*.png``, and one final JSON line. ``--quick`` (under a minute) keeps the
comparison with tiny settings (15 and 50 hidden units, 10,000 training images, 1,450 temperatures)
and writes everything, its record included, under ``benchmarks/results/quick/`` instead;
``--eval-only`` writes its record under ``benchmarks/results/records/`` (its training figures are
those stored with the weights).

``--curve`` instead trains the 784-500 RBM with **PCD-1** (100 persistent block-Gibbs chains, one
per batch row; Tieleman, 2008) for ``--curve-epochs`` (200) epochs, learning rate held at
``--curve-lr`` (0.01) for the first ``--curve-hold`` (0) of the updates and then falling linearly
to 0 at the last one, and every ``--curve-every`` (20) epochs (and at epochs 1 and 3) scores the
test set with forward AIS (100 chains, 1,450 temperatures, float64). Each point is appended to
``benchmarks/results/repro_rbm_mnist_curve.json`` as soon as it is measured; the plot is
``docs/img/rbm-mnist-curve.png`` and the committed record ``repro_rbm_mnist_curve`` holds the
points (other rates and holds add ``-lr<LR>-hold<H>`` to the file names and ``_lr<LR>_hold<H>``
to the record's). ``--curve-final`` adds one forward AIS with the full 14,500-temperature schedule
on the last weights. ``--curve --curve-bracket`` then runs forward and reverse AIS (14,500
temperatures, reverse from 5,000-sweep block-Gibbs chains) on the weights that curve run saved
(same settings, same machine: the weights are not committed), record ``repro_rbm_mnist_curve_bracket``.

Run: ``python benchmarks/repro_rbm_mnist.py [--quick] [--eval-only] [--epochs-big N]``, or
``python benchmarks/repro_rbm_mnist.py --curve [--curve-epochs N] [--curve-every E] [--curve-final]``,
then ``python benchmarks/repro_rbm_mnist.py --curve --curve-bracket``.
"""

from __future__ import annotations

import copy
import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import _common as C
import torch
from _record import RECORDS_DIR, Recorder
from safetensors.torch import load_file, save_file

from ebms.data.binarize import binarized_mnist
from ebms.estimators._base import Estimate
from ebms.estimators.ais import ais, ais_bracket, salakhutdinov_betas
from ebms.estimators.likelihood import log_likelihood_report
from ebms.fit import CDState, cd_update
from ebms.models.rbm import BernoulliRBM, marginal_logits
from ebms.spaces import Binary
from ebms.viz import image_grid, new_figure, save_figure

BENCH = "repro_rbm_mnist"
DOCS_IMG = Path(__file__).resolve().parent.parent / "docs" / "img"
AIS_CHAINS = 100


@dataclass
class TrainConfig:
    """How one RBM is trained (stored with its weights)."""

    n_hidden: int
    epochs: int
    k_final: int = 1  # k is 1 for the first `warm_epochs`, then rises linearly to k_final at the last epoch
    warm_epochs: int = 0
    learning_rate: float = 0.05
    batch_size: int = 100
    momentum_start: float = 0.5  # for the first `momentum_switch` epochs (Hinton, 2010, "A practical guide")
    momentum: float = 0.9
    momentum_switch: int = 5
    weight_decay: float = 2e-4
    n_train: int = 60000
    seed: int = 0

    def k_at(self, epoch: int) -> int:
        if self.k_final == 1 or epoch < self.warm_epochs:
            return 1
        ramp = self.epochs - self.warm_epochs
        if ramp <= 1:
            return self.k_final
        return round(1 + (self.k_final - 1) * (epoch - self.warm_epochs) / (ramp - 1))

    def momentum_at(self, epoch: int) -> float:
        return self.momentum_start if epoch < self.momentum_switch else self.momentum


def schedule(scale: int) -> torch.Tensor:
    """The Salakhutdinov–Murray schedule (``scale=1``: 14,500 steps) or the same shape with 1/scale the steps."""
    if scale == 1:
        return salakhutdinov_betas()
    parts = [torch.linspace(0.0, 0.5, 500 // scale + 1, dtype=torch.float64),
             torch.linspace(0.5, 0.9, 4000 // scale + 1, dtype=torch.float64)[1:],
             torch.linspace(0.9, 1.0, 10000 // scale + 1, dtype=torch.float64)[1:]]
    return torch.cat(parts)


# --- training -----------------------------------------------------------------------------------
def train(cfg: TrainConfig, x: torch.Tensor, base_logits: torch.Tensor) -> tuple[BernoulliRBM, dict[str, Any]]:
    g = torch.Generator().manual_seed(cfg.seed)
    model = BernoulliRBM(x.shape[1], cfg.n_hidden, generator=g)
    with torch.no_grad():
        model.visible_bias.copy_(base_logits)
    n = x.shape[0]
    n_batches = math.ceil(n / cfg.batch_size)
    state, epochs = CDState(), []
    t0 = time.perf_counter()
    for e in range(cfg.epochs):
        k, mom, te = cfg.k_at(e), cfg.momentum_at(e), time.perf_counter()
        for idx in torch.tensor_split(torch.randperm(n, generator=g), n_batches):
            state = cd_update(model, x.index_select(0, idx), learning_rate=cfg.learning_rate, k=k,
                              momentum=mom, weight_decay=cfg.weight_decay, state=state, generator=g)
        with torch.no_grad():
            probe = x[:1000]
            recon = float(((model.visible_mean(model.hidden_probs(probe)) - probe) ** 2).mean())
        epochs.append({"epoch": e + 1, "k": k, "momentum": mom, "wall_s": time.perf_counter() - te,
                       "recon_mse": recon})
        C.note(f"  H={cfg.n_hidden} epoch {e + 1}/{cfg.epochs} k={k} {epochs[-1]['wall_s']:.1f}s recon={recon:.4f}")
    record = {"config": asdict(cfg), "train_wall_s": time.perf_counter() - t0, "epochs": epochs,
              "updates": cfg.epochs * n_batches, "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    return model, record


def save_model(model: BernoulliRBM, record: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tensors = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(tensors, str(tmp), metadata={"train_record": json.dumps(record)})
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def load_model(path: Path) -> tuple[BernoulliRBM, dict[str, Any]]:
    if not path.exists():
        raise SystemExit(f"--eval-only: {path} not found; run once without --eval-only to train and save it")
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        record = json.loads(f.metadata()["train_record"])
    tensors = load_file(str(path))
    d, h = tensors["weight"].shape
    model = BernoulliRBM(d, h)
    model.load_state_dict(tensors)
    return model, record


# --- exact log Z and exact draws (hidden layer enumerated) ---------------------------------------
def exact_pass(model: BernoulliRBM, n_draws: int, g: torch.Generator, *, chunk: int = 1 << 13) -> dict[str, Any]:
    r"""``log Z = logsumexp_h [a^T h + sum_i softplus(b_i + (W h)_i)]`` over all ``2^H`` states, plus exact draws.

    The per-state terms are computed in float32 and kept (``2^H`` floats); the sum is in float64. The
    chunks holding most of ``Z`` are recomputed in float64 to measure the float32 error. Exact draws:
    ``h`` from the enumerated marginal (chunk, then state within it), then ``v ~ p(v | h)``.
    """
    H = model.n_hidden
    space = Binary(H)
    n_states = space.num_states
    chunk = min(chunk, n_states)
    lm = torch.empty(n_states, dtype=torch.float32)
    t0 = time.perf_counter()
    with torch.no_grad():
        i = 0
        for h in space.enumerate(chunk):
            lm[i : i + h.shape[0]] = model.hidden_log_marginal(h)
            i += h.shape[0]
    rows = lm.view(-1, chunk)
    row_tot = torch.logsumexp(rows.double(), 1)
    log_z = float(torch.logsumexp(row_tot, 0))
    wall = time.perf_counter() - t0
    powers = torch.arange(H - 1, -1, -1)

    def states(idx: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        return ((idx.unsqueeze(1) >> powers) & 1).to(dtype)

    # float64 check on the chunks with the largest mass
    top = torch.topk(row_tot, min(32, rows.shape[0])).indices
    m64 = copy.deepcopy(model).double()
    idx = (top.unsqueeze(1) * chunk + torch.arange(chunk)).flatten()
    with torch.no_grad():
        lm64 = m64.hidden_log_marginal(states(idx, torch.float64))
    sub32 = float(torch.logsumexp(rows[top].double().flatten(), 0))
    sub64 = float(torch.logsumexp(lm64, 0))
    check = {"chunks": int(top.numel()), "states": int(idx.numel()), "mass_fraction": math.exp(sub32 - log_z),
             "max_abs_term_diff": float((rows[top].double().flatten() - lm64).abs().max()),
             "subset_logsumexp_diff": sub32 - sub64}
    # exact draws
    r = torch.multinomial(torch.softmax(row_tot, 0), n_draws, replacement=True, generator=g)
    j = torch.stack([torch.multinomial(torch.softmax(rows[ri].double(), 0), 1, generator=g)[0] for ri in r])
    h = states(r * chunk + j, torch.float32)
    with torch.no_grad():
        v = model.sample_visible(h, g)
    return {"log_z": log_z, "wall_s": wall, "n_states": n_states, "float64_check": check, "draws": v}


def gibbs_chains(model: BernoulliRBM, v: torch.Tensor, sweeps: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """``sweeps`` block Gibbs sweeps from ``v``; returns the final states and their visible means ``E[v | h]``."""
    with torch.no_grad():
        for _ in range(sweeps):
            v = model.sample_visible(model.sample_hidden(v, g), g)
        return v, model.visible_mean(model.sample_hidden(v, g))


# --- evaluation --------------------------------------------------------------------------------
def ll_record(rep: Any) -> dict[str, Any]:
    return {"test_ll": rep.estimate, "stderr": rep.stderr, "lower": rep.lower, "upper": rep.upper,
            "log_z": rep.settings["log_z"], "log_z_stderr": rep.settings["log_z_stderr"], "text": str(rep)}


def ais_eval(model: BernoulliRBM, base_logits: torch.Tensor, betas: torch.Tensor, x_target: torch.Tensor,
             x_test: torch.Tensor, g: torch.Generator) -> tuple[dict[str, Any], Estimate]:
    t0 = time.perf_counter()
    est = ais_bracket(model.ais_path(base_logits), AIS_CHAINS, betas, x_target, z=2.0, generator=g)
    wall = time.perf_counter() - t0
    rep = log_likelihood_report(model, x_test, est)
    s = est.settings
    out = {**ll_record(rep), "ais_wall_s": wall, "n_chains": AIS_CHAINS, "n_reverse": s["n_reverse"],
           "num_steps": s["num_steps"], "log_z_forward": s["forward"], "log_z_forward_stderr": s["forward_stderr"],
           "log_z_forward_ess": s["forward_ess"], "log_z_reverse": s["reverse"],
           "log_z_reverse_stderr": s["reverse_stderr"], "log_z_reverse_ess": s["reverse_ess"], "gap": s["gap"],
           "log_z_bracket": [est.lower, est.upper]}
    return out, est


# --- committed record ----------------------------------------------------------------------------
def record_name(args: Any) -> str:
    """The committed record's name: ``repro_rbm_mnist``, ``..._curve`` or ``..._curve_bracket`` (+ curve settings)."""
    if not args.curve:
        return BENCH
    suffix = curve_suffix(args.curve_lr, args.curve_hold).replace("-", "_")
    return f"{BENCH}_curve{'_bracket' if args.curve_bracket else ''}{suffix}"


def record_dir(args: Any) -> Path:
    """``benchmarks/records`` for a full run; a git-ignored folder for ``--quick`` and ``--eval-only``."""
    if args.quick:
        return C.RESULTS_DIR / "quick" / "records"
    if args.eval_only:
        return C.RESULTS_DIR / "records"
    return RECORDS_DIR


def ais_figures(out: dict[str, Any]) -> dict[str, Any]:
    """The figures of one :func:`ais_eval` for the record: forward and reverse log Z, the brackets, the test LL."""
    return {"log_z_forward": out["log_z_forward"], "log_z_forward_stderr": out["log_z_forward_stderr"],
            "log_z_forward_ess": out["log_z_forward_ess"], "log_z_reverse": out["log_z_reverse"],
            "log_z_reverse_stderr": out["log_z_reverse_stderr"], "log_z_reverse_ess": out["log_z_reverse_ess"],
            "reverse_minus_forward": out["gap"], "log_z_bracket": out["log_z_bracket"],
            "test_ll": out["test_ll"], "test_ll_stderr": out["stderr"], "test_ll_bracket": [out["lower"], out["upper"]],
            "ais_wall_s": out["ais_wall_s"]}


def training_figures(tr: dict[str, Any]) -> dict[str, Any]:
    """Training summary for the record (the per-epoch list stays in ``benchmarks/results/``)."""
    epochs = tr["epochs"]
    by_k: dict[str, list[float]] = {}
    for e in epochs:
        by_k.setdefault(str(e["k"]), []).append(e["wall_s"])
    return {"epochs": len(epochs), "updates": tr["updates"], "train_wall_s": tr["train_wall_s"],
            "epoch_k_total": sum(e["k"] for e in epochs),
            "epoch_wall_s_by_k": {k: sum(v) / len(v) for k, v in by_k.items()},
            "final_recon_mse": epochs[-1]["recon_mse"]}


def curve_point_figures(pt: dict[str, Any]) -> dict[str, Any]:
    """One curve point for the record (no per-update data)."""
    keys = ("epoch", "train_steps", "lr", "test_ll", "stderr", "log_z", "log_z_stderr", "ais_ess",
            "ais_temperatures", "ais_wall_s")
    return {k: pt[k] for k in keys if k in pt}


# --- plots -------------------------------------------------------------------------------------
def plot_samples(panels: list[tuple[str, torch.Tensor]], path: Path) -> None:
    fig = new_figure((3.0 * len(panels), 3.4))
    for i, (title, imgs) in enumerate(panels):
        image_grid(imgs[:64].reshape(-1, 28, 28), 8, value_range=(0.0, 1.0), ax=fig.add_subplot(1, len(panels), i + 1),
                   title=title)
    save_figure(fig, path)


def plot_filters(model: BernoulliRBM, path: Path) -> None:
    w = model.weight.detach().T.reshape(-1, 28, 28)
    w = w / w.abs().amax((1, 2), keepdim=True)
    n = w.shape[0]
    fig = image_grid(w, math.ceil(math.sqrt(n)), value_range=(-1.0, 1.0),
                     title=f"784-{n} RBM filters (each scaled to its max |w|)")
    save_figure(fig, path)


def plot_loglik(small: dict[str, Any], big: dict[str, Any], path: Path) -> None:
    """Error bars: 2 standard errors of log Z only; the test-set term is the same for every point (stated)."""
    fig = new_figure((9.0, 4.0))
    ax = fig.add_subplot(1, 2, 1)
    ex, ai = small["exact"], small["ais"]
    ax.axhline(ex["test_ll"], color="k", ls=":", lw=1)
    ax.plot([0], [ex["test_ll"]], "o", color="k", label="exact log Z")
    ax.errorbar([1], [ai["test_ll"]], yerr=[2 * ai["log_z_stderr"]], fmt="s", color="C0", capsize=4,
                label="forward AIS (±2 se of log Z)")
    ax.vlines([1.15], ai["lower"], ai["upper"], color="C1", lw=4, label="AIS/reverse-AIS bracket")
    ax.set_xticks([0, 1], ["exact", "AIS"])
    ax.set_xlim(-0.6, 1.6)
    ax.set_title(f"784-{small['n_hidden']} RBM, CD-1: test LL (nats)\n(test-set se ±{ex['stderr']:.2f}, shared)",
                 fontsize=9)
    ax.legend(fontsize=7, loc="lower left")
    ax = fig.add_subplot(1, 2, 2)
    ai = big["ais"]
    ax.errorbar([0], [ai["test_ll"]], yerr=[2 * ai["log_z_stderr"]], fmt="s", color="C0", capsize=4,
                label="ours, forward AIS (±2 se of log Z)")
    ax.vlines([0.15], ai["lower"], ai["upper"], color="C1", lw=4, label="AIS/reverse-AIS bracket")
    ax.set_xticks([0], [f"784-{big['n_hidden']}"])
    ax.set_xlim(-0.6, 0.8)
    k = big["train"]["config"]["k_final"]
    ax.set_title(f"784-{big['n_hidden']} RBM, CD-k (k 1->{k}): test LL (nats)\n(test-set se ±{ai['stderr']:.2f})",
                 fontsize=9)
    ax.legend(fontsize=7, loc="center left")
    save_figure(fig, path)


# --- learning curve (PCD) ----------------------------------------------------------------------
def curve_lr(cfg: TrainConfig, step: int, total: int, hold_fraction: float = 0.5) -> float:
    """``cfg.learning_rate`` for the first ``hold_fraction`` of the ``total`` updates, then linearly to 0 at the last."""
    hold = int(total * hold_fraction)
    return cfg.learning_rate if step < hold else cfg.learning_rate * (total - step) / (total - hold)


def curve_suffix(lr: float, hold: float) -> str:
    """File-name suffix of a curve run: empty for the default budget (lr 0.01, decayed from the start), else its settings."""
    return "" if (lr, hold) == (0.01, 0.0) else f"-lr{lr:g}-hold{hold:g}"


def write_json(record: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True, default=str) + "\n")
    os.replace(tmp, path)


def curve_point(model: BernoulliRBM, base_logits: torch.Tensor, betas: torch.Tensor, x_test: torch.Tensor,
                g: torch.Generator) -> dict[str, Any]:
    """Forward AIS (``AIS_CHAINS`` chains, float64) and the test LL it gives."""
    t0 = time.perf_counter()
    est = ais(model.ais_path(base_logits), AIS_CHAINS, betas, generator=g).estimate
    rep = log_likelihood_report(model, x_test, est)
    return {"test_ll": rep.estimate, "stderr": rep.stderr, "log_z": est.estimate, "log_z_stderr": est.stderr,
            "ais_ess": est.ess, "ais_temperatures": len(betas) - 1, "ais_wall_s": time.perf_counter() - t0}


def plot_curve(points: list[dict[str, Any]], final: dict[str, Any] | None, path: Path, lr_schedule: str) -> None:
    fig = new_figure((6.0, 4.0))
    ax = fig.add_subplot(1, 1, 1)
    ep = [p["epoch"] for p in points]
    ax.errorbar(ep, [p["test_ll"] for p in points], yerr=[2 * p["stderr"] for p in points], fmt="o-", ms=3,
                capsize=2, label=f"PCD-1, forward AIS ({points[0]['ais_temperatures']} temps, ±2 se)")
    if final is not None:
        ax.errorbar([ep[-1]], [final["test_ll"]], yerr=[2 * final["stderr"]], fmt="s", color="C2", capsize=4,
                    label=f"last weights, {final['ais_temperatures']} temps")
    ax.set_xlabel("epoch (600 updates of 100 images)")
    ax.set_ylabel("test log-likelihood (nats)")
    ax.set_title(f"784-500 RBM on binarised MNIST, PCD-1: test LL during training\nlearning rate {lr_schedule}",
                 fontsize=8)
    ax.legend(fontsize=7, loc="best")
    save_figure(fig, path)


def run_curve(args: Any, x: torch.Tensor, x_test: torch.Tensor, base_logits: torch.Tensor, data: dict[str, Any],
              out_dir: Path, img_dir: Path, rec: Recorder) -> None:
    q = args.quick
    cfg = TrainConfig(n_hidden=50 if q else 500, epochs=args.curve_epochs or (2 if q else 200),
                      learning_rate=args.curve_lr, n_train=10000 if q else 60000, seed=args.seed + 3)
    hold, suffix = args.curve_hold, curve_suffix(args.curve_lr, args.curve_hold)
    if not 0.0 <= hold < 1.0 or not args.curve_lr > 0:
        raise SystemExit(f"--curve-hold must be in [0, 1) and --curve-lr > 0; got {hold} and {args.curve_lr}")
    every, betas = args.curve_every or (1 if q else 20), schedule(10)
    x = x[: cfg.n_train]
    n_batches = math.ceil(x.shape[0] / cfg.batch_size)
    total = cfg.epochs * n_batches
    g, g_ais = torch.Generator().manual_seed(cfg.seed), torch.Generator().manual_seed(args.seed + 4)
    model = BernoulliRBM(x.shape[1], cfg.n_hidden, generator=g)
    with torch.no_grad():
        model.visible_bias.copy_(base_logits)
    path = out_dir / f"{BENCH}_curve{suffix}.json"
    record: dict[str, Any] = {
        "bench": BENCH + "_curve", "quick": q, "machine": C.machine_info(), "data": data, "config": asdict(cfg),
        "method": "PCD-1: one block-Gibbs sweep per update on 100 persistent chains (one per batch row)",
        "lr_schedule": f"{cfg.learning_rate} for updates [0, {int(total * hold)}), then linear to 0 at update {total}",
        "updates_per_epoch": n_batches, "total_updates": total, "eval_every_epochs": every,
        "ais": {"chains": AIS_CHAINS, "temperatures": len(betas) - 1, "dtype": "float64", "base": "training marginals"},
        "points": [], "final": None, "complete": False}
    train_s, step, state = 0.0, 0, CDState()
    C.note(f"curve: 784-{cfg.n_hidden} PCD-1, {cfg.epochs} epochs ({total} updates), AIS every {every} epochs")
    for e in range(cfg.epochs):
        t0 = time.perf_counter()
        for idx in torch.tensor_split(torch.randperm(x.shape[0], generator=g), n_batches):
            state = cd_update(model, x.index_select(0, idx), learning_rate=curve_lr(cfg, step, total, hold), k=1,
                              persistent=True, momentum=cfg.momentum_at(e), weight_decay=cfg.weight_decay,
                              state=state, generator=g)
            step += 1
        train_s += time.perf_counter() - t0
        if (e + 1) % every and e + 1 not in (1, 3, cfg.epochs):
            continue
        pt = {"epoch": e + 1, "train_steps": step, "train_wall_s": train_s, "lr": curve_lr(cfg, step, total, hold),
              **curve_point(model, base_logits, betas, x_test, g_ais)}
        pt["wall_s"] = time.perf_counter() - args.t_start
        record["points"].append(pt)
        if not args.no_save:
            write_json(record, path)
        C.note(f"  epoch {e + 1}: test LL {pt['test_ll']:.2f} ± {pt['stderr']:.2f} (ESS {pt['ais_ess']:.1f}), "
                f"train {train_s:.0f} s, total {pt['wall_s']:.0f} s")
    if args.curve_final:
        final = {"epoch": cfg.epochs, **curve_point(model, base_logits, schedule(1), x_test, g_ais)}
        record["final"] = final
        C.note(f"  final AIS ({final['ais_temperatures']} temps): {final['test_ll']:.2f} ± {final['stderr']:.2f}")
    record.update({"complete": True, "total_wall_s": time.perf_counter() - args.t_start})
    if not args.no_save:
        write_json(record, path)
        save_model(model, {"config": asdict(cfg), "method": record["method"], "lr_schedule": record["lr_schedule"],
                           "train_wall_s": train_s, "updates": total,
                           "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
                   out_dir / f"rbm_mnist_h{cfg.n_hidden}_pcd{suffix}.safetensors")
        plot_curve(record["points"], record["final"], img_dir / f"rbm-mnist-curve{suffix}.png", record["lr_schedule"])
    rec.settings.update({"model": f"784-{cfg.n_hidden} Bernoulli RBM", "config": asdict(cfg), "method": record["method"],
                         "lr_schedule": record["lr_schedule"], "eval_every_epochs": every, "ais": record["ais"],
                         "final_ais_temperatures": None if record["final"] is None else record["final"]["ais_temperatures"],
                         "data": data, "n_test": x_test.shape[0]})
    rec.write({"updates": total, "updates_per_epoch": n_batches, "train_wall_s": train_s,
               "train_s_per_epoch": train_s / cfg.epochs, "total_wall_s": record["total_wall_s"],
               "points": [curve_point_figures(p) for p in record["points"]],
               "final": None if record["final"] is None else curve_point_figures(record["final"])},
              notes="Test log-likelihood of the 784-500 RBM during PCD-1 training, from forward AIS only (a stochastic "
                    "lower bound on log Z, so each point overstates the test LL in expectation); 'final' is one "
                    "forward AIS with the 14,500-temperature schedule on the last weights. 'lr' is the learning "
                    "rate after the point's last update. The weights go to benchmarks/results/ (not committed) "
                    "for the --curve-bracket run.",
              directory=record_dir(args), enabled=not args.no_save)
    last = record["points"][-1]
    C.emit_final_line({"bench": BENCH + "_curve", "quick": q, "epochs": cfg.epochs, "updates": total,
                       "test_ll": last["test_ll"], "test_ll_stderr": last["stderr"],
                       "final_test_ll": None if record["final"] is None else record["final"]["test_ll"],
                       "total_wall_s": record["total_wall_s"]})


# --- main --------------------------------------------------------------------------------------
def bracket_curve(args: Any, x_test: torch.Tensor, base_logits: torch.Tensor, sweeps: int, out_dir: Path,
                  rec: Recorder) -> None:
    """Forward and reverse AIS (14,500 temperatures) on a finished curve run's saved weights.

    Reverse AIS starts from ``sweeps`` block-Gibbs sweeps run from 100 random test images (approximate
    model draws, as for the CD-k model), so its end of the bracket is approximate too.
    """
    suffix = curve_suffix(args.curve_lr, args.curve_hold)
    n_hidden = 50 if args.quick else 500
    model, tr = load_model(out_dir / f"rbm_mnist_h{n_hidden}_pcd{suffix}.safetensors")
    path = out_dir / f"{BENCH}_curve{suffix}.json"
    record = json.loads(path.read_text())
    g = torch.Generator().manual_seed(args.seed + 5)
    t0 = time.perf_counter()
    start = x_test[torch.randperm(x_test.shape[0], generator=g)[:AIS_CHAINS]]
    chain_v, _ = gibbs_chains(model, start, sweeps, g)
    chain_wall = time.perf_counter() - t0
    out, _ = ais_eval(model, base_logits, schedule(10 if args.quick else 1), chain_v, x_test, g)
    record["bracket"] = {**out, "reverse_ais_start": f"{sweeps} block Gibbs sweeps from {AIS_CHAINS} random test "
                                                      f"images ({chain_wall:.1f} s)"}
    if not args.no_save:
        write_json(record, path)
    rec.settings.update({"weights": f"rbm_mnist_h{n_hidden}_pcd{suffix}.safetensors (benchmarks/results/, written by "
                                    f"the curve run with the same --curve-lr/--curve-hold)",
                         "weights_finished_utc": tr["finished_utc"], "weights_updates": tr["updates"],
                         "weights_lr_schedule": tr.get("lr_schedule"), "ais_chains": AIS_CHAINS,
                         "ais_temperatures": out["num_steps"], "reverse_start_sweeps": sweeps,
                         "reverse_start": f"{sweeps} block-Gibbs sweeps from {AIS_CHAINS} random test images",
                         "bracket_z": 2.0, "n_test": x_test.shape[0]})
    rec.write({**ais_figures(out), "chain_wall_s": chain_wall},
              notes="Forward AIS and reverse AIS on the final weights of the curve run. Reverse AIS starts from "
                    "block-Gibbs chains, not exact draws, so its end of the bracket is approximate. Each bracket "
                    "end is widened by 2 standard errors.",
              directory=record_dir(args), enabled=not args.no_save)
    C.note(f"bracket on {tr['updates']} updates: {out['text']}")
    C.emit_final_line({"bench": BENCH + "_curve_bracket", "quick": args.quick, "test_ll": out["test_ll"],
                       "test_ll_bracket": [out["lower"], out["upper"]], "gap": out["gap"]})


def add_args(p: Any) -> None:
    p.add_argument("--eval-only", action="store_true", help="load the saved weights instead of training")
    p.add_argument("--epochs-small", type=int, default=None, help="epochs of the 25-hidden RBM (default 50)")
    p.add_argument("--epochs-big", type=int, default=None, help="epochs of the 500-hidden RBM (default 36)")
    p.add_argument("--warm-big", type=int, default=None, help="CD-1 epochs before k ramps to 25 (default 12)")
    p.add_argument("--sweeps", type=int, default=None, help="block Gibbs sweeps of the sample chains (default 5000)")
    p.add_argument("--seed", type=int, default=0, help="seed of binarisation, training and AIS")
    p.add_argument("--curve", action="store_true", help="PCD learning curve of the 784-500 RBM instead")
    p.add_argument("--curve-epochs", type=int, default=None, help="epochs of the curve run (default 200)")
    p.add_argument("--curve-every", type=int, default=None, help="AIS every this many epochs (default 20)")
    p.add_argument("--curve-final", action="store_true", help="end with one 14,500-temperature AIS")
    p.add_argument("--curve-bracket", action="store_true",
                   help="with --curve: forward + reverse AIS on the saved weights of that curve run (no training)")
    p.add_argument("--curve-lr", type=float, default=0.01, help="curve: learning rate before the decay (default 0.01)")
    p.add_argument("--curve-hold", type=float, default=0.0,
                   help="curve: fraction of the updates at the full rate before the linear decay to 0 (default 0)")


def main() -> None:
    args = C.parse_args(__doc__.splitlines()[0], add_args)
    rec = Recorder(record_name(args), seeds=[args.seed], settings={"quick": args.quick})
    t_start = time.perf_counter()
    q = args.quick
    out_dir = C.RESULTS_DIR / "quick" if q else C.RESULTS_DIR
    img_dir = out_dir if q else DOCS_IMG
    small_cfg = TrainConfig(n_hidden=15 if q else 25, epochs=args.epochs_small or (2 if q else 50),
                            n_train=10000 if q else 60000, seed=args.seed)
    big_cfg = TrainConfig(n_hidden=50 if q else 500, epochs=args.epochs_big or (2 if q else 36),
                          k_final=3 if q else 25, warm_epochs=args.warm_big if args.warm_big is not None else (1 if q else 12),
                          n_train=10000 if q else 60000, seed=args.seed + 1)
    sweeps = args.sweeps or (300 if q else 5000)
    betas = schedule(10 if q else 1)

    x, _, data_settings = binarized_mnist("train", seed=args.seed)
    x_test, _, _ = binarized_mnist("test", seed=args.seed)
    base_logits = marginal_logits(x)  # AIS base rates and initial visible biases: all 60k training images
    if args.curve and args.curve_bracket:
        bracket_curve(args, x_test, base_logits, sweeps, out_dir, rec)
        return
    if args.curve:
        args.t_start = t_start
        run_curve(args, x, x_test, base_logits, data_settings, out_dir, img_dir, rec)
        return
    x = x[: small_cfg.n_train]
    record: dict[str, Any] = {"bench": BENCH, "quick": q, "machine": C.machine_info(), "data": data_settings,
                              "n_train": x.shape[0], "n_test": x_test.shape[0], "ais_chains": AIS_CHAINS,
                              "ais_temperatures": len(betas) - 1}
    models = {}
    for name, cfg in (("small", small_cfg), ("big", big_cfg)):
        path = out_dir / f"rbm_mnist_h{cfg.n_hidden}.safetensors"
        if args.eval_only:
            model, tr = load_model(path)
            C.note(f"loaded {path} (trained {tr['finished_utc']}, {tr['train_wall_s']:.0f} s)")
        else:
            C.note(f"training 784-{cfg.n_hidden} RBM: {cfg}")
            model, tr = train(cfg, x, base_logits)
            if not args.no_save:
                save_model(model, tr, path)
        models[name] = (model, tr, path)

    g = torch.Generator().manual_seed(args.seed + 2)
    # 1. small RBM: exact vs AIS
    small, tr_small, path_small = models["small"]
    ex = exact_pass(small, AIS_CHAINS, g)
    rep_exact = log_likelihood_report(small, x_test, Estimate(ex["log_z"], exact=True, settings={"method": "exact"}))
    if q:  # the script's enumeration is the sum BernoulliRBM.log_partition computes: check on the quick model
        ex["library_log_partition"] = small.log_partition()
    ais_small, est_small = ais_eval(small, base_logits, betas, ex["draws"], x_test, g)
    _, small_chain_mean = gibbs_chains(small, torch.bernoulli(torch.sigmoid(base_logits).expand(64, -1), generator=g),
                                       sweeps, g)
    with torch.no_grad():
        train_ll_small = float((-small(x) - ex["log_z"]).mean())
    res_small = {"n_hidden": small.n_hidden, "train": tr_small, "weights": str(path_small),
                 "exact": {**ll_record(rep_exact), "exact_wall_s": ex["wall_s"], "n_states": ex["n_states"],
                           "float64_check": ex["float64_check"], "train_ll": train_ll_small,
                           **({"library_log_partition": ex["library_log_partition"]} if q else {})},
                 "ais": ais_small,
                 "ais_log_z_error": ais_small["log_z_forward"] - ex["log_z"],
                 "ais_log_z_error_in_stderr": (ais_small["log_z_forward"] - ex["log_z"]) / max(ais_small["log_z_forward_stderr"], 1e-12),
                 "bracket_contains_exact": est_small.lower <= ex["log_z"] <= est_small.upper}

    # 2. big RBM: forward AIS and reverse AIS from long Gibbs chains
    big, tr_big, path_big = models["big"]
    t0 = time.perf_counter()
    start = x_test[torch.randperm(x_test.shape[0], generator=g)[:AIS_CHAINS]]
    big_chain_v, big_chain_mean = gibbs_chains(big, start, sweeps, g)
    chain_wall = time.perf_counter() - t0
    ais_big, _ = ais_eval(big, base_logits, betas, big_chain_v, x_test, g)
    res_big = {"n_hidden": big.n_hidden, "train": tr_big, "weights": str(path_big), "ais": ais_big,
               "reverse_ais_start": f"{sweeps} block Gibbs sweeps from {AIS_CHAINS} random test images ({chain_wall:.1f} s)",
               "chain_wall_s": chain_wall, "max_abs_weight": float(big.weight.detach().abs().max())}
    record.update({"small": res_small, "big": res_big, "sample_sweeps": sweeps})

    # plots
    if not args.no_save:
        plot_samples([("training data", x[:64]), (f"784-{small.n_hidden}: exact draws", ex["draws"]),
                      (f"784-{small.n_hidden}: Gibbs, mean", small_chain_mean),
                      (f"784-{big.n_hidden}: Gibbs, mean", big_chain_mean)], img_dir / "rbm-mnist-samples.png")
        plot_filters(small, img_dir / "rbm-mnist-filters.png")
        plot_loglik(res_small, res_big, img_dir / "rbm-mnist-loglik.png")
    record["total_wall_s"] = time.perf_counter() - t_start

    rows = [[f"784-{small.n_hidden} CD-1", "exact", rep_exact.estimate, rep_exact.stderr, ex["log_z"], None, "-"],
            [f"784-{small.n_hidden} CD-1", "AIS", ais_small["test_ll"], ais_small["stderr"], ais_small["log_z_forward"],
             ais_small["log_z_forward_stderr"], f"[{ais_small['lower']:.2f}, {ais_small['upper']:.2f}]"],
            [f"784-{big.n_hidden} CD-k", "AIS", ais_big["test_ll"], ais_big["stderr"], ais_big["log_z_forward"],
             ais_big["log_z_forward_stderr"], f"[{ais_big['lower']:.2f}, {ais_big['upper']:.2f}]"]]
    print(C.format_table(["model", "log Z", "test LL", "stderr", "log Z est", "log Z se", "LL bracket"], rows))
    rec.settings.update({"data": data_settings, "n_train": x.shape[0], "n_test": x_test.shape[0],
                         "small": asdict(small_cfg), "big": asdict(big_cfg), "ais_chains": AIS_CHAINS,
                         "ais_temperatures": len(betas) - 1, "sample_sweeps": sweeps, "bracket_z": 2.0})
    rec.write({"small": {"n_hidden": small.n_hidden, "training": training_figures(tr_small),
                         "exact": {"log_z": ex["log_z"], "test_ll": rep_exact.estimate, "test_ll_stderr": rep_exact.stderr,
                                   "train_ll": train_ll_small, "wall_s": ex["wall_s"], "n_states": ex["n_states"],
                                   "float64_check": ex["float64_check"]},
                         "ais": ais_figures(ais_small), "ais_log_z_error": res_small["ais_log_z_error"],
                         "ais_log_z_error_in_stderr": res_small["ais_log_z_error_in_stderr"],
                         "bracket_contains_exact": res_small["bracket_contains_exact"]},
               "big": {"n_hidden": big.n_hidden, "training": training_figures(tr_big),
                       "max_abs_weight": res_big["max_abs_weight"], "ais": ais_figures(ais_big),
                       "reverse_chain_wall_s": chain_wall},
               "total_wall_s": record["total_wall_s"]},
              notes="784-25: exact log Z (all 2^25 hidden states) against forward AIS and reverse AIS from exact "
                    "draws. 784-500 (CD-1, then k rising to 25): forward AIS and reverse AIS from block-Gibbs chains "
                    "(approximate draws, so the upper end is approximate). Test LL = -mean F(x) - log Z over the "
                    "10,000 test images; its stderr combines the test-set and log Z errors. With --eval-only the "
                    "training figures are those stored with the weights.",
              directory=record_dir(args), enabled=not args.no_save)
    if not args.no_save:
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / f"{BENCH}.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(record, indent=2, sort_keys=True, default=str) + "\n")
        os.replace(tmp, path)
    C.emit_final_line({
        "bench": BENCH, "quick": q,
        "small_hidden": small.n_hidden, "small_test_ll_exact": rep_exact.estimate, "small_test_ll_exact_stderr": rep_exact.stderr,
        "small_test_ll_ais": ais_small["test_ll"], "small_test_ll_ais_stderr": ais_small["stderr"],
        "small_test_ll_bracket": [ais_small["lower"], ais_small["upper"]], "small_log_z_exact": ex["log_z"],
        "small_log_z_ais": ais_small["log_z_forward"], "small_log_z_ais_stderr": ais_small["log_z_forward_stderr"],
        "small_bracket_contains_exact": res_small["bracket_contains_exact"],
        "big_hidden": big.n_hidden, "big_test_ll_ais": ais_big["test_ll"], "big_test_ll_ais_stderr": ais_big["stderr"],
        "big_test_ll_bracket": [ais_big["lower"], ais_big["upper"]],
        "big_train_wall_s": tr_big["train_wall_s"], "big_epochs": tr_big["config"]["epochs"],
        "total_wall_s": record["total_wall_s"],
    })


if __name__ == "__main__":
    main()

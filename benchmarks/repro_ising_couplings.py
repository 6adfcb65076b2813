r"""Learning lattice Ising couplings with PCD: Gibbs-with-Gradients against random-scan Gibbs.

The experiment of Grathwohl et al. (2021), "Oops I took a gradient: scalable sampling for discrete
distributions" (ICML), section on training Ising models: draw data from a periodic ``L x L`` lattice
Ising model with known couplings, fit a model with one learnable coupling per edge by persistent
contrastive divergence (PCD), and track how far the learned couplings are from the true ones,

.. math::  \log \mathrm{RMSE} = \log \sqrt{\tfrac{1}{2N} \textstyle\sum_{e} (\hat J_e - J_e)^2}
           \qquad (2N \text{ edges of the } N = L^2 \text{ sites}),

when the PCD negatives come from either sampler **at equal numbers of sampler steps**:

* a *sampler step* is one single-site update (or proposal) per chain;
* Gibbs-with-Gradients (:class:`ebms.samplers.gwg.GibbsWithGradients`) makes one gradient-informed
  flip proposal per step, so ``K`` steps per training iteration are ``K`` GwG transitions;
* random-scan Gibbs makes one exact conditional draw at a uniformly chosen site per step:
  ``Gibbs(scan="random", updates=K)`` runs ``K`` such updates per call (with ``K = N`` it is one
  ordinary sweep).

Everything else is identical for both samplers and both sizes: data (``n`` draws by long-run block
Gibbs, :func:`ebms.samplers.model_samples`, fixed seed), the model's initial couplings, the PCD
buffer (:class:`~ebms.objectives.ReplayBuffer`, one slot per batch row, no re-initialisation), the
loss (:class:`~ebms.objectives.PersistentContrastiveDivergence`), Adam and its learning rate, the
data batches and the seeds.

The two samplers are compared over the training seeds (same data, same initial couplings and
batches per seed) with :func:`ebms.metrics.compare_over_seeds`: the paired difference of the final
log-RMSE (and of its mean over the last quarter of the curve), GwG − Gibbs, with its Student-t
interval and verdict, per lattice and ``K``; and Gibbs with the largest ``K`` against GwG with the
smallest, on log-RMSE and on training wall time.

Outputs: a table on stdout, the committed record ``benchmarks/records/repro_ising_couplings.json``
(settings, the data checks, per-configuration summaries over seeds and the comparisons; no
curves), ``benchmarks/results/repro_ising_couplings.json`` (every curve; not committed), the plot
``docs/img/ising-couplings-logrmse.png`` and one final JSON line. Default: both sizes, ``K = 10``
and ``50`` steps per iteration, 800 iterations, 5 training seeds, 2,000 data points (about
15 minutes on one idle core). ``--quick`` (about 10 s) keeps the same comparison on both sizes with
``K = 10``, 60 iterations, one seed, 500 data points and a batch of 128, and writes everything, its
record included, under ``benchmarks/results/quick/`` instead (too short for the couplings to get
near the truth).

Run: ``python benchmarks/repro_ising_couplings.py [--quick] [--iters N] [--steps 10,50] [--seeds 5]``.
"""

from __future__ import annotations

import math
import time
from typing import Any

import _common as C
import torch
from _record import RECORDS_DIR, Recorder
from torch import Tensor

from ebms.metrics import compare_over_seeds
from ebms.models.ising import IsingModel
from ebms.objectives.buffer import ReplayBuffer
from ebms.objectives.cd import PersistentContrastiveDivergence
from ebms.samplers import model_samples
from ebms.samplers.block_gibbs import BlockGibbs
from ebms.samplers.gibbs import Gibbs
from ebms.samplers.gwg import GibbsWithGradients

BENCH = "repro_ising_couplings"
DOCS_IMG = C.RESULTS_DIR.parent.parent / "docs" / "img"


def edge_stats(x: Tensor) -> tuple[float, float]:
    """Mean nearest-neighbour correlation ``<x_i x_j>`` over all edges and mean ``|magnetisation|``."""
    corr = 0.5 * ((x * x.roll(-1, 2)).mean() + (x * x.roll(-1, 1)).mean())
    return float(corr), float(x.mean((1, 2)).abs().mean())


def make_data(L: int, coupling: float, n: int, sweeps: int, extra: int, seed: int) -> tuple[Tensor, dict[str, Any]]:
    """``n`` draws from the true model, and a stationarity check: statistics after ``extra`` more sweeps."""
    true = IsingModel.lattice(L, L, coupling=coupling, boundary="periodic")
    t0 = time.perf_counter()
    data = model_samples(true, n, sweeps=sweeps, seed=seed)
    wall = time.perf_counter() - t0
    later = BlockGibbs().sample(true, data.x, extra, generator=torch.Generator().manual_seed(seed + 1))
    c0, m0 = edge_stats(data.x)
    c1, m1 = edge_stats(later)
    info = dict(
        data.settings,
        coupling=coupling,
        wall_s=wall,
        edge_corr=c0,
        abs_mag=m0,
        check_extra_sweeps=extra,
        edge_corr_after_extra=c1,
        abs_mag_after_extra=m1,
    )
    return data.x, info


def log_rmse(model: IsingModel, coupling: float) -> float:
    right, down = model.edge_couplings()
    err = torch.cat([right.reshape(-1), down.reshape(-1)]).detach() - coupling
    return 0.5 * math.log(float(err.pow(2).mean()))


def train(
    L: int,
    data: Tensor,
    coupling: float,
    sampler_name: str,
    k: int,
    seed: int,
    *,
    iters: int,
    batch: int,
    lr: float,
    init_std: float,
    eval_every: int,
) -> dict[str, Any]:
    """PCD training of per-edge couplings; returns the log-RMSE curve (iterations and training wall time)."""
    g = torch.Generator().manual_seed(seed)
    right, down = (init_std * torch.randn(L, L, generator=g) for _ in range(2))
    model = IsingModel.lattice(L, L, coupling=(right, down), boundary="periodic", learn_couplings=True)
    if sampler_name == "gwg":
        sampler, steps = GibbsWithGradients(temperature=2.0), k  # k GwG transitions
    else:
        sampler, steps = Gibbs("random", updates=k), 1  # one step of k single-site updates
    pcd = PersistentContrastiveDivergence(sampler, ReplayBuffer(batch, model.space, reinit_prob=0.0), k=steps)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    n = data.shape[0]
    perm, pos = torch.randperm(n, generator=g), 0
    curve_it, curve_lr, curve_wall, accepts = [0], [log_rmse(model, coupling)], [0.0], []
    wall = 0.0
    for it in range(1, iters + 1):
        if pos + batch > n:  # shuffled epochs, last partial batch dropped
            perm, pos = torch.randperm(n, generator=g), 0
        x = data[perm[pos : pos + batch]]
        pos += batch
        t0 = time.perf_counter()
        out = pcd(model, x, generator=g)
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        opt.step()
        wall += time.perf_counter() - t0
        accepts.append(out.metrics["accept"])
        if it % eval_every == 0 or it == iters:
            curve_it.append(it)
            curve_lr.append(log_rmse(model, coupling))
            curve_wall.append(wall)
    r, d = model.edge_couplings()
    learned = torch.cat([r.reshape(-1), d.reshape(-1)]).detach()
    return {
        "size": L,
        "sampler": sampler_name,
        "steps_per_iter": k,
        "seed": seed,
        "iters": curve_it,
        "log_rmse": curve_lr,
        "wall_s": curve_wall,
        "final_log_rmse": curve_lr[-1],
        "train_wall_s": wall,
        "tail_log_rmse": sum(curve_lr[-(len(curve_lr) // 4) :]) / (len(curve_lr) // 4),
        "mean_accept": sum(accepts) / len(accepts),
        "learned_mean": float(learned.mean()),
        "learned_std": float(learned.std()),
        "curve_min": min(curve_lr),
        "after_min_max": max(curve_lr[curve_lr.index(min(curve_lr)):]),
    }


def _stats(values: list[float]) -> dict[str, Any]:
    return {"per_seed": values, "mean": sum(values) / len(values), "min": min(values), "max": max(values)}


def summarise(runs: list[dict[str, Any]], sizes: list[int], ks: list[int], seeds: list[int]) -> dict[str, Any]:
    """Per-configuration summaries over seeds and the paired comparisons (the committed record's figures).

    For each lattice ``L`` and ``K``: per-seed final and last-quarter log-RMSE, training wall time,
    acceptance, curve minimum, the highest point after it, and the learned couplings' mean and spread
    over edges; then ``compare_over_seeds`` of GwG against Gibbs (lower log-RMSE is better), and of
    Gibbs at the largest ``K`` against GwG at the smallest (log-RMSE and training wall time).
    """

    def sel(L: int, k: int, s: str) -> list[dict[str, Any]]:
        got = {r["seed"]: r for r in runs if r["size"] == L and r["steps_per_iter"] == k and r["sampler"] == s}
        return [got[seed] for seed in seeds]

    configs: dict[str, Any] = {}
    comparisons: dict[str, Any] = {}
    for L in sizes:
        for k in ks:
            for s in ("gwg", "gibbs"):
                rs = sel(L, k, s)
                configs[f"{L}x{L}/K={k}/{s}"] = {
                    key: _stats([r[key] for r in rs])
                    for key in ("final_log_rmse", "tail_log_rmse", "train_wall_s", "mean_accept", "curve_min",
                                "after_min_max", "learned_mean", "learned_std")
                }
            for metric, label in (("final_log_rmse", "final log-RMSE"), ("tail_log_rmse", "last-quarter log-RMSE")):
                comparisons[f"{L}x{L}/K={k}/{metric}"] = compare_over_seeds(
                    [r[metric] for r in sel(L, k, "gwg")], [r[metric] for r in sel(L, k, "gibbs")], seeds=seeds,
                    name_a="GwG", name_b="Gibbs", metric=f"{label} of the couplings, {L}x{L}, K={k}",
                    higher_is_better=False).to_dict()
        if len(ks) > 1:
            lo, hi = min(ks), max(ks)
            for metric, label in (("final_log_rmse", "final log-RMSE"), ("train_wall_s", "training wall time (s)")):
                comparisons[f"{L}x{L}/gibbs K={hi} vs gwg K={lo}/{metric}"] = compare_over_seeds(
                    [r[metric] for r in sel(L, hi, "gibbs")], [r[metric] for r in sel(L, lo, "gwg")], seeds=seeds,
                    name_a=f"Gibbs K={hi}", name_b=f"GwG K={lo}", metric=f"{label}, {L}x{L}",
                    higher_is_better=False).to_dict()
    return {"configs": configs, "comparisons": comparisons}


def plot(runs: list[dict[str, Any]], sizes: list[int], ks: list[int], path: Any, coupling: float) -> None:
    from ebms.viz.figure import new_figure, save_figure

    fig = new_figure((10.0, 4.2 * len(sizes)))
    colours = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple"]
    style = {"gwg": "-", "gibbs": "--"}
    label = {"gwg": "Gibbs-with-Gradients", "gibbs": "random-scan Gibbs"}
    for row, L in enumerate(sizes):
        ax_it = fig.add_subplot(len(sizes), 2, 2 * row + 1)
        ax_w = fig.add_subplot(len(sizes), 2, 2 * row + 2)
        for ci, k in enumerate(ks):
            for s in ("gwg", "gibbs"):
                sel = [r for r in runs if r["size"] == L and r["steps_per_iter"] == k and r["sampler"] == s]
                for j, r in enumerate(sel):
                    lab = f"{label[s]}, K={k}" if j == 0 else None
                    kw = {"color": colours[ci % len(colours)], "ls": style[s], "lw": 1.3, "alpha": 0.85}
                    ax_it.plot(r["iters"], r["log_rmse"], label=lab, **kw)
                    ax_w.plot(r["wall_s"], r["log_rmse"], **kw)
        ax_it.set_title(f"{L}x{L} periodic lattice, true coupling {coupling:g}")
        ax_it.set_xlabel("training iteration")
        ax_w.set_xlabel("training wall time (s, 1 thread)")
        ax_w.set_title(f"{L}x{L}: same runs against wall time")
        for ax in (ax_it, ax_w):
            ax.set_ylabel("log RMSE of couplings")
            ax.grid(alpha=0.3)
        ax_it.legend(fontsize=8)
    save_figure(fig, path)


def main() -> None:
    def add(p: Any) -> None:
        p.add_argument("--iters", type=int, default=None, help="training iterations per run")
        p.add_argument("--steps", type=str, default=None, help="sampler steps per iteration, comma-separated")
        p.add_argument("--seeds", type=int, default=None, help="training seeds per configuration (default 5)")
        p.add_argument("--coupling", type=float, default=0.4, help="true coupling of every edge")
        p.add_argument("--lr", type=float, default=3e-3, help="Adam learning rate")

    args = C.parse_args(__doc__.splitlines()[0], add)
    rec = Recorder(BENCH)
    q = args.quick
    sizes = [10, 25]
    ks = [int(s) for s in args.steps.split(",")] if args.steps else ([10] if q else [10, 50])
    iters = args.iters or (60 if q else 800)
    seeds = args.seeds or (1 if q else 5)
    n_data, batch = (500, 128) if q else (2000, 256)
    sweeps, extra = (50, 10) if q else (400, 100)
    cfg = {
        "sizes": sizes,
        "steps_per_iter": ks,
        "iters": iters,
        "seeds": list(range(seeds)),
        "coupling": args.coupling,
        "boundary": "periodic",
        "n_data": n_data,
        "batch": batch,
        "buffer": batch,
        "reinit_prob": 0.0,
        "optimizer": "Adam",
        "lr": args.lr,
        "init_std": 0.01,
        "gwg_temperature": 2.0,
        "eval_every": max(1, iters // 40),
        "data_sweeps": sweeps,
        "data_seed": 0,
    }
    out_dir = C.RESULTS_DIR / "quick" if q else C.RESULTS_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    img = (out_dir if q else DOCS_IMG) / "ising-couplings-logrmse.png"
    t_start = time.perf_counter()
    record: dict[str, Any] = {"bench": BENCH, "quick": q, "config": cfg, "machine": C.machine_info()}

    runs: list[dict[str, Any]] = []
    record["data"] = {}
    for L in sizes:
        data, info = make_data(L, args.coupling, n_data, sweeps, extra, seed=0)
        record["data"][str(L)] = info
        C.note(
            f"{L}x{L} data: {info['wall_s']:.1f}s, <x_i x_j> {info['edge_corr']:.4f} "
            f"(after {extra} more sweeps {info['edge_corr_after_extra']:.4f})"
        )
        for k in ks:
            for seed in range(seeds):
                for s in ("gwg", "gibbs"):  # alternate, so load drift hits both
                    r = train(
                        L,
                        data,
                        args.coupling,
                        s,
                        k,
                        seed,
                        iters=iters,
                        batch=batch,
                        lr=args.lr,
                        init_std=cfg["init_std"],
                        eval_every=cfg["eval_every"],
                    )
                    runs.append(r)
                    C.note(
                        f"  {L}x{L} {s:5s} K={k:<4d} seed {seed}: log-RMSE {r['final_log_rmse']:.3f}, "
                        f"{r['train_wall_s']:.1f}s, accept {r['mean_accept']:.3f}"
                    )
    record["runs"] = runs

    rows, summary_final, summary_tail, summary_wall = [], {}, {}, {}
    for L in sizes:
        for k in ks:
            for s in ("gwg", "gibbs"):
                sel = [r for r in runs if r["size"] == L and r["steps_per_iter"] == k and r["sampler"] == s]
                fin = [r["final_log_rmse"] for r in sel]
                tail = [r["tail_log_rmse"] for r in sel]
                w = [r["train_wall_s"] for r in sel]
                acc = [r["mean_accept"] for r in sel]
                mean_f, mean_w = sum(fin) / len(fin), sum(w) / len(w)
                key = f"{L}x{L}/K={k}/{s}"
                summary_final[key] = round(mean_f, 4)
                summary_tail[key] = round(sum(tail) / len(tail), 4)
                summary_wall[key] = round(mean_w, 2)
                rows.append(
                    [f"{L}x{L}", k, s, mean_f, min(fin), max(fin), sum(tail) / len(tail), mean_w, sum(acc) / len(acc)]
                )
    print(
        C.format_table(
            [
                "lattice",
                "K",
                "sampler",
                "final log-RMSE (mean)",
                "min",
                "max",
                "last-quarter mean",
                "train s",
                "accept",
            ],
            rows,
        )
    )
    plot(runs, sizes, ks, img, args.coupling)
    total = time.perf_counter() - t_start
    record["total_wall_s"] = total
    record["plot"] = str(img)
    rec.seeds = list(range(seeds))
    rec.settings = dict(cfg)
    summary = summarise(runs, sizes, ks, list(range(seeds)))
    rec.write({"data": record["data"], **summary, "total_wall_s": total},
              notes="log-RMSE = natural log of the RMSE of the 2N learned edge couplings against the true value. "
                    "Training seeds change the initial couplings, the batches and the sampler draws; the data are "
                    "the same for every seed (data seed 0). Comparisons pair the seeds: GwG minus Gibbs, lower is "
                    "better. train_wall_s excludes evaluation; it was measured on a shared machine. The curves are "
                    "in benchmarks/results/repro_ising_couplings.json (not committed).",
              directory=(C.RESULTS_DIR / "quick" / "records") if q else RECORDS_DIR, enabled=not args.no_save)
    path = C.save_results(("quick/" if q else "") + BENCH, record, enabled=not args.no_save)
    C.note(f"wrote {path} and {img}")
    C.emit_final_line(
        {
            "bench": BENCH,
            "quick": q,
            "iterations": iters,
            "steps_per_iteration": ks,
            "seeds": seeds,
            "coupling": args.coupling,
            "final_log_rmse": summary_final,
            "last_quarter_log_rmse": summary_tail,
            "train_wall_s": summary_wall,
            "total_wall_s": round(total, 1),
        }
    )


if __name__ == "__main__":
    main()

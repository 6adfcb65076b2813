"""AIS log Z of a 784-20 RBM: ebms vs ebmkit's ``ais_log_z``, wall time and error against the exact value.

Workload (identical for every row):
    model   a Bernoulli RBM with 784 visible and 20 hidden units trained by ebms CD-1 for
            2 epochs on the first 10,000 rows of binarised MNIST (batch 100, lr 0.1, seed 0),
            so its weights are realistic and its exact ``log Z`` (sum over the 2^20 hidden
            states, float64) is known;
    base    independent Bernoullis with the training data's smoothed marginal log-odds
            (``marginal_logits``), the base of Salakhutdinov & Murray (2008), for every row;
    AIS     100 chains, the same explicit schedule of linearly spaced temperatures
            (``--temperatures``, default 2,000; ``--quick``: 300), the geometric path
            ``log f_b = (1 - b) log p_0 - b F`` (free energy ``F``), one transition per temperature.

Rows:
    ebms RBM path f64    ``model.ais_path(base_logits)`` (its default float64): the transition is
                         one block-Gibbs sweep of the annealed joint model, as Salakhutdinov &
                         Murray (2008) do; ``ais(path, 100, betas)``;
    ebms RBM path f32    the same path in float32;
    ebms GwG             ``GeometricPath(model, BernoulliBase(logits), GibbsWithGradients())``:
                         one Gibbs-with-Gradients step per temperature (float32);
    ebmkit GwG           ``ebm.ais.ais_log_z(rbm, (784,), base=Independent(Bernoulli(logits)),
                         sampler=GibbsWithGradients(steps=1), schedule=betas)`` on ``ebm.nets.RBM``
                         holding the same weights (float32). ebmkit has no block-Gibbs AIS for
                         RBMs; GwG with a Bernoulli base is its only discrete option, so
                         *ebms GwG is the like-for-like row* and the RBM path is what ebms offers.
ebmkit runs one transition after the last temperature too (ebms does not: it would not change
the weights); ebmkit draws from the global RNG. A GwG step changes at most one of 784 pixels, so
with one step per temperature the GwG rows mix far less than block Gibbs and their estimates are
further from the exact value: the error columns say how much.

Each repeat runs every row once, in rotating order, with seed = repeat index; the table gives the
median wall time, the median and largest absolute error of the estimates, and the median of each
method's own standard error and ESS.

Run: ``python benchmarks/ais.py [--quick] [--threads N] [--temperatures T]``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import _common as C
import _speed_record as SR
import torch

N_VISIBLE, N_HIDDEN, N_CHAINS = 784, 20, 100
PEERS = ("ebmkit",)
Run = Callable[[int], tuple[float, float, float]]  # seed -> (estimate, stderr, ess)


def train_model() -> tuple[Any, torch.Tensor, dict[str, Any]]:
    from ebms.data.binarize import binarized_mnist
    from ebms.fit import RBMEstimator
    from ebms.models.rbm import marginal_logits

    x, _, settings = binarized_mnist("train")
    x = x[:10_000].contiguous()
    est = RBMEstimator(N_HIDDEN, learning_rate=0.1, batch_size=100, n_iter=2, random_state=0).fit(x)
    return est.model_, marginal_logits(x), settings


def make_rows(model: Any, logits: torch.Tensor, betas: torch.Tensor) -> tuple[dict[str, Run], dict[str, str]]:
    from ebms.estimators.ais import GeometricPath, ais
    from ebms.estimators.importance import BernoulliBase
    from ebms.samplers.gwg import GibbsWithGradients

    def ours(make_path: Callable[[], Any]) -> Run:
        def run(seed: int) -> tuple[float, float, float]:
            est = ais(make_path(), N_CHAINS, betas, generator=torch.Generator().manual_seed(seed)).estimate
            return est.estimate, est.stderr, est.ess

        return run

    rows: dict[str, Run] = {
        "ebms RBM path f64": ours(lambda: model.ais_path(logits)),
        "ebms RBM path f32": ours(lambda: model.ais_path(logits, dtype=torch.float32)),
        "ebms GwG": ours(lambda: GeometricPath(model, BernoulliBase(logits), GibbsWithGradients())),
    }
    skipped: dict[str, str] = {}
    try:
        from ebm.ais import ais_log_z
        from ebm.nets import RBM as KitRBM
        from ebm.samplers import GibbsWithGradients as KitGwG
    except ImportError as exc:
        skipped["ebmkit GwG"] = f"not installed ({exc.name})"
        return rows, skipped
    kit = KitRBM(N_VISIBLE, N_HIDDEN)
    with torch.no_grad():
        kit.W.copy_(model.weight.T)
        kit.b.copy_(model.visible_bias)
        kit.c.copy_(model.hidden_bias)
    base = torch.distributions.Independent(torch.distributions.Bernoulli(logits=logits), 1)

    def theirs(seed: int) -> tuple[float, float, float]:
        torch.manual_seed(seed)  # ebmkit draws from the global RNG
        res = ais_log_z(kit, (N_VISIBLE,), base=base, n_chains=N_CHAINS, sampler=KitGwG(steps=1),
                        schedule=betas, transitions=1)
        return res.log_z, res.stderr, res.ess

    rows["ebmkit GwG"] = theirs
    return rows, skipped


def main() -> None:
    from ebms.estimators.ais import linear_betas

    def extra(p: Any) -> None:
        p.add_argument("--temperatures", type=int, default=None,
                       help="number of temperature steps (default 2000; --quick 300)")

    args = C.parse_args(__doc__.splitlines()[0], extra)
    rec = SR.start("ais", args)
    info = C.machine_info(PEERS)
    n_temps = args.temperatures or (300 if args.quick else 2000)
    repeats = args.repeats or (2 if args.quick else 3)
    t0 = time.perf_counter()
    model, logits, data_settings = train_model()
    exact = model.log_partition()
    C.note(f"[ais] trained the 784-20 RBM and summed its exact log Z = {exact:.4f} in {time.perf_counter() - t0:.1f} s")
    betas = linear_betas(n_temps)
    rows, skipped = make_rows(model, logits, betas)
    warm, _ = make_rows(model, logits, linear_betas(10))
    for run in warm.values():  # warm-up on a 10-temperature schedule
        run(99)

    names = list(rows)
    times: dict[str, list[float]] = {n: [] for n in names}
    results: dict[str, list[tuple[float, float, float]]] = {n: [] for n in names}
    for r in range(repeats):
        k = r % len(names)
        for n in names[k:] + names[:k]:
            t1 = time.perf_counter()
            results[n].append(rows[n](r))
            times[n].append(time.perf_counter() - t1)
            C.note(f"[ais] repeat {r} {n}: {times[n][-1]:.2f} s, log Z {results[n][-1][0]:.4f}")

    med = {n: C.median(t) for n, t in times.items()}
    peers = {n: t for n, t in med.items() if not n.startswith("ebms")}
    table_rows: dict[str, dict[str, Any]] = {}
    for n in names:
        est = [e for e, _, _ in results[n]]
        errs = [e - exact for e in est]
        table_rows[n] = {
            "median_s": med[n],
            "all_s": times[n],
            "estimates": est,
            "errors": errs,
            "median_error": C.median(errs),
            "max_abs_error": max(abs(e) for e in errs),
            "median_stderr": C.median([s for _, s, _ in results[n]]),
            "median_ess": C.median([s for _, _, s in results[n]]),
            "temperatures_per_s": n_temps / med[n],
        }
    for n, row in table_rows.items():
        if n.startswith("ebms"):
            row["speedup_vs_ebmkit_gwg"] = C.speedup(peers["ebmkit GwG"], med[n]) if peers else None

    print(f"AIS log Z of a 784-20 RBM (exact {exact:.4f}), {N_CHAINS} chains, {n_temps} linear temperatures, "
          f"1 transition each, {info['threads']} thread(s), {repeats} repeats (seeds 0..{repeats - 1})")
    print("speedup = ebmkit median wall time / ebms median wall time (> 1: ebms faster); error = estimate - exact")
    header = ["impl", "kernel", "median s", "speedup", "median err", "max |err|", "stderr", "ESS"]
    kernels = {"ebms RBM path f64": "block Gibbs", "ebms RBM path f32": "block Gibbs",
               "ebms GwG": "GwG", "ebmkit GwG": "GwG"}
    print(C.format_table(header, [[n, kernels[n], r["median_s"], r.get("speedup_vs_ebmkit_gwg"), r["median_error"],
                                   r["max_abs_error"], r["median_stderr"], r["median_ess"]]
                                  for n, r in table_rows.items()]))
    for n, why in skipped.items():
        print(f"skipped {n}: {why}")
    print("Like-for-like (same GwG kernel): 'ebms GwG' vs 'ebmkit GwG'. ebmkit has no block-Gibbs AIS for RBMs.")

    record = {"bench": "ais", "quick": args.quick, "machine": info, "data": data_settings, "exact_log_z": exact,
              "workload": {"n_visible": N_VISIBLE, "n_hidden": N_HIDDEN, "n_chains": N_CHAINS,
                           "temperatures": n_temps, "schedule": "linear", "repeats": repeats},
              "rows": table_rows, "skipped": skipped}
    path = C.save_results("ais", record, enabled=not args.no_save)
    SR.finish(rec, args, record, notes=(
        'Medians over the repeats (seeds 0..repeats-1), alternating in one process; errors = estimate - exact log Z. speedup_vs_ebmkit_gwg = ebmkit GwG median / ebms median. Shared 2-core machine: the ratios are the robust figures.'))
    if path is not None:
        C.note(f"[ais] wrote {path}")

    def rnd(v: float | None, d: int = 3) -> float | None:
        return None if v is None else round(v, d)

    summary: dict[str, Any] = {"bench": "ais", "quick": args.quick, "threads": info["threads"],
                               "ratio": "their_time / ebms_time", "chains": N_CHAINS, "temperatures": n_temps,
                               "exact_log_z": round(exact, 4)}
    for n, key in (("ebms RBM path f64", "rbm_path"), ("ebms RBM path f32", "rbm_path_f32"), ("ebms GwG", "gwg"),
                   ("ebmkit GwG", "ebmkit_gwg")):
        if n in table_rows:
            r = table_rows[n]
            summary[f"{key}_s"] = rnd(r["median_s"])
            summary[f"{key}_median_error"] = rnd(r["median_error"])
            if "speedup_vs_ebmkit_gwg" in r:
                summary[f"{key}_speedup_vs_ebmkit"] = rnd(r["speedup_vs_ebmkit_gwg"])
    C.emit_final_line(summary)


if __name__ == "__main__":
    main()

"""Per-length log normalisers log Z_l of the PTB discrete TRF: importance sampling vs AIS, and the cost.

Workload:
    model       a TRF saved by ``repro_trf_ptb`` (``--model PATH``: ``torch.save({"trf", "classes",
                "vocab_size", "order", "unigram", "steps"})``), or, without ``--model``, the TRF that
                ``repro_trf_ptb`` starts from, untrained: 200 exchange classes, features w/c/ws/cs/wsh/csh
                at order 4 read over ``<s> x </s>`` (5.9M), word n-gram weights set from KN4
                (``ebms.models.trf.ngram_weights``). There ``-E(x)`` is KN4's log-probability up to a
                constant, so importance sampling from KN4 is already good: AIS must agree with it within
                the errors (a correctness check).
    lengths     the test lengths (PTB test set, 60 lengths 1..77), or ``--lengths``.
    proposal    ``q(x | l) = prod_t p_KN(x_t | h_t) / (1 - p_KN(</s> | h_t))`` (``LengthConditionalLM`` of
                the KN n-gram of the model's order, fitted on the training sentences).
    IS          ``importance_log_z_per_length``, ``--is-draws`` draws per length (default 100; the draws
                from the n-gram proposal cost O(V) per token: 500 draws x 60 lengths took 379 s).
    AIS         ``ais_log_z_per_length`` forward from ``q`` along ``(1 - beta) log q - beta E``, ``--chains``
                chains per length (default 10), ``--temps`` transitions (default 80) on a linear (or
                ``--schedule sigmoid``) beta schedule, each ``--sweeps`` sweeps of a within-length
                ``TransDimensional(jump=False, token_probs=unigram)`` kernel: ``--kernel unigram``
                (default; MH with unigram proposals, ``--trials`` multiple tries; 2 candidates scored per
                move) or ``--kernel class`` (class from the unigram mass, word from the exact conditional
                inside the class, MH-corrected; ~117 candidates per move at 200 classes). Measured on
                the KN-initialised TRF at beta = 0.5: unigram ~4,400 position-moves/s at acceptance
                0.16, class ~520-860/s at 0.22 (one thread), so the unigram kernel mixes more per second.
                All lengths of a group (``--group`` lengths, default 15) share each kernel call.
    reverse     ``--reverse N`` (default 5; 0: off): reverse AIS from approximate model samples, N per
                length: test sentences of that length (cycled) moved by ``--burn`` sweeps (default 20)
                of the same kernel at ``beta = 1``. Forward is a stochastic lower bound of log Z_l;
                reverse is an upper bound only when its start is exact, so the bracket
                ``[min - 2 se, max + 2 se]`` is informative, not guaranteed; ``crossed`` (reverse below
                forward) flags a start that is not at the model or too few chains.
    perplexity  ``trf_perplexity`` over the test sentences of the estimated lengths, under IS, forward
                AIS, and the bracket's ends (log Z_l at its lower / upper end give the lower / upper
                perplexity).
    cost        seconds of each estimator, seconds per length, position-moves per second of the kernel
                (one position of one chain re-drawn once), with ``--threads`` torch threads;
                ``--budget`` seconds stops AIS between groups (later lengths keep only IS). AIS costs
                about (chains + reverse) x (sum of lengths: 1,860 for the 60 test lengths) x (temps - 1)
                x sweeps position-moves.

``--quick``: the first 2,000 training / 200 test sentences (vocabulary of the subset), 20 classes,
order 3, every 4th test length, 20 IS draws, 4 chains, 4 temperatures, 2 reverse chains (well under
a minute). Run: ``python benchmarks/trf_logz_ais.py [--quick] [--model runs/benchmarks/repro_trf_ptb/trf-stepN.pt]
[--kernel unigram|class] [--chains C] [--temps K] [--sweeps S] [--reverse N] [--budget SECONDS]``.
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

import _common as C
import _speed_record as SR
import torch
from repro_trf_ptb import kn_started_trf, ptb_data, unigram_counts

from ebms.distributions import BackoffNGram
from ebms.estimators import (
    LengthConditionalLM,
    LengthLogZ,
    ais_log_z_per_length,
    importance_log_z_per_length,
    linear_betas,
    sigmoid_betas,
)
from ebms.metrics import trf_perplexity
from ebms.models.trf import TRF
from ebms.samplers.trans_dimensional import TransDimensional
from ebms.sequences import Sequences

BENCH = "trf_logz_ais"


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="a TRF saved by repro_trf_ptb (default: the KN-initialised TRF)")
    p.add_argument("--lengths", default=None, help="comma-separated lengths (default: every test length)")
    p.add_argument("--is-draws", type=int, default=None, help="IS draws per length (default 100; quick 20)")
    p.add_argument("--chains", type=int, default=None, help="forward AIS chains per length (default 10; quick 4)")
    p.add_argument("--temps", type=int, default=None, help="AIS transitions K (default 80; quick 4)")
    p.add_argument("--sweeps", type=int, default=1, help="kernel sweeps per temperature")
    p.add_argument("--schedule", choices=("linear", "sigmoid"), default="linear")
    p.add_argument("--kernel", choices=("class", "unigram"), default="unigram")
    p.add_argument("--trials", type=int, default=1, help="multiple-try proposals per move (TransDimensional trials)")
    p.add_argument("--reverse", type=int, default=None, help="reverse AIS chains per length (default 5; quick 2; 0: none)")
    p.add_argument("--burn", type=int, default=20, help="kernel sweeps at beta = 1 before reverse AIS")
    p.add_argument("--group", type=int, default=15, help="lengths per AIS call (0: all in one)")
    p.add_argument("--budget", type=float, default=None, help="AIS seconds; later groups are skipped")
    p.add_argument("--seed", type=int, default=0)


def build(quick: bool, path: str | None) -> dict[str, Any]:
    """Data, KN proposal and the TRF (loaded, or KN-initialised as in repro_trf_ptb)."""
    train, test, V = ptb_data(quick)
    if path is not None:
        saved = torch.load(path, weights_only=False)
        if saved["vocab_size"] != V:
            raise ValueError(f"--model: vocabulary {saved['vocab_size']} != {V} of the data (--quick mismatch?)")
        saved["kn"] = BackoffNGram.fit(train, V, saved["order"])
        return {**saved, "train": train, "test": test}
    n_classes, order = (20, 3) if quick else (200, 4)
    kn = BackoffNGram.fit(train, V, order)
    L = max(int(train.lengths.max()), int(test.lengths.max()))
    trf, classes, _ = kn_started_trf(train, L, V, kn, n_classes)
    return {"trf": trf, "classes": classes, "vocab_size": V, "order": order, "unigram": unigram_counts(train, V),
            "steps": 0, "kn": kn, "train": train, "test": test}


def model_samples(trf: TRF, kernel: TransDimensional, test: Sequences, lengths: list[int], n: int, burn: int,
                  g: torch.Generator) -> Sequences:
    """``n`` test sentences per length (cycled), then ``burn`` kernel steps under the model at fixed length."""
    rows = []
    for ell in lengths:
        at = (test.lengths == ell).nonzero().squeeze(1)
        rows.append(at[torch.arange(n) % at.numel()])
    x = test[torch.cat(rows)].canonical().pad_to(trf.space.max_length)
    state = kernel.init(trf, x)
    with torch.no_grad():
        for _ in range(burn):
            state, _ = kernel.step(trf, state, generator=g)
    return kernel.target(state)


def ppl(trf: TRF, test: Sequences, log_z: Any) -> float:
    with torch.no_grad():
        return trf_perplexity(trf, test, log_z=log_z).reestimated.perplexity


def main() -> None:
    args = C.parse_args(__doc__.splitlines()[0], add_args)
    recorder = SR.start(BENCH, args, seeds=(args.seed,))
    q = args.quick
    is_draws = args.is_draws or (20 if q else 100)
    chains, temps = args.chains or (4 if q else 10), args.temps or (4 if q else 80)
    if args.reverse is None:
        args.reverse = 2 if q else 5
    info = C.machine_info()
    g = torch.Generator().manual_seed(args.seed)
    torch.manual_seed(args.seed)
    t0 = time.perf_counter()
    d = build(q, args.model)
    trf, test, V = d["trf"], d["test"], d["vocab_size"]
    trf.eval()
    build_s = time.perf_counter() - t0
    lengths = sorted(set(test.lengths.tolist()))[::4 if q else 1] if args.lengths is None else sorted(
        {int(v) for v in args.lengths.split(",")})
    proposal = LengthConditionalLM(d["kn"])
    C.note(f"[{BENCH}] V = {V}, {trf.field.num_features} features, trained steps {d['steps']}, "
           f"{len(lengths)} lengths; built in {build_s:.0f} s")

    t0 = time.perf_counter()
    with torch.no_grad():
        est_is = importance_log_z_per_length(trf, proposal, is_draws, lengths=lengths, generator=g, batch_size=4096)
    is_s = time.perf_counter() - t0
    C.note(f"[{BENCH}] IS {is_draws}/length: {is_s:.0f} s")

    token_probs = d["unigram"] / d["unigram"].sum()
    classes = d["classes"] if args.kernel == "class" else None
    kernel = TransDimensional(token_probs=token_probs, classes=classes, jump=False, sweeps=args.sweeps,
                              trials=args.trials)
    betas = linear_betas(temps) if args.schedule == "linear" else sigmoid_betas(temps)
    per_group = args.group or len(lengths)
    groups = [lengths[i:i + per_group] for i in range(0, len(lengths), per_group)]
    fwd: dict[int, Any] = {}
    group_s: list[dict[str, Any]] = []
    t_ais = time.perf_counter()
    for grp in groups:
        if args.budget is not None and time.perf_counter() - t_ais > args.budget:
            C.note(f"[{BENCH}] budget reached: AIS skipped for lengths {grp[0]}..{lengths[-1]}")
            break
        t1 = time.perf_counter()
        target = None
        if args.reverse:
            target = model_samples(trf, kernel, test, grp, args.reverse, args.burn, g)
        t2 = time.perf_counter()
        with torch.no_grad():
            r = ais_log_z_per_length(trf, proposal, chains, betas, lengths=grp, kernel=kernel, target_samples=target,
                                     generator=g, batch_size=chains * len(grp) + args.reverse * len(grp))
        t3 = time.perf_counter()
        fwd.update(zip(r.lengths, r.estimates))
        moves = (chains + args.reverse) * sum(grp) * (temps - 1) * args.sweeps
        group_s.append({"lengths": grp, "seconds": t3 - t1, "burn_s": t2 - t1, "ais_s": t3 - t2,
                        "position_moves_per_s": moves / (t3 - t2)})
        C.note(f"[{BENCH}] AIS lengths {grp[0]}..{grp[-1]}: {t3 - t1:.0f} s ({moves / (t3 - t2):.0f} moves/s)")
    ais_s = time.perf_counter() - t_ais
    done = sorted(fwd)

    rows, per_length = [], {}
    for n in done:
        a, i = fwd[n], est_is[n]
        st = a.settings
        rev = st.get("reverse")
        rows.append([n, i.estimate, i.stderr, i.ess, a.estimate, a.stderr, a.ess, a.estimate - i.estimate,
                     (a.estimate - i.estimate) / math.hypot(a.stderr, i.stderr) if a.stderr + i.stderr > 0 else 0.0,
                     rev, None if rev is None else a.upper - a.lower])
        per_length[n] = {"is": i.estimate, "is_stderr": i.stderr, "is_ess": i.ess, "ais": a.estimate,
                         "ais_stderr": a.stderr, "ais_ess": a.ess, "reverse": rev,
                         "reverse_stderr": st.get("reverse_stderr"), "reverse_ess": st.get("reverse_ess"),
                         "lower": a.lower, "upper": a.upper, "crossed": st.get("crossed")}
    print(f"log Z_l of the {'trained (' + str(d['steps']) + ' steps)' if d['steps'] else 'KN-initialised'} PTB TRF"
          f"{' (quick subset)' if q else ''}: IS {is_draws}/length vs forward AIS {chains} chains x {temps} "
          f"temperatures x {args.sweeps} sweep(s), {args.kernel} kernel, {args.trials} trial(s)"
          + (f", reverse {args.reverse}/length after {args.burn} burn-in sweeps" if args.reverse else ""))
    print(C.format_table(["l", "IS", "se", "ESS", "AIS", "se", "ESS", "AIS-IS", "z", "reverse", "bracket"], rows))

    keep = torch.isin(test.lengths, torch.tensor(done or [0]))
    sub = test[keep.nonzero().squeeze(1)]
    figures: dict[str, Any] = {}
    if done:
        est_ais = LengthLogZ(tuple(done), tuple(fwd[n] for n in done), "ais")
        figures = {"sentences": sub.batch_size, "is": ppl(trf, sub, est_is), "ais": ppl(trf, sub, est_ais)}
        if args.reverse and all(fwd[n].lower is not None for n in done):
            for end in ("lower", "upper"):
                full = torch.zeros(trf.space.max_length, dtype=torch.float64)
                for n in done:
                    full[n - 1] = getattr(fwd[n], end)
                figures[f"bracket_{end}"] = ppl(trf, sub, LengthLogZ.exact(full))
    brackets = [r[-1] for r in rows if r[-1] is not None]
    crossed = sum(bool(v["crossed"]) for v in per_length.values())
    print(C.format_table(["figure", "value"], [
        ["test sentences at the AIS lengths", figures.get("sentences")],
        ["perplexity, IS log Z_l", figures.get("is")], ["perplexity, forward AIS log Z_l", figures.get("ais")],
        ["perplexity at the bracket's lower / upper log Z_l",
         f"{figures['bracket_lower']:.2f} / {figures['bracket_upper']:.2f}" if "bracket_upper" in figures else None],
        ["median / max bracket width (nats)", None if not brackets else
         f"{sorted(brackets)[len(brackets) // 2]:.3f} / {max(brackets):.3f}"],
        ["reverse below forward (crossed) at", f"{crossed} of {len(done)} lengths" if args.reverse else None],
        ["IS ESS median / min", f"{sorted(r[3] for r in rows)[len(rows) // 2]:.1f} / {min(r[3] for r in rows):.1f}"
         if rows else None],
        ["AIS ESS median / min", f"{sorted(r[6] for r in rows)[len(rows) // 2]:.1f} / {min(r[6] for r in rows):.1f}"
         if rows else None],
        ["|AIS - IS| / se: max", max((abs(r[8]) for r in rows), default=None)],
        ["IS seconds (all lengths)", is_s], ["AIS seconds (done lengths)", ais_s],
        ["AIS seconds per length", ais_s / max(len(done), 1)],
        ["AIS position-moves/s", sum(r["position_moves_per_s"] * r["ais_s"] for r in group_s) / max(
            sum(r["ais_s"] for r in group_s), 1e-9)]]))
    summary = {"bench": BENCH, "quick": q, "threads": info["threads"], "trained_steps": d["steps"],
               "lengths": len(lengths), "ais_lengths": len(done), "chains": chains, "temps": temps,
               "sweeps": args.sweeps, "kernel": args.kernel, "trials": args.trials, "reverse": args.reverse,
               "ppl_is": None if not done else round(figures["is"], 3),
               "ppl_ais": None if not done else round(figures["ais"], 3),
               "ppl_bracket": None if "bracket_upper" not in figures else
               [round(figures["bracket_lower"], 3), round(figures["bracket_upper"], 3)],
               "max_abs_z_ais_vs_is": None if not rows else round(max(abs(r[8]) for r in rows), 2),
               "is_s": round(is_s, 1), "ais_s": round(ais_s, 1), "ais_s_per_length": round(ais_s / max(len(done), 1), 2)}
    record = {"bench": BENCH, "quick": q, "machine": info, "summary": summary,
              "settings": {**vars(args), "is_draws": is_draws, "chains": chains, "temps": temps},
              "per_length": per_length, "perplexity": figures, "groups": group_s, "build_s": build_s}
    path = C.save_results(("quick/" if q else "") + BENCH + ("_trained" if d["steps"] else ""), record,
                          enabled=not args.no_save)
    if path is not None:
        C.note(f"[{BENCH}] wrote {path}")
    from neural_trf_lstm import commit_record

    commit_record(recorder, args, record, name=BENCH + ("_trained" if d["steps"] else ""), notes=(
        "log Z_l of a TRF on PTB by importance sampling and by forward AIS (and reverse AIS, a bracket) from the "
        "same KN4 length-conditional proposal, per length with stderr and ESS, and the test perplexity each "
        "gives. Forward estimates are lower bounds in expectation; a reverse run started from test sentences is "
        "an upper bound only when those are draws of the model. Seconds are wall-clock on the machine named "
        "here."))
    C.emit_final_line(summary)


if __name__ == "__main__":
    main()

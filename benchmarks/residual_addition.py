"""Residual EBM on a task where sample quality is exact: multi-digit addition strings.

Workload (Deng et al. 2020, "Residual energy-based models for text generation", at toy scale, with
the sequence-level check the paper can only approximate with human raters made exact):
    data        ``ebms.data.AdditionTask(digits=D)`` (default D = 2): strings ``ab+cd=0efg`` with the
                operands uniform and zero-padded, the sum padded to D + 1 digits. The prefix is
                ``ab+cd=`` (2D + 2 characters), the continuation the D + 1 sum digits. Training and
                test operand pairs are disjoint (the test prefixes are never seen in training).
    base LM     a ``TransformerLM`` (d_model 64, 2 layers, 4 heads) trained by ``AutoregressiveNLL`` for
                ``--base-steps`` steps (default 1500, batch 64, Adam 3e-3) on the training strings with
                a share ``--base-error-rate`` (default 0.3) of their sums corrupted (one digit replaced
                by another, uniformly): the "deliberately imperfect base LM" of the issue, imperfect
                in a controlled way (trained on clean strings for 1500 steps it gets 99.7 % of the
                sums right; for 300 steps, 5 %). The data law of the residual model stays the clean
                one.
    energy      ``TextEnergy(kind="transformer")`` (bidirectional, mean-pooled, d 64, 2 layers: the BIT
                analogue) over ``<s> prefix continuation``; the joint model is
                ``p(x | c) ∝ p_LM(x | c) exp(-E(c, x))`` with the horizon ``K = D + 1`` (the sum digits;
                ``</s>`` is not scored).
    training    ``ResidualNCE`` (nu = 1, as the paper) against an offline ``NegativeCache`` of S = 16 base
                samples per training prefix (untruncated base law), ``--energy-steps`` steps (default 1500,
                batch 64, Adam 1e-3, gradient norm clipped at 1), under the ``Trainer``.
    generation  on ``--test`` held-out prefixes: the fraction of correct sums from one base draw, from
                greedy base decoding, and from top-k joint sampling (Algorithm 1) with n = 1, 10, 100
                base draws (untruncated, and top-k 3); plus the median ESS of the resampling weights.
    perplexity  of the true sums (D + 1 tokens each): the base's exact perplexity; the joint model's
                EXACT perplexity (log Z(c) by enumerating all 14^K continuations of each prefix) and the
                paper's [lower, upper] interval from n = 10, 100, 1000 base draws per prefix (Theorem 2).
                The true law is deterministic given the prefix: its perplexity is 1.
    seeds       ``--seeds`` (default 0 1 2): every stage re-seeded; the table gives mean and spread.

    comparison  joint model against base LM, paired by seed (``ebms.metrics.compare_over_seeds``, 95 %
                Student-t interval of the mean difference): correct sums from one draw (joint n = 100
                vs one base draw), the same under top-3 (joint n = 100 top-3 vs one top-3 base draw),
                and the exact perplexity of the true sums (lower is better).
    record      ``benchmarks/records/<--record>.json`` (default ``residual_addition``; none for
                ``--quick`` unless ``--record`` is given, none with ``--no-save``): settings, per-seed
                figures, mean and standard deviation over seeds, the comparisons, wall time and memory
                (``benchmarks/_record.py``). The full per-seed dump also goes to ``benchmarks/results/``.

``--quick``: 1 seed, 100 base steps, 150 energy steps, 100 test prefixes, n up to 100: the same code
path in about a minute. Run: ``python benchmarks/residual_addition.py [--quick] [--digits D]
[--base-steps N] [--energy-steps N] [--test N] [--seeds S ...] [--record NAME] [--threads N]``.
"""

from __future__ import annotations

import argparse
import math
import resource
import statistics
import time
from typing import Any

import _common as C
import torch
from _record import Recorder

from ebms.data.addition import AdditionTask
from ebms.data.negative_cache import NegativeCache
from ebms.estimators.residual_log_z import residual_perplexity
from ebms.metrics.seeds import compare_over_seeds
from ebms.models.lm import TransformerLM
from ebms.models.residual_lm import ResidualLM, exact_log_z
from ebms.nets.text_energy import TextEnergy
from ebms.objectives import AutoregressiveNLL
from ebms.objectives.residual_nce import ResidualNCE
from ebms.samplers.joint_resampling import top_k_joint_sample
from ebms.sequences import Sequences
from ebms.train import Trainer

BENCH = "residual_addition"


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--digits", type=int, default=2, help="operand digits D (default 2)")
    p.add_argument("--train", type=int, default=4000, help="training operand pairs (default 4000)")
    p.add_argument("--test", type=int, default=500, help="held-out prefixes (default 500)")
    p.add_argument("--base-steps", type=int, default=1500, help="base LM training steps (default 1500)")
    p.add_argument("--base-error-rate", type=float, default=0.3,
                   help="share of the base LM's training sums with one digit corrupted (default 0.3)")
    p.add_argument("--energy-steps", type=int, default=1500, help="residual energy NCE steps (default 1500)")
    p.add_argument("--cache", type=int, default=16, help="base samples per training prefix (default 16)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--record", default=None,
                   help=f"record name, benchmarks/records/NAME.json (default {BENCH}; --quick: no record)")


def split_data(task: AdditionTask, n_train: int, n_test: int, seed: int) -> tuple[Sequences, Sequences]:
    """Disjoint training and test strings (distinct operand pairs, drawn without replacement)."""
    g = torch.Generator().manual_seed(10_000 + seed)
    pairs = 10 ** (2 * task.digits)
    if n_train + n_test > pairs:
        raise SystemExit(f"--train + --test: at most {pairs} operand pairs exist for D = {task.digits}")
    ids = torch.randperm(pairs, generator=g)[: n_train + n_test]
    half = 10 ** task.digits
    a, b = ids // half, ids % half
    width = task.digits
    strings = [f"{int(x):0{width}d}+{int(y):0{width}d}={int(x) + int(y):0{width + 1}d}" for x, y in zip(a, b)]
    seqs = task.encode(strings)
    return seqs[:n_train], seqs[n_train:]


def corrupt(task: AdditionTask, x: Sequences, rate: float, seed: int) -> Sequences:
    """``x`` with a share ``rate`` of the sums given one wrong digit (uniform position, uniform other digit)."""
    g = torch.Generator().manual_seed(20_000 + seed)
    tokens = x.tokens.clone()
    rows = (torch.rand(x.batch_size, generator=g) < rate).nonzero().squeeze(1)
    pos = task.prefix_length + torch.randint(task.continuation_length, (rows.numel(),), generator=g)
    first = int(task.encode(["0" * task.digits + "+" + "0" * task.digits + "=" + "0" * (task.digits + 1)]).tokens[0, 0])
    old = tokens[rows, pos] - first
    tokens[rows, pos] = first + (old + torch.randint(1, 10, (rows.numel(),), generator=g)) % 10
    return Sequences(tokens, x.lengths)


def train_base(task: AdditionTask, train: Sequences, steps: int, seed: int) -> TransformerLM:
    torch.manual_seed(seed)
    lm = TransformerLM(task.vocab_size, d_model=64, num_heads=4, num_layers=2, dim_feedforward=128, dropout=0.0,
                       max_length=task.length + 1)

    def data(batch_size: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        rows = train[torch.randint(train.batch_size, (batch_size,), generator=g)]
        return rows.tokens, rows.lengths

    Trainer(AutoregressiveNLL(), lm, data, optimizer=lambda groups: torch.optim.Adam(groups, lr=3e-3),
            steps=steps, batch_size=64, run_dir=None, seed=seed, progress=False, checkpoint_every=None,
            guard=None).fit()
    return lm.eval()


def train_energy(task: AdditionTask, lm: TransformerLM, train: Sequences, steps: int, cache_size: int,
                 seed: int) -> tuple[ResidualLM, dict[str, float]]:
    prefix, cont = task.split(train)
    K = task.digits + 1
    t0 = time.perf_counter()
    cache = NegativeCache.build(lm, prefix, cache_size, horizon=K, generator=torch.Generator().manual_seed(seed),
                                progress=False)
    t_cache = time.perf_counter() - t0
    torch.manual_seed(seed)
    model = ResidualLM(lm, TextEnergy(task.vocab_size, kind="transformer", dim=64, layers=2, heads=4, dropout=0.0),
                       horizon=K)
    nce = ResidualNCE(nu=1)

    def data(batch_size: int, g: torch.Generator) -> tuple[torch.Tensor, ...]:
        idx = torch.randint(prefix.batch_size, (batch_size,), generator=g)
        return nce.pack(prefix[idx], cont[idx], cache.draw(idx, 1, g))

    t0 = time.perf_counter()
    result = Trainer(nce, model, data, optimizer=lambda groups: torch.optim.Adam(groups, lr=1e-3), steps=steps,
                     batch_size=64, run_dir=None, seed=seed, progress=False, checkpoint_every=None,
                     grad_clip=1.0).fit()
    t_train = time.perf_counter() - t0
    final = {k: float(v) for k, v in (result.metrics or {}).items() if isinstance(v, (int, float))}
    return model.eval(), {"cache_s": t_cache, "train_s": t_train, **final}


def accuracy(task: AdditionTask, prefix: Sequences, cont: Sequences) -> float:
    joined = Sequences.from_lists([p + c for p, c in zip(prefix.tolist(), cont.tolist())])
    return float(task.is_correct(joined).double().mean())


def one_seed(task: AdditionTask, args: argparse.Namespace, seed: int, ns: list[int], ppl_ns: list[int]) -> dict:
    train, test = split_data(task, args.train, args.test, seed)
    t0 = time.perf_counter()
    lm = train_base(task, corrupt(task, train, args.base_error_rate, seed), args.base_steps, seed)
    base_s = time.perf_counter() - t0
    model, energy_rec = train_energy(task, lm, train, args.energy_steps, args.cache, seed)
    prefix, truth = task.split(test)
    K = task.digits + 1
    g = torch.Generator().manual_seed(100 + seed)
    rec: dict[str, Any] = {"seed": seed, "base_train_s": base_s, **energy_rec}
    with torch.no_grad():
        rec["base_sample_acc"] = accuracy(task, prefix, model.sample_base(prefix, 1, generator=g))
        rec["base_greedy_acc"] = accuracy(task, prefix, model.sample_base(prefix, 1, generator=g, top_k=1))
        for top_k in (None, 3):
            for n in ns:
                t0 = time.perf_counter()
                js = top_k_joint_sample(model, prefix, n, generator=g, top_k=top_k, progress=False)
                tag = f"joint_n{n}" + ("" if top_k is None else f"_top{top_k}")
                rec[tag + "_acc"] = accuracy(task, prefix, js.continuations)
                rec[tag + "_ess_median"] = float(js.ess.median())
                rec[tag + "_seq_per_s"] = prefix.batch_size / (time.perf_counter() - t0)
        log_z = exact_log_z(model, prefix)
        ne = -model.energy(prefix, truth).double()
        base_lp = model.base_log_prob(prefix, truth).double()
        tokens = truth.batch_size * K
        rec["base_ppl"] = math.exp(-float(base_lp.sum()) / tokens)
        rec["joint_ppl_exact"] = math.exp(-float((base_lp + ne - log_z.to(base_lp)).sum()) / tokens)
        rec["log_z_exact_mean"] = float(log_z.mean())
        for n in ppl_ns:
            rp = residual_perplexity(model, prefix, truth, n, generator=g, progress=False)
            rec[f"joint_ppl_n{n}"] = [rp.lower, rp.upper]
    return rec


NOTES = ("Addition task, joint residual model vs its base LM on the same held-out prefixes, paired by seed "
         "(every stage of a seed re-seeded from it). acc = share of correct sums; base_sample = one base draw, "
         "joint_n{n} = Algorithm 1 with n base draws, _top3 = draws restricted to the base's 3 most likely tokens "
         "(joint_n1_top3 = one restricted base draw); ppl = perplexity of the true sums, base exact, joint exact "
         "(log Z by enumeration) and the [lower, upper] estimate from n base draws. spread: mean and sample "
         "standard deviation over seeds. comparisons: ebms.metrics.compare_over_seeds, joint minus base, 95 % "
         "Student-t interval of the mean paired difference. Times are wall seconds on a shared machine.")

#: (comparison key, joint figure, base figure, metric, higher is better)
COMPARISONS = (
    ("acc_joint_n100_vs_base_draw", "joint_n100_acc", "base_sample_acc", "correct sums, one draw", True),
    ("acc_joint_n100_top3_vs_base_top3_draw", "joint_n100_top3_acc", "joint_n1_top3_acc",
     "correct sums, one top-3 draw", True),
    ("ppl_joint_exact_vs_base_exact", "joint_ppl_exact", "base_ppl", "perplexity of the true sums (exact)", False),
)


def record_figures(recs: list[dict], ns: list[int], ppl_ns: list[int]) -> dict[str, Any]:
    """The record's figures: per seed, mean/sd over seeds, and the joint-vs-base comparisons."""
    seeds = [r["seed"] for r in recs]
    scalar = [k for k, v in recs[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "seed"]
    spread_of: dict[str, Any] = {}
    for k in scalar:
        xs = [float(r[k]) for r in recs]
        spread_of[k] = {"mean": statistics.mean(xs), "sd": statistics.stdev(xs) if len(xs) > 1 else None}
    for n in ppl_ns:
        for i, end in enumerate(("lower", "upper")):
            xs = [r[f"joint_ppl_n{n}"][i] for r in recs]
            spread_of[f"joint_ppl_n{n}_{end}"] = {"mean": statistics.mean(xs),
                                                  "sd": statistics.stdev(xs) if len(xs) > 1 else None}
    comparisons = {key: compare_over_seeds([r[a] for r in recs], [r[b] for r in recs], seeds=seeds,
                                           name_a="joint model", name_b="base LM", metric=metric,
                                           higher_is_better=hib).to_dict()
                   for key, a, b, metric, hib in COMPARISONS}
    return {"per_seed": {f"seed{r['seed']}": r for r in recs}, "spread": spread_of, "comparisons": comparisons}


def spread(xs: list[float]) -> str:
    if len(xs) == 1:
        return f"{xs[0]:.3f}"
    return f"{statistics.mean(xs):.3f} ± {statistics.stdev(xs):.3f}"


def main() -> None:
    args = C.parse_args(__doc__.splitlines()[0], add_args)
    if args.quick:
        args.seeds, args.base_steps, args.energy_steps, args.test, args.train = args.seeds[:1], 100, 150, 100, 1000
    if len(set(args.seeds)) != len(args.seeds):
        raise SystemExit(f"--seeds: expected distinct seeds; got {args.seeds}")
    ns = [1, 10, 100]
    ppl_ns = [10, 100] if args.quick else [10, 100, 1000]
    task = AdditionTask(args.digits)
    info = C.machine_info()
    record_name = args.record or (None if args.quick else BENCH)
    settings = {k: v for k, v in vars(args).items() if k not in ("no_save", "record", "repeats")}
    rec = Recorder(record_name or BENCH, seeds=args.seeds, settings={**settings, "joint_ns": ns, "ppl_ns": ppl_ns})
    t_all = time.perf_counter()
    recs = []
    for seed in args.seeds:
        C.note(f"[{BENCH}] seed {seed}: base {args.base_steps} steps, energy {args.energy_steps} steps")
        recs.append(one_seed(task, args, seed, ns, ppl_ns))
    rows = [["correct sums, 1 base draw", spread([r["base_sample_acc"] for r in recs])],
            ["correct sums, greedy base", spread([r["base_greedy_acc"] for r in recs])]]
    for top_k in (None, 3):
        for n in ns:
            tag = f"joint_n{n}" + ("" if top_k is None else f"_top{top_k}")
            rows.append([f"correct sums, joint n={n}" + ("" if top_k is None else f" top-{top_k}"),
                         spread([r[tag + "_acc"] for r in recs]) + f"  (ESS median {recs[0][tag + '_ess_median']:.1f})"])
    rows.append(["PPL of true sums, base LM (exact)", spread([r["base_ppl"] for r in recs])])
    rows.append(["PPL of true sums, joint (exact log Z)", spread([r["joint_ppl_exact"] for r in recs])])
    for n in ppl_ns:
        lo = [r[f"joint_ppl_n{n}"][0] for r in recs]
        hi = [r[f"joint_ppl_n{n}"][1] for r in recs]
        rows.append([f"PPL joint, [lower, upper] n={n}", f"[{spread(lo)}, {spread(hi)}]"])
    print(C.format_table(["figure (seeds " + " ".join(map(str, args.seeds)) + ")", "value"], rows))
    for _, a, b, metric, hib in COMPARISONS:
        print(compare_over_seeds([r[a] for r in recs], [r[b] for r in recs], seeds=args.seeds, name_a="joint model",
                                 name_b="base LM", metric=metric, higher_is_better=hib).sentence())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    record = {"bench": BENCH, "machine": info, "settings": {k: v for k, v in vars(args).items()},
              "seeds": recs, "wall_s": time.perf_counter() - t_all, "peak_rss_mb": peak}
    C.save_results(("quick/" if args.quick else "") + BENCH, record, enabled=not args.no_save)
    summary = {"bench": BENCH, "seeds": len(recs),
               "base_acc": statistics.mean(r["base_sample_acc"] for r in recs),
               "joint_n100_acc": statistics.mean(r["joint_n100_acc"] for r in recs),
               "base_ppl": statistics.mean(r["base_ppl"] for r in recs),
               "joint_ppl_exact": statistics.mean(r["joint_ppl_exact"] for r in recs),
               "joint_ppl_n100": [statistics.mean(r["joint_ppl_n100"][i] for r in recs) for i in (0, 1)],
               "wall_s": round(record["wall_s"], 1), "peak_rss_mb": round(peak)}
    rec.write(record_figures(recs, ns, ppl_ns), notes=NOTES, enabled=record_name is not None and not args.no_save)
    C.emit_final_line(summary)


if __name__ == "__main__":
    main()

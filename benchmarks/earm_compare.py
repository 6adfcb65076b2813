"""E-ARM against cross-entropy training at an equal step budget, over seeds: LM, toy MT, PixelCNN.

Workload (Wang, Che, Li, Song, Pei, Bengio & Li 2022, "Your autoregressive generative model can be
better if you treat it as an energy-based one", at CPU scale: analogues of Tables 3, 1/7/8 and 5):
    protocol    per task and seed, one model is trained with cross-entropy (CE) for the N0 warm-up
                steps, then branched into two copies that continue from the same weights, Adam state,
                data-stream generator and dropout RNG: "ce" keeps CE for the remaining N - N0 steps;
                "earm" runs ``EARM(weight=1/K, start_step=N0, truncate=2, ema=0.9)`` (its loss is the
                same CE plus ``weight`` times the E-ARM surrogate; its step counter starts at N0, so it
                is active for every remaining step). ``K`` is the mean number of steps (tokens + </s>,
                or pixels) of a training example, so the surrogate, summed over steps, is put on the
                per-token scale of the CE (the library's advice). Equal budget = equal optimizer steps,
                batch, data, optimizer and seeds for both arms; the wall seconds of each arm are
                reported too (E-ARM steps draw B model samples, so they cost more). Adam, constant
                learning rate, gradient norm clipped at 1 for both arms. Nothing is tuned toward a
                result: the settings are fixed below (the paper's truncate 2, EMA 0.9, warm start).
    lm          char-level Tiny Shakespeare, one sentence per non-blank line (29,242 train lines,
                mean 33 characters; all 1,833 test lines scored). ``LSTMLM`` (embedding 64, hidden
                256, 1 layer, no dropout), batch 32 lines drawn with replacement, Adam 2e-3.
                Figures: exact test perplexity per character (``</s>`` counted), and the
                exposure-bias ratio (Table 8 analogue) N / total = share of gold test characters
                that the E-ARM model gives more probability than the CE model of the same seed.
    mt          ``toy_translation_splits(4000, 200, 500, seed=0, synonym_prob=0.2)`` (a noun takes its
                second translation with probability 0.2, so the Bayes BLEU is below 100);
                ``Seq2SeqTransformer`` (d 64, 4 heads, 2 + 2 layers, ff 128, dropout 0.1), label
                smoothing 0.1 in both arms, batch 32 pairs, Adam 3e-3. Figures on the 500 test pairs:
                corpus BLEU (sacreBLEU) of greedy and beam-5 decoding (length penalty 1), beam-5 BLEU
                by reference length [0, 10), [10, 20), [20, inf) (Table 7 analogue), test NLL per
                target token, and the exposure-bias ratio on the test pairs.
    pixelcnn    binarised MNIST at 14 x 14: the 28 x 28 grey images are 2 x 2 average-pooled, then
                binarised stochastically (fixed seeds 0 train / 1 test). Stated downsampling: at
                28 x 28 every E-ARM step would need 784 sequential PixelCNN passes for its draws
                (about 4x the pixels and 4x the passes of 14 x 14), too slow for this CPU budget.
                Plain PixelCNN (hidden 32, 5 masked layers, kernel 3), batch 32, Adam 1e-3,
                ``PixelCNNAdapter(pair="zero")``. Figures: bits/dim on the 10,000 test images and on
                the first 2,000 training images (Table 5 reports test with train in brackets).
    seeds       ``--seeds`` (default 0 1 2): model initialisation, data stream, draws, dropout.
    budget      default steps N (CE warm-up N0, so N - N0 E-ARM steps): lm 600 (400), mt 950 (800),
                pixelcnn 330 (250). An E-ARM step costs several CE steps (it draws B model samples: up
                to 64 LSTM steps, up to 31 decoder passes without a cache, 196 PixelCNN passes); the
                record holds the measured ratio per task (``earm_step_cost_ratio``) and the wall time.
                The E-ARM phase is therefore short (200, 150 and 80 steps): the CPU budget, not a
                choice of the paper; ``--steps-scale`` lengthens every phase alike.
    comparison  E-ARM against CE per figure, paired by seed (``ebms.metrics.compare_over_seeds``: mean
                of the per-seed differences E-ARM - CE, 95 % Student-t interval, verdict).
    record      ``benchmarks/records/<--record>.json`` (default ``earm_compare``; none for ``--quick``
                unless ``--record`` is given, none with ``--no-save``): settings, per-seed figures,
                comparisons, wall time and memory (``benchmarks/_record.py``).

``--quick``: one seed, steps / 10: the same code path in a minute or two. Run: ``python
benchmarks/earm_compare.py [--quick] [--tasks lm mt pixelcnn] [--seeds S ...] [--steps-scale F]
[--record NAME] [--threads N]``.
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
import torch.nn.functional as F
from _record import Recorder
from torch import Tensor, nn

from ebms.data.binarize import binarize
from ebms.data.mnist import load_mnist
from ebms.data.text import Vocabulary, tiny_shakespeare
from ebms.data.toy_translation import toy_translation_splits
from ebms.metrics.bleu import bleu_by_length, corpus_bleu
from ebms.metrics.exposure_bias import exposure_bias_ratio
from ebms.metrics.seeds import SeedComparison, compare_over_seeds
from ebms.models.lm import LSTMLM
from ebms.models.lm.perplexity import perplexity
from ebms.models.pixelcnn import PixelCNNAdapter, PixelCNNModel
from ebms.models.seq2seq import Seq2SeqAdapter, Seq2SeqTransformer
from ebms.nets.pixelcnn import PixelCNN
from ebms.objectives import AutoregressiveNLL, PixelNLL, Seq2SeqNLL
from ebms.objectives.earm import EARM
from ebms.sequences import Sequences
from ebms.train import Trainer

BENCH = "earm_compare"
TASKS = ("lm", "mt", "pixelcnn")
STEPS = {"lm": (600, 400), "mt": (950, 800), "pixelcnn": (330, 250)}  # (N, N0)
BATCH = 32
EARM_SETTINGS = {"truncate": 2, "ema": 0.9}
MT_BUCKETS = ((0, 10), (10, 20), (20, None))


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps-scale", type=float, default=1.0, help="multiply every N and N0 (default 1)")
    p.add_argument("--record", default=None,
                   help=f"record name, benchmarks/records/NAME.json (default {BENCH}; --quick: no record)")


# --- the two arms -------------------------------------------------------------------------------
def train_arms(model: nn.Module, ce: nn.Module, earm: nn.Module, data: Callable[[int, torch.Generator], Any],
               steps: int, warm: int, lr: float, seed: int) -> dict[str, Any]:
    """CE for ``warm`` steps, then the two branches; returns ``{"ce": model, "earm": model, ...}``."""
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)

    def fit(obj: nn.Module, m: nn.Module, o: torch.optim.Optimizer, n: int, gen: torch.Generator) -> dict:
        res = Trainer(obj, m, data, optimizer=o, steps=n, batch_size=BATCH, run_dir=None, generator=gen,
                      progress=False, checkpoint_every=None, guard=None, grad_clip=1.0, log_every=max(n, 1)).fit()
        return {k: float(v) for k, v in (res.metrics or {}).items() if isinstance(v, (int, float))}

    t0 = time.perf_counter()
    fit(ce, model, opt, warm, g)
    out: dict[str, Any] = {"warm_s": time.perf_counter() - t0}
    snap, opt_state, g_state, rng = copy.deepcopy(model), copy.deepcopy(opt.state_dict()), g.get_state(), \
        torch.get_rng_state()
    for arm, obj in (("ce", ce), ("earm", earm)):
        m = copy.deepcopy(snap)
        o = torch.optim.Adam(m.parameters(), lr=lr)
        o.load_state_dict(opt_state)
        gen = torch.Generator()
        gen.set_state(g_state)
        torch.set_rng_state(rng)
        for mod in obj.modules():  # the warm-up steps count as E-ARM's CE-only steps (start_step = N0)
            if isinstance(mod, EARM):
                mod.steps.fill_(warm)
        t0 = time.perf_counter()
        out[arm + "_last_metrics"] = fit(obj, m, o, steps - warm, gen)
        out[arm + "_branch_s"] = time.perf_counter() - t0
        out[arm] = m.eval()
    return out


def _arm_record(tr: dict[str, Any]) -> dict[str, Any]:
    return {"warm_s": tr["warm_s"], "ce_branch_s": tr["ce_branch_s"], "earm_branch_s": tr["earm_branch_s"],
            "ce_total_s": tr["warm_s"] + tr["ce_branch_s"], "earm_total_s": tr["warm_s"] + tr["earm_branch_s"],
            "earm_step_cost_ratio": tr["earm_branch_s"] / tr["ce_branch_s"],
            "earm_last_metrics": tr["earm_last_metrics"], "ce_last_metrics": tr["ce_last_metrics"]}


def _chunks(x: Any, size: int) -> list[Any]:
    n = x.batch_size if isinstance(x, Sequences) else x.shape[0]
    return [x[torch.arange(i, min(i + size, n))] for i in range(0, n, size)]


# --- task 1: char LM ----------------------------------------------------------------------------
def task_lm(seed: int, steps: int, warm: int) -> dict[str, Any]:
    train_lines, test_lines = tiny_shakespeare("train", form="lines"), tiny_shakespeare("test", form="lines")
    vocab = Vocabulary.build(train_lines, level="char")
    train, test = vocab.encode(train_lines), vocab.encode(test_lines)
    k_mean = float(train.lengths.double().mean()) + 1.0
    torch.manual_seed(seed)
    lm = LSTMLM(len(vocab), embedding_dim=64, hidden_size=256, num_layers=1)

    def data(b: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
        rows = train[torch.randint(train.batch_size, (b,), generator=g)]
        return rows.tokens, rows.lengths

    earm = EARM(weight=1.0 / k_mean, start_step=warm, **EARM_SETTINGS)
    tr = train_arms(lm, AutoregressiveNLL(), earm, data, steps, warm, 2e-3, seed)
    batches = _chunks(test, 256)
    rec: dict[str, Any] = {"seed": seed, "weight": 1.0 / k_mean, **_arm_record(tr)}
    for arm in ("ce", "earm"):
        rec[arm + "_test_ppl"] = perplexity(tr[arm], batches).perplexity
    eb = exposure_bias_ratio(tr["earm"], tr["ce"], batches)
    rec.update(exposure_bias_ratio=eb.ratio, exposure_bias_count=eb.count, exposure_bias_total=eb.total,
               exposure_bias_ties=eb.ties)
    return rec


# --- task 2: toy translation --------------------------------------------------------------------
class PairBatches(nn.Module):
    """Objective wrapper: the Trainer hands tuples of tensors; seq2seq objectives want ``(src, tgt)``."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, model: nn.Module, batch: tuple[Tensor, ...], *, generator: torch.Generator | None = None):
        s_tok, s_len, t_tok, t_len = batch
        pair = (Sequences(s_tok, s_len, validate=False), Sequences(t_tok, t_len, validate=False))
        return self.inner(model, pair, generator=generator)


def task_mt(seed: int, steps: int, warm: int) -> dict[str, Any]:
    sp = toy_translation_splits(4000, 200, 500, seed=0, synonym_prob=0.2)
    src, tgt = sp.train.source, sp.train.target
    k_mean = float(tgt.lengths.double().mean()) + 1.0
    torch.manual_seed(seed)
    net = Seq2SeqTransformer(len(sp.source_vocab), len(sp.target_vocab), d_model=64, heads=4, layers=2, ff=128,
                             dropout=0.1, max_length=40)
    model = Seq2SeqAdapter(net)

    def data(b: int, g: torch.Generator) -> tuple[Tensor, ...]:
        idx = torch.randint(src.batch_size, (b,), generator=g)
        s, t = src[idx], tgt[idx]
        return s.tokens, s.lengths, t.tokens, t.lengths

    earm = EARM(weight=1.0 / k_mean, start_step=warm, label_smoothing=0.1, **EARM_SETTINGS)
    tr = train_arms(model, PairBatches(Seq2SeqNLL(label_smoothing=0.1)), PairBatches(earm), data, steps, warm,
                    3e-3, seed)
    rec: dict[str, Any] = {"seed": seed, "weight": 1.0 / k_mean, **_arm_record(tr)}
    ts, tt = sp.test.source, sp.test.target
    pairs = list(zip(_chunks(ts, 250), _chunks(tt, 250)))
    for arm in ("ce", "earm"):
        m: Seq2SeqTransformer = tr[arm].model
        with torch.no_grad():
            greedy = Sequences.cat([m.greedy(s) for s, _ in pairs])
            beam = Sequences.cat([m.beam_search(s, beam=5).sequences for s, _ in pairs])
            lp = sum(float(m.log_prob(s, t).double().sum()) for s, t in pairs)
        rec[arm + "_bleu_greedy"] = corpus_bleu(greedy, tt, vocab=sp.target_vocab)
        rec[arm + "_bleu_beam5"] = corpus_bleu(beam, tt, vocab=sp.target_vocab)
        for b in bleu_by_length(beam, tt, MT_BUCKETS, vocab=sp.target_vocab):
            rec[f"{arm}_bleu_beam5_len{b.low}-{b.high or 'inf'}"] = b.bleu
            rec[f"bucket_sentences_len{b.low}-{b.high or 'inf'}"] = b.sentences
        rec[arm + "_test_nll_per_token"] = -lp / float((tt.lengths + 1).sum())
    eb = exposure_bias_ratio(tr["earm"], tr["ce"], pairs)
    rec.update(exposure_bias_ratio=eb.ratio, exposure_bias_count=eb.count, exposure_bias_total=eb.total,
               exposure_bias_ties=eb.ties)
    return rec


# --- task 3: PixelCNN ---------------------------------------------------------------------------
def mnist14(split: str, seed: int) -> Tensor:
    grey = load_mnist(split).images.float().div(255.0).unsqueeze(1)  # (n, 1, 28, 28)
    return binarize(F.avg_pool2d(grey, 2), method="stochastic", seed=seed)  # (n, 1, 14, 14)


def task_pixelcnn(seed: int, steps: int, warm: int, cache: dict[str, Tensor]) -> dict[str, Any]:
    if not cache:
        cache["train"], cache["test"] = mnist14("train", 0), mnist14("test", 1)
    train, test = cache["train"], cache["test"]
    torch.manual_seed(seed)
    model = PixelCNNAdapter(PixelCNNModel(PixelCNN(1, hidden=32, layers=5, kernel=3), 14, 14))

    def data(b: int, g: torch.Generator) -> Tensor:
        return train[torch.randint(train.shape[0], (b,), generator=g)]

    k = 14 * 14
    earm = EARM(weight=1.0 / k, start_step=warm, max_steps=k, **EARM_SETTINGS)
    tr = train_arms(model, PixelNLL(), earm, data, steps, warm, 1e-3, seed)
    rec: dict[str, Any] = {"seed": seed, "weight": 1.0 / k, **_arm_record(tr)}
    for arm in ("ce", "earm"):
        with torch.no_grad():
            for split, x in (("test", test), ("train", train[:2000])):
                rec[f"{arm}_{split}_bits_per_dim"] = float(torch.cat([tr[arm].bits_per_dim(c)
                                                                      for c in _chunks(x, 1000)]).mean())
    return rec


# --- report -------------------------------------------------------------------------------------
def _ms(xs: list[float]) -> str:
    if len(xs) == 1:
        return f"{xs[0]:.4g}"
    return f"{statistics.mean(xs):.4g} ± {statistics.stdev(xs):.2g}"


def compare(recs: list[dict[str, Any]], name: str, lower_better: bool) -> SeedComparison | None:
    """E-ARM minus CE on figure ``name``, paired by seed; ``None`` when a seed lacks it (an empty bucket)."""
    ce = [r.get("ce_" + name) for r in recs]
    ea = [r.get("earm_" + name) for r in recs]
    if any(v is None for v in ce + ea):
        return None
    return compare_over_seeds(ea, ce, seeds=[r["seed"] for r in recs], name_a="E-ARM", name_b="cross-entropy",
                              metric=name, higher_is_better=not lower_better)


def _diff(c: SeedComparison) -> tuple[str, str]:
    if c.verdict == "one seed":
        return f"{c.mean_diff:+.3g}", c.words()
    return f"{c.mean_diff:+.3g} [{c.ci_low:+.3g}, {c.ci_high:+.3g}]", c.words()


def table(recs: list[dict[str, Any]], metrics: list[tuple[str, bool]]) -> str:
    rows = []
    for name, lower in metrics:
        c = compare(recs, name, lower)
        if c is None:
            rows.append([name, "-", "-", "-", "empty bucket"])
            continue
        rows.append([name + (" (lower better)" if lower else " (higher better)"), _ms(list(c.values_b)),
                     _ms(list(c.values_a)), *_diff(c)])
    extra = [["wall s per arm, total (warm-up shared)", _ms([r["ce_total_s"] for r in recs]),
              _ms([r["earm_total_s"] for r in recs]), "", "E-ARM branch step cost x" +
              f"{statistics.mean(r['earm_step_cost_ratio'] for r in recs):.2f}"]]
    if "exposure_bias_ratio" in recs[0]:
        extra.append(["exposure-bias ratio N/total (E-ARM vs CE)", "", _ms([r["exposure_bias_ratio"] for r in recs]),
                      "", "> 0.5: E-ARM gives more gold steps higher probability"])
    return C.format_table(["metric", "ce", "earm", "earm - ce (paired, 95 % CI)", "verdict"], rows + extra)


METRICS = {
    "lm": [("test_ppl", True)],
    "mt": [("bleu_greedy", False), ("bleu_beam5", False), ("bleu_beam5_len0-10", False),
           ("bleu_beam5_len10-20", False), ("bleu_beam5_len20-inf", False), ("test_nll_per_token", True)],
    "pixelcnn": [("test_bits_per_dim", True), ("train_bits_per_dim", True)],
}


NOTES = ("E-ARM against cross-entropy at an equal step budget: per task and seed one CE warm-up, then two "
         "branches from the same weights, optimizer state and data stream (ce: CE continues; earm: CE + "
         "E-ARM surrogate, weight 1/K). comparisons: ebms.metrics.compare_over_seeds, E-ARM minus CE, paired by "
         "seed, 95 % Student-t interval; perplexity, NLL and bits/dim lower is better, BLEU higher. "
         "exposure_bias_ratio: share of gold test tokens the E-ARM model gives more probability than the CE "
         "model of the same seed. earm_step_cost_ratio: E-ARM branch wall time / CE branch wall time (same step "
         "count). Times are wall seconds on a shared machine.")


def record_figures(results: dict[str, Any]) -> dict[str, Any]:
    """Per task: settings, per-seed figures, spread over seeds and the E-ARM-vs-CE comparisons."""
    out: dict[str, Any] = {}
    for task, res in results.items():
        recs = res["seeds"]
        comparisons = {}
        for name, lower in METRICS[task]:
            c = compare(recs, name, lower)
            if c is not None:
                comparisons[name] = c.to_dict()
        per_seed = {f"seed{r['seed']}": r for r in recs}
        means = {}
        for key in ("earm_step_cost_ratio", "exposure_bias_ratio", "ce_total_s", "earm_total_s", "seed_wall_s"):
            xs = [r[key] for r in recs if isinstance(r.get(key), (int, float))]
            if xs:
                means[key] = {"mean": statistics.mean(xs), "sd": statistics.stdev(xs) if len(xs) > 1 else None,
                              "min": min(xs), "max": max(xs)}
        out[task] = {"steps": res["steps"], "earm_start_step": res["earm_start_step"], "wall_s": res["wall_s"],
                     "comparisons": comparisons, "spread": means, "per_seed": per_seed}
    return out


def main() -> None:
    args = C.parse_args(__doc__.splitlines()[0], add_args)
    scale = args.steps_scale
    if args.quick:
        args.seeds, scale = args.seeds[:1], scale / 10
    if len(set(args.seeds)) != len(args.seeds):
        raise SystemExit(f"--seeds: expected distinct seeds; got {args.seeds}")
    info = C.machine_info(["sacrebleu"])
    record_name = args.record or (None if args.quick else BENCH)
    settings = {k: v for k, v in vars(args).items() if k not in ("no_save", "record", "repeats")}
    rec_out = Recorder(record_name or BENCH, seeds=args.seeds,
                       settings={**settings, "steps_scale_applied": scale, "earm": EARM_SETTINGS,
                                 "steps": {t: list(v) for t, v in STEPS.items()}, "batch": BATCH})
    t_all = time.perf_counter()
    results: dict[str, Any] = {}
    mnist: dict[str, Tensor] = {}
    for task in args.tasks:
        n, n0 = (max(2, round(v * scale)) for v in STEPS[task])
        recs = []
        for seed in args.seeds:
            C.note(f"[{BENCH}] {task} seed {seed}: {n} steps, E-ARM from step {n0}")
            t0 = time.perf_counter()
            if task == "lm":
                rec = task_lm(seed, n, n0)
            elif task == "mt":
                rec = task_mt(seed, n, n0)
            else:
                rec = task_pixelcnn(seed, n, n0, mnist)
            rec["seed_wall_s"] = time.perf_counter() - t0
            C.note(f"[{BENCH}]   done in {rec['seed_wall_s']:.0f} s")
            recs.append(rec)
        results[task] = {"steps": n, "earm_start_step": n0, "batch": BATCH, "seeds": recs,
                         "wall_s": sum(r["seed_wall_s"] for r in recs)}
        print(f"\n== {task}: {n} steps (CE warm-up {n0}, then E-ARM weight {recs[0]['weight']:.4g}, truncate 2, "
              f"ema 0.9), seeds {' '.join(map(str, args.seeds))}, {results[task]['wall_s']:.0f} s")
        print(table(recs, METRICS[task]))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    record = {"bench": BENCH, "machine": info, "settings": {**vars(args), "earm": EARM_SETTINGS, "steps": STEPS},
              "tasks": results, "wall_s": time.perf_counter() - t_all, "peak_rss_mb": peak}
    C.save_results(("quick/" if args.quick else "") + BENCH, record, enabled=not args.no_save)
    summary: dict[str, Any] = {"bench": BENCH, "seeds": len(args.seeds)}
    for task, res in results.items():
        for name, _ in METRICS[task][:2]:
            for arm in ("ce", "earm"):
                vals = [r[f"{arm}_{name}"] for r in res["seeds"] if r.get(f"{arm}_{name}") is not None]
                summary[f"{task}_{arm}_{name}"] = round(statistics.mean(vals), 4) if vals else None
    summary.update(wall_s=round(record["wall_s"], 1), peak_rss_mb=round(peak))
    rec_out.write(record_figures(results), notes=NOTES, enabled=record_name is not None and not args.no_save)
    C.emit_final_line(summary)


if __name__ == "__main__":
    main()

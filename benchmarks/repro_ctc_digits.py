r"""Connected spoken digits: CTC-CRF against CTC under the same budget, label error rate over seeds.

The quality comparison of the issue's speech part: the connected-digit task of
:func:`ebms.data.fsdd.connected_digits` (FSDD recordings, strings of 1-7 digits from one speaker,
speaker-disjoint test set: speaker ``theo`` held out), trained through exactly the code path of
``ebms train`` with the two packaged recipes ``ctc-digits.toml`` (CTC; Graves et al., 2006) and
``ctc-crf-digits.toml`` (CTC-CRF with a bigram denominator LM of the training transcripts and
auxiliary CTC weight 0.1; Xiang & Ou, 2019). Both use the same acoustic model
(:class:`ebms.nets.acoustic.ConvBiLSTM`), data, Adam settings, steps and batch size; only
``objective.kind`` differs. For each training seed (``run.seed``: initial weights and batch
order) both objectives are trained, alternating which goes first, and the test LER of greedy
best-path decoding is recorded (for CTC-CRF also ``ler_lm``, decoding with the den n-gram).

.. math::  \mathrm{LER} = 100 \cdot \frac{\sum_u \mathrm{edit}(y_u, \hat y_u)}{\sum_u |y_u|}

Reported: LER mean +- sample standard deviation over the seeds, per-run figures and times, and
the paired comparison over seeds (:func:`ebms.metrics.compare_over_seeds`: mean difference of
CTC-CRF minus CTC, its 95 % Student-t interval and the verdict it allows), for greedy decoding
and for CTC-CRF decoded with its denominator n-gram.
Outputs: a table on stdout, ``benchmarks/results/repro_ctc_digits.json`` (every run), the
committed record ``benchmarks/records/repro_ctc_digits.json`` (the summaries and the per-seed
figures) and one final JSON line.
Default: the recipes as packaged (1,000 training and 300 test utterances), 5 seeds (about
12 minutes at one torch thread).
``--quick`` (under a minute) keeps the comparison with 1 seed, 100 training / 30 test
utterances and 40 steps (too short to leave the all-blank stage), writes under
``benchmarks/results/quick/`` and no committed record.

Run: ``python benchmarks/repro_ctc_digits.py [--quick] [--seeds 5] [--steps N]``.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as C
from _record import Recorder

from ebms.cli.config import load_config
from ebms.cli.run import load_run, train
from ebms.cli.speech import SpeechTask
from ebms.metrics import compare_over_seeds

BENCH = "repro_ctc_digits"
RECIPES = Path(__file__).resolve().parents[1] / "src" / "ebms" / "recipes"
OBJECTIVES = {"ctc": "ctc-digits.toml", "ctc-crf": "ctc-crf-digits.toml"}


def _args(p) -> None:
    p.add_argument("--seeds", type=int, default=5, help="training seeds 0..N-1 (default 5; --quick uses 1)")
    p.add_argument("--steps", type=int, default=None, help="training steps (default: the recipes' value)")


def _mean_std(xs: list[float]) -> tuple[float, float]:
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def main() -> None:
    args = C.parse_args(__doc__.splitlines()[0], _args)
    q = args.quick
    seeds = 1 if q else args.seeds
    rec = Recorder(BENCH, seeds=range(seeds))
    overrides = ["run.progress=false", "train.log_every=1000000"]
    if q:
        overrides += ["speech.n_train=100", "data.n_test=30", "train.steps=40", "train.checkpoint_every=40"]
    if args.steps is not None:
        overrides += [f"train.steps={args.steps}", f"train.checkpoint_every={args.steps}"]
    task = SpeechTask()
    runs: list[dict[str, Any]] = []
    record: dict[str, Any] = {"bench": BENCH, "quick": q, "overrides": overrides, "machine": C.machine_info()}
    with tempfile.TemporaryDirectory() as out:
        for seed in range(seeds):
            order = list(OBJECTIVES) if seed % 2 == 0 else list(OBJECTIVES)[::-1]
            for kind in order:
                cfg = load_config(RECIPES / OBJECTIVES[kind], [*overrides, f"run.seed={seed}", f"run.out_dir={out}"])
                t0 = time.perf_counter()
                run_dir = train(cfg, overwrite=True)
                t_train = time.perf_counter() - t0
                cfg, model, data, step = load_run(run_dir)
                t0 = time.perf_counter()
                figures = task.evaluate(cfg, model, data)
                runs.append({"objective": kind, "seed": seed, "steps": step, "train_s": t_train,
                             "eval_s": time.perf_counter() - t0, **figures})
                C.note(f"seed {seed} {kind:8s} LER {figures['ler']:.2f}%  ({t_train:.0f} s)")
    s = task.settings(cfg)
    record["config"] = {"n_train": s.n_train, "n_test": cfg.data.n_test, "max_digits": s.max_digits,
                        "test_speakers": s.test_speakers, "steps": cfg.train.steps,
                        "batch_size": cfg.train.batch_size, "model_hidden": [s.channels, s.hidden], "seeds": seeds}
    record["runs"] = runs
    summary: dict[str, Any] = {}
    rows = []
    for kind in OBJECTIVES:
        mine = [r for r in runs if r["objective"] == kind]
        for key in ("ler", "ler_lm", "ser"):
            vals = [r[key] for r in mine if key in r]
            if vals:
                m, s = _mean_std(vals)
                summary[f"{kind}_{key}_mean"], summary[f"{kind}_{key}_std"] = m, s
        rows.append([kind, f"{summary[f'{kind}_ler_mean']:.2f} +- {summary[f'{kind}_ler_std']:.2f}",
                     f"{summary[f'{kind}_ler_lm_mean']:.2f} +- {summary[f'{kind}_ler_lm_std']:.2f}"
                     if f"{kind}_ler_lm_mean" in summary else None,
                     f"{summary[f'{kind}_ser_mean']:.1f}", ", ".join(f"{r['ler']:.2f}" for r in mine),
                     statistics.fmean(r["train_s"] for r in mine)])
    record["summary"] = summary
    print()
    print(C.format_table(["objective", "LER % (greedy)", "LER % (den LM)", "SER %", "per seed", "train s"], rows))
    path = C.save_results(("quick/" if q else "") + BENCH, record, enabled=not args.no_save)
    C.note(f"wrote {path}")
    if not (q or args.no_save):
        rec.settings = {"overrides": overrides, **record["config"]}
        rec.write(_figures(runs, summary), notes=(
            "Test label error rate (%) of the held-out speaker's 300 utterances; ler: greedy best-path decoding, "
            "ler_lm: CTC-CRF decoded with its denominator bigram (prefix beam 8); ser: sentence error rate (%). "
            "Means and sample standard deviations over the training seeds (run.seed: initial weights and batch "
            "order; the data set is fixed). Comparisons: compare_over_seeds, a = CTC-CRF, b = CTC, paired by "
            "seed, 95 % Student-t interval of the mean difference. train_s: wall seconds per training run on "
            "the shared 2-core machine."))
    C.emit_final_line({"bench": BENCH, "quick": q, "seeds": seeds, **{k: round(v, 4) for k, v in summary.items()}})


def _figures(runs: list[dict[str, Any]], summary: dict[str, Any]) -> dict[str, Any]:
    """The committed figures: per-seed values, the summaries and the paired comparisons."""
    by = {kind: sorted((r for r in runs if r["objective"] == kind), key=lambda r: r["seed"]) for kind in OBJECTIVES}
    seeds = [r["seed"] for r in by["ctc"]]
    keep = ("ler", "ler_lm", "ser", "substitutions", "deletions", "insertions", "ref_labels", "utterances",
            "steps", "train_s")
    per_seed = {kind: [{k: r[k] for k in ("seed", *keep) if k in r} for r in rs] for kind, rs in by.items()}
    ctc = [r["ler"] for r in by["ctc"]]
    out: dict[str, Any] = {"summary": summary, "per_seed": per_seed}
    if len(seeds) >= 2:
        out["crf_vs_ctc_greedy"] = compare_over_seeds(
            [r["ler"] for r in by["ctc-crf"]], ctc, seeds=seeds, name_a="CTC-CRF", name_b="CTC",
            metric="test LER (%), greedy decoding", higher_is_better=False).to_dict()
        out["crf_lm_vs_ctc_greedy"] = compare_over_seeds(
            [r["ler_lm"] for r in by["ctc-crf"]], ctc, seeds=seeds, name_a="CTC-CRF (den-LM decoding)",
            name_b="CTC", metric="test LER (%); CTC-CRF decoded with its den bigram, CTC greedy",
            higher_is_better=False).to_dict()
        out["crf_lm_vs_crf_greedy"] = compare_over_seeds(
            [r["ler_lm"] for r in by["ctc-crf"]], [r["ler"] for r in by["ctc-crf"]], seeds=seeds,
            name_a="den-LM decoding", name_b="greedy decoding", metric="CTC-CRF test LER (%)",
            higher_is_better=False).to_dict()
    return out


if __name__ == "__main__":
    main()

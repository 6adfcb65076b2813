"""The discrete TRF recipe's run: test perplexity with its training zeta at every checkpoint, wall time, memory.

Workload:
    run         an ``ebms train`` run folder of a discrete TRF (``--run DIR``, e.g. ``runs/trf-ptb-c`` of
                ``ebms train trf-ptb run.name=trf-ptb-c``), read only: the model is built once from the
                folder (its vocabulary, word classes and feature table, :func:`rescoring_lms.open_trf_run`),
                then every committed checkpoint's weights and ``zeta`` are loaded in turn (sha256-verified by
                ``CheckpointStore.load``).
    perplexity  at each checkpoint, ``trf_perplexity`` of the run's test split with the training ``zeta``
                (``log p = log pi_l - E(x) - zeta_l``, ``</s>`` counted), and of every ``--train-every``-th
                training sentence (default 14: about 3,000 of PTB's 42,068): a model far better on its
                training sentences than on the test ones overfits, one as bad on both underfits. The
                training-zeta figure is the source's own way of reporting (its 139.94); it is exact only
                where ``zeta = log Z``, which ``benchmarks/trf_logz_ais.py --run`` checks with AIS.
    wall time   from the run's ``metrics.jsonl``: each segment (a start or a ``--resume``; ``elapsed_s``
                restarts at 0; a resume rewinds the log to its checkpoint, so steps done again count once)
                contributes its last logged ``elapsed_s``; steps per second per segment and over the run.
                Setup (features, classes, moments) before the first step is not in ``elapsed_s``.
    memory      with ``--memory-log FILE [FILE ...]`` (one per segment): lines ``EPOCH PID hwm=KiB rss=KiB
                pss=KiB`` written while the run trained (``benchmarks/pss_watch.sh PATTERN`` writes them):
                the largest sum of PSS over the run's processes at one sampling time, and each process's
                peak RSS (``VmHWM``).
    same as     with ``--same-as DIR``: another run of the same configuration and seed (e.g. one trained
                by older code, or on another machine), compared with this one: every step both logged
                (loss, gradient norm and every metric, exactly) and every checkpoint step both hold
                (every tensor, weights and optimiser state, with ``torch.equal``); the first difference
                of each is recorded. Resumed segments must reproduce an uninterrupted run bit for bit.
    beside      ebms's KN5 (``benchmarks/records/kn5_ptb.json``, when present) and the source's table
                (``trf_logz_ais.PUBLISHED``: KN5 141.19, the source's TRF with its own zeta 139.94).

Record (not with ``--no-save``): ``benchmarks/records/trf_ptb_recipe.json`` (``--name`` for another).
Run: ``python benchmarks/trf_recipe_curve.py --run DIR [--command TEXT] [--memory-log FILE]
[--train-every N] [--steps 1000,5000,...] [--same-as DIR]``. The last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import _common as C
import torch
from _record import RECORDS_DIR, Recorder

BENCH = "trf_ptb_recipe"


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", type=Path, required=True, help="the ebms train run folder of a discrete TRF")
    p.add_argument("--command", default=None, help="the command that trained it, for the record")
    p.add_argument("--memory-log", type=Path, nargs="+", default=None,
                   help="PSS samples written while it trained (one file per segment of a resumed run)")
    p.add_argument("--train-every", type=int, default=14, help="every N-th training sentence for the train figure")
    p.add_argument("--steps", default=None, help="comma-separated checkpoint steps (default: every one)")
    p.add_argument("--same-as", type=Path, default=None, help="another run of the same config and seed to compare with")
    p.add_argument("--name", default=BENCH, help=f"the record's name (default {BENCH})")


def segments(metrics: Path) -> list[dict[str, float]]:
    """Per segment of the run (a start or a resume): first and last logged step, last ``elapsed_s``."""
    out: list[dict[str, float]] = []
    for line in metrics.read_text().splitlines():
        row = json.loads(line)
        step, elapsed = row.get("step"), (row.get("time") or {}).get("elapsed_s")
        if step is None or elapsed is None:
            continue
        if not out or elapsed < out[-1]["elapsed_s"]:  # elapsed restarts: a new segment
            out.append({"first_step": step, "last_step": step, "elapsed_s": elapsed})
        else:
            out[-1].update(last_step=step, elapsed_s=elapsed)
    return out


def memory(logs: Path | list[Path]) -> dict[str, Any]:
    """The largest summed PSS at one sampling time and each process's peak RSS (MiB) of ``pss_watch`` logs
    (one per segment of a resumed run; each log's own peak under ``per_log`` when there are several)."""
    logs = [logs] if isinstance(logs, Path) else list(logs)
    pss: dict[str, float] = {}
    hwm: dict[str, float] = {}
    per_log = []
    for log in logs:
        mine: dict[str, float] = {}
        for line in log.read_text().splitlines():
            parts = line.split()
            if len(parts) != 5 or not parts[0].isdigit():
                continue
            fields = dict(p.split("=", 1) for p in parts[2:])
            if not all(fields.get(k, "").isdigit() for k in ("hwm", "pss")):
                continue
            mine[parts[0]] = mine.get(parts[0], 0.0) + int(fields["pss"]) / 1024
            hwm[parts[1]] = max(hwm.get(parts[1], 0.0), int(fields["hwm"]) / 1024)
        if not mine:
            raise SystemExit(f"--memory-log: {log}: no lines 'EPOCH PID hwm=KiB rss=KiB pss=KiB' (benchmarks/pss_watch.sh)")
        per_log.append({"log": log.name, "peak_summed_pss_mib": round(max(mine.values()), 1), "samples": len(mine)})
        for t, v in mine.items():
            pss[t] = pss.get(t, 0.0) + v
    out = {"peak_summed_pss_mib": round(max(pss.values()), 1), "samples": len(pss),
           "peak_rss_mib_per_process": {pid: round(v, 1) for pid, v in sorted(hwm.items())}}
    return out if len(logs) == 1 else {**out, "per_log": per_log}


def _logged(metrics: Path) -> dict[int, dict[str, Any]]:
    """Step -> (loss, grad_norm, metrics) of every logged training step of a ``metrics.jsonl``."""
    out = {}
    for line in metrics.read_text().splitlines():
        row = json.loads(line)
        if "event" not in row and "loss" in row:
            out[row["step"]] = {"loss": row["loss"], "grad_norm": row.get("grad_norm"), "metrics": row.get("metrics")}
    return out


def same_as(run: Path, other: Path) -> dict[str, Any]:
    """Exact comparison of two runs of one configuration: logged steps and checkpoint tensors."""
    from ebms.train.checkpoint import CheckpointStore

    mine, theirs = _logged(run / "metrics.jsonl"), _logged(other / "metrics.jsonl")
    common = sorted(set(mine) & set(theirs))
    differ = [s for s in common if mine[s] != theirs[s]]
    stores = CheckpointStore(run / "checkpoints"), CheckpointStore(other / "checkpoints")
    ckpt_steps = [st.steps() for st in stores]
    both = sorted(set(ckpt_steps[0]) & set(ckpt_steps[1]))
    first_ckpt_difference = None
    for step in both:
        a, b = (st.load(step).tensors for st in stores)
        bad = sorted(k for k in set(a) | set(b) if k not in a or k not in b or not torch.equal(a[k], b[k]))
        if bad:
            first_ckpt_difference = {"step": step, "tensors": bad[:10], "count": len(bad)}
            break
        C.note(f"[{BENCH}] same as {other}: step {step}: {len(a)} tensors equal")
    return {"run": str(other), "logged_steps_compared": len(common), "logged_steps_differing": len(differ),
            "first_logged_difference": differ[0] if differ else None, "checkpoint_steps_compared": both,
            "first_checkpoint_difference": first_ckpt_difference,
            "identical": not differ and first_ckpt_difference is None and bool(common) and bool(both)}


def main() -> None:
    args = C.parse_args(__doc__.splitlines()[0], add_args)
    if args.train_every < 1:
        raise SystemExit(f"--train-every: expected an int >= 1; got {args.train_every}")
    for log in args.memory_log or []:
        if not log.is_file():
            raise SystemExit(f"--memory-log: no file {log}")
    metrics_path = args.run / "metrics.jsonl"
    if not metrics_path.is_file():
        raise SystemExit(f"--run: {args.run}: no metrics.jsonl (is it an `ebms train` run folder?)")
    if args.same_as is not None and not (args.same_as / "metrics.jsonl").is_file():
        raise SystemExit(f"--same-as: {args.same_as}: no metrics.jsonl (is it an `ebms train` run folder?)")
    from rescoring_lms import open_trf_run
    from trf_logz_ais import PUBLISHED

    from ebms.data.text import sentence_batches
    from ebms.metrics import trf_perplexity
    from ebms.train.checkpoint import CheckpointStore

    rec = Recorder(args.name, seeds=[], settings={"run": str(args.run), "train_every": args.train_every})
    t0 = time.perf_counter()
    _, cfg, model, data, info = open_trf_run(args.run, flag="--run")
    if cfg.model.kind != "trf":
        raise SystemExit(f"--run: {args.run}: expected a discrete TRF (model.kind trf); got {cfg.model.kind!r}")
    store = CheckpointStore(args.run / "checkpoints")
    steps = store.steps()
    if args.steps:
        wanted = sorted({int(s) for s in args.steps.split(",") if s.strip()})
        missing = sorted(set(wanted) - set(steps))
        if missing:
            raise SystemExit(f"--steps: no checkpoint at step(s) {missing} in {args.run}; it has {steps}")
        steps = wanted
    test = data.held_out["test"]
    train = data.train[torch.arange(0, data.train.batch_size, args.train_every)]
    curve = []
    for step in steps:
        model.load_state_dict(store.load(step).state())
        with torch.no_grad():
            row = {"step": step}
            for name, x in (("test", test), ("train_subset", train)):
                r = trf_perplexity(model, sentence_batches(x, 256, shuffle=False))
                row[f"{name}_ppl"] = r.training.perplexity
        curve.append(row)
        C.note(f"[{BENCH}] step {step}: test {row['test_ppl']:.2f}, train subset {row['train_subset_ppl']:.2f}")
    segs = segments(metrics_path)
    wall = sum(s["elapsed_s"] for s in segs)
    logged = sum(s["last_step"] - s["first_step"] for s in segs)
    per_segment = [{**s, "steps_per_s": (s["last_step"] - s["first_step"]) / s["elapsed_s"] if s["elapsed_s"] else None}
                   for s in segs]
    kn5_path = RECORDS_DIR / "kn5_ptb.json"
    kn5 = None
    if kn5_path.is_file():  # the record of `ebms train kn5-ptb` + `ebms eval`: figures.run.<eval.json>.figures.test
        for run in json.loads(kn5_path.read_text()).get("figures", {}).get("run", {}).values():
            kn5 = (run.get("figures", {}).get("test") or {}).get("perplexity", kn5)
    published = {k: {"label": v[0], "row": v[1], "value": v[2]} for k, v in PUBLISHED.items()
                 if k in ("kn5", "source_trf_own_zeta")}
    final = curve[-1] if curve else None
    figures: dict[str, Any] = {
        "checkpoints": curve, "final": final, "train_steps": cfg.train.steps, "last_checkpoint": info["checkpoint_step"],
        "segments": per_segment, "wall_s_logged": wall, "steps_logged": logged,
        "steps_per_s": logged / wall if wall else None, "hours_for_20000_at_this_rate": 20000 * wall / logged / 3600
        if logged else None, "test_sentences": test.batch_size, "train_subset_sentences": train.batch_size,
        "ebms_kn5_test_ppl": kn5, "published": published,
        "memory": memory(args.memory_log) if args.memory_log is not None else None,
        "same_as": same_as(args.run, args.same_as) if args.same_as is not None else None,
        "evaluation_s": time.perf_counter() - t0,
        "command": args.command or f"ebms train {args.run / 'config.toml'}"}
    rows = [[r["step"], r["test_ppl"], r["train_subset_ppl"]] for r in curve]
    print(f"{args.run}: {cfg.model.kind} with objective {cfg.objective.kind!r}, perplexity with the training zeta "
          f"({test.batch_size} test sentences; every {args.train_every}th training sentence)")
    print(C.format_table(["step", "test ppl", "train-subset ppl"], rows))
    print(f"wall {wall / 3600:.2f} h over {logged} logged steps in {len(segs)} segment(s) "
          f"({figures['steps_per_s'] or 0:.2f} steps/s); beside: the source's TRF (own zeta) 139.94, KN5 141.19"
          + (f", ebms KN5 {kn5:.2f}" if kn5 else ""))
    rec.write(figures, notes=(
        "Discrete TRF recipe run: test perplexity with the run's training zeta at each checkpoint (exact only where "
        "zeta = log Z; trf_logz_ais.py --run checks with AIS), and on every train_every-th training sentence. "
        "Wall time: the runs' own elapsed_s per segment (setup before the first step excluded); the segments' "
        "machine load is not controlled here (see the notes of the issue that ran it). memory: PSS samples of "
        "the run's processes (benchmarks/pss_watch.sh), when given."), enabled=not args.no_save)
    summary = {"bench": BENCH, "steps": [r["step"] for r in curve],
               "final_test_ppl": None if final is None else round(final["test_ppl"], 4),
               "steps_per_s": None if figures["steps_per_s"] is None else round(figures["steps_per_s"], 4)}
    C.emit_final_line({k: v for k, v in summary.items() if not (isinstance(v, float) and not math.isfinite(v))})


if __name__ == "__main__":
    sys.exit(main())

"""Peak memory (RSS) and wall time of every packaged recipe, each in a fresh process.

Each recipe runs as ``ebms train <recipe> train.steps=N`` (evaluation included
unless ``--no-eval``) in a temporary run folder; the peak resident set size of
that process comes from ``os.wait4``'s resource usage (``ru_maxrss``, KiB on
Linux), so it includes the interpreter, torch and the data as loaded.

Peak memory depends on the data, the model and the evaluation, not on the
number of steps once a few steps have run; ``--steps`` (default 20) keeps the
run short, and ``--full`` runs each recipe's own step count. The number of
steps used is printed beside each figure.

There is no peer library here: the figure is a budget for users ("this recipe
needs about X GB"), quoted in docs/cli.md. Recipes whose data set is absent
(``$EBMS_DATA``) are listed as skipped, with the reason. A residual recipe trains on
the run of its base recipe (trained just before it in the same folder), and the first
row is the baseline: a process that only imports the command line, torch and
matplotlib. Without ``--no-save`` the figures go to ``benchmarks/records/recipe_memory.json``
(``--name NAME``: ``benchmarks/records/NAME.json``, e.g. for one recipe measured again).

Recipes that fork worker processes (``trf-ptb``: ``trf.workers = 2``) share most of their pages
with them, so the sum of the processes' RSS overstates their memory and ``ru_maxrss`` of the main
process understates it. Each row therefore also has ``peak_tree_pss_mib``: the largest sum, over
the process and its descendants, of the proportional set size (``Pss`` of ``/proc/PID/smaps_rollup``:
each shared page divided among the processes that map it), sampled every 0.25 s by a thread of the
child (Linux only; absent elsewhere).

``--resume RUN_DIR`` measures a resume instead: the run folder's files and its newest checkpoint are
copied into a temporary folder (the run itself is only read) and ``ebms train <copy>/config.toml --resume``
trains ``--steps`` more steps there; the row is named after the run folder and the checkpoint's step.
What a resume adds (reading the checkpoint, putting it into a model built from the data) then shows
beside the recipe's fresh start.

``--release both`` measures what :class:`ebms.train.ReleaseMemory` (glibc's ``malloc_trim`` every 100
steps, in ``ebms train`` and in the sampler's worker processes) saves: each recipe runs twice, first
with ``EBMS_RELEASE_MEMORY=0`` (rows ``NAME (release off)``), then as shipped; ``--release off`` only
the first. A long run shows the difference best (the freed temporaries pile up step after step).

Usage::

    python benchmarks/recipe_memory.py [--quick] [--steps N | --full] [--only demo,rbm-digits] [--no-eval]
        [--name NAME] [--release on|off|both] [--resume RUN_DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
#: a residual recipe's base: (the key naming the base run, the recipe that trains it)
BASES = {"residual-addition": ("generation.base_run", "addition-base"),
         "residual-shakespeare": ("residual.base_run", "char-lstm-shakespeare")}
#: recipes small enough for --quick (seconds each with 20 steps)
QUICK = ("demo", "rbm-digits")


def recipes() -> list[str]:
    from ebms.cli.main import list_recipes

    return list_recipes()


def tree_pss_kib(pid: int) -> int | None:
    """Sum of ``Pss`` (KiB) over ``pid`` and its descendants (``/proc``; ``None`` where unreadable)."""
    total, stack, seen = 0, [pid], False
    while stack:
        p = stack.pop()
        try:
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total, seen = total + int(line.split()[1]), True
                    break
            for task in os.listdir(f"/proc/{p}/task"):
                stack += [int(c) for c in Path(f"/proc/{p}/task/{task}/children").read_text().split()]
        except (OSError, ValueError):
            continue  # a process that ended meanwhile, or no /proc
    return total if seen else None


class PeakTreePss:
    """A daemon thread keeping the largest :func:`tree_pss_kib` of this process, sampled every ``period`` s."""

    def __init__(self, period: float = 0.25) -> None:
        import threading

        self.peak: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(period,), daemon=True)
        self._thread.start()

    def _run(self, period: float) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(period)

    def sample(self) -> None:
        now = tree_pss_kib(os.getpid())
        if now is not None:
            self.peak = now if self.peak is None else max(self.peak, now)

    def stop(self) -> int | None:
        self._stop.set()
        self._thread.join()
        self.sample()
        return self.peak


def child_main(argv: list[str]) -> int:
    """Run ``ebms`` in this process and print its peak RSS and the peak PSS of its process tree (called
    through ``--child``); no arguments: only import what every command imports (the baseline)."""
    import resource

    watch = PeakTreePss()
    from ebms.cli.main import main

    if argv:
        code = main(argv)
    else:
        import matplotlib.pyplot  # noqa: F401  (what the plots load)
        import torch  # noqa: F401

        code = 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"PEAK_RSS_KIB {peak}", flush=True)
    pss = watch.stop()
    if pss is not None:
        print(f"PEAK_TREE_PSS_KIB {pss}", flush=True)
    return code


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)} (under a minute)")
    p.add_argument("--steps", type=int, default=20, help="train.steps for each recipe (default 20)")
    p.add_argument("--full", action="store_true", help="each recipe's own train.steps")
    p.add_argument("--only", default=None, help="comma-separated recipe names")
    p.add_argument("--no-eval", action="store_true", help="skip each recipe's evaluation")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds per recipe")
    p.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS for the recipes (default 2)")
    p.add_argument("--no-save", action="store_true", help="write no record")
    p.add_argument("--name", default="recipe_memory", help="the record's name (default recipe_memory)")
    p.add_argument("--release", choices=("on", "off", "both"), default="on",
                   help="ReleaseMemory as shipped (on), turned off (EBMS_RELEASE_MEMORY=0), or both, off first")
    p.add_argument("--resume", type=Path, default=None, help="measure a resume of this run folder's newest "
                   "checkpoint (in a copy) for --steps steps, instead of the recipes")
    p.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child is not None:
        return child_main(args.child)
    if args.steps < 1:
        p.error(f"--steps: expected an int >= 1; got {args.steps}")
    if args.threads is not None:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
    names = recipes()
    if args.only:
        wanted = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = sorted(set(wanted) - set(names))
        if unknown:
            p.error(f"--only: unknown recipe(s) {unknown}; packaged: {', '.join(names)}")
        names = wanted
    elif args.quick:
        names = [n for n in names if n in QUICK]
    if args.resume is not None:
        if args.only or args.quick or args.full:
            p.error("--resume: measures one run folder; drop --only, --quick and --full")
        if not (args.resume / "config.toml").is_file():
            p.error(f"--resume: {args.resume} is not a run folder (no config.toml)")
        names = [str(args.resume)]
    steps = None if args.full else args.steps
    sys.path.insert(0, str(HERE))
    from _record import Recorder

    recorder = Recorder(args.name, settings={"steps": steps, "eval": not args.no_eval,
                                                   "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
                                                   "recipes": names, "release": args.release})
    modes = {"on": ["on"], "off": ["off"], "both": ["off", "on"]}[args.release]
    rows = [_run_child(None, None, "", False, args.timeout)]
    print(f"{'(baseline: imports)':24s} {rows[0].get('peak_rss_mib', 0):8.0f} MiB", flush=True)
    with tempfile.TemporaryDirectory(prefix="ebms-recipe-mem-") as tmp:
        for name in names:
            extra = [f"{BASES[name][0]}={Path(tmp) / BASES[name][1]}"] if name in BASES else []
            for mode in modes:
                if args.resume is not None:
                    rec = _resume_child(args.resume, args.steps, Path(tmp), not args.no_eval, args.timeout,
                                        release=mode == "on")
                else:
                    rec = _run_child(name, steps, tmp, not args.no_eval, args.timeout, extra, release=mode == "on")
                rows.append(rec)
                mem = f"{rec['peak_rss_mib']:8.0f} MiB" if "peak_rss_mib" in rec else "       - MiB"
                pss = f"  tree PSS {rec['peak_tree_pss_mib']:8.0f} MiB" if "peak_tree_pss_mib" in rec else ""
                note = rec.get("error", "")
                print(f"{row_name(rec):24s} steps={rec['steps'] if rec['steps'] is not None else 'recipe':>6}  {mem}"
                      f"{pss}  {rec.get('wall_s', 0):7.1f} s  {note}", flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(rows, indent=2))
    ok = [r for r in rows if "peak_rss_mib" in r and r.get("returncode") == 0]
    recorder.write({row_name(r): {k: v for k, v in r.items() if k != "recipe"} for r in rows},
                   notes="peak RSS (MiB) and wall time (s) of `ebms train RECIPE train.steps=N` in a fresh process "
                         "each (evaluation included unless settings.eval is false); 'baseline' only imports "
                         "ebms.cli.main, torch and matplotlib; peak_tree_pss_mib: the largest sum of PSS over the "
                         "process and its worker processes (sampled every 0.25 s); rows 'NAME (release off)': "
                         "the recipe with EBMS_RELEASE_MEMORY=0 (no malloc_trim; settings.release)",
                   enabled=not args.no_save)
    print(json.dumps({"bench": "recipe_memory", "recipes": len(rows), "measured": len(ok),
                      "max_peak_rss_mib": max((r["peak_rss_mib"] for r in ok), default=None)}))
    return 0


def row_name(rec: dict) -> str:
    """A row's name: the recipe (``baseline`` for the imports-only row), `` (release off)`` added when
    it ran with ``EBMS_RELEASE_MEMORY=0``."""
    return (rec["recipe"] or "baseline") + ("" if rec.get("release", True) else " (release off)")


def _resume_child(run: Path, steps: int, tmp: Path, eval_: bool, timeout: float, *, release: bool = True) -> dict:
    """A resume of ``run``'s newest checkpoint for ``steps`` steps, in a copy under ``tmp`` (a fresh one each call)."""
    import shutil

    from ebms.train.checkpoint import CheckpointStore

    ckpt = CheckpointStore(run / "checkpoints").load()  # the newest valid one, sha256-checked
    record, step = ckpt.path, ckpt.step
    copy = tmp / f"resume-{run.name}"
    shutil.rmtree(copy, ignore_errors=True)
    (copy / "checkpoints").mkdir(parents=True)
    for f in run.iterdir():
        if f.is_file():
            shutil.copy2(f, copy / f.name)
    for f in (record, record.parent / ckpt.meta["weights"]["file"]):
        shutil.copy2(f, copy / "checkpoints" / f.name)
    (copy / "checkpoints" / "latest").write_text(record.name)
    rec = _run_child(str(copy / "config.toml"), None, str(tmp), eval_, timeout,
                     ["--resume", f"run.name={copy.name}", f"train.steps={step + steps}"], release=release, fresh=False)
    return {**rec, "recipe": f"{run.name} (resumed from step {step})", "steps": steps}


def _run_child(name: str | None, steps: int | None, tmp: str, eval_: bool, timeout: float,
               extra: list[str] | None = None, *, release: bool = True, fresh: bool = True) -> dict:
    """One recipe in a fresh process (``name=None``: the baseline, imports only); ``release=False``: with
    ``EBMS_RELEASE_MEMORY=0``; ``fresh=False``: no ``--overwrite`` (``extra`` says ``--resume``)."""
    argv = [] if name is None else ["train", name, f"run.out_dir={json.dumps(tmp)}", "run.progress=false",
                                    *(["--overwrite"] if fresh else []), *(extra or [])]
    if steps is not None:
        argv.append(f"train.steps={steps}")
    if not eval_ and name is not None:
        argv.append("--no-eval")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", *argv]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "EBMS_RELEASE_MEMORY": "1" if release else "0"})
    except subprocess.TimeoutExpired:
        return {"recipe": name, "steps": steps, "release": release, "error": f"timed out after {timeout:.0f} s"}
    rec: dict = {"recipe": name, "steps": steps, "release": release, "wall_s": round(time.perf_counter() - t0, 1),
                 "returncode": proc.returncode}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("PEAK_RSS_KIB ")]
    if lines:
        rec["peak_rss_mib"] = round(int(lines[-1].split()[1]) / 1024, 1)
    pss = [ln for ln in proc.stdout.splitlines() if ln.startswith("PEAK_TREE_PSS_KIB ")]
    if pss:
        rec["peak_tree_pss_mib"] = round(int(pss[-1].split()[1]) / 1024, 1)
    if proc.returncode != 0:
        rec["error"] = (proc.stderr.strip().splitlines() or [""])[-1][:200]
    return rec


if __name__ == "__main__":
    sys.exit(main())

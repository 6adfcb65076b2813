"""The ``ebms`` command.

::

    ebms demo [key=value ...]                      train the default job and report
    ebms train [FILE.toml | --config FILE.toml] [--resume | --overwrite] [key=value ...]
    ebms eval  (--run DIR | FILE.toml) [--ais] [key=value ...] test NLL: grid in 2-D, exact/AIS log Z on binary data
    ebms sample (--run DIR | FILE.toml) [--n N] [--steps S]   samples.png / samples.safetensors
    ebms recipes                                   list the packaged recipes
    ebms bench [--quick]                           run benchmarks/ (from a source checkout)

Bad configuration is a one-line error with a suggestion and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
import time
from importlib import resources
from pathlib import Path

from ebms import __version__
from ebms.cli.config import ConfigError, load_config

__all__ = ["main"]


def recipe_path(name: str) -> Path:
    """Path of a packaged recipe (``demo`` or ``demo.toml``)."""
    fname = name if name.endswith(".toml") else f"{name}.toml"
    path = Path(str(resources.files("ebms.recipes").joinpath(fname)))
    if not path.is_file():
        names = ", ".join(list_recipes())
        raise ConfigError(f"recipe {name!r} not found; packaged recipes: {names}")
    return path


def list_recipes() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files("ebms.recipes").iterdir() if p.name.endswith(".toml"))


def _config_arg(args: argparse.Namespace) -> str | None:
    """A config given as ``--config FILE`` or as the first positional; packaged recipe names work too."""
    items = list(args.overrides)
    cfg = args.config
    if cfg is None and items and "=" not in items[0]:
        cfg = items.pop(0)
    args.overrides = items
    if cfg is not None and not Path(cfg).exists() and not cfg.endswith("/"):
        stem = Path(cfg).name
        if stem.removesuffix(".toml") in list_recipes():
            return str(recipe_path(stem))
    return cfg


def _report_and_plots(run_dir: Path, overrides: list[str], use_ais: bool = False) -> None:
    from ebms.cli.run import evaluate_run, load_run, sample_run, write_eval, write_plots
    from ebms.cli.tasks import TaskData

    cfg, model, data, step = load_run(run_dir, overrides)
    t0 = time.perf_counter()
    report = evaluate_run(cfg, model, data, step, use_ais=use_ais)
    plots = [] if isinstance(data, TaskData) else write_plots(run_dir, cfg, model, data, sample_run(cfg, model, data))
    write_eval(run_dir, report)
    for line in report.lines():
        print(line)
    print(f"wrote {', '.join(str(p) for p in [*plots, run_dir / 'eval.json'])} ({time.perf_counter() - t0:.1f} s)")


def cmd_demo(args: argparse.Namespace) -> int:
    from ebms.cli.run import train

    cfg = load_config(recipe_path("demo"), args.overrides)
    print(f"ebms {__version__} demo: {cfg.objective.kind.upper()} on '{cfg.data.name}', "
          f"{cfg.train.steps} steps -> {Path(cfg.run.out_dir) / cfg.run.name}")
    t0 = time.perf_counter()
    run_dir = train(cfg, resume=False, overwrite=True)
    print(f"trained in {time.perf_counter() - t0:.1f} s; metrics in {run_dir / 'metrics.jsonl'}, "
          f"checkpoint in {run_dir / 'checkpoints'}")
    _report_and_plots(run_dir, [])
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from ebms.cli.run import train

    cfg = load_config(_config_arg(args), args.overrides)
    t0 = time.perf_counter()
    run_dir = train(cfg, resume="auto" if args.resume else False, overwrite=args.overwrite)
    print(f"trained in {time.perf_counter() - t0:.1f} s -> {run_dir}")
    if not args.no_eval:
        _report_and_plots(run_dir, [])
    return 0


def _run_folder(args: argparse.Namespace) -> Path:
    """The run folder: ``--run DIR``, or the one a config names (``run.out_dir/run.name``)."""
    if args.run is None:
        cfg_file = _config_arg(args)
        if cfg_file is None:
            raise ConfigError(f"{args.command}: expected --run DIR or a config (FILE.toml / --config FILE)")
        from ebms.cli.run import run_dir_of

        p = run_dir_of(load_config(cfg_file, args.overrides))
        if not p.is_dir():
            raise ConfigError(f"{cfg_file}: its run folder {str(p)!r} does not exist yet (train first)")
        return p
    p = Path(args.run)
    if not p.is_dir():
        raise ConfigError(f"--run: folder {args.run!r} not found (runs are written under runs/<name>/)")
    return p


def cmd_eval(args: argparse.Namespace) -> int:
    from ebms.cli.run import evaluate_run, load_run, write_eval

    run_dir = _run_folder(args)
    cfg, model, data, step = load_run(run_dir, args.overrides)
    report = evaluate_run(cfg, model, data, step, use_ais=args.ais)
    write_eval(run_dir, report)
    for line in report.lines():
        print(line)
    return 0


def cmd_sample(args: argparse.Namespace) -> int:
    from safetensors.torch import save_file

    from ebms.cli.run import load_run, plot_points, sample_run
    from ebms.viz import save_figure

    run_dir = _run_folder(args)
    cfg, model, data, step = load_run(run_dir, args.overrides)
    x = sample_run(cfg, model, data, n=args.n, steps=args.steps, seed=args.seed)
    out = Path(args.out) if args.out else run_dir
    out.mkdir(parents=True, exist_ok=True)
    save_file({"samples": x.contiguous()}, str(out / "samples.safetensors"))
    save_figure(plot_points(x, data, f"{x.shape[0]} samples, step {step}"), out / "samples.png")
    print(f"wrote {out / 'samples.safetensors'} and {out / 'samples.png'} ({x.shape[0]} samples)")
    return 0


def cmd_recipes(args: argparse.Namespace) -> int:
    names = list_recipes()
    width = max(map(len, names), default=0)
    for name in names:
        text = recipe_path(name).read_text().splitlines()
        desc = text[0].lstrip("# ").strip() if text and text[0].startswith("#") else ""
        print(f"{name:{width}s}  {desc}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    import subprocess

    script = Path.cwd() / "benchmarks" / "run_all.py"
    if not script.is_file():
        raise ConfigError("bench: benchmarks/run_all.py not found; run `ebms bench` from a source checkout "
                          "with the bench extra installed (pip install -e .[bench])")
    return subprocess.call([sys.executable, str(script), *args.rest])  # e.g. --quick, --threads 2


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ebms", description="Energy-based models: train, sample, evaluate.")
    p.add_argument("--version", action="version", version=f"ebms {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    s = sub.add_parser("demo", help="train the default 2-D job (PCD on eight Gaussians) and report")
    s.add_argument("overrides", nargs="*", help="section.key=value")
    s.set_defaults(fn=cmd_demo)

    s = sub.add_parser("train", help="train from a TOML config or a packaged recipe")
    s.add_argument("--config", "-c", help="TOML file (or packaged recipe name)")
    s.add_argument("--resume", action="store_true", help="continue from the run folder's latest checkpoint")
    s.add_argument("--overwrite", action="store_true", help="start again in a run folder that has checkpoints")
    s.add_argument("--no-eval", action="store_true", help="skip the evaluation and plots after training")
    s.add_argument("overrides", nargs="*", help="[FILE.toml] section.key=value ...")
    s.set_defaults(fn=cmd_train)

    s = sub.add_parser("eval", help="test NLL of a trained run (grid-normalised in 2-D; exact or AIS log Z on binary data)")
    s.add_argument("--run", help="run folder (runs/<name>)")
    s.add_argument("--ais", action="store_true",
                   help="binary data: estimate log Z by AIS (eval.ais_chains, eval.ais_temperatures) and, with "
                        "eval.reverse_ais, a reverse-AIS bracket; printed beside the exact value when that exists")
    s.add_argument("--config", "-c", help="or: the TOML config the run was trained with")
    s.add_argument("overrides", nargs="*", help="[FILE.toml] section.key=value (e.g. eval.resolution=600)")
    s.set_defaults(fn=cmd_eval)

    s = sub.add_parser("sample", help="draw samples from a trained run")
    s.add_argument("--run", help="run folder (runs/<name>)")
    s.add_argument("--config", "-c", help="or: the TOML config the run was trained with")
    s.add_argument("--n", type=int, default=None, help="number of chains (default eval.n_samples)")
    s.add_argument("--steps", type=int, default=None, help="Langevin steps (default eval.sample_steps)")
    s.add_argument("--seed", type=int, default=None)
    s.add_argument("--out", default=None, help="output folder (default: the run folder)")
    s.add_argument("overrides", nargs="*", help="section.key=value")
    s.set_defaults(fn=cmd_sample)

    s = sub.add_parser("recipes", help="list the packaged recipes")
    s.set_defaults(fn=cmd_recipes)

    s = sub.add_parser("bench", help="run the side-by-side benchmarks (flags go to benchmarks/run_all.py)")
    s.set_defaults(fn=cmd_bench, rest=[])
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and getattr(args, "command", None) == "bench":
        args.rest = extra
    elif extra and hasattr(args, "overrides") and all("=" in e and not e.startswith("-") for e in extra):
        args.overrides = [*args.overrides, *extra]  # overrides written after a flag: `train x.toml --resume a=1`
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if getattr(args, "fn", None) is None:
        parser.print_help()
        return 0
    try:
        return int(args.fn(args) or 0)
    except ConfigError as e:
        print(f"ebms {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

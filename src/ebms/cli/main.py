"""The ``ebms`` command: train, evaluate and sample the jobs of every task of :mod:`ebms.cli.tasks`.

::

    ebms [--debug] COMMAND ...
    ebms demo [key=value ...]                      train the packaged demo job (toy 2-D density) and report
    ebms train [FILE.toml | RECIPE | --config FILE.toml] [--resume | --overwrite] [--no-eval] [key=value ...]
    ebms eval  (RUN_DIR | --run DIR | FILE.toml) [--ais] [key=value ...]   the task's test figures, eval.json
    ebms sample (RUN_DIR | --run DIR | FILE.toml) [--n N] [--steps S] [--seed K] [--out DIR] [--overwrite]
    ebms recipes                                   list the packaged recipes
    ebms bench [--quick] [--threads N] [--only A,B] [--timeout S]   run benchmarks/ (from a source checkout)

``data.name`` (or ``data.path``) picks the task: :data:`TASKS_HELP` says in a few words what
each one trains and what ``eval`` prints for it (``ebms --help`` and ``ebms eval --help`` show it).

The error contract: every mistake a user can make (an :class:`~ebms.errors.InputError` — a
setting, a file, a folder, a checkpoint —, :class:`~ebms.train.guard.TrainingDiverged`, an
anticipated operating-system failure such as a read-only or full disk, see :data:`OS_ERRORS`,
or memory that cannot be had, see :func:`ebms.cli.build.building`) is one line on stderr,
``ebms <command>: error: <message>``, and exit status 2. Any other exception is a bug and keeps
its traceback (exit status 1). ``ebms --debug ...`` prints the traceback for every error.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys
import time
import traceback
from importlib import resources
from pathlib import Path
from typing import Any, NoReturn

from ebms import __version__
from ebms.cli.config import MAX_SEED, ConfigError, load_config
from ebms.errors import InputError, RunFolderError

__all__ = ["OS_ERRORS", "TASKS_HELP", "build_parser", "main", "user_error"]

#: the tasks in a few words: (task, what ``data.name`` / ``model.kind`` select, what ``eval`` prints).
TASKS_HELP: tuple[tuple[str, str, str], ...] = (
    ("toy / continuous", "2-D toy sets (checkerboard, eight_gaussians, pinwheel, rings, swiss_roll, two_moons, "
     "two_spirals) or your own points (data.path=FILE): an MLP energy (model.kind=mlp) trained by pcd, cd, sm, "
     "dsm, ssm, nce, energy-matching or inclusive-nrf",
     "the test NLL normalised on an eval.resolution grid (2-D; beside the true density's NLL for toy sets with "
     "one), or mean test and train energies (other dimensions)"),
    ("discrete", "binarised digits, mnist, fashion-mnist with model.kind=mlp or rbm, trained by pcd or cd with "
     "gibbs, gwg, mh or block_gibbs chains",
     "the test log-likelihood with an exact log Z where one is feasible; --ais: AIS (and reverse-AIS) log Z"),
    ("images / vision", "digits, mnist, fashion-mnist with model.kind=conv (an image energy), jem or classifier",
     "accuracy, NLL and calibration (ECE, temperature scaling), out-of-distribution AUROC (vision.ood); for "
     "model.kind=conv the energies of test images and samples and the AUROC of -E"),
    ("tagging", "conll2000, conll2002-esp, conll2002-ned: CRF taggers (model.kind=bilstm-crf, cnn-crf, feature-crf, "
     "crf-transducer)",
     "test F1, precision and recall of the chunks or entities"),
    ("speech", "fsdd-digits: connected spoken digits, model.kind=conv-bilstm trained by ctc or ctc-crf",
     "the test label error rate"),
    ("language", "ptb, tiny-shakespeare, text (your file): model.kind=kn (n-gram), lstm, transformer, trf, trf-cnn, "
     "trf-bilstm, residual, electric, huggingface (a pretrained causal LM folder)",
     "test perplexity (exact for n-grams, LSTM/Transformer and Hugging Face LMs; a TRF's with its log Z_l, --ais to "
     "re-estimate them; a residual model's bracket; Electric's pseudo-log-likelihood)"),
    ("generation", "addition: a Transformer or LSTM LM of sums (model.kind=transformer, lstm), a residual EBM "
     "on it (residual) and generation under a constraint (controlled: mix-and-match, COLD)",
     "the share of correct test sums and the perplexity of the true sums; for controlled, the share of "
     "constraints met"),
    ("jrf", "conll2000 with model.kind=jrf: a semi-supervised CRF tagger whose marginal is a TRF",
     "test F1, precision and recall"),
    ("text classes", "tweet-sentiment (labelled sentences) with model.kind=text-classifier: a CNN or BiLSTM classifier "
     "trained by ce or residual-joint (cross-entropy + NCE of a residual energy)",
     "test accuracy, NLL and class-wise / top-label ECE, raw and after temperature scaling"),
)


def _tasks_text(column: int) -> str:
    """:data:`TASKS_HELP` as an indented list: column 1 (what a task trains) or 2 (what eval prints)."""
    import textwrap

    rows = []
    for name, *texts in TASKS_HELP:
        body = textwrap.wrap(texts[column - 1], 78)
        rows.append(f"  {name:<17} {body[0]}")
        rows += [f"  {'':<17} {line}" for line in body[1:]]
    return "\n".join(rows)

#: operating-system failures a user can fix (errno -> what to do), reported as one line naming the path.
OS_ERRORS: dict[int, str] = {
    errno.EACCES: "permission denied: choose a folder you can write (run.out_dir, --out) or fix its permissions",
    errno.EPERM: "operation not permitted: choose a folder you can write (run.out_dir, --out) or fix its permissions",
    errno.EROFS: "read-only file system: choose a writable run.out_dir (or --out)",
    errno.ENOSPC: "no space left on the device: free some space or choose another run.out_dir "
                  "(a run stopped this way continues with --resume)",
    errno.EDQUOT: "disk quota exceeded: free some space or choose another run.out_dir",
    errno.EFBIG: "file too large for this file system: choose another run.out_dir",
    errno.ENAMETOOLONG: "file name too long for this file system: shorten run.name or run.out_dir",
    errno.ENOTDIR: "a part of this path is a file, not a folder: choose another run.out_dir / --out / path",
    errno.EISDIR: "is a folder, not a file: give a file's path",
    errno.EEXIST: "exists and is not a folder: choose another run.out_dir / --out",
    errno.ENOENT: "no such file or folder",
    errno.ELOOP: "too many levels of symbolic links",
}


def _one_line(text: str) -> str:
    """``text`` as one line (inner line breaks become ``"; "``)."""
    return "; ".join(part.strip() for part in str(text).splitlines() if part.strip()) or "(no message)"


def user_error(err: BaseException) -> str | None:
    """The one-line message for an error the user can fix, or ``None`` for a bug (keep the traceback).

    Args:
        err: the exception a command raised.

    Returns:
        The message of an :class:`~ebms.errors.InputError`, of
        :class:`~ebms.train.guard.TrainingDiverged`, of an ``OSError`` whose ``errno`` is in
        :data:`OS_ERRORS` (naming its path and what to do), or of memory that could not be had
        (:func:`~ebms.cli.build.is_allocation_failure`: the commands turn it into a line naming the
        keys where they know them, this is the net for the rest); ``None`` for anything else.
    """
    from ebms.train.guard import TrainingDiverged

    if isinstance(err, InputError):
        return _one_line(str(err))
    if isinstance(err, TrainingDiverged):
        text = _one_line(str(err))
        return text if text.startswith("training diverged") else f"training diverged: {text}"
    if isinstance(err, OSError) and err.errno in OS_ERRORS:
        paths = [str(p) for p in (err.filename, err.filename2) if p is not None]
        where = " -> ".join(repr(p) for p in paths) or (err.strerror or "file system")
        return _one_line(f"{where}: {OS_ERRORS[err.errno]} ({err.strerror or os.strerror(err.errno)})")
    if isinstance(err, (MemoryError, RuntimeError)):
        from ebms._memory import available_memory, is_allocation_failure
        from ebms._memory import format_bytes as gib

        if is_allocation_failure(err):  # the commands name the keys where they can (ebms.cli.build.building)
            free = available_memory()
            return _one_line(f"out of memory ({_first_line(err)}{'' if free is None else f'; {gib(free)} available'});"
                             f" lower the sizes of the run (model widths, train.batch_size, data.n_test, "
                             f"eval.n_samples), or run with --debug to see where")
    return None


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return (text[0] if text else type(err).__name__)[:200]


def recipe_path(name: str) -> Path:
    """Path of a packaged recipe (``demo`` or ``demo.toml``)."""
    fname = name if name.endswith(".toml") else f"{name}.toml"
    path = Path(str(resources.files("ebms.recipes").joinpath(fname)))
    if not path.is_file():
        names = ", ".join(list_recipes())
        raise ConfigError(f"recipe {name!r} not found; packaged recipes: {names}")
    return path


def list_recipes() -> list[str]:
    """Names of the packaged recipes (``ebms/recipes/*.toml``), sorted."""
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
        import difflib

        close = difflib.get_close_matches(stem.removesuffix(".toml"), list_recipes(), n=1)
        if close and Path(cfg).parent == Path("."):
            raise ConfigError(f"config file {cfg!r} not found; did you mean the packaged recipe {close[0]!r}? "
                              f"(`ebms recipes` lists them)")
    return cfg


def _report_and_plots(run_dir: Path, overrides: list[str], use_ais: bool = False, *, plots: bool = True) -> None:
    """The test figures of a trained run (printed, and written to ``eval.json``) and, with ``plots``, its plots."""
    from ebms.cli.build import building, size_keys
    from ebms.cli.run import serving_task, write_eval

    cfg, model, data, step = _load_run(run_dir, overrides)
    task = serving_task(cfg)
    if use_ais and not task.supports_ais:
        raise ConfigError(f"--ais: AIS estimates log Z of models of binary data (data.name = mnist, fashion-mnist, "
                          f"digits); the run in {str(run_dir)!r} has data.name={cfg.data.name!r}: drop --ais")
    t0 = time.perf_counter()
    with building("evaluating the run", *size_keys(cfg, "eval"), device=cfg.run.device):
        report = task.report(cfg, model, data, step, use_ais=use_ais)
        written = task.write_plots(run_dir, cfg, model, data) if plots else []
    write_eval(run_dir, report)
    for line in report.lines():
        print(line)
    if plots:
        print(f"wrote {', '.join(str(p) for p in [*written, run_dir / 'eval.json'])} ({time.perf_counter() - t0:.1f} s)")


def _load_run(run_dir: Path, overrides: list[str]) -> tuple[Any, Any, Any, int]:
    """:func:`ebms.cli.run.load_run`, with memory that cannot be had named by the keys sizing the model."""
    from ebms.cli.build import building, size_keys
    from ebms.cli.run import load_run

    keys = size_keys(load_config(run_dir / "config.toml", overrides, stored=True), "train") if (run_dir / "config.toml").is_file() \
        else ()
    with building("loading the run's data and model", *keys):
        return load_run(run_dir, overrides)


def cmd_demo(args: argparse.Namespace) -> int:
    """``ebms demo``: train the packaged demo recipe (always from scratch), then evaluate and plot."""
    from ebms.cli.build import building, size_keys, validate_config
    from ebms.cli.run import run_dir_of, train
    from ebms.train import RunFolderLock

    cfg = validate_config(load_config(recipe_path("demo"), args.overrides))
    print(f"ebms {__version__} demo: {cfg.objective.kind.upper()} on '{cfg.data.name}', "
          f"{cfg.train.steps} steps -> {Path(cfg.run.out_dir) / cfg.run.name}")
    t0 = time.perf_counter()
    with RunFolderLock(run_dir_of(cfg)) as lock:  # held through the report: one writer per run folder
        with building("training", *size_keys(cfg, "train"), device=cfg.run.device):
            run_dir = train(cfg, resume=False, overwrite=True, lock=lock)
        print(f"trained in {time.perf_counter() - t0:.1f} s; metrics in {run_dir / 'metrics.jsonl'}, "
              f"checkpoint in {run_dir / 'checkpoints'}")
        _report_and_plots(run_dir, [])
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    """``ebms train``: every value checked up front, then train, then (unless ``--no-eval``) report."""
    from ebms.cli.build import building, size_keys, validate_config
    from ebms.cli.run import run_dir_of, train
    from ebms.train import DistributedContext, RunFolderLock

    cfg = validate_config(load_config(_config_arg(args), args.overrides))
    t0 = time.perf_counter()
    with RunFolderLock(run_dir_of(cfg)) as lock:  # held through the report: one writer per run folder
        with building("training", *size_keys(cfg, "train"), device=cfg.run.device):
            run_dir = train(cfg, resume="auto" if args.resume else False, overwrite=args.overwrite, lock=lock)
        if not DistributedContext.from_env().is_main:  # under torchrun global rank 0 reports; the others are done
            return 0
        print(f"trained in {time.perf_counter() - t0:.1f} s -> {run_dir}")
        if not args.no_eval:
            _report_and_plots(run_dir, [])
    return 0


def _close_folders(path: Path) -> str:
    """``"; did you mean 'runs/moons'?"``: the folders beside a missing ``path`` spelt like it."""
    import difflib

    parent = path.parent
    try:
        names = [p.name for p in parent.iterdir() if p.is_dir()] if parent.is_dir() else []
    except OSError:
        return ""
    close = difflib.get_close_matches(path.name, names, n=3, cutoff=0.6)
    if not close:
        return ""
    shown = [str(parent / c) if str(parent) != "." else c for c in close]
    return "; did you mean " + " or ".join(repr(c) for c in shown) + "?"


def _run_folder(args: argparse.Namespace) -> Path:
    """The run folder: ``--run DIR``, or the one a config names (``run.out_dir/run.name``); its
    configuration with the command's overrides is checked before anything is loaded."""
    from ebms.cli.build import validate_config

    if args.run is None:
        positional = args.config is None and bool(args.overrides) and "=" not in args.overrides[0]
        cfg_file = _config_arg(args)
        if cfg_file is not None and Path(cfg_file).is_dir():  # `ebms eval runs/NAME`: a run folder without --run
            args.run, cfg_file = cfg_file, None
        elif positional and cfg_file is not None and not Path(cfg_file).exists() and not cfg_file.endswith(".toml"):
            raise RunFolderError(f"run folder {cfg_file!r} not found{_close_folders(Path(cfg_file))} (runs are "
                                 f"written under <run.out_dir>/<run.name>/; a config is a FILE.toml)")
    if args.run is None:
        if cfg_file is None:
            raise ConfigError(f"{args.command}: expected --run DIR or a config (FILE.toml / --config FILE)")
        from ebms.cli.run import run_dir_of

        p = run_dir_of(load_config(cfg_file, args.overrides))
        if not p.is_dir():
            raise RunFolderError(f"{cfg_file}: its run folder {str(p)!r} does not exist yet (train first)")
    else:
        p = Path(args.run)
        if not p.is_dir():
            what = "is a file, not a run folder" if p.exists() else \
                f"not found{_close_folders(p)} (runs are written under runs/<name>/)"
            raise RunFolderError(f"--run: folder {args.run!r} {what}")
    if (p / "config.toml").is_file():
        validate_config(load_config(p / "config.toml", args.overrides, stored=True), device=False)
    return p


def cmd_eval(args: argparse.Namespace) -> int:
    """``ebms eval``: the test figures of a trained run, printed and written to ``eval.json``."""
    _report_and_plots(_run_folder(args), args.overrides, args.ais, plots=False)
    return 0


def _save_atomic(write: Any, path: Path) -> None:
    """``write(tmp)`` then rename onto ``path``, so an interrupted write never leaves half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def cmd_sample(args: argparse.Namespace) -> int:
    """``ebms sample``: fresh chains from a trained run, written to
    ``samples-n<N>-steps<S>-seed<K>.{safetensors,png}`` (never over the training ``samples.png``)."""
    from safetensors.torch import save_file

    from ebms.cli.build import building
    from ebms.cli.energy import SAMPLE_SEED_OFFSET
    from ebms.cli.run import serving_task
    from ebms.viz import save_figure

    run_dir = _run_folder(args)
    out = Path(args.out) if args.out else run_dir
    if out.exists() and not out.is_dir():
        raise RunFolderError(f"--out: {str(out)!r} is a file; expected a folder (it is created if missing)")
    cfg, model, data, step = _load_run(run_dir, args.overrides)
    task = serving_task(cfg)
    n = cfg.eval.n_samples if args.n is None else args.n
    steps = cfg.eval.sample_steps if args.steps is None else args.steps
    seed = cfg.run.seed + SAMPLE_SEED_OFFSET if args.seed is None else args.seed
    stem = f"samples-n{n}-steps{steps}-seed{seed}"
    files = [out / f"{stem}.safetensors", out / f"{stem}.{task.sample_format}"]
    taken = [str(f) for f in files if f.exists()]
    if taken and not args.overwrite:
        raise RunFolderError(f"--out: {taken[0]!r} exists (same --n, --steps and --seed); pass --overwrite to "
                             f"replace it, or another --seed")
    with building(f"drawing {n} samples", "--n" if args.n is not None else "eval.n_samples", device=cfg.run.device):
        x = task.sample(cfg, model, data, n=n, steps=steps, seed=seed)
    out.mkdir(parents=True, exist_ok=True)
    _save_atomic(lambda tmp: save_file({"samples": x.contiguous()}, str(tmp)), files[0])
    if task.sample_format == "txt":  # sentences: printed, and written one per line
        lines = task.sample_text(x, data)
        _save_atomic(lambda tmp: tmp.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8"), files[1])
        print("\n".join(lines))
        print(f"wrote {files[0]} and {files[1]} ({x.shape[0]} samples, seed {seed})")
        return 0
    save_figure(task.plot(x, data, f"{x.shape[0]} samples, step {step}"), files[1])  # atomic itself
    print(f"wrote {files[0]} and {files[1]} ({x.shape[0]} samples, {steps} steps, seed {seed}; "
          f"the training plot samples.png is kept)")
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    """``ebms plot``: a run's logged metrics against the step, as a PNG (and with ``--csv`` as a table)."""
    from ebms.cli.applied import run_folder
    from ebms.train import read_metrics
    from ebms.viz import plot_metrics, save_figure

    run_dir = run_folder(args.run)
    table = read_metrics(run_dir)
    names = None if args.metrics is None else [m.strip() for m in args.metrics.split(",") if m.strip()]
    try:
        fig = plot_metrics(table, names, title=str(run_dir))
    except (KeyError, ValueError) as e:
        raise ConfigError(f"--metrics: {e.args[0]}" if isinstance(e, KeyError) else f"{run_dir}: {e}; "
                          "train it further (metrics.jsonl gets a line every train.log_every steps)") from None
    out = Path(args.out) if args.out else run_dir / "metrics.png"
    if out.is_dir() or out.suffix.lower() not in (".png", ".pdf", ".svg"):
        raise ConfigError(f"--out: {str(out)!r} is {'a folder' if out.is_dir() else 'not a .png, .pdf or .svg file'}; "
                          f"give a file name such as curves.png")
    written = [save_figure(fig, out)]
    if args.csv:
        _save_atomic(lambda tmp: tmp.write_text(table.csv_text(), encoding="utf-8"), Path(args.csv))
        written.append(Path(args.csv))
    print(f"wrote {' and '.join(map(str, written))} ({len(table.rows)} logged steps, last {table.steps[-1]})")
    return 0


def cmd_recipes(args: argparse.Namespace) -> int:
    """``ebms recipes``: each packaged recipe with the first comment line of its file."""
    names = list_recipes()
    width = max(map(len, names), default=0)
    for name in names:
        text = recipe_path(name).read_text().splitlines()
        desc = text[0].lstrip("# ").strip() if text and text[0].startswith("#") else ""
        print(f"{name:{width}s}  {desc}")
    return 0


def _bench_script() -> Path:
    return Path.cwd() / "benchmarks" / "run_all.py"


def _bench_names() -> list[str]:
    """The benchmarks ``benchmarks/run_all.py`` would run (empty outside a source checkout)."""
    folder = _bench_script().parent
    if not folder.is_dir():
        return []
    return sorted(p.stem for p in folder.glob("*.py") if not p.name.startswith("_") and p.name != "run_all.py")


def cmd_bench(args: argparse.Namespace) -> int:
    """``ebms bench``: ``python benchmarks/run_all.py`` with the given flags, from a source checkout."""
    import subprocess

    script = _bench_script()
    if not script.is_file():
        raise ConfigError("bench: benchmarks/run_all.py not found; run `ebms bench` from a source checkout "
                          "with the bench extra installed (pip install -e .[bench])")
    flags = ["--quick"] if args.quick else []
    if args.threads is not None:
        flags += ["--threads", str(args.threads)]
    if args.only is not None:
        flags += ["--only", args.only]
    if args.timeout is not None:
        flags += ["--timeout", str(args.timeout)]
    return subprocess.call([sys.executable, str(script), *flags, *args.rest])


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors follow the contract: one line, exit status 2."""

    #: the sub-parsers by command name (set on the top-level parser by :func:`build_parser`).
    commands: dict[str, argparse.ArgumentParser] = {}

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {_one_line(message)} (see `{self.prog} --help`)\n")


def _count(flag: str, low: int, high: int | None = None) -> Any:
    """An argparse type: an integer in ``[low, high]`` (the message names ``flag``)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer; got {text!r}") from None
        if value < low or (high is not None and value > high):
            bound = f">= {low}" if high is None else f"in [{low}, {high}]"
            raise argparse.ArgumentTypeError(f"expected an integer {bound}; got {value}")
        return value

    parse.__name__ = flag
    return parse


def _flag_hint(flags: list[str], argv: list[str]) -> str:
    """``"; settings are section.key=value: did you mean 'train.steps=10'?"`` for ``--steps 10``: the
    first unknown flag that names a config key (``--batch-size`` is read as ``batch_size``), with
    the value written after it."""
    from ebms.cli._config_hints import bare_key_hint, sections_and_keys

    table = sections_and_keys()
    for flag in flags:
        name, eq, value = flag.lstrip("-").partition("=")
        if not eq and flag in argv:
            i = argv.index(flag)
            following = argv[i + 1] if i + 1 < len(argv) else ""
            value = following if following and not following.startswith("-") and "=" not in following else ""
        key = name.replace("-", "_")
        if key in table or not bare_key_hint(key, table=table):
            continue
        hint = bare_key_hint(key, value or "VALUE", table)
        return f"; settings are written section.key=value{hint}"
    return ""


def build_parser() -> _Parser:
    """The ``ebms`` argument parser (one sub-parser per command)."""
    common = _Parser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="print the full traceback for every error")
    p = _Parser(prog="ebms", formatter_class=argparse.RawDescriptionHelpFormatter,
                description="Energy-based models and their structured relatives: train a job from a TOML config "
                            "or a\npackaged recipe (`ebms recipes`), evaluate it on held-out data, draw samples. "
                            "data.name (or\ndata.path) picks the task:\n\n" + _tasks_text(1) +
                            "\n\nSettings are section.key=value (train.steps=500); docs/cli.md lists every key.",
                epilog="Bad input is one line on stderr and exit status 2; --debug shows the traceback.")
    p.add_argument("--version", action="version", version=f"ebms {__version__}")
    p.add_argument("--debug", action="store_true", help="print the full traceback for every error")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    s = sub.add_parser("demo", parents=[common], help="train the packaged demo job (PCD on the 2-D eight Gaussians) "
                                                      "and report")
    s.add_argument("overrides", nargs="*", help="section.key=value")
    s.set_defaults(fn=cmd_demo)

    s = sub.add_parser("train", parents=[common], help="train from a TOML config or a packaged recipe")
    s.add_argument("--config", "-c", help="TOML file (or packaged recipe name)")
    again = s.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true", help="continue from the run folder's latest checkpoint")
    again.add_argument("--overwrite", action="store_true", help="start again in a run folder that has checkpoints")
    s.add_argument("--no-eval", action="store_true", help="skip the evaluation and plots after training")
    s.add_argument("overrides", nargs="*", help="[FILE.toml] section.key=value ...")
    s.set_defaults(fn=cmd_train)

    s = sub.add_parser("eval", parents=[common], formatter_class=argparse.RawDescriptionHelpFormatter,
                       help="the test figures of a trained run (per task: NLL, log-likelihood, F1, perplexity, ...)",
                       description="Evaluate a trained run on its held-out data: print the task's test figures and "
                                   "write them\nto eval.json in the run folder. The run is RUN_DIR, --run DIR, or "
                                   "the config it was trained\nwith. What it prints, by task:\n\n" + _tasks_text(2))
    s.add_argument("--run", help="run folder (runs/<name>); also accepted as the first argument")
    s.add_argument("--ais", action="store_true",
                   help="estimate log Z by AIS (eval.ais_chains, eval.ais_temperatures): binary data (with "
                        "eval.reverse_ais, a reverse-AIS bracket), a TRF's per-length log Z_l (language corpora)")
    s.add_argument("--config", "-c", help="or: the TOML config the run was trained with")
    s.add_argument("overrides", nargs="*", help="[RUN_DIR | FILE.toml] section.key=value (e.g. data.n_test=5000)")
    s.set_defaults(fn=cmd_eval)

    s = sub.add_parser("sample", parents=[common], help="draw samples from a trained run",
                       description="Draw samples from a trained run: chains of the sampler for an energy (toy points, "
                                   "binary or continuous images, a TRF), exact draws for a normalised model (n-gram, "
                                   "LSTM/Transformer LM; --steps is not used), sentences printed and written as text "
                                   "for language runs. Conditional tasks (tagging, speech, jrf) have no samples.")
    s.add_argument("--run", help="run folder (runs/<name>); also accepted as the first argument")
    s.add_argument("--config", "-c", help="or: the TOML config the run was trained with")
    s.add_argument("--n", type=_count("--n", 1), default=None, help="number of samples >= 1 (default eval.n_samples)")
    s.add_argument("--steps", type=_count("--steps", 1), default=None,
                   help="MCMC steps >= 1 of a chain (default eval.sample_steps; not used by exact samplers)")
    s.add_argument("--seed", type=_count("--seed", 0, MAX_SEED), default=None,
                   help="seed of the chains, in [0, 2^32 - 1] (default run.seed + 7)")
    s.add_argument("--out", default=None, help="output folder (default: the run folder)")
    s.add_argument("--overwrite", action="store_true", help="replace samples written before with the same n, steps, seed")
    s.add_argument("overrides", nargs="*", help="[RUN_DIR | FILE.toml] section.key=value")
    s.set_defaults(fn=cmd_sample)

    from ebms.cli.applied import APPLY_COMMANDS

    for name in APPLY_COMMANDS:  # applying a trained run to new input: score/rescore, tag, decode, classify
        importlib.import_module(f"ebms.cli.{name}").add_parser(sub, common)

    s = sub.add_parser("plot", parents=[common], help="plot a run's logged metrics (metrics.jsonl) against the step",
                       description="Draw the metrics a run logged (loss, grad_norm, lr, the objective's, eval/*) "
                                   "against the step into a PNG, for users without TensorBoard; --csv also writes "
                                   "the table (one row per logged step).")
    s.add_argument("run", metavar="RUN", help="run folder (runs/<name>)")
    s.add_argument("--metrics", default=None, metavar="A,B", help="comma-separated metric names (default: all, up to 12)")
    s.add_argument("--out", default=None, help="PNG file (default RUN/metrics.png)")
    s.add_argument("--csv", default=None, metavar="FILE", help="also write the table as CSV")
    s.set_defaults(fn=cmd_plot)

    s = sub.add_parser("recipes", parents=[common], help="list the packaged recipes")
    s.set_defaults(fn=cmd_recipes)

    names = _bench_names()
    listing = ", ".join(names) if names else "(none here: run `ebms bench` from a source checkout)"
    s = sub.add_parser("bench", parents=[common], help="run the side-by-side benchmarks (benchmarks/run_all.py)",
                       description="Run benchmarks/run_all.py from a source checkout (the bench extra installed: "
                                   "pip install -e .[bench]); unknown flags go to every benchmark.",
                       epilog=f"benchmarks: {listing}")
    s.add_argument("--quick", action="store_true", help="small sizes, for a smoke run (make bench-quick)")
    s.add_argument("--threads", type=_count("--threads", 1), default=None,
                   help="torch threads per benchmark (default 1)")
    s.add_argument("--only", default=None, metavar="A,B", help="comma-separated benchmark names (default: all)")
    s.add_argument("--timeout", type=float, default=None, metavar="S", help="seconds per benchmark (default 3600)")
    s.set_defaults(fn=cmd_bench, rest=[])
    p.commands = dict(sub.choices)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the ``ebms`` command; returns the exit status (0, 2 for a user's error, 130 on Ctrl-C).

    Args:
        argv: the arguments (default ``sys.argv[1:]``).

    Raises:
        Exception: a bug (anything :func:`user_error` does not recognise) propagates with its traceback.
    """
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args, extra = parser.parse_known_args(argv)
        command = getattr(args, "command", None)
        flags = [e for e in extra if e.startswith("-")]
        if extra and command == "bench":
            args.rest = extra
        elif extra and hasattr(args, "overrides") and not flags:
            args.overrides = [*args.overrides, *extra]  # overrides written after a flag: `train x.toml --resume a=1`
        elif extra:
            (parser.commands.get(command, parser) if command else parser).error(
                f"unrecognized arguments: {' '.join(flags or extra)}{_flag_hint(flags, argv)}")
    except SystemExit as e:  # --help, --version, or a usage error (already printed as one line)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    if getattr(args, "fn", None) is None:
        parser.print_help()
        return 0
    debug = bool(getattr(args, "debug", False))
    try:
        return int(args.fn(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `ebms score ... | head`: the reader stopped early; no traceback, 128 + SIGPIPE
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as e:
        message = user_error(e)
        if message is None:
            raise
        if debug:
            traceback.print_exc()
        print(f"ebms {args.command}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

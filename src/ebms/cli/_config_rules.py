"""The constraint table: what each config key accepts beyond its type, and the check against it.

:data:`RULES` has one :class:`Rule` per key of :class:`~ebms.cli.config.Config` (range,
finiteness, list length, fixed choices, folder-name rules, ...). :func:`expectation` puts a rule
in words, as the one-line messages and docs/cli.md print it; :func:`check_values` checks a whole
config against the table::

    train.log_every: expected an integer >= 1; got 0

Keys whose valid values are names looked up in a registry (``model.kind``, ``data.name``, ...)
are marked ``Rule(names=...)`` here and checked by :func:`ebms.cli.build.validate_config`.
All of it is re-exported by :mod:`ebms.cli.config`, the public entry.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, get_args, get_origin

from ebms.cli._config_hints import shown
from ebms.cli._config_schema import Config, ConfigError, config_keys

__all__ = [
    "F32_MAX",
    "F32_TINY",
    "MAX_INT",
    "MAX_NAME_BYTES",
    "MAX_SEED",
    "COUNT",
    "CORE_RULES",
    "DROPOUT",
    "FRACTION",
    "NONNEG",
    "POS",
    "RULES",
    "SEED",
    "Rule",
    "check_values",
    "expectation",
    "rules_markdown",
]

#: largest ``run.seed`` / ``data.binarize_seed``: the command line adds fixed offsets to a seed, and
#: torch generators take at most 64 bits, so seeds stay in 32 bits.
MAX_SEED = 2**32 - 1
#: largest integer any key accepts (torch sizes and counts are 64-bit).
MAX_INT = 2**63 - 1
#: longest folder name (bytes) that the common file systems accept (``NAME_MAX``).
MAX_NAME_BYTES = 255
#: the range of float32, the dtype every model of the command line computes in: a nonzero float
#: setting smaller in magnitude than ``F32_TINY`` would become 0, one larger than ``F32_MAX`` inf.
F32_MAX, F32_TINY = 3.4028234663852886e38, 1.1754943508222875e-38


@dataclass(frozen=True)
class Rule:
    """One row of the constraint table: what a key accepts beyond its type.

    Every float must be finite (no ``nan``/``inf``) and, unless 0, within float32's range
    (:data:`F32_TINY` .. :data:`F32_MAX` in magnitude); every integer must fit in 64 bits; a rule
    adds a range, a list length, a fixed set of strings, or a named predicate.

    Attributes:
        low: smallest value of a number (of every item, for a list); ``None``: no lower bound.
        high: largest value; ``None``: no upper bound.
        low_open: ``low`` itself is excluded (``> low`` rather than ``>= low``).
        high_open: ``high`` itself is excluded.
        min_items: fewest items a list may have.
        choices: the only strings the key takes.
        text: the expectation in words, for a rule that ``check`` tests.
        check: ``value -> bool`` for such a rule (called on non-``None`` values only).
        names: for keys whose values are names in a registry (``model.kind``, ...), where the
            valid names come from; those are checked by :func:`ebms.cli.build.validate_config`.
    """

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    min_items: int = 0
    choices: tuple[str, ...] = ()
    text: str = ""
    check: Callable[[Any], bool] | None = None
    names: str = ""


def _is_folder_name(v: str) -> bool:
    bad = {"/", "\\", "\0", os.sep, os.altsep or "/"}
    return (v.strip() != "" and v not in (".", "..") and not any(c in v for c in bad)
            and len(v.encode("utf-8", "surrogatepass")) <= MAX_NAME_BYTES)


def _is_path(v: str) -> bool:
    return v.strip() != "" and "\0" not in v


def _non_empty(v: str) -> bool:
    return v.strip() != ""


POS = Rule(low=0, low_open=True)  # > 0
NONNEG = Rule(low=0)  # >= 0
COUNT = Rule(low=1)  # an integer >= 1
SEED = Rule(low=0, high=MAX_SEED)
FRACTION = Rule(low=0, high=1, low_open=True, high_open=True)  # in (0, 1)
DROPOUT = Rule(low=0, high=1, high_open=True)  # in [0, 1)

#: the rules of the shared sections; each task declares those of its own section (``Task.rules``).
CORE_RULES: dict[str, Rule] = {
    "run.name": Rule(text=f"a folder name: not empty, not '.' or '..', without '/', '\\' or NUL, at most "
                          f"{MAX_NAME_BYTES} bytes", check=_is_folder_name),
    "run.out_dir": Rule(text="a folder path (not empty; '.' is the current folder)", check=_is_path),
    "run.seed": SEED,
    "run.device": Rule(names="'cpu' or a torch device available on this machine ('cuda', 'cuda:N', 'mps')"),
    "run.progress": Rule(),
    "run.log_to": Rule(choices=("csv", "tensorboard")),  # ebms.train.LOG_WRITERS (not imported: no torch here)
    "data.name": Rule(names="a data set name served by a task (toy set, binary image set, structured task)"),
    "data.n_test": COUNT,
    "data.path": Rule(text="a file path (not empty)", check=_is_path),
    "data.key": Rule(text="a tensor name (not empty)", check=_non_empty),
    "data.test_fraction": FRACTION,
    "data.root": Rule(text="a folder path (not empty)", check=_is_path),
    "data.max_mb": COUNT,
    "model.kind": Rule(names="a model name that the task of data.name takes (its model_kinds)"),
    "model.hidden": Rule(low=1, min_items=1),
    "model.activation": Rule(names="an activation name (ebms.nets.ACTIVATIONS)"),
    "sampler.kind": Rule(names="a sampler name that fits the data (build.SAMPLERS: continuous or discrete kernels)"),
    "sampler.step_size": POS,
    "sampler.noise_scale": NONNEG,
    "sampler.grad_clamp": POS,
    "sampler.n_leapfrog": COUNT,
    "sampler.sweeps": COUNT,
    "sampler.scan": Rule(choices=("random", "systematic")),
    "sampler.temperature": POS,
    "sampler.n_flips": COUNT,
    "objective.kind": Rule(names="an objective name that the task of data.name takes (its objective_kinds)"),
    "objective.k": COUNT,
    "objective.regularization": NONNEG,
    "objective.buffer_size": COUNT,
    "objective.reinit_prob": Rule(low=0, high=1),
    "objective.sigma": POS,
    "objective.sigmas": POS,
    "objective.n_projections": COUNT,
    "objective.nu": POS,
    "objective.noise_scale": POS,
    "objective.epsilon_max": POS,
    "objective.tau_star": Rule(low=0, high=1),
    "objective.cd_weight": NONNEG,
    "objective.warmup_steps": NONNEG,
    "objective.flow_weighting": Rule(),
    "objective.latent_dim": COUNT,
    "objective.generator_hidden": Rule(low=1, min_items=1),
    "objective.generator_sigma": POS,
    "objective.revision": Rule(choices=("sgld", "sghmc")),
    "objective.friction": Rule(low=0, high=1, low_open=True),
    "train.steps": COUNT,
    "train.batch_size": COUNT,
    # a larger rate overflows float32 weights in one step (Adam's first step is 10 lr), which no
    # restore of the divergence guard can undo
    "train.lr": Rule(low=0, high=1e30, low_open=True),
    "train.lr_schedule": Rule(names="a schedule name (build.LR_SCHEDULES)"),
    "train.lr_final": Rule(low=0, high=1),
    "train.sa_tc": NONNEG,
    "train.sa_beta": Rule(low=0, high=1),
    "train.sa_t0": NONNEG,
    "train.optimizer": Rule(choices=("adam", "sgd", "lbfgs")),
    "train.momentum": DROPOUT,
    "train.weight_decay": NONNEG,
    "train.grad_clip": POS,
    "train.ema": FRACTION,
    "train.precision": Rule(choices=("fp32", "bf16")),
    "train.compile": Rule(),
    "train.shard": Rule(choices=("ddp", "fsdp")),
    "train.log_every": COUNT,
    "train.checkpoint_every": COUNT,
    "eval.resolution": Rule(low=4, text="an even integer >= 4 (the grid checks its log Z on n/2 cells)",
                            check=lambda v: v % 2 == 0),
    "eval.n_samples": COUNT,
    "eval.sample_steps": COUNT,
    "eval.ais_chains": COUNT,
    "eval.ais_temperatures": COUNT,
    "eval.reverse_ais": Rule(),
    "eval.ema": Rule(),
}


class _Rules(Mapping[str, Rule]):
    """The whole table: :data:`CORE_RULES` and every registered task's ``rules`` under its section."""

    def _rows(self) -> dict[str, Rule]:
        from ebms.cli.tasks import task_rules

        return {**CORE_RULES, **task_rules()}

    def __getitem__(self, key: str) -> Rule:
        return self._rows()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._rows())

    def __len__(self) -> int:
        return len(self._rows())


#: the constraint table: every key of :func:`config_keys` has a row (a test keeps it so).
RULES: Mapping[str, Rule] = _Rules()

def rules_markdown() -> str:
    """The constraint table as Markdown (``| key | accepts |`` rows), as docs/cli.md prints it.

    ``python -c "from ebms.cli.config import rules_markdown; print(rules_markdown())"`` regenerates
    the table; a test keeps the page equal to it.
    """
    rows = ["| key | accepts |", "| --- | --- |"]
    rows += [f"| `{key}` | {expectation(key).replace(chr(92), chr(92) * 2)} |" for key in config_keys()]
    return "\n".join(rows)


def _num(v: float) -> str:
    if v == MAX_SEED:
        return "2^32 - 1"
    if abs(v) >= 1e6:
        return f"{v:g}"
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def _range_text(r: Rule) -> str:
    if r.low is not None and r.high is not None:
        return f"in {'(' if r.low_open else '['}{_num(r.low)}, {_num(r.high)}{')' if r.high_open else ']'}"
    if r.low is not None:
        return f"{'>' if r.low_open else '>='} {_num(r.low)}"
    if r.high is not None:
        return f"{'<' if r.high_open else '<='} {_num(r.high)}"
    return ""


def _split_hint(tp: Any) -> tuple[Any, bool]:
    """``(T, optional)`` for ``T | None``, else ``(tp, False)``."""
    if get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        return args[0], len(args) < len(get_args(tp))
    return tp, False


def expectation(key: str, tp: Any | None = None) -> str:
    """The expectation of ``key`` in words, as the one-line messages and docs/cli.md print it."""
    rule = RULES[key]
    base, optional = _split_hint(config_keys()[key] if tp is None else tp)
    rng = _range_text(rule)
    if get_origin(base) is list:
        (item,) = get_args(base)
        noun = {int: "integers", float: "finite numbers", str: "strings"}[item]
        text = rule.text or (("a non-empty list" if rule.min_items else "a list") + f" of {noun}"
                             + (f" {rng}" if rng else ""))
    elif rule.choices:
        text = "one of " + ", ".join(repr(c) for c in rule.choices)
    elif rule.text or rule.names:
        text = rule.text or rule.names
    else:
        noun = {int: "an integer", float: "a finite number", bool: "true or false", str: "a string"}[base]
        text = f"{noun} {rng}".strip()
    return text + (" (or unset)" if optional else "")


def _beyond_float32(v: float) -> bool:
    return v != 0 and not F32_TINY <= abs(v) <= F32_MAX


def _violates(rule: Rule, value: Any, base: Any, *, f32: bool = True) -> bool:
    """Whether ``value`` breaks ``rule`` (with ``f32``: also float32's range)."""
    if get_origin(base) is list:
        item_rule = dataclasses.replace(rule, min_items=0, check=None, text="")
        return (len(value) < rule.min_items or any(_violates(item_rule, v, get_args(base)[0], f32=f32) for v in value)
                or (rule.check is not None and not rule.check(value)))
    if isinstance(value, float) and (not math.isfinite(value) or (f32 and _beyond_float32(value))):
        return True
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
        return True
    if rule.choices and value not in rule.choices:
        return True
    if rule.check is not None and not rule.check(value):
        return True
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if rule.low is not None and (value < rule.low or (rule.low_open and value == rule.low)):
            return True
        if rule.high is not None and (value > rule.high or (rule.high_open and value == rule.high)):
            return True
    return False


def check_values(cfg: Config) -> Config:
    """Check every value of ``cfg`` against :data:`RULES`; the first violation is a one-line error.

    Raises:
        ConfigError: ``key: expected <rule in words>; got <value>``.
    """
    for key, tp in config_keys().items():
        section, name = key.split(".")
        value = getattr(cfg.section(section), name)
        if value is None:
            continue
        base, _ = _split_hint(tp)
        rule = RULES[key]
        if rule.choices and isinstance(value, str) and value not in rule.choices:
            close = difflib.get_close_matches(value, rule.choices, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"{key}: unknown value {shown(value)}; expected one of {', '.join(rule.choices)}{hint}")
        items = value if isinstance(value, list) else [value]
        if rule.choices and isinstance(value, list):
            bad = next((i for i, v in enumerate(items) if v not in rule.choices), None)
            if bad is not None:
                close = difflib.get_close_matches(str(items[bad]), rule.choices, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ConfigError(f"{key}[{bad}]: unknown value {shown(items[bad])}; expected one of "
                                  f"{', '.join(rule.choices)}{hint}")
        if _violates(rule, value, base):
            big = any(isinstance(v, int) and not isinstance(v, bool) and abs(v) > MAX_INT for v in items)
            f32 = not _violates(rule, value, base, f32=False)
            extra = ", at most 2^63 - 1" if big else (", within float32's range (1.2e-38 .. 3.4e+38 in magnitude, "
                                                      "or 0)" if f32 else "")
            raise ConfigError(f"{key}: expected {expectation(key, tp)}{extra}; got {shown(value)}")
    return cfg

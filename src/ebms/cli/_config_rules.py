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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_args, get_origin

from ebms.cli._config_hints import shown
from ebms.cli._config_schema import Config, ConfigError, config_keys

__all__ = [
    "MAX_INT",
    "MAX_NAME_BYTES",
    "MAX_SEED",
    "RULES",
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


@dataclass(frozen=True)
class Rule:
    """One row of the constraint table: what a key accepts beyond its type.

    Every float must be finite (no ``nan``/``inf``) and every integer must fit in 64 bits; a rule
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


_POS = Rule(low=0, low_open=True)  # > 0
_NONNEG = Rule(low=0)  # >= 0
_COUNT = Rule(low=1)  # an integer >= 1
_SEED = Rule(low=0, high=MAX_SEED)

#: the constraint table: every key of :class:`Config` has a row (a test keeps it so).
RULES: dict[str, Rule] = {
    "run.name": Rule(text=f"a folder name: not empty, not '.' or '..', without '/', '\\' or NUL, at most "
                          f"{MAX_NAME_BYTES} bytes", check=_is_folder_name),
    "run.out_dir": Rule(text="a folder path (not empty; '.' is the current folder)", check=_is_path),
    "run.seed": _SEED,
    "run.device": Rule(names="'cpu' or a torch device available on this machine ('cuda', 'cuda:N', 'mps')"),
    "run.progress": Rule(),
    "data.name": Rule(names="a data set name: a toy set, a binary image set or a structured task"),
    "data.n_test": _COUNT,
    "data.scale": _POS,
    "data.noise": _NONNEG,
    "data.path": Rule(text="a file path (not empty)", check=_is_path),
    "data.key": Rule(text="a tensor name (not empty)", check=_non_empty),
    "data.test_fraction": Rule(low=0, high=1, low_open=True, high_open=True),
    "data.binarize": Rule(choices=("stochastic", "threshold")),
    "data.binarize_seed": _SEED,
    "data.root": Rule(text="a folder path (not empty)", check=_is_path),
    "data.download": Rule(),
    "data.limit": _COUNT,
    "data.features": Rule(names="'' (the data set's usual template) or an attribute template name of "
                               "ebms.structured.features"),
    "data.n_train": _COUNT,
    "data.max_digits": _COUNT,
    "data.max_mb": _COUNT,
    "data.test_speakers": Rule(min_items=1, text="a non-empty list of speaker names",
                               check=lambda v: all(_non_empty(x) for x in v)),
    "model.kind": Rule(names="a model name that fits data.name (build.MODELS, or the structured task's model_kinds)"),
    "model.hidden": Rule(low=1, min_items=1),
    "model.activation": Rule(names="an activation name (ebms.nets._activations.ACTIVATIONS)"),
    "model.embedding_dim": _COUNT,
    "model.char_dim": _NONNEG,
    "model.layers": _COUNT,
    "model.dropout": Rule(low=0, high=1, high_open=True),
    "sampler.kind": Rule(names="a sampler name that fits the data (build.SAMPLERS: continuous or discrete kernels)"),
    "sampler.step_size": _POS,
    "sampler.noise_scale": _NONNEG,
    "sampler.n_leapfrog": _COUNT,
    "sampler.sweeps": _COUNT,
    "sampler.scan": Rule(choices=("random", "systematic")),
    "sampler.temperature": _POS,
    "sampler.n_flips": _COUNT,
    "objective.kind": Rule(names="an objective name that fits data.name (build.OBJECTIVES, or the structured "
                                 "task's objective_kinds)"),
    "objective.k": _COUNT,
    "objective.regularization": _NONNEG,
    "objective.buffer_size": _COUNT,
    "objective.reinit_prob": Rule(low=0, high=1),
    "objective.sigma": _POS,
    "objective.sigmas": _POS,
    "objective.n_projections": _COUNT,
    "objective.nu": _POS,
    "objective.noise_scale": _POS,
    "objective.c1": _NONNEG,
    "objective.c2": _NONNEG,
    "objective.ctc_weight": _NONNEG,
    "objective.lm_order": _COUNT,
    "train.steps": _COUNT,
    "train.batch_size": _COUNT,
    "train.lr": _POS,
    "train.lr_schedule": Rule(names="a schedule name (build.LR_SCHEDULES)"),
    "train.lr_final": Rule(low=0, high=1),
    "train.optimizer": Rule(choices=("adam", "sgd", "lbfgs")),
    "train.momentum": Rule(low=0, high=1, high_open=True),
    "train.weight_decay": _NONNEG,
    "train.grad_clip": _POS,
    "train.log_every": _COUNT,
    "train.checkpoint_every": _COUNT,
    "eval.resolution": Rule(low=4, text="an even integer >= 4 (the grid checks its log Z on n/2 cells)",
                            check=lambda v: v % 2 == 0),
    "eval.n_samples": _COUNT,
    "eval.sample_steps": _COUNT,
    "eval.ais_chains": _COUNT,
    "eval.ais_temperatures": _COUNT,
    "eval.reverse_ais": Rule(),
}

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


def _violates(rule: Rule, value: Any, base: Any) -> bool:
    if get_origin(base) is list:
        item_rule = dataclasses.replace(rule, min_items=0, check=None, text="")
        return (len(value) < rule.min_items or any(_violates(item_rule, v, get_args(base)[0]) for v in value)
                or (rule.check is not None and not rule.check(value)))
    if isinstance(value, float) and not math.isfinite(value):
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
        value = getattr(getattr(cfg, section), name)
        if value is None:
            continue
        base, _ = _split_hint(tp)
        rule = RULES[key]
        if rule.choices and isinstance(value, str) and value not in rule.choices:
            close = difflib.get_close_matches(value, rule.choices, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"{key}: unknown value {shown(value)}; expected one of {', '.join(rule.choices)}{hint}")
        if _violates(rule, value, base):
            items = value if isinstance(value, list) else [value]
            big = any(isinstance(v, int) and not isinstance(v, bool) and abs(v) > MAX_INT for v in items)
            raise ConfigError(f"{key}: expected {expectation(key, tp)}{', at most 2^63 - 1' if big else ''}; "
                              f"got {shown(value)}")
    return cfg

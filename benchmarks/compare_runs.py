"""Do two source trees train the same runs? Packaged recipes, a few steps each, compared value for value.

Issue 25 re-seats the command line (one registry of task kinds, library code out of ``ebms.cli``) and
must leave every recipe's outputs as they were. For each recipe this trains a few steps with the
tree ``--before`` and with ``--after`` (same overrides, fresh run folders under ``--out``), then
compares the runs: every line of ``metrics.jsonl`` (all fields but the wall-clock ``time``) and every
tensor of every ``*.safetensors`` checkpoint must be equal (``torch.equal``), and the two folders
must hold the same files. A recipe whose base run is another recipe (``residual-*``) is trained
against the same tree's run of that base (``BASES``). Exit status 1 when any run differs or fails to train.

Usage (keep the runs tiny; every ``key=value`` after ``--`` is added to each run)::

    python benchmarks/compare_runs.py --before /tmp/census-before/src --after src --out /tmp/cli-cmp \\
        --recipes char-lstm-shakespeare residual-shakespeare -- train.steps=3 train.log_every=1

``--old-sections``: the before tree spells the keys of ``[ngram]``, ``[lm]``, ``[trf]``, ``[residual]`` and
``[electric]`` as ``language.*`` (they were one section before issue 25); only the overrides are respelled,
each tree trains its own packaged recipe.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

#: recipe -> (the recipe its base run comes from, the key naming that run folder).
BASES = {"residual-shakespeare": ("char-lstm-shakespeare", "residual.base_run"),
         "residual-addition": ("addition-base", "generation.base_run")}
#: overrides that keep a recipe's run tiny whatever the command line adds: the first 300 sentences of a
#: corpus (5000 for the counted n-gram), 200 addition sentences (a residual run and its base must agree on
#: them), the first images, sentences or utterances of the other sets.
_CORPUS, _ADDITION = ["language.limit=300"], ["generation.n_train=200"]
TINY: dict[str, list[str]] = {
    **dict.fromkeys(["char-lstm-shakespeare", "residual-shakespeare", "electric-shakespeare", "earm-shakespeare",
                     "lstm-ptb", "trf-ptb", "trf-nce-ptb"], _CORPUS),
    "kn5-ptb": ["language.limit=5000"],  # modified KN estimates its order-5 discounts from the counts-of-counts
    **dict.fromkeys(["addition-base", "residual-addition", "earm-addition"], _ADDITION)}
TINY["earm-shakespeare"] = [*_CORPUS, "lm.earm_start=1"]  # E-ARM switched on within the few steps
TINY["earm-addition"] = [*_ADDITION, "generation.earm_start=1"]
#: the sections issue 25 split out of ``[language]``: a tree from before that split (``--old-sections before``)
#: reads their keys as ``language.*``.
SPLIT_SECTIONS = ("ngram", "lm", "trf", "residual", "electric")
TINY.update({"rbm-mnist": ["images.limit=500"], "jrf-conll2000": ["jrf.limit=300", "jrf.noise_steps=5"],
             "jrf-supervised-conll2000": ["jrf.limit=300"],
             **dict.fromkeys(["improved-cd-mnist", "conv-ebm-mnist", "conv-ebm-fashion-mnist", "jem-mnist",
                              "classifier-mnist", "recovery-mnist"], ["vision.limit=300"]),
             **dict.fromkeys(["bilstm-crf-conll2000", "bilstm-crf-conll2002"], ["tagging.limit=100"]),
             **dict.fromkeys(["feature-crf-conll2000", "feature-crf-conll2002"],  # full batch: all 100 sentences
                             ["tagging.limit=100", "train.batch_size=100"]),
             **dict.fromkeys(["ctc-digits", "ctc-crf-digits"], ["speech.n_train=40", "data.n_test=20"])})


def old_spelling(arg: str) -> str:
    """``lm.earm_start=1`` as a tree before the per-kind sections spells it: ``language.earm_start=1``."""
    section, _, rest = arg.partition(".")
    return f"language.{rest}" if section in SPLIT_SECTIONS else arg


def train(src: Path, recipe: str, out: Path, extra: list[str], *, old_sections: bool = False) -> Path:
    """Train ``recipe`` with the ``ebms`` of ``src`` into ``out/<recipe>``; return the run folder
    (``old_sections``: ``src`` predates the per-kind language sections)."""
    args = [sys.executable, "-c", "import sys; from ebms.cli.main import main; sys.exit(main())", "train", recipe, f"run.out_dir={out}", f"run.name={recipe}",
            "run.progress=false", "--no-eval", "--overwrite", *TINY.get(recipe, []), *extra]
    if recipe in BASES:
        base, key = BASES[recipe]
        args.append(f"{key}={out / base}")
    if old_sections:
        args = [old_spelling(a) for a in args]
    env = {**os.environ, "PYTHONPATH": str(src.resolve())}
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{recipe} ({src}): ebms train failed:\n{done.stderr.strip()}")
    return out / recipe


def _records(run: Path) -> list[dict[str, Any]]:
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k != "time"} for line in lines if line.strip()]


def differences(a: Path, b: Path) -> list[str]:
    """What differs between the run folders ``a`` and ``b`` (metrics, checkpoints, file names)."""
    import torch
    from safetensors.torch import load_file

    out = []
    files_a = sorted(p.relative_to(a).as_posix() for p in a.rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(b).as_posix() for p in b.rglob("*") if p.is_file())
    if files_a != files_b:
        out.append(f"files: {sorted(set(files_a) ^ set(files_b))}")
    if (a / "metrics.jsonl").is_file() and _records(a) != _records(b):
        out.append("metrics.jsonl differs")
    for name in (f for f in files_a if f.endswith(".safetensors") and f in files_b):
        ta, tb = load_file(str(a / name)), load_file(str(b / name))
        bad = sorted(k for k in set(ta) | set(tb) if k not in ta or k not in tb or not torch.equal(ta[k], tb[k]))
        if bad:
            out.append(f"{name}: tensors differ: {', '.join(bad[:5])}{' ...' if len(bad) > 5 else ''}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", type=Path, required=True, help="the src/ folder of the tree before")
    p.add_argument("--after", type=Path, required=True, help="the src/ folder of the tree after")
    p.add_argument("--out", type=Path, required=True, help="a folder for the runs (before/ and after/ under it)")
    p.add_argument("--recipes", nargs="+", required=True, help="packaged recipe names, bases before their residuals")
    p.add_argument("--old-sections", action="store_true",
                   help="the --before tree predates issue 25's per-kind sections ([lm], [trf], ...): its overrides "
                        "are spelled language.*")
    p.add_argument("--after-only", nargs="+", default=[], metavar="KEY=VALUE",
                   help="overrides for the after tree alone: undo a change it made on purpose to a recipe "
                        "(trf.scan=sequential for trf-ptb, which issue 24 switched to the colored scan)")
    p.add_argument("overrides", nargs="*", help="key=value added to every run (after --)")
    args = p.parse_args(argv)
    failed = 0
    for recipe in args.recipes:
        try:
            runs = [train(src, recipe, args.out / side, args.overrides + (args.after_only if side == "after" else []),
                          old_sections=args.old_sections and side == "before")
                    for src, side in ((args.before, "before"), (args.after, "after"))]
        except SystemExit as e:  # one recipe that cannot train here does not stop the others
            failed += 1
            print(e, flush=True)
            continue
        diff = differences(*runs)
        failed += bool(diff)
        n = len(list(runs[0].rglob("*.safetensors")))
        print(f"{recipe}: {'DIFFERENT: ' + '; '.join(diff) if diff else f'identical ({n} checkpoint file(s), metrics.jsonl)'}",
              flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Do two source trees resolve every packaged recipe to the same settings? Key by key, old names mapped to new.

Issue 25 gave each language model kind its own config section (``[ngram]``, ``[lm]``, ``[trf]``,
``[residual]``, ``[electric]``) and rewrote the recipes. This loads every recipe of the tree ``--before``
and of ``--after`` (``load_config``: defaults, the file, the task's defaults; no data is read) and
compares the resolved settings: a key of the before tree that moved (``language.chains``) is compared
as its home for the recipe's ``model.kind`` in the after tree (``Task.kind_moves``); a key of a new
section that the kind does not read must hold its default (as the old key had to). Exit status 1 when
a recipe differs.

Usage::

    python benchmarks/compare_recipe_settings.py --before /tmp/before --after .

(each a checkout: ``src/ebms/recipes/*.toml`` and the package under ``src``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

#: run with each tree's own ``ebms``: the resolved settings of every recipe as flat dotted keys (JSON).
_DUMP = """
import json, sys
from pathlib import Path
from ebms.cli.config import config_to_dict, load_config
out = {}
for p in sorted(Path(sys.argv[1]).glob("*.toml")):
    out[p.stem] = {f"{s}.{k}": v for s, t in config_to_dict(load_config(p)).items() for k, v in t.items()}
print(json.dumps(out))
"""


def settings(tree: Path) -> dict[str, dict[str, Any]]:
    """Every recipe of ``tree`` resolved by that tree's ``ebms``: ``{recipe: {dotted key: value}}``."""
    tree = tree.resolve()
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    done = subprocess.run([sys.executable, "-c", _DUMP, str(tree / "src" / "ebms" / "recipes")], env=env,
                          capture_output=True, text=True, check=True, cwd="/")
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def differences(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The keys whose values differ once ``before``'s moved keys are spelled as ``after`` reads them (the
    after tree's ``ebms`` must be the one imported)."""
    from ebms.cli.tasks import KIND_TASKS, registered, task_sections

    registered()
    task = KIND_TASKS.get((before["data.name"], before["model.kind"]))
    moves = {} if task is None else task.kind_moves()
    old = {key for t in registered() for key in t.kind_moves()}
    mapped = {moves.get(k, k): v for k, v in before.items() if k not in old or k in moves}
    sections = task_sections()
    mapped |= {k: getattr(sections[k.split(".")[0]](), k.split(".")[1]) for k in after if k not in mapped}
    return sorted(k for k in set(mapped) | set(after) if mapped.get(k, "<absent>") != after.get(k, "<absent>"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", type=Path, required=True, help="checkout before the change")
    p.add_argument("--after", type=Path, required=True, help="checkout after it")
    args = p.parse_args(argv)
    sys.path.insert(0, str((args.after / "src").resolve()))
    before, after = settings(args.before), settings(args.after)
    bad = 0
    for name in sorted(set(before) | set(after)):
        if name not in before or name not in after:
            print(f"{name}: only {'after' if name in after else 'before'}")
            bad += 1
            continue
        diff = differences(before[name], after[name])
        print(f"{name}: {len(after[name])} keys, " + ("identical" if not diff else "DIFFERENT: " + ", ".join(diff)))
        bad += bool(diff)
    print(f"{len(after) - bad} of {len(after)} recipes resolve to the same settings")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

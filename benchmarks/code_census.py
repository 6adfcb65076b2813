"""A census of the source tree's structure: the counts issue 25's redesign is judged by.

Reads ``src/ebms`` with :mod:`ast` (nothing of it is imported, except the command-line config
schema, read in a subprocess so that a tree checked out elsewhere answers for itself) and counts:

* ``lines``: physical lines per top-level package and in all;
* ``protocols``: ``typing.Protocol`` classes declared outside ``ebms.capabilities``, by module;
* ``probes``: ``hasattr(obj, "name")`` and ``getattr(obj, "name", default)`` on objects (not
  on imported modules: ``getattr(torch, "compile", None)`` is a version check; not dunder names
  nor lookups whose default describes the object for a message, ``getattr(x, "shape",
  type(x).__name__)``), by package;
* ``coercers``: functions returning ``Sequences`` whose first argument is an untyped batch
  (``batch``, ``x``, ``src``, ... annotated ``Any`` / ``object``): the batch-to-``Sequences``
  converters;
* ``range_checks``: ``raise`` sites whose message says token ids must lie in ``[0, V)``;
* ``kind_comparisons``: comparisons in ``ebms.cli`` of a ``kind`` against string constants or
  a ``*KINDS`` tuple; ``kind_tables``: module-level ``*KINDS`` names in ``ebms.cli`` bound to a dict;
* ``config_keys``: keys per config section (``ebms.cli.config.section_types()``).

Usage::

    python benchmarks/code_census.py                         # this checkout, printed
    git worktree add /tmp/before 2dcfb06
    python benchmarks/code_census.py --src /tmp/before/src --name code_census_before
    python benchmarks/code_census.py --name code_census_after --list

``--name`` writes the record ``benchmarks/records/NAME.json``; ``--list`` prints every counted
site (file:line) so that each figure can be audited.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

RANGE_MESSAGE = re.compile(r"ids? (must be )?in \[0|token ids must be in|ids? in \[0")


def _modules(src: Path) -> list[Path]:
    pkg = src / "ebms"
    if not pkg.is_dir():
        raise SystemExit(f"--src {src}: no ebms package there; give the src/ folder of a checkout")
    return sorted(pkg.rglob("*.py"))


def _name(src: Path, path: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "(root)"


def _imported_modules(tree: ast.Module) -> set[str]:
    """Names bound to modules by ``import x`` / ``import x as y`` / ``from pkg import module``
    (the last only for a few well-known standard modules, by name)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module in ("torch", "os", "sys"):
            names |= {a.asname or a.name for a in node.names if a.name in ("nn", "distributions", "linalg")}
    return names


def _string_parts(node: ast.AST) -> str:
    """The constant text of a string or f-string (placeholders dropped)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(_string_parts(v) for v in node.values)
    if isinstance(node, ast.BinOp):
        return _string_parts(node.left) + _string_parts(node.right)
    return ""


def _message(exc: ast.AST | None) -> str:
    if isinstance(exc, ast.Call) and exc.args:
        return _string_parts(exc.args[0])
    return ""


def _is_kind(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "kind") or (
        isinstance(node, ast.Name) and node.id == "kind")


def _is_kind_values(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return True
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return bool(node.elts) and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts)
    return isinstance(node, ast.Name) and node.id.endswith("KINDS")


#: the names a batch-like first argument goes by.
BATCH_NAMES = ("batch", "x", "src", "corpus", "data", "sentences")


def _untyped_first_arg(fn: ast.FunctionDef) -> bool:
    args = [a for a in fn.args.args if a.arg not in ("self", "cls")]
    if not args or args[0].annotation is None or args[0].arg not in BATCH_NAMES:
        return False
    return ast.unparse(args[0].annotation) in ("Any", "object")


def _describes(call: ast.Call) -> bool:
    """``getattr(x, "shape", type(x).__name__)``, ``getattr(f, "__name__", f)``: a lookup for an
    error message or a name, not a capability probe."""
    name = call.args[1].value  # type: ignore[attr-defined]
    if name.startswith("__") and name.endswith("__"):
        return True
    if len(call.args) == 3:
        default = ast.unparse(call.args[2])
        return "type(" in default or default == ast.unparse(call.args[0])
    return False


def census(src: Path) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """``(figures, sites)``: the counts, and every counted site as ``module:line`` per figure."""
    lines: Counter[str] = Counter()
    probes: Counter[str] = Counter()
    sites: dict[str, list[str]] = {k: [] for k in
                                   ("protocols", "probes", "coercers", "range_checks", "kind_comparisons", "kind_tables")}
    for path in _modules(src):
        module = _name(src, path)
        top = _top(module)
        text = path.read_text()
        lines[top] += len(text.splitlines())
        tree = ast.parse(text, str(path))
        modules = _imported_modules(tree)
        for node in ast.walk(tree):
            at = f"{module}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.ClassDef) and module != "ebms.capabilities":
                if any(ast.unparse(b).split("[")[0] in ("Protocol", "typing.Protocol") for b in node.bases):
                    sites["protocols"].append(f"{at} {node.name}")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("hasattr", "getattr"):
                a = node.args
                literal = len(a) >= 2 and isinstance(a[1], ast.Constant) and isinstance(a[1].value, str)
                on_module = bool(a) and isinstance(a[0], ast.Name) and a[0].id in modules
                probe = node.func.id == "hasattr" or len(a) == 3
                if literal and probe and not on_module and not _describes(node):
                    probes[top] += 1
                    sites["probes"].append(f"{at} {ast.unparse(node)}")
            elif isinstance(node, ast.FunctionDef) and node.returns is not None:
                if ast.unparse(node.returns).strip("'\"") == "Sequences" and _untyped_first_arg(node):
                    sites["coercers"].append(f"{at} {node.name}")
            elif isinstance(node, ast.Raise) and RANGE_MESSAGE.search(_message(node.exc)):
                sites["range_checks"].append(at)
            if top == "cli" and isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                if any(_is_kind(o) for o in operands) and any(_is_kind_values(o) for o in operands):
                    sites["kind_comparisons"].append(f"{at} {ast.unparse(node)}")
            if top == "cli" and isinstance(node, (ast.Assign, ast.AnnAssign)) and node in tree.body:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Name) and t.id.endswith("KINDS") and isinstance(node.value, ast.Dict):
                        sites["kind_tables"].append(f"{at} {t.id}")
    keys = _config_keys(src)
    figures = {
        "lines": {"total": sum(lines.values()), "per_package": dict(sorted(lines.items()))},
        "protocols_outside_capabilities": len(sites["protocols"]),
        "probes": {"total": sum(probes.values()), "per_package": dict(sorted(probes.items()))},
        "coercers": len(sites["coercers"]),
        "range_checks": len(sites["range_checks"]),
        "kind_comparisons_in_cli": len(sites["kind_comparisons"]),
        "kind_tables_in_cli": len(sites["kind_tables"]),
        "config_keys": {"total": sum(keys.values()), "per_section": keys},
    }
    return figures, sites


def _config_keys(src: Path) -> dict[str, int]:
    """Keys per config section, asked of the tree at ``src`` in a fresh interpreter (none for a
    tree without ``ebms.cli.config``)."""
    if not (src / "ebms" / "cli" / "config.py").is_file():
        return {}
    code = ("import json, dataclasses; from ebms.cli.config import section_types; "
            "print(json.dumps({s: len(dataclasses.fields(t)) for s, t in section_types().items()}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"}, check=False)
    if out.returncode:
        raise SystemExit(f"--src {src}: could not read its config schema: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--src", type=Path, default=ROOT / "src", help="the src/ folder of a checkout (default: this one)")
    p.add_argument("--name", help="write the record benchmarks/records/NAME.json")
    p.add_argument("--list", action="store_true", help="print every counted site")
    args = p.parse_args(argv)
    src = args.src.resolve()
    rec = None
    if args.name:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from _record import Recorder

        rec = Recorder(args.name, seeds=[], settings={"src": str(src), "commit_of_src": _commit(src)})
    figures, sites = census(src)
    if args.list:
        for key, rows in sites.items():
            print(f"## {key} ({len(rows)})")
            print("\n".join(rows))
    print(json.dumps(figures, indent=1))
    if rec is not None:
        rec.write(figures=figures, notes="Counts by benchmarks/code_census.py (see its docstring for what each "
                                         "figure counts); rerun with --list for every site.")
    return 0


def _commit(src: Path) -> str:
    out = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    dirty = subprocess.run(["git", "-C", str(src), "status", "--porcelain", "--", "."], capture_output=True,
                           text=True, check=False).stdout.strip()
    return out.stdout.strip() + ("-dirty" if dirty else "") if out.returncode == 0 else "unknown"


if __name__ == "__main__":
    raise SystemExit(main())

"""The package's layering holds: imports only go down the layer order, and no module imports
another package's private module or name.

The order is the one written in docs/architecture.md ("Layers"); this test reads every module's
``import`` statements with :mod:`ast` (nothing is imported), so it also sees imports inside
functions.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
ARCH = Path(__file__).resolve().parent.parent / "docs" / "architecture.md"

#: Low to high. A module may import from its own layer's packages and from lower layers only.
LAYERS: list[set[str]] = [
    {"_checks", "_hf", "_memory", "_numerics", "_precision", "_progress", "errors", "__version__"},
    {"sequences", "spaces"},
    {"capabilities"},
    {"energy"},
    {"distributions"},
    {"structured"},
    {"data"},
    {"nets"},
    {"samplers"},
    {"models"},
    {"objectives"},
    {"estimators"},
    {"train"},
    {"fit"},
    {"metrics"},
    {"viz"},
    {"apply"},
    {"runs", "cli", "recipes", "ebms"},
]
RANK = {name: i for i, layer in enumerate(LAYERS) for name in layer}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    """``(line, dotted target)`` for every ebms import in ``path``, relative ones resolved."""
    mod = _module_name(path)
    package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found += [(node.lineno, f"{target}.{a.name}") for a in node.names]
    return [(line, t) for line, t in found if t == "ebms" or t.startswith("ebms.")]


def _top(dotted: str) -> str:
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else "ebms"


MODULES = sorted((SRC / "ebms").rglob("*.py"))


def test_every_top_level_package_has_a_layer():
    tops = {_top(_module_name(p)) for p in MODULES}
    assert tops <= set(RANK), f"add these to LAYERS and docs/architecture.md: {sorted(tops - set(RANK))}"


def test_the_layer_order_is_the_one_in_architecture_md():
    text = ARCH.read_text()
    block = re.search(r"<!-- layers -->(.*?)<!-- /layers -->", text, re.S)
    assert block, "docs/architecture.md needs the layer list between <!-- layers --> markers"
    rows = [set(re.findall(r"`([\w.]+)`", line)) for line in block.group(1).splitlines() if line.strip()]
    assert rows == LAYERS


@pytest.mark.parametrize("path", MODULES, ids=lambda p: _module_name(p))
def test_imports_go_down_the_layers(path):
    mod = _module_name(path)
    here = RANK[_top(mod)]
    bad = [f"line {line}: {t}" for line, t in _imports(path)
           if _top(t) in RANK and RANK[_top(t)] > here]
    assert not bad, f"{mod} ({_top(mod)}) imports a higher layer: {bad}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: _module_name(p))
def test_no_private_module_or_name_of_another_package(path):
    mod = _module_name(path)
    package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    bad = []
    for line, target in _imports(path):
        parts = target.split(".")
        for i, part in enumerate(parts[1:], 1):
            if part.startswith("_") and not part.startswith("__"):
                owner = ".".join(parts[:i])  # the package or module that keeps it private
                owner_pkg = owner if owner == "ebms" else ".".join(parts[:2])
                if owner != "ebms" and not (package == owner_pkg or package.startswith(owner_pkg + ".")):
                    bad.append(f"line {line}: {target}")
                break
    assert not bad, f"{mod} imports private names of another package: {bad}"

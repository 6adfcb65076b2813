"""The tests ``make test-public-paths`` runs on the oldest supported torch import nothing that environment lacks.

That environment (the Makefile's ``$(STAMP_OLDEST)``) holds ebms with its core dependencies, pytest and
pytest-xdist, and nothing of the ``dev`` extra: a test in ``PUBLIC_TESTS`` that imports scipy or scikit-learn
passes here and fails CI at collection (it did once: ``tests/samplers/test_mix_and_match.py`` took its chi-square
quantile from scipy). This reads every ``import`` of those files with :mod:`ast`, functions included, follows the
``tests/`` helper modules they import, and allows only the standard library, the core dependencies of
``pyproject.toml``, pytest and ebms. ``pytest.importorskip("name")`` is a call, not an import, and stays allowed.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"


def _public_tests() -> list[Path]:
    """The paths of the Makefile's ``PUBLIC_TESTS``, expanded to their ``.py`` files, plus the conftest files pytest
    loads for them."""
    match = re.search(r"^PUBLIC_TESTS\s*:=\s*(.+)$", (ROOT / "Makefile").read_text(), re.M)
    assert match, "Makefile: no PUBLIC_TESTS line"
    files: list[Path] = []
    for item in match.group(1).split():
        path = ROOT / item
        assert path.exists(), f"Makefile PUBLIC_TESTS names {item}, which does not exist"
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    conftests = {c for f in files for c in (p / "conftest.py" for p in f.parents if p.is_relative_to(TESTS))}
    return files + sorted(c for c in conftests if c.exists())


def _allowed() -> set[str]:
    text = (ROOT / "pyproject.toml").read_text()
    block = re.search(r"^dependencies\s*=\s*\[(.*?)^\]", text, re.S | re.M)
    assert block, "pyproject.toml: no dependencies list"
    core = {re.match(r"[A-Za-z0-9_.-]+", d).group(0).lower().replace("-", "_")
            for d in re.findall(r'"([^"]+)"', block.group(1))}
    return core | set(sys.stdlib_module_names) | {"pytest", "_pytest", "xdist", "ebms", "tests", "__future__"}


def _imports(path: Path) -> list[tuple[str, int]]:
    """``(top-level module, line)`` of every absolute import in the file (relative imports stay inside tests/)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.module, node.lineno))
    return out


def _skipped_unless(path: Path) -> set[str]:
    """The modules a file's module-level code asks for with ``pytest.importorskip("name")`` or
    ``importlib.util.find_spec("name")`` (then ``pytest.skip(..., allow_module_level=True)``): the file is skipped
    without them, so its later imports of them are allowed."""
    out = set()
    for stmt in ast.parse(path.read_text()).body:
        for node in ast.walk(stmt if isinstance(stmt, (ast.Expr, ast.Assign, ast.If)) else ast.Pass()):
            if (isinstance(node, ast.Call) and getattr(node.func, "attr", None) in ("importorskip", "find_spec")
                    and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                out.add(node.args[0].value.split(".")[0])
    return out


def _helper(name: str, importer: Path) -> Path | None:
    """The tests/ module an import names: ``tests._exact_refs``, or a module beside the importing file or at the top
    of tests/ (pytest puts both on ``sys.path``)."""
    parts = name.split(".")
    if parts[0] == "tests":
        parts = parts[1:]
    for base in (importer.parent, TESTS):
        for candidate in (base.joinpath(*parts).with_suffix(".py"), base.joinpath(*parts, "__init__.py")):
            if parts and candidate.exists():
                return candidate
    return None


def test_the_public_path_tests_import_only_what_the_oldest_environment_installs():
    allowed = _allowed()
    seen: set[Path] = set()
    todo = _public_tests()
    bad = []
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        here = allowed | _skipped_unless(path)
        for name, line in _imports(path):
            helper = _helper(name, path)
            if helper is not None:
                todo.append(helper)
            elif name.split(".")[0] not in here:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert len(seen) > 20, f"expected the nets and samplers tests; read only {len(seen)} files"
    assert not bad, ("make test-public-paths runs these on an environment without the dev extra; use torch "
                     "(e.g. torch.special.gammaincc for a chi-square tail) or pytest.importorskip:\n" + "\n".join(bad))


def test_the_guard_sees_a_scipy_import(tmp_path):
    f = tmp_path / "t.py"
    f.write_text("def f():\n    from scipy.stats import chi2\n")
    assert [n for n, _ in _imports(f)] == ["scipy.stats"] and "scipy" not in _allowed()

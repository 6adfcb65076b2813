"""benchmarks/code_census.py counts what its docstring says, on a small tree written here."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import code_census  # noqa: E402


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "src" / "ebms" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))
    return root / "src"


FILES = {
    "__init__.py": "",
    "capabilities.py": """
        from typing import Protocol
        class Counted(Protocol): ...
    """,
    "objectives/__init__.py": """
        import torch
        from typing import Any, Protocol
        from ebms.sequences import Sequences
        class Private(Protocol):
            def f(self) -> None: ...
        def probe(model, x):
            a = getattr(model, "logits", None)          # a probe
            b = hasattr(model, "sample")                # a probe
            c = getattr(x, "shape", type(x).__name__)   # describes x for a message: not counted
            d = getattr(torch, "compile", None)         # a module: not counted
            e = getattr(model, "__name__", None)        # a dunder: not counted
            f = getattr(model, "weight")                # no default: not a probe
            return a, b, c, d, e, f
        def _sentences(batch: Any) -> Sequences:
            if batch.max() > 3:
                raise ValueError(f"batch: expected token ids in [0, {3}); got more")
            return batch
        def _draw(model: Any, n: int) -> Sequences:     # first argument is not a batch
            return model.sample(n)
    """,
    "cli/__init__.py": """
        KINDS = {"a": 1}
        OTHER_KINDS = ("a", "b")
        def route(cfg, kind):
            if cfg.model.kind == "a" or kind in OTHER_KINDS:
                return 1
            return cfg.model.name == "a"
    """,
}


def test_census_counts_each_kind_of_site(tmp_path):
    figures, sites = code_census.census(_tree(tmp_path, FILES))
    assert figures["protocols_outside_capabilities"] == 1
    assert sites["protocols"] == ["ebms.objectives:4 Private"]
    assert figures["probes"] == {"total": 2, "per_package": {"objectives": 2}}
    assert figures["coercers"] == 1 and sites["coercers"][0].endswith("_sentences")
    assert figures["range_checks"] == 1
    assert figures["kind_comparisons_in_cli"] == 2
    assert sites["kind_tables"] == ["ebms.cli:1 KINDS"]
    assert figures["config_keys"] == {"total": 0, "per_section": {}}
    assert figures["lines"]["per_package"]["cli"] == 6


def test_census_of_a_folder_without_ebms_is_one_line(tmp_path):
    with pytest.raises(SystemExit, match="no ebms package there"):
        code_census.census(tmp_path)

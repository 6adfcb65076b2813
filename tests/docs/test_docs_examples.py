"""The documentation matches the code: its Python examples run as written, and the
command-line page lists exactly the config keys, valid names and error messages of the code.

Convention (also described in docs/getting-started.md, "Documentation examples"):

* every fenced block opened with exactly three backticks and ``python`` in
  ``docs/*.md`` and ``README.md`` is run, unless its first line is
  ``# not run`` (for fragments that use names they do not define);
* the blocks of one page run **in order, in one namespace**, like a notebook,
  so a later block may use what an earlier one defined;
* each page runs in a fresh namespace, in a temporary working folder (so run
  folders such as ``runs/quickstart`` land there), under a time limit; torch's
  global RNG state is restored afterwards, so a page's ``torch.manual_seed``
  does not leak into other tests.

Examples are kept small (few steps) so that all pages together stay well under
half a minute on two busy cores.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
SKIP_MARK = "# not run"
#: seconds allowed for all the blocks of one page.
PAGE_LIMIT_S = 60.0

_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)


def python_blocks(text: str) -> list[tuple[int, str]]:
    """``(first line number, source)`` of each runnable ``python`` block, in order."""
    out = []
    for m in _FENCE.finditer(text):
        body = m.group(1)
        if body.lstrip().startswith(SKIP_MARK):
            continue
        out.append((text.count("\n", 0, m.start(1)) + 1, body))
    return out


def _pages_with_code() -> list[Path]:
    return [p for p in PAGES if p.is_file() and python_blocks(p.read_text(encoding="utf-8"))]


class _PageTimeout(Exception):
    pass


def _on_alarm(signum: int, frame: object) -> None:
    raise _PageTimeout


def test_block_parser_skips_marked_blocks_and_numbers_lines() -> None:
    text = "intro\n```python\nx = 1\n```\n\n```python\n# not run\nundefined_name\n```\n```bash\nls\n```\n"
    assert python_blocks(text) == [(3, "x = 1\n")]


@pytest.mark.parametrize("page", _pages_with_code(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_page_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__main__"}
    use_alarm = hasattr(signal, "setitimer")
    if use_alarm:
        old = signal.signal(signal.SIGALRM, _on_alarm)
        signal.setitimer(signal.ITIMER_REAL, PAGE_LIMIT_S)
    rng_state = torch.random.get_rng_state()
    rel = page.relative_to(ROOT).as_posix()
    try:
        for line, src in python_blocks(page.read_text(encoding="utf-8")):
            # pad with blank lines so tracebacks give the line number in the markdown file
            code = compile("\n" * (line - 1) + src, rel, "exec")
            try:
                exec(code, namespace)
            except _PageTimeout:
                pytest.fail(f"{rel}: the examples took more than {PAGE_LIMIT_S:.0f} s (stopped in the block at line {line})")
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        torch.random.set_rng_state(rng_state)


# --- the command-line page matches the code it documents ---------------------------------------

_CLI_PAGE = ROOT / "docs" / "cli.md"


def _rows_for(key: str) -> list[str]:
    """The markdown table rows of docs/cli.md whose first cell is the code span ``key``, above the
    generated "Validation rules" table (that one is checked against ``RULES`` by the CLI tests)."""
    text = _CLI_PAGE.read_text(encoding="utf-8").split("### Validation rules", 1)[0]
    return [line for line in text.splitlines() if line.startswith(f"| `{key}` |")]


def test_cli_page_lists_exactly_the_config_keys() -> None:
    from ebms.cli.config import config_keys

    keys = set(config_keys())
    documented = set(re.findall(r"^\| `([a-z]+\.[a-z0-9_]+)` \|", _CLI_PAGE.read_text(encoding="utf-8"), re.M))
    assert documented == keys, f"docs/cli.md: missing {sorted(keys - documented)}, unknown {sorted(documented - keys)}"


def test_cli_page_lists_exactly_the_valid_names() -> None:
    from ebms.cli.build import LR_SCHEDULES, SAMPLERS
    from ebms.cli.tasks import registered, task_names

    tasks = registered()
    tables = {"model.kind": {k for t in tasks for k in t.model_kinds}, "sampler.kind": SAMPLERS,
              "objective.kind": {k for t in tasks for k in t.objective_kinds}, "train.lr_schedule": LR_SCHEDULES,
              "data.name": task_names()}
    for key, names in tables.items():
        rows = _rows_for(key)  # the key's row in its section table, then its row under "Valid names"
        assert len(rows) == 2, f"docs/cli.md: expected a key row and a valid-names row for {key}; found {len(rows)}"
        listed = set(re.findall(r"`([^`]+)`", rows[1].split("|")[2]))
        assert listed == set(names), f"docs/cli.md: {key} lists {sorted(listed)}; the code has {sorted(names)}"


def test_cli_page_error_messages_are_the_real_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import shlex

    from ebms.cli.main import main

    text = _CLI_PAGE.read_text(encoding="utf-8")
    block = text[text.index("## Errors"):]
    block = block[block.index("```text\n") + 8:]
    block = block[:block.index("```")]
    # the files the examples refer to: a value missing on line 2, a Latin-1 file, a folder without config.toml
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.toml").write_text("[train]\nsteps = \n")
    (tmp_path / "latin1.toml").write_bytes("# résumé\n".encode("latin-1"))
    (tmp_path / "empty").mkdir()
    lines = block.splitlines()
    checked = 0
    for cmd, expected in zip(lines[::2], lines[1::2]):
        assert cmd.startswith("$ ebms "), f"docs/cli.md errors block: expected a command line; got {cmd!r}"
        argv = shlex.split(cmd[2:], comments=True)[1:]
        assert main(argv) == 2, f"docs/cli.md: `{cmd[2:]}` should fail with exit status 2"
        err = capsys.readouterr().err.strip()
        assert err == expected, f"docs/cli.md: `{cmd[2:]}` now prints\n{err}\ninstead of\n{expected}"
        checked += 1
    assert checked >= 10

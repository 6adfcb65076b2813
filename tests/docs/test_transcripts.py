"""Command transcripts in ``README.md`` and ``docs/*.md`` are what the commands print.

A transcript is a fenced block preceded by a marker comment on the line just above its fence::

    <!-- transcript -->
    ```text
    $ ebms recipes
    demo                   PCD on eight Gaussians ...
    ```

Every line of the block that starts with ``$ `` is a command; the lines after it, up to the
next command, are what it printed (stdout and stderr together, as a terminal shows them). The
marker takes options, separated by spaces (quote values with spaces, as in a shell)::

    <!-- transcript slow session=demo command="cat runs/demo/eval.json" needs=mnist -->

``slow``
    the commands take long: the block is checked in the ``slow`` set (``make test-slow``, CI).
``bench``
    the commands take several minutes (a recipe trained to its end): the block is checked by
    ``make test-bench`` and ``make test-all``, not by CI (implies ``slow``).
``command="..."``
    the block shows only the output of this command (no ``$`` lines), e.g. below a ``bash``
    block that says how it is started.
``setup="..."``
    a command run first, whose output is not shown (e.g. the training behind an evaluation).
``session=NAME``
    blocks of one page with the same session share one working folder and run in page order,
    so a later block can read what an earlier one wrote.
``needs=PATH``
    skip (with the reason) unless ``$EBMS_DATA/PATH`` exists.
``rtol=R``
    numbers may differ by a relative ``R`` (for figures that vary between machines); the text
    around them must still match exactly.
``atol=A``
    numbers may differ by ``A`` absolutely (or by ``rtol`` relatively: either suffices), for
    standard errors and differences of nearly equal figures, whose relative spread is large.
``vary=REGEX``
    text matching ``REGEX`` is masked on both sides (a trained model's answers, which another CPU
    changes), so only the text around it is compared.
``timeout=S``
    seconds allowed per command (default 600).

Commands run with ``bash -c`` in a fresh temporary folder (with ``examples/`` and
``benchmarks/`` of the checkout linked into it), with the virtual environment's ``bin`` first
on ``PATH`` and ``EBMS_DATA`` set to the data folder the checkout uses. Before comparing, both
sides are masked for what changes from run to run: durations (``31.2 s``, ``0:04:12``), a
progress bar's elapsed time and rate, Unix timestamps in JSON (``"time": ...``), and the
temporary folder's path (written as a path relative to it).

Regenerate every block from a real run (the lead does this after changing what a command
prints; ``make transcripts`` is the same)::

    python tests/docs/test_transcripts.py --update            # all blocks
    python tests/docs/test_transcripts.py --update --fast     # only blocks not marked slow
    python tests/docs/test_transcripts.py --update README.md  # the blocks of some pages
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DEFAULT_TIMEOUT_S = 600.0
_OPTIONS = {"slow", "bench", "command", "setup", "session", "needs", "rtol", "atol", "vary", "timeout"}

_MARKER = re.compile(r"^<!--\s*transcript\b(?P<opts>.*?)-->[ \t]*\n(?P<fence>```[a-z]*)[ \t]*\n", re.M)


def _rel(page: Path) -> str:
    """``page`` relative to the checkout when it is inside it."""
    try:
        return page.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return str(page)


@dataclass
class Block:
    """One marked transcript block of a page."""

    page: Path
    index: int  # position among the page's marked blocks
    line: int  # 1-based line of the block's first content line
    start: int  # character offsets of the block's content in the page
    end: int
    content: str
    slow: bool = False
    bench: bool = False
    command: str | None = None
    setup: str | None = None
    session: str | None = None
    needs: str | None = None
    rtol: float = 0.0
    atol: float = 0.0
    vary: str | None = None
    timeout: float = DEFAULT_TIMEOUT_S

    @property
    def where(self) -> str:
        return f"{_rel(self.page)}:{self.line}"

    def commands(self) -> list[str]:
        """The commands whose output the block shows, in order."""
        if self.command is not None:
            return [self.command]
        return [ln[2:] for ln in self.content.splitlines() if ln.startswith("$ ")]

    def expected(self) -> list[str]:
        """The shown output of each command (parallel to :meth:`commands`)."""
        if self.command is not None:
            return [self.content]
        outs: list[list[str]] = []
        for ln in self.content.splitlines():
            if ln.startswith("$ "):
                outs.append([])
            elif outs:
                outs[-1].append(ln)
        return ["\n".join(o) for o in outs]

    def render(self, outputs: list[str]) -> str:
        """The block's new content from real outputs."""
        if self.command is not None:
            return outputs[0].rstrip("\n") + "\n"
        parts = []
        for cmd, out in zip(self.commands(), outputs):
            parts.append(f"$ {cmd}")
            if out.strip("\n"):
                parts.append(out.strip("\n"))
        return "\n".join(parts) + "\n"


@dataclass
class Session:
    """Blocks that share one working folder (one block unless a ``session=`` groups several)."""

    page: Path
    name: str
    blocks: list[Block] = field(default_factory=list)

    @property
    def slow(self) -> bool:
        return any(b.slow for b in self.blocks)

    @property
    def bench(self) -> bool:
        return any(b.bench for b in self.blocks)

    @property
    def id(self) -> str:
        return f"{_rel(self.page)}:{self.name}"


def parse_blocks(page: Path, text: str | None = None) -> list[Block]:
    """Every marked transcript block of ``page`` (``text`` overrides the file's content)."""
    text = page.read_text(encoding="utf-8") if text is None else text
    blocks: list[Block] = []
    for m in _MARKER.finditer(text):
        start = m.end()
        close = re.compile(r"^```[ \t]*$", re.M).search(text, start)
        if close is None:
            raise ValueError(f"{page.name}: transcript block at offset {start} is never closed")
        block = Block(page, len(blocks), text.count("\n", 0, start) + 1, start, close.start(), text[start:close.start()])
        for opt in shlex.split(m.group("opts")):
            key, _, value = opt.partition("=")
            if key not in _OPTIONS:
                raise ValueError(f"{block.where}: unknown transcript option {key!r}; expected one of {sorted(_OPTIONS)}")
            if key == "slow":
                block.slow = True
            elif key == "bench":
                block.slow = block.bench = True
            elif key in ("rtol", "atol", "timeout"):
                setattr(block, key, float(value))
            elif key == "vary":
                re.compile(value)  # a bad pattern fails here, naming nothing else
                block.vary = value
            else:
                setattr(block, key, value)
        if not block.commands():
            raise ValueError(f"{block.where}: a transcript needs `$ command` lines or command=\"...\"")
        blocks.append(block)
    return blocks


def sessions(pages: list[Path] = PAGES) -> list[Session]:
    """Marked blocks grouped into sessions, in page order."""
    out: list[Session] = []
    for page in pages:
        if not page.is_file():
            continue
        named: dict[str, Session] = {}
        for b in parse_blocks(page):
            if b.session is None:
                out.append(Session(page, f"line{b.line}", [b]))
            elif b.session in named:
                named[b.session].blocks.append(b)
            else:
                named[b.session] = Session(page, b.session, [b])
                out.append(named[b.session])
    return out


# --- masking what changes from run to run ------------------------------------------------------

_MASKS = [
    # tqdm's bar itself (its width follows the terminal)
    (re.compile(r"(\d+%)\|[^|\n]*\|"), r"\1|<bar>|"),
    # tqdm: "[00:48<00:00, 82.10it/s" (elapsed<remaining, rate)
    (re.compile(r"\[\d+:\d\d(?::\d\d)?<[^,\]]*(?:,\s*[\d.?]+\s*(?:it/s|s/it))?"), "[<time>"),
    (re.compile(r"\(\d+:\d\d:\d\d\)"), "(<clock>)"),
    (re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:e[-+]?\d+)?(?: ?)(?:s|ms|min|minutes|seconds)\b"), "<duration>"),
    (re.compile(r'"time": [\d.e+]+'), '"time": <timestamp>'),
]
_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def clean(raw: str, workdir: Path | None = None) -> str:
    """What a terminal would show: the last state of ``\\r``-rewritten lines, no trailing blanks,
    and the working folder's absolute path made relative."""
    if workdir is not None:
        for w in {str(workdir), str(workdir.resolve())}:
            raw = raw.replace(w + os.sep, "").replace(w, ".")
    raw = raw.replace(str(ROOT) + os.sep, "")
    lines = [ln.split("\r")[-1].rstrip() for ln in raw.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def mask(text: str) -> str:
    """``text`` with the run-to-run fields replaced by placeholders."""
    lines = [ln.rstrip() for ln in text.strip("\n").splitlines()]
    out = "\n".join(lines)
    for pattern, repl in _MASKS:
        out = pattern.sub(repl, out)
    return out


def same_output(expected: str, actual: str, rtol: float = 0.0, atol: float = 0.0, vary: str | None = None) -> bool:
    """Whether two outputs agree after masking (numbers within ``rtol`` relatively or ``atol``
    absolutely when either is positive; text matching ``vary`` masked on both sides)."""
    e, a = mask(expected), mask(actual)
    if vary:
        e, a = re.sub(vary, "<varies>", e), re.sub(vary, "<varies>", a)
    if rtol <= 0 and atol <= 0:
        return e == a
    if _NUMBER.split(e) != _NUMBER.split(a):
        return False
    en, an = _NUMBER.findall(e), _NUMBER.findall(a)
    return len(en) == len(an) and all(
        math.isclose(float(x), float(y), rel_tol=rtol, abs_tol=atol) or x == y for x, y in zip(en, an)
    )


# --- running ------------------------------------------------------------------------------------

#: outputs and working folder after each prefix of commands already run in this process: the same
#: slow command shown on two pages (``ebms demo``) runs once
_CACHE: dict[tuple[Path, tuple[str, ...]], tuple[list[str], Path]] = {}


def _environment() -> dict[str, str]:
    from ebms.data import data_root

    env = {**os.environ, "EBMS_DATA": str(data_root().resolve()), "PYTHONUNBUFFERED": "1"}
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.pop("COLUMNS", None)
    env["TQDM_MININTERVAL"] = "1e9"  # bars in a pipe: their closing lines only, a terminal's last state
    return env


def _new_workdir(base: Path) -> Path:
    work = Path(tempfile.mkdtemp(prefix="transcript-", dir=base))
    for name in ("examples", "benchmarks"):
        (work / name).symlink_to(ROOT / name, target_is_directory=True)
    return work


class TranscriptTimeout(RuntimeError):
    """A transcript's command ran past its ``timeout``."""


def _run_command(cmd: str, work: Path, env: dict[str, str], timeout: float) -> str:
    """stdout and stderr of ``bash -c cmd``, interleaved; the whole process group is killed on timeout."""
    # bytes, not text mode: text mode would turn a progress bar's "\r" updates into separate lines
    proc = subprocess.Popen(["bash", "-c", cmd], cwd=work, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        raw, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise TranscriptTimeout(f"`{cmd}` ran past {timeout:.0f} s (raise the block's timeout=...)") from None
    return raw.decode("utf-8", errors="replace")


def run_session(session: Session, base: Path) -> list[list[str]]:
    """Run every command of the session; the cleaned outputs, one list per block."""
    steps: list[tuple[str, bool, float]] = []  # (command, shown, timeout)
    for b in session.blocks:
        if b.setup:
            steps.append((b.setup, False, b.timeout))
        steps.extend((c, True, b.timeout) for c in b.commands())
    # start from the longest prefix already run (on a copy of its folder)
    done: list[str] = []
    work: Path | None = None
    for k in range(len(steps), 0, -1):
        key = (base, tuple(c for c, _, _ in steps[:k]))
        if key in _CACHE:
            done, cached_dir = list(_CACHE[key][0]), _CACHE[key][1]
            work = Path(tempfile.mkdtemp(prefix="transcript-", dir=base))
            shutil.copytree(cached_dir, work, symlinks=True, dirs_exist_ok=True)
            break
    if work is None:
        work = _new_workdir(base)
    env = _environment()
    for k in range(len(done), len(steps)):
        cmd, _, timeout = steps[k]
        done.append(clean(_run_command(cmd, work, env, timeout), work))
        snapshot = Path(tempfile.mkdtemp(prefix="transcript-", dir=base))
        shutil.copytree(work, snapshot, symlinks=True, dirs_exist_ok=True)
        _CACHE[(base, tuple(c for c, _, _ in steps[: k + 1]))] = (list(done), snapshot)
    shown = iter(out for out, (_, show, _) in zip(done, steps) if show)
    return [[next(shown) for _ in b.commands()] for b in session.blocks]


def _missing_data(session: Session) -> str | None:
    from ebms.data import data_root

    for b in session.blocks:
        if b.needs and not (data_root() / b.needs).exists():
            return f"{b.where}: needs {b.needs} under $EBMS_DATA ({data_root()})"
    return None


# --- tests --------------------------------------------------------------------------------------


def test_marker_options_and_commands_are_parsed() -> None:
    text = (
        "x\n<!-- transcript -->\n```text\n$ ebms recipes\ndemo  d\n$ ebms --version\nebms 0\n```\n"
        '<!-- transcript slow session=s command="cat a b.json" rtol=0.1 -->\n```json\n{}\n```\n'
    )
    first, second = parse_blocks(ROOT / "README.md", text)
    assert (first.line, first.commands(), first.expected()) == (4, ["ebms recipes", "ebms --version"], ["demo  d", "ebms 0"])
    assert first.render(["demo  d2", ""]) == "$ ebms recipes\ndemo  d2\n$ ebms --version\n"
    assert (second.slow, second.session, second.rtol, second.commands()) == (True, "s", 0.1, ["cat a b.json"])
    (third,) = parse_blocks(ROOT / "README.md", '<!-- transcript atol=0.5 vary="=\\d+ (a|b)" -->\n```text\n$ ls\n```\n')
    assert (third.atol, third.vary) == (0.5, "=\\d+ (a|b)")
    assert (first.slow, first.bench, second.bench) == (False, False, False)
    (fourth,) = parse_blocks(ROOT / "README.md", "<!-- transcript bench -->\n```text\n$ ls\n```\n")
    assert (fourth.slow, fourth.bench) == (True, True)
    assert second.render(['{"a": 1}\n']) == '{"a": 1}\n'
    with pytest.raises(ValueError, match="unknown transcript option 'sloww'"):
        parse_blocks(ROOT / "README.md", "<!-- transcript sloww -->\n```text\n$ ls\n```\n")
    with pytest.raises(ValueError, match="needs `\\$ command` lines"):
        parse_blocks(ROOT / "README.md", "<!-- transcript -->\n```text\nno command\n```\n")


def test_the_longest_transcripts_are_marked_bench_and_every_bench_one_is_slow() -> None:
    # the marks pytest sees: a bench session carries both marks, so `-m "slow and not bench"` (CI) leaves it out
    params = {p.id: {m.name for m in p.marks} for p in _params()}
    bench = {i for i, m in params.items() if "bench" in m}
    assert bench and all("slow" in params[i] for i in bench), bench


def test_masks_hide_timings_paths_and_bars_but_not_messages(tmp_path: Path) -> None:
    shown = "trained in 31.2 s; took 1.4 s\ntrain: 100%|##| 40/40 [00:48<00:00, 82.10it/s, loss=-0.13]\n12 passed in 5.1s (0:00:05)"
    other = "trained in 9.0 s; took 12 s\ntrain: 100%|##| 40/40 [01:02<00:00,  1.10s/it, loss=-0.13]\n12 passed in 99.9s (0:01:39)"
    assert same_output(shown, other)
    assert not same_output(shown, other.replace("loss=-0.13", "loss=-0.14"))
    assert not same_output("4000 steps", "400 steps") and not same_output("error: x", "error: y")
    assert same_output('{"step": 3, "time": 1795221842.97}', '{"step": 3, "time": 1795300000.1}')
    assert clean(f"wrote {tmp_path}/runs/a.png\r\n50%\r100%\n\n", tmp_path) == "wrote runs/a.png\n100%"
    assert same_output("nll 1.8186 ± 0.0071", "nll 1.8190 ± 0.0071", rtol=1e-3)
    assert not same_output("nll 1.8186 ± 0.0071", "nll 1.9 ± 0.0071", rtol=1e-3)
    assert not same_output("nll 1.8186 nats", "nll 1.8186 bits", rtol=1e-3)
    # atol: either tolerance suffices (a standard error's relative spread is large)
    assert same_output("ll -108.97 ± 0.43", "ll -106.31 ± 0.71", rtol=0.03, atol=0.5)
    assert not same_output("ll -108.97 ± 0.43", "ll -106.31 ± 0.71", rtol=0.03)
    assert not same_output("ll -108.97 ± 0.43", "ll -126.31 ± 0.71", rtol=0.03, atol=3.0)
    # vary: the masked text may differ, the text around it may not
    assert same_output("56+12=058  wrong", "56+12=068  right", vary=r"=\d+  (right|wrong)")
    assert not same_output("56+12=058  wrong", "56+13=068  right", vary=r"=\d+  (right|wrong)")
    assert not same_output("56+12=058  wrong", "56+12=058  wrong!", vary=r"=\d+  (right|wrong)")


def test_update_reruns_sessions_in_one_folder_and_rewrites_only_the_blocks(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "intro\n<!-- transcript session=s setup=\"echo 3 > n.txt\" -->\n```text\n$ cat n.txt\nold\n$ echo $((1+1))\n```\n"
        "middle\n<!-- transcript session=s command=\"cat n.txt; pwd\" -->\n```text\nstale\n```\n"
        "<!-- transcript -->\n```text\n$ test -f n.txt || echo fresh folder\n```\nend\n"
    )
    assert update([page]) == (3, 0)
    assert page.read_text() == (
        "intro\n<!-- transcript session=s setup=\"echo 3 > n.txt\" -->\n```text\n$ cat n.txt\n3\n$ echo $((1+1))\n2\n```\n"
        "middle\n<!-- transcript session=s command=\"cat n.txt; pwd\" -->\n```text\n3\n.\n```\n"
        "<!-- transcript -->\n```text\n$ test -f n.txt || echo fresh folder\nfresh folder\n```\nend\n"
    )
    assert update([page]) == (0, 0)  # a second run changes nothing
    slow = tmp_path / "slow.md"
    before = "<!-- transcript timeout=0.5 -->\n```text\n$ sleep 30; echo late\n```\n"
    slow.write_text(before)
    with pytest.raises(TranscriptTimeout, match="ran past 0 s"):
        run_session(sessions([slow])[0], tmp_path)
    assert update([slow]) == (0, 1) and slow.read_text() == before


def test_every_page_with_a_transcript_parses() -> None:
    assert sessions(), "README.md and docs/*.md should mark at least one transcript"


def _params() -> list:
    return [pytest.param(s, id=s.id, marks=[pytest.mark.slow, pytest.mark.bench] if s.bench else
                         [pytest.mark.slow] if s.slow else []) for s in sessions()]


@pytest.mark.parametrize("session", _params())
def test_transcript_matches_what_the_command_prints(session: Session, tmp_path_factory: pytest.TempPathFactory) -> None:
    reason = _missing_data(session)
    if reason:
        pytest.skip(reason)
    outputs = run_session(session, tmp_path_factory.getbasetemp())
    for block, outs in zip(session.blocks, outputs):
        for cmd, want, got in zip(block.commands(), block.expected(), outs):
            assert same_output(want, got, block.rtol, block.atol, block.vary), (
                f"{block.where}: `{cmd}` now prints\n{got}\n--- instead of what the page shows ---\n{want}\n"
                f"(regenerate with: python tests/docs/test_transcripts.py --update {_rel(block.page)})"
            )


# --- regeneration -------------------------------------------------------------------------------


def update(pages: list[Path], *, fast_only: bool = False) -> tuple[int, int]:
    """Rerun the marked blocks of ``pages`` and write their real output into the pages.

    Returns:
        ``(blocks rewritten, sessions that failed)``; a failed session's blocks are left as they were.
    """
    base = Path(tempfile.mkdtemp(prefix="ebms-transcripts-"))
    changed = failed = 0
    try:
        for session in sessions(pages):
            if fast_only and session.slow:
                print(f"skip {session.id} (slow)")
                continue
            reason = _missing_data(session)
            if reason:
                print(f"skip {session.id}: {reason}")
                continue
            print(f"run  {session.id}: {' ; '.join(c for b in session.blocks for c in b.commands())}", flush=True)
            try:
                outputs = run_session(session, base)
            except TranscriptTimeout as exc:
                print(f"FAILED {session.id}: {exc}; its blocks are left as they were")
                failed += 1
                continue
            text = session.page.read_text(encoding="utf-8")
            # replace from the end so earlier offsets stay valid; re-parse: an earlier session may have
            # changed this page's offsets
            current = parse_blocks(session.page, text)
            for block, outs in sorted(zip(session.blocks, outputs), key=lambda t: -t[0].index):
                fresh = current[block.index]
                new = block.render(outs)
                if new != fresh.content:
                    text = text[: fresh.start] + new + text[fresh.end:]
                    changed += 1
            session.page.write_text(text, encoding="utf-8")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"{changed} block(s) rewritten" + (f", {failed} session(s) failed" if failed else ""))
    return changed, failed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Check or regenerate the command transcripts in README.md and docs/.")
    p.add_argument("pages", nargs="*", help="pages for --update or --list, relative to the checkout (default: all)")
    p.add_argument("--update", action="store_true", help="rewrite the blocks with what the commands print now")
    p.add_argument("--fast", action="store_true", help="leave out blocks marked slow")
    p.add_argument("--list", action="store_true", help="list the marked blocks and exit")
    args = p.parse_args(argv)
    pages = [ROOT / pg for pg in args.pages] or PAGES
    if args.list:
        for s in sessions(pages):
            for b in s.blocks:
                print(f"{b.where}{' [bench]' if b.bench else ' [slow]' if b.slow else ''}: {' ; '.join(b.commands())}")
        return 0
    if args.update:
        return 1 if update(pages, fast_only=args.fast)[1] else 0
    marks = "not slow" if args.fast else ""
    return subprocess.call([sys.executable, "-m", "pytest", "-q", __file__, "-k", "transcript_matches", "-m", marks])


if __name__ == "__main__":
    sys.exit(main())

"""Every figure quoted in the documentation comes from a committed record.

A *record* is a small JSON file in ``benchmarks/records/`` written by the run that measured it
(``benchmarks/_record.py``: command, commit, seeds, threads, CPU, torch version, wall time, peak
memory, the figures). A page ties its figures to records with a region::

    <!-- record: ctc_crf_digits, published -->
    | model | WER (%) |
    | CTC | 12.41 |
    <!-- /record -->

Inside a region every *figure* must equal, at the precision it is shown, some number in one of
the named records (any numeric leaf: figures, settings, wall time ...). Outside regions no figure
may appear at all. A figure is a number written with a decimal point (``141.19``, ``0.5``), a
percentage (``12 %``), a ratio (``1.74×``), a number in scientific notation (``4.1e-05``) or an
integer with a unit of measurement (``917 MiB``, ``455 s``, ``8 min``, ``3 nats``); other plain
integers (step counts, sizes, seeds) are not figures. Code (fenced blocks, inline
backticks), math (``$...$``), HTML comments, link targets, version strings (``2.15.0``) and
references (``§5.5``, ``Eq. 5.19``, ``Table 3.2``) are not read, nor a *settings* region
(``<!-- settings -->`` ... ``<!-- /settings -->``): a configuration reference (keys, defaults,
accepted ranges) whose numbers are settings, not measurements. Transcripts are code blocks,
checked against real runs by ``test_transcripts.py``.

A shown value ``d`` with ``k`` decimals equals a recorded ``v`` when ``|v - d| <= 0.5·10^-k``
(also ``100 v`` for a percentage; ``|v|`` when ``d`` carries no sign, as in "lower by 0.04").
When a region quotes the mean difference or an interval end of a comparison (a record entry
with ``ci_low``, ``ci_high`` and ``words``, written by :func:`ebms.metrics.compare_over_seeds`),
the region must also contain its verdict (``words``): a comparison cannot be quoted without
what its interval allows.

Run ``python tests/docs/figures.py [PAGE ...]`` to list the figures that are not backed.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "benchmarks" / "records"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md"]

_OPEN = re.compile(r"<!--\s*record:\s*(?P<names>[^>]*?)\s*-->")
_CLOSE = re.compile(r"<!--\s*/record\s*-->")
#: units that make an integer a measurement (a size, a duration, a log-likelihood)
_UNITS = r"(?:MiB|MB|GiB|GB|KiB|KB|ms|µs|s|min|h|nats)"
_NUMBER = re.compile(
    r"(?<![\w.§/#\-−+])(?P<sign>[−+\-]?)(?P<num>\d{1,3}(?:,\d{3})+\.\d+|\d{1,3}(?:,\d{3})+(?=\s?(?:%|×))|\d+\.\d+(?:[eE][−+\-]?\d+)?|\d+[eE][−+\-]?\d+"
    r"|\d+(?=\s?(?:%|×))|(?:\d{1,3}(?:,\d{3})+|\d+)(?=\s?" + _UNITS + r"\b))(?P<unit>\s?(?:%|×))?(?![\w.]\d)"
)
_REF = re.compile(r"(?:§|Eqs?\.\s?|Tables?\s|Sections?\s|Fig\.\s|Figures?\s|[Cc]h\.\s|Chapters?\s|Algorithm\s|"
                  r"v|version\s)$")


@dataclass(frozen=True)
class Figure:
    page: str
    line: int
    text: str
    value: float
    decimals: int
    percent: bool
    signed: bool
    region: tuple[str, ...] | None


def _blank(m: re.Match[str]) -> str:
    """Replace a match by spaces, keeping its newlines (line numbers stay right)."""
    return re.sub(r"[^\n]", " ", m.group(0))


def _readable(text: str) -> str:
    """The page with everything that is not prose or table blanked out (same length, same lines)."""
    text = re.sub(r"^(```|~~~).*?^\1[^\n]*$", _blank, text, flags=re.S | re.M)  # fenced code
    text = re.sub(r"<!--\s*settings\s*-->.*?<!--\s*/settings\s*-->", _blank, text, flags=re.S)  # reference tables
    text = re.sub(r"<!--(?!\s*/?record\b).*?-->", _blank, text, flags=re.S)  # comments (not markers)
    text = re.sub(r"\$\$.*?\$\$", _blank, text, flags=re.S)  # display math
    text = re.sub(r"(?<!\\)\$[^$\n]+?\$", _blank, text)  # inline math
    text = re.sub(r"(`+)(?:[^`\n]|\n(?![ \t]*\n))*?\1", _blank, text)  # inline code (may wrap a line)
    text = re.sub(r"\]\([^)\n]*\)", _blank, text)  # link targets
    text = re.sub(r"<[^>\n]*>", lambda m: m.group(0) if _OPEN.match(m.group(0)) or _CLOSE.match(m.group(0))
                  else _blank(m), text)  # html tags
    text = re.sub(r"\b\d+\.\d+\.\d+(?:\.\d+)*\w*", _blank, text)  # versions 2.15.0
    return text


def figures_of(page: Path) -> Iterator[Figure]:
    """Every figure of ``page`` with the records of the region it stands in (``None`` outside)."""
    raw = page.read_text(encoding="utf-8")
    text = _readable(raw)
    rel = str(page.relative_to(ROOT))
    region: tuple[str, ...] | None = None
    for lineno, line in enumerate(text.split("\n"), 1):
        pos = 0
        for m in re.finditer(rf"{_OPEN.pattern}|{_CLOSE.pattern}", line):
            yield from _numbers(rel, lineno, line[pos:m.start()], region)
            if m.group(0).lstrip("<!- ").startswith("/"):
                if region is None:
                    raise ValueError(f"{rel}:{lineno}: <!-- /record --> without an open region")
                region = None
            else:
                if region is not None:
                    raise ValueError(f"{rel}:{lineno}: a record region opens inside another (close it first)")
                region = tuple(n.strip() for n in m.group("names").split(",") if n.strip())
            pos = m.end()
        yield from _numbers(rel, lineno, line[pos:], region)
    if region is not None:
        raise ValueError(f"{rel}: record region {', '.join(region)} is never closed")


def _numbers(page: str, lineno: int, text: str, region: tuple[str, ...] | None) -> Iterator[Figure]:
    for m in _NUMBER.finditer(text):
        if _REF.search(text[: m.start()]):
            continue
        num = m.group("num").replace(",", "")
        value = float(num)
        mant = num.split("e")[0].split("E")[0]
        decimals = len(mant.split(".")[1]) if "." in mant else 0
        if "e" in num.lower():
            exp = int(num.lower().split("e")[1].replace("−", "-"))
            decimals = decimals - exp
        sign = m.group("sign")
        if sign in ("-", "−"):
            value = -value
        unit = (m.group("unit") or "").strip()
        yield Figure(page, lineno, m.group(0).strip(), value, decimals, unit == "%", bool(sign), region)


def _leaves(obj: Any) -> Iterator[float]:
    if isinstance(obj, bool):
        return
    if isinstance(obj, (int, float)):
        if math.isfinite(obj):
            yield float(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _leaves(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _leaves(v)


def _comparisons(obj: Any) -> Iterator[dict[str, Any]]:
    if isinstance(obj, dict):
        if {"ci_low", "ci_high", "mean_diff", "words"} <= set(obj):
            yield obj
        for v in obj.values():
            yield from _comparisons(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _comparisons(v)


def load_record(name: str) -> dict[str, Any]:
    path = RECORDS / f"{name}.json"
    if not path.is_file():
        raise FileNotFoundError(f"record {name!r}: no file {path.relative_to(ROOT)}")
    return json.loads(path.read_text())


def matches(fig: Figure, v: float) -> bool:
    tol = 0.5 * 10.0 ** (-fig.decimals) * (1 + 1e-9) + 1e-12
    candidates = [v, 100.0 * v] if fig.percent else [v]
    for c in candidates:
        if abs(c - fig.value) <= tol or (not fig.signed and abs(abs(c) - abs(fig.value)) <= tol):
            return True
    return False


def problems(pages: list[Path] | None = None) -> list[str]:
    """One line per figure that is not backed by its region's records, and per unquoted verdict."""
    out: list[str] = []
    cache: dict[str, dict[str, Any]] = {}
    for page in pages or PAGES:
        figs = list(figures_of(page))
        by_region: dict[tuple[int, tuple[str, ...]], list[Figure]] = {}
        for f in figs:
            if f.region is None:
                out.append(f"{f.page}:{f.line}: {f.text!r} is not in a record region")
                continue
            leaves: list[float] = []
            for name in f.region:
                if name not in cache:
                    try:
                        cache[name] = load_record(name)
                    except FileNotFoundError as e:
                        out.append(f"{f.page}:{f.line}: {e}")
                        cache[name] = {}
                leaves.extend(_leaves(cache[name]))
            if not any(matches(f, v) for v in leaves):
                out.append(f"{f.page}:{f.line}: {f.text!r} is in none of the records {', '.join(f.region)}")
            by_region.setdefault((_region_start(figs, f), f.region), []).append(f)
        out.extend(_verdict_problems(page, by_region, cache))
    return out


def _region_start(figs: list[Figure], f: Figure) -> int:
    """The first line of ``f``'s region (consecutive figures with the same records)."""
    start = f.line
    for g in reversed(figs[: figs.index(f)]):
        if g.region != f.region:
            break
        start = g.line
    return start


def _verdict_problems(page: Path, by_region: dict[tuple[int, tuple[str, ...]], list[Figure]],
                      cache: dict[str, dict[str, Any]]) -> Iterator[str]:
    lines = page.read_text(encoding="utf-8").split("\n")
    for (start, names), figs in by_region.items():
        end = max(f.line for f in figs)
        # the whole region's text: from its opening marker to its closing marker
        lo = start
        while lo > 1 and not _OPEN.search(lines[lo - 1]):
            lo -= 1
        hi = end
        while hi < len(lines) and not _CLOSE.search(lines[hi - 1]):
            hi += 1
        text = " ".join(lines[lo - 1: hi]).replace("−", "-")
        for name in names:
            for comp in _comparisons(cache.get(name, {})):
                keys = [comp[k] for k in ("mean_diff", "ci_low", "ci_high") if isinstance(comp.get(k), (int, float))]
                quoted = any(matches(f, v) and f.decimals >= 1 for f in figs for v in keys)
                if quoted and comp["words"].replace("−", "-") not in text:
                    yield (f"{page.relative_to(ROOT)}:{lo}: the region quotes the comparison "
                           f"{comp.get('name_a')} vs {comp.get('name_b')} ({comp.get('metric')}) but not its verdict "
                           f"{comp['words']!r}")


def main(argv: list[str]) -> int:
    pages = [ROOT / p for p in argv] if argv else None
    found = problems(pages)
    for line in found:
        print(line)
    counts: dict[str, int] = {}
    for line in found:
        counts[line.split(":")[0]] = counts.get(line.split(":")[0], 0) + 1
    for page, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        print(f"# {page}: {n}", file=sys.stderr)
    print(f"# {len(found)} unbacked figures", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""The documentation's figures equal their committed records (tests/docs/figures.py says how)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import figures as F  # noqa: E402
from _record import MAX_BYTES, Recorder  # noqa: E402

HEADER = ("name", "command", "commit", "date", "seeds", "threads", "cpu", "torch", "python", "wall_s", "peak_rss_mb",
          "settings", "figures", "notes")


CHECKED = F.PAGES


@pytest.mark.parametrize("page", CHECKED, ids=[p.relative_to(F.ROOT).as_posix() for p in CHECKED])
def test_every_quoted_figure_equals_its_record(page):
    found = F.problems([page])
    assert not found, f"{len(found)} figures are not backed by a record, e.g.:\n" + "\n".join(found[:40])


RECORDS = sorted(F.RECORDS.glob("*.json"))


def _unsourced(obj, where):
    """Places of numbers in a published record that are not the ``value`` of a ``{value, source}`` entry."""
    if isinstance(obj, dict):
        if "value" in obj:
            if not (isinstance(obj.get("source"), str) and obj["source"].strip()):
                yield f"{where}: a value without its source"
            return
        for k, v in obj.items():
            yield from _unsourced(v, f"{where}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _unsourced(v, f"{where}[{i}]")
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        yield f"{where}: a number without its source"


@pytest.mark.parametrize("path", RECORDS, ids=[p.stem for p in RECORDS])
def test_records_say_how_they_were_made_and_stay_small(path):
    assert path.stat().st_size <= MAX_BYTES
    rec = json.loads(path.read_text())
    missing = [k for k in HEADER if k not in rec]
    assert not missing, f"{path.name}: missing {missing}"
    assert rec["name"] == path.stem
    if rec.get("kind") == "published":  # figures carried over from papers: each number with its source
        assert not list(_unsourced(rec["figures"], "figures")), f"{path.name}: {list(_unsourced(rec['figures'], 'figures'))}"
    else:
        assert rec["command"] and rec["commit"] and rec["cpu"] and rec["torch"]


def _page(tmp_path, text, records):
    rec_dir = tmp_path / "records"
    rec_dir.mkdir()
    for name, figures in records.items():
        Recorder(name, seeds=[0], settings={"lr": 0.01}, argv=["x.py"]).write(figures, directory=rec_dir)
    page = tmp_path / "page.md"
    page.write_text(text)
    return page


@pytest.fixture
def checker(monkeypatch, tmp_path):
    monkeypatch.setattr(F, "RECORDS", tmp_path / "records")
    monkeypatch.setattr(F, "ROOT", tmp_path)
    return F


def test_checker_accepts_figures_at_their_shown_precision(checker, tmp_path):
    page = _page(tmp_path, "<!-- record: r -->\nWER 12.41 %, ppl 141.2 (lr 0.01), 1.74× faster, 25 %, −0.5,\n"
                           "917 MiB in 455 s, 1,024 MB\n<!-- /record -->\n",
                 {"r": {"wer": 12.4149, "ppl": 141.19, "x": 1.7449, "p": 0.25, "d": -0.5, "mib": 917.4, "s": 455,
                        "mb": 1024}})
    assert checker.problems([page]) == []


@pytest.mark.parametrize("text, expect", [
    ("<!-- record: r -->\nWER 12.42\n<!-- /record -->\n", "'12.42' is in none of the records r"),
    ("WER 12.41 outside\n", "'12.41' is not in a record region"),
    ("took 455 s outside\n", "'455' is not in a record region"),
    ("<!-- record: r -->\n+0.5 gain\n<!-- /record -->\n", "'+0.5' is in none"),
    ("<!-- record: nope -->\n12.41\n<!-- /record -->\n", "record 'nope': no file"),
])
def test_checker_refuses_unbacked_figures(checker, tmp_path, text, expect):
    page = _page(tmp_path, text, {"r": {"wer": 12.4149, "d": -0.5}})
    assert any(expect in p for p in checker.problems([page]))


def test_checker_does_not_read_code_math_versions_or_references(checker, tmp_path):
    text = ("```\nloss 0.123\n```\n`lr=0.01` and $\\sigma = 0.99$, torch 2.15.0, §5.5, Eq. 5.19, Table 3.2,\n"
            "[link](x/0.5.md) <!-- a comment 1.5 --> 20,000 steps, seed 3, `a wrapped\n0.25 GiB` code span\n"
            "<!-- settings -->\n| `train.lr` | default 0.001, at most 1e+30 |\n<!-- /settings -->\n")
    assert checker.problems([_page(tmp_path, text, {})]) == []


def test_checker_requires_the_verdict_with_a_quoted_comparison(checker, tmp_path):
    from ebms.metrics import compare_over_seeds

    cmp = compare_over_seeds([10.0, 11.0, 10.5], [10.2, 10.9, 10.9], name_a="a", name_b="b", metric="m")
    figs = {"cmp": cmp.to_dict()}
    lo = f"{cmp.ci_low:.2f}".replace("-", "−")
    bare = _page(tmp_path, f"<!-- record: r -->\ninterval {lo}\n<!-- /record -->\n", {"r": figs})
    assert any("not its verdict 'not significant'" in p for p in checker.problems([bare]))
    bare.write_text(f"<!-- record: r -->\ninterval {lo}: not significant\n<!-- /record -->\n")
    assert checker.problems([bare]) == []


@pytest.mark.parametrize("text, match", [
    ("<!-- /record -->\n", "without an open region"),
    ("<!-- record: a -->\n<!-- record: b -->\n", "inside another"),
    ("<!-- record: a -->\n1.5\n", "never closed"),
])
def test_checker_refuses_malformed_regions(checker, tmp_path, text, match):
    with pytest.raises(ValueError, match=match):
        checker.problems([_page(tmp_path, text, {})])


def test_recorder_writes_provenance_and_refuses_non_numbers(tmp_path):
    rec = Recorder("demo", seeds=[0, 1], settings={"steps": 10}, argv=["benchmarks/x.py", "--quick"])
    path = rec.write({"a": 1.5, "b": [1, 2]}, notes="n", directory=tmp_path)
    out = json.loads(path.read_text())
    assert out["seeds"] == [0, 1] and out["figures"] == {"a": 1.5, "b": [1, 2]} and out["settings"] == {"steps": 10}
    assert out["command"].startswith("python ") and out["command"].endswith("--quick") and out["peak_rss_mb"] > 0
    with pytest.raises(ValueError, match="figures.a"):
        rec.write({"a": float("nan")}, directory=tmp_path)
    with pytest.raises(ValueError, match="above"):
        rec.write({"a": list(range(30_000))}, directory=tmp_path)
    with pytest.raises(ValueError, match="name"):
        Recorder("a/b")

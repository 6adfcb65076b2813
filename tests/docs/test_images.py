"""Every image in ``docs/img`` is shown by a page, and every image a page shows exists.

An image nobody links is a figure without a page (and, since issue 23, usually one whose run has
no committed record: the five JEM/conv-EBM images removed then); a link to a missing image is a
broken page. Pages: README.md, docs/*.md, benchmarks/README.md, examples/README.md if present.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IMG = ROOT / "docs" / "img"
PAGES = [p for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md",
                     ROOT / "examples" / "README.md"] if p.exists()]
# markdown images and links (![..](x) or [..](x)) and HTML <img src="x">
_TARGET = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)|<img[^>]*\bsrc=\"([^\"]+)\"")


def image_links(page: Path) -> list[tuple[int, Path]]:
    """``(line, resolved path)`` of every link from ``page`` to a .png/.svg/.jpg/.gif file."""
    out = []
    for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        for m in _TARGET.finditer(line):
            target = (m.group(1) or m.group(2)).split("#")[0]
            if re.search(r"\.(png|svg|jpe?g|gif)$", target, re.I) and "://" not in target:
                out.append((n, (page.parent / target).resolve()))
    return out


def test_the_link_parser_finds_markdown_and_html_images(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text('![a](img/x.png)\n<img src="img/y.svg" width="3">\n[not an image](z.md)\n', encoding="utf-8")
    assert [(n, p.name) for n, p in image_links(page)] == [(1, "x.png"), (2, "y.svg")]


def test_every_linked_image_exists() -> None:
    missing = [f"{p.relative_to(ROOT)}:{n}: {t}" for p in PAGES for n, t in image_links(p) if not t.exists()]
    assert not missing, "pages link images that do not exist:\n" + "\n".join(missing)


def test_every_image_in_docs_img_is_shown_by_a_page() -> None:
    shown = {t for p in PAGES for _, t in image_links(p)}
    orphans = sorted(f.name for f in IMG.iterdir() if f.is_file() and f.resolve() not in shown)
    assert not orphans, f"docs/img holds images no page shows (link them or delete them): {orphans}"

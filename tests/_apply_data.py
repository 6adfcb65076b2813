"""Tiny data folders shared by the tests of the commands applying a run: CoNLL-2000 chunking text, an
FSDD-like folder of tones (one pitch per digit and speaker), a text corpus of random short sentences, and the
reader of ``ebms score``'s TSV output."""

from __future__ import annotations

import contextlib
import math
import random
import wave
from collections.abc import Iterator
from pathlib import Path

import numpy as np


@contextlib.contextmanager
def moved_away(path: Path) -> Iterator[None]:
    """``path`` renamed away for the block (restored after it, whatever happens)."""
    away = path.with_name(path.name + ".away")
    path.rename(away)
    try:
        yield
    finally:
        away.rename(path)


#: the words of :func:`word_corpus`'s sentences.
WORDS = "the cat sat on mat dog log a and cats dogs at mall house running jumped quickly".split()


def word_corpus(path: Path, n: int, seed: int, words: list[str] = WORDS) -> Path:
    """``n`` lines of 1-6 words drawn from ``words`` (seeded), written to ``path``; returns ``path``."""
    r = random.Random(seed)
    path.write_text("\n".join(" ".join(r.choice(words) for _ in range(r.randint(1, 6))) for _ in range(n)) + "\n")
    return path


def tsv_rows(text: str) -> list[dict[str, str]]:
    """The rows of a TSV text with a header line, as dicts (``ebms score``'s output)."""
    head, *rows = text.splitlines()
    return [dict(zip(head.split("\t"), r.split("\t"))) for r in rows]


#: (word, POS, chunk tag) rows the tiny CoNLL corpora are drawn from.
CONLL_ROWS = [("the", "DT", "B-NP"), ("cat", "NN", "I-NP"), ("dog", "NN", "I-NP"), ("sat", "VBD", "B-VP"),
              ("ran", "VBD", "B-VP"), ("on", "IN", "B-PP"), ("mat", "NN", "B-NP"), (".", ".", "O"),
              ("42", "CD", "B-NP")]


def conll_corpus(n: int, seed: int, rows: list[tuple[str, str, str]] = CONLL_ROWS) -> str:
    """``n`` sentences of 1-6 rows drawn from ``rows`` (seeded), in CoNLL form."""
    rng = random.Random(seed)
    return "".join("".join(f"{w} {p} {t}\n" for w, p, t in (rng.choice(rows) for _ in range(rng.randint(1, 6))))
                   + "\n" for _ in range(n))


def write_conll2000(root: Path, train: str, test: str) -> Path:
    """``root/conll2000/{train,test}.txt`` with the given texts; returns ``root``."""
    (root / "conll2000").mkdir(parents=True, exist_ok=True)
    (root / "conll2000" / "train.txt").write_text(train)
    (root / "conll2000" / "test.txt").write_text(test)
    return root


def write_wav(path: Path, samples: np.ndarray, *, rate: int = 8000, width: int = 2, channels: int = 1) -> Path:
    """A PCM wav file of ``samples`` (already in the sample width's dtype)."""
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(samples.tobytes())
    return path


def tone(digit: int, speaker: int) -> np.ndarray:
    """The 16-bit 8 kHz tone standing for ``digit`` spoken by speaker number ``speaker``."""
    t = np.arange(1200 + 80 * digit) / 8000
    return (6000 * np.sin(2 * math.pi * (300 + 150 * digit + 20 * speaker) * t)).astype("<i2")


def write_fsdd(base: Path) -> Path:
    """``base/fsdd/recordings``: takes 4-6 of each digit by ann, bob and cy (takes 5 and 6 train; all of cy's takes
    are test takes when cy is the held-out speaker); returns ``base``."""
    rec = base / "fsdd" / "recordings"
    rec.mkdir(parents=True)
    for s_i, spk in enumerate(("ann", "bob", "cy")):
        for d in range(10):
            for k in range(4, 7):
                write_wav(rec / f"{d}_{spk}_{k}.wav", tone(d, s_i))
    return base

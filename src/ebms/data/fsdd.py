"""Free Spoken Digit Dataset (FSDD) and a connected-digit recognition task built from it.

FSDD (Jackson et al., "Free Spoken Digit Dataset", GitHub Jakobovski/free-spoken-digit-dataset,
CC BY-SA 4.0): 3,000 wav files ``recordings/{digit}_{speaker}_{index}.wav``, 8 kHz mono 16-bit,
6 speakers x 10 digits x 50 takes; the source's split is index 0-4 test, 5-49 train. The files
live in ``$EBMS_DATA/fsdd`` (see :mod:`ebms.data.paths`).

Connected digits (:func:`connected_digits`): each utterance is a string of ``L ~ U{1..max_digits}``
uniform random digits spoken by ONE speaker, made by concatenating one random take per digit
(each take scaled to RMS 0.1) with gaps of ``U[gap_ms]`` milliseconds of low Gaussian noise
(std 0.002) before, between and after the digits. Training utterances use the training speakers'
takes 5-49 only; test utterances use only the held-out ``test_speakers`` (default ``("theo",)``,
all 50 takes), so the test set is speaker-disjoint. Everything is drawn from one
``numpy.random.Generator(seed)``, so the task is a pure function of its arguments.

Features: 40 log-mel filterbanks (25 ms Hann window, 10 ms hop, :func:`ebms.data.audio.log_mel`),
then global CMVN with statistics of the training utterances applied to both sets (or with given
statistics: a trained run's stored ones, ``stats=``). Labels are ``digit + 1`` (1..10) so that 0 is
the CTC blank. Results are cached in memory per argument set (with given statistics: when they are
the fitted ones). ``keep_waves=True`` also keeps each utterance's waveform
(``DigitUtterances.waves``), e.g. to write it as a wav file.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ebms._checks import check_int
from ebms.data._limits import BLOCK, file_size
from ebms.data.audio import MAX_WAV_BYTES, CMVNStats, cmvn, log_mel, read_wav
from ebms.data.paths import DATA_ENV_VAR, data_root
from ebms.errors import DataError

__all__ = ["SPEAKERS", "ConnectedDigits", "DigitUtterances", "Recording", "connected_digits", "load_fsdd"]

#: The six FSDD speakers.
SPEAKERS = ("george", "jackson", "lucas", "nicolas", "theo", "yweweler")
SAMPLE_RATE = 8000
_NAME = re.compile(r"^(\d)_([a-z]+)_(\d+)\.wav$")
_RECORDINGS: dict[str, list[Recording]] = {}
_TASKS: dict[tuple, ConnectedDigits] = {}


@dataclass(frozen=True)
class Recording:
    """One FSDD take: ``waveform (N,)`` float32 in ``[-1, 1]`` at 8 kHz."""

    digit: int
    speaker: str
    index: int
    waveform: Tensor


@dataclass
class DigitUtterances:
    """Padded connected-digit utterances.

    Attributes:
        features: ``(N, T, F)`` float32, CMVN-normalised, zero past ``lengths``.
        lengths: ``(N,)`` long frame counts.
        targets: ``(N, S)`` long labels ``digit + 1`` (1..10), padded with 0 (the blank).
        target_lengths: ``(N,)`` long label counts.
        speakers: the speaker of each utterance.
        waves: with ``keep_waves``, each utterance's waveform ``(N_i,)`` float32 at 8 kHz (its
            features are ``log_mel(wave, 8000, n_mels=n_mels)``, then the CMVN); else ``None``.
    """

    features: Tensor
    lengths: Tensor
    targets: Tensor
    target_lengths: Tensor
    speakers: list[str]
    waves: list[Tensor] | None = None

    def __len__(self) -> int:
        return int(self.features.shape[0])

    def transcripts(self) -> list[list[int]]:
        """Label sequences (1..10) as Python lists."""
        return [row[:n].tolist() for row, n in zip(self.targets, self.target_lengths.tolist())]


@dataclass
class ConnectedDigits:
    """What :func:`connected_digits` returns: the two sets, the training CMVN statistics, the
    held-out speakers, and ``n_classes = 11`` (blank + 10 digits)."""

    train: DigitUtterances
    test: DigitUtterances
    stats: CMVNStats
    test_speakers: tuple[str, ...]
    n_classes: int = 11


def _fsdd_dir(root: str | Path | None) -> Path:
    base = Path(root).expanduser() if root is not None else data_root()
    folder = base / "fsdd" if (base / "fsdd" / "recordings").is_dir() else base
    if not (folder / "recordings").is_dir():
        raise FileNotFoundError(
            f"root: no FSDD recordings under {str(base)!r} (looked for fsdd/recordings/ and recordings/); "
            f"set {DATA_ENV_VAR} or data.root to the folder holding fsdd/"
        )
    return folder


def load_fsdd(root: str | Path | None = None, *, verify: bool = False) -> list[Recording]:
    """All FSDD takes, sorted by (speaker, digit, index); cached per folder (``verify`` checks every call).

    Args:
        root: the data folder holding ``fsdd/`` (or the ``fsdd`` folder itself); default
            :func:`ebms.data.paths.data_root`.
        verify: check every file's md5 against ``fsdd/recordings.tsv``.

    Raises:
        FileNotFoundError: the folder is missing (the message names ``$EBMS_DATA``).
        ebms.errors.DataError: a checksum mismatch, a file listed in ``recordings.tsv`` that is
            missing, a malformed ``recordings.tsv`` line, or a wav file that is not 8 kHz PCM (see
            :func:`ebms.data.audio.read_wav`; every message names the file).
    """
    folder = _fsdd_dir(root)
    key = str(folder.resolve())
    if verify:
        table = folder / "recordings.tsv"
        if not table.is_file():
            raise FileNotFoundError(f"verify: no {str(table)!r} to check the md5 sums against")
        for number, line in enumerate(table.read_text().splitlines()[1:], start=2):
            parts = line.split("\t")
            if len(parts) != 3:
                raise DataError(f"verify: {str(table)!r} line {number}: expected 3 tab-separated fields "
                                f"(path, size, md5); got {len(parts)}")
            rel, _, md5 = parts
            path = folder / Path(rel).relative_to("fsdd") if rel.startswith("fsdd/") else folder / rel
            if not path.is_file():
                raise DataError(f"verify: {str(path)!r} is listed in recordings.tsv but missing")
            file_size(path, MAX_WAV_BYTES, "load_fsdd")
            digest = hashlib.md5()
            with open(path, "rb") as f:
                while block := f.read(BLOCK):
                    digest.update(block)
            if digest.hexdigest() != md5:
                raise DataError(f"verify: md5 of {str(path)!r} is {digest.hexdigest()}; recordings.tsv says {md5}")
    if key in _RECORDINGS:
        return _RECORDINGS[key]
    out = []
    for path in sorted((folder / "recordings").glob("*.wav")):
        m = _NAME.match(path.name)
        if m is None:
            continue
        wav, rate = read_wav(path)
        if rate != SAMPLE_RATE:
            raise DataError(f"root: {str(path)!r} is sampled at {rate} Hz; FSDD is {SAMPLE_RATE} Hz")
        out.append(Recording(int(m.group(1)), m.group(2), int(m.group(3)), wav))
    if not out:
        raise FileNotFoundError(f"root: no FSDD wav files in {str(folder / 'recordings')!r}")
    out.sort(key=lambda r: (r.speaker, r.digit, r.index))
    _RECORDINGS[key] = out
    return out


def _utterances(pool: dict[tuple[str, int], list[Recording]], speakers: Sequence[str], n: int, max_digits: int,
                gap_ms: tuple[float, float], rng: np.random.Generator, n_mels: int,
                waves: list[Tensor] | None = None) -> tuple[list[Tensor], list[list[int]], list[str]]:
    feats, labels, who = [], [], []
    for _ in range(n):
        spk = speakers[int(rng.integers(len(speakers)))]
        digits = rng.integers(0, 10, size=int(rng.integers(1, max_digits + 1))).tolist()
        pieces = []
        for d in [*digits, None]:
            gap = int(rng.uniform(*gap_ms) * SAMPLE_RATE / 1000)
            pieces.append(torch.from_numpy(rng.normal(0.0, 0.002, size=gap).astype(np.float32)))
            if d is not None:
                takes = pool[(spk, d)]
                w = takes[int(rng.integers(len(takes)))].waveform
                pieces.append(w * (0.1 / w.pow(2).mean().sqrt().clamp_min(1e-6)))
        wave = torch.cat(pieces)
        feats.append(log_mel(wave, SAMPLE_RATE, n_mels=n_mels))
        if waves is not None:
            waves.append(wave)
        labels.append([d + 1 for d in digits])
        who.append(spk)
    return feats, labels, who


def _pad(feats: list[Tensor], labels: list[list[int]], who: list[str], stats: CMVNStats,
         waves: list[Tensor] | None) -> DigitUtterances:
    lengths = torch.tensor([f.shape[0] for f in feats], dtype=torch.long)
    x = torch.nn.utils.rnn.pad_sequence(feats, batch_first=True)
    tl = torch.tensor([len(y) for y in labels], dtype=torch.long)
    y = torch.zeros(len(labels), int(tl.max()), dtype=torch.long)
    for i, seq in enumerate(labels):
        y[i, :len(seq)] = torch.tensor(seq)
    return DigitUtterances(cmvn(x, lengths, stats=stats), lengths, y, tl, who, waves)


def connected_digits(recordings: Sequence[Recording] | None = None, *, n_train: int = 1000, n_test: int = 300,
                     max_digits: int = 7, seed: int = 0, test_speakers: Sequence[str] = ("theo",),
                     train_indices: tuple[int, int] = (5, 49), gap_ms: tuple[float, float] = (50.0, 250.0),
                     n_mels: int = 40, root: str | Path | None = None, stats: CMVNStats | None = None,
                     keep_waves: bool = False) -> ConnectedDigits:
    """The connected-digit task (module docstring); cached in memory per argument set.

    Args:
        recordings: FSDD takes (default :func:`load_fsdd` ``(root)``).
        n_train, n_test: utterance counts (``>= 1``).
        max_digits: longest digit string (lengths uniform on ``1..max_digits``).
        seed: the one seed of every random draw.
        test_speakers: held-out speakers (non-empty, not all of the speakers present).
        train_indices: inclusive range of take indices used for training utterances.
        gap_ms: silence range (ms) before, between and after digits.
        n_mels: filterbank channels.
        stats: the CMVN statistics to apply (a trained run's stored ones, ``(n_mels,)`` each); default: fitted on
            the training utterances.
        keep_waves: keep each utterance's waveform (:attr:`DigitUtterances.waves`).
    """
    check_int(n_train, "n_train", minimum=1)
    check_int(n_test, "n_test", minimum=1)
    check_int(max_digits, "max_digits", minimum=1)
    check_int(seed, "seed", minimum=0)
    check_int(n_mels, "n_mels", minimum=1)
    if not 0 <= gap_ms[0] <= gap_ms[1]:
        raise ValueError(f"gap_ms: expected 0 <= low <= high; got {tuple(gap_ms)}")
    held = tuple(sorted(set(test_speakers)))
    if stats is not None and (stats.mean.shape != (n_mels,) or stats.std.shape != (n_mels,)):
        raise ValueError(f"stats: expected CMVN statistics of {n_mels} dims (n_mels); got mean "
                         f"{tuple(stats.mean.shape)}, std {tuple(stats.std.shape)}")
    key = (None if recordings is not None else str(_fsdd_dir(root).resolve()), n_train, n_test, max_digits, seed, held,
           tuple(train_indices), tuple(gap_ms), n_mels, bool(keep_waves))
    cached = _TASKS.get(key) if recordings is None else None
    if cached is not None and (stats is None or (torch.equal(stats.mean, cached.stats.mean)
                                                 and torch.equal(stats.std, cached.stats.std))):
        return cached
    recs = list(load_fsdd(root) if recordings is None else recordings)
    present = sorted({r.speaker for r in recs})
    unknown = [s for s in held if s not in present]
    if not held or unknown or len(held) == len(present):
        raise ValueError(f"test_speakers: expected a non-empty proper subset of {present}; got {list(test_speakers)}")
    lo, hi = train_indices
    pool: dict[tuple[str, int], list[Recording]] = {}
    for r in recs:
        if r.speaker in held or lo <= r.index <= hi:
            pool.setdefault((r.speaker, r.digit), []).append(r)
    train_spk = [s for s in present if s not in held]
    for spk in [*train_spk, *held]:
        missing = [d for d in range(10) if (spk, d) not in pool]
        if missing:
            raise ValueError(f"recordings: speaker {spk!r} has no usable take of digit(s) {missing}")
    # one stream per split: the test utterances do not depend on n_train (and vice versa)
    train_seed, test_seed = np.random.SeedSequence(seed).spawn(2)
    tr_waves: list[Tensor] | None = [] if keep_waves else None
    te_waves: list[Tensor] | None = [] if keep_waves else None
    tr = _utterances(pool, train_spk, n_train, max_digits, gap_ms, np.random.default_rng(train_seed), n_mels, tr_waves)
    te = _utterances(pool, list(held), n_test, max_digits, gap_ms, np.random.default_rng(test_seed), n_mels, te_waves)
    fitted = stats is None
    if stats is None:
        lengths = torch.tensor([f.shape[0] for f in tr[0]], dtype=torch.long)
        stats = CMVNStats.fit(torch.nn.utils.rnn.pad_sequence(tr[0], batch_first=True), lengths)
    task = ConnectedDigits(_pad(*tr, stats, tr_waves), _pad(*te, stats, te_waves), stats, held)
    if recordings is None and fitted:  # the cache holds fitted statistics only: given ones match them or are not kept
        _TASKS[key] = task
    return task

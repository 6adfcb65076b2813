"""N-best lists: the :class:`NBest` container and its two file forms.

An n-best list holds, for each utterance, the ``K`` best hypotheses of a first-pass recogniser
with their scores. :class:`NBest` keeps all ``N`` hypotheses of ``U`` utterances flat, in
utterance order then rank, so that rescoring works on whole ``(N,)`` tensors at once.

**Scores are log-likelihoods** (natural log, higher is better): ``acoustic`` is
``log p(audio | words)`` and ``lm`` the first-pass ``log p(words)``. Kaldi files hold *costs*,
``cost = -log-likelihood``; the Kaldi reader and writer negate at the file boundary.

Kaldi form (what ``nbest-to-linear`` writes once the word ids are mapped back by ``int2sym.pl``),
a folder with three files keyed ``<utt>-<n>``, the hypothesis ``n >= 1`` of utterance ``<utt>``
(the key is split at its **last** ``-``, so utterance ids may contain ``-``)::

    text      utt1-1 the cat sat          words separated by spaces; an empty hypothesis is the key alone
    ac_cost   utt1-1 1234.5               acoustic cost, -log p(audio | words)
    lm_cost   utt1-1 17.25                graph/LM cost, -log p(words)

TSV form, one hypothesis a line, tab-separated, an optional header line equal to :data:`TSV_HEADER`::

    utt_id  rank  acoustic_score  lm_score  hypothesis      (scores are log-likelihoods)

References: ``utt word word ...`` a line (Kaldi's ``text``; the key alone is an empty transcript).

Every reader skips blank lines, keeps utterances in order of first appearance, sorts each
utterance's hypotheses by rank, and raises :class:`~ebms.errors.DataError` with a one-line
message ``<file>:<line>: expected ...; got ...`` for malformed input (duplicate keys, bad ranks,
scores that are not finite numbers, keys of a score file missing from ``text`` or the reverse).
Writers print floats with ``repr`` so that reading back gives the same numbers bit for bit.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import torch
from torch import Tensor

from ebms._checks import check_finite
from ebms.errors import DataError

__all__ = ["NBest", "TSV_HEADER", "read_kaldi_nbest", "read_nbest_tsv", "read_references", "write_kaldi_nbest",
           "write_nbest_tsv", "write_references"]

PathLike = str | os.PathLike[str]
#: the header line of the TSV form (optional when reading, always written).
TSV_HEADER = "utt_id\trank\tacoustic_score\tlm_score\thypothesis"


class NBest:
    """The n-best lists of ``U`` utterances, ``N`` hypotheses in all, flat.

    Args:
        utt_ids: ``U`` distinct utterance ids (non-empty, no whitespace).
        hypotheses: ``N`` word sequences.
        utterance: ``(N,)`` int64 index into ``utt_ids``, non-decreasing, every utterance present.
        rank: ``(N,)`` int64 ranks ``>= 1``, strictly increasing within an utterance.
        acoustic: ``(N,)`` float64 acoustic log-likelihoods (finite).
        lm: ``(N,)`` float64 first-pass LM log-likelihoods (finite); ``None`` means zeros.

    Example:
        >>> nb = NBest.from_lists(["u1"], [[["a", "b"], ["a"]]], acoustic=[[-1.0, -2.0]])
        >>> len(nb), nb.num_utterances, nb.sizes().tolist(), nb.word_counts().tolist()
        (2, 1, [2], [2, 1])
    """

    __slots__ = ("acoustic", "hypotheses", "lm", "rank", "utt_ids", "utterance")

    def __init__(self, utt_ids: Sequence[str], hypotheses: Sequence[Sequence[str]], utterance: Tensor,
                 rank: Tensor, acoustic: Tensor, lm: Tensor | None = None) -> None:
        self.utt_ids: tuple[str, ...] = tuple(utt_ids)
        self.hypotheses: tuple[tuple[str, ...], ...] = tuple(tuple(h) for h in hypotheses)
        n = len(self.hypotheses)
        self.utterance = _long(utterance, "utterance", n)
        self.rank = _long(rank, "rank", n)
        self.acoustic = _float(acoustic, "acoustic", n)
        self.lm = torch.zeros(n, dtype=torch.float64) if lm is None else _float(lm, "lm", n)
        self._validate()

    def _validate(self) -> None:
        u = len(self.utt_ids)
        for k, uid in enumerate(self.utt_ids):
            if not isinstance(uid, str) or not uid or len(uid.split()) != 1 or uid != uid.strip():
                raise ValueError(f"utt_ids: expected non-empty ids without whitespace; got {uid!r} at {k}")
        if len(set(self.utt_ids)) != u:
            raise ValueError("utt_ids: expected distinct ids; got a repeated id")
        for k, h in enumerate(self.hypotheses):
            if not all(isinstance(w, str) and w and len(w.split()) == 1 and w == w.strip() for w in h):
                raise ValueError(f"hypotheses: expected words without whitespace; got {list(h)!r} at {k}")
        if u == 0 or not self.hypotheses:
            raise ValueError(f"utt_ids, hypotheses: expected at least one of each; got {u} and {len(self.hypotheses)}")
        idx = self.utterance
        if int(idx.min()) != 0 or int(idx.max()) != u - 1 or bool((idx.diff() < 0).any()) \
                or bool((idx.diff() > 1).any()):
            raise ValueError(f"utterance: expected non-decreasing indices covering 0..{u - 1} with no gap; "
                             f"got {idx.tolist()[:20]}")
        same = idx[1:] == idx[:-1]
        if int(self.rank.min()) < 1 or bool((same & (self.rank.diff() <= 0)).any()):
            raise ValueError("rank: expected ranks >= 1, strictly increasing within each utterance; "
                             f"got {self.rank.tolist()[:20]}")

    @classmethod
    def from_lists(cls, utt_ids: Sequence[str], hypotheses: Sequence[Sequence[Sequence[str]]], *,
                   acoustic: Sequence[Sequence[float]], lm: Sequence[Sequence[float]] | None = None) -> NBest:
        """Nested per-utterance lists (ranks ``1..K`` in the given order)."""
        if len(hypotheses) != len(utt_ids) or len(acoustic) != len(utt_ids) or (
                lm is not None and len(lm) != len(utt_ids)):
            raise ValueError(f"hypotheses, acoustic, lm: expected one list per utterance ({len(utt_ids)}); got "
                             f"{len(hypotheses)}, {len(acoustic)}, {None if lm is None else len(lm)}")
        utt: list[int] = []
        rank: list[int] = []
        flat: list[Sequence[str]] = []
        ac: list[float] = []
        lms: list[float] = []
        for u, hyps in enumerate(hypotheses):
            if not hyps or len(acoustic[u]) != len(hyps) or (lm is not None and len(lm[u]) != len(hyps)):
                raise ValueError(f"hypotheses[{u}]: expected >= 1 hypotheses with one acoustic (and lm) score each; "
                                 f"got {len(hyps)} hypotheses, {len(acoustic[u])} scores")
            utt += [u] * len(hyps)
            rank += range(1, len(hyps) + 1)
            flat += hyps
            ac += acoustic[u]
            lms += lm[u] if lm is not None else [0.0] * len(hyps)
        return cls(utt_ids, flat, torch.tensor(utt), torch.tensor(rank), torch.tensor(ac, dtype=torch.float64),
                   torch.tensor(lms, dtype=torch.float64))

    # --- views --------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.hypotheses)

    @property
    def num_utterances(self) -> int:
        return len(self.utt_ids)

    def sizes(self) -> Tensor:
        """``(U,)`` int64: the number of hypotheses of each utterance."""
        return torch.bincount(self.utterance, minlength=self.num_utterances)

    def word_counts(self) -> Tensor:
        """``(N,)`` int64: the number of words of each hypothesis."""
        return torch.tensor([len(h) for h in self.hypotheses], dtype=torch.long)

    def padded(self, values: Tensor, fill: float) -> Tensor:
        """``(U, K_max)``: per-hypothesis ``values (N,)`` laid out by utterance and position, ``fill`` elsewhere."""
        if values.shape != (len(self),):
            raise ValueError(f"values: expected shape ({len(self)},); got {tuple(values.shape)}")
        sizes = self.sizes()
        start = torch.cumsum(sizes, 0) - sizes
        pos = torch.arange(len(self)) - start[self.utterance]
        out = values.new_full((self.num_utterances, int(sizes.max())), fill)
        out[self.utterance, pos] = values
        return out

    def first(self) -> Tensor:
        """``(U,)`` int64: the flat index of each utterance's best-ranked hypothesis."""
        sizes = self.sizes()
        return torch.cumsum(sizes, 0) - sizes

    def subset(self, utt_ids: Sequence[str]) -> NBest:
        """The lists of ``utt_ids`` (in that order)."""
        where = {u: i for i, u in enumerate(self.utt_ids)}
        missing = [u for u in utt_ids if u not in where]
        if missing:
            raise ValueError(f"utt_ids: expected ids of this n-best set; got unknown {missing[:5]}")
        rows = [torch.nonzero(self.utterance == where[u]).flatten() for u in utt_ids]
        sel = torch.cat(rows)
        utt = torch.cat([torch.full((len(r),), i, dtype=torch.long) for i, r in enumerate(rows)])
        return NBest(list(utt_ids), [self.hypotheses[i] for i in sel.tolist()], utt, self.rank[sel],
                     self.acoustic[sel], self.lm[sel])

    def equal(self, other: NBest) -> bool:
        """Same ids, hypotheses, ranks and scores (exactly)."""
        return (self.utt_ids == other.utt_ids and self.hypotheses == other.hypotheses
                and torch.equal(self.utterance, other.utterance) and torch.equal(self.rank, other.rank)
                and torch.equal(self.acoustic, other.acoustic) and torch.equal(self.lm, other.lm))

    def __repr__(self) -> str:
        return f"NBest(utterances={self.num_utterances}, hypotheses={len(self)})"


def _long(x: object, name: str, n: int) -> Tensor:
    if not isinstance(x, Tensor) or x.dtype.is_floating_point or x.dtype == torch.bool:
        raise TypeError(f"{name}: expected an integer tensor; got {type(x).__name__}")
    if x.shape != (n,):
        raise ValueError(f"{name}: expected shape ({n},) (one per hypothesis); got {tuple(x.shape)}")
    return x.long()


def _float(x: object, name: str, n: int) -> Tensor:
    if not isinstance(x, Tensor) or not x.dtype.is_floating_point:
        raise TypeError(f"{name}: expected a floating-point tensor; got {type(x).__name__}")
    if x.shape != (n,):
        raise ValueError(f"{name}: expected shape ({n},) (one per hypothesis); got {tuple(x.shape)}")
    return check_finite(x.double(), name)


# --- reading ------------------------------------------------------------------------------------
def _lines(path: PathLike) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of the non-blank lines, newline stripped.

    Raises:
        DataError: bytes that are not UTF-8, or a NUL character (naming the file and the line).
    """
    with open(path, "rb") as f:
        for no, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as err:
                raise DataError(f"{path}:{no}: not UTF-8 text (byte 0x{raw[err.start]:02x} at column {err.start + 1}: "
                                f"{err.reason}); convert the file to UTF-8") from None
            if "\0" in line:
                raise DataError(f"{path}:{no}: a NUL character at column {line.index(chr(0)) + 1}: not a text file")
            if no == 1:
                line = line.lstrip("\ufeff")
            if line.strip():
                yield no, line


def _key(key: str, where: str) -> tuple[str, int]:
    utt, dash, n = key.rpartition("-")
    if not dash or not utt or not n.isdigit() or int(n) < 1:
        raise DataError(f"{where}: expected a key <utt>-<n> with n >= 1; got {key!r}")
    return utt, int(n)


def _number(text: str, where: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise DataError(f"{where}: expected a number; got {text!r}") from None
    if not math.isfinite(v):
        raise DataError(f"{where}: expected a finite number; got {text!r}")
    return v


def _assemble(rows: dict[tuple[str, int], tuple[tuple[str, ...], float, float]]) -> NBest:
    order: dict[str, int] = {}
    for utt, _ in rows:
        order.setdefault(utt, len(order))
    keys = sorted(rows, key=lambda k: (order[k[0]], k[1]))
    return NBest(list(order), [rows[k][0] for k in keys], torch.tensor([order[k[0]] for k in keys]),
                 torch.tensor([k[1] for k in keys]), torch.tensor([rows[k][1] for k in keys], dtype=torch.float64),
                 torch.tensor([rows[k][2] for k in keys], dtype=torch.float64))


def _read_costs(path: PathLike, keys: Mapping[tuple[str, int], object]) -> dict[tuple[str, int], float]:
    out: dict[tuple[str, int], float] = {}
    for no, line in _lines(path):
        where = f"{path}:{no}"
        fields = line.split()
        if len(fields) != 2:
            raise DataError(f"{where}: expected '<utt>-<n> <cost>'; got {line!r}")
        key = _key(fields[0], where)
        if key in out:
            raise DataError(f"{where}: expected each key once; got {fields[0]!r} again")
        if key not in keys:
            raise DataError(f"{where}: expected a key of the text file; got {fields[0]!r}, which it lacks")
        out[key] = _number(fields[1], where)
    missing = [k for k in keys if k not in out]
    if missing:
        raise DataError(f"{path}: expected a cost for every key of the text file; got none for "
                        f"'{missing[0][0]}-{missing[0][1]}' ({len(missing)} missing)")
    return out


def read_kaldi_nbest(text: PathLike, *, ac_cost: PathLike | None = None, lm_cost: PathLike | None = None) -> NBest:
    """Read Kaldi's n-best ``text`` and, optionally, its ``ac_cost`` and ``lm_cost`` files.

    Costs are negated into log-likelihoods; a missing cost file means zero scores.

    Raises:
        DataError: a malformed line (``file:line`` in the message), a duplicate key, or keys that
            differ between the text and a cost file.
    """
    hyps: dict[tuple[str, int], tuple[str, ...]] = {}
    for no, line in _lines(text):
        fields = line.split()
        key = _key(fields[0], f"{text}:{no}")
        if key in hyps:
            raise DataError(f"{text}:{no}: expected each key once; got {fields[0]!r} again")
        hyps[key] = tuple(fields[1:])
    if not hyps:
        raise DataError(f"{text}: expected at least one hypothesis line; got an empty file")
    ac = _read_costs(ac_cost, hyps) if ac_cost is not None else dict.fromkeys(hyps, 0.0)
    lm = _read_costs(lm_cost, hyps) if lm_cost is not None else dict.fromkeys(hyps, 0.0)
    return _assemble({k: (h, -ac[k] + 0.0, -lm[k] + 0.0) for k, h in hyps.items()})


def read_nbest_tsv(path: PathLike) -> NBest:
    """Read the TSV form (module docstring); scores are log-likelihoods.

    Raises:
        DataError: a line without five tab-separated fields, a bad rank or score, or a repeated
            ``(utt_id, rank)``; the message names ``file:line``.
    """
    rows: dict[tuple[str, int], tuple[tuple[str, ...], float, float]] = {}
    for no, line in _lines(path):
        where = f"{path}:{no}"
        if line == TSV_HEADER and not rows:
            continue
        fields = line.split("\t")
        if len(fields) != 5:
            raise DataError(f"{where}: expected 5 tab-separated fields (utt_id, rank, acoustic_score, lm_score, "
                            f"hypothesis); got {len(fields)} in {line!r}")
        utt, rank = fields[0].strip(), fields[1].strip()
        if not utt or len(utt.split()) != 1:
            raise DataError(f"{where}: expected an utterance id without spaces; got {fields[0]!r}")
        if not rank.isdigit() or int(rank) < 1:
            raise DataError(f"{where}: expected a rank >= 1; got {fields[1]!r}")
        if (utt, int(rank)) in rows:
            raise DataError(f"{where}: expected each (utt_id, rank) once; got ({utt!r}, {int(rank)}) again")
        rows[utt, int(rank)] = (tuple(fields[4].split()), _number(fields[2], where), _number(fields[3], where))
    if not rows:
        raise DataError(f"{path}: expected at least one hypothesis line; got none")
    return _assemble(rows)


def read_references(path: PathLike) -> dict[str, list[str]]:
    """Read ``utt word word ...`` lines into ``{utt: words}`` (insertion order kept).

    Raises:
        DataError: an utterance id given twice (``file:line`` in the message).
    """
    refs: dict[str, list[str]] = {}
    for no, line in _lines(path):
        fields = line.split()
        if fields[0] in refs:
            raise DataError(f"{path}:{no}: expected each utterance once; got {fields[0]!r} again")
        refs[fields[0]] = fields[1:]
    return refs


# --- writing ------------------------------------------------------------------------------------
def _keys(nbest: NBest) -> list[str]:
    return [f"{nbest.utt_ids[u]}-{r}" for u, r in zip(nbest.utterance.tolist(), nbest.rank.tolist())]


def _write(path: Path, lines: Iterator[str] | list[str]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(line + "\n" for line in lines)


def write_kaldi_nbest(nbest: NBest, folder: PathLike) -> dict[str, Path]:
    """Write ``text``, ``ac_cost`` and ``lm_cost`` (costs = -log-likelihoods) into ``folder``.

    Returns:
        ``{"text": path, "ac_cost": path, "lm_cost": path}``.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    keys = _keys(nbest)
    paths = {name: folder / name for name in ("text", "ac_cost", "lm_cost")}
    _write(paths["text"], [" ".join((k, *h)) for k, h in zip(keys, nbest.hypotheses)])
    _write(paths["ac_cost"], [f"{k} {-v + 0.0!r}" for k, v in zip(keys, nbest.acoustic.tolist())])
    _write(paths["lm_cost"], [f"{k} {-v + 0.0!r}" for k, v in zip(keys, nbest.lm.tolist())])
    return paths


def write_nbest_tsv(nbest: NBest, path: PathLike) -> Path:
    """Write the TSV form with its header line; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = zip(nbest.utterance.tolist(), nbest.rank.tolist(), nbest.acoustic.tolist(), nbest.lm.tolist(),
               nbest.hypotheses)
    _write(path, [TSV_HEADER] + [f"{nbest.utt_ids[u]}\t{r}\t{a!r}\t{m!r}\t{' '.join(h)}" for u, r, a, m, h in rows])
    return path


def write_references(references: Mapping[str, Sequence[str]], path: PathLike) -> Path:
    """Write ``utt word word ...`` lines; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _write(path, [" ".join((u, *w)) for u, w in references.items()])
    return path


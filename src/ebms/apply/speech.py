"""Transcripts of waveforms by a trained CTC or CTC-CRF acoustic model (``ebms decode``).

:class:`SpeechDecoder` applies a connected-digit run (:mod:`ebms.data.fsdd`) to new audio through the
pipeline its training and ``ebms eval`` used:

1. a waveform ``(N,)`` in ``[-1, 1]`` at another rate than the run's is resampled to it
   (:func:`resample`: windowed-sinc band-limited interpolation);
2. ``log_mel(wave, sample_rate, n_mels=F)`` (:func:`ebms.data.audio.log_mel`, its default window,
   hop, band and pre-emphasis, as :func:`ebms.data.fsdd.connected_digits` calls it), ``F`` the
   model's input dims;
3. global CMVN with the statistics the run stored (fitted on its training utterances when it was
   trained, kept in its ``data.json``: never fitted again on the input);
4. the acoustic model on batches of ``batch_size`` utterances in input order, each batch cut to its
   own longest utterance, decoded by best path or, for a CTC-CRF, with its denominator n-gram:
   :func:`ebms.metrics.ctc_eval.ctc_transcripts`, the call ``ebms eval`` makes (same batches,
   same transcripts).

Labels ``1..10`` are the digits ``0..9`` (``0`` is the CTC blank), written as the words of
:data:`DIGIT_WORDS`. :meth:`SpeechDecoder.score` counts label errors against reference transcripts
with :func:`ebms.metrics.error_rate.error_rate`, the figure ``ebms eval`` writes to ``eval.json``
(``ler`` for best path, ``ler_lm`` for the n-gram decoder).

Cost: resampling is one strided convolution, ``O(N up (2 zeros / min(up, down) + 1))`` multiply-adds for
``N`` input samples, ``up / down`` the ratio of the rates in lowest terms (:func:`resample`); then the front end and the model as in
:mod:`ebms.metrics.ctc_eval`. Waveforms are featurised one batch at a time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ebms._checks import check_int
from ebms._progress import progress_bar
from ebms.data.audio import CMVNStats, cmvn, log_mel, read_wav
from ebms.errors import CheckpointError, DataError
from ebms.metrics.ctc_eval import ctc_transcripts
from ebms.metrics.error_rate import ErrorRate, error_rate
from ebms.structured.den_graph import DenominatorGraph
from ebms.structured.ngram import LabelNGram

__all__ = ["DECODERS", "DIGIT_WORDS", "MAX_RESAMPLE_TAPS", "SpeechDecoder", "Transcripts", "applied_info", "cmvn_record",
           "den_graph", "read_audio", "resample", "stored_cmvn", "stored_transcripts"]

#: the word of label ``k + 1`` (label 0 is the blank).
DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
#: each decoder and the ``eval.json`` figure that scores it.
DECODERS = {"best-path": "ler", "ngram": "ler_lm"}
#: the largest filter :func:`resample` builds (phases x taps), 4 Mi coefficients (32 MiB in float64).
MAX_RESAMPLE_TAPS = 1 << 22


def resample(wave: Tensor, orig_rate: int, new_rate: int, *, zeros: int = 16, rolloff: float = 0.945) -> Tensor:
    """``wave (N,)`` sampled at ``orig_rate`` Hz, resampled to ``new_rate`` Hz: ``(ceil(N new / orig),)`` float32.

    Band-limited interpolation (Smith, "Digital Audio Resampling", ccrma.stanford.edu/~jos/resample):
    with ``up / down = new_rate / orig_rate`` in lowest terms and the cut-off ``fc = rolloff min(up, down) / 2``
    (cycles per ``down`` input samples), output sample ``k`` is
    ``sum_n x[n] (2 fc / down) sinc(2 fc (n - k down / up) / down) w(.)`` over the ``zeros`` zero crossings of the
    sinc on each side, ``w`` a Hann window over them; samples outside ``x`` are 0. Output phase ``k mod up``
    uses one filter, so the whole signal is one strided convolution with ``up`` filters. Equal rates return
    ``wave`` unchanged. ``rolloff < 1`` keeps the transition band below the lower Nyquist frequency.

    Raises:
        ValueError: ``wave`` not a non-empty 1-D floating tensor, a rate below 1, or a ratio whose filter
            would exceed :data:`MAX_RESAMPLE_TAPS` coefficients (resample it with an audio tool first).
    """
    if not isinstance(wave, Tensor) or wave.dim() != 1 or wave.numel() == 0 or not wave.is_floating_point():
        got = f"shape {tuple(wave.shape)} {wave.dtype}" if isinstance(wave, Tensor) else type(wave).__name__
        raise ValueError(f"wave: expected a non-empty 1-D floating tensor (N,); got {got}")
    check_int(orig_rate, "orig_rate", minimum=1)
    check_int(new_rate, "new_rate", minimum=1)
    g = math.gcd(orig_rate, new_rate)
    up, down = new_rate // g, orig_rate // g
    if up == down:
        return wave
    cut = rolloff * min(up, down)  # 2 fc, in cycles per `down` input samples
    width = math.ceil(zeros * down / cut)  # input samples each side of the output point
    taps = 2 * width + down
    if up * taps > MAX_RESAMPLE_TAPS:
        raise ValueError(f"rate: resampling {orig_rate} Hz to {new_rate} Hz ({up}/{down} in lowest terms) needs a "
                         f"filter of {up * taps} coefficients (at most {MAX_RESAMPLE_TAPS}); resample the audio to "
                         f"{new_rate} Hz with an audio tool first")
    offsets = torch.arange(-width, width + down, dtype=torch.float64) / down  # (taps,) input offsets / down
    phases = torch.arange(up, dtype=torch.float64)[:, None] / up  # (up, 1) output position in the block
    t = ((offsets[None, :] - phases) * cut).clamp(-zeros, zeros)  # (up, taps), in zero crossings of the sinc
    window = torch.cos(t * (math.pi / (2 * zeros))) ** 2
    kernel = torch.special.sinc(t) * window * (cut / down)
    x = torch.nn.functional.pad(wave.to(torch.float64)[None, None], (width, width + down))
    y = torch.nn.functional.conv1d(x, kernel[:, None, :], stride=down)  # (1, up, blocks)
    n_out = -(-wave.numel() * up // down)
    return y[0].transpose(0, 1).reshape(-1)[:n_out].to(torch.float32)


def read_audio(path: str | Path, what: str = "WAV") -> tuple[Tensor, int]:
    """``(wave (N,) float32 in [-1, 1], sample_rate)`` of a PCM wav file (:func:`ebms.data.audio.read_wav`: 8-, 16-,
    24- or 32-bit, channels averaged to mono).

    Raises:
        DataError: the file is missing, a folder, not a PCM wav file, or holds no samples (one line naming
            ``what`` and the file).
    """
    p = Path(path)
    if not p.is_file():
        raise DataError(f"{what}: {str(path)!r} {'is a folder, not a wav file' if p.is_dir() else 'not found'}")
    try:
        wave, rate = read_wav(p)
    except DataError as e:  # LimitExceeded stays one
        raise type(e)(f"{what}: {str(e).removeprefix('path: ')}") from None
    if wave.numel() == 0:
        raise DataError(f"{what}: {str(path)!r} holds no samples (an empty recording)")
    return wave, rate


def cmvn_record(stats: CMVNStats, sample_rate: int, transcripts: Sequence[Sequence[int]] | None = None
                ) -> dict[str, Any]:
    """What a run's ``data.json`` keeps of its front end: ``{"sample_rate": ..., "cmvn": {"mean": [...], "std":
    [...]}}`` (float32 values written exactly: JSON holds their float64 value), and with ``transcripts`` (a CTC-CRF
    run's training transcripts, label lists) ``"transcripts"``: what :func:`den_graph` rebuilds its denominator
    graph from (:func:`applied_info`)."""
    kept = {} if transcripts is None else {"transcripts": [[int(k) for k in t] for t in transcripts]}
    return {"sample_rate": int(sample_rate),
            "cmvn": {"mean": stats.mean.to(torch.float32).tolist(), "std": stats.std.to(torch.float32).tolist()}, **kept}


def stored_cmvn(record: Mapping[str, Any], name: str) -> CMVNStats:
    """The CMVN statistics ``(F,)`` float32 of a run file's :func:`cmvn_record` (the same bits as when written).

    Raises:
        CheckpointError: they are not two equal-length lists of finite numbers, standard deviations positive.
    """
    value = record.get("cmvn")
    parts = [value.get(k) for k in ("mean", "std")] if isinstance(value, dict) else [None, None]
    ok = all(isinstance(v, list) and v and all(isinstance(a, (int, float)) and math.isfinite(a) for a in v)
             for v in parts)
    if not ok or len(parts[0]) != len(parts[1]) or min(parts[1]) <= 0:  # type: ignore[arg-type]
        raise CheckpointError(f"{name}: expected 'cmvn' with lists 'mean' and 'std' of one finite number per feature "
                              f"(std > 0); train the run again (--overwrite)")
    return CMVNStats(torch.tensor(parts[0], dtype=torch.float32), torch.tensor(parts[1], dtype=torch.float32))


def den_graph(transcripts: Sequence[Sequence[int]], n_classes: int, order: int) -> DenominatorGraph:
    """A CTC-CRF run's denominator graph: the label n-gram of ``order`` fitted on its training ``transcripts``
    (labels ``1 .. n_classes - 1``; :meth:`~ebms.structured.ngram.LabelNGram.fit`) composed with the CTC topology
    (:meth:`~ebms.structured.den_graph.DenominatorGraph.from_ngram`). A function of the transcripts alone: the same
    lists give the same graph, bit for bit.

    Raises:
        ValueError: what the n-gram fit refuses (labels out of range, a bad ``order``).
    """
    return DenominatorGraph.from_ngram(LabelNGram.fit([list(t) for t in transcripts], n_classes, order))


def stored_transcripts(record: Mapping[str, Any], name: str, n_classes: int) -> list[list[int]]:
    """The training transcripts of a run file's :func:`cmvn_record` (``"transcripts"``).

    Raises:
        CheckpointError: not a list of label lists with labels in ``1 .. n_classes - 1``.
    """
    value = record.get("transcripts")
    ok = isinstance(value, list) and all(
        isinstance(t, list) and all(type(k) is int and 1 <= k < n_classes for k in t) for t in value)
    if not ok:
        raise CheckpointError(f"{name}: expected 'transcripts', lists of labels 1..{n_classes - 1}; train the run "
                              f"again (--overwrite)")
    return value  # type: ignore[return-value]


def applied_info(record: Mapping[str, Any], name: str, *, lm_order: int | None) -> dict[str, Any] | None:
    """What :class:`SpeechDecoder` and the run's acoustic model need, from its ``data.json`` record alone (no
    recording read): ``{"n_features", "n_classes", "sample_rate", "cmvn", "den_graph"}``, the denominator graph
    rebuilt from the stored transcripts (:func:`den_graph` of ``lm_order``; ``lm_order = None``: a CTC run, no
    graph). ``None`` for a file written before it kept them (no ``cmvn``, or a CTC-CRF run without
    ``transcripts``): the run's data must be loaded.

    Raises:
        CheckpointError: a malformed record (:func:`stored_cmvn`, :func:`stored_transcripts`, ``n_classes`` or
            ``sample_rate`` not an integer of at least 2 / 1).
    """
    if "cmvn" not in record or (lm_order is not None and "transcripts" not in record):
        return None
    stats, n_classes, rate = stored_cmvn(record, name), record.get("n_classes"), record.get("sample_rate")
    if type(n_classes) is not int or n_classes < 2 or type(rate) is not int or rate < 1:
        raise CheckpointError(f"{name}: expected integers 'n_classes' (>= 2) and 'sample_rate' (>= 1); got "
                              f"{n_classes!r} and {rate!r}: train the run again (--overwrite)")
    graph = None if lm_order is None else den_graph(stored_transcripts(record, name, n_classes), n_classes, lm_order)
    return {"n_features": int(stats.mean.shape[0]), "n_classes": n_classes, "sample_rate": rate, "cmvn": stats,
            "den_graph": graph}


@dataclass(frozen=True)
class Transcripts:
    """What :class:`SpeechDecoder` returns for ``N`` waveforms.

    Attributes:
        labels: ``N`` label lists (``1..V-1``; the blank ``0`` never appears).
        words: ``N`` transcripts, each label as its word (:data:`DIGIT_WORDS`), space-separated.
        decoder: ``"best-path"`` or ``"ngram"`` (:data:`DECODERS`).
    """

    labels: list[list[int]]
    words: list[str]
    decoder: str


class SpeechDecoder:
    """A trained acoustic model applied to waveforms (module docstring).

    Args:
        model: ``model(features (B, T, F), lengths (B,)) -> (log_probs (T', B, V), out_lengths (B,))``, e.g.
            :class:`ebms.nets.acoustic.ConvBiLSTM`; ``V - 1`` labels beside the blank, at most ``len(words)``.
        stats: the run's stored CMVN statistics, ``(F,)`` each.
        sample_rate: the rate of the run's training audio (Hz); other rates are resampled to it.
        den_graph: a CTC-CRF's denominator n-gram (enables the ``"ngram"`` decoder, then the default).
        batch_size: utterances per forward (the same batches as ``ebms eval`` give the same numbers).
        progress: show a progress bar while decoding.
        words: the word of label ``k + 1``.
    """

    def __init__(self, model: nn.Module, stats: CMVNStats, *, sample_rate: int, den_graph: DenominatorGraph | None = None,
                 batch_size: int = 64, progress: bool = True, words: Sequence[str] = DIGIT_WORDS) -> None:
        self.model, self.stats, self.den_graph = model, stats, den_graph
        self.sample_rate = check_int(sample_rate, "sample_rate", minimum=1)
        self.batch_size = check_int(batch_size, "batch_size", minimum=1)
        self.progress, self.words = bool(progress), tuple(words)
        self.index = {w: k + 1 for k, w in enumerate(self.words)}

    @property
    def decoders(self) -> tuple[str, ...]:
        """The decoders this run offers, the default first: ``("ngram", "best-path")`` for a CTC-CRF."""
        return ("ngram", "best-path") if self.den_graph is not None else ("best-path",)

    def features(self, waves: Sequence[Tensor], sample_rate: int, *, rms: float | None = None) -> tuple[Tensor, Tensor]:
        """``(features (N, T, F) float32, lengths (N,) long)`` of waveforms ``(N_i,)``: resampled, log-mel, the
        stored CMVN, zero past ``lengths`` (module docstring). ``rms``: scale each waveform to this root-mean-square
        level first (training scaled every spoken digit to 0.1); ``None`` (default): as given."""
        if rms is not None and not (isinstance(rms, (int, float)) and math.isfinite(rms) and rms > 0):
            raise ValueError(f"rms: expected a positive level or None; got {rms!r}")
        feats = []
        for i, w in enumerate(waves):
            if not isinstance(w, Tensor) or w.dim() != 1 or w.numel() == 0 or not w.is_floating_point():
                got = f"shape {tuple(w.shape)} {w.dtype}" if isinstance(w, Tensor) else type(w).__name__
                raise ValueError(f"waves[{i}]: expected a non-empty 1-D floating tensor (N,); got {got}")
            w = resample(w, sample_rate, self.sample_rate)
            if rms is not None:
                w = w * (rms / w.pow(2).mean().sqrt().clamp_min(1e-6))
            feats.append(log_mel(w, self.sample_rate, n_mels=int(self.stats.mean.shape[0])))
        lengths = torch.tensor([f.shape[0] for f in feats], dtype=torch.long)
        x = torch.nn.utils.rnn.pad_sequence(feats, batch_first=True)
        return cmvn(x, lengths, stats=self.stats), lengths

    def __call__(self, waves: Sequence[Tensor], sample_rate: int, *, decoder: str | None = None,
                 batch_size: int | None = None, rms: float | None = None) -> Transcripts:
        """The transcripts of ``waves`` (``N`` 1-D float tensors in ``[-1, 1]`` at ``sample_rate`` Hz).

        Args:
            decoder: one of :attr:`decoders` (default its first).
            batch_size: utterances per forward (default the constructor's).
            rms: as :meth:`features`.

        Raises:
            ValueError: an empty list, a wave that is not a non-empty 1-D floating tensor, an unknown decoder, a
                bad batch size, or a rate :func:`resample` refuses.
        """
        decoder = self.decoders[0] if decoder is None else decoder
        if decoder not in self.decoders:
            raise ValueError(f"decoder: expected one of {', '.join(self.decoders)} for this run; got {decoder!r}"
                             + ("" if self.den_graph is not None else " (ngram needs a CTC-CRF run)"))
        size = check_int(self.batch_size if batch_size is None else batch_size, "batch_size", minimum=1)
        if not len(waves):
            raise ValueError("waves: expected at least one waveform; got none")
        check_int(sample_rate, "sample_rate", minimum=1)
        graph = self.den_graph if decoder == "ngram" else None
        labels: list[list[int]] = []
        with progress_bar(total=len(waves), desc="decode", unit="utt", enabled=self.progress, leave=False) as bar:
            for i in range(0, len(waves), size):
                x, lengths = self.features(waves[i:i + size], sample_rate, rms=rms)
                greedy, with_lm = ctc_transcripts(self.model, x, lengths, den_graph=graph, batch_size=size)
                labels += with_lm if with_lm is not None else greedy
                bar.update(int(lengths.shape[0]))
        return Transcripts(labels, [self.text(y) for y in labels], decoder)

    def decode_audio(self, audio: Sequence[tuple[Tensor, int]], names: Sequence[str], *, decoder: str | None = None,
                     batch_size: int | None = None, rms: float | None = None) -> Transcripts:
        """:meth:`__call__` on recordings at any rates: ``(wave (N_i,), sample_rate)`` pairs (:func:`read_audio`),
        each resampled to the run's rate first; ``names`` name them in errors.

        Raises:
            DataError: a rate :func:`resample` refuses (naming the file and the rate the run needs).
        """
        waves = []
        for (wave, rate), name in zip(audio, names, strict=True):
            try:
                waves.append(resample(wave, rate, self.sample_rate))
            except ValueError as e:
                raise DataError(f"WAV: {name!r} is sampled at {rate} Hz; the run needs {self.sample_rate} Hz and "
                                f"{str(e).removeprefix('rate: ')}") from None
        return self(waves, self.sample_rate, decoder=decoder, batch_size=batch_size, rms=rms)

    def text(self, labels: Sequence[int]) -> str:
        """Labels as space-separated words (a label beyond :attr:`words` as ``<k>``)."""
        return " ".join(self.words[k - 1] if 1 <= k <= len(self.words) else f"<{k}>" for k in labels)

    def parse(self, text: str) -> list[int]:
        """The labels of a transcript: words of :attr:`words` (any case) or digits (``"3 1 4"``, ``"314"``).

        Raises:
            ValueError: a token that is neither (the message names it and the words).
        """
        out = []
        for token in text.split():
            if token.lower() in self.index:
                out.append(self.index[token.lower()])
            elif token.isascii() and token.isdigit() and self.words == DIGIT_WORDS:
                out += [int(c) + 1 for c in token]
            else:
                raise ValueError(f"unknown label {token!r}; expected the words {' '.join(self.words)}"
                                 + (" or digits" if self.words == DIGIT_WORDS else ""))
        return out

    def references(self, lines: Sequence[str], names: Sequence[str], what: str) -> list[list[int]]:
        """The reference labels of each of ``names`` from the lines ``FILE<TAB>TRANSCRIPT`` of the file ``what``:
        the line whose FILE is the name as given, else the one whose FILE has the same base name (if only one
        does). Lines of other files are ignored; blank lines are skipped.

        Raises:
            DataError: a line without a tab, a repeated FILE, a transcript :meth:`parse` refuses, or a name with
                no line (each one line naming ``what`` and the line or the name).
        """
        table: dict[str, list[int]] = {}
        by_base: dict[str, list[str]] = {}
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            key, tab, text = line.partition("\t")
            if not tab or not key.strip():
                raise DataError(f"{what} line {number}: expected FILE<TAB>TRANSCRIPT; got {line[:80]!r}")
            key = key.strip()
            if key in table:
                raise DataError(f"{what} line {number}: a second transcript of {key!r}")
            try:
                table[key] = self.parse(text)
            except ValueError as e:
                raise DataError(f"{what} line {number}: {e}") from None
            by_base.setdefault(Path(key).name, []).append(key)
        out = []
        for name in names:
            keys = [name] if name in table else by_base.get(Path(name).name, [])
            if len(keys) != 1:
                why = f"several lines name {Path(name).name!r}" if keys else "no line names it"
                raise DataError(f"{what}: no transcript of {name!r} ({why}); add a line {name}<TAB>TRANSCRIPT")
            out.append(table[keys[0]])
        return out

    def score(self, refs: Sequence[Sequence[int]], result: Transcripts) -> ErrorRate:
        """Label errors of ``result`` against ``refs`` (one label list per transcript), summed over them.

        Raises:
            ValueError: not one reference per transcript, or no reference label at all.
        """
        return error_rate(refs, result.labels)

    @staticmethod
    def summary(er: ErrorRate, decoder: str) -> str:
        """One line of the figure ``ebms eval`` writes for ``decoder`` (:data:`DECODERS`) and its counts."""
        return (f"{DECODERS[decoder]} {er.percent:.4g}% ({decoder} label error rate: {er.substitutions} substitutions, "
                f"{er.deletions} deletions, {er.insertions} insertions in {er.ref_length} reference labels; "
                f"{er.sentence_errors} of {er.sentences} utterances wrong)")

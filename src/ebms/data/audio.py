"""Speech front end: wav reading, log-mel filterbank features and mean/variance normalisation.

Pipeline (the usual ASR front end, e.g. Young et al., 2006, "The HTK Book", ch. 5):

1. ``read_wav``: PCM samples scaled to ``[-1, 1]`` (the RIFF header checked against the file).
2. Optional pre-emphasis ``x'_n = x_n - a x_{n-1}``.
3. Frames of ``win = round(win_ms * sr / 1000)`` samples every ``hop = round(hop_ms * sr / 1000)``
   samples, Hann window, FFT of ``n_fft`` = the next power of two ``>= win`` (``torch.stft``,
   ``center=False``): ``T = 1 + (N - win) // hop`` frames for ``N >= win`` samples (a shorter
   signal is zero-padded to one frame).
4. Power spectrum ``|X_t(k)|^2``, times the triangular mel filterbank ``M`` (``n_mels`` rows),
   then ``log(max(., floor))``.
5. ``cmvn``: per-utterance or global (:class:`CMVNStats` fitted on training data) mean and
   variance normalisation per feature dimension.

Mel scale (HTK): ``mel(f) = 2595 log10(1 + f / 700)``. Filter ``m`` is a triangle on the linear
frequency axis with corners at ``f_{m-1}, f_m, f_{m+1}``, where ``f_0..f_{M+1}`` are equally
spaced on the mel scale from ``fmin`` to ``fmax``; it rises from 0 at ``f_{m-1}`` to 1 at the
centre ``f_m`` and falls back to 0 at ``f_{m+1}``.

Cost: ``O(T n_fft log n_fft + T n_fft M)`` per utterance.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ebms._checks import check_finite, check_int, check_positive, check_tensor
from ebms.data._limits import check_max_bytes, file_size
from ebms.errors import DataError

__all__ = ["MAX_WAV_BYTES", "CMVNStats", "cmvn", "frame_count", "hz_to_mel", "log_mel", "mel_centres", "mel_filterbank",
           "mel_to_hz", "read_wav"]


#: Default ``max_bytes`` of :func:`read_wav`: the largest wav file read, 512 MiB (about 4.6 hours
#: of 16 kHz 16-bit mono); raise it with ``max_bytes=``.
MAX_WAV_BYTES = 512 << 20
_PCM, _EXTENSIBLE = 0x0001, 0xFFFE
_PCM_GUID_TAIL = bytes.fromhex("000000001000800000aa00389b71")  # KSDATAFORMAT_SUBTYPE_PCM after its id


@dataclass(frozen=True)
class _WavHeader:
    channels: int
    rate: int
    width: int  # bytes per sample
    offset: int  # first byte of the samples
    size: int  # bytes of samples the data chunk claims


def _wav_header(p: Path, size: int) -> _WavHeader:
    """Walk the RIFF chunks of ``p`` (``size`` bytes): the fmt fields and the data chunk's place."""
    bad = f"path: {str(p)!r} is not a PCM wav file"
    with open(p, "rb") as f:
        head = f.read(12)
        if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
            raise DataError(f"{bad} (no RIFF/WAVE header; {size} bytes)")
        fmt: bytes | None = None
        pos = 12
        while pos + 8 <= size:
            f.seek(pos)
            cid, n = f.read(4), int.from_bytes(f.read(4), "little")
            if cid == b"fmt ":
                if not 16 <= n <= 4096:
                    raise DataError(f"{bad} (fmt chunk of {n} bytes; expected 16 to 40)")
                fmt = f.read(n)
                if len(fmt) < n:
                    raise DataError(f"{bad} (the file ends inside the fmt chunk)")
            elif cid == b"data":
                if fmt is None:
                    raise DataError(f"{bad} (data chunk before the fmt chunk)")
                return _check_fmt(p, fmt, pos + 8, n, size)
            pos += 8 + n + (n & 1)  # chunks are padded to an even length
    raise DataError(f"{bad} (no {'data' if fmt is not None else 'fmt'} chunk in {size} bytes)")


def _check_fmt(p: Path, fmt: bytes, offset: int, claimed: int, size: int) -> _WavHeader:
    """Check the fmt fields and that the data chunk fits in the file."""
    name = f"path: {str(p)!r}"
    tag, channels, rate = (int.from_bytes(fmt[i:j], "little") for i, j in ((0, 2), (2, 4), (4, 8)))
    align, bits = int.from_bytes(fmt[12:14], "little"), int.from_bytes(fmt[14:16], "little")
    if tag == _EXTENSIBLE and len(fmt) >= 40 and fmt[26:40] == _PCM_GUID_TAIL:
        tag = int.from_bytes(fmt[24:26], "little")
    if tag != _PCM:
        raise DataError(f"{name} is not a PCM wav file (format tag 0x{tag:04X}; expected 0x0001, integer PCM)")
    if channels < 1:
        raise DataError(f"{name}: header says {channels} channels; expected at least 1")
    if rate < 1:
        raise DataError(f"{name}: header says a sample rate of {rate} Hz; expected a positive rate")
    if bits not in (8, 16, 24, 32):
        raise DataError(f"{name} has {bits}-bit samples; expected 8, 16, 24 or 32-bit PCM")
    width = bits // 8
    if align != channels * width:
        raise DataError(f"{name}: header says {align} bytes per frame; {channels} channel(s) of {bits}-bit "
                        f"samples take {channels * width}")
    have = size - offset
    if claimed > have:
        raise DataError(f"{name}: header claims {claimed} bytes of samples ({claimed // align} frames); the "
                        f"file holds {max(have, 0)} (truncated, or a damaged header)")
    if claimed % align:
        raise DataError(f"{name}: {claimed} bytes of samples is not a whole number of {align}-byte frames")
    return _WavHeader(channels, rate, width, offset, claimed)


def read_wav(path: str | Path, *, max_bytes: int = MAX_WAV_BYTES) -> tuple[Tensor, int]:
    """Read a PCM wav file: ``(waveform float32 (N,) in [-1, 1], sample_rate)``.

    8-bit (unsigned), 16-, 24- and 32-bit (signed) PCM are read (``WAVE_FORMAT_EXTENSIBLE`` with
    the PCM sub-format too); integer samples are divided by ``2^(bits - 1)``. Multi-channel files
    are averaged to mono (the channels' mean).

    The RIFF header is checked against the file before any sample is read: a positive sample
    rate, at least one channel, a supported bit depth, a frame size that agrees with them, and a
    data chunk that fits in the file (a short file whose header claims GBs is an error, never a
    silently short waveform).

    Args:
        path: the file.
        max_bytes: the largest file read (default :data:`MAX_WAV_BYTES`, 512 MiB).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ebms.errors.LimitExceeded: the file is larger than ``max_bytes``.
        ebms.errors.DataError: not a PCM wav file, or a header that disagrees with the file (the
            message names ``path``).
    """
    check_max_bytes(max_bytes)
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"path: no wav file at {str(p)!r}")
    h = _wav_header(p, file_size(p, max_bytes, "read_wav"))
    with open(p, "rb") as f:
        f.seek(h.offset)
        raw = f.read(h.size)
    if len(raw) != h.size:  # the file changed under us
        raise DataError(f"path: {str(p)!r}: expected {h.size} bytes of samples; read {len(raw)}")
    if h.width == 1:
        x = (np.frombuffer(raw, dtype=np.uint8).astype(np.float32) - 128.0) / 128.0
    elif h.width == 2:
        x = np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0
    elif h.width == 3:
        b = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        x = (np.where(v >= 1 << 23, v - (1 << 24), v)).astype(np.float32) / float(1 << 23)
    else:
        x = (np.frombuffer(raw, dtype="<i4").astype(np.float64) / float(1 << 31)).astype(np.float32)
    x = x.reshape(-1, h.channels).mean(axis=1) if h.channels > 1 else x
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)), h.rate


def hz_to_mel(f: Tensor | float) -> Tensor:
    """HTK mel scale ``2595 log10(1 + f / 700)``."""
    return 2595.0 * torch.log10(1.0 + torch.as_tensor(f, dtype=torch.float64) / 700.0)


def mel_to_hz(m: Tensor | float) -> Tensor:
    """Inverse of :func:`hz_to_mel`: ``700 (10^(m / 2595) - 1)``."""
    return 700.0 * (10.0 ** (torch.as_tensor(m, dtype=torch.float64) / 2595.0) - 1.0)


def _check_band(sample_rate: int, n_mels: int, fmin: float, fmax: float | None) -> float:
    check_int(sample_rate, "sample_rate", minimum=1)
    check_int(n_mels, "n_mels", minimum=1)
    check_positive(fmin, "fmin", allow_zero=True)
    top = sample_rate / 2.0 if fmax is None else check_positive(fmax, "fmax")
    if not fmin < top <= sample_rate / 2.0:
        raise ValueError(f"fmax: expected fmin < fmax <= sample_rate / 2 = {sample_rate / 2.0}; "
                         f"got fmin={fmin}, fmax={top}")
    return top


def mel_centres(n_mels: int, sample_rate: int, fmin: float = 0.0, fmax: float | None = None) -> Tensor:
    """The ``n_mels + 2`` corner frequencies (Hz, float64) ``f_0..f_{M+1}``; the centres are ``[1:-1]``."""
    top = _check_band(sample_rate, n_mels, fmin, fmax)
    return mel_to_hz(torch.linspace(float(hz_to_mel(fmin)), float(hz_to_mel(top)), n_mels + 2, dtype=torch.float64))


def mel_filterbank(n_fft: int, sample_rate: int, n_mels: int, fmin: float = 0.0,
                   fmax: float | None = None) -> Tensor:
    """Triangular HTK-mel filters ``(n_mels, n_fft // 2 + 1)`` float32 over the rfft bins.

    Row ``m`` is ``max(0, min((f - f_{m-1}) / (f_m - f_{m-1}), (f_{m+1} - f) / (f_{m+1} - f_m)))``
    at the bin frequencies ``f = k sr / n_fft`` (see the module docstring). No area
    normalisation: every triangle peaks at 1 on its centre.
    """
    check_int(n_fft, "n_fft", minimum=2)
    edges = mel_centres(n_mels, sample_rate, fmin, fmax)
    freqs = torch.arange(n_fft // 2 + 1, dtype=torch.float64) * (sample_rate / n_fft)
    lo, mid, hi = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    rise = (freqs - lo) / (mid - lo)
    fall = (hi - freqs) / (hi - mid)
    return torch.clamp(torch.minimum(rise, fall), min=0.0).to(torch.float32)


def _frame_sizes(sample_rate: int, win_ms: float, hop_ms: float) -> tuple[int, int, int]:
    check_int(sample_rate, "sample_rate", minimum=1)
    win = round(check_positive(win_ms, "win_ms") * sample_rate / 1000.0)
    hop = round(check_positive(hop_ms, "hop_ms") * sample_rate / 1000.0)
    if win < 2 or hop < 1:
        raise ValueError(f"win_ms: expected a window of at least 2 samples and a hop of at least 1 at "
                         f"{sample_rate} Hz; got win_ms={win_ms} ({win} samples), hop_ms={hop_ms} ({hop})")
    return win, hop, 1 << (win - 1).bit_length()


def frame_count(n_samples: int, sample_rate: int, *, win_ms: float = 25.0, hop_ms: float = 10.0) -> int:
    """Frames :func:`log_mel` returns for ``n_samples`` samples: ``1 + (max(N, win) - win) // hop``."""
    check_int(n_samples, "n_samples", minimum=1)
    win, hop, _ = _frame_sizes(sample_rate, win_ms, hop_ms)
    return 1 + (max(n_samples, win) - win) // hop


def log_mel(waveform: Tensor, sample_rate: int, *, n_mels: int = 40, win_ms: float = 25.0,
            hop_ms: float = 10.0, fmin: float = 20.0, fmax: float | None = None,
            preemphasis: float = 0.97, floor: float = 1e-10) -> Tensor:
    """Log mel filterbank energies ``(T, n_mels)`` float32 of a mono waveform ``(N,)``.

    ``T = frame_count(N, sample_rate, win_ms=..., hop_ms=...)``; see the module docstring for
    each step. ``preemphasis`` in ``[0, 1)`` (0 switches it off); ``floor > 0`` bounds the log.
    """
    check_tensor(waveform, "waveform", floating=True)
    if waveform.dim() != 1 or waveform.numel() == 0:
        raise ValueError(f"waveform: expected a non-empty 1-D tensor (N,); got shape {tuple(waveform.shape)}")
    check_finite(waveform, "waveform")
    if not 0.0 <= float(preemphasis) < 1.0:
        raise ValueError(f"preemphasis: expected a number in [0, 1); got {preemphasis!r}")
    check_positive(floor, "floor")
    win, hop, n_fft = _frame_sizes(sample_rate, win_ms, hop_ms)
    x = waveform.to(torch.float32)
    if preemphasis > 0:
        x = torch.cat([x[:1], x[1:] - preemphasis * x[:-1]])
    if x.numel() < win:
        x = torch.nn.functional.pad(x, (0, win - x.numel()))
    # torch.stft centres the win-sample window in an n_fft frame: pad so that frame t's window
    # covers samples [t hop, t hop + win) and there are 1 + (N - win) // hop frames
    side = (n_fft - win) // 2
    x = torch.nn.functional.pad(x, (side, n_fft - win - side))
    spec = torch.stft(x, n_fft=n_fft, hop_length=hop, win_length=win, window=torch.hann_window(win),
                      center=False, return_complex=True)  # (n_fft // 2 + 1, T)
    power = spec.real.square() + spec.imag.square()
    fb = mel_filterbank(n_fft, sample_rate, n_mels, fmin, fmax)
    return torch.log(torch.clamp(fb @ power, min=floor)).transpose(0, 1).contiguous()


def _frame_mask(features: Tensor, lengths: Tensor | None) -> Tensor:
    """``(B, T, 1)`` float mask of the valid frames of ``features (B, T, F)``."""
    b, t, _ = features.shape
    if lengths is None:
        return features.new_ones(b, t, 1)
    check_tensor(lengths, "lengths")
    if lengths.shape != (b,) or lengths.dtype.is_floating_point:
        raise ValueError(f"lengths: expected an integer tensor of shape ({b},); got {lengths.dtype} {tuple(lengths.shape)}")
    if b and (int(lengths.min()) < 1 or int(lengths.max()) > t):
        raise ValueError(f"lengths: expected values in [1, {t}] (T = features.shape[1]); got "
                         f"min {int(lengths.min())}, max {int(lengths.max())}")
    return (torch.arange(t, device=features.device) < lengths[:, None].to(features.device)).unsqueeze(-1).to(features.dtype)


def _as_batch(features: Tensor) -> tuple[Tensor, bool]:
    check_tensor(features, "features", floating=True)
    if features.dim() not in (2, 3) or features.shape[-1] == 0:
        raise ValueError(f"features: expected (T, F) or (B, T, F) with F >= 1; got shape {tuple(features.shape)}")
    check_finite(features, "features")
    return (features.unsqueeze(0), True) if features.dim() == 2 else (features, False)


@dataclass(frozen=True)
class CMVNStats:
    """Global per-dimension mean and standard deviation ``(F,)`` over the valid training frames."""

    mean: Tensor
    std: Tensor

    @classmethod
    def fit(cls, features: Tensor, lengths: Tensor | None = None, *, eps: float = 1e-5) -> CMVNStats:
        """Pooled statistics of ``features`` ``(T, F)`` or ``(B, T, F)`` over frames ``< lengths``;
        ``std = sqrt(max(var, eps^2))``."""
        x, _ = _as_batch(features)
        mask = _frame_mask(x, lengths)
        n = mask.sum()
        mean = (x * mask).sum((0, 1)) / n
        var = (((x - mean) ** 2) * mask).sum((0, 1)) / n
        return cls(mean, var.clamp_min(eps * eps).sqrt())


def cmvn(features: Tensor, lengths: Tensor | None = None, *, stats: CMVNStats | None = None,
         eps: float = 1e-5) -> Tensor:
    """Mean and variance normalisation ``(x - mu) / sigma`` per feature dimension.

    Args:
        features: ``(T, F)`` or padded ``(B, T, F)``.
        lengths: ``(B,)`` valid frames per utterance (all frames when ``None``).
        stats: global :class:`CMVNStats` (fitted on training data); ``None`` normalises each
            utterance by its own mean and standard deviation over its valid frames.
        eps: floor of the standard deviation.

    Returns:
        Same shape as ``features``; padded frames are set to 0.
    """
    x, single = _as_batch(features)
    mask = _frame_mask(x, lengths)
    if stats is None:
        n = mask.sum(1, keepdim=True)
        mean = (x * mask).sum(1, keepdim=True) / n
        var = (((x - mean) ** 2) * mask).sum(1, keepdim=True) / n
        std = var.clamp_min(eps * eps).sqrt()
    else:
        if stats.mean.shape != (x.shape[-1],):
            raise ValueError(f"stats: expected statistics of {x.shape[-1]} feature dims; got {tuple(stats.mean.shape)}")
        mean, std = stats.mean.to(x), stats.std.to(x)
    out = (x - mean) / std * mask
    return out[0] if single else out

"""Tests for ebms.data.audio: wav reading, mel filterbank, log-mel features, CMVN."""

from __future__ import annotations

import math
import re
import wave

import numpy as np
import pytest
import torch
from _peak_memory import peak_mb

from ebms.data.audio import (
    CMVNStats,
    cmvn,
    frame_count,
    hz_to_mel,
    log_mel,
    mel_centres,
    mel_filterbank,
    mel_to_hz,
    read_wav,
)
from ebms.errors import DataError


def _write(path, samples: np.ndarray, width: int, rate: int = 8000, channels: int = 1) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(samples.tobytes())


# --- read_wav --------------------------------------------------------------------------------


def test_read_wav_round_trips_16_bit_samples(tmp_path):
    ints = np.array([0, 1, -1, 32767, -32768, 1000, -2000], dtype="<i2")
    _write(tmp_path / "a.wav", ints, 2, rate=16000)
    x, rate = read_wav(tmp_path / "a.wav")
    assert rate == 16000 and x.dtype == torch.float32
    assert torch.equal(x, torch.from_numpy(ints.astype(np.float32) / 32768.0))
    assert float(x.abs().max()) <= 1.0


def test_read_wav_scales_8_and_32_bit_and_averages_stereo(tmp_path):
    _write(tmp_path / "u8.wav", np.array([128, 0, 255], dtype=np.uint8), 1)
    x, _ = read_wav(tmp_path / "u8.wav")
    assert x.tolist() == [0.0, -1.0, 127 / 128]
    _write(tmp_path / "i32.wav", np.array([1 << 30, -(1 << 31)], dtype="<i4"), 4)
    x, _ = read_wav(tmp_path / "i32.wav")
    assert x.tolist() == [0.5, -1.0]
    stereo = np.array([100, 300, -200, 0], dtype="<i2")  # frames (100, 300), (-200, 0)
    _write(tmp_path / "st.wav", stereo, 2, channels=2)
    x, _ = read_wav(tmp_path / "st.wav")
    assert torch.allclose(x, torch.tensor([200.0, -100.0]) / 32768.0)


def test_read_wav_errors_name_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="path: no wav file"):
        read_wav(tmp_path / "missing.wav")
    (tmp_path / "bad.wav").write_bytes(b"not a wav file at all")
    with pytest.raises(DataError, match="path: .*bad.wav.* is not a PCM wav file"):
        read_wav(tmp_path / "bad.wav")


def _riff(fmt: bytes, data_size: int, data: bytes, *, extra: bytes = b"") -> bytes:
    """A RIFF/WAVE file: ``fmt`` chunk, optional ``extra`` chunks, a data chunk claiming ``data_size``."""
    body = b"WAVE" + b"fmt " + len(fmt).to_bytes(4, "little") + fmt + extra
    body += b"data" + data_size.to_bytes(4, "little") + data
    return b"RIFF" + (len(body)).to_bytes(4, "little") + body


def _fmt(tag=1, channels=1, rate=8000, bits=16, align=None) -> bytes:
    align = channels * bits // 8 if align is None else align
    return b"".join(v.to_bytes(n, "little") for v, n in
                    ((tag, 2), (channels, 2), (rate, 4), (rate * align, 4), (align, 2), (bits, 2)))


def test_read_wav_agrees_with_the_wave_module_and_skips_unknown_chunks(tmp_path):
    ints = np.array([5, -7, 32767, -32768], dtype="<i2")
    _write(tmp_path / "w.wav", ints, 2, rate=11025)
    with wave.open(str(tmp_path / "w.wav")) as w:  # the independent reader
        ref = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2") / 32768.0
    x, rate = read_wav(tmp_path / "w.wav")
    assert rate == 11025 and np.array_equal(x.numpy(), ref.astype(np.float32))
    # a LIST chunk (odd length, padded) between fmt and data, as many recorders write
    (tmp_path / "l.wav").write_bytes(_riff(_fmt(), 8, ints.tobytes(), extra=b"LIST" + (3).to_bytes(4, "little")
                                           + b"abc\x00"))
    assert np.array_equal(read_wav(tmp_path / "l.wav")[0].numpy(), ref.astype(np.float32))




@pytest.mark.parametrize(
    "blob, match",
    [
        (_riff(_fmt(), 2_000_000_000, b"\x00\x01" * 10),
         r"header claims 2000000000 bytes of samples \(1000000000 frames\); the file holds 20"),
        (_riff(_fmt(rate=0), 4, b"\x00" * 4), r"header says a sample rate of 0 Hz; expected a positive rate"),
        (_riff(_fmt(channels=0, align=0), 4, b"\x00" * 4), r"header says 0 channels"),
        (_riff(_fmt(bits=12, align=2), 4, b"\x00" * 4), r"has 12-bit samples; expected 8, 16, 24 or 32-bit PCM"),
        (_riff(_fmt(align=3), 6, b"\x00" * 6), r"header says 3 bytes per frame; 1 channel\(s\) of 16-bit samples take 2"),
        (_riff(_fmt(tag=3, bits=32), 4, b"\x00" * 4), r"is not a PCM wav file \(format tag 0x0003"),
        (_riff(_fmt(), 3, b"\x00" * 3), r"3 bytes of samples is not a whole number of 2-byte frames"),
        (_riff(_fmt(), 4, b"\x00" * 4)[:30], r"is not a PCM wav file \(the file ends inside the fmt chunk\)"),
        (b"RIFF\x00\x00\x00\x00WAVEdata\x04\x00\x00\x00abcd", r"data chunk before the fmt chunk"),
        (b"RIFF\x00\x00\x00\x00WAVE", r"no fmt chunk in 12 bytes"),
    ],
    ids=["claims-2gb", "rate-0", "no-channels", "12-bit", "bad-align", "float", "partial-frame", "cut-fmt",
         "data-first", "empty"],
)
def test_lying_or_damaged_wav_headers_are_data_errors_naming_the_file(tmp_path, blob, match):
    path = tmp_path / "lie.wav"
    path.write_bytes(blob)
    peak, err = peak_mb(lambda: read_wav(path))
    assert isinstance(err, DataError), err
    assert "lie.wav" in str(err) and re.search(match, str(err)), str(err)
    assert peak < 1, peak  # the header only: nothing is allocated from a claimed size


def test_sparse_wav_above_the_limit_is_refused_before_reading(tmp_path):
    from ebms.errors import LimitExceeded

    path = tmp_path / "huge.wav"
    with open(path, "wb") as f:
        f.truncate(2 << 30)
    with pytest.raises(LimitExceeded, match=r"huge.wav: the file is 2.0 GiB .* pass max_bytes=2147483648 to read_wav"):
        read_wav(path)


# --- mel filterbank ---------------------------------------------------------------------------


def test_mel_scale_round_trips_and_matches_htk_at_1000_hz():
    f = torch.tensor([0.0, 440.0, 1000.0, 3999.0], dtype=torch.float64)
    assert torch.allclose(mel_to_hz(hz_to_mel(f)), f, atol=1e-9)
    assert float(hz_to_mel(700.0)) == pytest.approx(2595 * math.log10(2))


def test_filterbank_triangles_are_nonnegative_and_peak_at_one_on_their_centres():
    n_fft, rate, n_mels = 1 << 14, 8000, 40
    fb = mel_filterbank(n_fft, rate, n_mels, fmin=20.0)
    edges = mel_centres(n_mels, rate, fmin=20.0)
    assert fb.shape == (n_mels, n_fft // 2 + 1)
    assert float(fb.min()) >= 0.0 and float(fb.max()) <= 1.0
    spacing = rate / n_fft
    freqs = torch.arange(n_fft // 2 + 1, dtype=torch.float64) * spacing
    for m in range(n_mels):
        lo, mid, hi = edges[m], edges[m + 1], edges[m + 2]
        # the nearest bin lies within spacing/2 of the centre; a slope of 1/halfwidth bounds the drop
        bound = 1.0 - (spacing / 2) / float(min(mid - lo, hi - mid))
        assert float(fb[m].max()) >= bound - 1e-6
        assert int(fb[m].argmax()) in (math.floor(mid / spacing), math.ceil(mid / spacing))  # bins around it
        outside = (freqs <= lo) | (freqs >= hi)
        assert float(fb[m][outside].abs().max()) == 0.0


def test_filterbank_errors_name_the_argument():
    with pytest.raises(ValueError, match="fmax: expected fmin < fmax <= sample_rate / 2"):
        mel_filterbank(256, 8000, 40, fmax=5000.0)
    with pytest.raises(ValueError, match="n_mels: expected an int >= 1"):
        mel_filterbank(256, 8000, 0)
    with pytest.raises(TypeError, match="n_fft: expected an int"):
        mel_filterbank(256.0, 8000, 40)


# --- log_mel ----------------------------------------------------------------------------------


@pytest.mark.parametrize("band", [5, 17, 30])
def test_sine_peaks_in_the_band_centred_on_its_frequency(band):
    rate, n_mels = 8000, 40
    centre = float(mel_centres(n_mels, rate, fmin=20.0)[band + 1])
    t = torch.arange(8000, dtype=torch.float64) / rate
    x = (0.5 * torch.sin(2 * math.pi * centre * t)).float()
    feats = log_mel(x, rate, n_mels=n_mels, preemphasis=0.0)
    assert int(feats.mean(0).argmax()) == band


@pytest.mark.parametrize("n", [1, 199, 200, 201, 280, 8000, 8123])
def test_frame_count_formula(n):
    win, hop = 200, 80  # 25 ms and 10 ms at 8 kHz
    expected = 1 + (max(n, win) - win) // hop
    assert frame_count(n, 8000) == expected
    assert log_mel(torch.randn(n, generator=torch.Generator().manual_seed(n)), 8000).shape == (expected, 40)


def test_log_mel_bad_input_names_the_argument():
    with pytest.raises(ValueError, match=r"waveform: expected a non-empty 1-D tensor"):
        log_mel(torch.zeros(2, 100), 8000)
    with pytest.raises(TypeError, match="waveform: expected a floating-point tensor"):
        log_mel(torch.zeros(100, dtype=torch.long), 8000)
    with pytest.raises(ValueError, match="waveform: expected a finite tensor"):
        log_mel(torch.tensor([0.0, float("nan")] * 200), 8000)
    with pytest.raises(ValueError, match=r"preemphasis: expected a number in \[0, 1\)"):
        log_mel(torch.zeros(400), 8000, preemphasis=1.0)
    with pytest.raises(ValueError, match="win_ms: expected a finite number > 0"):
        log_mel(torch.zeros(400), 8000, win_ms=0)


# --- CMVN -------------------------------------------------------------------------------------


def test_per_utterance_cmvn_gives_zero_mean_unit_variance_on_valid_frames():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 50, 4, generator=g, dtype=torch.float64) * 3 + 7
    lengths = torch.tensor([50, 20, 1])
    y = cmvn(x, lengths)
    for i, n in enumerate(lengths.tolist()):
        v = y[i, :n]
        assert torch.allclose(v.mean(0), torch.zeros(4, dtype=torch.float64), atol=1e-12)
        if n > 1:
            assert torch.allclose(v.var(0, unbiased=False), torch.ones(4, dtype=torch.float64), atol=1e-9)
        assert float(y[i, n:].abs().sum()) == 0.0


def test_global_cmvn_stats_normalise_the_pooled_training_frames():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 30, 5, generator=g, dtype=torch.float64) * 2 - 1
    lengths = torch.tensor([30, 10, 25, 3])
    stats = CMVNStats.fit(x, lengths)
    y = cmvn(x, lengths, stats=stats)
    valid = torch.cat([y[i, :n] for i, n in enumerate(lengths.tolist())])
    assert torch.allclose(valid.mean(0), torch.zeros(5, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(valid.var(0, unbiased=False), torch.ones(5, dtype=torch.float64), atol=1e-9)
    single = cmvn(x[0], stats=stats)  # (T, F) input uses the same statistics
    assert torch.allclose(single, y[0])


def test_cmvn_errors_name_the_argument():
    x = torch.zeros(2, 5, 3)
    with pytest.raises(ValueError, match=r"lengths: expected values in \[1, 5\]"):
        cmvn(x, torch.tensor([6, 2]))
    with pytest.raises(ValueError, match=r"lengths: expected an integer tensor of shape \(2,\)"):
        cmvn(x, torch.tensor([2.0, 2.0]))
    with pytest.raises(ValueError, match="stats: expected statistics of 3 feature dims"):
        cmvn(x, stats=CMVNStats(torch.zeros(4), torch.ones(4)))
    with pytest.raises(ValueError, match=r"features: expected \(T, F\) or \(B, T, F\)"):
        cmvn(torch.zeros(5))


def test_log_mel_equals_direct_framing_and_rfft():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(1000, generator=g)
    win, hop, n_fft = 200, 80, 256
    frames = torch.stack([x[t * hop:t * hop + win] for t in range(1 + (1000 - win) // hop)])
    power = torch.fft.rfft(frames * torch.hann_window(win), n=n_fft).abs().square()
    expected = torch.log((power @ mel_filterbank(n_fft, 8000, 40, fmin=20.0).T).clamp_min(1e-10))
    assert torch.allclose(log_mel(x, 8000, preemphasis=0.0), expected, atol=1e-4)

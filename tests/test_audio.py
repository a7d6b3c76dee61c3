"""Audio features (b2t_lib.data.audio) and word error rate (b2t_lib.metrics)."""

from __future__ import annotations

import io

import jiwer
import numpy as np
import pytest
import soundfile as sf
import torch
import torchaudio

from b2t_lib.data.audio import (
    AudioError,
    extract_features,
    fbank,
    load_waveform,
    num_frames,
    read_audio,
    utterance_cmvn,
)
from b2t_lib.metrics import normalize_words, wer_counts, word_error_rate


def tones(rate: int, seconds: float = 1.0, freqs=(300.0, 700.0, 1500.0, 2500.0)) -> np.ndarray:
    """A chord of sines below 4 kHz (identical content at 8 and 16 kHz), amplitude 0.5."""
    t = np.arange(int(rate * seconds)) / rate
    x = sum(np.sin(2 * np.pi * f * t) for f in freqs) / len(freqs) * 0.5
    x *= np.minimum(1.0, np.minimum(t, t[-1] - t) / 0.05)  # 50 ms fades: no clicks at the ends
    return x.astype(np.float32)


def encode(x: np.ndarray, rate: int, fmt: str, subtype: str | None = None) -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, x, rate, format=fmt, subtype=subtype)
    return buffer.getvalue()


def test_fbank_is_the_kaldi_call_on_16_bit_samples():
    x = torch.from_numpy(tones(16000))
    ours = fbank(x)
    direct = torchaudio.compliance.kaldi.fbank(
        x[None] * 32768, num_mel_bins=80, frame_length=25.0, frame_shift=10.0, dither=0.0, sample_frequency=16000.0
    )
    assert ours.shape == (98, 80) and ours.dtype == torch.float32
    assert torch.equal(ours, direct)
    # Without the 2^15 scaling every log energy would be lower by log(2^30) (power spectrum).
    unscaled = torchaudio.compliance.kaldi.fbank(x[None], num_mel_bins=80, dither=0.0, sample_frequency=16000.0)
    loud = ours.min(dim=0).values > 10  # bins well above Kaldi's energy floor, even unscaled
    assert loud.sum() > 10
    difference = (ours - unscaled)[:, loud]
    assert torch.allclose(difference, torch.full_like(difference, 30 * np.log(2.0)), atol=1e-2)


@pytest.mark.parametrize("n", [0, 399, 400, 401, 559, 560, 16000, 16001])
def test_frame_count_is_kaldis_snip_edges(n):
    assert num_frames(n) == (0 if n < 400 else 1 + (n - 400) // 160)
    assert fbank(torch.zeros(n) + 0.01).shape == (num_frames(n), 80)


def test_8khz_and_16khz_recordings_of_the_same_sound_give_close_features(tmp_path):
    paths = {}
    for rate in (8000, 16000):
        paths[rate] = tmp_path / f"tone{rate}.wav"
        sf.write(paths[rate], tones(rate), rate, subtype="PCM_16")
    wave8, wave16 = load_waveform(paths[8000]), load_waveform(paths[16000])
    assert len(wave8) == len(wave16) == 16000  # resampled to 16 kHz
    f8, f16 = extract_features(paths[8000]), extract_features(paths[16000])
    assert f8.shape == f16.shape == (98, 80)
    # Mel bins below ~3.5 kHz (where both carry the tones) agree closely; a wrong rate would shift
    # every tone to another bin and give differences of many nats.
    low = slice(0, 60)
    assert np.abs(f8[5:-5, low] - f16[5:-5, low]).mean() < 0.05
    loud = f16[5:-5].mean(axis=0) > 10
    assert np.abs(f8[5:-5][:, loud] - f16[5:-5][:, loud]).max() < 0.1
    wrong = fbank(torch.from_numpy(tones(8000)), sample_rate=16000)  # 8 kHz samples said to be 16 kHz
    assert np.abs(wrong.numpy()[5:45, low] - f16[5:45, low]).mean() > 1.0


def test_stereo_is_mixed_down_to_mono(tmp_path):
    x = tones(16000)
    sf.write(tmp_path / "mono.wav", x, 16000, subtype="FLOAT")
    sf.write(tmp_path / "same.wav", np.stack([x, x], axis=1), 16000, subtype="FLOAT")
    sf.write(tmp_path / "left.wav", np.stack([x, np.zeros_like(x)], axis=1), 16000, subtype="FLOAT")
    samples, rate = read_audio(tmp_path / "same.wav")
    assert samples.shape == (16000, 2) and rate == 16000
    mono = load_waveform(tmp_path / "mono.wav")
    assert torch.equal(load_waveform(tmp_path / "same.wav"), mono)
    assert torch.allclose(load_waveform(tmp_path / "left.wav"), mono / 2)


def test_wav_flac_and_ogg_as_paths_or_bytes(tmp_path):
    x = np.round(tones(16000) * 32767) / 32768  # exactly representable in 16 bits
    wav, flac = encode(x, 16000, "WAV", "PCM_16"), encode(x, 16000, "FLAC", "PCM_16")
    ogg = encode(x, 16000, "OGG", "VORBIS")
    (tmp_path / "a.flac").write_bytes(flac)
    reference = load_waveform(wav)
    assert torch.equal(load_waveform(flac), reference)  # FLAC is lossless
    assert torch.equal(load_waveform(tmp_path / "a.flac"), reference)
    assert np.allclose(reference.numpy(), x)
    lossy = extract_features(ogg)  # Vorbis: lossy but the same sound
    assert lossy.shape == (98, 80)
    loud = extract_features(wav).mean(axis=0) > 10
    assert np.abs(lossy[:, loud] - extract_features(wav)[:, loud]).mean() < 0.5


def test_unreadable_or_missing_audio_names_the_file(tmp_path):
    with pytest.raises(AudioError, match="nothere.wav does not exist"):
        load_waveform(tmp_path / "nothere.wav")
    (tmp_path / "bad.wav").write_bytes(b"RIFF but not really audio" * 10)
    with pytest.raises(AudioError, match="cannot read audio file .*bad.wav"):
        load_waveform(tmp_path / "bad.wav")
    with pytest.raises(AudioError, match="utterance 17"):
        read_audio(b"\x00" * 100, name="utterance 17")


def test_utterance_cmvn_gives_zero_mean_unit_variance_per_dimension():
    rng = np.random.default_rng(0)
    features = (rng.normal(3.0, 2.0, (200, 80)) * np.linspace(0.5, 4, 80)).astype(np.float16)
    features[:, 7] = 4.5  # a constant dimension
    x = utterance_cmvn(features)
    assert x.dtype == torch.float32 and x.shape == (200, 80)
    assert torch.allclose(x.mean(dim=0), torch.zeros(80), atol=1e-5)
    var = x.var(dim=0, unbiased=False)
    assert torch.allclose(var[torch.arange(80) != 7], torch.ones(79), atol=1e-4)
    assert torch.all(x[:, 7] == 0)  # no division by zero
    # The same from a tensor, and from a read-only memory-mapped array (what the loader passes).
    assert torch.equal(utterance_cmvn(torch.from_numpy(features)), x)
    readonly = features.copy()
    readonly.flags.writeable = False
    assert torch.equal(utterance_cmvn(readonly), x)
    assert utterance_cmvn(np.zeros((0, 80))).shape == (0, 80)


# ---------------------------------------------------------------------------------------------- WER
def test_wer_values():
    assert word_error_rate(["the cat sat"], ["the cat sat"]) == 0.0
    assert word_error_rate(["the cat sat down"], ["the dog sat down"]) == 25.0  # 1 substitution / 4
    assert word_error_rate(["a b c d"], ["a c d"]) == 25.0  # 1 deletion
    assert word_error_rate(["a b"], ["x a b y z"]) == 150.0  # 3 insertions / 2
    # corpus level: (1 + 2) errors over (4 + 2) words, not the mean of 25% and 100%
    assert word_error_rate(["a b c d", "e f"], ["a b x d", ""]) == 50.0
    counts = wer_counts(["a b c d", "e f"], ["a b x d", "e f g"])
    assert (
        counts["substitutions"],
        counts["deletions"],
        counts["insertions"],
        counts["hits"],
        counts["reference_words"],
    ) == (1, 0, 1, 5, 6)


def test_wer_is_on_lower_cased_words_and_matches_jiwer():
    assert word_error_rate(["HELLO  World"], ["hello world"]) == 0.0
    assert normalize_words("  A  b\tC ") == "a b c"
    refs = ["he hoped there would be stew for dinner", "stuff it into you his belly counselled him"]
    hyps = ["he hoped there would be a stew for dinner", "stuff it in to you his belly counseled him"]
    assert word_error_rate(refs, hyps) == pytest.approx(100 * jiwer.wer(refs, hyps))


def test_wer_rejects_what_it_cannot_score():
    with pytest.raises(ValueError, match="aligned"):
        word_error_rate(["a"], ["a", "b"])
    with pytest.raises(ValueError, match="empty"):
        word_error_rate([], [])
    with pytest.raises(ValueError, match="undefined"):
        word_error_rate(["", " "], ["a", ""])

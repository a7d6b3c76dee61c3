r"""From an audio file to the speech features of fairseq S2T (Wang et al. 2020; docs/methods.md §3.5).

The chain, for one utterance:

1. **read** with ``soundfile`` (WAV, FLAC, OGG, ...; a path or the file's bytes). ``soundfile``
   returns samples :math:`s_t \in [-1, 1]`; no FFmpeg or torchcodec is needed
   (docs/data.md §1f and §4).
2. **mix down** to mono, :math:`s_t = \frac{1}{C}\sum_c s_{t,c}`, and **resample** to
   :math:`f_s = 16` kHz with ``torchaudio.functional.resample`` (band-limited sinc interpolation)
   when the file has another rate.
3. **scale** to the 16-bit range, :math:`x_t = 2^{15} s_t` ("Kaldi compliance: 16-bit signed
   integers", fairseq's ``extract_fbank_features``): Kaldi's energy floor and log offsets assume
   integer-valued samples, so the same audio gives the same numbers as Kaldi itself.
4. **log-mel filter bank**: ``torchaudio.compliance.kaldi.fbank`` with 80 mel bins, 25 ms windows
   (400 samples at 16 kHz) every 10 ms (160 samples), Povey window, pre-emphasis 0.97, dither 0
   (no random noise, so features are reproducible). With Kaldi's ``snip_edges`` an utterance of
   :math:`N` samples gives

   .. math:: T = 1 + \left\lfloor \frac{N - 400}{160} \right\rfloor \quad (N \ge 400), \qquad T = 0 \text{ otherwise}

   frames: 100 frames per second. The result is a ``(T, 80)`` matrix of log energies.
5. **utterance-level CMVN** (when the features are *loaded*, not when stored): every feature
   dimension :math:`j` is shifted and scaled by its own mean and standard deviation over the
   utterance's :math:`T` frames,

   .. math:: \hat x_{t,j} = \frac{x_{t,j} - \mu_j}{\sqrt{\max(\sigma_j^2, 10^{-10})}}, \qquad
             \mu_j = \frac{1}{T}\sum_t x_{t,j}, \quad \sigma_j^2 = \frac{1}{T}\sum_t x_{t,j}^2 - \mu_j^2

   which removes the recording's loudness and channel colouring (fairseq ``UtteranceCMVN``).

Features are stored as float16 (log energies are in roughly [-15, 30], where float16 keeps
about 3 significant digits) and turned back to float32 before CMVN.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import soundfile as sf
import torch
import torchaudio
from ..errors import UserError

SAMPLE_RATE = 16000  # Hz: LibriSpeech's rate; every other rate is resampled to it
NUM_MEL_BINS = 80
FRAME_LENGTH_MS = 25.0
FRAME_SHIFT_MS = 10.0
INT16_SCALE = 2.0**15  # soundfile's [-1, 1] floats -> the 16-bit integer range Kaldi expects
CMVN_VARIANCE_FLOOR = 1e-10


class AudioError(UserError, ValueError):
    """An audio file that cannot be read or used; the message names the file."""


def _name(source: str | Path | bytes, name: str | None) -> str:
    if name is not None:
        return name
    return "<audio bytes>" if isinstance(source, (bytes, bytearray)) else str(source)


def read_audio(source: str | Path | bytes, *, name: str | None = None) -> tuple[np.ndarray, int]:
    """Samples ``(num_samples, channels)`` float32 in [-1, 1] and the sample rate.

    ``source`` is a path or the bytes of an audio file (any format libsndfile reads: WAV, FLAC,
    OGG/Vorbis, ...). ``name`` is what error messages call it (default: the path).
    """
    label = _name(source, name)
    if not isinstance(source, (bytes, bytearray)) and not Path(source).is_file():
        raise AudioError(f"audio file {label} does not exist")
    _check_wav_length(source, label)
    try:
        data, rate = sf.read(
            io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else str(source),
            dtype="float32",
            always_2d=True,
        )
    except (sf.SoundFileError, RuntimeError, ValueError, TypeError) as error:
        raise AudioError(
            f"cannot read audio file {label}: {error} (is it a WAV/FLAC/OGG file that libsndfile supports?)"
        ) from error
    return data, int(rate)


def _wav_data_bytes(f) -> tuple[int, int] | None:
    """``(declared, present)`` bytes of the ``data`` chunk of a RIFF/WAVE file (``None`` for another format)."""
    head = f.read(12)
    if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        return None
    while True:
        chunk = f.read(8)
        if len(chunk) < 8:
            return None
        size = int.from_bytes(chunk[4:8], "little")
        if chunk[:4] == b"data":
            start = f.tell()
            return size, f.seek(0, io.SEEK_END) - start
        f.seek(size + (size & 1), io.SEEK_CUR)  # chunks are padded to an even size


def _check_wav_length(source: str | Path | bytes, label: str) -> None:
    """Refuse a WAV file whose header announces more samples than the file holds (a truncated copy):
    ``soundfile`` would read the part that is there without a word. A streamed WAV whose header gives no
    length (0 or 0xFFFFFFFF) is read as it is."""
    with io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else open(source, "rb") as f:
        sizes = _wav_data_bytes(f)
    if sizes is None or sizes[0] in (0, 0xFFFFFFFF) or sizes[0] <= sizes[1]:
        return
    raise AudioError(
        f"audio file {label} is shorter than its header says: {sizes[1]:,} of {sizes[0]:,} bytes of samples "
        f"(a truncated copy?)",
        todo="copy or convert the file again",
    )


def to_mono_16k(samples: np.ndarray, sample_rate: int, target_rate: int = SAMPLE_RATE) -> torch.Tensor:
    """``(num_samples, channels)`` or ``(num_samples,)`` at any rate -> mono ``(num_samples',)`` at ``target_rate``.

    Channels are averaged; another rate is resampled with ``torchaudio.functional.resample``, which
    gives :math:`\\lceil N \\cdot f_{target} / f_{source} \\rceil` samples.
    """
    waveform = torch.as_tensor(np.asarray(samples, dtype=np.float32))
    if waveform.dim() == 2:
        waveform = waveform.mean(dim=1)  # (num_samples,)
    if sample_rate != target_rate:
        if sample_rate <= 0:
            raise ValueError(f"sample rate must be positive, got {sample_rate}")
        waveform = torchaudio.functional.resample(waveform, sample_rate, target_rate)
    return waveform


def load_waveform(source: str | Path | bytes, *, name: str | None = None) -> torch.Tensor:
    """Read an audio file as mono float32 samples in [-1, 1] at 16 kHz: ``(num_samples,)``."""
    samples, rate = read_audio(source, name=name)
    return to_mono_16k(samples, rate)


def num_frames(num_samples: int, sample_rate: int = SAMPLE_RATE) -> int:
    """Frames that :func:`fbank` gives for ``num_samples`` samples (Kaldi's ``snip_edges``)."""
    window = int(sample_rate * FRAME_LENGTH_MS / 1000)
    shift = int(sample_rate * FRAME_SHIFT_MS / 1000)
    return 0 if num_samples < window else 1 + (num_samples - window) // shift


def fbank(waveform: torch.Tensor, sample_rate: int = SAMPLE_RATE) -> torch.Tensor:
    """80-dim Kaldi log-mel filter bank of a mono waveform in [-1, 1]: ``(frames, 80)`` float32.

    The waveform is scaled by :math:`2^{15}` first (module docstring, step 3). An utterance
    shorter than one 25 ms window gives ``(0, 80)``.
    """
    waveform = torch.as_tensor(waveform, dtype=torch.float32)
    if waveform.dim() != 1:
        raise ValueError(f"fbank needs a mono waveform (num_samples,), got shape {tuple(waveform.shape)}")
    if num_frames(len(waveform), sample_rate) == 0:
        return torch.zeros(0, NUM_MEL_BINS)
    return torchaudio.compliance.kaldi.fbank(
        waveform[None] * INT16_SCALE,
        num_mel_bins=NUM_MEL_BINS,
        frame_length=FRAME_LENGTH_MS,
        frame_shift=FRAME_SHIFT_MS,
        dither=0.0,
        sample_frequency=float(sample_rate),
    )  # (frames, 80)


def extract_features(source: str | Path | bytes, *, name: str | None = None) -> np.ndarray:
    """Read, mix down, resample and compute fbank: ``(frames, 80)`` float32, *without* CMVN."""
    return fbank(load_waveform(source, name=name)).numpy()


def utterance_cmvn(features: np.ndarray | torch.Tensor) -> torch.Tensor:
    """Utterance-level mean and variance normalization (module docstring, step 5).

    ``features`` ``(frames, dims)``, any float dtype -> float32 tensor of the same shape, every
    column with mean 0 and variance 1 (a constant column becomes 0). Statistics are computed in
    float64, so float16 storage loses nothing here.
    """
    if torch.is_tensor(features):
        x = features.to(torch.float64)
    else:  # a new float64 array: also makes a read-only memory map writable for torch
        x = torch.from_numpy(np.array(features, dtype=np.float64))
    if x.dim() != 2:
        raise ValueError(f"features must be (frames, dims), got shape {tuple(x.shape)}")
    if len(x) == 0:
        return x.to(torch.float32)
    mean = x.mean(dim=0)  # (dims,)
    variance = (x * x).mean(dim=0) - mean * mean  # E[x^2] - E[x]^2
    std = torch.sqrt(torch.clamp(variance, min=CMVN_VARIANCE_FLOOR))
    return ((x - mean) / std).to(torch.float32)

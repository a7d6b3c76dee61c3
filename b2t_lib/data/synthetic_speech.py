r"""A synthetic spoken-word corpus for the ``tiny`` scale: real audio files, generated in seconds.

Each utterance says 2-3 words of a 36-word vocabulary (numbers, colours, animals, a few verbs,
directions and answers) following one of a few sentence patterns (``three red dog``, ``go left``,
``yes blue cat``, ...: :data:`PATTERNS`), so, as in real speech, the decoder can learn which words
follow which but must hear which number, colour or animal was said. A word is "pronounced"
letter by letter, each letter a short formant-like sound (a crude source-filter model of speech):

.. math:: s(t) = \sum_k \Big[ G\big(f_k; F_1(t)\big) + G\big(f_k; F_2(t)\big) \Big] \sin(2\pi f_k t + \phi_k),
          \qquad G(f; F) = e^{-(f - F)^2 / (2 b^2)}

* a **voiced** letter (vowels, and b, d, g, l, m, n, r, ...) has harmonics :math:`f_k = k f_0` of
  the speaker's pitch :math:`f_0`; an **unvoiced** one (s, t, k, f, ...) has random frequencies
  :math:`f_k`, which sounds like shaped noise;
* the two formants :math:`F_1(t), F_2(t)` glide linearly over the letter (static for vowels, with
  values close to real English vowels), with bandwidth :math:`b`.

Every utterance gets its own "speaker" and conditions: pitch :math:`f_0 \in [90, 220]` Hz, all
formants scaled by :math:`[0.9, 1.1]` (vocal tract length), speaking rate :math:`[0.85, 1.2]`,
per-letter duration jitter, pauses between words, white noise at 10-30 dB SNR and a random gain.
All energy stays below 3.8 kHz, so a file written at 8 kHz carries the same words as one at
16 kHz. Words that share letters share sounds (``one``/``nine``/``no``), as real words share phones,
so the acoustic model and the SentencePiece pieces have sub-word structure to find.

Everything is deterministic for a seed (each utterance draws from ``default_rng([seed, split,
index])``). :func:`write_synthetic_speech` writes WAV files and the ``.tsv`` files that
``prepare_librispeech.py --from-files`` reads, some at 8 kHz and some in stereo, so the tiny scale
runs the whole real pipeline: soundfile, resampling, mix-down, fbank, CMVN, SentencePiece. With
``n_test_other`` the test set is split like LibriSpeech's into ``test_clean`` and a noisier
``test_other`` (:func:`synthetic_splits`).
"""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import numpy as np
import soundfile as sf

from .speech import prepare_speech_from_files

log = logging.getLogger("b2t_lib.data")

GENERATOR_VERSION = 1  # bump when the sounds change, so generated corpora are rebuilt
# The vocabulary, by word class, and the sentence patterns utterances follow (a tiny grammar).
WORD_CLASSES = {
    "number": "zero one two three four five six seven eight nine".split(),
    "color": "red green blue black white yellow pink brown".split(),
    "animal": "cat dog bird fish horse mouse sheep goat".split(),
    "verb": "go stop find see".split(),
    "direction": "left right up down".split(),
    "answer": "yes no".split(),
}
PATTERNS = (
    ("number", "color", "animal"),
    ("color", "animal"),
    ("number", "animal"),
    ("verb", "direction"),
    ("verb", "number", "animal"),
    ("answer", "color", "animal"),
    ("verb", "direction", "number"),
    ("answer", "number"),
)
WORDS = [word for words in WORD_CLASSES.values() for word in words]
MAX_FREQUENCY = 3800.0  # Hz; below 8 kHz audio's Nyquist frequency (4 kHz)

# letter -> (voiced, (F1 start, F1 end), (F2 start, F2 end), bandwidth Hz, duration ms, level)
VOWEL = dict(voiced=True, bandwidth=90.0, duration=95.0, level=1.0)
LETTERS: dict[str, dict] = {
    "a": dict(VOWEL, f1=(750, 750), f2=(1200, 1200)),
    "e": dict(VOWEL, f1=(500, 500), f2=(1900, 1900)),
    "i": dict(VOWEL, f1=(300, 300), f2=(2300, 2300)),
    "o": dict(VOWEL, f1=(500, 500), f2=(900, 900)),
    "u": dict(VOWEL, f1=(320, 320), f2=(800, 800)),
    "y": dict(VOWEL, f1=(380, 300), f2=(2600, 2200)),
    # voiced consonants: formant glides
    "b": dict(voiced=True, f1=(250, 600), f2=(800, 1200), bandwidth=120.0, duration=55.0, level=0.6),
    "d": dict(voiced=True, f1=(250, 600), f2=(1700, 1450), bandwidth=120.0, duration=55.0, level=0.6),
    "g": dict(voiced=True, f1=(250, 600), f2=(2300, 1800), bandwidth=120.0, duration=55.0, level=0.6),
    "l": dict(voiced=True, f1=(400, 400), f2=(1100, 1500), bandwidth=110.0, duration=65.0, level=0.7),
    "r": dict(voiced=True, f1=(450, 450), f2=(1400, 1000), bandwidth=110.0, duration=65.0, level=0.7),
    "m": dict(voiced=True, f1=(250, 250), f2=(1000, 1000), bandwidth=150.0, duration=65.0, level=0.5),
    "n": dict(voiced=True, f1=(250, 250), f2=(1750, 1750), bandwidth=150.0, duration=65.0, level=0.5),
    "w": dict(voiced=True, f1=(300, 550), f2=(600, 1000), bandwidth=110.0, duration=60.0, level=0.6),
    "j": dict(voiced=True, f1=(300, 300), f2=(2700, 2000), bandwidth=120.0, duration=60.0, level=0.6),
    "v": dict(voiced=True, f1=(300, 300), f2=(1400, 2300), bandwidth=250.0, duration=60.0, level=0.5),
    "z": dict(voiced=True, f1=(250, 250), f2=(3100, 3100), bandwidth=250.0, duration=65.0, level=0.5),
    # unvoiced consonants: shaped noise
    "s": dict(voiced=False, f1=(3000, 3000), f2=(3500, 3500), bandwidth=200.0, duration=75.0, level=0.5),
    "f": dict(voiced=False, f1=(1500, 1500), f2=(3200, 3200), bandwidth=400.0, duration=70.0, level=0.35),
    "h": dict(voiced=False, f1=(900, 900), f2=(1800, 1800), bandwidth=350.0, duration=55.0, level=0.35),
    "t": dict(voiced=False, f1=(2800, 2800), f2=(3400, 3400), bandwidth=250.0, duration=40.0, level=0.6),
    "p": dict(voiced=False, f1=(600, 600), f2=(900, 900), bandwidth=250.0, duration=40.0, level=0.6),
    "k": dict(voiced=False, f1=(1600, 1600), f2=(2200, 2200), bandwidth=250.0, duration=40.0, level=0.6),
    "c": dict(voiced=False, f1=(1900, 1900), f2=(2600, 2600), bandwidth=250.0, duration=45.0, level=0.55),
    "q": dict(voiced=False, f1=(1100, 1100), f2=(1500, 1500), bandwidth=250.0, duration=45.0, level=0.55),
    "x": dict(voiced=False, f1=(2000, 2600), f2=(3000, 3400), bandwidth=250.0, duration=70.0, level=0.5),
}
NOISE_COMPONENTS = 16  # random sinusoids per formant that make an unvoiced letter's noise
GAIN_STEP = 16  # samples per step of the formant glide (1-2 ms)
RAMP_MS = 8.0  # raised-cosine fade in/out of every letter (no clicks)


def _letter(
    spec: dict, *, seconds: float, f0: float, formant_scale: float, rate: int, rng: np.random.Generator
) -> np.ndarray:
    r"""One letter's samples (module docstring formula).

    Only components within :math:`4b` of a formant's path are summed (the others have gain below
    :math:`e^{-8} \approx 3 \cdot 10^{-4}`), which keeps a 2,000-utterance corpus at a few seconds.
    """
    n = max(int(seconds * rate), 1)
    t = np.arange(n) / rate  # (n,)
    top, b = min(MAX_FREQUENCY, 0.45 * rate), spec["bandwidth"]
    ranges = [(formant_scale * min(f) - 4 * b, formant_scale * max(f) + 4 * b) for f in (spec["f1"], spec["f2"])]
    if spec["voiced"]:
        freqs = f0 * np.arange(1, int(top // f0) + 1)  # harmonics k f0
        freqs = freqs[np.any([(freqs > lo) & (freqs < hi) for lo, hi in ranges], axis=0)]
    else:  # noise: random frequencies
        freqs = np.concatenate(
            [
                rng.uniform(max(lo, 50.0), min(hi, top), NOISE_COMPONENTS)
                for lo, hi in ranges
                if min(hi, top) > max(lo, 50.0)
            ]
        )
    phases = rng.uniform(0, 2 * np.pi, len(freqs))
    ramp = np.linspace(0.0, 1.0, -(-n // GAIN_STEP))  # the glide, every GAIN_STEP samples
    f1 = formant_scale * (spec["f1"][0] + (spec["f1"][1] - spec["f1"][0]) * ramp)
    f2 = formant_scale * (spec["f2"][0] + (spec["f2"][1] - spec["f2"][0]) * ramp)
    gain = np.exp(-((freqs[:, None] - f1) ** 2) / (2 * b * b)) + np.exp(-((freqs[:, None] - f2) ** 2) / (2 * b * b))
    gain = np.repeat(gain, GAIN_STEP, axis=1)[:, :n]  # (components, n)
    waves = np.sin(2 * np.pi * freqs[:, None] * t + phases[:, None])  # (components, n)
    x = (gain * waves).sum(axis=0)
    x *= spec["level"] / (np.abs(x).max() + 1e-9)
    fade = min(int(RAMP_MS / 1000 * rate), n // 2)
    if fade > 0:
        window = 0.5 - 0.5 * np.cos(np.pi * np.arange(fade) / fade)
        x[:fade] *= window
        x[n - fade :] *= window[::-1]
    return x


CLEAN_SNR_DB = (10.0, 30.0)  # white noise of every utterance, train/valid/test_clean
OTHER_SNR_DB = (3.0, 13.0)  # test_other: the same speakers and words under more noise


def synthesize(
    words: list[str],
    rng: np.random.Generator,
    sample_rate: int = 16000,
    channels: int = 1,
    snr_db: tuple[float, float] = CLEAN_SNR_DB,
) -> np.ndarray:
    """Audio of ``words`` spoken by a random synthetic speaker: ``(samples,)`` or ``(samples, channels)``
    float32 in [-1, 1], with white noise at an SNR drawn from ``snr_db`` (dB) per channel."""
    f0 = rng.uniform(90.0, 220.0)
    formant_scale = rng.uniform(0.9, 1.1)
    speed = rng.uniform(0.85, 1.2)
    pieces = [np.zeros(int(rng.uniform(0.08, 0.2) * sample_rate))]  # leading silence
    for w, word in enumerate(words):
        if w:
            pieces.append(np.zeros(int(rng.uniform(0.05, 0.12) / speed * sample_rate)))
        for letter in word:
            spec = LETTERS[letter]
            seconds = spec["duration"] / 1000 / speed * rng.uniform(0.85, 1.15)
            pieces.append(
                _letter(
                    spec,
                    seconds=seconds,
                    f0=f0 * rng.uniform(0.97, 1.03),
                    formant_scale=formant_scale,
                    rate=sample_rate,
                    rng=rng,
                )
            )
    pieces.append(np.zeros(int(rng.uniform(0.08, 0.2) * sample_rate)))  # trailing silence
    speech = np.concatenate(pieces)
    speech_power = np.mean(speech**2)
    out = []
    for c in range(channels):
        snr = rng.uniform(*snr_db)
        noise = rng.standard_normal(len(speech)) * np.sqrt(speech_power / 10 ** (snr / 10))
        out.append((0.8 if c else 1.0) * speech + noise)
    audio = np.stack(out, axis=1)
    audio *= rng.uniform(0.2, 0.6) / (np.abs(audio).max() + 1e-9)
    return (audio[:, 0] if channels == 1 else audio).astype(np.float32)


def synthetic_utterances(n: int, *, seed: int, split_index: int) -> list[tuple[list[str], np.random.Generator]]:
    """``n`` (words, generator) pairs: a random pattern of :data:`PATTERNS` filled with random words of
    each class; the generator then renders the audio (reproducible per index, whatever ``n``)."""
    result = []
    for i in range(n):
        rng = np.random.default_rng([seed, split_index, i])
        pattern = PATTERNS[rng.integers(len(PATTERNS))]
        words = [WORD_CLASSES[c][rng.integers(len(WORD_CLASSES[c]))] for c in pattern]
        result.append((words, rng))
    return result


def synthetic_splits(n_train: int, n_valid: int, n_test: int, n_test_other: int = 0) -> list[tuple]:
    """``(split name, utterances, SNR range)`` of every split :func:`write_synthetic_speech` writes:
    ``train``, ``valid`` and ``test``, or, with ``n_test_other > 0``, ``test_clean`` (the conditions of
    training) and ``test_other`` (noisier, :data:`OTHER_SNR_DB`), like LibriSpeech's clean/other."""
    tests = (
        [("test", n_test, CLEAN_SNR_DB)]
        if n_test_other == 0
        else [("test_clean", n_test, CLEAN_SNR_DB), ("test_other", n_test_other, OTHER_SNR_DB)]
    )
    return [("train", n_train, CLEAN_SNR_DB), ("valid", n_valid, CLEAN_SNR_DB), *tests]


def write_synthetic_speech(
    raw_dir: str | Path,
    *,
    n_train: int = 2000,
    n_valid: int = 100,
    n_test: int = 100,
    n_test_other: int = 0,
    seed: int = 1,
    fraction_8k: float = 0.25,
    fraction_stereo: float = 0.25,
) -> Path:
    """Write ``raw_dir/{train,valid,test}.tsv`` and their WAV files (16-bit PCM); return ``raw_dir``.

    With ``n_test_other > 0`` the test set is ``test_clean.tsv`` (``n_test`` utterances, the same as
    ``test`` would hold) plus a noisier ``test_other.tsv`` (:func:`synthetic_splits`): the names of
    LibriSpeech's test splits, so the tiny ASR runs fill Table 5's test columns.
    A fraction of the files (chosen per utterance from the seed) is written at 8 kHz, another in
    stereo (the second channel 0.8 times as loud, with its own noise). Transcripts are upper-case,
    as LibriSpeech's. Re-running with the same arguments returns at once.
    """
    raw_dir = Path(raw_dir)
    params = dict(
        n_train=n_train,
        n_valid=n_valid,
        n_test=n_test,
        seed=seed,
        fraction_8k=fraction_8k,
        fraction_stereo=fraction_stereo,
        version=GENERATOR_VERSION,
    )
    if n_test_other:
        params["n_test_other"] = n_test_other
    splits = synthetic_splits(n_train, n_valid, n_test, n_test_other)
    marker = raw_dir / "synthetic_speech.json"
    if (
        marker.is_file()
        and json.loads(marker.read_text()) == params
        and all((raw_dir / f"{s[0]}.tsv").is_file() for s in splits)
    ):
        return raw_dir
    marker.unlink(missing_ok=True)
    for stale in ("test", "test_clean", "test_other"):  # a test split of an earlier layout would be read too
        (raw_dir / f"{stale}.tsv").unlink(missing_ok=True)
    for split_index, (split, n, snr_db) in enumerate(splits):
        (raw_dir / split).mkdir(parents=True, exist_ok=True)
        lines = ["audio\ttext"]
        for i, (words, rng) in enumerate(synthetic_utterances(n, seed=seed, split_index=split_index)):
            rate = 8000 if rng.uniform() < fraction_8k else 16000
            channels = 2 if rng.uniform() < fraction_stereo else 1
            rel = f"{split}/{i:05d}.wav"
            wav = io.BytesIO()  # through memory: libsndfile's own file flush is slow on some disks
            sf.write(wav, synthesize(words, rng, rate, channels, snr_db), rate, format="WAV", subtype="PCM_16")
            (raw_dir / rel).write_bytes(wav.getvalue())
            lines.append(f"{rel}\t{' '.join(words).upper()}")
        (raw_dir / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    marker.write_text(json.dumps(params), encoding="utf-8")  # last: the corpus is complete
    log.info(
        "wrote a synthetic speech corpus to %s (%s utterances)",
        raw_dir,
        ", ".join(f"{split} {n}" for split, n, _ in splits),
    )
    return raw_dir


def prepare_synthetic_asr(
    data_dir: str | Path,
    *,
    raw_dir: str | Path | None = None,
    n_train: int = 2000,
    n_valid: int = 100,
    n_test: int = 100,
    n_test_other: int = 0,
    seed: int = 1,
    vocab_size: int = 48,
    workers: int | None = None,
    **corpus_options,
) -> Path:
    """Generate the corpus (into ``raw_dir``, default ``data_dir/raw``) and prepare it through
    :func:`b2t_lib.data.speech.prepare_speech_from_files`, the path real local data takes."""
    data_dir = Path(data_dir)
    raw = write_synthetic_speech(
        raw_dir or data_dir / "raw",
        n_train=n_train,
        n_valid=n_valid,
        n_test=n_test,
        n_test_other=n_test_other,
        seed=seed,
        **corpus_options,
    )
    return prepare_speech_from_files(raw, data_dir, vocab_size=vocab_size, seed=seed, workers=workers)

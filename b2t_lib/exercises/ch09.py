r"""Chapter 09's exercises: the number of encoder positions after the convolutional front end, and corpus WER.

9.1: each of the two convolutions (kernel 5, stride 2, padding 2) maps :math:`T \mapsto \lfloor (T - 1)/2 \rfloor + 1`.
9.2 (Table 5): :math:`\mathrm{WER} = 100\,(S + D + I)/N`, summed over the test set, :math:`N` the reference words.
"""

from __future__ import annotations

import torch

from ..metrics import normalize_words, word_error_rate
from ..speech_input import SpeechInput, subsampled_lengths
from ._core import Wrong, as_tensor, call, diagnose, exercise, number, seeded

FRAME_COUNTS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 13, 17, 100, 101, 102, 103, 998, 1000, 1001, 1003, 3499)


def frame_mistakes(frames: torch.Tensor):
    def per_conv(rule, convs=2):
        out = frames
        for _ in range(convs):
            out = rule(out)
        return out.double()

    yield per_conv(lambda t: (t - 5) // 2 + 1), "each convolution pads 2 frames on both sides: (T + 4 - 5) // 2 + 1"
    yield per_conv(lambda t: (t - 1) // 2 + 1, 1), "the front end has two stride-2 convolutions: 4x fewer positions"
    yield per_conv(lambda t: (t - 1) // 2 + 1, 3), "the front end has two stride-2 convolutions, not three"
    yield (frames // 4).double(), "a stride-2 convolution with padding 2 keeps a last partial stride: ceil(T / 2)"
    yield (
        (frames // 2).double(),
        "each stride-2 convolution halves the frames, and there are two: ceil(ceil(T / 2) / 2)",
    )
    yield frames.double() / 4, "a number of positions is a whole number: floor((T - 1) / 2) + 1 per convolution"


@exercise("9.1", "encoder positions after the front end")
def check_encoder_frames(fn) -> str:
    """``fn(num_frames)`` returns how many positions the encoder sees for an utterance of ``num_frames`` fbank frames:
    two Conv1d layers with kernel 5, stride 2, padding 2 (b2t_lib/speech_input.py)."""
    frames = torch.tensor(FRAME_COUNTS)
    got = []
    for t in FRAME_COUNTS:
        value = as_tensor(call(fn, t, what="your function"), f"your count for {t} frames")
        if value.numel() != 1:
            raise Wrong(f"your count for {t} frames must be one number, got shape {tuple(value.shape)}")
        got.append(value.reshape(()))
    expected = subsampled_lengths(frames, 2).double()
    diagnose(torch.stack(got), expected, frame_mistakes(frames), f"your counts for T = {FRAME_COUNTS}", atol=1e-9)
    torch.manual_seed(9)
    front_end = SpeechInput(8, in_features=4, conv_channels=8).eval()
    with torch.no_grad():
        x, padding_mask = front_end((torch.randn(2, 1001, 4), torch.tensor([1001, 1000])))
    positions = [int(n) for n in (~padding_mask).sum(1)]
    if [x.shape[1], *positions] != [int(expected[FRAME_COUNTS.index(t)]) for t in (1001, 1001, 1000)]:
        raise RuntimeError("the checker's counts disagree with SpeechInput's output")
    return f"SpeechInput turns 1000 frames (10 s of 10 ms hops) into {positions[1]} encoder positions, 40 ms each"


def wer_cases(seed: int):
    """``(references, hypotheses)``: lower-case references, hypotheses with substitutions, deletions, insertions and
    a capitalised word (words are compared lower-cased)."""
    generator = seeded(seed)
    words = ("the", "cat", "sat", "on", "a", "mat", "and", "then", "it", "slept")

    def rand(n):
        return [words[int(i)] for i in torch.randint(0, len(words), (n,), generator=generator)]

    references, hypotheses = [], []
    for _ in range(6):
        ref = rand(int(torch.randint(3, 9, (), generator=generator)))
        hyp = list(ref)
        for _ in range(int(torch.randint(0, 3, (), generator=generator))):  # up to two random edits
            edit = int(torch.randint(0, 3, (), generator=generator)) if len(hyp) > 1 else 2
            pos = int(torch.randint(0, len(hyp) + (edit == 2), (), generator=generator))
            if edit == 0:
                hyp[pos] = rand(1)[0]  # a substitution (or a word kept, when it draws the same)
            elif edit == 1:
                del hyp[pos]  # a deletion
            else:
                hyp.insert(pos, rand(1)[0])  # an insertion
        references.append(" ".join(ref))
        hypotheses.append(" ".join(hyp))
    references.append("he said it was fine")
    hypotheses.append("He said that it was fine fine")  # one insertion each, and a capital letter
    return references, hypotheses


def _edits(ref: list[str], hyp: list[str]) -> int:
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1]


def wer_mistakes(references, hypotheses):
    pairs = [(normalize_words(r).split(), normalize_words(h).split()) for r, h in zip(references, hypotheses)]
    errors = sum(_edits(r, h) for r, h in pairs)
    ref_words, hyp_words = sum(len(r) for r, _ in pairs), sum(len(h) for _, h in pairs)
    cased = sum(_edits(r.split(), h.split()) for r, h in zip(references, hypotheses))
    mean = sum(_edits(r, h) / len(r) for r, h in pairs) / len(pairs)
    yield number(100 * errors / hyp_words), "the WER divides by the number of *reference* words N, not hypothesis"
    yield number(errors / ref_words), "the WER is in percent: 100 (S + D + I) / N"
    yield number(100 * mean), "the corpus WER sums the errors and the words over all sentences before dividing"
    yield number(100 * cased / ref_words), "words are compared lower-cased ('He' and 'he' are the same word)"
    yield (
        number(100 * sum(max(len(r), len(h)) - sum(a == b for a, b in zip(r, h)) for r, h in pairs) / ref_words),
        "comparing words position by position is not an alignment: use the Levenshtein distance over words",
    )


@exercise("9.2", "the word error rate")
def check_wer(fn) -> str:
    """``fn(references, hypotheses)`` returns the corpus WER in percent, 100 (S + D + I) / N from the word-level
    edit distance (b2t_lib/metrics.py)."""
    for seed in (91, 92):
        references, hypotheses = wer_cases(seed)
        got = as_tensor(call(fn, list(references), list(hypotheses), what="your function"), "your WER")
        if got.numel() != 1:
            raise Wrong(f"your WER must be one number, got shape {tuple(got.shape)}")
        expected = number(word_error_rate(references, hypotheses))
        what = f"your WER of {len(references)} sentences"
        diagnose(got.reshape(()), expected, wer_mistakes(references, hypotheses), what, rtol=1e-9, atol=1e-9)
    return "matches word_error_rate (jiwer's alignment), the metric of Table 5"

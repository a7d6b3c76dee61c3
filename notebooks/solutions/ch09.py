"""Chapter 09: the encoder positions after the convolutional front end, and the corpus word error rate."""


# Exercise 9.1 ------------------------------------------------------------------------------------------------------
def encoder_frames(num_frames):
    for _ in range(2):  # two Conv1d layers, kernel 5, stride 2, padding 2
        num_frames = (num_frames + 2 * 2 - 5) // 2 + 1
    return num_frames


# Exercise 9.2 ------------------------------------------------------------------------------------------------------
def edit_distance(ref, hyp):
    row = list(range(len(hyp) + 1))  # distances from the empty reference prefix
    for i, r in enumerate(ref, 1):
        diagonal, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            # deletion, insertion, substitution (free when the words agree)
            diagonal, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, diagonal + (r != h))
    return row[-1]


def wer(references, hypotheses):
    errors = words = 0
    for reference, hypothesis in zip(references, hypotheses):
        ref, hyp = reference.lower().split(), hypothesis.lower().split()
        errors += edit_distance(ref, hyp)  # S + D + I
        words += len(ref)
    return 100 * errors / words

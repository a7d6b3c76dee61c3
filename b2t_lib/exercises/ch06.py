r"""Chapter 06's exercises: the trainer's label-smoothed loss of a batch, and the inverse-sqrt learning-rate schedule.

6.1 (docs/methods.md §3.3): :math:`\mathcal{L} = \sum_{t:\,y_t \ne \text{pad}} [(1-\epsilon)(-\log p(y_t))
+ \frac{\epsilon}{V}\sum_{v=1}^{V}(-\log p(v))]`.
6.2: :math:`\eta_t = \eta_{init} + t(\eta - \eta_{init})/W` for :math:`t < W`, then :math:`\eta\sqrt{W/t}`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..loss import label_smoothed_nll_loss
from ..special_tokens import PAD
from ..train.schedule import LRSchedule
from ._core import Wrong, as_tensor, call, diagnose, exercise, seeded


def loss_cases():
    """``(logits (B, T, V), target (B, T) with padding, epsilon)``: float64, the last row of each batch padded."""
    generator = seeded(61)
    for batch, time, vocab, epsilon in ((2, 5, 11, 0.1), (3, 4, 7, 0.2), (1, 6, 13, 0.1)):
        logits = 2 * torch.randn(batch, time, vocab, generator=generator, dtype=torch.float64)
        target = torch.randint(PAD + 1, vocab, (batch, time), generator=generator)
        target[-1, time // 2 :] = PAD  # a shorter sentence, padded at its end
        yield logits, target, epsilon


def _parts(logits, target):
    """Per position: -log p(y_t), sum_v -log p(v), sum_v -log p(v) without the <pad> column, and the keep mask."""
    lprobs = F.log_softmax(logits.double(), dim=-1)
    nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    smooth = -lprobs.sum(-1)
    smooth_no_pad = smooth + lprobs[..., PAD]
    return nll, smooth, smooth_no_pad, target.ne(PAD)


def loss_mistakes(logits, target, epsilon):
    nll, smooth, smooth_no_pad, keep = _parts(logits, target)
    vocab = logits.shape[-1]

    def summed(nll_weight, smooth_weight, smooth_terms=smooth, mask=keep):
        return ((nll_weight * nll + smooth_weight * smooth_terms) * mask).sum()

    everywhere = torch.ones_like(keep)
    yield summed(1.0, 0.0), "that is the plain NLL: label smoothing mixes in (eps / V) sum_v -log p(v) per token"
    yield (
        summed(1 - epsilon, epsilon / vocab, mask=everywhere),
        "you summed over the padding positions too: only the tokens with y_t != pad count",
    )
    yield (
        summed(1 - epsilon, epsilon / vocab) / keep.sum(),
        "that is the mean over the tokens: the trainer's loss is their sum (it divides the gradients by the number "
        "of target tokens of the whole update later)",
    )
    yield summed(1 - epsilon, epsilon), "the uniform term's weight is eps / V, not eps: eps is spread over V words"
    yield summed(1.0, epsilon / vocab), "the target's term is weighted by (1 - eps)"
    yield (
        summed(1 - epsilon, epsilon / (vocab - 1), smooth - nll),
        "fairseq spreads eps over all V words, the target included: (eps / V) sum_{v=1}^{V}, not eps / (V - 1) over "
        "the others",
    )
    yield (
        summed(1 - epsilon, epsilon / vocab, smooth_no_pad),
        "the uniform term sums over every column of the vocabulary, <pad>'s included (the model gives it a "
        "probability too); only padding *positions* are left out",
    )
    yield (
        summed(1 - epsilon, 0.0) + epsilon / vocab * smooth[keep].mean(),
        "the uniform term is inside the sum over tokens: you added it once for the whole batch",
    )


@exercise("6.1", "the label-smoothed loss of a batch")
def check_label_smoothed_loss(fn) -> str:
    """``fn(logits, target, epsilon, pad)`` returns the trainer's loss of one batch: the label-smoothed NLL summed
    over the non-padding target tokens (b2t_lib/loss.py)."""
    for logits, target, epsilon in loss_cases():
        got = call(fn, logits.clone(), target.clone(), epsilon, PAD, what="your function")
        got = as_tensor(got, "your loss")
        if got.numel() != 1:
            raise Wrong(f"your loss must be one number (a sum over the batch), got shape {tuple(got.shape)}")
        expected = label_smoothed_nll_loss(logits, target, epsilon).loss
        shape = f"B, T, V = {tuple(logits.shape)}, eps = {epsilon}"
        diagnose(got.reshape(()), expected, loss_mistakes(logits, target, epsilon), f"your loss ({shape})", rtol=1e-6)
    return "matches label_smoothed_nll_loss, the loss the trainer back-propagates"


SCHEDULE_CASES = (  # (peak lr, warmup updates W, warmup_init_lr): the chapter's WMT recipe, then a short warmup
    (1e-3, 4000, 1e-7),
    (5e-4, 10, 1e-4),
)


def schedule_steps(warmup: int) -> list[int]:
    return sorted({0, 1, 2, warmup // 2, warmup - 1, warmup, warmup + 1, 2 * warmup, 9 * warmup, 100 * warmup})


def schedule_mistakes(steps, lr, warmup, init):
    t = torch.tensor(steps, dtype=torch.float64)
    late = torch.clamp(t, min=warmup)
    decay = lr * (warmup / late).sqrt()

    def during(values):
        return torch.where(t < warmup, values, decay)

    yield during(t * lr / warmup), "the warmup starts at warmup_init_lr, not at 0: eta_init + t (eta - eta_init) / W"
    yield during(torch.full_like(t, lr)), "there is no warmup: for t < W the rate rises linearly from eta_init to eta"
    yield during(init + (t + 1) * (lr - init) / warmup), "t is 0-based: update 0 uses warmup_init_lr itself"
    yield (
        during(init + t * lr / warmup),
        "the warmup's slope is (eta - eta_init) / W, so that update W reaches eta exactly",
    )
    yield (
        torch.where(t < warmup, init + t * (lr - init) / warmup, lr / late.sqrt()),
        "the decay is eta sqrt(W) / sqrt(t): without sqrt(W) the rate drops by sqrt(W) at the end of the warmup",
    )
    yield (
        torch.where(t < warmup, init + t * (lr - init) / warmup, lr * (1 / (t - warmup + 1).clamp(min=1)).sqrt()),
        "the decay counts updates from the start of training (eta sqrt(W / t)), not from the end of the warmup",
    )


@exercise("6.2", "the inverse-sqrt learning-rate schedule")
def check_inverse_sqrt(fn) -> str:
    """``fn(t, lr, warmup_updates, warmup_init_lr)`` returns the learning rate of update ``t`` (0-based) under
    fairseq's ``inverse_sqrt`` schedule (b2t_lib/train/schedule.py)."""
    for lr, warmup, init in SCHEDULE_CASES:
        steps = schedule_steps(warmup)
        schedule = LRSchedule(None, "inverse_sqrt", lr, warmup_updates=warmup, warmup_init_lr=init)
        got = []
        for t in steps:
            value = as_tensor(call(fn, t, lr, warmup, init, what="your function"), f"your rate at t = {t}")
            if value.numel() != 1:
                raise Wrong(f"your rate at t = {t} must be one number, got shape {tuple(value.shape)}")
            got.append(value.reshape(()))
        expected = torch.tensor([schedule.lr_at(t) for t in steps], dtype=torch.float64)
        diagnose(
            torch.stack(got),
            expected,
            schedule_mistakes(steps, lr, warmup, init),
            f"your rates (lr = {lr}, W = {warmup}, warmup_init_lr = {init}) at t = {steps}",
            rtol=1e-9,
            atol=0.0,
        )
    return "matches LRSchedule('inverse_sqrt').lr_at, the rate the trainer sets before each update"

"""Every exercise checker accepts its reference solution and rejects realistic wrong answers, saying what is wrong.

The solutions live in ``notebooks/solutions/``. A checker that accepted everything would fail here: each one is run
on at least one wrong answer, and the test requires the specific message for that mistake.
"""

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from b2t_lib.exercises import EXERCISES, NOT_SOLVED, SOLVED, WRONG, CheckResult
from conftest import load_script

SOLUTIONS = Path(__file__).resolve().parents[1] / "notebooks" / "solutions"


ch01, ch02, ch03, ch04, ch05, ch06, ch07, ch08, ch09, ch10, ch11 = (
    load_script(SOLUTIONS / f"ch{i:02d}.py") for i in range(1, 12)
)


def stub(*args):
    raise NotImplementedError


class StubLayer(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        raise NotImplementedError


# --- wrong answers, one realistic mistake each ------------------------------------------------------------------


def post_ln_as_pre_ln(x, sublayers):
    for branch, norm in sublayers:
        x = x + branch(norm(x))
    return x


def pre_ln_normalizing_the_output(x, sublayers):
    for branch, norm in sublayers:
        x = x + norm(branch(x))
    return x


def post_ln_two_sublayers(x, sublayers):
    (b1, n1), (b2, n2) = sublayers[0], sublayers[1]  # written for the encoder only
    x = n1(x + b1(x))
    return n2(x + b2(x))


class PostLNUnscaled(ch01.PostLNEncoderLayer):
    def attention(self, x):
        batch, time, d_model = x.shape
        q, k, v = (
            proj(x).view(batch, time, self.n_heads, self.d_head).transpose(1, 2)
            for proj in (self.q_proj, self.k_proj, self.v_proj)
        )
        weights = torch.softmax(q @ k.transpose(-1, -2), dim=-1)  # forgot / sqrt(d_head)
        return self.out_proj((weights @ v).transpose(1, 2).reshape(batch, time, d_model))


class PostLNSingleHead(ch01.PostLNEncoderLayer):
    def attention(self, x):
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(x.shape[-1]), dim=-1)
        return self.out_proj(weights @ v)


class PostLNWiredAsPreLN(ch01.PostLNEncoderLayer):
    def forward(self, x):
        x = x + self.attention(self.self_attn_layer_norm(x))
        return x + self.fc2(F.relu(self.fc1(self.final_layer_norm(x))))


class PostLNBadNames(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.query = nn.Linear(d_model, d_model)


def ln_jacobian_without_gamma(x, gamma, eps=1e-5):
    return ch02.ln_jacobian(x, torch.ones_like(gamma), eps)


def ln_jacobian_gamma_on_columns(x, gamma, eps=1e-5):
    return ch02.ln_jacobian(x, torch.ones_like(gamma), eps) @ torch.diag(gamma)


def ln_jacobian_unbiased_variance(x, gamma, eps=1e-5):
    d = x.numel()
    sigma = torch.sqrt(x.var() + eps)  # torch's default: unbiased
    n = (x - x.mean()) / sigma
    return torch.diag(gamma) @ (torch.eye(d, dtype=x.dtype) - 1 / d - torch.outer(n, n) / d) / sigma


def ln_jacobian_without_sigma_term(x, gamma, eps=1e-5):
    d = x.numel()
    sigma = torch.sqrt(x.var(unbiased=False) + eps)
    return torch.diag(gamma) @ (torch.eye(d, dtype=x.dtype) - 1 / d) / sigma


def ln_factor_mean_sigma(sigmas, d):
    return math.sqrt((d - 2) / d) / float(sigmas.mean())


def ln_factor_mean_inverse(sigmas, d):
    return math.sqrt((d - 2) / d) * float((1 / sigmas).mean())


def ln_factor_without_projection(sigmas, d):
    return float(sigmas.pow(-2).mean().sqrt())


def norms_top_first(model, batch):
    return ch03.decoder_gradient_norms(model, batch)[::-1]


def norms_hooks_left(model, batch):
    outputs = []
    for layer in model.decoder.layers:
        layer.register_forward_hook(lambda module, args, output: outputs.append(output))
    from b2t_lib.diagnostics import model_loss

    loss = model_loss(model, batch)
    return [float(g.norm()) for g in torch.autograd.grad(loss, outputs)]


def norms_per_token(model, batch):
    return [n / math.sqrt(batch["target"].numel()) for n in ch03.decoder_gradient_norms(model, batch)]


def decay_from_deepest_point(depths, ratios):
    return ratios[-1] ** (1 / (depths[-1] - 1))


def decay_slope_only(depths, ratios):
    return np.polyfit(depths, np.log(ratios), 1)[0]


def similarity_with_padding(outputs, padding_mask):
    return ch04.similarity_matrix(outputs, torch.zeros_like(padding_mask))


def similarity_flattened(outputs, padding_mask):
    flat = torch.stack([y[~padding_mask].flatten() for y in outputs])
    flat = flat / flat.norm(dim=1, keepdim=True)
    return flat @ flat.T


def similarity_squared(norm_i, norm_final):
    return (norm_i / norm_final) ** 2


def b2t_added_after_the_norm(x, sublayers):
    return ch01.post_ln_forward(x, sublayers) + x


def b2t_forgot_x_inp(x, sublayers):
    return ch01.post_ln_forward(x, sublayers)


def b2t_adds_x_ffn(x, sublayers):
    for branch, norm in sublayers[:-1]:
        x = norm(x + branch(x))
    branch, norm = sublayers[-1]
    return norm(x + x + branch(x))


def eq8_post_ln(J_sa, J_ln_sa, J_ca, J_ln_ca, J_ffn):
    I = torch.eye(J_sa.shape[0], dtype=J_sa.dtype)
    inner = J_ln_ca @ (I + J_ca) @ J_ln_sa @ (I + J_sa)
    return inner + J_ffn @ inner


def eq8_encoder_formula(J_sa, J_ln_sa, J_ca, J_ln_ca, J_ffn):
    I = torch.eye(J_sa.shape[0], dtype=J_sa.dtype)
    inner = J_ln_sa @ (I + J_sa)
    return I + inner + J_ffn @ inner


def eq8_ffn_not_chained(J_sa, J_ln_sa, J_ca, J_ln_ca, J_ffn):
    I = torch.eye(J_sa.shape[0], dtype=J_sa.dtype)
    return I + J_ln_ca @ (I + J_ca) @ J_ln_sa @ (I + J_sa) + J_ffn


def critical_width_heuristic(num_layers, kappa):
    from b2t_lib.variants import b2t_no_ln_alpha

    return (1 - b2t_no_ln_alpha(num_layers)) ** -5


def critical_width_linear(num_layers, kappa):
    from b2t_lib.variants import b2t_no_ln_alpha

    return ((1 - b2t_no_ln_alpha(num_layers)) / (1 + kappa)) ** -5


def loss_as_mean(logits, target, epsilon, pad):
    return ch06.label_smoothed_loss(logits, target, epsilon, pad) / target.ne(pad).sum()


def loss_over_padding(logits, target, epsilon, pad):
    lprobs = F.log_softmax(logits, dim=-1)
    nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)  # padding positions not masked
    return ((1 - epsilon) * nll + epsilon / logits.shape[-1] * -lprobs.sum(-1)).sum()


def loss_eps_not_divided(logits, target, epsilon, pad):
    lprobs = F.log_softmax(logits, dim=-1)
    nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    keep = target.ne(pad)
    return ((1 - epsilon) * nll[keep] + epsilon * -lprobs.sum(-1)[keep]).sum()


def loss_without_pad_column(logits, target, epsilon, pad):
    lprobs = F.log_softmax(logits, dim=-1)
    nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    smooth = -lprobs.sum(-1) + lprobs[..., pad]
    keep = target.ne(pad)
    return ((1 - epsilon) * nll[keep] + epsilon / logits.shape[-1] * smooth[keep]).sum()


def lr_warmup_from_zero(t, lr, warmup_updates, warmup_init_lr):
    if t < warmup_updates:
        return t * lr / warmup_updates
    return lr * math.sqrt(warmup_updates / t)


def lr_without_warmup(t, lr, warmup_updates, warmup_init_lr):
    return lr if t < warmup_updates else lr * math.sqrt(warmup_updates / t)


def lr_decay_without_sqrt_w(t, lr, warmup_updates, warmup_init_lr):
    return ch06.inverse_sqrt_lr(t, lr, warmup_updates, warmup_init_lr) if t < warmup_updates else lr / math.sqrt(t)


def rouge_precision(hypothesis, reference, n):
    hyp, ref = hypothesis.split(), reference.split()
    grams = [tuple(hyp[i : i + n]) for i in range(len(hyp) - n + 1)]
    ref_grams = [tuple(ref[i : i + n]) for i in range(len(ref) - n + 1)]
    matches = sum(min(grams.count(g), ref_grams.count(g)) for g in set(grams))
    return matches / len(grams)


def rouge_unclipped(hypothesis, reference, n):
    hyp, ref = hypothesis.split(), reference.split()
    grams = [tuple(hyp[i : i + n]) for i in range(len(hyp) - n + 1)]
    ref_grams = {tuple(ref[i : i + n]) for i in range(len(ref) - n + 1)}
    matches = sum(g in ref_grams for g in grams)  # every repeat of a matching n-gram counts
    if matches == 0:
        return 0.0
    p, r = matches / len(grams), matches / (len(ref) - n + 1)
    return 2 * p * r / (p + r)


def rouge_percent(hypothesis, reference, n):
    return 100 * ch07.rouge_n(hypothesis, reference, n)


def corpus_rouge_fraction(hypotheses, references, n):
    return ch07.corpus_rouge_n(hypotheses, references, n) / 100


def adaptive_params_without_clusters(vocab_size, d_model, cutoff, factor):
    return ch08.adaptive_softmax_params(vocab_size, d_model, cutoff, factor) - d_model * len(cutoff)


def adaptive_params_without_projections(vocab_size, d_model, cutoff, factor):
    dims = [int(d_model // factor**i) for i in range(1, len(cutoff) + 1)]
    return ch08.adaptive_softmax_params(vocab_size, d_model, cutoff, factor) - d_model * sum(dims)


def adaptive_params_full_softmax(vocab_size, d_model, cutoff, factor):
    return vocab_size * d_model


def perplexity_base_2(log_probs, target, pad):
    return 2 ** ch08.perplexity(log_probs, target, pad).log()


def perplexity_over_padding(log_probs, target, pad):
    return torch.exp(-log_probs.gather(-1, target.unsqueeze(-1)).mean())


def perplexity_mean_of_exponents(log_probs, target, pad):
    keep = target.ne(pad)
    return torch.exp(-log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)[keep]).mean()


def frames_without_padding(num_frames):
    for _ in range(2):
        num_frames = (num_frames - 5) // 2 + 1
    return num_frames


def frames_one_conv(num_frames):
    return (num_frames - 1) // 2 + 1


def frames_floor_quarter(num_frames):
    return num_frames // 4


def wer_by_hypothesis_length(references, hypotheses):
    reference_words = sum(len(r.split()) for r in references)
    return ch09.wer(references, hypotheses) * reference_words / sum(len(h.split()) for h in hypotheses)


def wer_mean_of_sentences(references, hypotheses):
    return sum(ch09.wer([r], [h]) for r, h in zip(references, hypotheses)) / len(references)


def wer_case_sensitive(references, hypotheses):
    errors = sum(ch09.edit_distance(r.split(), h.split()) for r, h in zip(references, hypotheses))
    return 100 * errors / sum(len(r.split()) for r in references)


# exercise -> (checker, the solution's arguments, the stub's arguments, [(wrong arguments, expected message part)])


def deepnet_encoder_alone(role, encoder_layers, decoder_layers):
    if role == "encoder":
        return (2 * encoder_layers) ** 0.25, (8 * encoder_layers) ** -0.25  # the encoder-only row
    return ch10.deepnet_alpha_beta(role, encoder_layers, decoder_layers)


def deepnet_torchscale_beta(role, encoder_layers, decoder_layers):
    alpha, beta = ch10.deepnet_alpha_beta(role, encoder_layers, decoder_layers)
    return (alpha, beta / 0.87 * 1.15) if role == "encoder" else (alpha, beta)


def deepnet_decoder_as_lm(role, encoder_layers, decoder_layers):
    if role == "decoder":
        return (2 * decoder_layers) ** 0.25, (8 * decoder_layers) ** -0.25
    return ch10.deepnet_alpha_beta(role, encoder_layers, decoder_layers)


def word_dropout_rescaled(embedded, rate, keep_first):
    return ch10.word_dropout(embedded, rate, keep_first) / (1 - rate)


def word_dropout_elementwise(embedded, rate, keep_first):
    keep = torch.rand(embedded.shape) >= rate
    if keep_first:
        keep[:, 0] = True
    return embedded * keep.to(embedded.dtype)


def word_dropout_drops_the_first(embedded, rate, keep_first):
    return ch10.word_dropout(embedded, rate, False)


def realformer_plain(raw_scores, running_mean):
    return raw_scores


def realformer_always_mean(raw_scores, running_mean):
    return ch11.realformer_logits(raw_scores, True)


def realformer_adds_probabilities(raw_scores, running_mean):
    return ch11.realformer_logits(torch.softmax(raw_scores, dim=-1), running_mean)


def tfixup_without_sqrt2(encoder_layers, decoder_layers):
    factors = ch11.tfixup_factors(encoder_layers, decoder_layers)
    return [factors[0], factors[0], factors[2], factors[2], factors[4]]


def tfixup_embedding_by_decoder(encoder_layers, decoder_layers):
    return ch11.tfixup_factors(encoder_layers, decoder_layers)[:4] + [(9 * decoder_layers) ** -0.25]


CASES = {
    "1.1": (
        (ch01.post_ln_forward, ch01.pre_ln_forward),
        (stub, stub),
        [
            ((post_ln_as_pre_ln, ch01.pre_ln_forward), "post_ln_forward computes Pre-LN"),
            ((ch01.post_ln_forward, pre_ln_normalizing_the_output), "normalizes the branch's output"),
            ((post_ln_two_sublayers, ch01.pre_ln_forward), "stops after two of the decoder's three"),
            ((ch01.post_ln_forward, ch01.post_ln_forward), "pre_ln_forward computes Post-LN"),
        ],
    ),
    "1.2": (
        (ch01.PostLNEncoderLayer,),
        (StubLayer,),
        [
            ((PostLNUnscaled,), "scores are not scaled"),
            ((PostLNSingleHead,), "uses one head"),
            ((PostLNWiredAsPreLN,), "wired as Pre-LN"),
            ((PostLNBadNames,), "needs a module `q_proj`"),
        ],
    ),
    "2.1": (
        (ch02.ln_jacobian,),
        (stub,),
        [
            (
                (ln_jacobian_without_gamma,),
                "correct for gamma = 1 but not for a non-constant gamma: did you forget diag(gamma)?",
            ),
            ((ln_jacobian_gamma_on_columns,), "gamma multiplies the wrong side"),
            ((ln_jacobian_unbiased_variance,), "biased variance"),
            ((ln_jacobian_without_sigma_term,), "the -n n^T / d term is missing"),
        ],
    ),
    "2.2": (
        (ch02.ln_gradient_factor,),
        (stub,),
        [
            ((ln_factor_mean_sigma,), "one sigma (the mean) for all tokens"),
            ((ln_factor_mean_inverse,), "norms add in squares"),
            ((ln_factor_without_projection,), "removes 2 of the d directions"),
        ],
    ),
    "3.1": (
        (ch03.decoder_gradient_norms,),
        (stub,),
        [
            ((norms_top_first,), "top layer first"),
            ((norms_hooks_left,), "left 4 hook(s)"),
            ((norms_per_token,), "the reference times"),
        ],
    ),
    "3.2": (
        (ch03.decay_factor,),
        (stub,),
        [
            ((decay_from_deepest_point,), "deepest point alone"),
            ((decay_slope_only,), "c = exp(slope)"),
        ],
    ),
    "4.1": (
        (ch04.similarity_matrix,),
        (stub,),
        [
            ((similarity_with_padding,), "over the padding positions too"),
            ((similarity_flattened,), "whole flattened outputs"),
        ],
    ),
    "4.2": (
        (ch04.predicted_similarity,),
        (stub,),
        [
            ((similarity_squared,), "ratio of squared norms"),
        ],
    ),
    "5.1": (
        (ch05.b2t_forward,),
        (stub,),
        [
            ((b2t_forgot_x_inp,), "that is Post-LN"),
            ((b2t_added_after_the_norm,), "after the last LayerNorm"),
            ((b2t_adds_x_ffn,), "added x_ffn twice"),
        ],
    ),
    "5.2": (
        (ch05.decoder_eq8,),
        (stub,),
        [
            ((eq8_post_ln,), "identity term is missing"),
            ((eq8_encoder_formula,), "left out the cross-attention"),
            ((eq8_ffn_not_chained,), "must be chained"),
        ],
    ),
    "5.3": (
        (ch05.critical_width,),
        (stub,),
        [
            ((critical_width_heuristic,), "identity-only heuristic alpha + beta < 1"),
            ((critical_width_linear,), "the squares add"),
        ],
    ),
    "6.1": (
        (ch06.label_smoothed_loss,),
        (stub,),
        [
            ((loss_as_mean,), "that is the mean over the tokens"),
            ((loss_over_padding,), "over the padding positions too"),
            ((loss_eps_not_divided,), "weight is eps / V, not eps"),
            ((loss_without_pad_column,), "<pad>'s included"),
        ],
    ),
    "6.2": (
        (ch06.inverse_sqrt_lr,),
        (stub,),
        [
            ((lr_warmup_from_zero,), "starts at warmup_init_lr, not at 0"),
            ((lr_without_warmup,), "there is no warmup"),
            ((lr_decay_without_sqrt_w,), "without sqrt(W)"),
        ],
    ),
    "7.1": (
        (ch07.rouge_n,),
        (stub,),
        [
            ((rouge_precision,), "that is the precision"),
            ((rouge_unclipped,), "matches at most as often as it occurs in the reference"),
            ((rouge_percent,), "a fraction in [0, 1]"),
        ],
    ),
    "7.2": (
        (ch07.corpus_rouge_n,),
        (stub,),
        [
            ((corpus_rouge_fraction,), "mean F1 times 100"),
        ],
    ),
    "8.1": (
        (ch08.adaptive_softmax_params,),
        (stub,),
        [
            ((adaptive_params_without_clusters,), "one cluster per tail band"),
            ((adaptive_params_without_projections,), "projects h from d down to d_i"),
            ((adaptive_params_full_softmax,), "that is a full softmax"),
        ],
    ),
    "8.2": (
        (ch08.perplexity,),
        (stub,),
        [
            ((perplexity_base_2,), "in nats (natural log)"),
            ((perplexity_over_padding,), "padding positions are not tokens"),
            ((perplexity_mean_of_exponents,), "not the mean of the per-token perplexities"),
        ],
    ),
    "9.1": (
        (ch09.encoder_frames,),
        (stub,),
        [
            ((frames_without_padding,), "pads 2 frames on both sides"),
            ((frames_one_conv,), "two stride-2 convolutions: 4x fewer"),
            ((frames_floor_quarter,), "keeps a last partial stride"),
        ],
    ),
    "9.2": (
        (ch09.wer,),
        (stub,),
        [
            ((wer_by_hypothesis_length,), "number of *reference* words"),
            ((wer_mean_of_sentences,), "sums the errors and the words over all sentences"),
            ((wer_case_sensitive,), "compared lower-cased"),
        ],
    ),
    "10.1": (
        (ch10.deepnet_alpha_beta,),
        (stub,),
        [
            ((deepnet_encoder_alone,), "that is the row of a stack alone"),
            ((deepnet_torchscale_beta,), "torchscale's factor 1.15"),
            ((deepnet_decoder_as_lm,), "that is the row of a decoder-only model"),
        ],
    ),
    "10.2": (
        (ch10.word_dropout,),
        (stub,),
        [
            ((word_dropout_rescaled,), "no rescaling"),
            ((word_dropout_elementwise,), "like nn.Dropout"),
            ((word_dropout_drops_the_first,), "first position"),
        ],
    ),
    "11.1": (
        (ch11.realformer_logits,),
        (stub,),
        [
            ((realformer_plain,), "that is plain attention"),
            ((realformer_always_mean,), "that is the running-mean option"),
            ((realformer_adds_probabilities,), "not the attention probabilities"),
        ],
    ),
    "11.2": (
        (ch11.tfixup_factors,),
        (stub,),
        [
            ((tfixup_without_sqrt2,), "times sqrt(2)"),
            ((tfixup_embedding_by_decoder,), "by the encoder's factor"),
        ],
    ),
}


def test_every_exercise_is_tested_with_a_solution_and_wrong_answers():
    assert set(CASES) == set(EXERCISES), "each registered exercise needs a solution and wrong answers here"
    assert all(len(wrong) >= 1 for _, _, wrong in CASES.values())


@pytest.mark.parametrize("exercise_id", sorted(CASES))
def test_the_solution_is_accepted(exercise_id):
    solution, _, _ = CASES[exercise_id]
    result = EXERCISES[exercise_id].check(*solution)
    assert isinstance(result, CheckResult)
    assert result.status == SOLVED, result
    assert repr(result).startswith(f"Exercise {exercise_id} (") and "\n" not in repr(result)


@pytest.mark.parametrize("exercise_id", sorted(CASES))
def test_the_stub_is_not_solved_yet_and_says_so_in_one_line(exercise_id):
    _, stubs, _ = CASES[exercise_id]
    result = EXERCISES[exercise_id].check(*stubs)
    assert result.status == NOT_SOLVED
    assert "\n" not in repr(result) and "not solved yet" in repr(result)


@pytest.mark.parametrize(
    "exercise_id,index", [(k, i) for k, (_, _, wrong) in sorted(CASES.items()) for i in range(len(wrong))]
)
def test_a_wrong_answer_is_rejected_with_what_is_wrong(exercise_id, index):
    answer, message = CASES[exercise_id][2][index]
    result = EXERCISES[exercise_id].check(*answer)
    assert result.status == WRONG, f"exercise {exercise_id} accepted a wrong answer: {result}"
    assert message in result.message, result
    assert "\n" not in repr(result)


@pytest.mark.parametrize("exercise_id", sorted(CASES))
def test_an_answer_that_crashes_is_wrong_not_an_error(exercise_id):
    def crash(*args):
        raise ValueError("shape mismatch\nsecond line")

    class Crash(nn.Module):
        def __init__(self, *args):
            super().__init__()
            raise ValueError("shape mismatch\nsecond line")

    arity = len(CASES[exercise_id][0])
    answer = (Crash,) if exercise_id == "1.2" else (crash,) * arity
    result = EXERCISES[exercise_id].check(*answer)
    assert result.status == WRONG and "raised ValueError: shape mismatch" in result.message
    assert "second line" not in result.message


def test_checkers_leave_the_global_random_state_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    EXERCISES["1.2"].check(ch01.PostLNEncoderLayer)
    EXERCISES["2.1"].check(ch02.ln_jacobian)
    assert torch.equal(torch.rand(3), expected)


def test_solutions_import_from_the_notebooks_folder(monkeypatch):
    monkeypatch.syspath_prepend(str(SOLUTIONS.parent))
    for name in [m for m in sys.modules if m == "solutions" or m.startswith("solutions.")]:
        monkeypatch.delitem(sys.modules, name)
    module = importlib.import_module("solutions.ch05")
    assert callable(module.critical_width)

"""Automatic checkers for the exercises that end chapters 01-11.

Each checker takes the learner's function (or class), runs it on random inputs next to the library's reference,
and returns a :class:`CheckResult` whose one-line repr says ``solved``, ``not solved yet`` (the stub still raises
``NotImplementedError``) or ``wrong``, with *what* is wrong: each checker knows the usual mistakes for its exercise
and names the one the answer matches. The reference solutions are in ``notebooks/solutions/`` (one file per
chapter); ``tests/test_exercises.py`` runs every checker on its solution and on wrong answers.

============  =======================================  ==============================================
exercise      checker                                  the learner writes
============  =======================================  ==============================================
1.1           :func:`check_layer_wiring`               ``post_ln_forward(x, sublayers)``, ``pre_ln_forward``
1.2           :func:`check_post_ln_layer`              a Post-LN encoder layer class from ``nn.Linear``
2.1           :func:`check_ln_jacobian`                ``ln_jacobian(x, gamma, eps)``
2.2           :func:`check_ln_gradient_factor`         ``ln_gradient_factor(sigmas, d)``
3.1           :func:`check_layer_gradient_norms`       ``decoder_gradient_norms(model, batch)``
3.2           :func:`check_decay_factor`               ``decay_factor(depths, ratios)``
4.1           :func:`check_layer_similarity`           ``similarity_matrix(outputs, padding_mask)``
4.2           :func:`check_similarity_prediction`      ``predicted_similarity(norm_i, norm_final)``
5.1           :func:`check_b2t_wiring`                 ``b2t_forward(x, sublayers)``
5.2           :func:`check_decoder_eq8`                ``decoder_eq8(J_sa, J_ln_sa, J_ca, J_ln_ca, J_ffn)``
5.3           :func:`check_critical_width`             ``critical_width(num_layers, kappa)``
6.1           :func:`check_label_smoothed_loss`        ``label_smoothed_loss(logits, target, epsilon, pad)``
6.2           :func:`check_inverse_sqrt`               ``inverse_sqrt_lr(t, lr, warmup_updates, warmup_init_lr)``
7.1           :func:`check_rouge_n`                    ``rouge_n(hypothesis, reference, n)``
7.2           :func:`check_corpus_rouge`               ``corpus_rouge_n(hypotheses, references, n)``
8.1           :func:`check_adaptive_params`            ``adaptive_softmax_params(vocab_size, d_model, cutoff, factor)``
8.2           :func:`check_perplexity`                 ``perplexity(log_probs, target, pad)``
9.1           :func:`check_encoder_frames`             ``encoder_frames(num_frames)``
9.2           :func:`check_wer`                        ``wer(references, hypotheses)``
10.1          :func:`check_deepnet_constants`          ``deepnet_alpha_beta(role, encoder_layers, decoder_layers)``
10.2          :func:`check_word_dropout`               ``word_dropout(embedded, rate, keep_first)``
11.1          :func:`check_realformer_logits`          ``realformer_logits(raw_scores, running_mean)``
11.2          :func:`check_tfixup_factors`             ``tfixup_factors(encoder_layers, decoder_layers)``
============  =======================================  ==============================================
"""

from ._core import EXERCISES, NOT_SOLVED, SOLVED, WRONG, CheckResult, Exercise
from .ch01 import check_layer_wiring, check_post_ln_layer
from .ch02 import check_ln_gradient_factor, check_ln_jacobian
from .ch03 import check_decay_factor, check_layer_gradient_norms
from .ch04 import check_layer_similarity, check_similarity_prediction
from .ch05 import check_b2t_wiring, check_critical_width, check_decoder_eq8
from .ch06 import check_inverse_sqrt, check_label_smoothed_loss
from .ch07 import check_corpus_rouge, check_rouge_n
from .ch08 import check_adaptive_params, check_perplexity
from .ch09 import check_encoder_frames, check_wer
from .ch10 import check_deepnet_constants, check_word_dropout
from .ch11 import check_realformer_logits, check_tfixup_factors

__all__ = [
    "EXERCISES",
    "SOLVED",
    "NOT_SOLVED",
    "WRONG",
    "CheckResult",
    "Exercise",
    "check_layer_wiring",
    "check_post_ln_layer",
    "check_ln_jacobian",
    "check_ln_gradient_factor",
    "check_layer_gradient_norms",
    "check_decay_factor",
    "check_layer_similarity",
    "check_similarity_prediction",
    "check_b2t_wiring",
    "check_decoder_eq8",
    "check_critical_width",
    "check_label_smoothed_loss",
    "check_inverse_sqrt",
    "check_rouge_n",
    "check_corpus_rouge",
    "check_adaptive_params",
    "check_perplexity",
    "check_encoder_frames",
    "check_wer",
    "check_deepnet_constants",
    "check_word_dropout",
    "check_realformer_logits",
    "check_tfixup_factors",
]

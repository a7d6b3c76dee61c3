"""The language model with adaptive input and adaptive softmax, as ModelConfig builds it: the loss
without full logits equals the NLL of the full log-probabilities, tying shares storage, every
parameter is used, the options that are not defined are refused, greedy continuation is consistent."""

import pytest
import torch
import torch.nn.functional as F

from b2t_lib import VARIANTS, ConfigError, LanguageModel, ModelConfig, seed_everything
from b2t_lib.adaptive import AdaptiveInput, AdaptiveSoftmax
from b2t_lib.special_tokens import EOS, PAD
from b2t_lib.generate import lm_greedy_continuation

V, D = 300, 32
ADAPTIVE = dict(
    adaptive_input=True,
    adaptive_softmax=True,
    adaptive_cutoff=(20, 100),
    adaptive_factor=2.0,
    tie_adaptive_weights=True,
    tie_adaptive_proj=True,
    share_decoder_io=False,
)


def lm(variant="b2t", layers=2, dropout=0.0, **extra):
    seed_everything(0)
    options = {**ADAPTIVE, **extra}
    cfg = ModelConfig(
        vocab_size=V,
        d_model=D,
        n_heads=4,
        d_ff=64,
        encoder_layers=0,
        decoder_layers=layers,
        variant=variant,
        dropout=dropout,
        **options,
    )
    return LanguageModel(cfg)


def tokens(batch=3, time=9, seed=1):
    g = torch.Generator().manual_seed(seed)
    # Zipf-like ids so that every band (head, both tails) holds targets
    t = torch.cat(
        [
            torch.randint(4, 20, (batch, time // 3), generator=g),
            torch.randint(20, 100, (batch, time // 3), generator=g),
            torch.randint(100, V, (batch, time - 2 * (time // 3)), generator=g),
        ],
        dim=1,
    )
    return t[:, torch.randperm(time, generator=g)]


@pytest.mark.parametrize("variant", ["post_ln", "pre_ln", "b2t"])
def test_adaptive_loss_of_the_whole_model_equals_nll_of_its_full_log_probs(variant):
    model = lm(variant).eval()
    inputs, target = tokens(), tokens(seed=2)
    target[0, -2:] = PAD  # padding is not scored
    log_probs = model(inputs)  # (B, T, V)
    assert log_probs.shape == (3, 9, V)
    torch.testing.assert_close(log_probs.logsumexp(-1), torch.zeros(3, 9), atol=1e-5, rtol=0)
    keep = target.ne(PAD)
    target_log_probs = log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)  # (B, T) from all V entries
    nll, ntokens = model.decoder.adaptive_softmax.loss(model(inputs, features_only=True), target)
    assert int(ntokens) == int(keep.sum()) == 25
    torch.testing.assert_close(nll, -target_log_probs[keep].sum(), rtol=1e-5, atol=1e-4)
    per_token = model.target_log_prob(model(inputs, features_only=True), target)  # (B, T)
    torch.testing.assert_close(per_token[keep], target_log_probs[keep])


def test_tied_weights_share_storage_inside_the_built_model():
    model = lm()
    embed, softmax = model.decoder.embed_tokens, model.decoder.adaptive_softmax
    assert isinstance(embed, AdaptiveInput) and isinstance(softmax, AdaptiveSoftmax)
    assert softmax.head.word_proj.weight.data_ptr() == embed.embeddings[0][0].weight.data_ptr()
    for i in (1, 2):
        assert softmax.tail[i - 1][2].weight.data_ptr() == embed.embeddings[i][0].weight.data_ptr()  # E_i
        assert softmax.tail[i - 1][0].weight.data_ptr() == embed.embeddings[i][1].weight.data_ptr()  # P_i
    # each shared tensor counts once, and an update through one name is seen through the other
    assert len(list(model.parameters())) == len({p.data_ptr() for p in model.parameters()})
    with torch.no_grad():
        embed.embeddings[2][0].weight[5, 0] = 123.0
    assert softmax.tail[1][2].weight[5, 0] == 123.0
    state = model.state_dict()  # fairseq's names, both kept
    assert torch.equal(
        state["decoder.adaptive_softmax.head.word_proj.weight"], state["decoder.embed_tokens.embeddings.0.0.weight"]
    )


def test_untied_adaptive_softmax_has_its_own_matrices():
    model = lm(tie_adaptive_weights=False, tie_adaptive_proj=False)
    inputs = {p.data_ptr() for p in model.decoder.embed_tokens.parameters()}
    assert not inputs & {p.data_ptr() for p in model.decoder.adaptive_softmax.parameters()}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_variant_trains_an_adaptive_lm_with_every_parameter_used(variant):
    """DDP requires every parameter to get a gradient in every step (no find_unused_parameters)."""
    extra = (
        {"adaptive_input": False, "tie_adaptive_weights": False, "tie_adaptive_proj": False}
        if variant == "tfixup"
        else {}
    )  # T-Fixup refuses adaptive input
    model = lm(variant, layers=3, **extra).train()
    features = model(tokens(), features_only=True)
    nll, ntokens = model.decoder.adaptive_softmax.loss(features, tokens(seed=3))
    assert torch.isfinite(nll) and int(ntokens) == 27
    (nll / ntokens).backward()
    unused = [name for name, p in model.named_parameters() if p.grad is None]
    assert not unused, unused


def test_pre_ln_language_model_drops_the_final_norm_as_transformer_lm_wiki103():
    assert lm("pre_ln").decoder.layer_norm is not None  # the ModelConfig default keeps it
    assert lm("pre_ln", decoder_final_norm=False).decoder.layer_norm is None
    assert lm("b2t", decoder_final_norm=True).decoder.layer_norm is None  # B2T has none either way


def test_init_scale_scales_layers_but_not_the_adaptive_embedding_and_softmax():
    plain, scaled = lm(), lm(init_scale=0.1)
    for (name, p), (_, q) in zip(plain.named_parameters(), scaled.named_parameters()):
        layer_weight = ".layers." in name and name.endswith("weight") and "layer_norm" not in name
        torch.testing.assert_close(q, p * 0.1 if layer_weight else p, msg=name)


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(encoder_layers=2), "language model only"),
        (dict(adaptive_softmax=False), "--tie-adaptive-weights needs both"),
        (dict(tie_adaptive_weights=False), "--tie-adaptive-proj ties projections of tied bands"),
        (dict(share_decoder_io=True), "--no-share-decoder-io"),
        (dict(adaptive_cutoff=(100, 20)), "strictly increasing"),
        (dict(adaptive_factor=64.0), "band dimensions below 1"),
        (dict(adaptive_input=False, adaptive_softmax=False), "tie the adaptive softmax to the adaptive input"),
        (dict(adaptive_softmax_dropout=1.0), "adaptive_softmax_dropout must lie in"),
    ],
)
def test_undefined_combinations_are_refused_by_name(changes, message):
    values = dict(vocab_size=V, d_model=D, n_heads=4, d_ff=64, encoder_layers=0, decoder_layers=2, **ADAPTIVE)
    values.update(changes)
    with pytest.raises(ConfigError, match=message):
        ModelConfig(**values)


def test_tfixup_refuses_adaptive_input_and_cutoffs_beyond_the_vocabulary_are_refused():
    with pytest.raises(ConfigError, match="not defined for a AdaptiveInput"):
        lm("tfixup")
    with pytest.raises(ConfigError, match=r"lie in \(0, 300\]"):
        lm(adaptive_cutoff=(20, 400))


def test_greedy_continuation_is_the_argmax_of_the_full_forward_pass():
    model = lm("b2t").eval()
    prefix = torch.cat([torch.full((2, 1), EOS), tokens(2, 5)], dim=1)  # (2, 6)
    out = lm_greedy_continuation(model, prefix, 4)
    assert out.shape == (2, 4)
    sequence = prefix
    for step in range(4):  # without the cache: argmax of the last position
        expected = model(sequence)[:, -1].argmax(-1)
        assert torch.equal(out[:, step], expected)
        sequence = torch.cat([sequence, expected[:, None]], dim=1)
    assert not out.eq(PAD).any()


def test_full_softmax_language_model_target_log_prob():
    seed_everything(0)
    model = LanguageModel(
        ModelConfig(vocab_size=V, d_model=D, n_heads=4, d_ff=64, encoder_layers=0, decoder_layers=2, dropout=0.0)
    ).eval()
    inputs, target = tokens(), tokens(seed=2)
    expected = F.log_softmax(model(inputs), -1).gather(-1, target.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(model.target_log_prob(model(inputs, features_only=True), target), expected)

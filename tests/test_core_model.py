"""Whole models: masks, incremental decoding, search, input checks, and the scale switch."""

import pytest
import torch

from b2t_lib import (
    PAD,
    VARIANTS,
    ConfigError,
    EncoderDecoder,
    LanguageModel,
    ModelConfig,
    ScaleError,
    beam_search,
    get_scale,
    greedy_search,
    seed_everything,
)

from conftest import tiny_config

VOCAB = 40  # the vocabulary of tiny_config


def random_tokens(generator, batch, time):
    return torch.randint(4, VOCAB, (batch, time), generator=generator)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_padding_never_leaks_into_real_positions(variant):
    seed_everything(0)
    model = EncoderDecoder(tiny_config(variant)).eval()
    g = torch.Generator().manual_seed(0)
    src, prev = random_tokens(g, 1, 5), random_tokens(g, 1, 4)
    padded_a = torch.cat([src, torch.full((1, 3), PAD)], dim=1)
    padded_b = torch.cat([src, torch.full((1, 6), PAD)], dim=1)
    with torch.no_grad():
        reference = model(src, prev)
        torch.testing.assert_close(model(padded_a, prev), reference, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(model(padded_b, prev), reference, rtol=1e-5, atol=1e-5)
        # encoder outputs at real positions ignore what the padded slots hold
        memory, mask = model.encoder(padded_a)
        torch.testing.assert_close(memory[:, :5], model.encoder(src)[0], rtol=1e-5, atol=1e-5)
        assert mask[0, 5:].all() and not mask[0, :5].any()


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_causal_mask_hides_the_future(variant):
    seed_everything(1)
    model = EncoderDecoder(tiny_config(variant)).eval()
    g = torch.Generator().manual_seed(1)
    src, prev = random_tokens(g, 2, 6), random_tokens(g, 2, 7)
    changed = prev.clone()
    changed[:, 4:] = random_tokens(g, 2, 3)
    with torch.no_grad():
        before, after = model(src, prev), model(src, changed)
    torch.testing.assert_close(before[:, :4], after[:, :4], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(before[:, 4:], after[:, 4:])


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_incremental_decoding_equals_full_forward(variant):
    seed_everything(2)
    model = EncoderDecoder(tiny_config(variant, encoder_layers=3, decoder_layers=3)).eval()
    g = torch.Generator().manual_seed(2)
    src, prev = random_tokens(g, 3, 6), random_tokens(g, 3, 5)
    src[1, 4:] = PAD
    with torch.no_grad():
        full = model(src, prev)
        memory, mask = model.encoder(src)
        cache: dict = {}
        steps = [model.decoder(prev[:, : t + 1], memory, mask, cache) for t in range(prev.shape[1])]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_decoder_masks_its_own_padding_left_and_right(variant):
    """A padded decoder batch gives, at every real position, the logits of each sentence alone."""
    seed_everything(6)
    model = EncoderDecoder(tiny_config(variant)).eval()
    g = torch.Generator().manual_seed(6)
    src = random_tokens(g, 3, 5)
    sentences = [random_tokens(g, 1, n)[0] for n in (6, 3, 1)]
    left = torch.full((3, 6), PAD)
    right = torch.full((3, 6), PAD)
    for i, tokens in enumerate(sentences):
        left[i, 6 - len(tokens) :] = tokens
        right[i, : len(tokens)] = tokens
    with torch.no_grad():
        left_logits, right_logits = model(src, left), model(src, right)
        assert torch.isfinite(left_logits).all() and torch.isfinite(right_logits).all()
        for i, tokens in enumerate(sentences):
            alone = model(src[i : i + 1], tokens[None])[0]  # (len, vocab)
            torch.testing.assert_close(left_logits[i, 6 - len(tokens) :], alone, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(right_logits[i, : len(tokens)], alone, rtol=1e-5, atol=1e-5)
        # Incremental decoding of the left-padded batch: the same logits at the real positions.
        memory, mask = model.encoder(src)
        cache: dict = {}
        steps = torch.cat([model.decoder(left[:, : t + 1], memory, mask, cache) for t in range(6)], dim=1)
        assert torch.isfinite(steps).all()
        real = left.ne(PAD)
        torch.testing.assert_close(steps[real], left_logits[real], rtol=1e-5, atol=1e-5)


def test_left_padded_language_model_batch_matches_each_sequence_alone():
    seed_everything(8)
    model = LanguageModel(tiny_config("pre_ln", encoder_layers=0, decoder_layers=2)).eval()
    g = torch.Generator().manual_seed(8)
    short, long = random_tokens(g, 1, 2)[0], random_tokens(g, 1, 5)[0]
    batch = torch.stack([torch.cat([torch.full((3,), PAD), short]), long])
    with torch.no_grad():
        out = model(batch)
        torch.testing.assert_close(out[0, 3:], model(short[None])[0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(out[1], model(long[None])[0], rtol=1e-5, atol=1e-5)


def test_language_model_incremental_equals_full():
    seed_everything(3)
    model = LanguageModel(tiny_config("b2t", encoder_layers=0, decoder_layers=3)).eval()
    tokens = random_tokens(torch.Generator().manual_seed(3), 2, 6)
    with torch.no_grad():
        full = model(tokens)
        cache: dict = {}
        steps = [model(tokens[:, : t + 1], cache=cache) for t in range(6)]
    assert full.shape == (2, 6, VOCAB)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)
    assert not hasattr(model.decoder.layers[0], "encoder_attn")


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_beam_search_with_beam_one_equals_greedy(variant):
    seed_everything(4)
    model = EncoderDecoder(tiny_config(variant))
    g = torch.Generator().manual_seed(4)
    src = random_tokens(g, 4, 6)
    src[2, 3:] = PAD
    greedy = greedy_search(model, src, max_len_a=1.0, max_len_b=5)
    beam = beam_search(model, src, beam_size=1, max_len_a=1.0, max_len_b=5)
    assert [g.tolist() for g in greedy] == [b.tolist() for b in beam]


def test_beam_search_finds_a_sequence_at_least_as_likely_as_greedy():
    seed_everything(5)
    model = EncoderDecoder(tiny_config("b2t")).eval()
    src = random_tokens(torch.Generator().manual_seed(5), 3, 5)

    def log_prob(source, hypothesis):
        target = torch.cat([hypothesis, torch.tensor([model.cfg.eos_idx])])[None]
        prev = torch.cat([torch.tensor([[model.cfg.eos_idx]]), target[:, :-1]], dim=1)
        with torch.no_grad():
            lp = model(source[None], prev).log_softmax(-1)
        return lp.gather(-1, target[..., None]).sum().item()

    greedy = greedy_search(model, src, max_len_b=6)
    beam = beam_search(model, src, beam_size=5, len_penalty=0.0, max_len_b=6)  # lenpen 0: raw log-prob
    for i in range(3):
        assert log_prob(src[i], beam[i]) >= log_prob(src[i], greedy[i]) - 1e-5


def test_shared_embeddings_are_one_tensor():
    model = EncoderDecoder(tiny_config(share_embeddings=True))
    assert model.encoder.embed_tokens.weight is model.decoder.embed_tokens.weight
    assert model.decoder.output_projection is None
    unshared = EncoderDecoder(tiny_config(share_embeddings=False, share_decoder_io=False))
    assert unshared.encoder.embed_tokens.weight is not unshared.decoder.embed_tokens.weight
    assert unshared.decoder.output_projection.weight.shape == (VOCAB, 16)


def test_only_the_variants_with_pre_ln_layers_have_a_final_stack_norm():
    # of the paper's four only Pre-LN; after it the variants whose top layers leave an un-normalized stream
    with_final = {"pre_ln", "mix_ln", "ln_scaling", "sandwich_ln", "peri_ln", "dyt"}
    for variant in VARIANTS:
        model = EncoderDecoder(tiny_config(variant))
        has_final = model.encoder.layer_norm is not None
        assert has_final == (variant in with_final) == (model.decoder.layer_norm is not None), variant


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"variant": "postln"}, "known variants are: admin, b2t, b2t_dyt, b2t_no_ln"),
        ({"d_model": 18, "n_heads": 4}, "not divisible"),
        ({"dropout": -0.1}, "dropout must lie in [0, 1)"),
        ({"attention_dropout": 1.0}, "attention_dropout must lie in [0, 1)"),
        ({"decoder_layers": 0}, "at least one decoder layer"),
    ],
)
def test_bad_configs_are_refused_with_a_message(overrides, message):
    with pytest.raises(ConfigError) as error:
        tiny_config(**overrides)
    assert message in str(error.value)


def test_encoder_decoder_needs_encoder_layers():
    with pytest.raises(ConfigError, match="encoder layer"):
        EncoderDecoder(tiny_config(encoder_layers=0))


def test_token_ids_out_of_range_are_refused():
    model = EncoderDecoder(tiny_config())
    good = torch.full((1, 3), 5)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model(torch.full((1, 3), VOCAB), good)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model(good, torch.full((1, 3), -1))


def test_scale_switch(monkeypatch):
    monkeypatch.delenv("B2T_SCALE", raising=False)
    assert get_scale() == "tiny"
    monkeypatch.setenv("B2T_SCALE", "huge")
    with pytest.raises(ScaleError, match="tiny, small, full"):
        get_scale()
    monkeypatch.setenv("B2T_SCALE", "full")
    if not torch.cuda.is_available():
        with pytest.raises(ScaleError, match="needs a CUDA GPU"):
            get_scale()
    assert get_scale(require_hardware=False) == "full"


def test_building_a_model_looks_the_variant_up_once_and_each_layer_gets_one_description(monkeypatch):
    """The model resolves its variant in the registry once; every layer of a stack is built from the stack's one
    description (StackInfo: depths, every ModelConfig field, the resolved variant), never from copies of its
    options as well."""
    import b2t_lib.variants as variants
    from b2t_lib import DecoderLayer, EncoderLayer

    class CountingRegistry(dict):
        lookups = 0

        def __getitem__(self, name):
            CountingRegistry.lookups += 1
            return super().__getitem__(name)

    monkeypatch.setattr(variants, "VARIANTS", CountingRegistry(variants.VARIANTS))
    for variant in ("b2t", "deepnet", "dlcl", "admin"):
        CountingRegistry.lookups = 0
        model = EncoderDecoder(
            ModelConfig(
                vocab_size=40, d_model=16, n_heads=2, d_ff=32, encoder_layers=18, decoder_layers=18, variant=variant
            )
        )
        assert CountingRegistry.lookups == 1, (variant, CountingRegistry.lookups)
        for stack in (model.encoder, model.decoder):
            assert all(layer.stack is stack.stack and layer.variant is model.variant for layer in stack.layers)
            assert stack.stack.options == model.cfg.to_dict() and stack.stack.variant is model.variant
    CountingRegistry.lookups = 0
    LanguageModel(ModelConfig(vocab_size=40, d_model=16, n_heads=2, d_ff=32, encoder_layers=0, decoder_layers=16))
    assert CountingRegistry.lookups == 1
    with pytest.raises(TypeError, match="not both"):
        EncoderLayer(16, stack=model.encoder.stack)
    with pytest.raises(TypeError, match="not both"):
        DecoderLayer(dropout=0.1, stack=model.decoder.stack)

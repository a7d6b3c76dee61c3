"""The S2T speech model (docs/methods.md §3.5) as one ModelConfig option: the speech front end in the
encoder's swappable input, every variant's stacks above it, no encoder embedding, tied decoder
embeddings; its options checked; Table 5 rows from ASR results."""

from __future__ import annotations

import pytest
import torch

from b2t_lib import EncoderDecoder, ModelConfig
from b2t_lib.config import ConfigError
from b2t_lib.model import forward_batch
from b2t_lib.paper_tables import ASR_SPLITS, paper_table, render_table, row_from_result
from b2t_lib.speech_input import SpecAugment, SpeechInput, SpeechSource, lengths_to_padding_mask
from b2t_lib.train import TrainConfig
from b2t_lib.variants import VARIANTS

SMALL = dict(
    vocab_size=30,
    d_model=16,
    n_heads=2,
    d_ff=32,
    encoder_layers=2,
    decoder_layers=2,
    encoder_input="speech",
    share_embeddings=False,
    conv_channels=32,
    dropout=0.0,
)


def speech_batch(lengths=(70, 41, 9), targets=((4, 5, 6, 2), (7, 2), (8, 9, 2)), seed=0) -> dict:
    torch.manual_seed(seed)
    lengths = torch.tensor(lengths)
    features = torch.randn(len(lengths), int(lengths.max()), 80)
    features = features.masked_fill(lengths_to_padding_mask(lengths, features.shape[1])[..., None], 0.0)
    width = max(len(t) for t in targets)
    target = torch.full((len(targets), width), 1)
    prev = torch.full((len(targets), width), 1)
    for i, t in enumerate(targets):
        target[i, : len(t)] = torch.tensor(t)
        prev[i, 0] = 2
        prev[i, 1 : len(t)] = torch.tensor(t[:-1])
    return {"features": features, "src_lengths": lengths, "target": target, "prev_output_tokens": prev}


def test_the_speech_model_is_the_encoder_decoder_with_the_speech_input():
    model = EncoderDecoder(ModelConfig(**SMALL))
    assert isinstance(model.encoder.input, SpeechInput) and model.encoder.embed_tokens is None
    assert isinstance(model.encoder.input.spec_augment, SpecAugment)  # ld by default
    names = set(model.state_dict())
    assert not any(n.startswith("encoder.embed_tokens") for n in names)
    assert {
        "encoder.input.subsample.conv_layers.0.weight",
        "encoder.input.subsample.conv_layers.1.weight",
        "decoder.embed_tokens.weight",
    } <= names
    # share_decoder_io: the output projection is the decoder's input embedding (fairseq's
    # --share-decoder-input-output-embed), no separate matrix
    assert model.decoder.output_projection is None
    model.eval()  # SpecAugment draws new masks at every call in training
    batch = speech_batch()
    assert model.input_keys == ("features", "src_lengths", "prev_output_tokens")
    source, prev = model.batch_inputs(batch)
    assert isinstance(source, SpeechSource) and source.features is batch["features"]
    assert prev is batch["prev_output_tokens"]
    logits = forward_batch(model, batch)
    assert logits.shape == (3, 4, 30)
    hidden = model.decoder.extract_features(prev, *model.encoder(source))
    assert torch.allclose(logits, hidden @ model.decoder.embed_tokens.weight.T, atol=1e-5)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("layers", [(2, 1), (4, 2)])  # deeper encoder than decoder, as the paper's 12L-6L
def test_every_variant_runs_on_speech_and_every_parameter_gets_a_gradient(variant, layers):
    """DDP refuses parameters that take no part in the loss: the speech model has none."""
    torch.manual_seed(0)
    cfg = ModelConfig(**dict(SMALL, variant=variant, encoder_layers=layers[0], decoder_layers=layers[1]))
    model = EncoderDecoder(cfg).train()
    batch = speech_batch()
    if variant == "admin":  # Admin measures its initialization on the first batch
        model.prepare_for_training(batch)
    forward_batch(model, batch).logsumexp(-1).sum().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None]
    assert not missing, f"{variant}: parameters without a gradient: {missing}"
    assert len(model.encoder.layers) == layers[0] and len(model.decoder.layers) == layers[1]


def test_sources_of_the_wrong_kind_are_refused_clearly():
    speech = EncoderDecoder(ModelConfig(**SMALL))
    tokens = torch.tensor([[5, 6, 2]])
    with pytest.raises(TypeError, match="SpeechSource"):
        speech(tokens, tokens)
    batch = speech_batch()
    with pytest.raises(ValueError, match="81 features per frame"):
        EncoderDecoder(ModelConfig(**SMALL).replace(input_features=81))(
            SpeechSource(batch["features"], batch["src_lengths"]), batch["prev_output_tokens"]
        )
    with pytest.raises(ValueError, match="outside the vocabulary"):  # the decoder's tokens are still checked
        speech(SpeechSource(batch["features"], batch["src_lengths"]), torch.tensor([[2, 99]]))
    with pytest.raises(KeyError, match="features"):
        forward_batch(speech, {"src_tokens": tokens, "prev_output_tokens": tokens})
    text = EncoderDecoder(
        ModelConfig(vocab_size=30, d_model=16, n_heads=2, d_ff=32, encoder_layers=1, decoder_layers=1)
    )
    with pytest.raises(ValueError, match="outside the vocabulary"):  # a token source is checked as before
        text(torch.tensor([[5, 99]]), tokens)


def test_speech_options_are_model_config_fields_checked_where_they_apply():
    cfg = ModelConfig(**dict(SMALL, conv_kernel_sizes=[3, 3, 3], specaug_time_width=10, specaug_freq_masks=0))
    assert cfg.conv_kernel_sizes == (3, 3, 3)  # a list from JSON becomes the tuple
    model = EncoderDecoder(cfg)
    assert len(model.encoder.input.subsample.conv_layers) == 3
    assert model.encoder.input.spec_augment.time_width == 10 and model.encoder.input.spec_augment.freq_masks == 0
    assert (
        EncoderDecoder(
            ModelConfig(**dict(SMALL, specaug_freq_masks=0, specaug_time_masks=0))
        ).encoder.input.spec_augment
        is None
    )
    refused = [
        (dict(conv_channels=64), "applies to --encoder-input speech only"),
        (dict(encoder_input="speech"), "--no-share-embeddings"),
        (dict(SMALL, conv_channels=33), "even"),
        (dict(SMALL, conv_kernel_sizes=()), "conv_kernel_sizes"),
        (dict(SMALL, conv_kernel_sizes=(4, 4)), "must be odd"),  # the lengths would not match the output
        (dict(SMALL, specaug_time_masks=-1), "specaug_time_masks"),
        (dict(SMALL, specaug_time_proportion=0.0), "specaug_time_proportion"),
        (dict(SMALL, encoder_input="audio"), "encoder_input"),
    ]
    for values, message in refused:
        with pytest.raises(ConfigError, match=message):
            ModelConfig(**values)
    with pytest.raises(ValueError, match="--task asr needs --encoder-input speech"):
        TrainConfig.from_preset(
            "asr", "tiny", encoder_input="tokens", share_embeddings=True, conv_channels=1024, specaug_time_width=100
        )
    with pytest.raises(ValueError, match="--task mt needs --encoder-input tokens"):
        TrainConfig.from_preset("mt", "tiny", encoder_input="speech", share_embeddings=False)


def test_the_command_line_lists_the_speech_options(capsys):
    from b2t_lib.cli import build_train_parser

    text = build_train_parser("asr", "tiny").format_help()
    for flag in (
        "--encoder-input",
        "--conv-channels",
        "--conv-kernel-sizes",
        "--specaug-freq-masks",
        "--specaug-freq-width",
        "--specaug-time-masks",
        "--specaug-time-width",
        "--specaug-time-proportion",
    ):
        assert flag in text, flag
    assert "--input-features" not in text  # from the data
    args = build_train_parser("asr", "tiny").parse_args(["--conv-kernel-sizes", "3,5", "--specaug-time-width", "20"])
    assert args.conv_kernel_sizes == (3, 5) and args.specaug_time_width == 20


def test_table5_rows_come_from_the_wer_of_each_split():
    """The metrics["wer"][split] fill Table 5's columns by split name (the renderer of
    b2t_lib.paper_tables)."""
    ok = {
        "task": "asr",
        "status": "completed",
        "metrics": {"wer": {"dev_clean": 3.5, "dev_other": 8.0, "test_clean": 3.9, "test_other": 8.8}},
    }
    assert ASR_SPLITS == ("dev_clean", "dev_other", "test_clean", "test_other")
    assert row_from_result(ok) == dict(zip(paper_table(5).columns, [3.5, 8.0, 3.9, 8.8]))
    tiny = {
        "task": "asr",
        "status": "completed",
        "metrics": {"wer": {"valid": 4.0, "test_clean": 2.0, "test_other": 9.0}},
    }
    row = row_from_result(tiny)  # the synthetic corpus has no dev_* splits
    assert row == {"valid": 4.0, "Test clean": 2.0, "Test other": 9.0}
    text = render_table(5, {"12L-6L": {"post_ln": row_from_result({"task": "asr", "status": "stalled"}), "b2t": row}})
    assert "Post-LN (ours)              Training failed" in text
    assert "B2T connection (ours)               -          -       2.00       9.00       4.00" in text

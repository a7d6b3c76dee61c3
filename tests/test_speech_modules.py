"""The speech front end (Conv1dSubsampler, SpeechInput) and SpecAugment (b2t_lib.speech_input)."""

from __future__ import annotations

import math

import pytest
import torch

from b2t_lib.config import ModelConfig
from b2t_lib.embedding import SinusoidalPositions
from b2t_lib.generate import beam_search, greedy_search
from b2t_lib.model import EncoderDecoder
from b2t_lib.speech_input import (
    Conv1dSubsampler,
    SpecAugment,
    SpeechInput,
    SpeechSource,
    lengths_to_padding_mask,
    subsampled_lengths,
)


def batch(lengths, dims=80, seed=0):
    torch.manual_seed(seed)
    lengths = torch.tensor(lengths)
    features = torch.randn(len(lengths), int(lengths.max()), dims)
    features = features.masked_fill(lengths_to_padding_mask(lengths, features.shape[1])[..., None], 0.0)
    return features, lengths


def test_subsampled_lengths_follow_the_formula_and_the_convolutions():
    lengths = torch.arange(1, 60)
    expected = [math.floor((math.floor((n - 1) / 2 + 1) - 1) / 2 + 1) for n in range(1, 60)]
    assert subsampled_lengths(lengths).tolist() == expected
    subsampler = Conv1dSubsampler(80, 32, 16)
    for n in (1, 2, 3, 4, 5, 6, 7, 8, 9, 100, 101, 3000):
        x, out = subsampler(torch.randn(1, n, 80), torch.tensor([n]))
        assert x.shape == (1, expected[n - 1] if n < 60 else math.ceil(math.ceil(n / 2) / 2), 16)
        assert out.tolist() == [x.shape[1]]  # every output position is real


def test_speech_input_shapes_padding_mask_and_scaling():
    d = 32
    front = SpeechInput(d, conv_channels=64).eval()
    features, lengths = batch([101, 50, 7, 1])
    x, mask = front((features, lengths))
    assert x.shape == (4, 26, d) and mask.shape == (4, 26)
    assert (~mask).sum(dim=1).tolist() == [26, 13, 2, 1]
    assert mask.tolist()[2] == [False] * 2 + [True] * 24
    # x = sqrt(d) * subsample(features) + sinusoidal positions (fairseq's S2T encoder input)
    z, _ = front.subsample(features, lengths)
    positions = SinusoidalPositions(d)(mask)
    assert torch.allclose(x, math.sqrt(d) * z + positions, atol=1e-6)
    assert torch.all(positions[mask] == 0)


def test_an_utterance_gives_the_same_output_alone_or_in_a_padded_batch():
    front = SpeechInput(32, conv_channels=64).eval()
    features, lengths = batch([90, 37, 11])
    x, mask = front(SpeechSource(features, lengths))
    for i, n in enumerate(lengths.tolist()):
        alone, _ = front((features[i : i + 1, :n], lengths[i : i + 1]))
        assert torch.allclose(x[i, : alone.shape[1]], alone[0], atol=1e-5)


def test_speech_input_replaces_the_encoder_input_of_the_existing_model():
    cfg = ModelConfig(
        vocab_size=40,
        d_model=32,
        n_heads=4,
        d_ff=64,
        encoder_layers=2,
        decoder_layers=2,
        share_embeddings=False,
        variant="b2t",
        dropout=0.0,
    )
    model = EncoderDecoder(cfg)
    model.encoder.input = SpeechInput(cfg.d_model, conv_channels=64, spec_augment=SpecAugment())
    model.encoder.embed_tokens = None
    features, lengths = batch([120, 64, 33])
    source = SpeechSource(features, lengths)
    assert source.shape[0] == 3 and source.device == features.device and source.to("cpu").lengths is not None
    memory, padding_mask = model.encoder(source)
    assert memory.shape == (3, 30, 32) and (~padding_mask).sum(dim=1).tolist() == [30, 16, 9]
    prev = torch.tensor([[2, 5, 6], [2, 7, 1], [2, 1, 1]])
    logits = model.decoder(prev, memory, padding_mask)
    assert logits.shape == (3, 3, 40)
    logits.sum().backward()
    conv = model.encoder.input.subsample.conv_layers[0]
    assert conv.weight.grad is not None and conv.weight.grad.abs().sum() > 0
    # Search takes the source as it takes src_tokens.
    for hypotheses in (greedy_search(model, source, max_len_b=4), beam_search(model, source, beam_size=2, max_len_b=4)):
        assert len(hypotheses) == 3 and all(h.numel() <= 4 for h in hypotheses)


def test_speech_input_checks_its_source():
    front = SpeechInput(16, conv_channels=32)
    with pytest.raises(ValueError, match="features"):
        front((torch.randn(2, 10), torch.tensor([10, 10])))
    with pytest.raises(ValueError, match="lengths"):
        front((torch.randn(2, 10, 80), torch.tensor([10])))


# ---------------------------------------------------------------------------------------------- SpecAugment
def masked(original: torch.Tensor, augmented: torch.Tensor) -> torch.Tensor:
    return original != augmented


def test_spec_augment_is_off_in_evaluation():
    augment = SpecAugment()
    features, lengths = batch([300, 200])
    augment.eval()
    assert augment(features, lengths) is features
    front = SpeechInput(16, conv_channels=32, spec_augment=SpecAugment())
    front.eval()
    assert torch.equal(front((features, lengths))[0], front((features, lengths))[0])
    front.train()
    assert not torch.equal(front((features, lengths))[0], front.eval()((features, lengths))[0])
    assert list(augment.parameters()) == [] and augment.state_dict() == {}


def test_spec_augment_policy_ld_masks_within_each_utterance():
    torch.manual_seed(0)
    augment = SpecAugment().train()  # ld: 2 x F=27 frequency, 2 x T=100 time, p=1
    lengths = torch.tensor([400, 250, 60])
    features = torch.randn(3, 400, 80) + 10.0  # nothing is 0 by chance
    features[1, 250:] = 99.0  # padding, must stay
    features[2, 60:] = 99.0
    for _ in range(50):
        out = augment(features, lengths)
        assert torch.all(out[1, 250:] == 99.0) and torch.all(out[2, 60:] == 99.0)
        changed = masked(features, out)
        assert torch.all(out[changed] == 0.0)  # masked with 0 (the CMVN mean)
        for i, n in enumerate(lengths.tolist()):
            columns = changed[i, :n].all(dim=0)  # frequency bins masked over the whole utterance
            rows = changed[i, :n].all(dim=1)  # frames masked in every bin
            assert torch.equal(changed[i, :n], columns[None, :] | rows[:, None])  # nothing else changed
            assert columns.sum() <= 2 * 26  # two masks of width < 27
            assert rows.sum() <= 2 * min(99, n - 1)  # two masks of width < min(100, p * frames)


def test_spec_augment_mask_widths_span_their_range():
    torch.manual_seed(1)
    freq_only = SpecAugment(freq_masks=1, time_masks=0).train()
    time_only = SpecAugment(freq_masks=0, time_masks=1).train()
    spectrum, one_frame = torch.ones(1, 1, 80), torch.tensor([1])  # small inputs: fast
    track, frames = torch.ones(1, 500, 27), torch.tensor([500])
    freq_widths = [int(masked(spectrum, freq_only(spectrum, one_frame))[0].all(dim=0).sum()) for _ in range(300)]
    time_widths = [int(masked(track, time_only(track, frames))[0].all(dim=1).sum()) for _ in range(300)]
    assert 0 in freq_widths and max(freq_widths) == 26 and len(set(freq_widths)) > 20
    assert 0 in time_widths and 90 <= max(time_widths) <= 99
    short = torch.ones(1, 12, 27)  # p=1: a time mask is shorter than the utterance
    short_widths = [int(masked(short, time_only(short, torch.tensor([12])))[0].all(dim=1).sum()) for _ in range(150)]
    assert max(short_widths) == 11


def test_spec_augment_is_reproducible_from_the_torch_seed():
    augment = SpecAugment().train()
    features, lengths = batch([300, 120])
    torch.manual_seed(5)
    first = augment(features, lengths)
    torch.manual_seed(5)
    assert torch.equal(augment(features, lengths), first)
    assert not torch.equal(augment(features, lengths), first)

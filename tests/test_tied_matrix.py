"""The shared embedding matrix in training (``b2t_lib.tied_matrix``): the same gradients to the bit as looking up
each stack's tokens and projecting the output one by one, one edge into the matrix, and the projection's gradient
written into kept memory only when nothing else holds it."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import b2t_lib.model as model_module
from b2t_lib import PAD, EncoderDecoder, LanguageModel, ModelConfig, seed_everything
from b2t_lib import tied_matrix
from b2t_lib.tied_matrix import tied_lookups, tied_projection
from b2t_lib.speech_input import SpeechSource, lengths_to_padding_mask
from conftest import tiny_config

VOCAB = 24  # small, so that tokens repeat within a batch and between the source and the target


def one_by_one(embed, *tokens):
    """The plain path: the matrix and each look-up used on their own (autograd adds a dense gradient per use)."""
    return (embed.weight, *(embed(t) for t in tokens))


def config(**overrides) -> ModelConfig:
    dropouts = dict(dropout=0.1, attention_dropout=0.1, activation_dropout=0.1)
    return tiny_config("b2t", vocab_size=VOCAB, **{**dropouts, **overrides})


def token_batch(seed: int, batch: int = 3, time: int = 9, left_pad: bool = False) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(4, VOCAB, (batch, time), generator=g)
    if left_pad:
        tokens[0, :3] = PAD  # padding before real tokens
    tokens[1, -4:] = PAD  # right padding
    return tokens


def run(model: nn.Module, inputs: list[tuple], plain: bool, monkeypatch) -> torch.Tensor:
    """Forward and backward of every batch in ``inputs`` (gradients accumulate, as with update_freq > 1)."""
    monkeypatch.setattr(model_module, "tied_lookups", one_by_one if plain else tied_lookups)
    torch.manual_seed(7)  # the same dropout masks for both paths
    model.train()
    for args, target in inputs:
        logits = model(*args)
        F.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1), ignore_index=PAD).backward()
    monkeypatch.setattr(model_module, "tied_lookups", tied_lookups)
    return logits.detach()


def assert_same_gradients(build, inputs, monkeypatch) -> nn.Module:
    seed_everything(3)
    reference = build()
    model = copy.deepcopy(reference)
    logits_plain = run(reference, inputs, plain=True, monkeypatch=monkeypatch)
    logits_tied = run(model, inputs, plain=False, monkeypatch=monkeypatch)
    assert torch.equal(logits_plain, logits_tied)
    for (name, p_plain), (_, p_tied) in zip(reference.named_parameters(), model.named_parameters()):
        assert (p_plain.grad is None) == (p_tied.grad is None), name
        if p_plain.grad is not None:
            assert torch.equal(p_plain.grad, p_tied.grad), f"{name}: the gradients differ"
    return model


def edges_into(output: torch.Tensor, parameter: torch.Tensor) -> int:
    """How many edges of the autograd graph of ``output`` lead into ``parameter``'s gradient accumulator."""
    seen, stack, count = set(), [output.grad_fn], 0
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for child, _ in node.next_functions:
            if child is not None and getattr(child, "variable", None) is parameter:
                count += 1
            stack.append(child)
    return count


@pytest.mark.parametrize("left_pad", [False, True])
def test_an_encoder_decoder_sharing_one_matrix_gets_the_same_gradients_to_the_bit(left_pad, monkeypatch):
    inputs = []  # two batches, their gradients accumulated
    for seed in (1, 2):
        src, prev = token_batch(seed, left_pad=left_pad), token_batch(seed + 10, time=7, left_pad=left_pad)
        inputs.append(((src, prev), prev.roll(-1, 1)))
    model = assert_same_gradients(lambda: EncoderDecoder(config(word_dropout=0.2)), inputs, monkeypatch)
    shared = model.decoder.embed_tokens.weight
    assert model.encoder.embed_tokens.weight is shared
    logits = model(*inputs[0][0])
    assert edges_into(logits, shared) == 1  # the node: no dense gradient per look-up
    monkeypatch.setattr(model_module, "tied_lookups", one_by_one)
    assert edges_into(model(*inputs[0][0]), shared) == 3  # two look-ups and the output projection


def test_a_decoder_tying_only_its_own_input_and_output_gets_the_same_gradients(monkeypatch):
    inputs = [((token_batch(1), token_batch(2, time=7)), token_batch(3, time=7))]
    build = lambda: EncoderDecoder(config(share_embeddings=False, share_decoder_io=True))  # noqa: E731
    model = assert_same_gradients(build, inputs, monkeypatch)
    logits = model(*inputs[0][0])
    assert edges_into(logits, model.decoder.embed_tokens.weight) == 1
    assert edges_into(logits, model.encoder.embed_tokens.weight) == 1  # its own look-up, as before


def test_a_language_model_and_a_speech_decoder_get_the_same_gradients(monkeypatch):
    tokens = token_batch(4, time=11, left_pad=True)
    lm_inputs = [((tokens,), tokens.roll(-1, 1))]
    lm = assert_same_gradients(
        lambda: LanguageModel(config(encoder_layers=0, share_decoder_io=True)), lm_inputs, monkeypatch
    )
    assert edges_into(lm(tokens), lm.decoder.embed_tokens.weight) == 1

    lengths = torch.tensor([30, 17, 9])
    features = torch.randn(3, 30, 80).masked_fill(lengths_to_padding_mask(lengths, 30)[..., None], 0.0)
    speech_inputs = [((SpeechSource(features, lengths), token_batch(5, time=6)), token_batch(6, time=6))]
    build = lambda: EncoderDecoder(  # noqa: E731
        config(encoder_input="speech", share_embeddings=False, share_decoder_io=True, conv_channels=16)
    )
    assert_same_gradients(build, speech_inputs, monkeypatch)


def test_an_embedding_without_a_padding_row_gives_every_row_its_gradient():
    torch.manual_seed(0)
    embed = nn.Embedding(10, 4)
    tokens = torch.tensor([[9, 0, 9, 3], [1, 9, 0, 0]])  # the last row and row 0 repeated: no row is padding
    features = torch.randn(2, 4, 4)
    grads = []
    for lookups in (one_by_one, tied_lookups):
        embed.weight.grad = None
        weight, rows = lookups(embed, tokens)
        (F.linear(features + rows, weight).square().sum()).backward()
        grads.append(embed.weight.grad.clone())
    assert torch.equal(grads[0], grads[1])
    assert grads[1][9].abs().sum() > 0 and grads[1][0].abs().sum() > 0


def test_without_a_gradient_or_with_options_it_does_not_implement_it_is_the_plain_path():
    embed = nn.Embedding(10, 4, padding_idx=PAD)
    tokens = torch.tensor([[5, 6, PAD]])
    with torch.no_grad():
        weight, rows = tied_lookups(embed, tokens)
    assert weight is embed.weight and rows.grad_fn is None
    clipped = nn.Embedding(10, 4, max_norm=1.0)  # renormalizes rows in place: left to nn.Embedding
    weight, rows = tied_lookups(clipped, tokens)
    assert weight is clipped.weight and type(rows.grad_fn).__name__ == "EmbeddingBackward0"
    weight, rows = tied_lookups(embed, tokens)
    assert weight is not embed.weight and torch.equal(weight, embed.weight) and torch.equal(rows, embed(tokens))


def train_steps(model: nn.Module, steps: int, set_to_none: bool, plain: bool, monkeypatch, held=None) -> list[int]:
    """``steps`` steps of Adam on one batch; where each step's gradient of the shared matrix lies (data_ptr).
    ``held``: a list that keeps each step's ``.grad`` itself, as a caller holding on to it would, with a copy."""
    monkeypatch.setattr(model_module, "tied_lookups", one_by_one if plain else tied_lookups)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    src, prev = token_batch(1), token_batch(2, time=7)
    torch.manual_seed(7)
    places = []
    for _ in range(steps):
        F.cross_entropy(model(src, prev).reshape(-1, VOCAB), prev.roll(-1, 1).reshape(-1), ignore_index=PAD).backward()
        places.append(model.decoder.embed_tokens.weight.grad.data_ptr())
        if held is not None:
            held.append((model.decoder.embed_tokens.weight.grad, model.decoder.embed_tokens.weight.grad.clone()))
        optimizer.step()
        optimizer.zero_grad(set_to_none=set_to_none)
    monkeypatch.setattr(model_module, "tied_lookups", tied_lookups)
    return places


@pytest.mark.parametrize("set_to_none", [True, False])
def test_training_steps_reuse_the_projections_gradient_memory_and_match_the_plain_path(set_to_none, monkeypatch):
    seed_everything(3)
    reference = EncoderDecoder(config())
    model = copy.deepcopy(reference)
    train_steps(reference, 3, set_to_none, plain=True, monkeypatch=monkeypatch)
    places = train_steps(model, 3, set_to_none, plain=False, monkeypatch=monkeypatch)
    for (name, p_plain), (_, p_tied) in zip(reference.named_parameters(), model.named_parameters()):
        assert torch.equal(p_plain, p_tied), f"{name} differs after three steps"
    (kept, *more) = tied_matrix._gradient_memory[model.decoder.embed_tokens]
    if set_to_none:  # each step's gradient lies in the kept memory: no fresh (V, d) tensor after the first
        assert places == [kept.data_ptr()] * 3 and not more
    # set_to_none=False: .grad stays, is zeroed, and each step's product is added into it from kept memory


def test_a_gradient_someone_still_holds_is_never_written_over(monkeypatch):
    seed_everything(3)
    model = EncoderDecoder(config())
    held: list[tuple[torch.Tensor, torch.Tensor]] = []
    places = train_steps(model, 3, set_to_none=True, plain=False, monkeypatch=monkeypatch, held=held)
    for grad, value in held:  # every step's .grad is still held here
        assert torch.equal(grad, value), "a later step wrote over a gradient still in use"
    assert len(set(places)) == 3

    embed = nn.Embedding(VOCAB, 8, padding_idx=PAD)  # autograd.grad: the caller holds each result
    features, tokens = torch.randn(2, 5, 8), token_batch(1, batch=2, time=5)
    results = []
    for _ in range(2):
        weight, rows = tied_lookups(embed, tokens)
        logits = tied_projection(features + rows, weight, embed)
        results.append(torch.autograd.grad(logits.square().sum(), embed.weight)[0])
    first = results[0].clone()
    weight, rows = tied_lookups(embed, tokens)
    torch.autograd.grad(tied_projection(features * 2 + rows, weight, embed).square().sum(), embed.weight)
    assert torch.equal(results[0], first) and torch.equal(results[0], results[1])


def test_under_cpu_autocast_the_projection_is_f_linear(monkeypatch):
    inputs = [((token_batch(1), token_batch(2, time=7)), token_batch(3, time=7))]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model = assert_same_gradients(lambda: EncoderDecoder(config()), inputs, monkeypatch)
        embed = model.decoder.embed_tokens
        weight, _ = tied_lookups(embed, inputs[0][0][1])
        logits = tied_projection(torch.randn(2, 3, embed.embedding_dim), weight, embed)
    assert type(logits.grad_fn).__name__ != "_TiedProjectionBackward" and logits.dtype == torch.bfloat16

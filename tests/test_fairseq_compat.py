"""Loading fairseq-named state dicts: a round trip, the renamed keys, and errors that name the key."""
from argparse import Namespace

import pytest
import torch

from b2t_lib import EncoderDecoder, ModelConfig, seed_everything
from b2t_lib.fairseq_compat import (CheckpointMismatch, config_from_fairseq_args, convert_fairseq_state_dict,
                                    load_fairseq_checkpoint, to_fairseq_state_dict)


def build(variant="b2t", **overrides):
    values = dict(vocab_size=30, d_model=16, n_heads=2, d_ff=32, encoder_layers=2, decoder_layers=2,
                  variant=variant, dropout=0.0)
    values.update(overrides)
    return EncoderDecoder(ModelConfig(**values)).eval()


def test_round_trip_through_fairseq_names_gives_the_same_model(tmp_path):
    seed_everything(0)
    source = build(share_embeddings=False, share_decoder_io=False)
    fairseq_state = to_fairseq_state_dict(source)
    assert "decoder.embed_out" in fairseq_state and "encoder.version" in fairseq_state
    assert "encoder.layers.0.self_attn.q_proj.weight" in fairseq_state
    assert "decoder.layers.1.encoder_attn_layer_norm.weight" in fairseq_state
    path = tmp_path / "checkpoint.pt"
    torch.save({"model": fairseq_state}, path)
    seed_everything(1)
    target = build(share_embeddings=False, share_decoder_io=False)
    load_fairseq_checkpoint(path, model=target)
    src, prev = torch.randint(4, 30, (2, 5)), torch.randint(4, 30, (2, 4))
    with torch.no_grad():
        torch.testing.assert_close(target(src, prev), source(src, prev))


def test_fused_in_proj_is_split_into_q_k_v():
    seed_everything(2)
    model = build()
    state = to_fairseq_state_dict(model)
    for prefix in ("encoder.layers.0.self_attn", "decoder.layers.0.encoder_attn"):
        for kind in ("weight", "bias"):
            parts = [state.pop(f"{prefix}.{p}_proj.{kind}") for p in ("q", "k", "v")]
            state[f"{prefix}.in_proj_{kind}"] = torch.cat(parts, dim=0)
    converted = convert_fairseq_state_dict(state, model)
    torch.testing.assert_close(converted["encoder.layers.0.self_attn.k_proj.weight"],
                               model.state_dict()["encoder.layers.0.self_attn.k_proj.weight"])


def test_a_pre_ln_checkpoint_does_not_load_into_a_post_ln_model():
    pre_ln_state = to_fairseq_state_dict(build("pre_ln"))
    with pytest.raises(CheckpointMismatch) as error:
        convert_fairseq_state_dict(pre_ln_state, build("post_ln"))
    assert "unexpected in checkpoint: encoder.layer_norm.weight" in str(error.value)


def test_a_wrong_shape_names_the_key():
    state = to_fairseq_state_dict(build(d_ff=64))
    with pytest.raises(CheckpointMismatch, match=r"shape of decoder.layers.0.fc1.weight: checkpoint \(64, 16\)"):
        convert_fairseq_state_dict(state, build(d_ff=32))


def test_config_from_official_b2t_args():
    args = Namespace(encoder_embed_dim=512, encoder_attention_heads=8, encoder_ffn_embed_dim=2048,
                     encoder_layers=18, decoder_layers=18, residual_bottom_to_top=True, no_layer_norm=False,
                     dropout=0.5, share_all_embeddings=True)
    cfg = config_from_fairseq_args(args, vocab_size=32768)
    assert (cfg.variant, cfg.encoder_layers, cfg.share_embeddings, cfg.dropout) == ("b2t", 18, True, 0.5)
    assert config_from_fairseq_args(Namespace(encoder_normalize_before=True), 100).variant == "pre_ln"
    no_ln = Namespace(residual_bottom_to_top=True, no_layer_norm=True)
    assert config_from_fairseq_args(no_ln, 100).variant == "b2t_no_ln"


def test_load_builds_the_model_from_stored_args(tmp_path):
    seed_everything(3)
    source = build("pre_ln", share_embeddings=True)
    args = Namespace(encoder_embed_dim=16, encoder_attention_heads=2, encoder_ffn_embed_dim=32, encoder_layers=2,
                     decoder_layers=2, encoder_normalize_before=True, decoder_normalize_before=True,
                     dropout=0.0, share_all_embeddings=True)
    path = tmp_path / "best.pt"
    torch.save({"args": args, "model": to_fairseq_state_dict(source)}, path)
    loaded = load_fairseq_checkpoint(path)
    assert loaded.cfg.variant == "pre_ln"
    src = torch.randint(4, 30, (1, 4))
    with torch.no_grad():
        torch.testing.assert_close(loaded.eval()(src, src), source(src, src))

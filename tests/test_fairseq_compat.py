"""Loading fairseq checkpoints: a round trip, the renamed keys, the weights-only read, the stored args compared
with the model, and errors that name the key or the flag."""

import collections
import sys
import types
from argparse import Namespace

import numpy as np
import pytest
import torch

from b2t_lib import EncoderDecoder, LanguageModel, ModelConfig, seed_everything
from b2t_lib.fairseq_compat import (
    CheckpointMismatch,
    UntrustedCheckpoint,
    config_from_fairseq_args,
    convert_fairseq_state_dict,
    load_fairseq_checkpoint,
    to_fairseq_checkpoint,
    to_fairseq_state_dict,
)


def build(variant="b2t", **overrides):
    values = dict(
        vocab_size=30, d_model=16, n_heads=2, d_ff=32, encoder_layers=2, decoder_layers=2, variant=variant, dropout=0.0
    )
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
    torch.testing.assert_close(
        converted["encoder.layers.0.self_attn.k_proj.weight"],
        model.state_dict()["encoder.layers.0.self_attn.k_proj.weight"],
    )


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
    args = Namespace(
        encoder_embed_dim=512,
        encoder_attention_heads=8,
        encoder_ffn_embed_dim=2048,
        encoder_layers=18,
        decoder_layers=18,
        residual_bottom_to_top=True,
        no_layer_norm=False,
        dropout=0.5,
        share_all_embeddings=True,
    )
    cfg = config_from_fairseq_args(args, vocab_size=32768)
    assert (cfg.variant, cfg.encoder_layers, cfg.share_embeddings, cfg.dropout) == ("b2t", 18, True, 0.5)
    # Both stacks must say normalize-before: fairseq's default for an unset flag is False, so
    # encoder_normalize_before alone is a Pre-LN encoder with a Post-LN decoder (refused, see below).
    pre_ln = Namespace(encoder_normalize_before=True, decoder_normalize_before=True)
    assert config_from_fairseq_args(pre_ln, 100).variant == "pre_ln"
    no_ln = Namespace(residual_bottom_to_top=True, no_layer_norm=True)
    assert config_from_fairseq_args(no_ln, 100).variant == "b2t_no_ln"


def test_load_builds_the_model_from_stored_args(tmp_path):
    seed_everything(3)
    source = build("pre_ln", share_embeddings=True)
    args = Namespace(
        encoder_embed_dim=16,
        encoder_attention_heads=2,
        encoder_ffn_embed_dim=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_normalize_before=True,
        decoder_normalize_before=True,
        dropout=0.0,
        share_all_embeddings=True,
    )
    path = tmp_path / "best.pt"
    torch.save({"args": args, "model": to_fairseq_state_dict(source)}, path)
    loaded = load_fairseq_checkpoint(path)
    assert loaded.cfg.variant == "pre_ln"
    src = torch.randint(4, 30, (1, 4))
    with torch.no_grad():
        torch.testing.assert_close(loaded.eval()(src, src), source(src, src))


# ------------------------------------------------------------------------------ a realistic checkpoint
def fairseq_args(**overrides):
    """The args fairseq 0.9 (the B2T fork) stores for a small transformer_wmt_en_de B2T run."""
    values = dict(
        arch="transformer_wmt_en_de",
        task="translation",
        criterion="label_smoothed_cross_entropy",
        optimizer="adam",
        adam_betas="(0.9, 0.98)",
        lr=[0.001],
        lr_scheduler="inverse_sqrt",
        seed=1,
        max_tokens=3584,
        update_freq=[16],
        save_dir="checkpoints/b2t",
        fp16=True,
        data="data-bin/wmt16_en_de",
        encoder_embed_dim=16,
        encoder_ffn_embed_dim=32,
        encoder_layers=2,
        encoder_attention_heads=2,
        decoder_embed_dim=16,
        decoder_ffn_embed_dim=32,
        decoder_layers=2,
        decoder_attention_heads=2,
        decoder_output_dim=16,
        decoder_input_dim=16,
        encoder_normalize_before=False,
        decoder_normalize_before=False,
        encoder_learned_pos=False,
        decoder_learned_pos=False,
        residual_bottom_to_top=True,
        no_layer_norm=False,
        share_all_embeddings=True,
        share_decoder_input_output_embed=True,
        dropout=0.3,
        attention_dropout=0.0,
        activation_dropout=0.0,
        activation_fn="relu",
        adaptive_softmax_cutoff=None,
        no_token_positional_embeddings=False,
        no_scale_embedding=False,
        layernorm_embedding=False,
        no_cross_attention=False,
        cross_self_attention=False,
        layer_wise_attention=False,
        encoder_layers_to_keep=None,
        decoder_layers_to_keep=None,
        encoder_layerdrop=0,
        decoder_layerdrop=0,
        one_emb=None,
        represent_length_by_lrpe=False,
        represent_length_by_ldpe=False,
        ordinary_sinpos=False,
        sampling_method="worddrop",
        enc_replace_rate=0.1,
        dec_replace_rate=0.1,
        decay_val=1000,
        max_source_positions=1024,
        max_target_positions=1024,
    )
    values.update(overrides)
    return Namespace(**values)


def fairseq_checkpoint(model, args):
    """What fairseq's save_state writes: the model, the args and the training state (plain types)."""
    return {
        "args": args,
        "model": to_fairseq_state_dict(model),
        "optimizer_history": [
            {
                "criterion_name": "LabelSmoothedCrossEntropyCriterion",
                "optimizer_name": "FP16Optimizer",
                "lr_scheduler_state": {"best": 3.87},
                "num_updates": 50000,
            }
        ],
        "extra_state": {
            "epoch": 31,
            "train_iterator": {"epoch": 31, "iterations_in_epoch": 0, "shuffle": True},
            "val_loss": np.float64(3.87),
            "best": 3.86,
            "metrics": collections.OrderedDict(
                train=[(0, "loss", "AverageMeter", {"val": 3.9, "sum": 7.8, "count": 2, "round": 3})]
            ),
        },
        "last_optimizer_state": {
            "state": {0: {"step": 50000, "exp_avg": torch.zeros(3)}},
            "param_groups": [{"lr": 1e-4, "betas": (0.9, 0.98), "params": [0]}],
            "loss_scale": 64.0,
        },
    }


@pytest.mark.parametrize("zip_format", [True, False])
def test_a_realistic_fairseq_checkpoint_loads_weights_only(tmp_path, zip_format):
    seed_everything(4)
    source = build("b2t", share_embeddings=True)
    path = tmp_path / "checkpoint_best.pt"
    torch.save(fairseq_checkpoint(source, fairseq_args()), path, _use_new_zipfile_serialization=zip_format)
    loaded = load_fairseq_checkpoint(path)  # weights-only: no trust flag needed
    assert (loaded.cfg.variant, loaded.cfg.word_dropout, loaded.cfg.dropout) == ("b2t", 0.1, 0.3)
    filled = load_fairseq_checkpoint(path, model=build("b2t", share_embeddings=True))
    src, prev = torch.randint(4, 30, (2, 5)), torch.randint(4, 30, (2, 4))
    with torch.no_grad():
        torch.testing.assert_close(loaded.eval()(src, prev), source(src, prev))
        torch.testing.assert_close(filled.eval()(src, prev), source(src, prev))


def test_fairseq_09_training_meters_load_without_fairseq(tmp_path, monkeypatch):
    """fairseq 0.9.0 stores its meter objects in extra_state; they load as inert records, fairseq absent."""
    meters = types.ModuleType("fairseq.meters")

    class AverageMeter:
        def __init__(self):
            self.val, self.avg, self.sum, self.count = 3.9, 3.9, 7.8, 2

    AverageMeter.__module__, AverageMeter.__qualname__ = "fairseq.meters", "AverageMeter"
    meters.AverageMeter = AverageMeter
    monkeypatch.setitem(sys.modules, "fairseq", types.ModuleType("fairseq"))
    monkeypatch.setitem(sys.modules, "fairseq.meters", meters)
    checkpoint = fairseq_checkpoint(build("b2t", share_embeddings=True), fairseq_args())
    checkpoint["extra_state"]["train_meters"] = collections.OrderedDict(train_loss=AverageMeter())
    torch.save(checkpoint, tmp_path / "old.pt")
    monkeypatch.delitem(sys.modules, "fairseq.meters")
    monkeypatch.delitem(sys.modules, "fairseq")
    assert load_fairseq_checkpoint(tmp_path / "old.pt").cfg.variant == "b2t"


class Mystery:
    """A type no allow-list names: unpickling it could run code, so a weights-only load refuses it."""


def test_a_file_that_needs_more_than_the_allow_list_is_refused_by_type_unless_trusted(tmp_path):
    checkpoint = fairseq_checkpoint(build("b2t", share_embeddings=True), fairseq_args())
    checkpoint["extra_state"]["callback"] = Mystery()
    path = tmp_path / "odd.pt"
    torch.save(checkpoint, path)
    with pytest.raises(UntrustedCheckpoint, match=r"Mystery.*trust_checkpoint=True"):
        load_fairseq_checkpoint(path)
    assert load_fairseq_checkpoint(path, trust_checkpoint=True).cfg.variant == "b2t"


# -------------------------------------------------------------------- stored args against the model
def save(tmp_path, model, args):
    path = tmp_path / "checkpoint.pt"
    torch.save(fairseq_checkpoint(model, args), path)
    return path


@pytest.mark.parametrize(
    "checkpoint_variant, flags, model_variant, named",
    [
        ("b2t", {}, "post_ln", "--residual-bottom-to-top: checkpoint True, model (variant 'post_ln') False"),
        ("b2t", {}, "admin", "--residual-bottom-to-top: checkpoint True"),
        ("post_ln", {"residual_bottom_to_top": False}, "b2t", "--residual-bottom-to-top: checkpoint False"),
        ("b2t_no_ln", {"no_layer_norm": True}, "b2t", "--no-layer-norm: checkpoint True"),
    ],
)
def test_a_checkpoint_of_another_variant_is_refused_by_flag_even_when_the_keys_fit(
    tmp_path, checkpoint_variant, flags, model_variant, named
):
    # B2T and Post-LN have identical key sets (so do B2T w/o LN and T-Fixup): only the args tell them apart.
    path = save(tmp_path, build(checkpoint_variant, share_embeddings=True), fairseq_args(**flags))
    target = build(model_variant, share_embeddings=True)
    if {checkpoint_variant, model_variant} == {"b2t", "post_ln"}:
        assert set(to_fairseq_state_dict(target)) == set(torch.load(path, weights_only=False)["model"])
    with pytest.raises(CheckpointMismatch, match=named.replace("(", r"\(").replace(")", r"\)")):
        load_fairseq_checkpoint(path, model=target)


@pytest.mark.parametrize(
    "args_change, model_change, named",
    [
        ({"encoder_attention_heads": 4, "decoder_attention_heads": 4}, {}, "n_heads: checkpoint 4"),
        ({"encoder_layers": 3}, {}, "encoder_layers: checkpoint 3"),
        (
            {"share_all_embeddings": False, "share_decoder_input_output_embed": False},
            {},
            "share_embeddings: checkpoint False",
        ),
    ],
)
def test_sizes_and_sharing_are_compared_by_name(tmp_path, args_change, model_change, named):
    path = save(tmp_path, build("b2t", share_embeddings=True), fairseq_args(**args_change))
    with pytest.raises(CheckpointMismatch, match=named):
        load_fairseq_checkpoint(path, model=build("b2t", share_embeddings=True, **model_change))


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            {"encoder_normalize_before": True, "decoder_normalize_before": True},
            "combines --residual-bottom-to-top with --encoder/decoder-normalize-before",
        ),
        (
            {"residual_bottom_to_top": False, "encoder_normalize_before": True},
            "--encoder-normalize-before=True but --decoder-normalize-before=False",
        ),
        ({"residual_bottom_to_top": False, "no_layer_norm": True}, "variant with that forward pass is 'tfixup'"),
        ({"enc_replace_rate": 0.1, "dec_replace_rate": 0.2}, "one word-dropout rate"),
        ({"sampling_method": "uniform"}, "--sampling-method uniform"),
        ({"encoder_learned_pos": True}, "learned positions"),
        ({"layernorm_embedding": True}, "LayerNorm on the embeddings"),
        ({"decoder_ffn_embed_dim": 64}, "--encoder-ffn-embed-dim 32 but --decoder-ffn-embed-dim 64"),
        ({"activation_fn": "gelu"}, "ReLU only"),
    ],
)
def test_what_b2t_lib_cannot_represent_is_refused_not_approximated(tmp_path, flags, message):
    args = fairseq_args(**flags)
    with pytest.raises(CheckpointMismatch, match=message):
        config_from_fairseq_args(args, vocab_size=30)
    path = save(tmp_path, build("b2t", share_embeddings=True), args)
    with pytest.raises(CheckpointMismatch, match=message):
        load_fairseq_checkpoint(path)


def test_b2t_with_normalize_before_is_refused_also_into_a_model_you_built(tmp_path):
    args = fairseq_args(encoder_normalize_before=True, decoder_normalize_before=True)
    path = save(tmp_path, build("b2t", share_embeddings=True), args)
    for variant in ("b2t", "pre_ln"):
        with pytest.raises(CheckpointMismatch, match="no such variant"):
            load_fairseq_checkpoint(path, model=build(variant, share_embeddings=True))


def test_no_layer_norm_without_b2t_loads_into_a_tfixup_model(tmp_path):
    source = build("tfixup", share_embeddings=True)
    path = save(tmp_path, source, fairseq_args(residual_bottom_to_top=False, no_layer_norm=True))
    target = load_fairseq_checkpoint(path, model=build("tfixup", share_embeddings=True))
    src = torch.randint(4, 30, (1, 4))
    with torch.no_grad():
        torch.testing.assert_close(target.eval()(src, src), source(src, src))


def test_word_dropout_maps_from_worddrop_and_training_options_are_not_compared(tmp_path):
    assert config_from_fairseq_args(fairseq_args(), 30).word_dropout == 0.1
    assert config_from_fairseq_args(fairseq_args(sampling_method="none"), 30).word_dropout == 0.0
    path = save(tmp_path, build("b2t", share_embeddings=True), fairseq_args(dropout=0.5))
    load_fairseq_checkpoint(path, model=build("b2t", share_embeddings=True, dropout=0.1, word_dropout=0.0))


def test_a_language_model_checkpoint_reads_the_decoder_sizes(tmp_path):
    seed_everything(5)
    cfg = ModelConfig(
        vocab_size=30, d_model=16, n_heads=2, d_ff=48, encoder_layers=0, decoder_layers=3, variant="pre_ln", dropout=0.0
    )
    source = LanguageModel(cfg).eval()
    args = Namespace(
        arch="transformer_lm",
        decoder_embed_dim=16,
        decoder_ffn_embed_dim=48,
        decoder_layers=3,
        decoder_attention_heads=2,
        decoder_normalize_before=True,
        decoder_learned_pos=False,
        share_decoder_input_output_embed=True,
        dropout=0.1,
        adaptive_input=False,
        character_embeddings=False,
        decoder_output_dim=16,
        decoder_input_dim=16,
    )
    path = tmp_path / "lm.pt"
    torch.save({"args": args, "model": to_fairseq_state_dict(source)}, path)
    loaded = load_fairseq_checkpoint(path)
    assert isinstance(loaded, LanguageModel)
    assert (loaded.cfg.d_ff, loaded.cfg.decoder_layers, loaded.cfg.variant) == (48, 3, "pre_ln")
    tokens = torch.randint(4, 30, (1, 5))
    with torch.no_grad():
        torch.testing.assert_close(loaded.eval()(tokens), source(tokens))
    with pytest.raises(CheckpointMismatch, match="--normalize-before: checkpoint True"):
        load_fairseq_checkpoint(path, model=LanguageModel(ModelConfig(**{**cfg.to_dict(), "variant": "post_ln"})))


def test_a_pre_ln_language_model_without_final_norm_loads_as_transformer_lm_wiki103_builds_it(tmp_path):
    seed_everything(6)
    cfg = ModelConfig(
        vocab_size=30,
        d_model=16,
        n_heads=2,
        d_ff=48,
        encoder_layers=0,
        decoder_layers=2,
        variant="pre_ln",
        dropout=0.0,
        decoder_final_norm=False,
    )
    source = LanguageModel(cfg).eval()
    assert source.decoder.layer_norm is None
    args = Namespace(
        arch="transformer_lm",
        decoder_embed_dim=16,
        decoder_ffn_embed_dim=48,
        decoder_layers=2,
        decoder_attention_heads=2,
        decoder_normalize_before=True,
        no_decoder_final_norm=True,
        share_decoder_input_output_embed=True,
        dropout=0.0,
    )
    path = tmp_path / "lm.pt"
    torch.save({"args": args, "model": to_fairseq_state_dict(source)}, path)
    loaded = load_fairseq_checkpoint(path)
    assert loaded.cfg.decoder_final_norm is False and loaded.decoder.layer_norm is None
    tokens = torch.randint(4, 30, (1, 5))
    with torch.no_grad():
        torch.testing.assert_close(loaded.eval()(tokens), source(tokens))


@pytest.mark.parametrize("variant", ["post_ln", "pre_ln", "b2t", "b2t_no_ln"])
def test_a_model_written_in_fairseq_format_loads_back_as_the_same_model(variant, tmp_path):
    source = build(variant, share_embeddings=True, word_dropout=0.1)
    torch.save(to_fairseq_checkpoint(source), tmp_path / "checkpoint.pt")
    loaded = load_fairseq_checkpoint(tmp_path / "checkpoint.pt")  # built from the written args alone
    assert loaded.cfg.variant == variant and loaded.cfg.word_dropout == 0.1 and loaded.cfg.share_embeddings
    assert source.state_dict().keys() == loaded.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(source.state_dict().values(), loaded.state_dict().values()))
    lm = LanguageModel(ModelConfig(vocab_size=30, d_model=16, n_heads=2, d_ff=32, encoder_layers=0, decoder_layers=2,
                                   variant=variant, share_embeddings=False, share_decoder_io=True))  # fmt: skip
    assert load_fairseq_checkpoint(to_fairseq_checkpoint(lm)).cfg.decoder_layers == 2


def test_a_baseline_has_no_fairseq_flags_and_is_not_written():
    with pytest.raises(CheckpointMismatch, match="variant 'dlcl' has no fairseq flags"):
        to_fairseq_checkpoint(build("dlcl"))

"""Load fairseq checkpoints (the official B2T ones included) into b2t_lib models, and write them back.

b2t_lib keeps fairseq's module names, so most keys map one to one. What differs:

* fairseq keeps bookkeeping entries (``encoder.version``, ``*.embed_positions._float_tensor``): dropped;
* fairseq 0.9 names an unshared output projection ``decoder.embed_out``; newer fairseq and b2t_lib
  use ``decoder.output_projection.weight``;
* very old checkpoints fuse q/k/v into ``in_proj_weight``/``in_proj_bias``: split into three.

Usage::

    from b2t_lib.fairseq_compat import load_fairseq_checkpoint
    model = load_fairseq_checkpoint("checkpoint_best.pt")          # builds the model from the stored args
    model = load_fairseq_checkpoint(torch.load(...), model=model)  # or fills a model you built

Every mismatch is reported by key: a missing key, an unexpected key (often a variant mismatch: a
Pre-LN checkpoint has ``encoder.layer_norm.*``, a Post-LN model has not) or a wrong shape.
"""
from __future__ import annotations

from pathlib import Path

import torch

from .config import ModelConfig
from .model import EncoderDecoder, LanguageModel


class CheckpointMismatch(ValueError):
    """A fairseq state dict does not fit the model; the message names each offending key."""


def convert_fairseq_state_dict(fairseq_state: dict, model: torch.nn.Module) -> dict:
    """Rename a fairseq state dict to b2t_lib's names and check it against ``model`` key by key."""
    converted: dict[str, torch.Tensor] = {}
    for key, value in fairseq_state.items():
        if key.endswith(".version") or key.endswith("_float_tensor"):
            continue  # fairseq bookkeeping, no parameters
        if key == "decoder.embed_out":
            converted["decoder.output_projection.weight"] = value
        elif key.endswith("in_proj_weight") or key.endswith("in_proj_bias"):
            prefix, kind = key.rsplit(".in_proj_", 1)  # kind: 'weight' or 'bias'
            for name, part in zip(("q_proj", "k_proj", "v_proj"), value.chunk(3, dim=0)):
                converted[f"{prefix}.{name}.{kind}"] = part
        else:
            converted[key] = value

    expected = model.state_dict()
    # A shared output projection may be stored explicitly by newer fairseq: it must equal the embedding.
    if "decoder.output_projection.weight" in converted and "decoder.output_projection.weight" not in expected:
        tied = converted.pop("decoder.output_projection.weight")
        if not torch.equal(tied, converted.get("decoder.embed_tokens.weight", tied)):
            raise CheckpointMismatch("the checkpoint has an untied output projection but the model shares it "
                                     "with the embeddings; build the model with share_decoder_io=False")

    problems = []
    for key in sorted(set(expected) - set(converted)):
        problems.append(f"missing in checkpoint: {key} {tuple(expected[key].shape)}")
    for key in sorted(set(converted) - set(expected)):
        problems.append(f"unexpected in checkpoint: {key} {tuple(converted[key].shape)}")
    for key in sorted(set(expected) & set(converted)):
        if tuple(expected[key].shape) != tuple(converted[key].shape):
            problems.append(f"shape of {key}: checkpoint {tuple(converted[key].shape)}, "
                            f"model {tuple(expected[key].shape)}")
    if problems:
        hint = ("check the variant (Pre-LN has encoder.layer_norm/decoder.layer_norm, B2T w/o LN has no "
                "layer norms), the layer counts, d_model, d_ff and the vocabulary size")
        raise CheckpointMismatch("fairseq state dict does not fit the model:\n  " + "\n  ".join(problems)
                                 + f"\n({hint})")
    return converted


def to_fairseq_state_dict(model: torch.nn.Module) -> dict:
    """The inverse of :func:`convert_fairseq_state_dict`: fairseq 0.9 key names."""
    state = {}
    for key, value in model.state_dict().items():
        state["decoder.embed_out" if key == "decoder.output_projection.weight" else key] = value
    for stack in ("encoder", "decoder"):
        if hasattr(model, stack):
            state[f"{stack}.version"] = torch.tensor([3.0])
    return state


def config_from_fairseq_args(args, vocab_size: int) -> ModelConfig:
    """Build a :class:`ModelConfig` from a fairseq checkpoint's ``args`` (an argparse.Namespace or dict)."""
    get = (args.get if isinstance(args, dict) else lambda k, d=None: getattr(args, k, d))
    if get("encoder_learned_pos", False) or get("decoder_learned_pos", False):
        raise CheckpointMismatch("the checkpoint uses learned positions; b2t_lib implements fairseq's "
                                 "sinusoidal positions only")
    if get("residual_bottom_to_top", False):
        variant = "b2t_no_ln" if get("no_layer_norm", False) else "b2t"
    elif get("encoder_normalize_before", False) or get("decoder_normalize_before", False):
        variant = "pre_ln"
    else:
        variant = "post_ln"
    return ModelConfig(
        vocab_size=vocab_size,
        d_model=get("encoder_embed_dim", 512),
        n_heads=get("encoder_attention_heads", 8),
        d_ff=get("encoder_ffn_embed_dim", 2048),
        encoder_layers=get("encoder_layers", 6),
        decoder_layers=get("decoder_layers", 6),
        variant=variant,
        dropout=get("dropout", 0.1),
        attention_dropout=get("attention_dropout", 0.0),
        activation_dropout=get("activation_dropout", get("relu_dropout", 0.0)),
        share_embeddings=bool(get("share_all_embeddings", False)),
        share_decoder_io=bool(get("share_decoder_input_output_embed", False) or get("share_all_embeddings", False)),
        # The official code rescales B2T weights at construction; the stored weights already carry it.
        b2t_rescale_init=False,
    )


def load_fairseq_checkpoint(checkpoint, model: torch.nn.Module | None = None) -> torch.nn.Module:
    """Load a fairseq checkpoint (a path, or the dict ``torch.load`` returns) into ``model``.

    Without ``model``, the model is built from the checkpoint's ``args`` (encoder-decoder, or a
    language model when the checkpoint has no encoder).
    """
    if isinstance(checkpoint, (str, Path)):
        path = Path(checkpoint)
        if not path.exists():
            raise FileNotFoundError(f"no checkpoint at {path}")
        checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    state = checkpoint.get("model", checkpoint)
    if model is None:
        args = checkpoint.get("args") or (checkpoint.get("cfg") or {}).get("model")
        if args is None:
            raise CheckpointMismatch("the checkpoint stores no 'args': build the model yourself and pass model=")
        embed_key = "encoder.embed_tokens.weight" if "encoder.embed_tokens.weight" in state else "decoder.embed_tokens.weight"
        cfg = config_from_fairseq_args(args, vocab_size=state[embed_key].shape[0])
        if "encoder.embed_tokens.weight" in state:
            model = EncoderDecoder(cfg)
        else:
            cfg.encoder_layers = 0
            model = LanguageModel(cfg)
    model.load_state_dict(convert_fairseq_state_dict(state, model), strict=True)
    return model

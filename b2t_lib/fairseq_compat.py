"""Load fairseq checkpoints (the official B2T ones included) into b2t_lib models, and write them back.

b2t_lib keeps fairseq's module names, so most keys map one to one. What differs:

* fairseq keeps bookkeeping entries (``encoder.version``, ``*.embed_positions._float_tensor``): dropped;
* fairseq 0.9 names an unshared output projection ``decoder.embed_out``; newer fairseq and b2t_lib
  use ``decoder.output_projection.weight``;
* very old checkpoints fuse q/k/v into ``in_proj_weight``/``in_proj_bias``: split into three.

Usage::

    from b2t_lib.fairseq_compat import load_fairseq_checkpoint
    model = load_fairseq_checkpoint("checkpoint_best.pt")          # builds the model from the stored args
    model = load_fairseq_checkpoint("checkpoint_best.pt", model=model)  # or fills a model you built

Three checks stand between a file and a model:

1. **The file.** It is read with ``torch.load(weights_only=True)``: tensors, plain containers and the
   few harmless types a fairseq checkpoint holds besides them (:data:`SAFE_GLOBALS`: the stored
   ``argparse.Namespace``, numpy scalars, fairseq 0.9's training meters). A file that needs any other
   type is refused with the type's name, since unpickling it could run code from the file; pass
   ``trust_checkpoint=True`` for a file whose origin you trust.
2. **The stored configuration.** The ``args`` must describe a model b2t_lib can build, and, when you
   pass ``model=``, the model you built: the variant flags (``--encoder/decoder-normalize-before``,
   ``--residual-bottom-to-top``, ``--no-layer-norm``), the layer counts, the sizes and the sharing of
   embeddings. A mismatch or a flag combination b2t_lib cannot represent (B2T on top of Pre-LN, a
   Pre-LN encoder with a Post-LN decoder, ...) is refused by name, never approximated. Training-only
   options (dropout, word dropout) are not compared with a model you built.
3. **The weights.** Every key and shape: a missing key, an unexpected key (often a variant mismatch: a
   Pre-LN checkpoint has ``encoder.layer_norm.*``, a Post-LN model has not) or a wrong shape.
"""

from __future__ import annotations

import argparse
import pickle
from pathlib import Path

import numpy as np
import torch

from .config import ModelConfig
from .files import CheckpointMismatch, UntrustedCheckpoint
from .model import EncoderDecoder, LanguageModel
from .variants import get_variant


# ----------------------------------------------------------------------------------- reading the file
class _FairseqMeter:
    """Stands in for fairseq 0.9's training meters (``extra_state['train_meters']``): their pickled
    numbers land in ``__dict__``; no fairseq code is imported or run."""


_numpy_scalar = (np._core if hasattr(np, "_core") else np.core).multiarray.scalar

# The globals a fairseq checkpoint may name besides tensors and plain containers, as
# (object, the name the pickle stores). Each is data only: no method of it runs code from the file.
SAFE_GLOBALS = (
    [
        (argparse.Namespace, "argparse.Namespace"),  # checkpoint["args"]
        (_numpy_scalar, "numpy.core.multiarray.scalar"),  # numpy numbers in extra_state (numpy 1.x name)
        (_numpy_scalar, "numpy._core.multiarray.scalar"),  # (numpy 2.x name)
        (np.dtype, "numpy.dtype"),
    ]
    + [  # the dtype of such a number is rebuilt as an instance of its numpy DType class
        (getattr(np.dtypes, name), f"numpy.dtypes.{name}")
        for name in ("Float16DType", "Float32DType", "Float64DType", "Int32DType", "Int64DType", "BoolDType")
        if hasattr(getattr(np, "dtypes", None), name)
    ]
    + [(_FairseqMeter, f"fairseq.meters.{name}") for name in ("AverageMeter", "TimeMeter", "StopwatchMeter")]
)
_SAFE_NAMES = {name for _, name in SAFE_GLOBALS}


def read_checkpoint_file(path: str | Path, trust_checkpoint: bool = False) -> dict:
    """``torch.load`` a checkpoint file on the CPU, weights-only with :data:`SAFE_GLOBALS` unless
    ``trust_checkpoint`` (then any pickled object loads: only for files you trust)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint at {path}")
    if trust_checkpoint:
        return torch.load(path, map_location="cpu", weights_only=False)
    try:
        with torch.serialization.safe_globals(SAFE_GLOBALS):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        try:
            found = torch.serialization.get_unsafe_globals_in_checkpoint(path)
        except Exception:  # e.g. a legacy (non-zip) file: name what the unpickler said instead
            found = []
        unsafe = sorted(set(found) - _SAFE_NAMES)
        what = ", ".join(unsafe) if unsafe else f"an object a weights-only load cannot read ({error})"
        raise UntrustedCheckpoint(
            f"{path} holds {what}: a weights-only load refuses it, since unpickling it could run code from "
            f"the file. If you trust where the file comes from, pass trust_checkpoint=True"
        ) from None


# ------------------------------------------------------------------------------ the state dict
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
            raise CheckpointMismatch(
                "the checkpoint has an untied output projection but the model shares it "
                "with the embeddings; build the model with share_decoder_io=False"
            )

    problems = []
    for key in sorted(set(expected) - set(converted)):
        problems.append(f"missing in checkpoint: {key} {tuple(expected[key].shape)}")
    for key in sorted(set(converted) - set(expected)):
        problems.append(f"unexpected in checkpoint: {key} {tuple(converted[key].shape)}")
    for key in sorted(set(expected) & set(converted)):
        if tuple(expected[key].shape) != tuple(converted[key].shape):
            problems.append(
                f"shape of {key}: checkpoint {tuple(converted[key].shape)}, model {tuple(expected[key].shape)}"
            )
    if problems:
        hint = (
            "check the variant (Pre-LN has encoder.layer_norm/decoder.layer_norm, B2T w/o LN has no "
            "layer norms), the layer counts, d_model, d_ff and the vocabulary size"
        )
        raise CheckpointMismatch(
            "fairseq state dict does not fit the model:\n  " + "\n  ".join(problems) + f"\n({hint})"
        )
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


FAIRSEQ_VARIANTS = ("post_ln", "pre_ln", "b2t", "b2t_no_ln")  # the layouts the B2T fork's flags describe


def fairseq_args(cfg: ModelConfig) -> argparse.Namespace:
    """The ``args`` fairseq 0.9 (the B2T fork) would store for a model of ``cfg``: the inverse of
    :func:`config_from_fairseq_args` for what fairseq can express (Post-LN, Pre-LN, B2T, B2T w/o LN)."""
    if cfg.variant not in FAIRSEQ_VARIANTS:  # the baselines' own switches are no fairseq flags
        raise CheckpointMismatch(
            f"variant {cfg.variant!r} has no fairseq flags; fairseq expresses {', '.join(FAIRSEQ_VARIANTS)}"
        )
    flags = variant_flags(cfg.variant)
    decoder_only = cfg.encoder_layers == 0
    sizes = dict(embed_dim=cfg.d_model, ffn_embed_dim=cfg.d_ff, attention_heads=cfg.n_heads)
    values = dict(
        arch="transformer_lm" if decoder_only else "transformer_wmt_en_de",
        task="language_modeling" if decoder_only else "translation",
        **{f"decoder_{k}": v for k, v in sizes.items()},
        decoder_layers=cfg.decoder_layers,
        decoder_normalize_before=flags["normalize_before"],
        residual_bottom_to_top=flags["residual_bottom_to_top"],
        no_layer_norm=flags["no_layer_norm"],
        share_decoder_input_output_embed=cfg.share_decoder_io,
        dropout=cfg.dropout,
        attention_dropout=cfg.attention_dropout,
        activation_dropout=cfg.activation_dropout,
        activation_fn="relu",
        sampling_method="worddrop" if cfg.word_dropout > 0 else "none",
        enc_replace_rate=cfg.word_dropout,
        dec_replace_rate=cfg.word_dropout,
        max_target_positions=cfg.max_positions,
        no_decoder_final_norm=not cfg.decoder_final_norm,
    )
    if not decoder_only:
        values.update(
            {f"encoder_{k}": v for k, v in sizes.items()},
            encoder_layers=cfg.encoder_layers,
            encoder_normalize_before=flags["normalize_before"],
            share_all_embeddings=cfg.share_embeddings,
            max_source_positions=cfg.max_positions,
        )
    return argparse.Namespace(**values)


def to_fairseq_checkpoint(model: torch.nn.Module) -> dict:
    """What :func:`load_fairseq_checkpoint` (and fairseq) reads: ``{"args": ..., "model": ...}`` for ``model``."""
    return {"args": fairseq_args(model.cfg), "model": to_fairseq_state_dict(model)}


# -------------------------------------------------------------------------- the stored configuration
def _getter(args):
    return args.get if isinstance(args, dict) else (lambda key, default=None: getattr(args, key, default))


# Architecture options of fairseq (and of the B2T fork) that b2t_lib does not implement: (arg, its
# harmless value, what it means). A checkpoint with any other value is refused.
_UNSUPPORTED = [
    ("encoder_learned_pos", False, "learned positions (b2t_lib has fairseq's sinusoidal ones only)"),
    ("decoder_learned_pos", False, "learned positions (b2t_lib has fairseq's sinusoidal ones only)"),
    ("no_token_positional_embeddings", False, "no positions"),
    ("no_scale_embedding", False, "unscaled embeddings"),
    ("layernorm_embedding", False, "a LayerNorm on the embeddings"),
    ("adaptive_input", False, "adaptive input embeddings"),
    ("adaptive_softmax_cutoff", None, "an adaptive softmax"),
    ("character_embeddings", False, "character embeddings"),
    ("cross_self_attention", False, "cross+self-attention"),
    ("layer_wise_attention", False, "layer-wise attention"),
    ("no_cross_attention", False, "a decoder without cross-attention in an encoder-decoder"),
    ("encoder_layers_to_keep", None, "pruned encoder layers"),
    ("decoder_layers_to_keep", None, "pruned decoder layers"),
    ("one_emb", None, "the B2T fork's one-embedding option"),
    ("represent_length_by_lrpe", False, "length-ratio positions"),
    ("represent_length_by_ldpe", False, "length-difference positions"),
]


def fairseq_variant_flags(args, decoder_only: bool = False) -> dict[str, bool]:
    """The variant flags stored in ``args``: normalize_before, residual_bottom_to_top, no_layer_norm.

    Refuses (:class:`CheckpointMismatch`) combinations b2t_lib cannot build: a Pre-LN encoder with a
    Post-LN decoder (or the reverse), the B2T connection or no-layer-norm on top of normalize-before.
    ``--dont-use-layernorm`` (the T-Fixup code's name) counts as ``--no-layer-norm``.
    """
    get = _getter(args)
    decoder_before = bool(get("decoder_normalize_before", False))
    encoder_before = decoder_before if decoder_only else bool(get("encoder_normalize_before", False))
    flags = {
        "normalize_before": decoder_before,
        "residual_bottom_to_top": bool(get("residual_bottom_to_top", False)),
        "no_layer_norm": bool(get("no_layer_norm", False) or get("dont_use_layernorm", False)),
    }
    if encoder_before != decoder_before:
        raise CheckpointMismatch(
            f"the checkpoint has --encoder-normalize-before={encoder_before} but --decoder-normalize-before="
            f"{decoder_before}; b2t_lib builds both stacks with one variant and cannot represent this model"
        )
    if flags["normalize_before"] and flags["residual_bottom_to_top"]:
        raise CheckpointMismatch(
            "the checkpoint combines --residual-bottom-to-top with --encoder/decoder-normalize-before (the "
            "official code then adds x_inp to a Pre-LN layer); b2t_lib has no such variant and will not "
            "approximate it with plain B2T or Pre-LN"
        )
    if flags["normalize_before"] and flags["no_layer_norm"]:
        raise CheckpointMismatch(
            "the checkpoint combines --no-layer-norm with --encoder/decoder-normalize-"
            "before; b2t_lib has no such variant"
        )
    return flags


def variant_flags(variant: str) -> dict[str, bool]:
    """The fairseq flags that describe a b2t_lib variant's layout. The baselines' own switches are
    not fairseq/B2T-code flags: Admin, DeepNet, DLCL and RealFormer lay out their LayerNorms as
    Post-LN does, T-Fixup has none (``--no-layer-norm`` without ``--residual-bottom-to-top``)."""
    spec = get_variant(variant)
    return {
        "normalize_before": spec.final_norm,
        "residual_bottom_to_top": spec.bottom_to_top,
        "no_layer_norm": not spec.layer_norm,
    }


def _variant_from_flags(flags: dict[str, bool]) -> str:
    if flags["residual_bottom_to_top"]:
        return "b2t_no_ln" if flags["no_layer_norm"] else "b2t"
    if flags["no_layer_norm"]:
        raise CheckpointMismatch(
            "the checkpoint has --no-layer-norm without --residual-bottom-to-top (plain residuals, no "
            "LayerNorm); b2t_lib's variant with that forward pass is 'tfixup': build it yourself "
            "(EncoderDecoder(ModelConfig(variant='tfixup', ...))) and pass it as model= to load the weights"
        )
    return "pre_ln" if flags["normalize_before"] else "post_ln"


def _word_dropout(get, decoder_only: bool) -> float:
    """``--sampling-method worddrop --enc-replace-rate r --dec-replace-rate r`` -> ``word_dropout=r``."""
    method = get("sampling_method", "none") or "none"
    if method == "none":
        return 0.0
    if method != "worddrop":
        raise CheckpointMismatch(
            f"the checkpoint was trained with --sampling-method {method}; b2t_lib "
            f"implements only 'worddrop' (word dropout)"
        )
    decoder_rate = float(get("dec_replace_rate", 0.0) or 0.0)
    if decoder_only:
        return decoder_rate
    encoder_rate = float(get("enc_replace_rate", 0.0) or 0.0)
    if encoder_rate != decoder_rate:
        raise CheckpointMismatch(
            f"the checkpoint has --enc-replace-rate {encoder_rate} and --dec-replace-rate {decoder_rate}; "
            f"b2t_lib has one word-dropout rate (ModelConfig.word_dropout) for both stacks"
        )
    return encoder_rate


def _sizes(args, decoder_only: bool) -> dict:
    """ModelConfig's size fields from fairseq's args (with fairseq's defaults), checked for what
    b2t_lib cannot build: options it lacks, or encoder and decoder of different widths."""
    get = _getter(args)
    for name, harmless, meaning in _UNSUPPORTED:
        value = get(name, harmless)
        if value != harmless and not (harmless is False and value is None):
            raise CheckpointMismatch(
                f"the checkpoint uses --{name.replace('_', '-')}={value!r} ({meaning}); b2t_lib cannot build this model"
            )
    if (get("activation_fn", "relu") or "relu") != "relu":
        raise CheckpointMismatch(
            f"the checkpoint uses --activation-fn {get('activation_fn')}; b2t_lib's FFN uses ReLU only"
        )
    prefix = "decoder" if decoder_only else "encoder"
    d_model = get(f"{prefix}_embed_dim", 512)
    n_heads = get(f"{prefix}_attention_heads", 8)
    d_ff = get(f"{prefix}_ffn_embed_dim", 2048)
    if not decoder_only:
        for name, value in (("embed_dim", d_model), ("attention_heads", n_heads), ("ffn_embed_dim", d_ff)):
            if get(f"decoder_{name}", value) != value:
                raise CheckpointMismatch(
                    f"the checkpoint has --encoder-{name.replace('_', '-')} {value} but "
                    f"--decoder-{name.replace('_', '-')} {get(f'decoder_{name}')}; "
                    f"b2t_lib builds both stacks with one size"
                )
    for name in ("decoder_output_dim", "decoder_input_dim"):
        if get(name, d_model) != d_model:
            raise CheckpointMismatch(
                f"the checkpoint has --{name.replace('_', '-')} {get(name)} != "
                f"d_model {d_model} (projected decoder input/output); b2t_lib cannot build it"
            )
    share_all = bool(get("share_all_embeddings", False))
    return dict(
        d_model=d_model,
        n_heads=n_heads,
        d_ff=d_ff,
        encoder_layers=0 if decoder_only else get("encoder_layers", 6),
        decoder_layers=get("decoder_layers", 6),
        share_embeddings=share_all,
        share_decoder_io=bool(get("share_decoder_input_output_embed", False) or share_all),
    )


def config_from_fairseq_args(args, vocab_size: int, decoder_only: bool = False) -> ModelConfig:
    """Build a :class:`ModelConfig` from a fairseq checkpoint's ``args`` (an argparse.Namespace or dict).

    ``decoder_only`` reads a language model's args (``decoder_*`` sizes, no encoder). Refuses, by name,
    whatever b2t_lib cannot represent exactly (see :func:`fairseq_variant_flags`).
    """
    get = _getter(args)
    variant = _variant_from_flags(fairseq_variant_flags(args, decoder_only))
    return ModelConfig(
        vocab_size=vocab_size,
        variant=variant,
        dropout=get("dropout", 0.1),
        attention_dropout=get("attention_dropout", 0.0),
        activation_dropout=get("activation_dropout", get("relu_dropout", 0.0)),
        word_dropout=_word_dropout(get, decoder_only),  # docs/methods.md §1.7
        max_positions=get("max_target_positions", 1024) or 1024,
        # fairseq builds the decoder's final LayerNorm only with normalize-before and without this flag
        # (transformer_lm_wiki103 sets it, docs/methods.md §1.4)
        decoder_final_norm=not bool(get("no_decoder_final_norm", False)),
        # The official code rescales B2T weights at construction; the stored weights already carry it.
        b2t_rescale_init=False,
        **_sizes(args, decoder_only),
    )


def check_fairseq_args(args, model: torch.nn.Module) -> None:
    """Refuse (:class:`CheckpointMismatch`, naming each flag) a checkpoint whose stored ``args`` do not
    describe ``model``: variant flags, layer counts, sizes, shared embeddings."""
    decoder_only = not hasattr(model, "encoder")
    cfg = model.cfg
    problems = []
    stored = fairseq_variant_flags(args, decoder_only)
    built = variant_flags(cfg.variant)
    for flag, value in stored.items():
        if built[flag] != value:
            problems.append(
                f"--{flag.replace('_', '-')}: checkpoint {value}, model (variant {cfg.variant!r}) {built[flag]}"
            )
    names = {
        "d_model": f"{'decoder' if decoder_only else 'encoder'}_embed_dim",
        "n_heads": f"{'decoder' if decoder_only else 'encoder'}_attention_heads",
        "d_ff": f"{'decoder' if decoder_only else 'encoder'}_ffn_embed_dim",
        "encoder_layers": "encoder_layers",
        "decoder_layers": "decoder_layers",
        "share_embeddings": "share_all_embeddings",
        "share_decoder_io": "share_decoder_input_output_embed",
    }
    for field, value in _sizes(args, decoder_only).items():
        if field == "encoder_layers" and decoder_only:
            continue
        if getattr(cfg, field) != value:
            problems.append(
                f"{field}: checkpoint {value} (--{names[field].replace('_', '-')}), model {getattr(cfg, field)}"
            )
    if problems:
        raise CheckpointMismatch(
            "the checkpoint's stored args do not describe the model you passed:\n  " + "\n  ".join(problems)
        )


def load_fairseq_checkpoint(
    checkpoint, model: torch.nn.Module | None = None, trust_checkpoint: bool = False
) -> torch.nn.Module:
    """Load a fairseq checkpoint (a path, or the dict ``torch.load`` returns) into ``model``.

    Without ``model``, the model is built from the checkpoint's ``args`` (encoder-decoder, or a
    language model when the checkpoint has no encoder). With ``model``, the stored ``args`` (when the
    checkpoint has them) must describe it. A path is read weights-only (:func:`read_checkpoint_file`);
    ``trust_checkpoint=True`` lifts that for a file you trust.
    """
    if isinstance(checkpoint, (str, Path)):
        checkpoint = read_checkpoint_file(checkpoint, trust_checkpoint)
    state = checkpoint.get("model", checkpoint)
    args = checkpoint.get("args") or (checkpoint.get("cfg") or {}).get("model")
    decoder_only = "encoder.embed_tokens.weight" not in state
    if model is None:
        if args is None:
            raise CheckpointMismatch("the checkpoint stores no 'args': build the model yourself and pass model=")
        embed_key = "decoder.embed_tokens.weight" if decoder_only else "encoder.embed_tokens.weight"
        cfg = config_from_fairseq_args(args, vocab_size=state[embed_key].shape[0], decoder_only=decoder_only)
        model = LanguageModel(cfg) if decoder_only else EncoderDecoder(cfg)
    elif args is not None:
        check_fairseq_args(args, model)
    model.load_state_dict(convert_fairseq_state_dict(state, model), strict=True)
    return model

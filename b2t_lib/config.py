"""Model configuration: the one description of a model, checked before anything is built.

:class:`ModelConfig` is the single place a model option is declared. Each field carries its help
text and its group as metadata (:func:`option`), and everything else is generated from the fields:

* ``python -m b2t_lib train --help`` lists every settable field as ``--field-name`` (the trainer's
  :class:`~b2t_lib.train.TrainConfig` holds a ``ModelConfig``; it does not copy its fields);
* presets (:mod:`b2t_lib.presets`) and ``TrainConfig.from_preset(..., d_model=...)`` use the field
  names as they are;
* checkpoints, ``result.json`` and resume checks store :meth:`ModelConfig.to_dict`.

So a new model option is one field here, with its default, ``help`` and ``group`` (types the
command line reads: ``int``, ``float``, ``str``, ``bool``, and ``tuple[int, ...]`` /
``tuple[float, ...]`` written as ``--adaptive-cutoff 20000,60000``). Fields with
``from_data=True`` (the vocabulary size, the special token ids, the speech feature dimension) are
filled by the task from its data and are not command-line options. Fields with ``variants=(...)``
belong to those variants only, fields with ``inputs=(...)`` to those encoder inputs only (the
speech front end's options to ``encoder_input="speech"``): setting one for another is refused.

The special token ids follow fairseq's dictionary (``<s>=0, <pad>=1, </s>=2, <unk>=3``) so that
fairseq checkpoints and their embeddings load without re-indexing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import MISSING, asdict, dataclass, field, fields

from .variants import VARIANTS

from .special_tokens import BOS, EOS, PAD, SPECIAL_TOKENS, UNK  # noqa: F401  (the one home: a leaf module)
from .errors import UserError


class ConfigError(UserError, ValueError):
    """A configuration that cannot give a correct model. The message says what to change."""


def option(
    default=MISSING,
    *,
    help: str,
    group: str,
    choices=None,
    from_data: bool = False,
    variants: tuple[str, ...] = (),
    inputs: tuple[str, ...] = (),
):
    """A dataclass field that carries its command-line help and group.

    ``choices`` is a sequence or a function returning one (evaluated when used, so a registry that
    grows on import is read whole); ``from_data`` marks a field the task fills from its data;
    ``variants`` names the variants an option belongs to, ``inputs`` the encoder inputs.
    """
    metadata = {"help": help, "group": group}
    if choices is not None:
        metadata["choices"] = choices
    if from_data:
        metadata["from_data"] = True
    if variants:
        metadata["variants"] = tuple(variants)
    if inputs:
        metadata["inputs"] = tuple(inputs)
    return field(default=default, metadata=metadata)


def choices_of(f: dataclasses.Field) -> list | None:
    """The allowed values of a field with ``choices`` metadata (called if it is a function), else None."""
    choices = f.metadata.get("choices")
    if choices is None:
        return None
    return list(choices() if callable(choices) else choices)


def flag(name: str) -> str:
    """The command-line spelling of a field name: ``d_model`` -> ``--d-model``."""
    return "--" + name.replace("_", "-")


def variant_names() -> list[str]:
    """Names of the registered variants (the four of the paper and the baselines)."""
    return sorted(VARIANTS)  # ``import b2t_lib`` (which any import of this module runs) registers the baselines


MODEL = "model"
VARIANT_OPTIONS = "model: options of one variant"
ADAPTIVE = "model: adaptive input and softmax (language model)"
SPEECH = "model: speech input (--encoder-input speech; docs/methods.md §3.5)"
DATA = "model: set from the data"
ENCODER_INPUTS = ("tokens", "speech")


def _json_value(value):
    """``value`` as it comes back from JSON: a tuple becomes a list."""
    return list(value) if isinstance(value, tuple) else value


@dataclass
class ModelConfig:
    """Everything that decides the shape and the wiring of a model.

    Defaults are fairseq's ``transformer_wmt_en_de`` (Transformer-base, d=512, 8 heads, FFN 2048,
    6+6 layers, attention and activation dropout 0.0), except the variant: the paper's B2T connection
    (fairseq's own is Post-LN, ``variant="post_ln"``).
    """

    vocab_size: int = option(32768, group=DATA, from_data=True, help="vocabulary size (from the task's dictionary)")
    d_model: int = option(512, group=MODEL, help="model (hidden) dimension")
    n_heads: int = option(8, group=MODEL, help="attention heads")
    d_ff: int = option(2048, group=MODEL, help="FFN inner dimension")
    encoder_layers: int = option(6, group=MODEL, help="number of encoder layers (0: a language model)")
    decoder_layers: int = option(6, group=MODEL, help="number of decoder layers")
    variant: str = option(
        "b2t",
        group=MODEL,
        choices=variant_names,
        help="residual/normalization variant (the paper's B2T connection unless set)",
    )
    dropout: float = option(0.1, group=MODEL, help="residual/embedding dropout p")
    attention_dropout: float = option(0.0, group=MODEL, help="dropout on attention probabilities")
    activation_dropout: float = option(0.0, group=MODEL, help="dropout after the FFN's ReLU")
    share_embeddings: bool = option(
        True, group=MODEL, help="one matrix for encoder input, decoder input and output projection"
    )
    share_decoder_io: bool = option(
        True, group=MODEL, help="one matrix for the decoder input and the output projection"
    )
    word_dropout: float = option(
        0.0, group=MODEL, help="zero whole token embeddings in training, both sides (docs/methods.md §1.7)"
    )
    b2t_rescale_init: bool = option(
        False,
        group=VARIANT_OPTIONS,
        variants=("b2t", "b2t_no_ln"),
        help="official code's later N^-0.5 weight rescaling (docs/methods.md §1.5)",
    )
    init_scale: float = option(
        1.0, group=MODEL, help="multiply initial non-embedding weights (Appendix C: 0.1 for 100L)"
    )
    max_positions: int = option(1024, group=MODEL, help="initial size of the sinusoidal position table")
    pad_idx: int = option(PAD, group=DATA, from_data=True, help="padding id (from the dictionary)")
    bos_idx: int = option(BOS, group=DATA, from_data=True, help="begin-of-sentence id (from the dictionary)")
    eos_idx: int = option(EOS, group=DATA, from_data=True, help="end-of-sentence id (from the dictionary)")
    deepnet_encoder_beta_factor: float = option(
        0.87,
        group=VARIANT_OPTIONS,
        variants=("deepnet",),
        help="DeepNet encoder beta factor: 0.87 (DeepNet paper) or 1.15 (torchscale) (docs/methods.md §2.1)",
    )
    realformer_running_mean: bool = option(
        False,
        group=VARIANT_OPTIONS,
        variants=("realformer",),
        help="RealFormer's running mean softmax(S_l / l) (docs/methods.md §2.4)",
    )
    mix_ln_ratio: float = option(
        0.25,
        group=VARIANT_OPTIONS,
        variants=("mix_ln",),
        help="Mix-LN: the first floor(ratio x layers) layers of each stack are Post-LN (docs/methods.md §6.2)",
    )
    decoder_final_norm: bool = option(
        True,
        group=MODEL,
        help="the final LayerNorm on the decoder output of variants that have one (Pre-LN); fairseq's "
        "transformer_lm_wiki103 drops it (no_decoder_final_norm=True, docs/methods.md §1.4), so the LM "
        "presets turn it off. Post-LN and B2T have no final LayerNorm either way",
    )
    # ---- adaptive input and adaptive softmax (b2t_lib.adaptive; docs/methods.md §3.4), language model only
    adaptive_input: bool = option(
        False,
        group=ADAPTIVE,
        help="adaptive input representations (Baevski & Auli 2019): frequency bands of the vocabulary get "
        "embeddings of d_model / factor^i dimensions, projected up to d_model",
    )
    adaptive_softmax: bool = option(
        False,
        group=ADAPTIVE,
        help="adaptive softmax output layer (Grave et al. 2017): a head over the frequent words plus one "
        "cluster per rarer band; the loss never builds full-vocabulary logits (no label smoothing)",
    )
    adaptive_cutoff: tuple[int, ...] = option(
        (20000, 60000),
        group=ADAPTIVE,
        help="band boundaries in the frequency-sorted vocabulary, for adaptive input and softmax alike "
        "(WikiText-103: 20000,60000); each must be below the vocabulary size",
    )
    adaptive_factor: float = option(
        4.0, group=ADAPTIVE, help="band i of adaptive input and softmax has d_model / factor^i dimensions"
    )
    adaptive_softmax_dropout: float = option(
        0.0, group=ADAPTIVE, help="dropout on the adaptive softmax's input and inside each tail (WikiText-103: 0.2)"
    )
    tie_adaptive_weights: bool = option(
        False,
        group=ADAPTIVE,
        help="the adaptive softmax scores words with the adaptive input's band embeddings (one matrix per band)",
    )
    tie_adaptive_proj: bool = option(
        False,
        group=ADAPTIVE,
        help="the adaptive softmax's tail projections are the transposes of the adaptive input's "
        "(needs --tie-adaptive-weights)",
    )
    # ---- the encoder's input: token embeddings, or the S2T speech front end (b2t_lib.speech_input)
    encoder_input: str = option(
        "tokens",
        group=MODEL,
        choices=ENCODER_INPUTS,
        help="what the encoder reads: token ids (embedding + positions) or speech "
        "features (Conv1d subsampler + positions, SpecAugment in training)",
    )
    input_features: int = option(
        80,
        group=DATA,
        from_data=True,
        inputs=("speech",),
        help="speech features per frame (80 log-mel filterbanks, from the data)",
    )
    conv_channels: int = option(
        1024, group=SPEECH, inputs=("speech",), help="channels of the first subsampling convolution (GLU halves them)"
    )
    conv_kernel_sizes: tuple[int, ...] = option(
        (5, 5), group=SPEECH, inputs=("speech",), help="kernel size of each stride-2 convolution (2 layers: time / 4)"
    )
    specaug_freq_masks: int = option(
        2, group=SPEECH, inputs=("speech",), help="SpecAugment: frequency masks per utterance (0 = none)"
    )
    specaug_freq_width: int = option(
        27, group=SPEECH, inputs=("speech",), help="SpecAugment: a frequency mask is narrower than F channels"
    )
    specaug_time_masks: int = option(
        2, group=SPEECH, inputs=("speech",), help="SpecAugment: time masks per utterance (0 = none)"
    )
    specaug_time_width: int = option(
        100, group=SPEECH, inputs=("speech",), help="SpecAugment: a time mask is shorter than T frames"
    )
    specaug_time_proportion: float = option(
        1.0, group=SPEECH, inputs=("speech",), help="SpecAugment: ... and shorter than p x the utterance's frames"
    )

    def __post_init__(self) -> None:
        for f in fields(self):  # a tuple option read back from JSON arrives as a list
            if str(f.type).startswith("tuple") and isinstance(getattr(self, f.name), list):
                setattr(self, f.name, tuple(getattr(self, f.name)))
        self.validate()

    def validate(self) -> None:
        known = variant_names()
        if self.variant not in known:
            raise ConfigError(f"unknown variant {self.variant!r}; known variants are: {', '.join(known)}")
        if self.encoder_input not in ENCODER_INPUTS:
            raise ConfigError(
                f"unknown encoder_input {self.encoder_input!r}; choose one of {', '.join(ENCODER_INPUTS)}"
            )
        for name in ("vocab_size", "d_model", "n_heads", "d_ff", "max_positions"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if self.d_model % self.n_heads != 0:
            raise ConfigError(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}; "
                f"pick n_heads from the divisors of d_model"
            )
        if self.encoder_layers < 0 or self.decoder_layers <= 0:
            raise ConfigError(
                f"need at least one decoder layer and no negative encoder layers, got "
                f"encoder_layers={self.encoder_layers}, decoder_layers={self.decoder_layers}"
            )
        for name in ("dropout", "attention_dropout", "activation_dropout", "word_dropout"):
            check_dropout(name, getattr(self, name))
        if self.vocab_size <= max(self.pad_idx, self.bos_idx, self.eos_idx):
            raise ConfigError(f"vocab_size={self.vocab_size} is too small to hold the special tokens")
        if self.init_scale <= 0:
            raise ConfigError(f"init_scale must be positive, got {self.init_scale}")
        if not 0.0 <= self.mix_ln_ratio <= 1.0:
            raise ConfigError(
                f"mix_ln_ratio must lie in [0, 1] (0: all Pre-LN, 1: all Post-LN), got {self.mix_ln_ratio}"
            )
        self._validate_adaptive()
        for f in fields(self):  # an option of one variant, set for another, would silently do nothing
            owners = f.metadata.get("variants")
            if owners and self.variant not in owners and getattr(self, f.name) != f.default:
                raise ConfigError(
                    f"{f.name} ({flag(f.name)}) applies to variant {' or '.join(owners)} only, "
                    f"not variant {self.variant!r}; drop it or change the variant"
                )
            inputs = f.metadata.get("inputs")
            if inputs and self.encoder_input not in inputs and getattr(self, f.name) != f.default:
                raise ConfigError(
                    f"{f.name} ({flag(f.name)}) applies to --encoder-input {' or '.join(inputs)} "
                    f"only, not {self.encoder_input!r}; drop it or change the encoder input"
                )
        self._validate_speech()

    def _validate_speech(self) -> None:
        if self.encoder_input != "speech":
            return
        if self.share_embeddings:
            raise ConfigError(
                "a speech encoder reads features, not tokens, so there is no encoder embedding to "
                "share: pass --no-share-embeddings (--share-decoder-io still ties the decoder's "
                "input and output embeddings)"
            )
        if self.encoder_layers < 1:
            raise ConfigError("a speech model needs an encoder: set --encoder-layers to 1 or more")
        if not self.conv_kernel_sizes or any(k < 1 for k in self.conv_kernel_sizes):
            raise ConfigError(f"conv_kernel_sizes must be one or more positive sizes, got {self.conv_kernel_sizes}")
        if any(k % 2 == 0 for k in self.conv_kernel_sizes):
            # padding k // 2 keeps floor((L - 1) / 2) + 1 positions only for an odd k (fairseq's 5,5)
            raise ConfigError(f"conv_kernel_sizes must be odd (as fairseq's 5,5), got {self.conv_kernel_sizes}")
        if self.conv_channels < 2 or self.conv_channels % 2:
            raise ConfigError(f"conv_channels must be even (GLU halves them), got {self.conv_channels}")
        if self.input_features < 1:
            raise ConfigError(f"input_features must be positive, got {self.input_features}")
        for name in ("specaug_freq_masks", "specaug_freq_width", "specaug_time_masks", "specaug_time_width"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} ({flag(name)}) must be 0 (off) or positive, got {getattr(self, name)}")
        if not 0.0 < self.specaug_time_proportion <= 1.0:
            raise ConfigError(f"specaug_time_proportion must lie in (0, 1], got {self.specaug_time_proportion}")

    def _validate_adaptive(self) -> None:
        """Adaptive input/softmax: language model only, well-formed bands, and tying that is defined."""
        check_dropout("adaptive_softmax_dropout", self.adaptive_softmax_dropout)
        if not (self.adaptive_input or self.adaptive_softmax):
            if self.tie_adaptive_weights or self.tie_adaptive_proj:
                raise ConfigError(
                    "--tie-adaptive-weights/--tie-adaptive-proj tie the adaptive softmax to the "
                    "adaptive input: add --adaptive-input --adaptive-softmax, or drop them"
                )
            return
        if self.encoder_layers > 0:
            raise ConfigError(
                f"adaptive input and softmax are built for the language model only "
                f"(encoder_layers=0), not an encoder-decoder with encoder_layers={self.encoder_layers}"
            )
        cutoff = list(self.adaptive_cutoff)
        if not cutoff or cutoff[0] <= 0 or any(b <= a for a, b in zip(cutoff, cutoff[1:])):
            raise ConfigError(
                f"adaptive_cutoff {cutoff} must be positive and strictly increasing, e.g. "
                f"20000,60000 (WikiText-103) or 200,1000 (the synthetic corpus)"
            )
        dims = [self.d_model / self.adaptive_factor**i for i in range(len(cutoff) + 1)]
        if self.adaptive_factor < 1 or dims[-1] < 1:
            raise ConfigError(
                f"adaptive_factor {self.adaptive_factor} with {len(cutoff) + 1} bands gives band "
                f"dimensions below 1 for d_model={self.d_model}; use a smaller factor or fewer cutoffs"
            )
        if self.tie_adaptive_weights and not (self.adaptive_input and self.adaptive_softmax):
            raise ConfigError("--tie-adaptive-weights needs both --adaptive-input and --adaptive-softmax")
        if self.tie_adaptive_proj and not self.tie_adaptive_weights:
            raise ConfigError("--tie-adaptive-proj ties projections of tied bands: add --tie-adaptive-weights")
        if self.share_decoder_io:  # one matrix for the input and a full output projection: not defined here
            raise ConfigError(
                "--share-decoder-io shares one embedding matrix with a full output projection, which an adaptive "
                "input does not have and an adaptive softmax does not use; pass --no-share-decoder-io (with "
                "--adaptive-input --adaptive-softmax, --tie-adaptive-weights does the tying)"
            )

    # ------------------------------------------------------------------ the fields as data
    @classmethod
    def settable_fields(cls) -> list[dataclasses.Field]:
        """The fields a user sets (command line, presets); the task fills the ``from_data`` ones."""
        return [f for f in fields(cls) if not f.metadata.get("from_data")]

    @classmethod
    def data_fields(cls) -> list[str]:
        """Names of the fields the task fills from its data (vocabulary size, special token ids)."""
        return [f.name for f in fields(cls) if f.metadata.get("from_data")]

    def to_dict(self) -> dict:
        """Every field, as JSON stores it (tuples as lists), so a config equals its stored copy."""
        return {name: _json_value(value) for name, value in asdict(self).items()}

    def settable_dict(self) -> dict:
        """The settable fields only: what a user chose (see :meth:`settable_fields`), as JSON stores them."""
        return {f.name: _json_value(getattr(self, f.name)) for f in self.settable_fields()}

    @classmethod
    def from_dict(cls, values: dict) -> "ModelConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown ModelConfig fields: {', '.join(unknown)}")
        return cls(**values)

    def replace(self, **changes) -> "ModelConfig":
        """A copy with ``changes`` (checked like a new config)."""
        unknown = sorted(set(changes) - {f.name for f in fields(self)})
        if unknown:
            raise ConfigError(f"unknown ModelConfig fields: {', '.join(unknown)}")
        return dataclasses.replace(self, **changes)


def model_default(name: str):
    """The default value of the ModelConfig field ``name``."""
    for f in fields(ModelConfig):
        if f.name == name:
            return f.default
    raise KeyError(f"ModelConfig has no field {name!r}")


def check_dropout(name: str, p: float) -> None:
    if not 0.0 <= p < 1.0:
        raise ConfigError(f"{name} must lie in [0, 1), got {p}")

"""Model configuration: one dataclass that says what to build, and checks it before anything is built.

The special token ids follow fairseq's dictionary (``<s>=0, <pad>=1, </s>=2, <unk>=3``) so that
fairseq checkpoints and their embeddings load without re-indexing.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

BOS, PAD, EOS, UNK = 0, 1, 2, 3
SPECIAL_TOKENS = ("<s>", "<pad>", "</s>", "<unk>")


class ConfigError(ValueError):
    """A configuration that cannot give a correct model. The message says what to change."""


@dataclass
class ModelConfig:
    """Everything that decides the shape and the wiring of a model.

    Defaults are fairseq's ``transformer_wmt_en_de`` (Transformer-base, d=512, 8 heads, FFN 2048,
    6+6 layers, Post-LN, attention and activation dropout 0.0).
    """

    vocab_size: int = 32768
    d_model: int = 512
    n_heads: int = 8
    d_ff: int = 2048
    encoder_layers: int = 6
    decoder_layers: int = 6
    variant: str = "post_ln"
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    share_embeddings: bool = True          # encoder input, decoder input and output projection share one matrix
    share_decoder_io: bool = True          # decoder input and output projection share one matrix
    word_dropout: float = 0.0              # methods_spec 1.7: zero whole token embeddings in training
    b2t_rescale_init: bool = False         # official code's later N^-0.5 weight rescaling (methods_spec 1.5)
    init_scale: float = 1.0                # Appendix C: multiply initial non-embedding weights (0.1 for 100L)
    max_positions: int = 1024
    pad_idx: int = PAD
    bos_idx: int = BOS
    eos_idx: int = EOS
    # Variant-specific options live here too, so one config object describes one model.
    deepnet_encoder_beta_factor: float = 0.87   # methods_spec 2.1 / open point 3 (torchscale uses 1.15)
    realformer_running_mean: bool = False        # methods_spec 2.4

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        from .variants import VARIANTS  # local import: variants import this module

        if self.variant not in VARIANTS:
            raise ConfigError(
                f"unknown variant {self.variant!r}; known variants are: {', '.join(sorted(VARIANTS))}"
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

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "ModelConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown ModelConfig fields: {', '.join(unknown)}")
        return cls(**values)


def check_dropout(name: str, p: float) -> None:
    if not 0.0 <= p < 1.0:
        raise ConfigError(f"{name} must lie in [0, 1), got {p}")

"""b2t_lib: the library behind the B2T-connection course.

Public API::

    from b2t_lib import (ModelConfig, EncoderDecoder, LanguageModel, EncoderLayer, DecoderLayer,
                         VARIANTS, get_scale, seed_everything)
"""

import logging

from .config import ConfigError, ModelConfig
from .special_tokens import BOS, EOS, PAD, UNK
from .generate import beam_search, greedy_search
from .layers import DecoderLayer, EncoderLayer
from .model import Decoder, Encoder, EncoderDecoder, LanguageModel
from .scale import SCALES, ScaleError, get_scale
from .utils import count_parameters, seed_everything
from .variants import VARIANTS, StackInfo, Variant, get_variant, register
from . import baselines  # noqa: F401  (registers the baseline variants)
from . import after_b2t  # noqa: F401  (registers the variants of the methods after B2T)

# The library logs (logger "b2t_lib.*") and prints nothing; an application shows the messages by configuring
# logging, as `python -m b2t_lib` does. Without that, nothing is printed (not even warnings).
logging.getLogger("b2t_lib").addHandler(logging.NullHandler())

__version__ = "0.1.0"

__all__ = [
    "BOS",
    "EOS",
    "PAD",
    "UNK",
    "ConfigError",
    "ModelConfig",
    "beam_search",
    "greedy_search",
    "DecoderLayer",
    "EncoderLayer",
    "Decoder",
    "Encoder",
    "EncoderDecoder",
    "LanguageModel",
    "SCALES",
    "ScaleError",
    "get_scale",
    "count_parameters",
    "seed_everything",
    "VARIANTS",
    "StackInfo",
    "Variant",
    "get_variant",
    "register",
]

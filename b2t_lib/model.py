r"""Stacks and whole models: :class:`Encoder`, :class:`Decoder`, :class:`EncoderDecoder`, :class:`LanguageModel`.

A stack embeds its input (:mod:`b2t_lib.embedding`), applies dropout, runs its layers (the
variant may change how: :meth:`~b2t_lib.variants.Variant.run_stack`), and, for Pre-LN only, a
final LayerNorm (docs/methods.md §1.4: Post-LN and B2T have none; ``decoder_final_norm=False`` drops the
decoder's, as fairseq's ``transformer_lm_wiki103`` does). The decoder ends in the output projection
:math:`\mathrm{logits} = h E^\top` when embeddings are shared, or, in a language model with
``adaptive_softmax``, in :class:`~b2t_lib.adaptive.AdaptiveSoftmax` (normalized log-probabilities
in place of logits; the input is then :class:`~b2t_lib.adaptive.AdaptiveInput` with ``adaptive_input``).
While training, the uses of a shared matrix :math:`E` (each stack's look-ups and the output projection) go through
:mod:`b2t_lib.tied_matrix`: the same values and gradient, built in place.

Module and parameter names follow fairseq (``encoder.layers.{i}....``, ``encoder.layer_norm``,
``decoder.embed_tokens``, ...), so :mod:`b2t_lib.fairseq_compat` can load fairseq checkpoints.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .adaptive import AdaptiveInput, AdaptiveSoftmax
from .config import ConfigError, ModelConfig
from .embedding import TokenInput, build_token_embedding
from .layers import DecoderLayer, EncoderLayer
from .tied_matrix import tied_lookups, tied_projection
from .variants import StackInfo, Variant, get_variant


def _stack_info(cfg: ModelConfig, variant: Variant, role: str, num_layers: int, encoder_layers: int) -> StackInfo:
    """The one description every layer of a stack is built from: its place in the model, every ModelConfig field
    (so a variant reads its own option, ``b2t_rescale_init``, ... with nothing copied) and the variant."""
    return StackInfo(
        role=role,
        num_layers=num_layers,
        encoder_layers=encoder_layers,
        decoder_layers=cfg.decoder_layers,
        options=cfg.to_dict(),
        variant=variant,
    )


def build_encoder_input(cfg: ModelConfig) -> nn.Module:
    """The encoder's input module for ``cfg.encoder_input``: token embedding + positions, or the speech
    front end (:func:`b2t_lib.speech_input.build_speech_input`: Conv1d subsampler + positions, SpecAugment)."""
    if cfg.encoder_input == "speech":
        from .speech_input import build_speech_input  # torchaudio is imported only for speech models

        return build_speech_input(cfg)
    return TokenInput(cfg.d_model, cfg.pad_idx, cfg.word_dropout, keep_first=False)


class Encoder(nn.Module):
    """Token embedding (or the speech front end), encoder layers, and Pre-LN's final LayerNorm.

    ``forward(src_tokens) -> (out (batch, src_time, d_model), padding_mask (batch, src_time))``.
    ``self.input`` is the swappable input module: any module called as ``input(src, embed_tokens)``
    that returns ``(x, padding_mask)``; ``cfg.encoder_input="speech"`` puts the speech front end there
    (``src`` is then a :class:`~b2t_lib.speech_input.SpeechSource` and ``embed_tokens`` is None).
    """

    def __init__(self, cfg: ModelConfig, embed_tokens: nn.Embedding | None, variant: Variant | None = None):
        super().__init__()
        self.variant = variant or get_variant(cfg.variant)  # a model passes the variant it resolved once
        self.dropout = cfg.dropout
        self.embed_tokens = embed_tokens
        self.input = build_encoder_input(cfg)
        self.stack = _stack_info(cfg, self.variant, "encoder", cfg.encoder_layers, cfg.encoder_layers)
        self.layers = number_layers(nn.ModuleList(EncoderLayer(stack=self.stack) for _ in range(cfg.encoder_layers)))
        self.layer_norm = nn.LayerNorm(cfg.d_model) if self.variant.final_norm else None

    def forward(self, src_tokens: torch.Tensor, rows: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``rows``: the source tokens' embedding rows, when the model looked them up already (:func:`tied_lookups`)."""
        if rows is None:
            x, padding_mask = self.input(src_tokens, self.embed_tokens)  # (batch, src_time, d_model)
        else:
            x, padding_mask = self.input(src_tokens, self.embed_tokens, rows=rows)
        x = F.dropout(x, p=self.dropout, training=self.training)
        state: dict = {}  # what attention passes from layer to layer within this forward pass
        x = self.variant.run_stack(self, x, lambda i, layer, h: layer(h, padding_mask, state))
        if self.layer_norm is not None:
            x = self.layer_norm(x)  # Pre-LN only
        return x, padding_mask


class Decoder(nn.Module):
    """Decoder stack with output projection. ``cross_attention=False`` makes it a language model.

    ``forward(prev_output_tokens, memory=None, memory_padding_mask=None, cache=None)`` returns logits
    (batch, tgt_time, vocab). With ``cache`` (a dict, filled on the first call) only the newest
    position is computed and the logits are (batch, 1, vocab).
    """

    def __init__(
        self,
        cfg: ModelConfig,
        embed_tokens: nn.Embedding,
        cross_attention: bool = True,
        share_input_output: bool = True,
        variant: Variant | None = None,
    ):
        super().__init__()
        self.variant = variant or get_variant(cfg.variant)  # a model passes the variant it resolved once
        self.dropout = cfg.dropout
        self.embed_tokens = embed_tokens
        self.input = TokenInput(cfg.d_model, cfg.pad_idx, cfg.word_dropout, keep_first=True)
        role = "decoder" if cross_attention else "lm"
        self.stack = _stack_info(
            cfg, self.variant, role, cfg.decoder_layers, cfg.encoder_layers if cross_attention else 0
        )
        self.layers = number_layers(nn.ModuleList(DecoderLayer(stack=self.stack) for _ in range(cfg.decoder_layers)))
        final_norm = self.variant.final_norm and cfg.decoder_final_norm  # transformer_lm_wiki103: none
        self.layer_norm = nn.LayerNorm(cfg.d_model) if final_norm else None
        self.output_projection = self.adaptive_softmax = None
        if cfg.adaptive_softmax:  # the one place the adaptive softmax is built (ModelConfig checked the options)
            self.adaptive_softmax = AdaptiveSoftmax(
                cfg.vocab_size,
                cfg.d_model,
                cfg.adaptive_cutoff,
                dropout=cfg.adaptive_softmax_dropout,
                factor=cfg.adaptive_factor,
                adaptive_input=embed_tokens if cfg.tie_adaptive_weights else None,
                tie_proj=cfg.tie_adaptive_proj,
                pad_idx=cfg.pad_idx,
            )
        elif not share_input_output:
            self.output_projection = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
            nn.init.normal_(self.output_projection.weight, mean=0.0, std=cfg.d_model**-0.5)

    def extract_features(self, prev_output_tokens, memory=None, memory_padding_mask=None, cache=None, rows=None):
        """The last hidden states (batch, tgt_time, d_model), before the output projection. ``rows``: the tokens'
        embedding rows, when the model looked them up already (:func:`~b2t_lib.tied_matrix.tied_lookups`).

        Self-attention hides the decoder's own padding, left padding included (positions count real
        tokens only, as fairseq's ``make_positions``). Right padding alone needs no mask: the causal
        mask already hides every later key from a real position, so the fast causal kernel keeps
        running; padding before a real token is masked. With ``cache`` the mask spans every position
        so far, since ``prev_output_tokens`` always holds the whole prefix.
        """
        # incremental decoding (a cache): only the newest position is computed, the earlier ones live in the cache
        incremental = cache is not None
        x, padding_mask = self.input(prev_output_tokens, self.embed_tokens, last_only=incremental, rows=rows)
        # x: (batch, tgt_time, d_model), (batch, 1, d_model) when incremental; padding_mask: (batch, tgt_time)
        # Padding followed by a real token somewhere (left padding): only then can a real position see a pad.
        pads_before_tokens = bool((padding_mask[:, :-1] & ~padding_mask[:, 1:]).any())
        self_padding_mask = padding_mask if pads_before_tokens else None  # (batch, tgt_time) or None
        x = F.dropout(x, p=self.dropout, training=self.training)
        state: dict = {}

        def run_layer(i, layer, h):
            layer_cache = cache.setdefault(i, {}) if cache is not None else None
            return layer(h, memory, memory_padding_mask, layer_cache, state, self_padding_mask)

        x = self.variant.run_stack(self, x, run_layer)
        if self.layer_norm is not None:
            x = self.layer_norm(x)  # Pre-LN only
        return x

    def cache_encoder_keys(self, memory: torch.Tensor, cache: dict) -> None:
        """Fill the cross-attention part of an incremental ``cache`` ahead of the first step: every layer's keys and
        values of ``memory`` (batch, src_time, d_model). Beam search calls it with one row per sentence, and the
        ``beam`` query rows of a sentence then attend to that one copy together (see :mod:`b2t_lib.attention`)."""
        for i, layer in enumerate(self.layers):
            if layer.cross_attention:
                layer.encoder_attn.cache_static_kv(memory, cache.setdefault(i, {}).setdefault("cross", {}))

    def output_layer(self, features: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (batch, tgt_time, vocab); with an adaptive softmax, normalized fp32 log-probabilities,
        which stand in for logits anywhere (``log_softmax`` leaves them unchanged). ``weight``: the shared
        matrix as :func:`~b2t_lib.tied_matrix.tied_lookups` handed it on (the same values)."""
        if self.adaptive_softmax is not None:
            return self.adaptive_softmax(features)  # (batch, tgt_time, vocab) log p
        if weight is not None:  # logits = h E^T, E's gradient built by b2t_lib.tied_matrix
            return tied_projection(features, weight, self.embed_tokens)  # (batch, tgt_time, vocab)
        weight = self.embed_tokens.weight if self.output_projection is None else self.output_projection.weight
        return F.linear(features, weight)  # (batch, tgt_time, vocab)

    @property
    def ties_embedding(self) -> bool:
        """True when the output projection is the token embedding's matrix (logits = h E^T)."""
        return self.output_projection is None and self.adaptive_softmax is None

    def forward(self, prev_output_tokens, memory=None, memory_padding_mask=None, cache=None, rows=None, weight=None):
        features = self.extract_features(prev_output_tokens, memory, memory_padding_mask, cache, rows)
        return self.output_layer(features, weight)


class _Model(nn.Module):
    def _finish_init(self) -> None:
        self.variant.build_model(self)
        if self.cfg.init_scale != 1.0:
            scale_initial_weights(self, self.cfg.init_scale)

    def check_tokens(self, tokens: torch.Tensor, name: str) -> None:
        """Token ids outside [0, vocab_size) would index garbage on a GPU: refuse them with a clear error."""
        if tokens.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"{name} must hold integer token ids, got dtype {tokens.dtype}")
        if tokens.numel():
            low, high = torch.aminmax(tokens)
            if int(low) < 0 or int(high) >= self.cfg.vocab_size:
                raise ValueError(
                    f"{name} holds token ids in [{int(low)}, {int(high)}], outside the vocabulary "
                    f"[0, {self.cfg.vocab_size}); check the dictionary and vocab_size"
                )

    #: the batch entries ``forward`` takes, in order (see :func:`forward_batch`)
    input_keys: tuple[str, ...] = ()

    def batch_inputs(self, batch: dict) -> tuple[torch.Tensor, ...]:
        """The positional arguments of ``forward`` from a batch dict (the trainer's collate format)."""
        missing = [key for key in self.input_keys if key not in batch]
        if missing:
            raise KeyError(
                f"a {type(self).__name__} runs on a batch with {list(self.input_keys)}; this batch "
                f"lacks {missing} (it has {sorted(batch)})"
            )
        return tuple(batch[key] for key in self.input_keys)

    def prepare_for_training(self, run_forward: Callable[[], object] | dict) -> bool:
        """Call once when training starts from scratch: a variant that measures its initialization on
        real data does it here (:meth:`~b2t_lib.variants.Variant.prepare_for_training`); a no-op for most.

        ``run_forward`` is a function that runs this model's forward pass on the first training
        batch, or the batch itself (run with :func:`forward_batch`). Returns True when the model changed.
        """
        if isinstance(run_forward, dict):
            batch = run_forward
            run_forward = lambda: forward_batch(self, batch)  # noqa: E731
        return self.variant.prepare_for_training(self, run_forward)


class EncoderDecoder(_Model):
    """Transformer encoder-decoder. ``forward(src_tokens, prev_output_tokens) -> logits (batch, tgt_time, vocab)``.

    With ``cfg.encoder_input="speech"`` (the S2T Transformer, docs/methods.md §3.5) the source is a
    :class:`~b2t_lib.speech_input.SpeechSource` (features and lengths), the encoder has no token embedding,
    and a batch dict gives ``features``, ``src_lengths`` and ``prev_output_tokens``.
    """

    input_keys = ("src_tokens", "prev_output_tokens")
    speech_input_keys = ("features", "src_lengths", "prev_output_tokens")

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        cfg.validate()
        if cfg.encoder_layers < 1:
            raise ConfigError(
                "an EncoderDecoder needs at least one encoder layer; use LanguageModel for a decoder-only model"
            )
        self.cfg, self.variant = cfg, get_variant(cfg.variant)  # the model's one registry look-up
        speech = cfg.encoder_input == "speech"
        if speech:
            self.input_keys = self.speech_input_keys
        # A speech encoder has no token embedding: an unused parameter would break DDP.
        encoder_embed = None if speech else build_token_embedding(cfg.vocab_size, cfg.d_model, cfg.pad_idx)
        decoder_embed = (
            encoder_embed if cfg.share_embeddings else build_token_embedding(cfg.vocab_size, cfg.d_model, cfg.pad_idx)
        )
        self.encoder = Encoder(cfg, encoder_embed, self.variant)
        self.decoder = Decoder(
            cfg,
            decoder_embed,
            cross_attention=True,
            share_input_output=cfg.share_embeddings or cfg.share_decoder_io,
            variant=self.variant,
        )
        self._finish_init()

    def batch_inputs(self, batch: dict) -> tuple:
        """``(src_tokens, prev_output_tokens)``; for speech the source is built here, after the trainer
        moved the batch's tensors to the device: ``(SpeechSource(features, src_lengths), prev_output_tokens)``."""
        inputs = super().batch_inputs(batch)
        if self.cfg.encoder_input == "speech":
            from .speech_input import SpeechSource

            features, lengths, prev_output_tokens = inputs
            return SpeechSource(features, lengths), prev_output_tokens
        return inputs

    def forward(self, src_tokens, prev_output_tokens: torch.Tensor) -> torch.Tensor:
        if self.cfg.encoder_input == "tokens":  # a speech source holds features, checked by the front end
            self.check_tokens(src_tokens, "src_tokens")
        self.check_tokens(prev_output_tokens, "prev_output_tokens")
        src_rows = tgt_rows = weight = None
        if self.decoder.ties_embedding:  # the decoder's matrix is also its output layer: one node for its uses
            if self.encoder.embed_tokens is self.decoder.embed_tokens:  # ... and the encoder's embedding
                weight, src_rows, tgt_rows = tied_lookups(self.decoder.embed_tokens, src_tokens, prev_output_tokens)
            else:
                weight, tgt_rows = tied_lookups(self.decoder.embed_tokens, prev_output_tokens)
        memory, memory_padding_mask = self.encoder(src_tokens, src_rows)  # (batch, src_time, d_model)
        return self.decoder(prev_output_tokens, memory, memory_padding_mask, rows=tgt_rows, weight=weight)


class LanguageModel(_Model):
    r"""Decoder-only Transformer: every layer is causal self-attention + FFN, no cross-attention.

    The variant wires each layer as in the decoder with the cross-attention line removed; B2T is
    :math:`y = \mathrm{LN}(x_{inp} + x_{ffn} + \mathrm{FFN}(x_{ffn}))` with
    :math:`x_{ffn} = \mathrm{LN}(\mathrm{SelfAttn}(x_{inp}) + x_{inp})` (Eq. 5-7, docs/methods.md §1.3).

    ``forward(tokens) -> logits (batch, time, vocab)`` (log-probabilities with an adaptive softmax);
    ``forward(tokens, features_only=True)`` returns the last hidden states (batch, time, d_model), from
    which :meth:`target_log_prob` scores the targets without building full-vocabulary logits.
    """

    input_keys = ("prev_output_tokens",)  # the input sequence; the batch's "target" is it shifted by one

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        cfg.validate()
        self.cfg, self.variant = cfg, get_variant(cfg.variant)  # the model's one registry look-up
        if cfg.adaptive_input:  # the one place the adaptive input is built
            embed = AdaptiveInput(cfg.vocab_size, cfg.d_model, cfg.adaptive_cutoff, cfg.adaptive_factor, cfg.pad_idx)
        else:
            embed = build_token_embedding(cfg.vocab_size, cfg.d_model, cfg.pad_idx)
        self.decoder = Decoder(
            cfg, embed, cross_attention=False, share_input_output=cfg.share_decoder_io, variant=self.variant
        )
        self._finish_init()

    def forward(self, tokens: torch.Tensor, cache: dict | None = None, features_only: bool = False) -> torch.Tensor:
        self.check_tokens(tokens, "tokens")
        if features_only or cache is not None or not self.decoder.ties_embedding:
            features = self.decoder.extract_features(tokens, cache=cache)  # (batch, time, d_model)
            return features if features_only else self.decoder.output_layer(features)
        weight, rows = tied_lookups(self.decoder.embed_tokens, tokens)  # one node for the matrix's two uses
        return self.decoder(tokens, rows=rows, weight=weight)  # (batch, time, vocab)

    def target_log_prob(self, features: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        r""":math:`\log p(y_t \mid y_{<t})` (fp32) for hidden states (..., d_model) and targets (...).

        The adaptive softmax computes only the head and each target's own band; a full softmax
        takes the target's entry of the float32 ``log_softmax`` of the logits.
        """
        if self.decoder.adaptive_softmax is not None:
            return self.decoder.adaptive_softmax.target_log_prob(features, target)
        log_probs = F.log_softmax(self.decoder.output_layer(features).float(), dim=-1)  # (..., vocab)
        return log_probs.gather(-1, target.clamp_min(0).unsqueeze(-1)).squeeze(-1)


def number_layers(layers: nn.ModuleList) -> nn.ModuleList:
    """Tell each layer its place in the stack, 1 at the bottom (``layer.depth``: Mix-LN and LayerNorm Scaling
    wire a layer by it); return ``layers``."""
    for depth, layer in enumerate(layers, start=1):
        layer.depth = depth
    return layers


def model_stacks(model: nn.Module) -> dict[str, nn.Module]:
    """The model's layer stacks in execution order, by role: ``{"encoder": ..., "decoder": ...}``
    (a language model has no encoder). Works for any module with ``encoder``/``decoder`` stacks."""
    stacks = {}
    for name in ("encoder", "decoder"):
        stack = getattr(model, name, None)
        if stack is not None and len(getattr(stack, "layers", ())) > 0:
            stacks[name] = stack
    return stacks


def unwrap_model(model: nn.Module) -> nn.Module:
    """The model inside a ``DistributedDataParallel`` and/or ``torch.compile`` wrapper."""
    while True:
        inner = getattr(model, "module", None)
        if not isinstance(inner, nn.Module):
            inner = getattr(model, "_orig_mod", None)
        if not isinstance(inner, nn.Module):
            return model
        model = inner


def forward_batch(model: nn.Module, batch: dict) -> torch.Tensor:
    """The one way to run a model on a batch dict: logits (batch, tgt_time, vocab).

    The model says which entries it reads (``input_keys``: ``src_tokens`` and ``prev_output_tokens``
    for an encoder-decoder, ``prev_output_tokens`` for a language model). ``model`` may be wrapped
    in DDP or ``torch.compile``; the call goes through the wrapper, so gradients are synchronized.
    """
    return model(*unwrap_model(model).batch_inputs(batch))


def scale_initial_weights(model: nn.Module, factor: float) -> None:
    """Appendix C: multiply the initial weight matrices of every linear layer (not embeddings, not
    LayerNorms, not biases) by ``factor`` (0.1 for the 100L-100L recipe).

    The embeddings and the output layer keep their initialization: a separate output projection,
    and in a language model the adaptive input (band embeddings and their projections) and the
    adaptive softmax (head, cluster and tail matrices), which are its embedding and output layer.
    """
    decoder = model.decoder
    kept = {
        id(m)
        for part in (decoder.output_projection, decoder.adaptive_softmax, decoder.embed_tokens)
        if part is not None
        for m in part.modules()
    }
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Linear) and id(module) not in kept:
                module.weight.mul_(factor)

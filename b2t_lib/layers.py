r"""Encoder and decoder layers. The sub-layers are built here; how they are wired is the variant's job.

Every sub-layer hands the variant a *branch* :math:`\mathrm{Drop}_p(\mathcal{F}(x))` and its LayerNorm:

* encoder: self-attention, FFN;
* decoder: causal self-attention, cross-attention (omitted in a language model), FFN.

Dropout sits where fairseq puts it (docs/methods.md §3.2): :math:`\mathrm{Drop}_p` on each branch output
(residual dropout), :math:`\mathrm{Drop}_{p_{att}}` on the attention probabilities and
:math:`\mathrm{Drop}_{p_{act}}` after the ReLU. Parameter names follow fairseq:
``self_attn``, ``self_attn_layer_norm``, ``encoder_attn``, ``encoder_attn_layer_norm``, ``fc1``,
``fc2``, ``final_layer_norm``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import ModelConfig
from .variants import StackInfo, SubLayer


def standalone_stack(
    role: str,
    d_model: int,
    n_heads: int,
    d_ff: int,
    variant: str,
    num_layers: int,
    dropout: float,
    attention_dropout: float,
    activation_dropout: float,
    b2t_rescale_init: bool,
) -> StackInfo:
    """The description of a layer built on its own (outside a model): a ModelConfig with these options, which
    checks them (d_model divisible by n_heads, dropout in [0, 1), at least one layer, ...) and names the variant."""
    from .variants import get_variant

    cfg = ModelConfig(
        d_model=d_model,
        n_heads=n_heads,
        d_ff=d_ff,
        variant=variant,
        encoder_layers=num_layers,
        decoder_layers=num_layers,
        dropout=dropout,
        attention_dropout=attention_dropout,
        activation_dropout=activation_dropout,
        b2t_rescale_init=b2t_rescale_init,
    )
    return StackInfo(
        role=role,
        num_layers=num_layers,
        encoder_layers=num_layers if role != "lm" else 0,
        decoder_layers=num_layers,
        options=cfg.to_dict(),
        variant=get_variant(variant),
    )


class _Layer(nn.Module):
    """What encoder and decoder layers share: the FFN, LayerNorms, dropout, variant hooks. Every option comes from
    one :class:`~b2t_lib.variants.StackInfo` (its ``options`` are the model's ModelConfig fields)."""

    def __init__(self, stack: StackInfo):
        super().__init__()
        o = stack.options
        self.stack, self.variant = stack, stack.variant
        self.depth = 1  # this layer's place in its stack, 1 at the bottom: the stack numbers its layers (model.py)
        self.d_model, self.dropout, self.activation_dropout = o["d_model"], o["dropout"], o["activation_dropout"]
        self.self_attn = self.variant.attention_class(o["d_model"], o["n_heads"], o["attention_dropout"])

    def _layer_norm(self) -> nn.Module | None:
        """A LayerNorm (eps 1e-5, gamma=1, beta=0) when the variant has per-layer norms, else None."""
        return nn.LayerNorm(self.d_model, eps=1e-5) if self.variant.layer_norm else None

    def _finish(self) -> None:
        """Called at the end of a subclass's __init__: the variant's parameters and initialization."""
        self.variant.build_layer(self)

    def _residual_dropout(self, y: torch.Tensor) -> torch.Tensor:
        return F.dropout(y, p=self.dropout, training=self.training)

    def ffn(self, h: torch.Tensor) -> torch.Tensor:
        r"""FFN(h) = W_2 Drop_{p_act}(ReLU(W_1 h + b_1)) + b_2; fc1/fc2 keep PyTorch's default init (fairseq 0.9)."""
        hidden = F.relu(self.fc1(h))  # (batch, time, d_ff)
        hidden = F.dropout(hidden, p=self.activation_dropout, training=self.training)
        return self.fc2(hidden)  # (batch, time, d_model)

    def _ffn_branch(self):
        return lambda h: self._residual_dropout(self.ffn(h))

    def _attention_branch(self, attention, state, stream, **kwargs):
        """Drop(Attn(h)); ``state[stream]`` is the per-forward dict of this attention type (see
        :mod:`b2t_lib.attention`), passed on from layer to layer."""
        stream_state = state.setdefault(stream, {}) if state is not None else None

        def branch(h: torch.Tensor) -> torch.Tensor:
            out, _ = attention(h, state=stream_state, **kwargs)
            return self._residual_dropout(out)

        return branch


class EncoderLayer(_Layer):
    """One encoder layer: self-attention and FFN, wired by ``variant``.

    ``forward(x, padding_mask=None)``: x (batch, time, d_model), padding_mask (batch, time) True at padding.
    """

    def __init__(
        self,
        d_model: int | None = None,
        n_heads: int | None = None,
        d_ff: int | None = None,
        variant: str | None = None,
        num_layers: int | None = None,
        dropout: float = 0.0,
        attention_dropout: float = 0.0,
        activation_dropout: float = 0.0,
        b2t_rescale_init: bool = False,
        *,
        stack: StackInfo | None = None,
    ):
        """Either the layer's own options (a stand-alone layer) or ``stack`` (a layer of a model), not both."""
        super().__init__(
            _one_description(
                "encoder",
                stack,
                d_model,
                n_heads,
                d_ff,
                variant,
                num_layers,
                dropout,
                attention_dropout,
                activation_dropout,
                b2t_rescale_init,
            )
        )
        d_model, d_ff = self.d_model, self.stack.options["d_ff"]
        self.self_attn_layer_norm = self._layer_norm()
        self.fc1, self.fc2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.final_layer_norm = self._layer_norm()
        self._finish()

    def sublayers(self, padding_mask=None, state=None) -> list[SubLayer]:
        attention = self._attention_branch(self.self_attn, state, "encoder_self", key_padding_mask=padding_mask)
        return [(attention, self.self_attn_layer_norm), (self._ffn_branch(), self.final_layer_norm)]

    def forward(self, x: torch.Tensor, padding_mask: torch.Tensor | None = None, state: dict | None = None):
        return self.variant.layer_forward(self, x, self.sublayers(padding_mask, state))


class DecoderLayer(_Layer):
    """One decoder layer: causal self-attention, cross-attention (unless ``cross_attention=False``), FFN.

    ``forward(x, memory=None, memory_padding_mask=None, cache=None, state=None, self_padding_mask=None)``:
    x (batch, time, d_model); memory is the encoder output (batch, src_time, d_model). ``cache`` is a
    dict that makes the layer incremental: x is then only the newest position (batch, 1, d_model).
    ``self_padding_mask`` (batch, time) is True at the decoder's own padding (every position so far,
    also when incremental); None when nothing needs hiding beyond the causal mask.
    """

    def __init__(
        self,
        d_model: int | None = None,
        n_heads: int | None = None,
        d_ff: int | None = None,
        variant: str | None = None,
        num_layers: int | None = None,
        dropout: float = 0.0,
        attention_dropout: float = 0.0,
        activation_dropout: float = 0.0,
        cross_attention: bool = True,
        b2t_rescale_init: bool = False,
        *,
        stack: StackInfo | None = None,
    ):
        """Either the layer's own options (a stand-alone layer) or ``stack`` (a layer of a model), not both; a
        stack of role ``"lm"`` (or ``cross_attention=False``) has no cross-attention."""
        role = stack.role if stack is not None else ("decoder" if cross_attention else "lm")
        super().__init__(
            _one_description(
                role,
                stack,
                d_model,
                n_heads,
                d_ff,
                variant,
                num_layers,
                dropout,
                attention_dropout,
                activation_dropout,
                b2t_rescale_init,
            )
        )
        o = self.stack.options
        self.self_attn_layer_norm = self._layer_norm()
        self.cross_attention = self.stack.role != "lm"
        if self.cross_attention:
            self.encoder_attn = self.variant.attention_class(o["d_model"], o["n_heads"], o["attention_dropout"])
            self.encoder_attn_layer_norm = self._layer_norm()
        self.fc1, self.fc2 = nn.Linear(o["d_model"], o["d_ff"]), nn.Linear(o["d_ff"], o["d_model"])
        self.final_layer_norm = self._layer_norm()
        self._finish()

    def sublayers(
        self, memory=None, memory_padding_mask=None, cache=None, state=None, self_padding_mask=None
    ) -> list[SubLayer]:
        self_cache = cache.setdefault("self", {}) if cache is not None else None
        parts = [
            (
                self._attention_branch(
                    self.self_attn,
                    state,
                    "decoder_self",
                    causal=True,
                    key_padding_mask=self_padding_mask,
                    cache=self_cache,
                ),
                self.self_attn_layer_norm,
            )
        ]
        if self.cross_attention:
            if memory is None:
                raise ValueError("this decoder layer has cross-attention: pass the encoder output as `memory`")
            cross_cache = cache.setdefault("cross", {}) if cache is not None else None
            parts.append(
                (
                    self._attention_branch(
                        self.encoder_attn,
                        state,
                        "decoder_cross",
                        key_value=memory,
                        key_padding_mask=memory_padding_mask,
                        cache=cross_cache,
                        static_kv=True,
                    ),
                    self.encoder_attn_layer_norm,
                )
            )
        parts.append((self._ffn_branch(), self.final_layer_norm))
        return parts

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor | None = None,
        memory_padding_mask: torch.Tensor | None = None,
        cache: dict | None = None,
        state: dict | None = None,
        self_padding_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return self.variant.layer_forward(
            self, x, self.sublayers(memory, memory_padding_mask, cache, state, self_padding_mask)
        )


def _one_description(
    role,
    stack,
    d_model,
    n_heads,
    d_ff,
    variant,
    num_layers,
    dropout,
    attention_dropout,
    activation_dropout,
    b2t_rescale_init,
) -> StackInfo:
    """``stack`` as it is, or a stand-alone layer's description from its own options; giving both is refused, so
    no layer receives an option twice."""
    own = (d_model, n_heads, d_ff, variant, num_layers)
    if stack is not None:
        if any(v is not None for v in own) or b2t_rescale_init or dropout or attention_dropout or activation_dropout:
            raise TypeError("a layer is described either by its own options or by stack=..., not both")
        return stack
    if any(v is None for v in own):
        raise TypeError("a stand-alone layer needs d_model, n_heads, d_ff, variant and num_layers")
    return standalone_stack(
        role,
        d_model,
        n_heads,
        d_ff,
        variant,
        num_layers,
        dropout,
        attention_dropout,
        activation_dropout,
        b2t_rescale_init,
    )

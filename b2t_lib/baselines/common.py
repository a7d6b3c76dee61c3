"""Small helpers the baseline variants share: which modules a layer has, and re-initialization.

A layer's attention modules are ``self_attn`` and, in an encoder-decoder's decoder, ``encoder_attn``;
a language model's decoder layer has no ``encoder_attn``. The helpers below hide that difference.
(The stacks of a model are listed by :func:`b2t_lib.model.model_stacks`.)
"""

from __future__ import annotations

import torch
from torch import nn


def attention_modules(layer: nn.Module) -> list[nn.Module]:
    """The layer's attention modules in execution order: self-attention, then cross-attention if any."""
    modules = [layer.self_attn]
    if getattr(layer, "cross_attention", False):
        modules.append(layer.encoder_attn)
    return modules


def xavier_ffn_init(layer: nn.Module) -> None:
    """fc1/fc2 as the Admin, T-Fixup and DLCL repositories build them: ``xavier_uniform_`` weights, zero bias.

    (fairseq 0.9, and so Post-LN/Pre-LN/B2T here, keeps PyTorch's default ``nn.Linear`` init instead.)
    """
    with torch.no_grad():
        for linear in (layer.fc1, layer.fc2):
            nn.init.xavier_uniform_(linear.weight)
            nn.init.zeros_(linear.bias)


def zero_attention_biases(layer: nn.Module) -> None:
    """Zero the q/k/v biases of every attention of ``layer``, as the official Admin, DeepNet and DLCL
    code does (fairseq 0.9 leaves them at PyTorch's default; the output projection's bias is zero anyway)."""
    with torch.no_grad():
        for attention in attention_modules(layer):
            for proj in (attention.q_proj, attention.k_proj, attention.v_proj):
                nn.init.zeros_(proj.bias)

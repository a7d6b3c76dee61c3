r"""The paths of Eq. 8 measured separately inside a real layer: why the gradient survives B2T's last LayerNorm.

A B2T layer ends in :math:`y=\mathrm{LN}(s)` with :math:`s=x_{inp}+x_{ffn}+\mathrm{FFN}(x_{ffn})` (Eq. 5), so
back-propagation first crosses the final LayerNorm, :math:`g_s = J_{LN}(s)^\top g_y`, then splits into the three
terms of Eq. 8:

.. math::
    g_{x} = \underbrace{g_s}_{\text{identity}}
          + \underbrace{\Big(\tfrac{\partial x_{ffn}}{\partial x_{inp}}\Big)^{\!\top} g_s}_{\text{inner LayerNorms}}
          + \underbrace{\Big(\tfrac{\partial\,\mathrm{FFN}(x_{ffn})}{\partial x_{inp}}\Big)^{\!\top} g_s}_{\text{FFN}} .

In an encoder layer :math:`x_{ffn}=\mathrm{LN}_{SA}(x_{inp}+\mathrm{SA}(x_{inp}))`; in a decoder layer
:math:`x_{ffn}=\mathrm{LN}_{CA}\big(h_1+\mathrm{CA}(h_1)\big)` with
:math:`h_1=\mathrm{LN}_{SA}(x_{inp}+\mathrm{SA}(x_{inp}))`, so

.. math::
    \frac{\partial x_{ffn}}{\partial x_{inp}} = J_{LN_{CA}}\,(I+J_{CA})\,J_{LN_{SA}}\,(I+J_{SA})
    \approx \frac{1}{\sigma_{SA}\,\sigma_{CA}}\,I \quad\text{at initialization}

(the attention branches are small next to their input, and each LayerNorm Jacobian is a projection divided by
the standard deviation of its input). Hence :math:`\partial s/\partial x_{inp}\approx(1+c)\,I` with
:math:`c=1/(\sigma_{SA}\sigma_{CA})\lesssim1` (encoder: :math:`c=1/\sigma_{SA}`), close to :math:`2I`, while
:math:`s\approx x_{inp}+x_{ffn}` has :math:`\sigma_s` close to 2. The identity path alone keeps only about
:math:`1/\sigma_s\approx 1/2` of the gradient; the inner path keeps about :math:`c/\sigma_s`, pointing the same way,
and the two add up to :math:`(1+c)/\sigma_s\approx1`. A Post-LN layer has no identity term and keeps about
:math:`1/(\sigma_{SA}\sigma_{CA}\sigma_s)`.

:func:`gradient_paths` measures each term with ``torch.autograd.grad`` on the layer's own forward graph (hooks
capture :math:`x_{inp}`, the inner LayerNorms, the FFN output and :math:`s`), and checks that the three add up to
the layer's input gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ..model import model_stacks
from .forward import layer_of, model_loss
from .jacobians import layer_norm_std

# variants whose last sum contains the layer input (the identity term of Eq. 8)
IDENTITY_VARIANTS = ("b2t",)
INNER_NORMS = (("self_attn_layer_norm", "SA-LN"), ("encoder_attn_layer_norm", "CA-LN"))


@dataclass
class GradientPaths:
    r"""Norms of the gradient on each path of Eq. 8 through one layer (all :math:`\lVert\cdot\rVert_F` over the
    batch)."""

    variant: str
    stack: str
    layer_index: int  # 0-based
    num_layers: int
    upstream: float  # ||g_y||: the gradient arriving at the layer output
    at_sum: float  # ||g_s||: after crossing the final LayerNorm
    identity: float  # ||g_s|| for B2T (Eq. 8's I), 0 for Post-LN
    through_norms: float  # ||(dx_ffn/dx_inp)^T g_s||
    through_ffn: float  # ||(dFFN(x_ffn)/dx_inp)^T g_s||
    total: float  # ||g_x||: the gradient the layer hands to its input
    cosine_identity_norms: float  # cos(g_s, inner path): 1 = the two paths add coherently
    norms_coefficient: float  # <inner path, g_s> / ||g_s||^2: the c of (1 + c) I
    sum_std: float  # sigma of s, mean over tokens
    inner_std: dict[str, float]  # sigma at the input of each inner LayerNorm, mean over tokens
    mismatch: float  # ||identity + inner + FFN - g_x|| / ||g_x||: zero up to rounding

    def ratio(self, path: str) -> float:
        """``path`` (``at_sum``, ``identity``, ``through_norms``, ``through_ffn``, ``total``) over ``upstream``."""
        return getattr(self, path) / self.upstream

    @property
    def has_identity(self) -> bool:
        return self.variant in IDENTITY_VARIANTS

    @property
    def predicted_factor(self) -> float:
        r"""The derivation's estimate of ``total / upstream``: :math:`(1+c)/\sigma_s` for B2T with
        :math:`c=1/\prod\sigma_{inner}`, and :math:`1/(\sigma_s\prod\sigma_{inner})` for Post-LN."""
        c = 1.0 / float(np.prod(list(self.inner_std.values())))
        return ((1.0 if self.has_identity else 0.0) + c) / self.sum_std


def gradient_paths(
    model: nn.Module, batch: dict, stack: str = "decoder", layer_index: int = -1, label_smoothing: float = 0.1
) -> GradientPaths:
    """Split the gradient through ``model.<stack>.layers[layer_index]`` into the paths of Eq. 8.

    For Post-LN and B2T layers. The model runs in eval mode (no dropout, so the FFN output captured at
    ``fc2`` is the branch itself); its mode is restored afterwards.
    """
    layer = layer_of(model, stack, layer_index)
    variant = layer.variant.name
    if getattr(layer, "final_layer_norm", None) is None or getattr(layer, "fc2", None) is None:
        raise ValueError(f"the {variant} layer has no final LayerNorm; Eq. 8's paths exist in Post-LN and B2T layers")
    norms = [(short, getattr(layer, name)) for name, short in INNER_NORMS if getattr(layer, name, None) is not None]
    seen: dict[str, list] = {"x": [], "s": [], "ffn": [], "y": []}
    seen.update({short: [] for short, _ in norms})

    def keep(key, value) -> None:  # hooks must return None, or they replace the module's output
        seen[key].append(value)

    handles = [
        layer.register_forward_pre_hook(lambda module, args: keep("x", args[0])),
        layer.final_layer_norm.register_forward_hook(lambda module, args, out: keep("s", args[0])),
        layer.fc2.register_forward_hook(lambda module, args, out: keep("ffn", out)),
        layer.register_forward_hook(lambda module, args, out: keep("y", out)),
    ]
    for short, norm in norms:
        handles.append(norm.register_forward_hook(lambda module, args, out, short=short: keep(short, (args[0], out))))
    was_training = model.training
    model.eval()
    try:
        loss = model_loss(model, batch, label_smoothing)
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    if any(len(values) != 1 for values in seen.values()):
        raise RuntimeError("the layer ran more than once (or not at all) in one forward pass")

    x, s, ffn_out, y = seen["x"][0], seen["s"][0], seen["ffn"][0], seen["y"][0]
    x_ffn = seen[norms[-1][0]][0][1]  # the output of the last inner LayerNorm is the FFN input
    g_y, g_s, g_x = torch.autograd.grad(loss, [y, s, x], retain_graph=True)
    (g_norms,) = torch.autograd.grad(x_ffn, x, g_s, retain_graph=True)  # inner path, Eq. 8's second term
    (g_ffn,) = torch.autograd.grad(ffn_out, x, g_s)  # FFN path, Eq. 8's third term
    g_identity = g_s if variant in IDENTITY_VARIANTS else torch.zeros_like(g_s)

    def norm(t: torch.Tensor) -> float:
        return float(t.detach().double().norm())

    flat_s, flat_n = g_s.double().flatten(), g_norms.double().flatten()
    return GradientPaths(
        variant=variant,
        stack=stack,
        layer_index=layer_index % len(model_stacks(model)[stack].layers),
        num_layers=len(model_stacks(model)[stack].layers),
        upstream=norm(g_y),
        at_sum=norm(g_s),
        identity=norm(g_identity),
        through_norms=norm(g_norms),
        through_ffn=norm(g_ffn),
        total=norm(g_x),
        cosine_identity_norms=float(torch.nn.functional.cosine_similarity(flat_s, flat_n, dim=0)),
        norms_coefficient=float(flat_n @ flat_s / (flat_s @ flat_s)),
        sum_std=float(layer_norm_std(s.detach()).mean()),
        inner_std={short: float(layer_norm_std(seen[short][0][0].detach()).mean()) for short, _ in norms},
        mismatch=norm(g_identity + g_norms + g_ffn - g_x) / norm(g_x),
    )
